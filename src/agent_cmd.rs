//! `tideway agent`: the flags of a member-cluster agent process, turned into the calls of
//! `tideway-agent` (which owns the agent file, the sim setup and the local HTTP view).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use tideway_agent::agent::{AgentConfig, run};
use tideway_agent::agent_file::KubeAgentFile;
use tideway_agent::kube_backend::KubeBackend;
use tideway_agent::sim_agent::{Layout, SimAgent, SimOptions, sim_clock};
use tideway_api::agent::{FaultRequest, NodeFaultKind};
use tideway_api::clock::SharedClock;
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
    /// Backend configuration (YAML): for `sim`, the cluster layout (as in
    /// `deploy/dev/sim-eu.yaml`); for `kube`, the agent file (as in
    /// `deploy/kubernetes/agent/agent.yaml`).
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
    /// A file holding the bearer token for a federation that requires one.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The token itself, for an agent started in-process (`tideway dev`).
    #[arg(skip)]
    pub token: Option<String>,
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

impl AgentArgs {
    /// The sim setup these flags ask for, on `clock`; `layout` stands in when `--config` is
    /// absent.
    pub fn sim_options(&self, layout: Layout, clock: SharedClock) -> SimOptions {
        SimOptions {
            layout: match &self.config {
                Some(p) => Layout::File(p.clone()),
                None => layout,
            },
            cluster: self.cluster.clone(),
            region: self.region.clone(),
            clock,
            data: self.data.clone(),
        }
    }

    /// The agent loop's configuration for a member with this identity.
    pub fn agent_config(
        &self,
        cluster: &str,
        region: &str,
        federation: Vec<String>,
    ) -> AgentConfig {
        let mut cfg = AgentConfig::new(cluster, region, federation);
        cfg.zone = self.zone.clone();
        cfg.heartbeat_interval = Duration::from_millis(self.heartbeat_ms.max(100));
        cfg.token = self.token.clone();
        cfg
    }

    /// `--federation`, else the file's `federation:`.
    fn federation(&self, from_file: Vec<String>) -> anyhow::Result<Vec<String>> {
        if !self.federation.is_empty() {
            return Ok(self.federation.clone());
        }
        if from_file.is_empty() {
            bail!("--federation is required (or `federation:` in the config file)");
        }
        Ok(from_file)
    }
}

pub async fn agent(mut a: AgentArgs, stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    if let Some(path) = &a.token_file {
        let t = std::fs::read_to_string(path)
            .with_context(|| format!("reading the token file {}", path.display()))?;
        a.token = Some(t.trim().to_string());
    }
    match a.backend {
        BackendKind::Sim => {
            let clock = sim_clock(a.time_scale).context("--time-scale")?;
            let sim = SimAgent::build(&a.sim_options(Layout::Default, clock))?;
            let federation = a.federation(Vec::new())?;
            let cfg = a.agent_config(&sim.cluster, &sim.region, federation);
            // Nothing is shown before the work moved away while we were gone is stopped: the
            // local view answers once the agent has fenced, registered and fenced again.
            let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
            // The view answers with the agent's lease held, so a resumed agent stops the work
            // its lapsed lease no longer covers before it shows anything.
            let lease = tideway_agent::agent::Lease::default();
            let view = tideway_agent::local_view::router(
                sim.backend.clone(),
                sim.cluster.clone(),
                ready_rx,
                lease.clone(),
            );
            let agent = tokio::spawn(tideway_agent::agent::run_with_ready(
                cfg,
                Arc::new(sim.backend),
                stop,
                Some(ready_tx),
                lease,
            ));
            if let Some(addr) = &a.listen {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("listening on {addr}"))?;
                tokio::spawn(async move {
                    let app = view.into_make_service_with_connect_info::<std::net::SocketAddr>();
                    if let Err(e) = axum::serve(listener, app).await {
                        tracing::warn!(error = %e, "the local view stopped");
                    }
                });
            }
            agent.await??;
            Ok(())
        }
        BackendKind::Kube => {
            let path = a
                .config
                .as_ref()
                .context("--config is required with --backend kube")?;
            let file = KubeAgentFile::load(path)?;
            let cluster = a
                .cluster
                .clone()
                .unwrap_or_else(|| file.kube.cluster.clone());
            let region = a
                .region
                .clone()
                .or(file.region.clone())
                .context("--region is required (or `region:` in the config file)")?;
            let federation = a.federation(file.federation_addrs())?;
            let backend = KubeBackend::connect(file.kube).await?;
            let cfg = a.agent_config(&cluster, &region, federation);
            run(cfg, Arc::new(backend), stop).await?;
            Ok(())
        }
    }
}
