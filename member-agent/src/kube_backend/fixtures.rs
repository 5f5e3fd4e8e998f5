//! Test fixtures: an API server verifier over tower-test, driven by a scenario enum.
//!
//! Each [`Scenario`] is the exact conversation the backend must have with the API server:
//! for every request, the method, the path with its query string, the JSON body (compared
//! whole, not "includes"), and the answer the server gives. The answers are recorded API
//! responses under `member-agent/testdata/kube/`, so the backend is tested against the shapes
//! a real cluster sends, not against what we think it sends.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tideway_api::PoolKind;
use tideway_api::workload::{Gang, PodSet, Workload, WorkloadClass, WorkloadSpec};
use tokio::task::JoinHandle;
use tower_test::mock::{self, Handle};

use super::{KubeBackend, KubeConfig, SchedulerMode};
use crate::backend::Assignment;

pub const NOW: &str = "2025-06-01T12:00:00Z";
pub const VOLCANO_UID: &str = "3f2a9c1e-77b0-4a51-9d1c-0b6f1e2d3c4b";
pub const VOLCANO_JOB: &str = "llama-ft-3f2a9c1e-2";
pub const KUEUE_UID: &str = "8c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f";
pub const KUEUE_JOB: &str = "bert-eval-8c1d2e3f-1";

pub const VOLCANO_JOBS: &str = "/apis/batch.volcano.sh/v1alpha1/namespaces/ml-jobs/jobs";
pub const BATCH_JOBS: &str = "/apis/batch/v1/namespaces/ml-jobs/jobs";
/// `labelSelector=tideway.dev/workload-uid`, URL-encoded.
pub const MANAGED: &str = "labelSelector=tideway.dev%2Fworkload-uid";

/// Recorded API responses and expected request bodies.
pub mod testdata {
    pub const NODES_PAGE_1: &str = include_str!("../../testdata/kube/nodes-page-1.json");
    pub const NODES_PAGE_2: &str = include_str!("../../testdata/kube/nodes-page-2.json");
    pub const PODS: &str = include_str!("../../testdata/kube/pods.json");
    pub const DIGEST: &str = include_str!("../../testdata/kube/digest.json");
    pub const VOLCANO_JOB: &str = include_str!("../../testdata/kube/volcano-job.json");
    pub const KUEUE_JOB: &str = include_str!("../../testdata/kube/kueue-job.json");
    pub const VOLCANO_JOBS: &str = include_str!("../../testdata/kube/volcano-jobs.json");
    pub const BATCH_JOBS: &str = include_str!("../../testdata/kube/batch-jobs.json");
}

pub fn json(s: &str) -> Value {
    serde_json::from_str(s).expect("test data is JSON")
}

pub fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("test timestamp")
        .with_timezone(&Utc)
}

pub fn config(mode: SchedulerMode) -> KubeConfig {
    let mut c = KubeConfig::new("gpu-west", mode);
    c.namespace = "ml-jobs".into();
    c.kueue.local_queue = "team-a".into();
    c.nodes.rack = Some("tideway.dev/rack".into());
    c.nodes.unhealthy_conditions = vec!["GPUUnhealthy".into()];
    c.pools = BTreeMap::from([
        ("train".into(), PoolKind::Training),
        ("infer".into(), PoolKind::Inference),
    ]);
    let sel = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
    c.flavors = BTreeMap::from([
        (
            "H100".into(),
            sel("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
        ),
        (
            "L4".into(),
            sel("node.kubernetes.io/instance-type", "g6.xlarge"),
        ),
    ]);
    c
}

/// A 4x8 H100 gang (minimum 4) plus one 1-GPU evaluator, attempt 2, pool `train`.
pub fn volcano_assignment() -> Assignment {
    let mut worker = PodSet::new("worker", 4, 8, "H100");
    worker.cpu = Some("32".into());
    worker.memory = Some("256Gi".into());
    let mut spec = WorkloadSpec::new(
        "research",
        WorkloadClass::Training,
        vec![worker, PodSet::new("evaluator", 1, 1, "H100")],
    );
    spec.gang = Some(Gang { min_count: 4 });
    let mut workload = Workload::new("llama-ft", spec);
    workload.metadata.uid = Some(VOLCANO_UID.into());
    Assignment {
        workload,
        pool: Some("train".into()),
        attempt: 2,
    }
}

/// Three 1-GPU L4 pods, gang minimum 2, attempt 1, pool `infer`.
pub fn kueue_assignment() -> Assignment {
    let mut eval = PodSet::new("eval", 3, 1, "L4");
    eval.cpu = Some("4".into());
    eval.memory = Some("16Gi".into());
    let mut spec = WorkloadSpec::new("eval", WorkloadClass::Eval, vec![eval]);
    spec.gang = Some(Gang { min_count: 2 });
    let mut workload = Workload::new("bert-eval", spec);
    workload.metadata.uid = Some(KUEUE_UID.into());
    Assignment {
        workload,
        pool: Some("infer".into()),
        attempt: 1,
    }
}

/// A backend over a mock service, its clock pinned at `now`, and the verifier that plays
/// the API server.
pub fn testcontext(mode: SchedulerMode, now: &str) -> (KubeBackend, ApiServerVerifier) {
    let (mock_service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(mock_service, "default");
    let now = at(now);
    let backend = KubeBackend::new(client, config(mode))
        .expect("test config is valid")
        .with_clock(Arc::new(tideway_api::clock::ManualClock::new(now)));
    (backend, ApiServerVerifier(handle))
}

/// One request the backend must send, and the API server's answer.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: Method,
    /// Path and query, exactly as sent.
    pub uri: String,
    /// The whole JSON body; `None` means an empty body.
    pub body: Option<Value>,
    pub content_type: Option<&'static str>,
    pub status: StatusCode,
    pub response: String,
}

impl Exchange {
    pub fn get(uri: impl Into<String>, response: impl Into<String>) -> Self {
        Self {
            method: Method::GET,
            uri: uri.into(),
            body: None,
            content_type: None,
            status: StatusCode::OK,
            response: response.into(),
        }
    }

    pub fn send(method: Method, uri: impl Into<String>, body: Value) -> Self {
        Self {
            method,
            uri: uri.into(),
            body: Some(body),
            content_type: Some("application/json"),
            status: StatusCode::OK,
            response: String::new(),
        }
    }

    pub fn content_type(mut self, ct: &'static str) -> Self {
        self.content_type = Some(ct);
        self
    }

    pub fn respond(mut self, status: StatusCode, response: impl Into<String>) -> Self {
        self.status = status;
        self.response = response.into();
        self
    }
}

/// A `Status` failure body as the API server sends it.
pub fn status_failure(code: u16, reason: &str, message: &str) -> String {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
    .to_string()
}

/// Watch events as the API server streams them: one JSON object per line.
pub fn watch_body(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(kind, object)| format!("{}\n", json!({"type": kind, "object": object})))
        .collect()
}

/// A list response with `items`.
pub fn list_body(kind: &str, api_version: &str, version: &str, items: &[Value]) -> String {
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"resourceVersion": version}, "items": items,
    })
    .to_string()
}

/// The API server conversations the tests run.
#[derive(Debug, Clone)]
pub enum Scenario {
    /// Nodes over two pages, then the active bound pods.
    NodeDiscovery,
    /// Nothing for the attempt yet, so the job is created.
    Create {
        mode: SchedulerMode,
        /// The server's answer to the create.
        status: StatusCode,
        response: String,
    },
    /// The attempt's job is already there: a lookup and nothing else.
    AlreadyPresent(SchedulerMode),
    /// Lists managed jobs, answering with the recorded list of `mode`.
    ListJobs(SchedulerMode),
    /// Any conversation spelled out request by request.
    Exchanges(Vec<Exchange>),
}

impl Scenario {
    pub fn exchanges(self) -> Vec<Exchange> {
        match self {
            Scenario::NodeDiscovery => {
                let token = json(testdata::NODES_PAGE_1)["metadata"]["continue"]
                    .as_str()
                    .expect("page 1 has a continue token")
                    .to_owned();
                vec![
                    Exchange::get("/api/v1/nodes?&limit=500", testdata::NODES_PAGE_1),
                    Exchange::get(
                        format!("/api/v1/nodes?&limit=500&continue={token}"),
                        testdata::NODES_PAGE_2,
                    ),
                    Exchange::get(
                        "/api/v1/pods?&fieldSelector=spec.nodeName%21%3D%2Cstatus.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed&limit=500",
                        testdata::PODS,
                    ),
                    // The recorded fleet has a NotReady node and one with a GPU condition,
                    // neither cordoned yet: the agent cordons both (no Tideway pods on them).
                    cordon("gpu-h100-b2", "node gpu-h100-b2 is NotReady"),
                    cordon(
                        "gpu-h100-b3",
                        "GPU fault on node gpu-h100-b3 (GPUUnhealthy)",
                    ),
                ]
            }
            Scenario::Create {
                mode,
                status,
                response,
            } => {
                let (path, expected) = create_target(mode);
                vec![
                    Exchange::get(
                        lookup_uri(mode),
                        list_body("JobList", api_version(mode), "5000", &[]),
                    ),
                    Exchange::send(
                        Method::POST,
                        format!("{path}?&fieldManager=tideway-agent"),
                        expected,
                    )
                    .respond(status, response),
                ]
            }
            Scenario::AlreadyPresent(mode) => {
                let (_, mut existing) = create_target(mode);
                existing["metadata"]["uid"] = json!("c3d4e5f6-0000-4000-8000-000000000001");
                existing["metadata"]["resourceVersion"] = json!("4999");
                vec![Exchange::get(
                    lookup_uri(mode),
                    list_body("JobList", api_version(mode), "5000", &[existing]),
                )]
            }
            Scenario::ListJobs(mode) => {
                let (path, body) = match mode {
                    SchedulerMode::Volcano => (VOLCANO_JOBS, testdata::VOLCANO_JOBS),
                    SchedulerMode::Kueue => (BATCH_JOBS, testdata::BATCH_JOBS),
                };
                vec![Exchange::get(format!("{path}?&{MANAGED}&limit=500"), body)]
            }
            Scenario::Exchanges(e) => e,
        }
    }
}

/// The agent's merge patch cordoning a faulty node, and the server's answer (the node).
pub fn cordon(node: &str, why: &str) -> Exchange {
    let body = json!({
        "metadata": {"annotations": {"tideway.dev/cordoned-for": why}},
        "spec": {"unschedulable": true},
    });
    let answer = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "annotations": {"tideway.dev/cordoned-for": why}},
        "spec": {"unschedulable": true},
    });
    Exchange::send(
        Method::PATCH,
        format!("/api/v1/nodes/{node}?&fieldManager=tideway-agent"),
        body,
    )
    .content_type("application/merge-patch+json")
    .respond(StatusCode::OK, answer.to_string())
}

fn api_version(mode: SchedulerMode) -> &'static str {
    match mode {
        SchedulerMode::Volcano => "batch.volcano.sh/v1alpha1",
        SchedulerMode::Kueue => "batch/v1",
    }
}

/// The collection path and the exact body `ensure` must POST.
pub fn create_target(mode: SchedulerMode) -> (&'static str, Value) {
    match mode {
        SchedulerMode::Volcano => (VOLCANO_JOBS, json(testdata::VOLCANO_JOB)),
        SchedulerMode::Kueue => (BATCH_JOBS, json(testdata::KUEUE_JOB)),
    }
}

/// The idempotency lookup of `ensure`: by workload UID and attempt.
pub fn lookup_uri(mode: SchedulerMode) -> String {
    match mode {
        SchedulerMode::Volcano => format!(
            "{VOLCANO_JOBS}?&labelSelector=tideway.dev%2Fworkload-uid%3D{VOLCANO_UID}%2Ctideway.dev%2Fattempt%3D2"
        ),
        SchedulerMode::Kueue => format!(
            "{BATCH_JOBS}?&labelSelector=tideway.dev%2Fworkload-uid%3D{KUEUE_UID}%2Ctideway.dev%2Fattempt%3D1"
        ),
    }
}

/// Plays the API server: checks each request against the scenario, answers it, and fails
/// the test (via the join handle) on the first mismatch or missing request.
pub struct ApiServerVerifier(Handle<Request<Body>, Response<Body>>);

impl ApiServerVerifier {
    pub fn run(self, scenario: Scenario) -> JoinHandle<()> {
        let mut handle = self.0;
        tokio::spawn(async move {
            for (i, ex) in scenario.exchanges().into_iter().enumerate() {
                let (request, send) = handle.next_request().await.unwrap_or_else(|| {
                    panic!("request {i} never came: expected {} {}", ex.method, ex.uri)
                });
                assert_eq!(request.method(), ex.method, "request {i}: method");
                assert_eq!(request.uri().to_string(), ex.uri, "request {i}: uri");
                let content_type = request
                    .headers()
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                if let Some(ct) = ex.content_type {
                    assert_eq!(
                        content_type.as_deref(),
                        Some(ct),
                        "request {i}: content type"
                    );
                }
                let body = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .expect("request body");
                match &ex.body {
                    None => assert!(
                        body.is_empty(),
                        "request {i}: expected no body, got {}",
                        String::from_utf8_lossy(&body)
                    ),
                    Some(expected) => {
                        let actual: Value =
                            serde_json::from_slice(&body).expect("request body is JSON");
                        assert_eq!(
                            &actual,
                            expected,
                            "request {i}: body\nactual:   {}\nexpected: {}",
                            serde_json::to_string_pretty(&actual).unwrap_or_default(),
                            serde_json::to_string_pretty(expected).unwrap_or_default(),
                        );
                    }
                }
                let response = Response::builder()
                    .status(ex.status)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(ex.response.into_bytes()))
                    .expect("response");
                send.send_response(response);
            }
        })
    }
}
