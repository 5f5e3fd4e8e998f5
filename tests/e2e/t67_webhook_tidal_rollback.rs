//! Webhooks for the leader's own acts, on `tideway dev`: a receiver subscribed to tidal
//! transitions and policy rollbacks gets, HMAC-signed, the automatic rollback of a scoped
//! candidate that starves inference work (naming the trigger and its measured value), and
//! the day -> night transition when the pinned, scaled clock crosses 22:00 Berlin time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use tideway_api::audit::AuditKind;
use tideway_api::client::Client;
use tideway_api::webhook::{SIGNATURE_HEADER, WebhookEvent};
use tideway_api::{Policy, Queue, RollbackTrigger, Rollout, RolloutScope};
use tideway_federation::dispatcher::webhooks::signature;

const SECRET: &str = "t67-secret";

async fn receiver(got: Arc<Mutex<Vec<(WebhookEvent, bool)>>>) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let got = got.clone();
            async move {
                let signed = headers
                    .get(SIGNATURE_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v == signature(SECRET.as_bytes(), &body));
                let Ok(ev) = serde_json::from_slice::<WebhookEvent>(&body) else {
                    return StatusCode::BAD_REQUEST;
                };
                if let Ok(mut g) = got.lock() {
                    g.push((ev, signed));
                }
                StatusCode::OK
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

fn serving(guaranteed: u32) -> Queue {
    tideway_api::decode_yaml(
        format!(
            "apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {{name: serving}}\nspec:\n  tenant: platform\n  classes: [inference]\n  quotas:\n  - {{flavor: L40S, guaranteed: {guaranteed}, max: {guaranteed}}}\n"
        )
        .as_bytes(),
    )
    .expect("queue")
}

/// dev's current bundle (its day/night schedule included) with a serving queue.
async fn with_serving(c: &Client, guaranteed: u32) -> Policy {
    let mut p = c.policy_version("current").await.expect("current policy");
    p.status = None;
    p.spec.rollout = None;
    p.spec.queues.retain(|q| q.metadata.name != "serving");
    p.spec.queues.push(serving(guaranteed));
    p
}

fn received(got: &Mutex<Vec<(WebhookEvent, bool)>>, kind: AuditKind) -> Vec<(WebhookEvent, bool)> {
    got.lock()
        .map(|g| g.iter().filter(|(e, _)| e.kind == kind).cloned().collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tidal_transitions_and_automatic_rollbacks_reach_the_webhook_signed() {
    let _guard = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // A Monday, three virtual minutes before 22:00 Berlin; at 5x, 36 s of real time for dev
    // to start and for the rollout to be rolled back in the day window.
    let dev = crate::common::DevProcess::start(
        dir.path(),
        &[
            "--time-scale",
            "5",
            "--start-at",
            "2026-01-05T21:57:00+01:00",
        ],
        &[("T67_HOOK_SECRET", SECRET)],
    );
    let token = dev.token().await;
    let c = Client::with_token(&dev.addr, Some(&token)).expect("client");
    let got = Arc::new(Mutex::new(Vec::new()));
    let url = receiver(got.clone()).await;
    let hook = format!(
        "apiVersion: tideway.dev/v1alpha1\nkind: Webhook\nmetadata: {{name: ops}}\nspec:\n  url: {url}\n  events: [TidalTransition, PolicyRolledBack]\n  secretRef: {{env: T67_HOOK_SECRET}}\n"
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    while c.apply_raw(hook.clone().into_bytes(), true).await.is_err() {
        assert!(Instant::now() < deadline, "dev never accepted the webhook");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // A serving queue, then a candidate that takes its quota away, scoped to it, with a
    // trigger on unserved inference demand; an inference job starves and the leader rolls
    // the candidate back.
    let base = with_serving(&c, 4).await;
    let v = c
        .policy_apply_raw(serde_json::to_vec(&base).expect("json"), false)
        .await
        .expect("base applied");
    let base_version = v.version().expect("version");
    let mut cand = with_serving(&c, 0).await;
    cand.spec.rollout = Some(Rollout {
        scope: RolloutScope {
            queues: vec!["serving".into()],
            ..Default::default()
        },
        triggers: vec![RollbackTrigger::UnservedInference { seconds: 5 }],
    });
    c.policy_apply_raw(serde_json::to_vec(&cand).expect("json"), false)
        .await
        .expect("candidate applied");
    c.submit_raw(
        br#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"infer-1"},"spec":{"queue":"serving","class":"inference","podSets":[{"name":"s","count":1,"gpusPerPod":1,"flavor":"L40S"}]}}"#.to_vec(),
        false,
        Some("infer-1"),
    )
    .await
    .expect("submit");

    let deadline = Instant::now() + Duration::from_secs(60);
    let rollback = loop {
        if let Some(r) = received(&got, AuditKind::PolicyRolledBack).first() {
            break r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no PolicyRolledBack delivered; events: {:?}\ndev log:\n{}",
            c.events(&[("kind", "PolicyRolledBack".into())]).await.ok(),
            dev.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (ev, signed) = rollback;
    assert!(signed, "signed with the webhook's secret: {ev:?}");
    assert_eq!(ev.subject.actor, "system:leader", "{ev:?}");
    assert!(
        ev.details.contains("unservedInference")
            && ev.details.contains("measured")
            && ev
                .details
                .contains(&format!("restores version {base_version}")),
        "{ev:?}"
    );

    // The tidal transition at 22:00 Berlin (21:00 UTC).
    let deadline = Instant::now() + Duration::from_secs(90);
    let transition = loop {
        if let Some(t) = received(&got, AuditKind::TidalTransition).first() {
            break t.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no TidalTransition delivered; events: {:?}\ndev log:\n{}",
            c.events(&[("kind", "TidalTransition".into())]).await.ok(),
            dev.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let (ev, signed) = transition;
    assert!(signed, "signed with the webhook's secret: {ev:?}");
    assert_eq!(ev.subject.actor, "system:leader", "{ev:?}");
    assert!(
        ev.details
            .starts_with("schedule 'day-night': window day -> night at 2026-01-05T21:00:00+00:00"),
        "{ev:?}"
    );
    // Only the kinds asked for, each once (the receiver always answered 200).
    let all = got.lock().expect("lock").clone();
    assert!(
        all.iter().all(|(e, _)| matches!(
            e.kind,
            AuditKind::TidalTransition | AuditKind::PolicyRolledBack
        )),
        "{all:?}"
    );
    let ids: std::collections::BTreeSet<u64> = all.iter().map(|(e, _)| e.id).collect();
    assert_eq!(ids.len(), all.len(), "delivered once each: {all:?}");
}
