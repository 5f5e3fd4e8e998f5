//! Role bindings as part of the policy bundle, with real processes and the CLI: a bundle
//! that lists them grants access with its version; a binding naming a queue the bundle does
//! not define is refused whole, by field; the diff shows a binding's change; a binding applied
//! alone with `tideway apply` is the next version (audited as both PolicyChanged and
//! AccessChanged); a rollback restores who may do what; a binding deleted alone is a
//! version too.

use tideway_api::client::Client;

use crate::common::*;

const ADMIN: &str = "tw_admin_t67_token";
const BOB: &str = "tw_bob_t67_token";

fn bundle(bob_queue: &str) -> String {
    format!(
        r#"apiVersion: tideway.dev/v1alpha1
kind: Policy
metadata: {{name: tenants}}
spec:
  queues:
  - {{apiVersion: tideway.dev/v1alpha1, kind: Queue, metadata: {{name: default}}, spec: {{tenant: default}}}}
  - {{apiVersion: tideway.dev/v1alpha1, kind: Queue, metadata: {{name: research}}, spec: {{tenant: research}}}}
  - {{apiVersion: tideway.dev/v1alpha1, kind: Queue, metadata: {{name: prod}}, spec: {{tenant: prod}}}}
  roleBindings:
  - apiVersion: tideway.dev/v1alpha1
    kind: RoleBinding
    metadata: {{name: ml-team}}
    spec: {{role: submitter, groups: [ml-team], queues: [{bob_queue}]}}
"#
    )
}

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

/// Whether bob may submit to `queue` (a 403 is "no"; anything else fails the test).
async fn bob_may_submit(bob: &Client, name: &str, queue: &str) -> bool {
    let body = workload_json(name)
        .replace(r#""queue":"default""#, &format!(r#""queue":"{queue}""#))
        .into_bytes();
    match bob.submit_raw(body, false, Some(name)).await {
        Ok(_) => true,
        Err(e) if e.to_string().contains("403") => false,
        Err(e) => panic!("{name} to {queue}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_in_the_bundle_are_versioned_diffed_and_rolled_back_with_it() {
    let files = tempfile::tempdir().unwrap();
    let home = files.path();
    let tokens = home.join("tokens.yaml");
    let hash = tideway_federation::server::auth::hash_token;
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n- {{subject: admin, groups: [system:admins], sha256: {}}}\n- {{subject: bob, groups: [ml-team], sha256: {}}}\n",
            hash(ADMIN),
            hash(BOB)
        ),
    )
    .unwrap();
    let tc = cluster_with_token(1, &["--auth-tokens", tokens.to_str().unwrap()], ADMIN).await;
    let addr = tc.c.addrs()[0].clone();
    let admin = Client::with_token(&addr, Some(ADMIN)).unwrap();
    let bob = Client::with_token(&addr, Some(BOB)).unwrap();
    let write = |name: &str, text: &str| {
        let p = home.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };

    // A binding to a queue the bundle does not define: refused whole, naming the field.
    let bad = write("bad.yaml", &bundle("ghost"));
    let (ok, out) = cli(&addr, ADMIN, &["policy", "apply", "-f", &bad], home);
    assert!(
        !ok && out.contains("spec.roleBindings[0].spec.queues[0]"),
        "{out}"
    );
    assert_eq!(admin.policy_history().await.unwrap().current, 0);
    assert!(!bob_may_submit(&bob, "early", "default").await);

    // Version 1 grants bob the research queue.
    let v1 = write("v1.yaml", &bundle("research"));
    let (ok, out) = cli(&addr, ADMIN, &["policy", "apply", "-f", &v1], home);
    assert!(ok && out.contains("as version 1"), "{out}");
    assert!(bob_may_submit(&bob, "r-1", "research").await);
    assert!(!bob_may_submit(&bob, "p-1", "prod").await);

    // The diff of a candidate names the binding's field.
    let v2 = write("v2.yaml", &bundle("prod"));
    let (ok, out) = cli(&addr, ADMIN, &["policy", "diff", "-f", &v2], home);
    assert!(
        ok && out.contains("spec.roleBindings[ml-team].spec.queues[0]"),
        "{out}"
    );

    // The same binding applied alone, as before bundles had bindings: the next version.
    let lone = write(
        "binding.yaml",
        "apiVersion: tideway.dev/v1alpha1\nkind: RoleBinding\nmetadata: {name: ml-team}\nspec: {role: submitter, groups: [ml-team], queues: [prod]}\n",
    );
    let (ok, out) = cli(&addr, ADMIN, &["apply", "-f", &lone], home);
    assert!(ok && out.contains("rolebinding/ml-team"), "{out}");
    let h = admin.policy_history().await.unwrap();
    assert_eq!(h.current, 2, "{h:?}");
    let v = admin.policy_version("2").await.unwrap();
    assert_eq!(
        v.status.and_then(|s| s.message).as_deref(),
        Some("role binding 'ml-team' applied")
    );
    // It changed who may do what and the versioned rules: the trail records both, in the
    // same log entry, the policy change carrying version 2.
    let trail = admin.events(&[]).await.unwrap().items;
    let access = trail
        .iter()
        .rev()
        .find(|e| e.kind == tideway_api::audit::AuditKind::AccessChanged)
        .unwrap_or_else(|| panic!("no AccessChanged: {trail:#?}"));
    let policy = trail
        .iter()
        .rev()
        .find(|e| e.kind == tideway_api::audit::AuditKind::PolicyChanged)
        .unwrap_or_else(|| panic!("no PolicyChanged: {trail:#?}"));
    assert_eq!(policy.index, access.index, "{trail:#?}");
    assert_eq!(policy.policy_version, 2, "{policy:?}");
    assert!(
        policy.evidence.contains("role binding 'ml-team'"),
        "{policy:?}"
    );
    assert!(bob_may_submit(&bob, "p-2", "prod").await);
    assert!(!bob_may_submit(&bob, "r-2", "research").await);
    let (ok, out) = cli(
        &addr,
        ADMIN,
        &["policy", "diff", "--from", "1", "--to", "2"],
        home,
    );
    assert!(
        ok && out.contains("spec.roleBindings[ml-team].spec.queues[0]")
            && out.contains(": 1 changes"),
        "{out}"
    );

    // One command restores the rules and who may use them.
    let (ok, out) = cli(&addr, ADMIN, &["policy", "rollback", "--to", "1"], home);
    assert!(ok && out.contains("as version 3"), "{out}");
    assert!(bob_may_submit(&bob, "r-3", "research").await);
    assert!(!bob_may_submit(&bob, "p-3", "prod").await);

    // Deleted alone: the next version, and the access is gone.
    let (ok, out) = cli(&addr, ADMIN, &["delete-rolebinding", "ml-team"], home);
    assert!(ok, "{out}");
    assert_eq!(admin.policy_history().await.unwrap().current, 4);
    assert!(!bob_may_submit(&bob, "r-4", "research").await);
    let v4 = admin.policy_version("4").await.unwrap();
    assert_eq!(v4.spec.role_bindings, Some(vec![]), "{v4:?}");
    drop(tc);
}
