//! `tideway dev` on scaled time: a webhook gets the preemption notice of low work evicted
//! for a high-priority gang, signed; and the live usage report adds up for every queue and
//! flavor (used + idle = capacity x time, guaranteed + borrowed = used).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use tideway_api::audit::AuditKind;
use tideway_api::client::Client;
use tideway_api::webhook::{SIGNATURE_HEADER, WebhookEvent};
use tideway_federation::dispatcher::webhooks::signature;

const SECRET: &str = "t66-secret";

fn job(name: &str, class: &str, pods: u32) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"86400"}}}},"spec":{{"queue":"default","class":"training","priorityClass":"{class}","podSets":[{{"name":"w","count":{pods},"gpusPerPod":8,"flavor":"H100"}}],"gang":{{"minCount":{pods}}},"topology":{{"required":"rack"}}}}}}"#
    )
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_notice_reaches_the_webhook_and_the_usage_report_adds_up() {
    let _guard = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = crate::common::DevProcess::start(
        dir.path(),
        &[
            "--time-scale",
            "60",
            "--start-at",
            "2026-01-05T12:00:00+01:00",
        ],
        &[("T66_HOOK_SECRET", SECRET)],
    );
    let (addr, log_path) = (dev.addr.clone(), dev.log.clone());
    let token = dev.token().await;
    let c = Client::with_token(&addr, Some(&token)).expect("client");
    let got = Arc::new(Mutex::new(Vec::new()));
    let url = receiver(got.clone()).await;
    let hook = format!(
        "apiVersion: tideway.dev/v1alpha1\nkind: Webhook\nmetadata: {{name: preemptions}}\nspec:\n  url: {url}\n  events: [Preempted]\n  secretRef: {{env: T66_HOOK_SECRET}}\n"
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    while c.apply_raw(hook.clone().into_bytes(), true).await.is_err() {
        assert!(Instant::now() < deadline, "dev never accepted the webhook");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Fill the 128 H100 GPUs with low work, then ask for four nodes at high priority.
    for i in 0..16 {
        let name = format!("low-{i}");
        while c
            .submit_raw(job(&name, "low", 1).into_bytes(), false, Some(&name))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "dev never accepted {name}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // Only once every low job runs does the gang fit nowhere without evicting some.
    for i in 0..16 {
        let name = format!("low-{i}");
        loop {
            let phase = c
                .get(&name, true)
                .await
                .ok()
                .and_then(|w| w.status)
                .map(|s| s.phase);
            if phase == Some(tideway_api::WorkloadPhase::Running) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} is {phase:?}, never Running"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    c.submit_raw(job("urgent", "high", 4).into_bytes(), false, Some("urgent"))
        .await
        .expect("urgent accepted");
    let notices = loop {
        let notices: Vec<(WebhookEvent, bool)> = got.lock().map(|g| g.clone()).unwrap_or_default();
        if notices.len() >= 4 {
            break notices;
        }
        if Instant::now() > deadline {
            let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(30).collect();
            let hooks = c.webhooks().await;
            let preempted = c
                .events(&[("kind", "Preempted".to_string())])
                .await
                .map(|l| l.items.len());
            let urgent = c.get("urgent", true).await.map(|w| w.status);
            panic!(
                "{} notices so far; webhooks {hooks:?}; Preempted records {preempted:?}; \
                 urgent {urgent:?}; dev log tail: {tail:#?}",
                notices.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    for (ev, signed) in &notices {
        assert!(signed, "unsigned: {ev:?}");
        assert_eq!(ev.kind, AuditKind::Preempted);
        assert!(
            ev.subject
                .workload
                .as_deref()
                .is_some_and(|w| w.starts_with("low-")),
            "{ev:?}"
        );
        assert!(ev.details.contains("to make room for"), "{ev:?}");
    }

    // The live usage report: every queue and every flavor adds up.
    let report = c
        .usage(&[
            ("from", "2026-01-01".to_string()),
            ("to", "2026-01-10".to_string()),
            ("groupBy", "queue,tenant,flavor".to_string()),
        ])
        .await
        .expect("usage");
    assert!(!report.flavors.is_empty(), "{report:?}");
    let h100 = report
        .flavors
        .iter()
        .find(|f| f.flavor == "H100")
        .expect("H100 row");
    assert!(h100.used_gpu_seconds > 0, "{report:?}");
    for f in &report.flavors {
        assert_eq!(
            f.used_gpu_seconds + f.idle_gpu_seconds,
            f.capacity_gpu_seconds + f.over_gpu_seconds,
            "{f:?}"
        );
    }
    for f in &report.flavors {
        let by_queues: u64 = report
            .queues
            .iter()
            .filter(|q| q.flavor.as_deref() == Some(f.flavor.as_str()))
            .map(|q| q.used_gpu_seconds)
            .sum();
        assert_eq!(by_queues, f.used_gpu_seconds, "{report:?}");
    }
    for q in &report.queues {
        assert_eq!(
            q.guaranteed_gpu_seconds + q.borrowed_gpu_seconds,
            q.used_gpu_seconds,
            "{q:?}"
        );
    }
}
