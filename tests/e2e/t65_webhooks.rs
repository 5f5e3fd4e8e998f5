//! Webhooks on real processes: a receiver inside the test gets the policy changes it asked
//! for, HMAC-signed; it refuses the first attempt (500) and gets the event again; the leader
//! is killed with SIGKILL while events are being delivered and the new leader goes on from
//! the replicated cursor. Deduplicated by event id, nothing is missing and nothing extra
//! arrives; the delivery state shows the failure.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use tideway_api::audit::AuditKind;
use tideway_api::client::Client;
use tideway_api::webhook::{SIGNATURE_HEADER, WebhookEvent};
use tideway_federation::dispatcher::webhooks::signature;

use crate::common::*;

const SECRET: &str = "t65-shared-secret";

#[derive(Default)]
struct Received {
    /// Every attempt: (event id, kind, signature valid, answered 2xx).
    attempts: Vec<(u64, AuditKind, bool, bool)>,
}

async fn receiver(received: Arc<Mutex<Received>>, refuse_first: Arc<AtomicBool>) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let received = received.clone();
            let refuse_first = refuse_first.clone();
            async move {
                let signed = headers
                    .get(SIGNATURE_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v == signature(SECRET.as_bytes(), &body));
                let Ok(ev) = serde_json::from_slice::<WebhookEvent>(&body) else {
                    return StatusCode::BAD_REQUEST;
                };
                let ok = !refuse_first.swap(false, Ordering::SeqCst);
                if let Ok(mut r) = received.lock() {
                    r.attempts.push((ev.id, ev.kind, signed, ok));
                }
                if ok {
                    StatusCode::NO_CONTENT
                } else {
                    StatusCode::INTERNAL_SERVER_ERROR
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/hook")
}

fn queue_doc(name: &str) -> Vec<u8> {
    format!(
        "apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec:\n  tenant: t65\n"
    )
    .into_bytes()
}

/// Applies a queue through any node that answers, retrying through a failover.
async fn apply_queue(clients: &[Client], name: &str, deadline: Instant) {
    let mut i = 0usize;
    loop {
        if clients[i % clients.len()]
            .apply_raw(queue_doc(name), true)
            .await
            .is_ok()
        {
            return;
        }
        assert!(Instant::now() < deadline, "no node applied {name}");
        i += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn delivered(r: &Mutex<Received>) -> BTreeSet<u64> {
    r.lock()
        .map(|r| r.attempts.iter().filter(|a| a.3).map(|a| a.0).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_retried_and_survive_a_leader_kill() {
    let mut tc = cluster(3, &[]).await;
    let received = Arc::new(Mutex::new(Received::default()));
    let url = receiver(received.clone(), Arc::new(AtomicBool::new(true))).await;
    let secret = tc.c.dir().join("hook-secret");
    std::fs::write(&secret, format!("{SECRET}\n")).expect("secret file");
    let hook = tc.c.dir().join("hook.yaml");
    std::fs::write(
        &hook,
        format!(
            "apiVersion: tideway.dev/v1alpha1\nkind: Webhook\nmetadata: {{name: ops}}\nspec:\n  url: {url}\n  events: [PolicyChanged, Preempted, TidalTransition, PolicyRolledBack]\n  secretRef: {{file: {}}}\n",
            secret.display()
        ),
    )
    .expect("hook file");
    let addrs = tc.c.addrs();
    let (ok, out, err) = tideway(&addrs[0], &["apply", "-f", hook.to_str().expect("path")]);
    assert!(ok, "{out}{err}");
    let clients: Vec<Client> = addrs
        .iter()
        .map(|a| Client::new(a).expect("client"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(45);

    for i in 0..4 {
        apply_queue(&clients, &format!("q-{i}"), deadline).await;
    }
    // The first attempt was refused; wait until something got through after it.
    while delivered(&received).is_empty() {
        assert!(Instant::now() < deadline, "nothing delivered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader =
        tc.c.wait_for_leader(Duration::from_secs(10))
            .await
            .expect("leader");
    tc.c.kill9(leader).expect("kill -9");
    let survivors: Vec<Client> = (1..=3u64)
        .filter(|id| *id != leader)
        .map(|id| tc.c.client(id).expect("client"))
        .collect();
    for i in 4..8 {
        apply_queue(&survivors, &format!("q-{i}"), deadline).await;
    }
    tc.c.restart(leader).await.expect("restart");

    // Every PolicyChanged record after the webhook's creation must arrive.
    let events = survivors[0]
        .events(&[("kind", "PolicyChanged".to_string())])
        .await
        .expect("events");
    let want: BTreeSet<u64> = events
        .items
        .iter()
        .filter(|e| e.queue.as_deref().is_some_and(|q| q.starts_with("q-")))
        .map(|e| e.seq)
        .collect();
    assert_eq!(want.len(), 8, "{:?}", events.items);
    loop {
        let got = delivered(&received);
        if want.is_subset(&got) {
            break;
        }
        let tail = std::fs::read_dir(tc.c.dir())
            .map(|d| d.count())
            .unwrap_or(0);
        assert!(
            Instant::now() < deadline,
            "missing {:?} (got {got:?}; {tail} files in the cluster dir)",
            want.difference(&got).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let attempts = received.lock().expect("lock").attempts.clone();
    assert!(
        attempts.iter().all(|a| a.2),
        "every attempt is signed: {attempts:?}"
    );
    assert!(
        attempts.iter().all(|a| a.1 == AuditKind::PolicyChanged),
        "only the kinds asked for: {attempts:?}"
    );
    let first = attempts[0];
    assert!(!first.3, "the first attempt was refused");
    assert!(
        attempts[1..].iter().any(|a| a.0 == first.0 && a.3),
        "the refused event came again and was taken: {attempts:?}"
    );
    let got = delivered(&received);
    assert_eq!(got, want, "nothing extra after dedupe");

    // The delivery state shows the failure and the last delivery.
    loop {
        let hooks = survivors[0].webhooks().await.expect("webhooks");
        let st = hooks.items[0].status.clone().expect("status");
        assert!(st.total_failures >= 1, "{st:?}");
        if st.last_delivered == want.last().copied() {
            break;
        }
        assert!(Instant::now() < deadline, "the cursor stays behind: {st:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, out, err) = tideway(&addrs[0], &["webhooks"]);
    assert!(
        ok && out.contains("ops") && out.contains("HTTP 500"),
        "{out}{err}"
    );
    let (ok, out, err) = tideway(&addrs[0], &["webhooks", "--delete", "ops"]);
    assert!(ok && out.contains("webhook/ops deleted"), "{out}{err}");
    assert!(
        survivors[0]
            .webhooks()
            .await
            .expect("webhooks")
            .items
            .is_empty()
    );
    let (ok, _, err) = tideway(&addrs[0], &["webhooks", "--delete", "ops"]);
    assert!(!ok && err.contains("not found"), "{err}");
}
