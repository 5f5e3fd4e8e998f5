//! The typed HTTP client of the federation API, used by the CLI, the agents and the tests.

use std::time::Duration;

use reqwest::StatusCode;
use serde::de::DeserializeOwned;

use serde::Serialize;

use crate::agent::{
    AssignmentPage, FaultAck, FaultRequest, Heartbeat, HeartbeatAck, LocalView, RegisterRequest,
    StatusAck, StatusReport,
};
use crate::capacity::CapacityView;
use crate::cluster::{
    JoinAck, JoinRequest, NodeStatus, PartitionAck, PartitionRequest, PromoteAck, PromoteRequest,
    RemoveAck, RemoveRequest, SnapshotAck,
};
use crate::decode::AnyResource;
use crate::explain::ExplainResponse;
use crate::list::{MemberClusterList, PriorityClassList, QueueList, WorkloadList};
use crate::member_cluster::MemberCluster;
use crate::problem::Problem;
use crate::workload::{Workload, WorkloadPhase};

/// Why a call to the federation API did not return its typed answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The request could not be sent or its answer not read.
    #[error("cannot reach {addr}: {source}")]
    Transport {
        /// The node's base URL.
        addr: String,
        /// What the HTTP client said.
        #[source]
        source: reqwest::Error,
    },
    /// The server refused the request; the problem says why, field by field.
    #[error("{}", render_problem(.0))]
    Problem(Box<Problem>),
    /// The server answered something that is not the expected type nor a problem.
    #[error("unexpected answer from {addr} (HTTP {status}): {body}")]
    Unexpected {
        /// The node's base URL.
        addr: String,
        /// The HTTP status (0: the request body could not be encoded).
        status: u16,
        /// The body, or why it could not be decoded.
        body: String,
    },
    /// The call was not sent: an argument cannot be used (e.g. a name that is not a name).
    #[error("{0}")]
    Usage(String),
}

impl ClientError {
    /// The server answered 404 (e.g. a member that must register again).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::Problem(p) if p.status == 404)
    }

    /// The server answered 410: a watch's resource version was compacted away; list again.
    pub fn is_gone(&self) -> bool {
        matches!(self, ClientError::Problem(p) if p.status == 410)
    }
}

fn render_problem(p: &Problem) -> String {
    let mut s = format!("{} (HTTP {})", p.title, p.status);
    if p.errors.is_empty()
        && let Some(d) = &p.detail
    {
        s.push_str(": ");
        s.push_str(d);
    }
    for e in &p.errors {
        s.push_str(&format!("\n  {}: {}", e.field, e.reason));
    }
    s
}

/// The header of a `POST /v1/apply` answer that says what the apply did: `created`,
/// `configured` or `unchanged`.
pub const APPLY_OUTCOME_HEADER: &str = "tideway-apply-outcome";

/// The header of every answer that carries the node's calendar time (RFC 3339), which a dev
/// fleet runs faster than the wall clock: ages are measured against it.
pub const NOW_HEADER: &str = "tideway-now";

/// The node's calendar time as its last answer stamped it ([`NOW_HEADER`]); shared by the
/// clones of a [`Client`].
#[derive(Debug, Clone)]
pub struct ServerTime(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl Default for ServerTime {
    fn default() -> Self {
        Self(std::sync::Arc::new(std::sync::atomic::AtomicI64::new(
            i64::MIN,
        )))
    }
}

impl ServerTime {
    /// The last stamp seen, if any answer carried one.
    pub fn last(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            i64::MIN => None,
            ms => chrono::DateTime::from_timestamp_millis(ms),
        }
    }

    fn observe(&self, headers: &reqwest::header::HeaderMap) {
        let t = headers
            .get(NOW_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| chrono::DateTime::parse_from_rfc3339(v).ok());
        if let Some(t) = t {
            self.0
                .store(t.timestamp_millis(), std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Query of `GET /v1/workloads`.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only workloads of this queue.
    pub queue: Option<String>,
    /// Only workloads in this phase.
    pub phase: Option<WorkloadPhase>,
    /// Page size (the server's default when absent).
    pub limit: Option<usize>,
    /// The previous page's `continue` token.
    pub after: Option<u64>,
    /// Read the node's own, possibly stale, copy.
    pub stale: bool,
}

/// A client of one federation node (any node: followers forward what only the leader can do).
#[derive(Debug, Clone)]
pub struct Client {
    addr: String,
    http: reqwest::Client,
    server_time: ServerTime,
}

impl Client {
    /// A client of the node at `addr` (`HOST:PORT` or a full `http://` URL).
    pub fn new(addr: &str) -> Result<Self, ClientError> {
        let http = crate::http::client_builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|source| ClientError::Transport {
                addr: addr.to_string(),
                source,
            })?;
        Ok(Self::with_http(addr, http))
    }

    /// A client of the node at `addr` that sends `token` as its bearer token, if given.
    pub fn with_token(addr: &str, token: Option<&str>) -> Result<Self, ClientError> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Self::new(addr);
        };
        let transport = |source| ClientError::Transport {
            addr: addr.to_string(),
            source,
        };
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| ClientError::Unexpected {
                addr: addr.to_string(),
                status: 0,
                body: format!("the token is not a valid header value: {e}"),
            })?;
        value.set_sensitive(true);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, value);
        let http = crate::http::client_builder()
            .timeout(Duration::from_secs(30))
            .default_headers(headers)
            .build()
            .map_err(transport)?;
        Ok(Self::with_http(addr, http))
    }

    /// A client that shares a connection pool.
    pub fn with_http(addr: &str, http: reqwest::Client) -> Self {
        let addr = addr.trim_end_matches('/');
        let addr = if addr.starts_with("http://") || addr.starts_with("https://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        Self {
            addr,
            http,
            server_time: ServerTime::default(),
        }
    }

    /// The node's calendar time as its answers stamp it.
    pub fn server_time(&self) -> ServerTime {
        self.server_time.clone()
    }

    /// The node's base URL (`http://HOST:PORT`).
    pub fn base_url(&self) -> &str {
        &self.addr
    }

    fn transport(&self, source: reqwest::Error) -> ClientError {
        ClientError::Transport {
            addr: self.addr.clone(),
            source,
        }
    }

    async fn decode<T: DeserializeOwned>(&self, resp: reqwest::Response) -> Result<T, ClientError> {
        self.server_time.observe(resp.headers());
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| ClientError::Unexpected {
                addr: self.addr.clone(),
                status: status.as_u16(),
                body: format!("{e}: {}", String::from_utf8_lossy(&bytes)),
            });
        }
        Err(self.refused(status, &bytes))
    }

    /// A refusal: the server's problem+json, or the raw body when it sent none.
    fn refused(&self, status: StatusCode, bytes: &[u8]) -> ClientError {
        match serde_json::from_slice::<Problem>(bytes) {
            Ok(p) => ClientError::Problem(Box::new(p)),
            Err(_) => ClientError::Unexpected {
                addr: self.addr.clone(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(bytes).into_owned(),
            },
        }
    }

    /// Submits a workload document as it is (JSON, or YAML when `yaml`). Returns the stored
    /// workload and whether this call created it (false: an idempotent replay).
    pub async fn submit_raw(
        &self,
        body: Vec<u8>,
        yaml: bool,
        idempotency_key: Option<&str>,
    ) -> Result<(Workload, bool), ClientError> {
        self.submit_with_warnings(body, yaml, idempotency_key)
            .await
            .map(|(s, created)| (s.workload, created))
    }

    /// As [`Client::submit_raw`], with the server's warnings about the workload (a flavor no
    /// member offers, ...), for a CLI to print as kubectl prints API warnings.
    pub async fn submit_with_warnings(
        &self,
        body: Vec<u8>,
        yaml: bool,
        idempotency_key: Option<&str>,
    ) -> Result<(crate::Submitted, bool), ClientError> {
        let ct = if yaml {
            "application/yaml"
        } else {
            "application/json"
        };
        let mut req = self
            .http
            .post(format!("{}/v1/workloads", self.addr))
            .header(reqwest::header::CONTENT_TYPE, ct)
            .body(body);
        if let Some(k) = idempotency_key {
            req = req.header("Idempotency-Key", k);
        }
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        self.server_time.observe(resp.headers());
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        if !status.is_success() {
            return Err(self.refused(status, &bytes));
        }
        // Nearly every answer is the workload alone: decode it strictly first, and only an
        // answer that carries warnings through the (buffering) flattened form.
        let submitted = match serde_json::from_slice::<Workload>(&bytes) {
            Ok(workload) => crate::Submitted {
                workload,
                warnings: Vec::new(),
            },
            Err(_) => serde_json::from_slice(&bytes).map_err(|e| ClientError::Unexpected {
                addr: self.addr.clone(),
                status: status.as_u16(),
                body: format!("{e}: {}", String::from_utf8_lossy(&bytes)),
            })?,
        };
        Ok((submitted, status == StatusCode::CREATED))
    }

    /// Submits a typed workload as JSON; see [`Client::submit_raw`].
    pub async fn submit(
        &self,
        w: &Workload,
        idempotency_key: Option<&str>,
    ) -> Result<(Workload, bool), ClientError> {
        let body = serde_json::to_vec(w).map_err(|e| ClientError::Unexpected {
            addr: self.addr.clone(),
            status: 0,
            body: e.to_string(),
        })?;
        self.submit_raw(body, false, idempotency_key).await
    }

    /// One workload by name or UID.
    pub async fn get(&self, id: &str, stale: bool) -> Result<Workload, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/workloads/{id}", self.addr))
            .query(&[("stale", stale)])
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Cancels a pending or running workload by name or UID; answers it as cancelled.
    /// Cancelling a cancelled workload answers it unchanged.
    pub async fn cancel(&self, id: &str) -> Result<Workload, ClientError> {
        let resp = self
            .http
            .delete(format!("{}/v1/workloads/{id}", self.addr))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Audit records, filtered: `(name, value)` pairs of `GET /v1/events`' parameters.
    pub async fn events(
        &self,
        params: &[(&str, String)],
    ) -> Result<crate::audit::AuditEventList, ClientError> {
        self.get_query("/v1/events", params).await
    }

    /// The usage report: `(name, value)` pairs of `GET /v1/usage`' parameters.
    pub async fn usage(
        &self,
        params: &[(&str, String)],
    ) -> Result<crate::usage::UsageReport, ClientError> {
        self.get_query("/v1/usage", params).await
    }

    /// Webhooks with their delivery state.
    pub async fn webhooks(&self) -> Result<crate::webhook::WebhookList, ClientError> {
        self.get_json("/v1/webhooks").await
    }

    /// Deletes a webhook; answers it as it was.
    pub async fn delete_webhook(&self, name: &str) -> Result<crate::webhook::Webhook, ClientError> {
        let resp = self
            .http
            .delete(format!("{}/v1/webhooks/{name}", self.addr))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// One page of workloads.
    pub async fn list(&self, q: &ListQuery) -> Result<WorkloadList, ClientError> {
        let mut params: Vec<(&str, String)> = vec![("stale", q.stale.to_string())];
        if let Some(v) = &q.queue {
            params.push(("queue", v.clone()));
        }
        if let Some(v) = &q.phase {
            params.push(("phase", v.as_str().to_string()));
        }
        if let Some(v) = q.limit {
            params.push(("limit", v.to_string()));
        }
        if let Some(v) = q.after {
            params.push(("after", v.to_string()));
        }
        let resp = self
            .http
            .get(format!("{}/v1/workloads", self.addr))
            .query(&params)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// The node's view of the Raft group.
    pub async fn cluster_status(&self) -> Result<NodeStatus, ClientError> {
        self.get_json("/v1/cluster/status").await
    }

    /// The node's view of the Raft group without the state digest: cheap to poll for the
    /// leader or an index on a busy node with a large state.
    pub async fn cluster_status_brief(&self) -> Result<NodeStatus, ClientError> {
        self.get_query("/v1/cluster/status", &[("digest", "false")])
            .await
    }

    /// Removes a node from the group.
    pub async fn cluster_remove(&self, id: u64) -> Result<RemoveAck, ClientError> {
        self.post_json("/v1/cluster/remove", &RemoveRequest { id }, 120)
            .await
    }

    /// Adds a node to the group (learner, then voter); any member passes it to the leader.
    pub async fn cluster_join(&self, req: &JoinRequest) -> Result<JoinAck, ClientError> {
        self.post_json("/v1/cluster/join", req, 120).await
    }

    /// Promotes a learner that has caught up to voter (admin only); any member passes it to
    /// the leader.
    pub async fn cluster_promote(&self, id: u64) -> Result<PromoteAck, ClientError> {
        self.post_json("/v1/cluster/promote", &PromoteRequest { id }, 120)
            .await
    }

    /// Builds a snapshot on this node now and purges the log it covers.
    pub async fn cluster_snapshot(&self) -> Result<SnapshotAck, ClientError> {
        self.post_json("/v1/cluster/snapshot", &EmptyBody {}, 120)
            .await
    }

    /// Agent protocol: register (or re-register) a member cluster.
    pub async fn register_member(
        &self,
        req: &RegisterRequest,
    ) -> Result<MemberCluster, ClientError> {
        let resp = self
            .http
            .post(format!("{}/v1/members/register", self.addr))
            .json(req)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Agent protocol: a heartbeat with the member's capacity digest.
    pub async fn heartbeat(&self, name: &str, hb: &Heartbeat) -> Result<HeartbeatAck, ClientError> {
        let resp = self
            .http
            .post(format!("{}/v1/members/{name}/heartbeat", self.addr))
            .json(hb)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Agent protocol: assignments changed after `after`, waiting up to `wait_seconds`.
    pub async fn assignments(
        &self,
        name: &str,
        after: u64,
        wait_seconds: u64,
    ) -> Result<AssignmentPage, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/members/{name}/assignments", self.addr))
            .query(&[("after", after), ("waitSeconds", wait_seconds)])
            .timeout(Duration::from_secs(wait_seconds + 10))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Agent protocol: report local status transitions.
    pub async fn report_status(
        &self,
        name: &str,
        report: &StatusReport,
    ) -> Result<StatusAck, ClientError> {
        let resp = self
            .http
            .post(format!("{}/v1/members/{name}/status", self.addr))
            .json(report)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Why a workload is where it is (`/v1/workloads/{id}/explain`).
    pub async fn explain(&self, id: &str) -> Result<ExplainResponse, ClientError> {
        self.get_json(&format!("/v1/workloads/{id}/explain")).await
    }

    /// Creates or replaces a Queue or PriorityClass from a JSON or YAML document; returns the
    /// stored object.
    pub async fn apply_raw(&self, body: Vec<u8>, yaml: bool) -> Result<AnyResource, ClientError> {
        self.apply_with_outcome(body, yaml).await.map(|(r, _)| r)
    }

    /// As [`Client::apply_raw`], with what the apply did (`created`, `configured` or
    /// `unchanged`, from the [`APPLY_OUTCOME_HEADER`]; `None` from a server that does not say).
    pub async fn apply_with_outcome(
        &self,
        body: Vec<u8>,
        yaml: bool,
    ) -> Result<(AnyResource, Option<String>), ClientError> {
        let ct = if yaml {
            "application/yaml"
        } else {
            "application/json"
        };
        let resp = self
            .http
            .post(format!("{}/v1/apply", self.addr))
            .header(reqwest::header::CONTENT_TYPE, ct)
            .body(body)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let outcome = resp
            .headers()
            .get(APPLY_OUTCOME_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        if !status.is_success() {
            return Err(self.refused(status, &bytes));
        }
        // The answer is the stored object, of whichever kind was applied: dispatch on `kind`.
        crate::decode::decode_resource(&bytes, Some("application/json"))
            .map(|r| (r, outcome))
            .map_err(|e| ClientError::Unexpected {
                addr: self.addr.clone(),
                status: status.as_u16(),
                body: format!("{e}: {}", String::from_utf8_lossy(&bytes)),
            })
    }

    /// Applies a YAML stream of several documents (see `POST /v1/apply`): what was done to
    /// each, in order.
    pub async fn apply_many(&self, body: Vec<u8>) -> Result<crate::list::AppliedList, ClientError> {
        self.post_raw("/v1/apply", body, true).await
    }

    /// `hours` hours of a quota schedule's timeline from now.
    pub async fn schedule_timeline(
        &self,
        name: &str,
        hours: u32,
    ) -> Result<crate::ScheduleTimeline, ClientError> {
        self.get_json(&format!("/v1/schedules/{name}/timeline?hours={hours}"))
            .await
    }

    /// What the next boundary of a quota schedule will do on the live state.
    pub async fn schedule_next(&self, name: &str) -> Result<crate::ScheduleNext, ClientError> {
        self.get_json(&format!("/v1/schedules/{name}/next")).await
    }

    /// Every applied quota schedule where it stands now.
    pub async fn schedules(&self) -> Result<Vec<crate::ScheduleTimeline>, ClientError> {
        self.get_json("/v1/schedules").await
    }

    /// Every queue.
    pub async fn queues(&self) -> Result<QueueList, ClientError> {
        self.get_json("/v1/queues").await
    }

    /// Long-polls the changes of workloads after `from` (a resource version): of the one
    /// workload `id`, or of every readable workload (of `queue`, if given). Waits up to
    /// `wait_seconds` (at most 60) for the first change; resume from the answer's
    /// `resourceVersion`.
    pub async fn watch(
        &self,
        id: Option<&str>,
        queue: Option<&str>,
        from: u64,
        wait_seconds: u64,
    ) -> Result<crate::watch::WatchPage, ClientError> {
        let path = match id {
            Some(id) => format!("{}/v1/workloads/{id}", self.addr),
            None => format!("{}/v1/workloads", self.addr),
        };
        let mut q: Vec<(&str, String)> = vec![
            ("watch", "true".into()),
            ("resourceVersion", from.to_string()),
            ("timeoutSeconds", wait_seconds.to_string()),
        ];
        if let Some(queue) = queue {
            q.push(("queue", queue.to_string()));
        }
        let resp = self
            .http
            .get(path)
            .query(&q)
            .timeout(Duration::from_secs(wait_seconds + 10))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Every role binding (viewer role or above).
    pub async fn role_bindings(&self) -> Result<crate::list::RoleBindingList, ClientError> {
        self.get_json("/v1/rolebindings").await
    }

    /// Revokes a role binding (admin); answers the binding as it was.
    pub async fn delete_role_binding(&self, name: &str) -> Result<crate::RoleBinding, ClientError> {
        crate::meta::validate_name(name)
            .map_err(|e| ClientError::Usage(format!("role binding name '{name}': {e}")))?;
        let resp = self
            .http
            .delete(format!("{}/v1/rolebindings/{name}", self.addr))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Every priority class.
    pub async fn priority_classes(&self) -> Result<PriorityClassList, ClientError> {
        self.get_json("/v1/priorityclasses").await
    }

    /// Every member cluster and its health.
    pub async fn members(&self) -> Result<MemberClusterList, ClientError> {
        self.get_json("/v1/members").await
    }

    /// An agent's `/v1/local` view, when this client points at an agent's `--listen` address
    /// rather than at a federation node.
    pub async fn agent_local_view(&self) -> Result<LocalView, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/local", self.addr))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// The fleet's GPU capacity by region, flavor, cluster and pool.
    pub async fn capacity(&self, stale: bool) -> Result<CapacityView, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/capacity", self.addr))
            .query(&[("stale", stale)])
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Member lifecycle: `action` is `cordon` (no new work), `uncordon`, or `drain` (checkpoint
    /// and move its work off). Answers the member as it now stands.
    pub async fn member_lifecycle(
        &self,
        name: &str,
        action: MemberAction,
    ) -> Result<MemberCluster, ClientError> {
        let name = checked_member(name)?;
        self.post_json(
            &format!("/v1/members/{name}/{}", action.as_str()),
            &EmptyBody {},
            30,
        )
        .await
    }

    /// Removes a member that holds no active work (drain it first). Answers the member as it
    /// was.
    pub async fn member_remove(&self, name: &str) -> Result<MemberCluster, ClientError> {
        let name = checked_member(name)?;
        let resp = self
            .http
            .delete(format!("{}/v1/members/{name}", self.addr))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Lets a removed member's agent register it again; whether it had been removed.
    pub async fn member_readmit(&self, name: &str) -> Result<bool, ClientError> {
        let name = checked_member(name)?;
        let resp = self
            .http
            .post(format!("{}/v1/members/{name}/readmit", self.addr))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let ack: crate::agent::StatusAck = self.decode(resp).await?;
        Ok(ack.updated > 0)
    }

    /// A sim agent: inject a node fault (`POST /v1/faults` on the agent's `--listen`).
    pub async fn agent_fault(&self, req: &FaultRequest) -> Result<FaultAck, ClientError> {
        self.post_json("/v1/faults", req, 30).await
    }

    /// Fault injection (servers started with `--fault-injection` only).
    pub async fn partition(&self, blocked: &[u64]) -> Result<PartitionAck, ClientError> {
        let req = PartitionRequest {
            blocked: blocked.to_vec(),
        };
        self.post_json("/v1/debug/partition", &req, 10).await
    }

    /// The retained policy versions (`GET /v1/policy/versions`).
    pub async fn policy_history(&self) -> Result<crate::PolicyHistory, ClientError> {
        self.get_json("/v1/policy/versions").await
    }

    /// One retained policy version, or `current`.
    pub async fn policy_version(&self, version: &str) -> Result<crate::Policy, ClientError> {
        self.get_json(&format!("/v1/policy/versions/{version}"))
            .await
    }

    /// Applies a whole policy bundle (JSON, or YAML when `yaml`) as the next version.
    pub async fn policy_apply_raw(
        &self,
        body: Vec<u8>,
        yaml: bool,
    ) -> Result<crate::Policy, ClientError> {
        self.post_raw("/v1/policy/apply", body, yaml).await
    }

    /// What a candidate bundle would change now; nothing is applied.
    pub async fn policy_dry_run_raw(
        &self,
        body: Vec<u8>,
        yaml: bool,
    ) -> Result<crate::DryRunReport, ClientError> {
        self.post_raw("/v1/policy/dry-run", body, yaml).await
    }

    /// Restores an earlier version as the next one.
    pub async fn policy_rollback(
        &self,
        req: &crate::RollbackRequest,
    ) -> Result<crate::Policy, ClientError> {
        self.post_json("/v1/policy/rollback", req, 30).await
    }

    /// Applies the scoped candidate to the whole fleet.
    pub async fn policy_widen(&self) -> Result<crate::Policy, ClientError> {
        self.post_json("/v1/policy/widen", &EmptyBody {}, 30).await
    }

    /// Field-level differences between two versions, or a version and a candidate.
    pub async fn policy_diff(
        &self,
        req: &crate::DiffRequest,
    ) -> Result<crate::PolicyDiff, ClientError> {
        self.post_json("/v1/policy/diff", req, 30).await
    }

    async fn post_raw<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Vec<u8>,
        yaml: bool,
    ) -> Result<T, ClientError> {
        let ct = if yaml {
            "application/yaml"
        } else {
            "application/json"
        };
        let resp = self
            .http
            .post(format!("{}{path}", self.addr))
            .header(reqwest::header::CONTENT_TYPE, ct)
            .body(body)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    async fn get_query<Q: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        query: &Q,
    ) -> Result<T, ClientError> {
        let resp = self
            .http
            .get(format!("{}{path}", self.addr))
            .query(query)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.get_query::<[(&str, &str)], T>(path, &[]).await
    }

    async fn post_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        timeout_secs: u64,
    ) -> Result<T, ClientError> {
        let resp = self
            .http
            .post(format!("{}{path}", self.addr))
            .json(body)
            .timeout(Duration::from_secs(timeout_secs))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }
}

/// What an operator does to a member (see [`Client::member_lifecycle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberAction {
    /// Take no new work.
    Cordon,
    /// Take new work again.
    Uncordon,
    /// Take no new work, and checkpoint and move the work it runs.
    Drain,
}

impl MemberAction {
    /// The verb, as in the route and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberAction::Cordon => "cordon",
            MemberAction::Uncordon => "uncordon",
            MemberAction::Drain => "drain",
        }
    }
}

/// A member name checked before it goes into a path, so it can only name a member.
fn checked_member(name: &str) -> Result<&str, ClientError> {
    crate::meta::validate_name(name)
        .map(|_| name)
        .map_err(|e| ClientError::Usage(format!("member name '{name}': {e}")))
}

/// The body of a POST that takes no arguments: `{}`.
#[derive(Serialize)]
struct EmptyBody {}
