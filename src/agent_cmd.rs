//! `tideway agent`: a member-cluster agent process, and the in-process agents of `tideway dev`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::Json;
use axum::extract::State;
use axum::routing::get;
use clap::{Args, ValueEnum};
use tideway_agent::agent::{AgentConfig, run};
use tideway_agent::backend::Backend;
use tideway_agent::kube_backend::{KubeBackend, KubeConfig};
use tideway_agent::sim::{Clock, Inventory, RealClock, ScaledClock, SimBackend, SimCluster};
use tideway_api::agent::{FaultAck, FaultRequest, NodeFaultKind};
use tokio::sync::watch;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// An embedded simulated cluster with a local gang scheduler.
    Sim,
    /// A Kubernetes cluster running Volcano or Kueue.
    Kube,
}

#[derive(Args, Debug, Clone)]
pub struct AgentArgs {
    /// The member cluster's name in the federation (default: from the backend config).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Its region (default: from the backend config).
    #[arg(long)]
    pub region: Option<String>,
    #[arg(long)]
    pub zone: Option<String>,
    /// Federation nodes, comma-separated; any of them may answer (default: from the config).
    #[arg(long, value_delimiter = ',')]
    pub federation: Vec<String>,
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
    /// Backend configuration (YAML): for `sim`, the cluster layout; for `kube`, the agent file
    /// of `deploy/kubernetes/agent/configmap.yaml`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where a `sim` cluster keeps its state between agent runs.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Serve `/healthz` and `/v1/local` (the cluster's workloads as the agent sees them).
    #[arg(long)]
    pub listen: Option<String>,
    #[arg(long, default_value_t = 2000)]
    pub heartbeat_ms: u64,
    /// Run simulated time this many times faster than the wall clock.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    #[command(subcommand)]
    pub action: Option<AgentAction>,
}

/// What `tideway agent` does instead of running an agent.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum AgentAction {
    /// Inject a node fault into a running sim agent's cluster (tests and demos).
    Fault {
        /// The agent's `--listen` address.
        #[arg(long)]
        agent: String,
        /// The node, as the sim layout names it (e.g. `a-r1-n0`).
        #[arg(long)]
        node: String,
        /// `ecc` (checkpoint notice, node cordoned), `gpu` or `notready` (node out of
        /// service, its work stopped now).
        #[arg(long)]
        kind: NodeFaultKind,
    },
}

/// `tideway agent fault`: asks the agent at `agent` to inject the fault; prints what it hit.
pub async fn fault(agent: &str, node: &str, kind: NodeFaultKind) -> anyhow::Result<()> {
    let ack = tideway_api::client::Client::new(agent)?
        .agent_fault(&FaultRequest {
            node: node.to_string(),
            kind,
        })
        .await?;
    println!(
        "node/{} {:?} fault injected; {} workloads affected{}",
        ack.node,
        ack.kind,
        ack.affected.len(),
        if ack.affected.is_empty() {
            String::new()
        } else {
            format!(": {}", ack.affected.join(", "))
        }
    );
    Ok(())
}

/// `POST /v1/faults` on a sim agent.
async fn inject_fault(
    State(v): State<LocalView>,
    Json(req): Json<FaultRequest>,
) -> Result<Json<FaultAck>, (axum::http::StatusCode, Json<tideway_api::Problem>)> {
    match v.backend.node_fault(&req.node, req.kind) {
        Ok(affected) => Ok(Json(FaultAck {
            node: req.node,
            kind: req.kind,
            affected,
        })),
        Err(e) => Err((
            axum::http::StatusCode::BAD_REQUEST,
            Json(
                tideway_api::Problem::new("invalid", "The fault cannot be injected", 400)
                    .with_detail(e.to_string()),
            ),
        )),
    }
}

/// A small built-in layout for a `sim` agent started without `--config`.
const DEFAULT_SIM: &[u8] = include_bytes!("../deploy/dev/sim-eu.yaml");

/// The sim backend and the identity its layout gives (cluster, region).
pub fn sim_backend(
    a: &AgentArgs,
    layout: Option<&[u8]>,
) -> anyhow::Result<(SimBackend, String, String)> {
    let bytes = match (&a.config, layout) {
        (Some(p), _) => std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        (None, Some(l)) => l.to_vec(),
        (None, None) => DEFAULT_SIM.to_vec(),
    };
    let inventory = Inventory::from_yaml(&bytes).context("the sim cluster layout")?;
    let cluster = a
        .cluster
        .clone()
        .unwrap_or_else(|| inventory.cluster().to_string());
    let region = a
        .region
        .clone()
        .unwrap_or_else(|| inventory.region().to_string());
    let clock: Arc<dyn Clock> = if (a.time_scale - 1.0).abs() < f64::EPSILON {
        Arc::new(RealClock)
    } else {
        Arc::new(ScaledClock::new(chrono::Utc::now(), a.time_scale)?)
    };
    let fresh = || SimCluster::new(&inventory);
    let backend = match &a.data {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            SimBackend::persisted(&dir.join("sim-cluster.state"), fresh, clock)?
        }
        None => SimBackend::new(fresh(), clock),
    };
    Ok((backend, cluster, region))
}

/// The `kube` agent's file: where the federation is, and the backend's settings.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KubeAgentFile {
    /// One address or a comma-separated list.
    #[serde(default)]
    federation: Option<String>,
    #[serde(default)]
    region: Option<String>,
    kube: KubeConfig,
}

pub fn agent_config(
    a: &AgentArgs,
    cluster: &str,
    region: &str,
    federation: Vec<String>,
) -> AgentConfig {
    let mut cfg = AgentConfig::new(cluster, region, federation);
    cfg.zone = a.zone.clone();
    cfg.heartbeat_interval = Duration::from_millis(a.heartbeat_ms.max(100));
    cfg
}

#[derive(Clone)]
struct LocalView {
    backend: SimBackend,
    cluster: String,
}

async fn local(State(v): State<LocalView>) -> Json<tideway_api::agent::LocalView> {
    let statuses = v.backend.statuses().await.unwrap_or_default();
    let creations = v
        .backend
        .cluster()
        .lock()
        .map(|c| c.creations())
        .unwrap_or(0);
    Json(tideway_api::agent::LocalView {
        cluster: v.cluster.as_str().into(),
        creations,
        workloads: statuses,
    })
}

fn federation_of(a: &AgentArgs, file: Option<&str>) -> anyhow::Result<Vec<String>> {
    if !a.federation.is_empty() {
        return Ok(a.federation.clone());
    }
    match file {
        Some(f) => Ok(f
            .split(',')
            .map(|s| {
                s.trim()
                    .trim_start_matches("http://")
                    .trim_end_matches('/')
                    .to_string()
            })
            .filter(|s| !s.is_empty())
            .collect()),
        None => bail!("--federation is required (or `federation:` in the config file)"),
    }
}

pub async fn agent(a: AgentArgs, stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    match a.backend {
        BackendKind::Sim => {
            let (backend, cluster, region) = sim_backend(&a, None)?;
            let federation = federation_of(&a, None)?;
            let cfg = agent_config(&a, &cluster, &region, federation);
            // Nothing is shown before the work moved away while we were gone is stopped.
            tideway_agent::agent::fence(&cfg, &backend, &stop).await?;
            if let Some(addr) = &a.listen {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("listening on {addr}"))?;
                let app = axum::Router::new()
                    .route("/healthz", get(|| async { "ok" }))
                    .route("/v1/local", get(local))
                    .route("/v1/faults", axum::routing::post(inject_fault))
                    .with_state(LocalView {
                        backend: backend.clone(),
                        cluster: cluster.clone(),
                    });
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app).await;
                });
            }
            run(cfg, Arc::new(backend), stop).await?;
            Ok(())
        }
        BackendKind::Kube => {
            let path = a
                .config
                .as_ref()
                .context("--config is required with --backend kube")?;
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let file: KubeAgentFile = tideway_api::decode_yaml(&bytes).map_err(|e| {
                let f = e.to_field_error();
                anyhow::anyhow!("{}: {}: {}", path.display(), f.field, f.reason)
            })?;
            let cluster = a
                .cluster
                .clone()
                .unwrap_or_else(|| file.kube.cluster.clone());
            let region = a
                .region
                .clone()
                .or(file.region.clone())
                .context("--region is required (or `region:` in the config file)")?;
            let federation = federation_of(&a, file.federation.as_deref())?;
            let backend = KubeBackend::connect(file.kube).await?;
            let cfg = agent_config(&a, &cluster, &region, federation);
            run(cfg, Arc::new(backend), stop).await?;
            Ok(())
        }
    }
}
