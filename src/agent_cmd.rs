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
use tideway_agent::sim::{Clock, Inventory, RealClock, ScaledClock, SimBackend, SimCluster};
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
    /// The member cluster's name in the federation.
    #[arg(long)]
    pub cluster: String,
    #[arg(long)]
    pub region: String,
    #[arg(long)]
    pub zone: Option<String>,
    /// Federation nodes, comma-separated; any of them may answer.
    #[arg(long, value_delimiter = ',', required = true)]
    pub federation: Vec<String>,
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
    /// Backend configuration: for `sim`, the cluster layout (YAML).
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
}

/// A small built-in layout for a `sim` agent started without `--config`.
const DEFAULT_SIM: &[u8] = include_bytes!("../deploy/dev/sim-eu.yaml");

pub fn sim_backend(a: &AgentArgs, layout: Option<&[u8]>) -> anyhow::Result<SimBackend> {
    let bytes = match (&a.config, layout) {
        (Some(p), _) => std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        (None, Some(l)) => l.to_vec(),
        (None, None) => DEFAULT_SIM.to_vec(),
    };
    let inventory = Inventory::from_yaml(&bytes).context("the sim cluster layout")?;
    let clock: Arc<dyn Clock> = if (a.time_scale - 1.0).abs() < f64::EPSILON {
        Arc::new(RealClock)
    } else {
        Arc::new(ScaledClock::new(chrono::Utc::now(), a.time_scale)?)
    };
    let fresh = || SimCluster::new(&inventory);
    Ok(match &a.data {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            SimBackend::persisted(&dir.join("sim-cluster.state"), fresh, clock)?
        }
        None => SimBackend::new(fresh(), clock),
    })
}

pub fn agent_config(a: &AgentArgs) -> AgentConfig {
    let mut cfg = AgentConfig::new(&a.cluster, &a.region, a.federation.clone());
    cfg.zone = a.zone.clone();
    cfg.heartbeat_interval = Duration::from_millis(a.heartbeat_ms.max(100));
    cfg
}

#[derive(Clone)]
struct LocalView {
    backend: SimBackend,
    cluster: String,
}

async fn local(State(v): State<LocalView>) -> Json<serde_json::Value> {
    let statuses = v.backend.statuses().await.unwrap_or_default();
    let creations = v
        .backend
        .cluster()
        .lock()
        .map(|c| c.creations())
        .unwrap_or(0);
    Json(serde_json::json!({
        "cluster": v.cluster,
        "creations": creations,
        "workloads": statuses,
    }))
}

pub async fn agent(a: AgentArgs, stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    match a.backend {
        BackendKind::Sim => {
            let backend = sim_backend(&a, None)?;
            if let Some(addr) = &a.listen {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("listening on {addr}"))?;
                let app = axum::Router::new()
                    .route("/healthz", get(|| async { "ok" }))
                    .route("/v1/local", get(local))
                    .with_state(LocalView {
                        backend: backend.clone(),
                        cluster: a.cluster.clone(),
                    });
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app).await;
                });
            }
            run(agent_config(&a), Arc::new(backend), stop).await?;
            Ok(())
        }
        BackendKind::Kube => bail!("the kube backend is not built into this binary yet"),
    }
}
