//! Workload names are scoped per tenant and Idempotency-Keys per subject, with real
//! processes (issue 58, item 4): a submitter in queue `qa` submits the name and the key bob
//! used in `qb` and gets 201, not bob's 409 or 422; each reads its own workload by that name;
//! a watch of a workload of bob's by name answers alice 404, as does its UID; an admin who
//! reads both tenants is asked which one (400 naming `query:tenant`) and gets each with
//! `?tenant=`. Within a tenant a name stays unique (409, naming only the plain name).

use reqwest::StatusCode;
use serde_json::Value;
use tideway_api::client::{Client, ListQuery};

use crate::common::*;

const ADMIN: &str = "tw_admin_t102_token";
const ALICE: &str = "tw_alice_t102_token";
const BOB: &str = "tw_bob_t102_token";

fn sha256(s: &str) -> String {
    tideway_federation::server::auth::hash_token(s)
}

fn workload(name: &str, queue: &str) -> Vec<u8> {
    workload_json(name)
        .replace(r#""queue":"default""#, &format!(r#""queue":"{queue}""#))
        .into_bytes()
}

/// A raw request: the status and the JSON body, whatever the status.
async fn call(req: reqwest::RequestBuilder, token: &str) -> (StatusCode, Value) {
    let resp = req.bearer_auth(token).send().await.expect("send");
    let status = resp.status();
    let body = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

async fn submit(
    http: &reqwest::Client,
    addr: &str,
    token: &str,
    body: Vec<u8>,
    key: &str,
) -> (StatusCode, Value) {
    let req = http
        .post(format!("http://{addr}/v1/workloads"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body);
    call(req, token).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_names_and_keys_are_not_in_the_callers_space() {
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n- {{subject: admin, groups: [system:admins], sha256: {}}}\n- {{subject: alice, groups: [\"queue:qa\"], sha256: {}}}\n- {{subject: bob, groups: [\"queue:qb\"], sha256: {}}}\n",
            sha256(ADMIN),
            sha256(ALICE),
            sha256(BOB)
        ),
    )
    .unwrap();
    let tc = cluster_with_token(1, &["--auth-tokens", tokens.to_str().unwrap()], ADMIN).await;
    let addr = tc.c.addrs()[0].clone();
    let admin = Client::with_token(&addr, Some(ADMIN)).unwrap();
    let alice = Client::with_token(&addr, Some(ALICE)).unwrap();
    let bob = Client::with_token(&addr, Some(BOB)).unwrap();
    let http = reqwest::Client::new();
    for (q, tenant) in [("qa", "team-a"), ("qb", "team-b")] {
        let doc = format!(
            "apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {q}}}\nspec: {{tenant: {tenant}}}\n"
        );
        admin.apply_raw(doc.into_bytes(), true).await.unwrap();
    }

    // Bob's workload, and one more that only bob has.
    let (status, bobs) = submit(
        &http,
        &addr,
        BOB,
        workload("bobs-secret-job", "qb"),
        "key-1",
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{bobs}");
    let (status, only_bobs) = submit(&http, &addr, BOB, workload("bobs-only", "qb"), "key-2").await;
    assert_eq!(status, StatusCode::CREATED, "{only_bobs}");

    // Alice submits bob's name with bob's key into her queue: a workload of her own.
    let (status, hers) = submit(
        &http,
        &addr,
        ALICE,
        workload("bobs-secret-job", "qa"),
        "key-1",
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{hers}");
    assert_eq!(hers["metadata"]["name"], "bobs-secret-job");
    assert_eq!(hers["spec"]["queue"], "qa");
    assert_eq!(hers["spec"]["user"], "alice");
    assert_ne!(hers["metadata"]["uid"], bobs["metadata"]["uid"]);
    // Her retry is a replay of hers; her key with other content is refused naming her own
    // workload only.
    let (status, again) = submit(
        &http,
        &addr,
        ALICE,
        workload("bobs-secret-job", "qa"),
        "key-1",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["metadata"]["uid"], hers["metadata"]["uid"]);
    let (status, reused) = submit(&http, &addr, ALICE, workload("other", "qa"), "key-1").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reused}");
    let text = reused.to_string();
    assert!(
        text.contains("'key-1'") && text.contains("bobs-secret-job") && !text.contains("alice\\n"),
        "{text}"
    );
    // Bob's key-2 is a fresh key for alice too.
    let (status, fresh) = submit(&http, &addr, ALICE, workload("alices-two", "qa"), "key-2").await;
    assert_eq!(status, StatusCode::CREATED, "{fresh}");

    // Within a tenant a name is still unique, and the refusal names only the plain name.
    let (status, taken) = submit(
        &http,
        &addr,
        BOB,
        workload("bobs-secret-job", "qb"),
        "key-3",
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{taken}");
    let text = taken.to_string();
    assert!(
        text.contains("'bobs-secret-job'") && !text.contains("team-b/"),
        "{text}"
    );

    // Each reads its own workload by the name.
    let a = alice.get("bobs-secret-job", false).await.unwrap();
    assert_eq!(
        (a.metadata.name.as_str(), a.spec.queue.as_str()),
        ("bobs-secret-job", "qa")
    );
    let b = bob.get("bobs-secret-job", false).await.unwrap();
    assert_eq!(
        (b.metadata.name.as_str(), b.spec.queue.as_str()),
        ("bobs-secret-job", "qb")
    );

    // Bob's other workload is not in alice's space: get, watch by name and by UID answer 404
    // (a watch used to answer 200 with no items).
    assert!(
        alice
            .get("bobs-only", false)
            .await
            .unwrap_err()
            .is_not_found()
    );
    let e = alice
        .watch(Some("bobs-only"), None, 0, 1)
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let uid = only_bobs["metadata"]["uid"].as_str().unwrap().to_string();
    let e = alice.watch(Some(&uid), None, 0, 1).await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    // Bob's own watch by the name sees his workload.
    let page = bob.watch(Some("bobs-only"), None, 0, 1).await.unwrap();
    assert_eq!(page.items.len(), 1, "{page:?}");
    assert_eq!(page.items[0].name, "bobs-only");
    let page = alice
        .watch(Some("bobs-secret-job"), None, 0, 1)
        .await
        .unwrap();
    assert!(
        page.items
            .iter()
            .all(|e| e.object.as_ref().map(|w| w.spec.queue.as_str()) == Some("qa")),
        "{page:?}"
    );

    // Lists: alice sees hers only; the admin sees both, each under its plain name.
    let q = ListQuery {
        limit: Some(100),
        ..Default::default()
    };
    let mut mine: Vec<String> = alice
        .list(&q)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|w| w.metadata.name)
        .collect();
    mine.sort();
    assert_eq!(mine, vec!["alices-two", "bobs-secret-job"]);
    let all = admin.list(&q).await.unwrap().items;
    let mut same: Vec<&str> = all
        .iter()
        .filter(|w| w.metadata.name == "bobs-secret-job")
        .map(|w| w.spec.queue.as_str())
        .collect();
    same.sort();
    assert_eq!(same, vec!["qa", "qb"]);

    // The admin reads both tenants: a bare name is ambiguous, `?tenant=` says which.
    let url = format!("http://{addr}/v1/workloads/bobs-secret-job");
    let (status, problem) = call(http.get(&url), ADMIN).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert!(problem.to_string().contains("query:tenant"), "{problem}");
    let (status, w) = call(http.get(format!("{url}?tenant=team-b")), ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{w}");
    assert_eq!(
        (&w["spec"]["queue"], &w["metadata"]["name"]),
        (&Value::from("qb"), &Value::from("bobs-secret-job"))
    );
    let (status, _) = call(http.get(format!("{url}?tenant=team-c")), ADMIN).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Alice cancels her workload by the name; bob's stays as it was.
    let cancelled = alice.cancel("bobs-secret-job").await.unwrap();
    assert_eq!(cancelled.spec.queue, "qa");
    assert_eq!(cancelled.metadata.name, "bobs-secret-job");
    let b = bob.get("bobs-secret-job", false).await.unwrap();
    assert_ne!(
        b.status.map(|s| s.phase.as_str().to_string()).as_deref(),
        Some("Cancelled")
    );
    assert!(alice.cancel("bobs-only").await.unwrap_err().is_not_found());

    // Her records name her workload by its plain name, and none of bob's.
    let ev = alice.events(&[]).await.unwrap();
    assert!(
        ev.items
            .iter()
            .filter_map(|e| e.workload.as_deref())
            .all(|n| n == "bobs-secret-job" || n == "alices-two"),
        "{:?}",
        ev.items
    );
    assert!(
        ev.items
            .iter()
            .all(|e| e.workload.is_none() || e.queue.as_deref() == Some("qa")),
        "{:?}",
        ev.items
    );
    assert!(ev.items.iter().any(|e| e.workload.is_some()));
}
