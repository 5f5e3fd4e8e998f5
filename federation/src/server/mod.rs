//! The federation node's HTTP server: the public API (`/v1`), the Raft transport (`/raft`),
//! forwarding endpoints between nodes (`/internal`), metrics and health.

pub mod apply;
pub mod auth;
pub mod authz;
pub mod cluster;
pub mod error;
pub mod events;
pub mod explain;
pub mod gate;
pub mod http_metrics;
pub mod internal;
pub mod jwt;
pub mod lifecycle;
pub mod members;
pub mod metrics;
pub mod openapi;
pub mod peer_auth;
pub mod policy;
pub mod rate_limit;
pub mod schedules;
pub mod ui;
pub mod usage;
pub mod watch;
pub mod webhooks;
pub mod workloads;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::routing::{delete, get, post};
use openraft::ReadPolicy;
use tideway_api::clock::SharedClock;

use crate::dispatcher::DispatchConfig;
use crate::dispatcher::liveness::Liveness;
use crate::metrics::Metrics;
use crate::propose::forward::routes;
use crate::propose::{Forwarder, Proposer};
use crate::raft::log_store::LogStats;
use crate::raft::network::PeerFilter;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;

use self::error::ApiError;

/// Request bodies larger than this are refused with 413 before they are parsed.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// What the API accepts beyond the body size: every node stores every accepted workload, so
/// the parts passed through untouched are capped.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `spec.template`, encoded as JSON, at most this many bytes.
    pub max_template_bytes: usize,
    /// Requests per second each authenticated subject may send, sustained; 0 turns the
    /// limit off.
    pub rate_per_second: f64,
    /// Requests a subject may send at once before the sustained rate applies.
    pub rate_burst: u32,
    /// The longest a request (other than a watch) may take; zero for no bound.
    pub request_timeout: Duration,
}

pub const DEFAULT_MAX_TEMPLATE_BYTES: usize = 256 * 1024;
pub const DEFAULT_RATE_PER_SECOND: f64 = 100.0;
pub const DEFAULT_RATE_BURST: u32 = 200;
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 60_000;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_template_bytes: DEFAULT_MAX_TEMPLATE_BYTES,
            rate_per_second: DEFAULT_RATE_PER_SECOND,
            rate_burst: DEFAULT_RATE_BURST,
            request_timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS),
        }
    }
}

/// Everything a request handler needs, behind one `Arc`: axum clones the state for every
/// extractor and middleware layer of every request, and a clone of the fields themselves
/// (a dozen reference counts, up and down again) was a visible share of a node's CPU under
/// submissions (measured: docs/benchmarks/submissions.md).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    pub raft: Raft,
    /// The log's place for the bytes of received entries (see `raft::received`).
    pub received: Arc<crate::raft::received::Received<crate::raft::types::LogId>>,
    pub data: Arc<RwLock<StateMachineData>>,
    pub proposer: Proposer,
    pub forwarder: Forwarder,
    pub filter: PeerFilter,
    pub log_stats: Arc<LogStats>,
    pub metrics: Arc<Metrics>,
    pub fault_injection: bool,
    pub limits: Limits,
    pub liveness: Liveness,
    pub dispatch: DispatchConfig,
    /// The leader's last scheduling cycle, for `explain`.
    pub last_cycle: crate::dispatcher::cycle::LastCycleSlot,
    /// Bearer-token authentication; `None` serves anonymously.
    pub auth: Option<Arc<auth::Authenticator>>,
    /// The time records are stamped with.
    pub clock: SharedClock,
    /// `cluster status`'s state digest, per applied index.
    pub digest_cache: Arc<crate::raft::digest::DigestCache>,
    /// The peer plane is served on its own listener (`--peer-listen`): the public router
    /// leaves the Raft and forwarding routes out.
    pub peer_apart: bool,
    /// The secret peer requests must carry; `None` accepts any caller that reaches the peer
    /// routes (loopback or explicitly insecure setups only).
    pub cluster_secret: Option<Arc<peer_auth::ClusterSecret>>,
    /// The leader's re-dispatches held back by the rate limit, for `explain`.
    pub redispatch_waits: crate::dispatcher::recovery::RedispatchWaits,
    /// When this node last processed its leader's append (see `raft::leader_watch`).
    pub contact: Arc<crate::raft::leader_watch::Contact>,
    /// Set once this node has been removed from the federation: the gate then refuses every
    /// request but its status (see `raft::removal`).
    pub removal: Arc<crate::raft::removal::Removal>,
    /// Round trips measured to each peer, for `cluster status`.
    pub rtt: crate::raft::rtt::RttTable,
}

impl AppState {
    /// Reads the state under the lock. Callers pass a closure that copies out what they need;
    /// the lock is never held across an await.
    pub fn read<T>(&self, f: impl FnOnce(&StateMachineData) -> T) -> Result<T, ApiError> {
        let d = self
            .data
            .read()
            .map_err(|_| ApiError::Internal("state lock poisoned".into()))?;
        Ok(f(&d))
    }

    /// Deletes a named object for `principal`: after a read barrier, an unknown name is a 404
    /// that writes nothing; otherwise the command `cmd` makes (given the time) is proposed and
    /// the deleted object answered.
    pub async fn delete_named(
        &self,
        principal: Option<axum::Extension<tideway_api::auth::Principal>>,
        what: &str,
        name: &str,
        exists: impl FnOnce(&StateMachineData) -> bool,
        cmd: impl FnOnce(chrono::DateTime<chrono::Utc>) -> crate::state::command::Command,
    ) -> Result<crate::state::command::StoredObject, ApiError> {
        use crate::state::command::{Command, CommandResult};
        self.read_barrier(false).await?;
        if !self.read(exists)? {
            return Err(ApiError::NotFound(format!("{what} '{name}' not found")));
        }
        let actor = principal.map(|axum::Extension(p)| p.subject);
        let cmd = cmd(self.clock.now());
        match self
            .proposer
            .propose(Command::by(actor.as_deref(), cmd))
            .await?
        {
            CommandResult::Created { object } => Ok(object),
            other => Err(ApiError::unexpected(other)),
        }
    }

    /// Makes the next local read linearizable: on the leader by ReadIndex, on a follower by
    /// asking the leader for its ReadIndex and waiting until this node has applied it.
    pub async fn read_barrier(&self, stale: bool) -> Result<(), ApiError> {
        if stale {
            return Ok(());
        }
        let me = *self.raft.node_id();
        let leader = self.raft.current_leader().await;
        match leader {
            Some(l) if l == me => {
                self.raft
                    .ensure_linearizable(ReadPolicy::ReadIndex)
                    .await
                    .map_err(|e| {
                        // Raft's error names peers and quorums: logged, not answered.
                        tracing::debug!(error = %e, "linearizable read");
                        ApiError::Unavailable(
                            "this node could not confirm it still leads; retry, or read \
                             with ?stale=true"
                                .into(),
                        )
                    })?;
                Ok(())
            }
            Some(l) => {
                let idx = self.forwarder.read_index(l).await?;
                self.raft
                    .wait(Some(Duration::from_secs(5)))
                    .applied_index_at_least(Some(idx), "linearizable read")
                    .await
                    .map_err(|e| wait_failed("catching up to the leader", &e))?;
                Ok(())
            }
            None => Err(ApiError::Unavailable(
                "no leader is known; retry, or read with ?stale=true".into(),
            )),
        }
    }
}

/// The answer for a wait on Raft that failed while `doing` something. Raft's own message
/// prints its metrics (node id, vote, last log, membership): internal state that is logged
/// here and never sent to a client.
pub fn wait_failed(doing: &str, e: &openraft::metrics::WaitError) -> ApiError {
    use openraft::metrics::WaitError;
    tracing::debug!(error = %e, "{doing}");
    match e {
        WaitError::Timeout(after, _) => ApiError::Unavailable(format!(
            "{doing} took longer than {} ms; retry",
            after.as_millis()
        )),
        WaitError::ShuttingDown => ApiError::Unavailable("this node is shutting down".into()),
    }
}

pub fn router(state: AppState) -> Router {
    let limiter = rate_limit::RateLimiter::new(
        state.limits.rate_per_second,
        state.limits.rate_burst,
        state.clock.clone(),
    )
    .map(Arc::new);
    let api = Router::new()
        .route(
            "/v1/workloads",
            post(workloads::submit).get(workloads::list),
        )
        .route(
            "/v1/workloads/{id}",
            get(workloads::get_one).delete(workloads::cancel),
        )
        .route("/v1/workloads/{id}/explain", get(explain::explain))
        .route("/v1/apply", post(apply::apply))
        .route("/v1/events", get(events::list))
        .route("/v1/policy/versions", get(policy::history))
        .route("/v1/policy/versions/{version}", get(policy::version))
        .route("/v1/policy/apply", post(policy::apply))
        .route("/v1/policy/rollback", post(policy::rollback))
        .route("/v1/policy/widen", post(policy::widen))
        .route("/v1/policy/diff", post(policy::diff))
        .route("/v1/policy/dry-run", post(policy::dry_run))
        .route("/v1/rolebindings", get(apply::list_role_bindings))
        .route(
            "/v1/rolebindings/{name}",
            delete(apply::delete_role_binding),
        )
        .route("/v1/queues", get(workloads::list_queues))
        .route("/v1/schedules", get(schedules::list))
        .route("/v1/schedules/{name}/timeline", get(schedules::timeline))
        .route("/v1/schedules/{name}/next", get(schedules::next))
        .route("/v1/priorityclasses", get(workloads::list_priority_classes))
        .route("/v1/members", get(members::list))
        .route("/v1/members/register", post(members::register))
        .route("/v1/members/{name}/heartbeat", post(members::heartbeat))
        .route("/v1/members/{name}/assignments", get(members::assignments))
        .route("/v1/members/{name}/status", post(members::status))
        .route("/v1/members/{name}", delete(lifecycle::remove))
        .route("/v1/members/{name}/cordon", post(lifecycle::cordon))
        .route("/v1/members/{name}/uncordon", post(lifecycle::uncordon))
        .route("/v1/members/{name}/drain", post(lifecycle::drain))
        .route("/v1/members/{name}/readmit", post(lifecycle::readmit))
        .route("/v1/capacity", get(members::capacity))
        .route("/v1/usage", get(usage::report))
        .route("/v1/webhooks", get(webhooks::list))
        .route("/v1/webhooks/{name}", delete(webhooks::delete))
        .route("/v1/cluster/status", get(cluster::status))
        .route("/v1/cluster/join", post(cluster::join))
        .route("/v1/cluster/remove", post(cluster::remove))
        .route("/v1/cluster/snapshot", post(cluster::snapshot))
        .route("/v1/debug/partition", post(cluster::partition))
        .route("/metrics", get(metrics::render))
        .route("/healthz", get(|| async { "ok" }))
        .route("/openapi.json", get(openapi::serve))
        .merge(ui::routes())
        .route("/v1/cluster/promote", post(cluster::promote))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state.clone());
    // Without a peer listener of its own, the peer plane shares the public port (as before
    // `--peer-listen` existed); with one, the public port answers 404 on its routes.
    let api = if state.peer_apart {
        api
    } else {
        api.merge(peer_routes(&state))
    };
    // After the merge, so that every route, the Raft transport's too, answers an unrouted
    // method with problem+json (axum still adds the `Allow` header).
    api.method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        // One layer runs every check, outside in: the clock stamp, the latency metric, the
        // time bound, authenticate, the rate limit (keyed on the authenticated subject),
        // then authorize. Refused requests (401, 403) are timed and counted too.
        .layer(axum::middleware::from_fn_with_state(
            gate::Gate {
                clock: state.clock.clone(),
                metrics: state.metrics.clone(),
                request_timeout: state.limits.request_timeout,
                auth: state.auth.clone(),
                limiter,
                data: state.data.clone(),
                removal: state.removal.clone(),
            },
            gate::gate,
        ))
}

/// The peer plane: the Raft transport and the forwarding endpoints, behind the cluster
/// secret.
fn peer_routes(state: &AppState) -> Router {
    Router::new()
        .route(routes::PROPOSE, post(internal::propose))
        .route(routes::READ_INDEX, post(internal::read_index))
        .route(routes::JOIN, post(internal::join))
        .route(routes::REMOVE, post(internal::remove))
        .route(routes::HEARTBEAT, post(internal::heartbeat))
        .route(routes::EXPLAIN, post(internal::explain))
        .route(routes::PROMOTE, post(internal::promote))
        .route(routes::HEARTBEAT_OUTCOME, post(internal::heartbeat_outcome))
        .route(routes::REMOVED, post(internal::removed))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state.clone())
        .merge(crate::raft::transport::router(
            crate::raft::transport::Peer {
                raft: state.raft.clone(),
                contact: state.contact.clone(),
                received: state.received.clone(),
            },
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.cluster_secret.clone(),
            peer_auth::require_secret,
        ))
}

/// The router of the peer listener (`--peer-listen`): the peer plane alone, every refusal
/// problem+json like the public API's.
pub fn peer_router(state: AppState) -> Router {
    peer_routes(&state)
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
}

#[cfg(test)]
pub(crate) mod tests {
    /// The routes of [`super::router`] as written in this file: each literal path with its
    /// methods (`get`, `post`, `delete`...). Routes named by a constant (the node-to-node
    /// `/internal` ones) are not public and not listed.
    pub(crate) fn source_routes() -> Vec<(String, Vec<String>)> {
        let src = include_str!("mod.rs");
        let src = src.split("#[cfg(test)]").next().unwrap_or(src);
        let body = src.split("pub fn router(").nth(1).unwrap_or(src);
        body.split(".route(")
            .skip(1)
            .filter_map(|r| {
                let path = r.trim_start().strip_prefix('"')?.split('"').next()?;
                // The handler part of this `.route(...)`: up to the next builder call.
                let handlers = r.split("\n        .").next().unwrap_or(r);
                let methods = ["get", "post", "delete", "put", "patch"]
                    .into_iter()
                    .filter(|m| {
                        handlers.match_indices(&format!("{m}(")).any(|(i, _)| {
                            !handlers[..i]
                                .chars()
                                .next_back()
                                .is_some_and(|c| c.is_alphanumeric() || c == '_')
                        })
                    })
                    .map(String::from)
                    .collect();
                Some((path.to_string(), methods))
            })
            .collect()
    }

    #[test]
    fn source_routes_reads_methods() {
        let routes = source_routes();
        let find = |p: &str| routes.iter().find(|(q, _)| q == p).map(|(_, m)| m.clone());
        assert_eq!(
            find("/v1/workloads"),
            Some(vec!["get".into(), "post".into()])
        );
        assert_eq!(
            find("/v1/workloads/{id}"),
            Some(vec!["get".into(), "delete".into()])
        );
        assert_eq!(find("/v1/members/{name}"), Some(vec!["delete".into()]));
    }

    /// Every route of the router is in docs/api.md (path parameters may be named
    /// differently there, e.g. `{name-or-uid}` for `{id}`). Fix by documenting the route.
    #[test]
    fn docs_api_md_covers_every_route() {
        let doc = include_str!("../../../docs/api.md");
        let norm = |p: &str| {
            let mut out = String::new();
            let mut in_param = false;
            for c in p.chars() {
                match c {
                    '{' => {
                        in_param = true;
                        out.push_str("{}");
                    }
                    '}' => in_param = false,
                    _ if in_param => {}
                    _ => out.push(c),
                }
            }
            out
        };
        let doc = norm(doc);
        let routes = source_routes();
        assert!(routes.len() > 20, "{routes:?}");
        let missing: Vec<&String> = routes
            .iter()
            .map(|(p, _)| p)
            .filter(|r| !doc.contains(&norm(r)))
            .collect();
        assert!(missing.is_empty(), "routes not in docs/api.md: {missing:?}");
    }
}
