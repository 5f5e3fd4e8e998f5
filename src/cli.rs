//! Command-line verbs. Every client verb takes `--addr` (default `TIDEWAY_ADDR`, then
//! `127.0.0.1:7400`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use tideway_agent::sim_agent::{Layout, SimAgent};
use tideway_api::WorkloadPhase;
use tideway_api::auth::{TokenEntry, TokenFile};
use tideway_api::client::{Client, ListQuery};
use tideway_api::cluster::{ClusterReport, NodeReport};
use tideway_federation::server::auth::{Authenticator, generate_token, hash_token};
use tideway_federation::{Node, NodeConfig};

use crate::bench;
use crate::output;

pub const DEFAULT_ADDR: &str = "127.0.0.1:7400";

#[derive(Parser, Debug)]
#[command(
    name = "tideway",
    version,
    about = "Multi-cluster federation control plane for GPU fleets"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Args, Debug, Clone)]
pub struct Target {
    /// Address of any federation node.
    /// Address of any federation node (default: the current context of the CLI
    /// configuration, then 127.0.0.1:7400).
    #[arg(long, env = "TIDEWAY_ADDR", global = true)]
    pub addr: Option<String>,
    /// Bearer token for a federation that requires one (default: the current context's).
    #[arg(long, env = "TIDEWAY_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

impl Target {
    /// The address and token to use, after the CLI configuration.
    fn resolve(&self) -> anyhow::Result<(String, Option<String>)> {
        let cfg = match crate::config::path() {
            Some(p) => crate::config::CliConfig::load(&p)?,
            None => Default::default(),
        };
        Ok(crate::config::resolve(
            self.addr.as_deref(),
            self.token.as_deref(),
            &cfg,
            DEFAULT_ADDR,
        ))
    }

    /// A client of the node at `--addr` that sends the token, if any.
    pub fn client(&self) -> anyhow::Result<Client> {
        let (addr, token) = self.resolve()?;
        Ok(Client::with_token(&addr, token.as_deref())?)
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Table,
    Wide,
    Json,
    Yaml,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run a federation node.
    Server(ServerArgs),
    /// Run everything on one machine on the embedded default: a one-node federation and three
    /// simulated member clusters in three regions.
    Dev(DevArgs),
    /// Run a member-cluster agent.
    Agent(crate::agent_cmd::AgentArgs),
    /// Submit a workload from a YAML or JSON file (`-` for standard input).
    Submit {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Reuse a key to make a retried submission safe; generated when absent.
        #[arg(long)]
        idempotency_key: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Show one workload by name or UID.
    Get {
        id: String,
        #[arg(short = 'o', long, value_enum, default_value = "yaml")]
        output: OutputFormat,
        /// Read this node's possibly stale copy instead of a linearizable read.
        #[arg(long)]
        stale: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Cancel a pending or running workload by name or UID; its member stops it.
    Cancel {
        id: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// The audit trail: who changed what, when, under which policy version.
    Events {
        #[arg(long)]
        workload: Option<String>,
        #[arg(long)]
        queue: Option<String>,
        /// Submitted, Assigned, Preempted, Running, Succeeded, Failed, Requeued, Cancelled,
        /// Compacted, PolicyChanged, MemberRegistered, MemberHealth (any case).
        #[arg(long)]
        kind: Option<String>,
        /// Only records at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// `json` prints JSON lines, one record each (for export).
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// List workloads.
    List {
        #[arg(long)]
        queue: Option<String>,
        /// Only workloads in this phase (`running`, `pending`, ...; any case).
        #[arg(long)]
        phase: Option<WorkloadPhase>,
        /// Page size; all pages are fetched unless --no-paging.
        #[arg(long, default_value_t = 500)]
        limit: usize,
        #[arg(long)]
        no_paging: bool,
        #[arg(long)]
        stale: bool,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Why a workload is pending (or where it runs), with the per-cluster breakdown.
    Explain {
        id: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Create or replace a Queue or PriorityClass from a YAML or JSON file.
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[command(flatten)]
        target: Target,
    },
    /// Queues, their quotas and pending work.
    Queues {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// The fleet's GPU capacity: fleet, regions, flavors, clusters, pools and domains.
    Capacity {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[arg(long)]
        stale: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Member clusters and their health.
    Members {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Cordon, uncordon, drain or remove a member cluster.
    Member {
        #[command(subcommand)]
        cmd: MemberCmd,
    },
    /// Federation membership and health.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Tidal quota schedules.
    Schedule {
        #[command(subcommand)]
        cmd: ScheduleCmd,
    },
    /// Replay workload traces against a simulated fleet and a policy, on a virtual clock.
    Simulate(crate::simulate_cmd::SimulateArgs),
    /// Benchmarks that start their own processes.
    Bench {
        #[command(subcommand)]
        cmd: bench::BenchCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum MemberCmd {
    /// Take no new work; running work is left alone.
    Cordon {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Take new work again.
    Uncordon {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Take no new work, and checkpoint and move the work it runs to other members.
    Drain {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Forget a member that holds no active work (drain it and stop its agent first).
    Remove {
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum ScheduleCmd {
    /// The current window, the next transition, and the quota per pool or queue hour by hour.
    Show {
        name: String,
        /// How many hours of timeline (a week by default).
        #[arg(long, default_value_t = 168)]
        hours: u32,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum ClusterCmd {
    /// Leader, term, members, and each member's last applied index.
    Status {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a member.
    Remove {
        #[arg(long)]
        id: u64,
        #[command(flatten)]
        target: Target,
    },
    /// Build a snapshot on the node at --addr now and purge the log it covers.
    Snapshot {
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// This node's Raft id (unique, stable across restarts).
    #[arg(long)]
    pub id: u64,
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub listen: String,
    /// Address others use to reach this node (defaults to --listen).
    #[arg(long)]
    pub advertise: Option<String>,
    #[arg(long)]
    pub data: PathBuf,
    /// Join the cluster through this member instead of bootstrapping a new one.
    #[arg(long)]
    pub join: Option<String>,
    /// Allow `/v1/debug/partition` (tests only).
    #[arg(long, hide = true)]
    pub fault_injection: bool,
    /// Largest `spec.template` accepted, in bytes of JSON.
    #[arg(long, default_value_t = tideway_federation::server::DEFAULT_MAX_TEMPLATE_BYTES)]
    pub max_template_bytes: usize,
    /// Raft heartbeat period (ms).
    #[arg(long, default_value_t = tideway_federation::node::DEFAULT_HEARTBEAT_MS)]
    pub heartbeat_ms: u64,
    /// Raft election timeout range (ms); a dead leader is replaced about max + rand(min, max)
    /// after its last heartbeat. Raise both on slow or overloaded hosts.
    #[arg(long, default_value_t = tideway_federation::node::DEFAULT_ELECTION_TIMEOUT_MS.0)]
    pub election_timeout_min_ms: u64,
    /// See `--election-timeout-min-ms`.
    #[arg(long, default_value_t = tideway_federation::node::DEFAULT_ELECTION_TIMEOUT_MS.1)]
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many log entries.
    #[arg(long, default_value_t = 20_000)]
    pub snapshot_every: u64,
    /// How often member agents are expected to heartbeat.
    #[arg(long, default_value_t = 2000)]
    pub member_heartbeat_ms: u64,
    /// Missed heartbeats (multiples of the interval) before a member is NotReady.
    #[arg(long, default_value_t = 3)]
    pub member_missed_heartbeats: u32,
    /// A member NotReady this long is lost: its work is moved to other members.
    #[arg(long, default_value_t = 60_000)]
    pub member_lost_after_ms: u64,
    /// Workloads moved off lost members per second, in the whole fleet.
    #[arg(long, default_value_t = 20.0)]
    pub redispatch_per_second: f64,
    /// Workloads moved off lost members per second, off any one member.
    #[arg(long, default_value_t = 5.0)]
    pub redispatch_per_member_per_second: f64,
    /// Keep finished, failed and cancelled workloads readable this many seconds, then
    /// compact them out of the live state (their names become free again).
    #[arg(long, default_value_t = 3600)]
    pub retain_terminal: u64,
    /// Require a bearer token from this file (YAML: `tokens: [{subject, groups, sha256}]`,
    /// SHA-256 digests only) on every API request.
    #[arg(long)]
    pub auth_tokens: Option<PathBuf>,
    /// Serve without authentication on a non-loopback address.
    #[arg(long)]
    pub insecure_allow_anonymous: bool,
    /// A file holding the bearer token this node sends when it joins through --join.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

/// Whether `listen` binds only the loopback interface.
fn is_loopback(listen: &str) -> bool {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(a) => a.ip().is_loopback(),
        Err(_) => listen
            .rsplit_once(':')
            .is_some_and(|(host, _)| host == "localhost"),
    }
}

/// The simulated member clusters of `tideway dev`: name, region, layout.
const DEV_MEMBERS: [(&str, &str, &[u8]); 3] = [
    (
        "sim-eu",
        "eu-west",
        include_bytes!("../deploy/dev/sim-eu.yaml"),
    ),
    (
        "sim-us",
        "us-east",
        include_bytes!("../deploy/dev/sim-us.yaml"),
    ),
    (
        "sim-ap",
        "ap-south",
        include_bytes!("../deploy/dev/sim-ap.yaml"),
    ),
];

#[derive(Args, Debug)]
pub struct DevArgs {
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub listen: String,
    /// Keep state here (kept on exit); a fresh temporary directory, removed on exit, when
    /// absent.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Run the simulated clusters' time this many times faster than the wall clock.
    #[arg(long, default_value_t = 60.0)]
    pub time_scale: f64,
    /// Start the fleet's clock at this instant (RFC 3339, e.g. 2026-01-05T12:00:00+01:00)
    /// instead of now: tidal windows then open at the same moments on every run.
    #[arg(long, value_parser = parse_start_at)]
    pub start_at: Option<chrono::DateTime<chrono::Utc>>,
}

fn parse_start_at(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("not an RFC 3339 time ({e}), e.g. 2026-01-05T12:00:00Z"))
}

impl Cli {
    pub fn default_log_filter(&self) -> &'static str {
        match self.cmd {
            Cmd::Server(_) | Cmd::Dev(_) | Cmd::Agent(_) => "info,openraft=warn",
            _ => "warn",
        }
    }

    pub async fn run(self) -> anyhow::Result<()> {
        match self.cmd {
            Cmd::Server(a) => server(a).await,
            Cmd::Dev(a) => dev(a).await,
            Cmd::Agent(crate::agent_cmd::AgentArgs {
                action: Some(crate::agent_cmd::AgentAction::Fault { agent, node, kind }),
                ..
            }) => crate::agent_cmd::fault(&agent, &node, kind).await,
            Cmd::Agent(a) => {
                let (tx, rx) = tokio::sync::watch::channel(false);
                let run = tokio::spawn(crate::agent_cmd::agent(a, rx));
                tokio::select! {
                    r = run => r??,
                    _ = wait_for_signal() => { let _ = tx.send(true); }
                }
                Ok(())
            }
            Cmd::Submit {
                file,
                idempotency_key,
                output,
                target,
            } => {
                let (body, yaml) = read_manifest(&file)?;
                let client = target.client()?;
                let (w, created) = client
                    .submit_raw(body, yaml, idempotency_key.as_deref())
                    .await?;
                if output == OutputFormat::Table {
                    let verb = if created {
                        "created"
                    } else {
                        "unchanged (idempotent replay)"
                    };
                    println!("workload/{} {verb}", w.metadata.name);
                } else {
                    output::print_one(&w, output)?;
                }
                Ok(())
            }
            Cmd::Get {
                id,
                output,
                stale,
                target,
            } => {
                let w = target.client()?.get(&id, stale).await?;
                output::print_one(&w, output)
            }
            Cmd::Cancel { id, output, target } => {
                let w = target.client()?.cancel(&id).await?;
                if output == OutputFormat::Table {
                    println!("workload/{} cancelled", w.metadata.name);
                } else {
                    output::print_one(&w, output)?;
                }
                Ok(())
            }
            Cmd::Events {
                workload,
                queue,
                kind,
                since,
                output,
                target,
            } => {
                let mut params: Vec<(&str, String)> = Vec::new();
                for (k, v) in [
                    ("workload", workload),
                    ("queue", queue),
                    ("kind", kind),
                    ("since", since),
                ] {
                    if let Some(v) = v {
                        params.push((k, v));
                    }
                }
                let list = target.client()?.events(&params).await?;
                output::print_events(&list.items, output)
            }
            Cmd::List {
                queue,
                phase,
                limit,
                no_paging,
                stale,
                output,
                target,
            } => {
                let client = target.client()?;
                let mut q = ListQuery {
                    queue,
                    phase,
                    limit: Some(limit),
                    after: None,
                    stale,
                };
                let mut items = Vec::new();
                loop {
                    let page = client.list(&q).await?;
                    items.extend(page.items);
                    match page.continue_ {
                        Some(c) if !no_paging => q.after = Some(c),
                        _ => break,
                    }
                }
                output::print_workloads(&items, output)
            }
            Cmd::Explain { id, output, target } => {
                let v = target.client()?.explain(&id).await?;
                output::print_explain(&v, output)
            }
            Cmd::Apply { file, target } => {
                let (body, yaml) = read_manifest(&file)?;
                let applied = target.client()?.apply_raw(body, yaml).await?;
                println!(
                    "{}/{} configured",
                    applied.kind().to_lowercase(),
                    applied.metadata().name
                );
                Ok(())
            }
            Cmd::Queues { output, target } => {
                let v = target.client()?.queues().await?;
                output::print_queues(&v, output)
            }
            Cmd::Capacity {
                output,
                stale,
                target,
            } => {
                let v = target.client()?.capacity(stale).await?;
                output::print_capacity(&v, output)
            }
            Cmd::Members { output, target } => {
                let v = target.client()?.members().await?;
                output::print_members(&v, output)
            }
            Cmd::Member { cmd } => member(cmd).await,
            Cmd::Cluster { cmd } => cluster(cmd).await,
            Cmd::Schedule {
                cmd:
                    ScheduleCmd::Show {
                        name,
                        hours,
                        output,
                        target,
                    },
            } => {
                let v = target.client()?.schedule_timeline(&name, hours).await?;
                output::print_schedule(&v, output)
            }
            Cmd::Simulate(a) => crate::simulate_cmd::run(a).await,
            Cmd::Bench { cmd } => bench::run(cmd).await,
        }
    }
}

async fn member(cmd: MemberCmd) -> anyhow::Result<()> {
    use tideway_api::client::MemberAction;
    let (name, target, action) = match cmd {
        MemberCmd::Cordon { name, target } => (name, target, Some(MemberAction::Cordon)),
        MemberCmd::Uncordon { name, target } => (name, target, Some(MemberAction::Uncordon)),
        MemberCmd::Drain { name, target } => (name, target, Some(MemberAction::Drain)),
        MemberCmd::Remove { name, target } => (name, target, None),
    };
    let client = target.client()?;
    match action {
        Some(a) => {
            let m = client.member_lifecycle(&name, a).await?;
            let phase = m.status.map(|s| s.phase).unwrap_or_default();
            println!(
                "member/{} {}ed (phase {phase:?})",
                m.metadata.name,
                a.as_str()
            );
        }
        None => {
            let m = client.member_remove(&name).await?;
            println!("member/{} removed", m.metadata.name);
        }
    }
    Ok(())
}

fn read_manifest(file: &PathBuf) -> anyhow::Result<(Vec<u8>, bool)> {
    let body = if file.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)?;
        b
    } else {
        std::fs::read(file).with_context(|| format!("reading {}", file.display()))?
    };
    let is_json = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        || body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    Ok((body, !is_json))
}

async fn server(a: ServerArgs) -> anyhow::Result<()> {
    let auth = match &a.auth_tokens {
        Some(path) => Some(std::sync::Arc::new(Authenticator::from_file(path)?)),
        None if is_loopback(&a.listen) || a.insecure_allow_anonymous => None,
        None => anyhow::bail!(
            "refusing to serve {} without authentication: pass --auth-tokens FILE, or \
             --insecure-allow-anonymous to accept anyone who can reach it",
            a.listen
        ),
    };
    let mut cfg = NodeConfig::new(a.id, a.listen, a.data);
    cfg.auth = auth;
    if let Some(path) = &a.token_file {
        let t = std::fs::read_to_string(path)
            .with_context(|| format!("reading the token file {}", path.display()))?;
        cfg.join_token = Some(t.trim().to_string());
    }
    cfg.advertise = a.advertise;
    cfg.join = a.join;
    cfg.fault_injection = a.fault_injection;
    cfg.limits.max_template_bytes = a.max_template_bytes;
    cfg.heartbeat_ms = a.heartbeat_ms;
    cfg.election_timeout_ms = (a.election_timeout_min_ms, a.election_timeout_max_ms);
    cfg.snapshot_every = a.snapshot_every;
    let hb = std::time::Duration::from_millis(a.member_heartbeat_ms.max(100));
    cfg.dispatch.heartbeat_interval = hb;
    cfg.dispatch.not_ready_after = hb * a.member_missed_heartbeats.max(1);
    cfg.dispatch.retain_terminal = std::time::Duration::from_secs(a.retain_terminal);
    cfg.dispatch.compaction_interval =
        std::time::Duration::from_secs(a.retain_terminal.clamp(1, 10));
    cfg.dispatch.member_lost_after = std::time::Duration::from_millis(a.member_lost_after_ms);
    cfg.dispatch.redispatch_per_second = a.redispatch_per_second.max(0.1);
    cfg.dispatch.redispatch_per_member_per_second = a.redispatch_per_member_per_second.max(0.1);
    let node = Node::start(cfg).await?;
    tracing::info!(addr = %node.addr, "federation node serving");
    wait_for_signal().await;
    tracing::info!("shutting down");
    node.shutdown().await;
    Ok(())
}

async fn dev(a: DevArgs) -> anyhow::Result<()> {
    // Dropped (and so removed) when dev returns, after the node and agents have stopped.
    let (dir, _tmp) = match a.data {
        Some(d) => (d, None),
        None => {
            let t = tempfile::Builder::new()
                .prefix("tideway-dev-")
                .tempdir()
                .context("creating a temporary data directory")?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    // One clock for the whole fleet: the simulated members stamp their reports with it and
    // the leader compares those stamps with its own now (minimum runtimes before preemption,
    // digest ages), so both must read the same, scaled, time.
    let clock = tideway_agent::sim_agent::sim_clock_from(a.time_scale, a.start_at)?;
    // One command, yet not open to anyone on the machine: a fresh admin token every start,
    // only its digest in the server, the token itself in the CLI configuration.
    let token = generate_token().map_err(|_| anyhow::anyhow!("no randomness for a token"))?;
    let tokens = TokenFile {
        tokens: vec![TokenEntry {
            subject: "admin".into(),
            groups: vec!["system:admins".into()],
            sha256: hash_token(&token),
        }],
    };
    let mut node_cfg = NodeConfig::new(1, a.listen, dir.clone());
    node_cfg.clock = clock.clone();
    // Reads stay open on loopback, so the dashboard needs no token; every change needs it.
    node_cfg.auth = Some(std::sync::Arc::new(
        Authenticator::new(tokens).with_anonymous_reads(),
    ));
    let node = Node::start(node_cfg).await?;
    if let Some(p) = crate::config::path() {
        let mut c = crate::config::CliConfig::load(&p).unwrap_or_default();
        c.set_current(crate::config::CliContext {
            name: "dev".into(),
            server: node.addr.clone(),
            token: Some(token.clone()),
        });
        if let Err(e) = c.save(&p) {
            tracing::warn!(error = %e, "could not write the CLI configuration");
        }
    }
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut agents = Vec::new();
    for (name, region, layout) in DEV_MEMBERS {
        let args = crate::agent_cmd::AgentArgs {
            cluster: Some(name.to_string()),
            region: Some(region.to_string()),
            zone: None,
            federation: vec![node.addr.clone()],
            backend: crate::agent_cmd::BackendKind::Sim,
            config: None,
            data: Some(dir.join(format!("agent-{name}"))),
            listen: None,
            heartbeat_ms: 2000,
            time_scale: a.time_scale,
            token_file: None,
            token: Some(token.clone()),
            action: None,
        };
        let sim = SimAgent::build(&args.sim_options(Layout::Bytes(layout), clock.clone()))?;
        let cfg = args.agent_config(&sim.cluster, &sim.region, args.federation.clone());
        agents.push(tokio::spawn(tideway_agent::agent::run(
            cfg,
            std::sync::Arc::new(sim.backend),
            stop.clone(),
        )));
    }
    apply_dev_schedule(&node.addr, &token).await;
    println!("Tideway dev: a one-node federation and three simulated member clusters");
    for (name, region, _) in DEV_MEMBERS {
        println!("  member:   {name} ({region}, simulated)");
    }
    println!("  dashboard: http://{}/ui/", node.addr);
    println!("  API:      http://{}/v1/workloads", node.addr);
    println!("  status:   http://{}/v1/cluster/status", node.addr);
    println!("  metrics:  http://{}/metrics", node.addr);
    println!("  data:     {}", dir.display());
    println!("  capacity: http://{}/v1/capacity", node.addr);
    println!(
        "Try: tideway submit -f api/testdata/workload-llama-ft.yaml --addr {}",
        node.addr
    );
    println!("     tideway capacity --addr {}", node.addr);
    println!("     tideway schedule show day-night --addr {}", node.addr);
    println!("The CLI's configuration has the token (context 'dev'); other clients send it as");
    println!("'Authorization: Bearer <token>':");
    println!("admin token: {token}");
    wait_for_signal().await;
    let _ = stop_tx.send(true);
    for a in agents {
        let _ = a.await;
    }
    node.shutdown().await;
    Ok(())
}

/// The day/night schedule `tideway dev` starts with.
const DEV_SCHEDULE: &str = include_str!("../deploy/dev/day-night.yaml");

/// Applies the dev schedule once the one-node federation has elected itself.
async fn apply_dev_schedule(addr: &str, token: &str) {
    let Ok(client) = Client::with_token(addr, Some(token)) else {
        return;
    };
    for _ in 0..50 {
        match client
            .apply_raw(DEV_SCHEDULE.as_bytes().to_vec(), true)
            .await
        {
            Ok(_) => return,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
    tracing::warn!("could not apply the dev day/night schedule");
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

async fn cluster(cmd: ClusterCmd) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Status { output, target } => {
            let client = target.client()?;
            let here = client.cluster_status().await?;
            let mut nodes = Vec::new();
            for (id, addr) in &here.members {
                let asked = Client::with_token(addr, target.resolve()?.1.as_deref())?
                    .cluster_status()
                    .await
                    .map_err(|e| e.to_string());
                nodes.push(NodeReport::new(*id, addr.clone(), asked));
            }
            let report = ClusterReport {
                leader: here.leader,
                learners: here.learners,
                nodes,
                term: here.term,
                voters: here.voters,
            };
            output::print_cluster(&report, output)
        }
        ClusterCmd::Remove { id, target } => {
            target.client()?.cluster_remove(id).await?;
            println!("node {id} removed");
            Ok(())
        }
        ClusterCmd::Snapshot { target } => {
            let ack = target.client()?.cluster_snapshot().await?;
            println!("{}", serde_json::to_string(&ack)?);
            Ok(())
        }
    }
}
