//! A federation node's life: open the stores, start Raft, serve HTTP, bootstrap or join.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use openraft::{Config, SnapshotPolicy};
use tideway_api::clock::{RealClock, SharedClock};
use tokio::net::TcpListener;

use crate::dispatcher::DispatchConfig;
use crate::dispatcher::liveness::Liveness;
use crate::metrics::Metrics;
use crate::propose::membership::JoinRequest;
use crate::propose::{Forwarder, Proposer};
use crate::raft::log_store::RedbLogStore;
use crate::raft::network::{NetworkFactory, PeerFilter};
use crate::raft::node_info::NodeInfo;
use crate::raft::peer_plane::PeerPlane;
use crate::raft::state_machine::StateMachineStore;
use crate::raft::types::{NodeId, Raft, TypeConfig};
use crate::server::{self, AppState};

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("opening the data directory {path}: {source}")]
    Storage {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("raft configuration: {0}")]
    Config(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("joining through {via}: {reason}")]
    Join { via: String, reason: String },
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Removal(#[from] crate::raft::removal::RemovalError),
}

/// Raft heartbeat period. openraft lets a follower vote only once the leader lease (the
/// election timeout's maximum) has passed since the last heartbeat, and starts an election a
/// random election timeout after that: a dead leader is replaced `max + rand(min, max)` after
/// its last heartbeat. 50 ms and 200–400 ms put that at 600–800 ms, under the one-second
/// failover aim, while a leader must stall for 600 ms before anyone campaigns.
pub const DEFAULT_HEARTBEAT_MS: u64 = 50;
/// See [`DEFAULT_HEARTBEAT_MS`].
pub const DEFAULT_ELECTION_TIMEOUT_MS: (u64, u64) = (200, 400);
/// `--network wan`: Raft timing for nodes up to 150 ms apart. openraft waits for a heartbeat's
/// answer only for the heartbeat interval, so the interval is two such round trips; the
/// election timeout is three heartbeats at least and 18 round trips at min + max (etcd asks
/// for ten). A dead leader is then replaced in about 2.5 s at 150 ms (the lease, 1.8 s, then
/// a pre-vote, a vote and a commit, a round trip each).
pub const WAN_HEARTBEAT_MS: u64 = 300;
/// See [`WAN_HEARTBEAT_MS`].
pub const WAN_ELECTION_TIMEOUT_MS: (u64, u64) = (900, 1800);

/// Settings of one federation node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: NodeId,
    /// Address to bind.
    pub listen: String,
    /// Address other nodes and agents use to reach this one; defaults to `listen`.
    pub advertise: Option<String>,
    pub data_dir: PathBuf,
    /// Any member of an existing cluster, to join through. None bootstraps a new cluster.
    pub join: Option<String>,
    pub fault_injection: bool,
    /// What the API accepts, beyond the body size.
    pub limits: crate::server::Limits,
    pub heartbeat_ms: u64,
    pub election_timeout_ms: (u64, u64),
    pub snapshot_every: u64,
    pub dispatch: DispatchConfig,
    /// Bearer-token authentication of the API; `None` serves anonymously.
    pub auth: Option<std::sync::Arc<crate::server::auth::Authenticator>>,
    /// The bearer token this node sends when it asks to join through `join`.
    pub join_token: Option<String>,
    /// Where the node reads the time: the wall clock, or `tideway dev`'s scaled clock that
    /// its simulated members share.
    pub clock: SharedClock,
    /// Address to bind the peer plane (Raft and forwarding) to, apart from the API; `None`
    /// serves it on the API's port.
    pub peer_listen: Option<String>,
    /// Address other nodes use to reach the peer plane; defaults to the bound `peer_listen`.
    pub peer_advertise: Option<String>,
    /// The secret every peer request carries and every peer route requires.
    pub cluster_secret: Option<String>,
    /// Serve the API and the peer plane over TLS (and dial peers with `https`).
    pub tls: Option<crate::tls::TlsFiles>,
    /// When joining, ask to be made a voter as soon as this node has caught up, instead of
    /// staying a learner until an admin promotes it (`tideway server` sets it unless
    /// `--learner`).
    pub auto_promote: bool,
    /// The header-read deadline and the per-address cap on idle connections, on every
    /// listener.
    pub conn_limits: crate::listen::ConnLimits,
}

impl NodeConfig {
    pub fn new(id: NodeId, listen: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            id,
            listen: listen.into(),
            advertise: None,
            data_dir: data_dir.into(),
            join: None,
            fault_injection: false,
            limits: Default::default(),
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            election_timeout_ms: DEFAULT_ELECTION_TIMEOUT_MS,
            snapshot_every: 20_000,
            dispatch: DispatchConfig::default(),
            auth: None,
            join_token: None,
            clock: RealClock::shared(),
            peer_listen: None,
            peer_advertise: None,
            cluster_secret: None,
            tls: None,
            auto_promote: false,
            conn_limits: Default::default(),
        }
    }

    pub fn advertise_addr(&self) -> String {
        self.advertise
            .clone()
            .unwrap_or_else(|| self.listen.clone())
    }
}

/// A running federation node.
pub struct Node {
    pub raft: Raft,
    pub state: AppState,
    pub addr: String,
    /// The bound peer-plane address, when it listens apart from the API.
    pub peer_addr: Option<String>,
    /// The HTTP server and the leader loops, stopped on shutdown.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The log, to write the last committed log id on a clean stop.
    log: RedbLogStore<TypeConfig>,
}

impl Node {
    pub async fn start(cfg: NodeConfig) -> Result<Node, NodeError> {
        let storage = |source| NodeError::Storage {
            path: cfg.data_dir.clone(),
            source,
        };
        std::fs::create_dir_all(&cfg.data_dir).map_err(storage)?;
        let log = RedbLogStore::<TypeConfig>::open(&cfg.data_dir.join("raft-log.redb"))
            .map_err(storage)?;
        let mut sm = StateMachineStore::open(&cfg.data_dir.join("snapshots")).map_err(storage)?;
        let removal = Arc::new(crate::raft::removal::Removal::open(&cfg.data_dir)?);
        let metrics = Arc::new(Metrics::default());
        sm.record_apply_lock_in(metrics.apply_lock_held());
        sm.record_apply_wait_in(metrics.apply_lock_wait());
        let raft_config = Config {
            cluster_name: "tideway".into(),
            heartbeat_interval: cfg.heartbeat_ms,
            election_timeout_min: cfg.election_timeout_ms.0,
            election_timeout_max: cfg.election_timeout_ms.1,
            // Snapshots are triggered by `snapshot_policy::snapshot_loop`: the entry count
            // alone would make their cost grow with the state.
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: 1000,
            max_payload_entries: 64,
            enable_pre_vote: Some(true),
            ..Default::default()
        }
        .validate()
        .map_err(|e| NodeError::Config(e.to_string()))?;
        let http = tideway_api::http::client_builder()
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| NodeError::Raft(e.to_string()))?;
        let filter = PeerFilter::default();
        let plane = PeerPlane::new(cfg.tls.is_some(), cfg.cluster_secret.clone());
        let rtt = crate::raft::rtt::RttTable::new(crate::raft::rtt::Timing {
            heartbeat: Duration::from_millis(cfg.heartbeat_ms),
            election_min: Duration::from_millis(cfg.election_timeout_ms.0),
            election_max: Duration::from_millis(cfg.election_timeout_ms.1),
        });
        let network = NetworkFactory::new(http.clone(), filter.clone(), plane.clone(), log.tail())
            .with_rtt(rtt.clone());
        let peer_reports = network.reports();
        let plane_for_watch = plane.clone();
        let log_stats = log.stats();
        let data = sm.data();
        let copy_slot = sm.copy_slot();
        let snapshot_bytes = sm.snapshot_bytes();
        let kept_log = log.clone();
        let received = log.received();
        let raft = Raft::new(cfg.id, Arc::new(raft_config), network, log, sm)
            .await
            .map_err(|e| NodeError::Raft(e.to_string()))?;
        let forwarder = Forwarder::new(raft.clone(), http.clone(), filter.clone(), plane);
        let proposer = Proposer::start(raft.clone(), forwarder.clone());
        let state = AppState::new(crate::server::Shared {
            raft: raft.clone(),
            received,
            data,
            proposer,
            forwarder,
            filter,
            log_stats,
            metrics,
            fault_injection: cfg.fault_injection,
            limits: cfg.limits.clone(),
            liveness: Liveness::new(cfg.clock.clone()),
            clock: cfg.clock.clone(),
            dispatch: cfg.dispatch.clone(),
            last_cycle: Default::default(),
            auth: cfg.auth.clone(),
            digest_cache: Default::default(),
            peer_apart: cfg.peer_listen.is_some(),
            cluster_secret: cfg
                .cluster_secret
                .as_deref()
                .map(|s| Arc::new(crate::server::peer_auth::ClusterSecret::new(s))),
            redispatch_waits: Default::default(),
            contact: Default::default(),
            removal: removal.clone(),
            rtt,
        });
        let mut tasks = vec![
            tokio::spawn(crate::raft::digest_warmer::warm_loop(
                state.data.clone(),
                state.digest_cache.clone(),
            )),
            tokio::spawn(crate::raft::snapshot_policy::snapshot_loop(
                cfg.id,
                raft.clone(),
                state.log_stats.clone(),
                snapshot_bytes,
                cfg.snapshot_every,
            )),
            tokio::spawn(crate::dispatcher::liveness::health_monitor(
                raft.clone(),
                state.data.clone(),
                state.proposer.clone(),
                state.liveness.clone(),
                cfg.dispatch.clone(),
            )),
            tokio::spawn(crate::dispatcher::recovery::recovery_loop(
                raft.clone(),
                state.data.clone(),
                state.proposer.clone(),
                cfg.dispatch.clone(),
                cfg.clock.clone(),
                state.redispatch_waits.clone(),
            )),
            tokio::spawn(crate::dispatcher::cycle::schedule_loop(
                raft.clone(),
                crate::dispatcher::cycle::StateSource {
                    data: state.data.clone(),
                    copy_slot,
                },
                state.proposer.clone(),
                state.liveness.clone(),
                cfg.dispatch.clone(),
                state.last_cycle.clone(),
                state.metrics.clone(),
            )),
            tokio::spawn(crate::dispatcher::tidal::tidal_loop(
                raft.clone(),
                state.data.clone(),
                state.proposer.clone(),
                state.clock.clone(),
            )),
            tokio::spawn(crate::dispatcher::webhooks::webhook_loop(
                raft.clone(),
                state.data.clone(),
                state.proposer.clone(),
                cfg.clock.clone(),
                Default::default(),
            )),
            tokio::spawn(crate::dispatcher::rollout::rollout_loop(
                raft.clone(),
                state.data.clone(),
                state.proposer.clone(),
                state.clock.clone(),
            )),
            tokio::spawn(crate::dispatcher::retention::compaction_loop(
                raft.clone(),
                state.data.clone(),
                state.proposer.clone(),
                cfg.dispatch.clone(),
                cfg.clock.clone(),
            )),
        ];
        tasks.push(tokio::spawn(crate::raft::removal::watch_membership(
            raft.clone(),
            removal,
        )));
        tasks.push(tokio::spawn(crate::raft::leader_watch::watch_loop(
            crate::raft::leader_watch::Watcher {
                raft: raft.clone(),
                http: http.clone(),
                plane: plane_for_watch,
                filter: state.filter.clone(),
                contact: state.contact.clone(),
                cfg: crate::raft::leader_watch::WatchConfig::for_lease(Duration::from_millis(
                    cfg.election_timeout_ms.1,
                )),
                metrics: state.metrics.clone(),
                reports: peer_reports,
            },
        )));
        let tls = cfg.tls.as_ref().map(|t| t.server_config()).transpose()?;
        let (addr, task) = serve(
            &cfg.listen,
            tls.clone(),
            server::router(state.clone()),
            cfg.conn_limits,
        )
        .await?;
        tasks.push(task);
        let peer_addr = match &cfg.peer_listen {
            Some(listen) => {
                let (peer, task) = serve(
                    listen,
                    tls.clone(),
                    server::peer_router(state.clone()),
                    cfg.conn_limits,
                )
                .await?;
                tasks.push(task);
                tracing::info!(%peer, "peer plane listening apart from the API");
                Some(peer)
            }
            None => None,
        };
        let node = Node {
            raft,
            state,
            addr,
            peer_addr,
            tasks,
            log: kept_log,
        };
        node.bootstrap_or_join(&cfg).await?;
        Ok(node)
    }

    async fn bootstrap_or_join(&self, cfg: &NodeConfig) -> Result<(), NodeError> {
        let initialized = self
            .raft
            .is_initialized()
            .await
            .map_err(|e| NodeError::Raft(e.to_string()))?;
        if initialized {
            tracing::info!(id = cfg.id, "restarting with existing state");
            return Ok(());
        }
        let me = NodeInfo::new(
            cfg.advertise_addr(),
            cfg.peer_advertise
                .clone()
                .or_else(|| self.peer_addr.clone()),
        );
        match &cfg.join {
            None => {
                tracing::info!(id = cfg.id, "bootstrapping a new one-node cluster");
                self.raft
                    .initialize(BTreeMap::from([(cfg.id, me)]))
                    .await
                    .map_err(|e| NodeError::Raft(e.to_string()))?;
                Ok(())
            }
            Some(via) => {
                let req = JoinRequest {
                    id: cfg.id,
                    addr: me.addr,
                    peer_addr: me.peer_addr,
                    promote: cfg.auto_promote,
                };
                let plane = PeerPlane::new(cfg.tls.is_some(), cfg.cluster_secret.clone());
                match join_through(&plane, via, &req, cfg.join_token.as_deref()).await {
                    // Added as a learner, but not caught up within the leader's wait (a large
                    // state to copy): keep serving as a learner and ask again until promoted,
                    // rather than failing the start.
                    Err(NodeError::Join { reason, .. })
                        if req.promote && reason.contains("has not caught up") =>
                    {
                        tracing::info!(
                            id = cfg.id,
                            "joined as a learner; asking for promotion until it has caught up"
                        );
                        tokio::spawn(promote_until_voter(
                            plane,
                            via.clone(),
                            cfg.id,
                            cfg.join_token.clone(),
                        ));
                        Ok(())
                    }
                    other => other,
                }
            }
        }
    }

    /// Stops serving and shuts Raft down cleanly.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.raft.shutdown().await;
        // A clean stop keeps everything it applied: restarted, the node replays up to here at
        // once, instead of waiting for a leader to commit again.
        if let Err(e) = self.log.flush_committed().await {
            tracing::warn!(error = %e, "writing the committed log id on shutdown");
        }
    }
}

/// Binds `listen` and serves `app` on it, over TLS when a configuration is given; answers
/// the bound address.
async fn serve(
    listen: &str,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: axum::Router,
    limits: crate::listen::ConnLimits,
) -> Result<(String, tokio::task::JoinHandle<()>), NodeError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| NodeError::Listen {
            addr: listen.to_string(),
            source,
        })?;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| listen.to_string());
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let task = tokio::spawn(crate::listen::serve(listener, tls, app, limits));
    Ok((addr, task))
}

/// Asks a member to add this node, retrying (with backoff and jitter) while the cluster
/// elects or is busy.
/// Asks through `via` for this node's promotion every few seconds until it is a voter; an
/// answer that it already is one ends it too (promotion is idempotent on the leader).
async fn promote_until_voter(plane: PeerPlane, via: String, id: u64, token: Option<String>) {
    let Ok(http) = tideway_api::http::client_builder().build() else {
        return;
    };
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut r = plane.authorize(http.post(plane.url(&via, "/v1/cluster/promote")));
        if let Some(t) = &token {
            r = r.bearer_auth(t);
        }
        match r
            .json(&tideway_api::cluster::PromoteRequest { id })
            .timeout(Duration::from_secs(60))
            .send()
            .await
        {
            Ok(resp) if resp.status().is_success() => {
                tracing::info!(id, "promoted to voter");
                return;
            }
            Ok(resp) if resp.status().is_client_error() && resp.status().as_u16() != 409 => {
                let status = resp.status();
                let body = resp.text().await.unwrap_or_default();
                tracing::warn!(id, %status, %body, "promotion refused; staying a learner");
                return;
            }
            Ok(_) | Err(_) => {}
        }
    }
}

async fn join_through(
    plane: &PeerPlane,
    via: &str,
    req: &JoinRequest,
    token: Option<&str>,
) -> Result<(), NodeError> {
    let id = req.id;
    let http = tideway_api::http::client_builder()
        .build()
        .map_err(|e| NodeError::Raft(e.to_string()))?;
    let attempt = || async {
        let mut r = plane.authorize(http.post(plane.url(via, "/v1/cluster/join")));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = r
            .json(req)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if r.status().is_success() {
            return Ok(());
        }
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        Err(format!("HTTP {status}: {body}"))
    };
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(Duration::from_secs(30)));
    attempt
        .retry(backoff)
        .notify(|e, wait| tracing::info!(via, error = %e, ?wait, "join refused; retrying"))
        .await
        .map_err(|reason| NodeError::Join {
            via: via.to_string(),
            reason,
        })?;
    tracing::info!(id, via, "joined the cluster");
    Ok(())
}
