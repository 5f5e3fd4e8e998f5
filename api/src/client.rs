//! The typed HTTP client of the federation API, used by the CLI, the agents and the tests.

use std::time::Duration;

use reqwest::StatusCode;
use serde::de::DeserializeOwned;

use crate::agent::{AssignmentPage, Heartbeat, RegisterRequest, StatusReport};
use crate::capacity::CapacityView;
use crate::cluster::NodeStatus;
use crate::list::WorkloadList;
use crate::member_cluster::MemberCluster;
use crate::problem::Problem;
use crate::workload::Workload;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach {addr}: {source}")]
    Transport {
        addr: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server refused the request; the problem says why, field by field.
    #[error("{}", render_problem(.0))]
    Problem(Box<Problem>),
    #[error("unexpected answer from {addr} (HTTP {status}): {body}")]
    Unexpected {
        addr: String,
        status: u16,
        body: String,
    },
}

impl ClientError {
    /// The server answered 404 (e.g. a member that must register again).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::Problem(p) if p.status == 404)
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

/// Query of `GET /v1/workloads`.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub queue: Option<String>,
    pub phase: Option<String>,
    pub limit: Option<usize>,
    pub after: Option<u64>,
    pub stale: bool,
}

#[derive(Debug, Clone)]
pub struct Client {
    addr: String,
    http: reqwest::Client,
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

    /// A client that shares a connection pool.
    pub fn with_http(addr: &str, http: reqwest::Client) -> Self {
        let addr = addr.trim_end_matches('/');
        let addr = if addr.starts_with("http://") || addr.starts_with("https://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        Self { addr, http }
    }

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
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| ClientError::Unexpected {
                addr: self.addr.clone(),
                status: status.as_u16(),
                body: format!("{e}: {}", String::from_utf8_lossy(&bytes)),
            });
        }
        match serde_json::from_slice::<Problem>(&bytes) {
            Ok(p) => Err(ClientError::Problem(Box::new(p))),
            Err(_) => Err(ClientError::Unexpected {
                addr: self.addr.clone(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes).into_owned(),
            }),
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
        let created = resp.status() == StatusCode::CREATED;
        let w = self.decode(resp).await?;
        Ok((w, created))
    }

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

    pub async fn list(&self, q: &ListQuery) -> Result<WorkloadList, ClientError> {
        let mut params: Vec<(&str, String)> = vec![("stale", q.stale.to_string())];
        if let Some(v) = &q.queue {
            params.push(("queue", v.clone()));
        }
        if let Some(v) = &q.phase {
            params.push(("phase", v.clone()));
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

    pub async fn cluster_status(&self) -> Result<NodeStatus, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/cluster/status", self.addr))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    pub async fn cluster_remove(&self, id: u64) -> Result<serde_json::Value, ClientError> {
        self.post_json("/v1/cluster/remove", &serde_json::json!({ "id": id }), 120)
            .await
    }

    pub async fn cluster_snapshot(&self) -> Result<serde_json::Value, ClientError> {
        self.post_json("/v1/cluster/snapshot", &serde_json::json!({}), 120)
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
    pub async fn heartbeat(
        &self,
        name: &str,
        hb: &Heartbeat,
    ) -> Result<serde_json::Value, ClientError> {
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
    ) -> Result<serde_json::Value, ClientError> {
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
    pub async fn explain(&self, id: &str) -> Result<serde_json::Value, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/workloads/{id}/explain", self.addr))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    /// Creates or replaces a Queue or PriorityClass from a JSON or YAML document.
    pub async fn apply_raw(
        &self,
        body: Vec<u8>,
        yaml: bool,
    ) -> Result<serde_json::Value, ClientError> {
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
        self.decode(resp).await
    }

    /// `hours` hours of a quota schedule's timeline from now.
    pub async fn schedule_timeline(
        &self,
        name: &str,
        hours: u32,
    ) -> Result<crate::ScheduleTimeline, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/schedules/{name}/timeline", self.addr))
            .query(&[("hours", hours)])
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    pub async fn queues(&self) -> Result<serde_json::Value, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/queues", self.addr))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

    pub async fn members(&self) -> Result<serde_json::Value, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/members", self.addr))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.decode(resp).await
    }

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

    /// Fault injection (servers started with `--fault-injection` only).
    pub async fn partition(&self, blocked: &[u64]) -> Result<serde_json::Value, ClientError> {
        self.post_json(
            "/v1/debug/partition",
            &serde_json::json!({ "blocked": blocked }),
            10,
        )
        .await
    }

    async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        timeout_secs: u64,
    ) -> Result<serde_json::Value, ClientError> {
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
