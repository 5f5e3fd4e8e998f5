//! The backend against a verified API server conversation (see `fixtures`), by topic:
//! digest, create, idempotency, status mapping, watch, preemption, removal.

use std::time::Duration;

use futures::StreamExt;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::fixtures::*;
use super::{KubeBackend, SchedulerMode, manifest};
use crate::backend::{
    Assignment, Backend, BackendError, LocalPhase, LocalStatus, ReportedCheckpoint,
};

/// Waits for the verifier to have seen every expected request; a mismatch inside it is a
/// panic, surfaced here.
async fn verified(handle: JoinHandle<()>) {
    tokio::time::timeout(Duration::from_secs(5), handle)
        .await
        .expect("the API server saw every expected request within 5 s")
        .expect("every request matched the scenario");
}

fn status(uid: &str, attempt: u32, phase: LocalPhase, since: &str) -> LocalStatus {
    LocalStatus {
        uid: uid.to_owned(),
        attempt,
        phase,
        since: at(since),
        nodes: Vec::new(),
    }
}

fn uid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

fn failed(r: &str) -> LocalPhase {
    LocalPhase::Failed { reason: r.into() }
}
fn evicted(r: &str) -> LocalPhase {
    LocalPhase::Evicted { reason: r.into() }
}
fn aborted(r: &str) -> LocalPhase {
    LocalPhase::Aborted { reason: r.into() }
}

/// Item `i` of the recorded Volcano job list, moved to `phase` at resourceVersion `rv`.
fn volcano_job(i: usize, phase: &str, reason: &str, rv: &str) -> Value {
    let mut job = json(testdata::VOLCANO_JOBS)["items"][i].clone();
    job["status"]["state"]["phase"] = json!(phase);
    job["status"]["state"]["reason"] = json!(reason);
    job["metadata"]["resourceVersion"] = json!(rv);
    job
}

fn volcano_list(version: &str, items: &[Value]) -> String {
    list_body("JobList", "batch.volcano.sh/v1alpha1", version, items)
}

fn watch_uri(version: &str) -> String {
    format!(
        "{VOLCANO_JOBS}?&watch=true&timeoutSeconds=290&{MANAGED}&allowWatchBookmarks=true&resourceVersion={version}"
    )
}

fn list_uri() -> String {
    format!("{VOLCANO_JOBS}?&{MANAGED}&limit=500")
}

// --- digest ---------------------------------------------------------------------------

#[tokio::test]
async fn digest_from_recorded_nodes_and_pods() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let server = server.run(Scenario::NodeDiscovery);
    let digest = backend.digest().await.expect("digest");
    verified(server).await;
    // The recorded digest is in the one-object-per-domain form, which must still be read;
    // compared as values, not bytes, since domains now travel grouped.
    let want: tideway_api::digest::CapacityDigest =
        serde_json::from_value(json(testdata::DIGEST)).expect("the recorded digest decodes");
    assert_eq!(digest, want);
    let round: tideway_api::digest::CapacityDigest =
        serde_json::from_value(serde_json::to_value(&digest).expect("digest serializes"))
            .expect("the grouped form decodes");
    assert_eq!(round, want);
}

#[tokio::test]
async fn digest_reports_an_unreachable_api_server_as_unavailable() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(
            "/api/v1/nodes?&limit=500",
            status_failure(503, "ServiceUnavailable", "etcd leader changed"),
        )
        .respond(
            StatusCode::SERVICE_UNAVAILABLE,
            status_failure(503, "ServiceUnavailable", "etcd leader changed"),
        ),
    ]));
    let err = backend.digest().await.expect_err("503");
    verified(server).await;
    assert!(matches!(err, BackendError::Unavailable(_)), "{err}");
}

/// A GPU node as the API server lists it, Ready, with extra labels.
fn gpu_node(name: &str, labels: Value) -> Value {
    let mut all = json!({
        "tideway.dev/pool": "train",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "topology.kubernetes.io/zone": "us-west-2a",
    });
    if let (Some(all), Some(extra)) = (all.as_object_mut(), labels.as_object()) {
        all.extend(extra.clone());
    }
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": all, "resourceVersion": "100"},
        "spec": {},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

/// A running pod of a Tideway workload attempt, bound to `node`, holding 8 GPUs.
fn tideway_pod(name: &str, uid: &str, attempt: u32, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-jobs", "labels": {
            "tideway.dev/workload-uid": uid, "tideway.dev/attempt": attempt.to_string()
        }},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running"}
    })
}

const PODS_URI: &str = "/api/v1/pods?&fieldSelector=spec.nodeName%21%3D%2Cstatus.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed&limit=500";

#[tokio::test]
async fn a_gpu_fault_label_cordons_the_node_and_evicts_its_work_with_a_notice() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let nodes = list_body(
        "NodeList",
        "v1",
        "100",
        &[
            gpu_node("gpu-ok", json!({})),
            gpu_node("gpu-ecc", json!({"tideway.dev/gpu-fault": "ecc"})),
            gpu_node("gpu-xid", json!({"tideway.dev/gpu-fault": "xid-79"})),
        ],
    );
    let pods = list_body(
        "PodList",
        "v1",
        "200",
        &[
            tideway_pod("a-0", &uid(1), 1, "gpu-ok"),
            tideway_pod("b-0", &uid(2), 1, "gpu-ecc"),
            tideway_pod("c-0", &uid(3), 1, "gpu-xid"),
        ],
    );
    let job = volcano_job(2, "Running", "", "6000");
    let name = job["metadata"]["name"].as_str().expect("name").to_owned();
    let notice = |at: &str, why: &str| {
        json!({"metadata": {"annotations": {
            "tideway.dev/preempt-at": at,
            "tideway.dev/checkpoint-requested": "true",
            "tideway.dev/evict-reason": why,
        }}})
    };
    let ecc = "ECC errors on node gpu-ecc: checkpoint and move";
    let xid = "GPU fault on node gpu-xid (xid-79)";
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get("/api/v1/nodes?&limit=500", nodes),
        Exchange::get(PODS_URI, pods),
        cordon("gpu-ecc", ecc),
        cordon("gpu-xid", xid),
        // uid(2) on the ECC node: checkpoint, evicted in 60 s.
        Exchange::get(
            uid_list_uri(&uid(2)),
            volcano_list("6000", std::slice::from_ref(&job)),
        ),
        Exchange::send(
            Method::PATCH,
            format!("{VOLCANO_JOBS}/{name}?&fieldManager=tideway-agent"),
            notice("2025-06-01T12:01:00Z", ecc),
        )
        .content_type("application/merge-patch+json")
        .respond(StatusCode::OK, job.to_string()),
        // uid(3) on the broken GPU: now.
        Exchange::get(
            uid_list_uri(&uid(3)),
            volcano_list("6000", std::slice::from_ref(&job)),
        ),
        Exchange::send(
            Method::PATCH,
            format!("{VOLCANO_JOBS}/{name}?&fieldManager=tideway-agent"),
            notice("2025-06-01T12:00:00Z", xid),
        )
        .content_type("application/merge-patch+json")
        .respond(StatusCode::OK, job.to_string()),
    ]));
    let digest = backend.digest().await.expect("digest");
    verified(server).await;
    let counts = &digest.pools[0].counts;
    assert_eq!(counts.total, 24);
    assert_eq!(counts.unhealthy, 8, "the broken GPU node");
    assert_eq!(
        counts.cordoned, 8,
        "the ECC node, before its cordon is listed"
    );
    assert_eq!(counts.allocated, 24);
}

#[tokio::test]
async fn a_job_noticed_for_a_node_fault_is_evicted_with_the_fault_as_reason() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, "2025-06-01T12:00:01Z");
    let mut job = volcano_job(2, "Running", "", "6001");
    job["metadata"]["annotations"] = json!({
        "tideway.dev/preempt-at": "2025-06-01T12:00:00Z",
        "tideway.dev/evict-reason": "GPU fault on node gpu-xid (xid-79)"
    });
    let name = job["metadata"]["name"].as_str().expect("name").to_owned();
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(list_uri(), volcano_list("6001", &[job])),
        Exchange::send(
            Method::DELETE,
            format!("{VOLCANO_JOBS}/{name}?"),
            json!({"propagationPolicy": "Background"}),
        )
        .respond(StatusCode::OK, delete_status(&name)),
    ]));
    let statuses = backend.statuses().await.expect("statuses");
    verified(server).await;
    assert_eq!(
        statuses,
        vec![status(
            &uid(3),
            1,
            evicted("GPU fault on node gpu-xid (xid-79)"),
            "2025-06-01T12:00:01Z"
        )]
    );
}

#[tokio::test]
async fn a_repeated_digest_does_not_notice_an_already_noticed_job_again() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let mut cordoned = gpu_node("gpu-xid", json!({"tideway.dev/gpu-fault": "xid-79"}));
    cordoned["spec"]["unschedulable"] = json!(true);
    let nodes = list_body("NodeList", "v1", "100", &[cordoned]);
    let pods = list_body(
        "PodList",
        "v1",
        "200",
        &[tideway_pod("c-0", &uid(3), 1, "gpu-xid")],
    );
    let mut job = volcano_job(2, "Running", "", "6000");
    job["metadata"]["annotations"] = json!({"tideway.dev/preempt-at": "2025-06-01T12:00:00Z"});
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get("/api/v1/nodes?&limit=500", nodes),
        Exchange::get(PODS_URI, pods),
        // Already cordoned: no patch; already noticed: a lookup and no patch.
        Exchange::get(uid_list_uri(&uid(3)), volcano_list("6000", &[job])),
    ]));
    let digest = backend.digest().await.expect("digest");
    verified(server).await;
    assert_eq!(digest.pools[0].counts.unhealthy, 8);
}

// --- create ---------------------------------------------------------------------------

/// What the API server answers to a create: our object plus the fields it owns.
fn created(mode: SchedulerMode) -> String {
    let (_, mut obj) = create_target(mode);
    obj["metadata"]["uid"] = json!("c3d4e5f6-0000-4000-8000-000000000001");
    obj["metadata"]["resourceVersion"] = json!("5001");
    obj["metadata"]["generation"] = json!(1);
    obj["metadata"]["creationTimestamp"] = json!(NOW);
    obj.to_string()
}

#[tokio::test]
async fn ensure_creates_the_exact_volcano_job() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let server = server.run(Scenario::Create {
        mode: SchedulerMode::Volcano,
        status: StatusCode::CREATED,
        response: created(SchedulerMode::Volcano),
    });
    backend
        .ensure(&volcano_assignment())
        .await
        .expect("created");
    verified(server).await;
}

#[tokio::test]
async fn ensure_creates_the_exact_suspended_kueue_job() {
    let (backend, server) = testcontext(SchedulerMode::Kueue, NOW);
    let server = server.run(Scenario::Create {
        mode: SchedulerMode::Kueue,
        status: StatusCode::CREATED,
        response: created(SchedulerMode::Kueue),
    });
    backend.ensure(&kueue_assignment()).await.expect("created");
    verified(server).await;
}

#[tokio::test]
async fn ensure_finds_the_existing_job_and_creates_nothing() {
    for (mode, a) in [
        (SchedulerMode::Volcano, volcano_assignment()),
        (SchedulerMode::Kueue, kueue_assignment()),
    ] {
        let (backend, server) = testcontext(mode, NOW);
        let server = server.run(Scenario::AlreadyPresent(mode));
        backend.ensure(&a).await.expect("already there is fine");
        verified(server).await;
        // The verifier is done: any further request (a create) would fail on a closed mock.
    }
}

#[tokio::test]
async fn ensure_treats_409_already_exists_as_success() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let server = server.run(Scenario::Create {
        mode: SchedulerMode::Volcano,
        status: StatusCode::CONFLICT,
        response: status_failure(
            409,
            "AlreadyExists",
            &format!("jobs.batch.volcano.sh \"{VOLCANO_JOB}\" already exists"),
        ),
    });
    backend
        .ensure(&volcano_assignment())
        .await
        .expect("a previous incarnation created it");
    verified(server).await;
}

#[tokio::test]
async fn ensure_reports_an_invalid_job_as_rejected() {
    let (backend, server) = testcontext(SchedulerMode::Kueue, NOW);
    let server = server.run(Scenario::Create {
        mode: SchedulerMode::Kueue,
        status: StatusCode::UNPROCESSABLE_ENTITY,
        response: status_failure(
            422,
            "Invalid",
            &format!(
                "Job.batch \"{KUEUE_JOB}\" is invalid: spec.template.spec.containers[0].image: Required value"
            ),
        ),
    });
    let err = backend.ensure(&kueue_assignment()).await.expect_err("422");
    verified(server).await;
    assert!(matches!(err, BackendError::Rejected(_)), "{err}");
}

#[tokio::test]
async fn ensure_rejects_what_kueue_cannot_run_without_calling_the_api() {
    let (backend, server) = testcontext(SchedulerMode::Kueue, NOW);
    let server = server.run(Scenario::Exchanges(vec![]));
    let err = backend
        .ensure(&volcano_assignment())
        .await
        .expect_err("two pod sets");
    verified(server).await;
    assert!(
        matches!(&err, BackendError::Rejected(m) if m.contains("one pod set")),
        "{err}"
    );
}

#[test]
fn a_template_is_passed_through_with_the_placement_selector_added() {
    let cfg = config(SchedulerMode::Volcano);
    let mut a = volcano_assignment();
    a.workload.spec.template = Some(Box::new(json!({
        "metadata": {"annotations": {"team": "nlp"}},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG"},
            "containers": [{"name": "trainer", "image": "ghcr.io/example/llama:1"}]
        }
    })));
    let job = manifest::volcano_job(&cfg, &a).expect("job");
    let template = &job.data["spec"]["tasks"][0]["template"];
    assert_eq!(
        template,
        &json!({
            "metadata": {"annotations": {"team": "nlp"}},
            "spec": {
                // The template's own flavor choice wins; the pool is added.
                "nodeSelector": {
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG",
                    "tideway.dev/pool": "train"
                },
                "containers": [{"name": "trainer", "image": "ghcr.io/example/llama:1"}]
            }
        })
    );
    a.workload.spec.template = Some(Box::new(json!("not a pod template")));
    assert!(manifest::volcano_job(&cfg, &a).is_err());
}

#[test]
fn the_runtime_limit_becomes_the_pods_active_deadline() {
    for mode in [SchedulerMode::Volcano, SchedulerMode::Kueue] {
        let cfg = config(mode);
        let mut a = match mode {
            SchedulerMode::Volcano => volcano_assignment(),
            SchedulerMode::Kueue => kueue_assignment(),
        };
        let template = |a: &Assignment| {
            let job = manifest::build_job(&cfg, a).expect("job");
            match mode {
                SchedulerMode::Volcano => job.data["spec"]["tasks"][0]["template"].clone(),
                SchedulerMode::Kueue => job.data["spec"]["template"].clone(),
            }
        };
        assert!(template(&a)["spec"].get("activeDeadlineSeconds").is_none());
        a.workload.spec.runtime_limit_seconds = Some(7200);
        assert_eq!(template(&a)["spec"]["activeDeadlineSeconds"], json!(7200));
        // A user's own template gets it too.
        a.workload.spec.template = Some(Box::new(json!({"spec": {"containers": []}})));
        assert_eq!(template(&a)["spec"]["activeDeadlineSeconds"], json!(7200));
    }
}

// --- status mapping -------------------------------------------------------------------

#[tokio::test]
async fn volcano_phases_map_to_local_phases() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let server = server.run(Scenario::ListJobs(SchedulerMode::Volcano));
    let statuses = backend.statuses().await.expect("statuses");
    verified(server).await;
    let t = "2025-06-01T11:00:00Z";
    assert_eq!(
        statuses,
        vec![
            status(&uid(1), 1, LocalPhase::Pending, t),
            status(&uid(2), 1, LocalPhase::Pending, t),
            status(&uid(3), 1, LocalPhase::Running, t),
            status(&uid(4), 1, LocalPhase::Running, t),
            status(&uid(5), 1, LocalPhase::Succeeded, "2025-06-01T11:30:00Z"),
            status(&uid(6), 2, failed("PodFailed"), t),
            status(&uid(7), 1, aborted("Aborted"), t),
            status(&uid(8), 1, aborted("JobTerminated"), t),
            status(&uid(9), 1, evicted("PodEvicted"), t),
            status(&uid(10), 1, evicted("PodEvicted"), t),
            status(&uid(11), 3, aborted("Aborting"), t),
            // uid 12 carries an unreadable attempt label: skipped, not guessed.
            // uid 13 has no status yet: pending since its creation.
            status(&uid(13), 1, LocalPhase::Pending, "2025-06-01T10:00:00Z"),
        ]
    );
}

#[tokio::test]
async fn batch_job_states_map_to_local_phases() {
    let (backend, server) = testcontext(SchedulerMode::Kueue, NOW);
    let server = server.run(Scenario::ListJobs(SchedulerMode::Kueue));
    let statuses = backend.statuses().await.expect("statuses");
    verified(server).await;
    assert_eq!(
        statuses,
        vec![
            status(&uid(21), 1, LocalPhase::Pending, "2025-06-01T10:00:01Z"),
            status(&uid(22), 1, LocalPhase::Pending, "2025-06-01T10:00:00Z"),
            status(&uid(23), 1, LocalPhase::Running, "2025-06-01T10:05:02Z"),
            status(&uid(24), 1, LocalPhase::Succeeded, "2025-06-01T11:45:10Z"),
            status(
                &uid(25),
                1,
                failed("BackoffLimitExceeded"),
                "2025-06-01T10:20:01Z"
            ),
            status(
                &uid(26),
                1,
                failed("DeadlineExceeded"),
                "2025-06-01T11:05:03Z"
            ),
            status(&uid(27), 1, evicted("Preempted"), "2025-06-01T11:10:00Z"),
        ]
    );
}

// --- watch ----------------------------------------------------------------------------

async fn take(backend: &KubeBackend, n: usize) -> Vec<LocalStatus> {
    let stream = backend.watch_statuses();
    tokio::time::timeout(Duration::from_secs(5), stream.take(n).collect::<Vec<_>>())
        .await
        .expect("the stream produced the expected statuses within 5 s")
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("no stream errors")
}

#[tokio::test]
async fn watch_maps_events_to_transitions_and_resumes_from_the_last_version() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let a_pending = volcano_job(0, "Pending", "", "100");
    let b_added = volcano_job(1, "Inqueue", "", "101");
    let a_running = volcano_job(0, "Running", "", "102");
    let mut a_running_again = volcano_job(0, "Running", "", "103");
    a_running_again["status"]["running"] = json!(2);
    let b_evicted = volcano_job(1, "Restarting", "PodEvicted", "151");
    let mut a_deleted = volcano_job(0, "Running", "", "160");
    a_deleted["metadata"]["annotations"] =
        json!({"tideway.dev/preempt-at": "2025-06-01T11:59:00Z"});
    let b_running = volcano_job(1, "Running", "", "170");
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(list_uri(), volcano_list("100", &[a_pending])),
        Exchange::get(
            watch_uri("100"),
            watch_body(&[
                ("ADDED", b_added),
                ("MODIFIED", a_running),
                ("MODIFIED", a_running_again),
                ("MODIFIED", b_evicted),
                ("DELETED", a_deleted),
                (
                    "BOOKMARK",
                    json!({"kind": "Job", "apiVersion": "batch.volcano.sh/v1alpha1",
                           "metadata": {"resourceVersion": "175"}}),
                ),
            ]),
        ),
        // The server closed the watch: resume from the bookmark, no re-list.
        Exchange::get(watch_uri("175"), watch_body(&[("MODIFIED", b_running)])),
    ]));
    let got = take(&backend, 6).await;
    verified(server).await;
    let t = "2025-06-01T11:00:00Z";
    assert_eq!(
        got,
        vec![
            status(&uid(1), 1, LocalPhase::Pending, t),
            status(&uid(2), 1, LocalPhase::Pending, t),
            status(&uid(1), 1, LocalPhase::Running, t),
            // The second Running (a pod count change) is not a transition.
            status(&uid(2), 1, evicted("PodEvicted"), t),
            status(&uid(1), 1, evicted("PreemptedByFederation"), NOW),
            status(&uid(2), 1, LocalPhase::Running, t),
        ]
    );
}

#[tokio::test]
async fn watch_relists_after_410_gone_and_reports_what_vanished() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let expired = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version: 5000 (5210)", "reason": "Expired", "code": 410
    });
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(
            list_uri(),
            volcano_list(
                "5000",
                &[
                    volcano_job(0, "Running", "", "4990"),
                    volcano_job(1, "Pending", "", "4995"),
                ],
            ),
        ),
        Exchange::get(watch_uri("5000"), watch_body(&[("ERROR", expired)])),
        // Job 0 was deleted while the watch was down: no DELETED event will ever come.
        Exchange::get(
            list_uri(),
            volcano_list("5310", &[volcano_job(1, "Running", "", "5300")]),
        ),
        Exchange::get(
            watch_uri("5310"),
            watch_body(&[("MODIFIED", volcano_job(1, "Completed", "", "5320"))]),
        ),
    ]));
    let got = take(&backend, 5).await;
    verified(server).await;
    let t = "2025-06-01T11:00:00Z";
    assert_eq!(
        got,
        vec![
            status(&uid(1), 1, LocalPhase::Running, t),
            status(&uid(2), 1, LocalPhase::Pending, t),
            status(&uid(2), 1, LocalPhase::Running, t),
            status(&uid(1), 1, aborted("Deleted"), NOW),
            status(&uid(2), 1, LocalPhase::Succeeded, t),
        ]
    );
}

#[tokio::test]
async fn watch_relists_when_the_watch_request_itself_is_410() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let gone = status_failure(410, "Gone", "too old resource version");
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(list_uri(), volcano_list("10", &[])),
        Exchange::get(watch_uri("10"), "").respond(StatusCode::GONE, gone),
        Exchange::get(
            list_uri(),
            volcano_list("20", &[volcano_job(2, "Running", "", "19")]),
        ),
    ]));
    let got = take(&backend, 1).await;
    verified(server).await;
    assert_eq!(
        got,
        vec![status(
            &uid(3),
            1,
            LocalPhase::Running,
            "2025-06-01T11:00:00Z"
        )]
    );
}

// --- preemption -----------------------------------------------------------------------

fn uid_list_uri(uid: &str) -> String {
    format!("{VOLCANO_JOBS}?&labelSelector=tideway.dev%2Fworkload-uid%3D{uid}&limit=500")
}

fn delete_status(name: &str) -> String {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "group": "batch.volcano.sh", "kind": "jobs"}
    })
    .to_string()
}

#[tokio::test]
async fn preempt_requests_a_checkpoint_and_sets_the_deadline() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let job = volcano_job(2, "Running", "", "6000");
    let name = job["metadata"]["name"].as_str().expect("name").to_owned();
    let mut patched = job.clone();
    patched["metadata"]["annotations"] = json!({
        "tideway.dev/preempt-at": "2025-06-01T12:05:00Z",
        "tideway.dev/checkpoint-requested": "true"
    });
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(uid_list_uri(&uid(3)), volcano_list("6000", &[job])),
        Exchange::send(
            Method::PATCH,
            format!("{VOLCANO_JOBS}/{name}?&fieldManager=tideway-agent"),
            json!({"metadata": {"annotations": {
                "tideway.dev/preempt-at": "2025-06-01T12:05:00Z",
                "tideway.dev/checkpoint-requested": "true"
            }}}),
        )
        .content_type("application/merge-patch+json")
        .respond(StatusCode::OK, patched.to_string()),
    ]));
    backend
        .preempt(&uid(3), Duration::from_secs(300))
        .await
        .expect("annotated");
    verified(server).await;
}

#[tokio::test]
async fn a_checkpoint_notice_annotates_the_volcano_job_and_keeps_it() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let job = volcano_job(2, "Running", "", "6000");
    let name = job["metadata"]["name"].as_str().expect("name").to_owned();
    let mut patched = job.clone();
    patched["metadata"]["annotations"] =
        json!({"tideway.dev/checkpoint-by": "2025-06-01T13:00:00Z"});
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(uid_list_uri(&uid(3)), volcano_list("6000", &[job])),
        Exchange::send(
            Method::PATCH,
            format!("{VOLCANO_JOBS}/{name}?&fieldManager=tideway-agent"),
            json!({"metadata": {"annotations": {
                "tideway.dev/checkpoint-by": "2025-06-01T13:00:00Z"
            }}}),
        )
        .content_type("application/merge-patch+json")
        .respond(StatusCode::OK, patched.to_string()),
    ]));
    backend
        .checkpoint(&uid(3), at("2025-06-01T13:00:00Z"))
        .await
        .expect("annotated");
    verified(server).await;
}

/// A replayed notice finds the annotation and writes nothing: the verifier would fail on
/// any request beyond the list.
#[tokio::test]
async fn a_replayed_checkpoint_notice_makes_no_write() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let mut job = volcano_job(2, "Running", "", "6001");
    job["metadata"]["annotations"] = json!({"tideway.dev/checkpoint-by": "2025-06-01T13:00:00Z"});
    let server = server.run(Scenario::Exchanges(vec![Exchange::get(
        uid_list_uri(&uid(3)),
        volcano_list("6001", &[job]),
    )]));
    backend
        .checkpoint(&uid(3), at("2025-06-01T13:00:00Z"))
        .await
        .expect("nothing to do");
    verified(server).await;
}

#[tokio::test]
async fn preempt_after_the_deadline_deletes_the_job() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, "2025-06-01T12:05:01Z");
    let mut job = volcano_job(2, "Running", "", "6001");
    job["metadata"]["annotations"] = json!({
        "tideway.dev/preempt-at": "2025-06-01T12:05:00Z",
        "tideway.dev/checkpoint-requested": "true"
    });
    let name = job["metadata"]["name"].as_str().expect("name").to_owned();
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(uid_list_uri(&uid(3)), volcano_list("6001", &[job])),
        Exchange::send(
            Method::DELETE,
            format!("{VOLCANO_JOBS}/{name}?"),
            json!({"propagationPolicy": "Background"}),
        )
        .respond(StatusCode::OK, delete_status(&name)),
    ]));
    // A second call never extends the deadline it finds.
    backend
        .preempt(&uid(3), Duration::from_secs(300))
        .await
        .expect("deleted");
    verified(server).await;
}

#[tokio::test]
async fn statuses_enforce_expired_preemption_deadlines() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, "2025-06-01T12:05:01Z");
    let mut expired = volcano_job(2, "Running", "", "6001");
    expired["metadata"]["annotations"] = json!({"tideway.dev/preempt-at": "2025-06-01T12:05:00Z"});
    let name = expired["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let mut pending = volcano_job(3, "Running", "", "6002");
    pending["metadata"]["annotations"] = json!({"tideway.dev/preempt-at": "2025-06-01T12:10:00Z"});
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(list_uri(), volcano_list("6002", &[expired, pending])),
        // Someone deleted it first: 404 is the outcome we wanted.
        Exchange::send(
            Method::DELETE,
            format!("{VOLCANO_JOBS}/{name}?"),
            json!({"propagationPolicy": "Background"}),
        )
        .respond(
            StatusCode::NOT_FOUND,
            status_failure(
                404,
                "NotFound",
                &format!("jobs.batch.volcano.sh \"{name}\" not found"),
            ),
        ),
    ]));
    let statuses = backend.statuses().await.expect("statuses");
    verified(server).await;
    assert_eq!(
        statuses,
        vec![
            status(
                &uid(3),
                1,
                evicted("PreemptedByFederation"),
                "2025-06-01T12:05:01Z"
            ),
            status(&uid(4), 1, LocalPhase::Running, "2025-06-01T11:00:00Z"),
        ]
    );
}

#[tokio::test]
async fn running_jobs_report_the_checkpoint_their_workload_annotated() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let mut running = volcano_job(2, "Running", "", "6001");
    running["metadata"]["annotations"] =
        json!({"tideway.dev/checkpointed-at": "2025-06-01T11:40:00Z"});
    // Finished work's checkpoint is of no use to preemption; an unreadable one is absent.
    let mut done = volcano_job(4, "Completed", "", "6002");
    done["metadata"]["annotations"] =
        json!({"tideway.dev/checkpointed-at": "2025-06-01T11:20:00Z"});
    let mut garbled = volcano_job(3, "Running", "", "6003");
    garbled["metadata"]["annotations"] = json!({"tideway.dev/checkpointed-at": "yesterday"});
    let server = server.run(Scenario::Exchanges(vec![Exchange::get(
        list_uri(),
        volcano_list("6003", &[running, done, garbled]),
    )]));
    let (statuses, checkpoints) = backend.report().await.expect("report");
    verified(server).await;
    assert_eq!(statuses.len(), 3);
    assert_eq!(
        checkpoints,
        vec![ReportedCheckpoint {
            uid: uid(3),
            attempt: 1,
            at: at("2025-06-01T11:40:00Z"),
        }]
    );
}

#[tokio::test]
async fn a_failed_preemption_delete_does_not_fail_statuses() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, "2025-06-01T12:05:01Z");
    let mut expired = volcano_job(2, "Running", "", "6001");
    expired["metadata"]["annotations"] = json!({"tideway.dev/preempt-at": "2025-06-01T12:05:00Z"});
    let name = expired["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::get(list_uri(), volcano_list("6002", &[expired])),
        Exchange::send(
            Method::DELETE,
            format!("{VOLCANO_JOBS}/{name}?"),
            json!({"propagationPolicy": "Background"}),
        )
        .respond(
            StatusCode::FORBIDDEN,
            status_failure(403, "Forbidden", "jobs.batch.volcano.sh is forbidden"),
        ),
    ]));
    let statuses = backend.statuses().await.expect("statuses despite the 403");
    verified(server).await;
    assert_eq!(
        statuses,
        vec![status(
            &uid(3),
            1,
            LocalPhase::Running,
            "2025-06-01T11:00:00Z"
        )]
    );
}

// --- removal --------------------------------------------------------------------------

fn remove_uri(path: &str, uid: &str) -> String {
    format!("{path}?&labelSelector=tideway.dev%2Fworkload-uid%3D{uid}")
}

#[tokio::test]
async fn remove_deletes_every_attempt_by_label() {
    let (backend, server) = testcontext(SchedulerMode::Kueue, NOW);
    let deleted = json(testdata::BATCH_JOBS)["items"][2].clone();
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::send(
            Method::DELETE,
            remove_uri(BATCH_JOBS, &uid(23)),
            json!({"propagationPolicy": "Background"}),
        )
        .respond(
            StatusCode::OK,
            list_body("JobList", "batch/v1", "7200", &[deleted]),
        ),
    ]));
    backend.remove(&uid(23)).await.expect("removed");
    verified(server).await;
}

#[tokio::test]
async fn remove_tolerates_404() {
    let (backend, server) = testcontext(SchedulerMode::Volcano, NOW);
    let server = server.run(Scenario::Exchanges(vec![
        Exchange::send(
            Method::DELETE,
            remove_uri(VOLCANO_JOBS, VOLCANO_UID),
            json!({"propagationPolicy": "Background"}),
        )
        .respond(
            StatusCode::NOT_FOUND,
            status_failure(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ),
    ]));
    backend.remove(VOLCANO_UID).await.expect("absent is fine");
    verified(server).await;
}
