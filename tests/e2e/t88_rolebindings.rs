//! Role bindings in the replicated state, with real processes and the CLI: a credential
//! without a binding may do nothing; an admin binds a group to a submitter role with
//! `tideway apply -f`; the submitter then submits to its queue only, and reads only its own
//! queue's workloads (another tenant's is a 404 on get, explain and cancel, and absent from
//! list and events); revoking the binding revokes the access; refusals write nothing.

use tideway_api::client::{Client, ListQuery};

use crate::common::*;

const ADMIN: &str = "tw_admin_t88_token";
const BOB: &str = "tw_bob_t88_token";

fn sha256(s: &str) -> String {
    tideway_federation::server::auth::hash_token(s)
}

fn workload(name: &str, queue: &str) -> Vec<u8> {
    workload_json(name)
        .replace(r#""queue":"default""#, &format!(r#""queue":"{queue}""#))
        .into_bytes()
}

/// Runs the CLI with an explicit token and no configuration file.
fn cli(addr: &str, token: &str, args: &[&str], home: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new(BIN)
        .args(args)
        .env("TIDEWAY_ADDR", addr)
        .env("TIDEWAY_CONFIG", home.join("no-config"))
        .env("TIDEWAY_TOKEN", token)
        .output()
        .expect("run tideway");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn names(c: &Client) -> Vec<String> {
    let q = ListQuery {
        limit: Some(100),
        ..Default::default()
    };
    c.list(&q)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|w| w.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_from_apply_grant_scoped_roles_and_tenants_see_only_their_queues() {
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n- {{subject: admin, groups: [system:admins], sha256: {}}}\n- {{subject: bob, groups: [ml-team], sha256: {}}}\n",
            sha256(ADMIN),
            sha256(BOB)
        ),
    )
    .unwrap();
    let tc = cluster_with_token(1, &["--auth-tokens", tokens.to_str().unwrap()], ADMIN).await;
    let addr = tc.c.addrs()[0].clone();
    let home = files.path();
    let admin = Client::with_token(&addr, Some(ADMIN)).unwrap();
    let bob = Client::with_token(&addr, Some(BOB)).unwrap();

    // Queues for two tenants, and one workload of the other tenant.
    for q in ["research", "prod"] {
        let doc = files.path().join(format!("{q}.yaml"));
        std::fs::write(
            &doc,
            format!(
                "apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {q}}}\nspec: {{tenant: {q}}}\n"
            ),
        )
        .unwrap();
        let (ok, out) = cli(&addr, ADMIN, &["apply", "-f", doc.to_str().unwrap()], home);
        assert!(ok, "{out}");
    }
    admin
        .submit_raw(workload("prod-secret", "prod"), false, None)
        .await
        .unwrap();

    // Bob is authenticated but bound to nothing: 403 on reads and writes, nothing written.
    let before = crate::common::settled_applied(&admin).await;
    let e = bob.list(&ListQuery::default()).await.unwrap_err();
    assert!(e.to_string().contains("403"), "{e}");
    let e = bob
        .submit_raw(workload("early", "research"), false, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("403"), "{e}");
    let binding = files.path().join("binding.yaml");
    std::fs::write(
        &binding,
        "apiVersion: tideway.dev/v1alpha1\nkind: RoleBinding\nmetadata: {name: ml-team}\nspec:\n  role: submitter\n  groups: [ml-team]\n  queues: [research]\n",
    )
    .unwrap();
    let (ok, out) = cli(
        &addr,
        BOB,
        &["apply", "-f", binding.to_str().unwrap()],
        home,
    );
    assert!(
        !ok && out.contains("403"),
        "a non-admin binds itself: {out}"
    );
    assert_eq!(
        admin.cluster_status().await.unwrap().last_applied,
        before,
        "a refusal wrote"
    );

    // An invalid binding is refused naming the field.
    let bad = files.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: tideway.dev/v1alpha1\nkind: RoleBinding\nmetadata: {name: bad}\nspec: {role: submitter, groups: [x]}\n",
    )
    .unwrap();
    let (ok, out) = cli(&addr, ADMIN, &["apply", "-f", bad.to_str().unwrap()], home);
    assert!(!ok && out.contains("spec.queues"), "{out}");

    // The admin binds the group; the CLI lists the binding.
    let (ok, out) = cli(
        &addr,
        ADMIN,
        &["apply", "-f", binding.to_str().unwrap()],
        home,
    );
    assert!(ok && out.contains("rolebinding/ml-team created"), "{out}");
    let (ok, out) = cli(&addr, ADMIN, &["rolebindings"], home);
    assert!(ok, "{out}");
    let row = out.lines().find(|l| l.starts_with("ml-team")).unwrap_or("");
    assert!(
        row.contains("submitter") && row.contains("research"),
        "{out}"
    );

    // Bob submits to his queue; not to another.
    let (w, _) = bob
        .submit_raw(workload("bobs-job", "research"), false, None)
        .await
        .unwrap();
    assert_eq!(w.spec.user.as_deref(), Some("bob"));
    let before = crate::common::settled_applied(&admin).await;
    let e = bob
        .submit_raw(workload("bobs-prod", "prod"), false, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("403"), "{e}");
    assert_eq!(admin.cluster_status().await.unwrap().last_applied, before);

    // Tenant reads: bob sees his queue only; the other tenant's workload is a 404 (not 403,
    // so that its name does not leak) on get, explain and cancel; its records are not in
    // his events. The admin sees both.
    assert_eq!(names(&bob).await, vec!["bobs-job"]);
    let mut all = names(&admin).await;
    all.sort();
    assert_eq!(all, vec!["bobs-job", "prod-secret"]);
    assert!(
        bob.get("prod-secret", false)
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert!(bob.explain("prod-secret").await.unwrap_err().is_not_found());
    assert!(bob.cancel("prod-secret").await.unwrap_err().is_not_found());
    assert!(bob.get("bobs-job", false).await.is_ok());
    let (ok, out) = cli(&addr, BOB, &["get", "prod-secret"], home);
    assert!(!ok && out.contains("404"), "{out}");
    let ev = bob.events(&[]).await.unwrap();
    assert!(
        ev.items
            .iter()
            .all(|e| e.workload.as_deref() != Some("prod-secret")),
        "{:?}",
        ev.items
    );
    assert!(
        ev.items
            .iter()
            .any(|e| e.workload.as_deref() == Some("bobs-job"))
    );
    let ev = admin
        .events(&[("workload", "prod-secret".into())])
        .await
        .unwrap();
    assert_eq!(ev.items.len(), 1, "the admin reads every record");
    let access = admin
        .events(&[("kind", "AccessChanged".into())])
        .await
        .unwrap();
    assert_eq!(access.items.len(), 1);
    assert_eq!(access.items[0].actor, "admin");
    // A submitter does not read the bindings.
    let (ok, out) = cli(&addr, BOB, &["rolebindings"], home);
    assert!(!ok && out.contains("403"), "{out}");

    // Revoking the binding revokes the access.
    let (ok, out) = cli(&addr, ADMIN, &["delete-rolebinding", "ml-team"], home);
    assert!(ok, "{out}");
    let e = bob.get("bobs-job", false).await.unwrap_err();
    assert!(e.to_string().contains("403"), "{e}");
    let (ok, out) = cli(&addr, ADMIN, &["delete-rolebinding", "ml-team"], home);
    assert!(!ok && out.contains("404"), "{out}");
    drop(tc);
}

/// Rate limits per subject: a subject past its burst gets 429 problem+json with
/// `Retry-After`, another subject is not affected, and the server logs each denied request
/// with the subject and the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_past_its_rate_limit_gets_429_with_retry_after_and_is_logged() {
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n- {{subject: admin, groups: [system:admins], sha256: {}}}\n- {{subject: bob, groups: [system:viewers], sha256: {}}}\n",
            sha256(ADMIN),
            sha256(BOB)
        ),
    )
    .unwrap();
    let tc = cluster_with_token(
        1,
        &[
            "--auth-tokens",
            tokens.to_str().unwrap(),
            "--rate-limit",
            "0.2",
            "--rate-burst",
            "5",
        ],
        ADMIN,
    )
    .await;
    let addr = tc.c.addrs()[0].clone();
    let http = reqwest::Client::new();
    let get = |token: &'static str| {
        http.get(format!("http://{addr}/v1/queues"))
            .bearer_auth(token)
            .send()
    };
    let mut codes = Vec::new();
    for _ in 0..7 {
        codes.push(get(BOB).await.unwrap().status().as_u16());
    }
    assert_eq!(codes[..5], [200; 5], "the burst passes: {codes:?}");
    assert_eq!(codes[5..], [429, 429], "{codes:?}");
    let resp = get(BOB).await.unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=5).contains(&retry), "{retry}");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["status"], 429, "{body}");
    // The harness's own requests used some of the admin's budget; one more still passes.
    let admin_code = get(ADMIN).await.unwrap().status().as_u16();
    assert_eq!(admin_code, 200, "another subject has its own bucket");

    let log = log_with(
        &tc.c.dir().join("node-1.log"),
        &["request denied: rate limited"],
    )
    .await;
    let denied = log
        .lines()
        .find(|l| l.contains("request denied: rate limited"))
        .unwrap_or_else(|| panic!("no denial logged:\n{log}"));
    assert!(
        denied.contains("subject") && denied.contains("bob") && denied.contains("/v1/queues"),
        "{denied}"
    );
    drop(tc);
}

/// `--audit-retain N`: the leader compacts the audit trail down to N records (the last of
/// which says what was dropped), and it stays there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_trail_is_compacted_to_its_retention() {
    let tc = cluster(1, &["--audit-retain", "5", "--retain-terminal", "1"]).await;
    let addr = tc.c.addrs()[0].clone();
    let client = Client::new(&addr).unwrap();
    for i in 0..8 {
        client
            .submit_raw(workload_json(&format!("w{i}")).into_bytes(), false, None)
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    let events = loop {
        let ev = client.events(&[]).await.unwrap().items;
        if ev.len() <= 5 {
            break ev;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the trail was not compacted: {} records",
            ev.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    let last = events.last().unwrap();
    assert!(
        last.evidence.contains("audit retention"),
        "the compaction leaves its own record: {last:?}"
    );
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    // At its limit the trail stays put: no compaction per pass.
    let at = client.cluster_status().await.unwrap().last_applied;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(client.cluster_status().await.unwrap().last_applied, at);
    assert_eq!(client.events(&[]).await.unwrap().items.len(), events.len());
    drop(tc);
}
