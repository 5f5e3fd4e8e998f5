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
use tideway_federation::server::jwt::{JwtSettings, JwtVerifier};
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
    /// Log lines as text (colours only on a terminal) or as one JSON object per line, for
    /// log collectors.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "TIDEWAY_LOG_FORMAT", global = true)]
    pub log_format: LogFormat,
    /// Trust the certificate authorities in this PEM file when dialling federation nodes
    /// over https (CLI, agents, and a node's peer and join connections).
    #[arg(long, env = "TIDEWAY_CA_CERT", global = true)]
    pub ca_cert: Option<PathBuf>,
}

/// How `--log-format` writes log lines.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
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
        let client = Client::with_token(&addr, token.as_deref())?;
        crate::output::use_server_time(&client);
        Ok(client)
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// Columns for people, with AGE.
    #[default]
    Table,
    /// The table with more columns.
    Wide,
    Json,
    Yaml,
    /// `kind/name`, one resource a line (as `kubectl get -o name`), for scripts.
    Name,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run a federation node.
    Server(Box<ServerArgs>),
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
    /// Show one workload by name or UID: a table row (`-o yaml|json` for the whole object).
    Get {
        id: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        /// Read this node's possibly stale copy instead of a linearizable read.
        #[arg(long)]
        stale: bool,
        /// Stream the workload's changes until interrupted (`-o json`: JSON lines).
        #[arg(short = 'w', long)]
        watch: bool,
        /// With --watch: start after this resource version (resume where a watch stopped).
        #[arg(long, requires = "watch")]
        resource_version: Option<u64>,
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
        /// Compacted, PolicyChanged, MemberRegistered, MemberHealth, TidalTransition,
        /// PolicyRolledBack, AccessChanged, CheckpointRequested (any case).
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
        /// Stream changes of every workload you may read until interrupted (`-o json`: JSON
        /// lines).
        #[arg(short = 'w', long)]
        watch: bool,
        /// With --watch: start after this resource version (resume where a watch stopped).
        #[arg(long, requires = "watch")]
        resource_version: Option<u64>,
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
    /// Create or replace a Queue, PriorityClass, QuotaSchedule, Policy, Webhook or
    /// RoleBinding from a YAML or JSON file. Several YAML documents (`---`) are applied in
    /// order, their queues, priority classes and quota schedules as one policy version.
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[command(flatten)]
        target: Target,
    },
    /// Role bindings: who holds which role (create or replace them with `apply`).
    Rolebindings {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Delete a role binding by name (admin).
    DeleteRolebinding {
        name: String,
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
    /// GPU-hours per queue, tenant, flavor and day: guaranteed, borrowed and idle.
    Usage {
        /// Start: RFC 3339, or a date (midnight in --tz); the last 24 hours if left out.
        #[arg(long)]
        from: Option<String>,
        /// End: as --from; now if left out.
        #[arg(long)]
        to: Option<String>,
        /// IANA time zone days are cut in (default UTC).
        #[arg(long)]
        tz: Option<String>,
        /// Comma-separated: day, queue, tenant, flavor (default all).
        #[arg(long)]
        group_by: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: crate::usage_out::UsageFormat,
        #[arg(long)]
        stale: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Webhooks and their delivery state (last delivered, failures, last error).
    Webhooks {
        /// Delete this webhook instead of listing (its deliveries stop).
        #[arg(long, value_name = "NAME")]
        delete: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
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
    /// Policy versions: apply a bundle, history, diff, dry-run, rollback, widen a rollout.
    Policy {
        #[command(subcommand)]
        cmd: PolicyCmd,
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
    /// Print the API's OpenAPI 3.1 document (what a node serves at /openapi.json).
    Openapi,
    /// Bearer tokens for `server --auth-tokens`: make one and its file entry.
    Token {
        #[command(subcommand)]
        cmd: crate::token_cmd::TokenCmd,
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
        /// List the workloads a drain would move, and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Return once no workload is assigned to or running on the member (or after
        /// --timeout seconds, with an error), listing the workloads as they leave.
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait, in seconds.
        #[arg(long, default_value_t = 600, requires = "wait")]
        timeout: u64,
        #[command(flatten)]
        target: Target,
    },
    /// Forget a member that holds no active work (drain it and stop its agent first). Its
    /// agent may not register it again until it is re-admitted.
    Remove {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// Let a removed member's agent register it again.
    Readmit {
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum PolicyCmd {
    /// Apply a whole Policy bundle as the next version (all or nothing).
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// The retained versions, oldest first.
    History {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// One version as a document (`current` by default).
    Get {
        #[arg(default_value = "current")]
        version: String,
        #[arg(short = 'o', long, value_enum, default_value = "yaml")]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Field-level differences: version --from (default: current) against version --to or
    /// a candidate file -f.
    Diff {
        #[arg(long)]
        from: Option<u64>,
        #[arg(long, conflicts_with = "file")]
        to: Option<u64>,
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// What a candidate bundle would change now on the live state; nothing is applied.
    /// With --replay, the submissions of that last span replayed in the simulator instead.
    DryRun {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Replay the audit trail's submissions of this last span (`24h`, `90m`, `2d`)
        /// through the simulator under the current policy and the candidate.
        #[arg(long, value_parser = crate::policy_replay::parse_duration, requires = "clusters")]
        replay: Option<chrono::Duration>,
        /// The simulator fleet file the replay runs on (the federation knows digests, not
        /// node layouts).
        #[arg(long)]
        clusters: Option<PathBuf>,
        /// Tie-break seed of both simulated runs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Restore version --to (default: the rollout's base, or the previous version) as the
    /// next version.
    Rollback {
        #[arg(long)]
        to: Option<u64>,
        #[arg(short = 'm', long)]
        message: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Apply the version being rolled out to the whole fleet.
    Widen {
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
    /// What the next boundary will do on the live state: the quotas before and after, the
    /// running workloads it would reclaim (the leader's own cycle, run on a copy) and the
    /// GPU-hours they would lose.
    Next {
        name: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Every applied schedule: its zone, current window and next transition.
    List {
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
        /// Leave out each node's state digest (`?digest=false`): cheaper for a node under
        /// load, for scripts that only look for the leader or the applied indexes.
        #[arg(long)]
        no_digest: bool,
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
        /// `json`/`yaml`: the node's answer as it is.
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        target: Target,
    },
    /// Make a learner a voter (admin only); refused while it has not caught up with the
    /// leader's log.
    Promote {
        /// The learner's Raft id.
        id: u64,
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
    /// Requests per second each authenticated subject may send (429 beyond); 0 for no limit.
    #[arg(long, default_value_t = tideway_federation::server::DEFAULT_RATE_PER_SECOND)]
    pub rate_limit: f64,
    /// Requests a subject may send in a burst above --rate-limit.
    #[arg(long, default_value_t = tideway_federation::server::DEFAULT_RATE_BURST)]
    pub rate_burst: u32,
    /// The longest one API request may take (watches excepted), in ms; 0 for no bound.
    #[arg(long, default_value_t = tideway_federation::server::DEFAULT_REQUEST_TIMEOUT_MS)]
    pub request_timeout_ms: u64,
    /// How long a client may take to send a request's head, and how long a kept-alive
    /// connection may sit idle, in ms; the connection is closed after it. 0 for no bound.
    #[arg(long, default_value_t = tideway_federation::listen::DEFAULT_HEADER_READ_TIMEOUT_MS)]
    pub header_read_timeout_ms: u64,
    /// Connections one remote IP may hold that are not serving a request (unfinished heads,
    /// idle keep-alives); more are closed at accept. 0 for no cap.
    #[arg(long, default_value_t = tideway_federation::listen::DEFAULT_MAX_IDLE_CONNECTIONS_PER_IP)]
    pub max_idle_connections_per_ip: usize,
    /// Raft timing for where the nodes are: `lan` (the default: a dead leader replaced in
    /// under a second) or `wan` (nodes up to 150 ms apart: heartbeat 300 ms, election timeout
    /// 900-1800 ms). A node warns when the round trips it measures need `wan`.
    #[arg(long, value_enum, default_value = "lan",
          conflicts_with_all = ["heartbeat_ms", "election_timeout_min_ms", "election_timeout_max_ms"])]
    pub network: NetworkPreset,
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
    /// Build a snapshot after at least this many log entries (and once the log since the
    /// last snapshot is half as large as that snapshot, so a large state is not re-encoded
    /// often). Each node scales both by its own factor between 1 and 1.5, so that the nodes
    /// of a group do not all snapshot at once.
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
    /// A member back from NotReady more than this many times within `--flap-window-secs` is
    /// quarantined (no new work); 0 never quarantines.
    #[arg(long, default_value_t = 3)]
    pub flap_limit: u32,
    /// The window in which a member's returns from NotReady are counted.
    #[arg(long, default_value_t = 600)]
    pub flap_window_secs: u64,
    /// The first quarantine's length; a repeat within `--quarantine-max-secs` of the last
    /// one's end doubles it.
    #[arg(long, default_value_t = 300)]
    pub quarantine_secs: u64,
    /// The longest quarantine.
    #[arg(long, default_value_t = 3600)]
    pub quarantine_max_secs: u64,
    /// Keep finished, failed and cancelled workloads readable this many seconds, then
    /// compact them out of the live state (their names become free again).
    #[arg(long, default_value_t = 3600)]
    pub retain_terminal: u64,
    /// Audit trail retention: a count of records (`100000`) or an age (`30d`, `12h`, `90m`,
    /// `3600s`); the trail never holds more than 200,000 records.
    #[arg(long, value_parser = parse_audit_retain)]
    pub audit_retain: Option<AuditRetain>,
    /// Require a bearer token from this file (YAML: `tokens: [{subject, groups, sha256}]`,
    /// SHA-256 digests only) on every API request.
    #[arg(long)]
    pub auth_tokens: Option<PathBuf>,
    /// Serve without authentication on a non-loopback address.
    #[arg(long)]
    pub insecure_allow_anonymous: bool,
    /// Accept JWTs signed with this HS256 secret (a file of at least 32 bytes).
    #[arg(long)]
    pub jwt_hs256_secret_file: Option<PathBuf>,
    /// Accept JWTs signed by this RSA (RS256) or P-256 EC (ES256) public key (PEM).
    #[arg(long)]
    pub jwt_public_key_file: Option<PathBuf>,
    /// Accept JWTs signed by the keys of this JWKS file (read once; never fetched).
    #[arg(long)]
    pub jwt_jwks_file: Option<PathBuf>,
    /// Require this `iss` in JWTs.
    #[arg(long)]
    pub jwt_issuer: Option<String>,
    /// Require this `aud` in JWTs.
    #[arg(long)]
    pub jwt_audience: Option<String>,
    /// The JWT claim that lists the caller's groups.
    #[arg(long, default_value = tideway_federation::server::jwt::DEFAULT_GROUPS_CLAIM)]
    pub jwt_groups_claim: String,
    /// A file holding the bearer token this node sends when it joins through --join.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Serve the peer plane (Raft and node-to-node forwarding) on this address, apart from
    /// the API; the API port then answers 404 on the peer routes.
    #[arg(long)]
    pub peer_listen: Option<String>,
    /// Address other nodes use to reach the peer plane (defaults to --peer-listen's).
    #[arg(long, requires = "peer_listen")]
    pub peer_advertise: Option<String>,
    /// A file holding the cluster secret (at least 16 bytes), sent by this node on every
    /// peer request and required on every peer request it serves. Same file on every node.
    #[arg(long)]
    pub cluster_secret_file: Option<PathBuf>,
    /// Serve the peer plane on a non-loopback address without a cluster secret (anyone who
    /// reaches it can append to the Raft log: trusted networks only).
    #[arg(long)]
    pub insecure_peer_plane: bool,
    /// Serve the API and the peer plane over TLS with this certificate chain (PEM); peers are
    /// then dialled with https (trust their CA with --ca-cert).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// When joining, stay a learner (a read replica, or for an admin who promotes by hand
    /// with `tideway cluster promote ID`). Without it a joining node becomes a voter once it
    /// has caught up: the join carries an admin token, so an admin still decides.
    #[arg(long)]
    pub learner: bool,
    /// Accepted for older scripts: promotion after catching up is the default now.
    #[arg(long, hide = true, conflicts_with = "learner")]
    pub auto_promote: bool,
}

/// `tideway server --network`: Raft timing presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkPreset {
    /// One data centre: the timing flags' defaults.
    Lan,
    /// Nodes in different regions, up to 150 ms apart.
    Wan,
}

/// `--audit-retain`: how much of the audit trail to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditRetain {
    Count(usize),
    Age(std::time::Duration),
}

fn parse_audit_retain(s: &str) -> Result<AuditRetain, String> {
    let bad = || format!("'{s}': a count (100000) or an age (30d, 12h, 90m, 3600s)");
    if let Ok(n) = s.parse::<usize>() {
        return (n > 0).then_some(AuditRetain::Count(n)).ok_or_else(bad);
    }
    let (num, unit) = s.split_at(s.len().saturating_sub(1));
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(bad()),
    };
    if secs == 0 {
        return Err(bad());
    }
    Ok(AuditRetain::Age(std::time::Duration::from_secs(secs)))
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
    /// Keep finished, failed and cancelled workloads readable this many (simulated) seconds
    /// before compacting them out of the live state.
    #[arg(long, default_value_t = 3600)]
    pub retain_terminal: u64,
    /// Start the fleet's clock at this instant (RFC 3339, e.g. 2026-01-05T12:00:00+01:00)
    /// instead of now: tidal windows then open at the same moments on every run. With
    /// `--demo` it defaults to ten fleet minutes before the schedule's next 08:00 Berlin.
    #[arg(long, value_parser = parse_start_at)]
    pub start_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Also submit a stream of workloads sampled from the traces (Philly training, Alibaba
    /// inference; `$TRACES` or ../shared/traces), or a built-in synthetic one without them, so
    /// that every view moves.
    #[arg(long)]
    pub demo: bool,
    /// Time between two demo submissions, in milliseconds.
    #[arg(long, default_value_t = 1000, requires = "demo")]
    pub demo_interval_ms: u64,
    /// How often the simulated members heartbeat (and report status changes, at least once
    /// a second). Lower it with a high `--time-scale`, where a real second is many
    /// simulated ones: a replay that must match `tideway simulate` closely does.
    #[arg(long, default_value_t = 2000)]
    pub member_heartbeat_ms: u64,
}

fn parse_start_at(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("not an RFC 3339 time ({e}), e.g. 2026-01-05T12:00:00Z"))
}

impl Cli {
    /// Whether the command runs until stopped and logs as it serves (its log lines go through
    /// the buffered writer of `log_sink`).
    pub fn is_service(&self) -> bool {
        matches!(self.cmd, Cmd::Server(_) | Cmd::Dev(_) | Cmd::Agent(_))
    }

    pub fn default_log_filter(&self) -> &'static str {
        if self.is_service() {
            "info,openraft=warn"
        } else {
            "warn"
        }
    }

    pub async fn run(self) -> anyhow::Result<()> {
        if let Some(ca) = &self.ca_cert {
            tideway_api::http::trust_ca_file(ca)?;
        }
        match self.cmd {
            Cmd::Server(a) => server(*a).await,
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
                let (submitted, created) = client
                    .submit_with_warnings(body, yaml, idempotency_key.as_deref())
                    .await?;
                let w = submitted.workload;
                // On standard error, as kubectl prints the API's warnings: `-o json` stays
                // one document.
                for warning in &submitted.warnings {
                    eprintln!("Warning: {warning}");
                }
                match output {
                    OutputFormat::Table => {
                        let verb = if created {
                            "created"
                        } else {
                            "unchanged (idempotent replay)"
                        };
                        println!("workload/{} {verb}", w.metadata.name);
                    }
                    OutputFormat::Wide => {
                        output::print_workloads(std::slice::from_ref(&w), output)?
                    }
                    _ => output::print_one(&w, output)?,
                }
                // Accepted either way; a warning is best effort and never fails the submit.
                if let Ok(cap) = client.capacity(true).await
                    && let Some(warning) = crate::gang_check::impossible_gang(&w, &cap)
                {
                    eprintln!("{warning}");
                }
                Ok(())
            }
            Cmd::Get {
                id,
                output,
                watch: true,
                resource_version,
                target,
                ..
            } => watch_loop(&target.client()?, Some(&id), None, resource_version, output).await,
            Cmd::List {
                queue,
                watch: true,
                resource_version,
                output,
                target,
                ..
            } => {
                let client = target.client()?;
                watch_loop(&client, None, queue.as_deref(), resource_version, output).await
            }
            Cmd::Get {
                id,
                output,
                stale,
                target,
                ..
            } => {
                let w = target.client()?.get(&id, stale).await?;
                match output {
                    OutputFormat::Table | OutputFormat::Wide => {
                        output::print_workloads(std::slice::from_ref(&w), output)
                    }
                    _ => output::print_one(&w, output),
                }
            }
            Cmd::Cancel { id, output, target } => {
                let w = target.client()?.cancel(&id).await?;
                match output {
                    OutputFormat::Table => println!("workload/{} cancelled", w.metadata.name),
                    OutputFormat::Wide => {
                        output::print_workloads(std::slice::from_ref(&w), output)?
                    }
                    _ => output::print_one(&w, output)?,
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
                ..
            } => {
                let client = target.client()?;
                if let Some(name) = &queue {
                    // A misspelt queue would list nothing and look like an empty queue.
                    let known: Vec<String> = client
                        .queues()
                        .await?
                        .items
                        .into_iter()
                        .map(|q| q.metadata.name)
                        .collect();
                    if !known.contains(name) {
                        return Err(crate::exit_code::NotFound {
                            kind: "queue",
                            name: name.clone(),
                            hint: format!(" (known: {})", known.join(", ")),
                        }
                        .into());
                    }
                }
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
                output::print_workload_list(items, output)
            }
            Cmd::Explain { id, output, target } => {
                let client = target.client()?;
                let v = client.explain(&id).await?;
                // Wide adds each cluster's region, health and free GPUs; best effort.
                let cap = if output == OutputFormat::Wide {
                    client.capacity(true).await.ok()
                } else {
                    None
                };
                output::print_explain(&v, output, cap.as_ref())
            }
            Cmd::Apply { file, target } => {
                let (body, yaml) = read_manifest(&file)?;
                if yaml && tideway_api::split_documents(&body).len() > 1 {
                    let list = target.client()?.apply_many(body).await?;
                    for a in &list.items {
                        println!("{}/{} {}", a.kind.to_lowercase(), a.name, a.outcome);
                    }
                    return Ok(());
                }
                let (applied, outcome) = target.client()?.apply_with_outcome(body, yaml).await?;
                println!(
                    "{}/{} {}",
                    applied.kind().to_lowercase(),
                    applied.metadata().name,
                    outcome.as_deref().unwrap_or("configured")
                );
                Ok(())
            }
            Cmd::Rolebindings { output, target } => {
                let v = target.client()?.role_bindings().await?;
                output::print_role_bindings(&v, output)
            }
            Cmd::DeleteRolebinding { name, target } => {
                let b = target.client()?.delete_role_binding(&name).await?;
                println!("rolebinding/{} deleted", b.metadata.name);
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
            Cmd::Usage {
                from,
                to,
                tz,
                group_by,
                output,
                stale,
                target,
            } => {
                // The last 24 hours by the node's clock when no start is given; the node
                // answers the report and stamps its time, so ask it (a dev fleet's clock runs
                // ahead of this machine's).
                let client = target.client()?;
                let from = match from {
                    Some(f) => f,
                    None => {
                        let _ = client.cluster_status_brief().await;
                        (output::now() - chrono::Duration::hours(24))
                            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    }
                };
                let mut params: Vec<(&str, String)> =
                    vec![("from", from), ("stale", stale.to_string())];
                for (k, v) in [("to", to), ("tz", tz), ("groupBy", group_by)] {
                    if let Some(v) = v {
                        params.push((k, v));
                    }
                }
                let report = client.usage(&params).await?;
                crate::usage_out::print_usage(&report, output)
            }
            Cmd::Webhooks {
                delete: Some(name),
                target,
                ..
            } => {
                let w = target.client()?.delete_webhook(&name).await?;
                println!("webhook/{} deleted", w.metadata.name);
                Ok(())
            }
            Cmd::Webhooks { output, target, .. } => {
                let list = target.client()?.webhooks().await?;
                crate::usage_out::print_webhooks(&list.items, output)
            }
            Cmd::Members { output, target } => {
                let v = target.client()?.members().await?;
                output::print_members(&v, output)
            }
            Cmd::Member { cmd } => member(cmd).await,
            Cmd::Policy { cmd } => policy(cmd).await,
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
            Cmd::Schedule {
                cmd:
                    ScheduleCmd::Next {
                        name,
                        output,
                        target,
                    },
            } => crate::schedule_out::print_next(
                &target.client()?.schedule_next(&name).await?,
                output,
            ),
            Cmd::Schedule {
                cmd: ScheduleCmd::List { output, target },
            } => crate::schedule_out::print_list(&target.client()?.schedules().await?, output),
            Cmd::Simulate(a) => crate::simulate_cmd::run(a).await,
            Cmd::Bench { cmd } => bench::run(cmd).await,
            Cmd::Openapi => {
                print!("{}", tideway_federation::server::openapi::json());
                Ok(())
            }
            Cmd::Token { cmd } => crate::token_cmd::run(cmd),
        }
    }
}

async fn policy(cmd: PolicyCmd) -> anyhow::Result<()> {
    let applied = |p: &tideway_api::Policy, what: &str| {
        let st = p.status.clone().unwrap_or_default();
        let scoped = st
            .rollout_base
            .map(|b| format!(" (scoped rollout over version {b})"))
            .unwrap_or_default();
        println!(
            "policy/{} {what} as version {}{scoped}",
            p.metadata.name, st.version
        );
    };
    match cmd {
        PolicyCmd::Apply {
            file,
            output,
            target,
        } => {
            let (body, yaml) = read_manifest(&file)?;
            let p = target.client()?.policy_apply_raw(body, yaml).await?;
            match output {
                OutputFormat::Table | OutputFormat::Wide => applied(&p, "applied"),
                o => output::print_one(&p, o)?,
            }
        }
        PolicyCmd::History { output, target } => {
            let h = target.client()?.policy_history().await?;
            output::print_policy_history(&h, output)?;
        }
        PolicyCmd::Get {
            version,
            output,
            target,
        } => {
            let p = target.client()?.policy_version(&version).await?;
            output::print_one(&p, output)?;
        }
        PolicyCmd::Diff {
            from,
            to,
            file,
            output,
            target,
        } => {
            let candidate = match file {
                Some(f) => {
                    let (body, yaml) = read_manifest(&f)?;
                    let p: tideway_api::Policy = if yaml {
                        tideway_api::decode_yaml(&body)?
                    } else {
                        tideway_api::decode_json(&body)?
                    };
                    Some(p)
                }
                None => None,
            };
            let req = tideway_api::DiffRequest {
                from,
                to,
                candidate,
            };
            let d = target.client()?.policy_diff(&req).await?;
            output::print_policy_diff(&d, output)?;
        }
        PolicyCmd::DryRun {
            file,
            replay: Some(window),
            clusters: Some(clusters),
            seed,
            output,
            target,
        } => {
            let client = target.client()?;
            let r = crate::policy_replay::replay(&client, &file, window, clusters, seed).await?;
            output::print_replay(&r, output)?;
        }
        PolicyCmd::DryRun {
            file,
            output,
            target,
            ..
        } => {
            let (body, yaml) = read_manifest(&file)?;
            let r = target.client()?.policy_dry_run_raw(body, yaml).await?;
            output::print_dry_run(&r, output)?;
        }
        PolicyCmd::Rollback {
            to,
            message,
            target,
        } => {
            let req = tideway_api::RollbackRequest { to, message };
            let p = target.client()?.policy_rollback(&req).await?;
            let to = p
                .status
                .as_ref()
                .and_then(|s| s.rolled_back_to)
                .unwrap_or_default();
            applied(&p, &format!("rolled back to version {to}"));
        }
        PolicyCmd::Widen { target } => {
            let p = target.client()?.policy_widen().await?;
            applied(&p, "widened to the whole fleet");
        }
    }
    Ok(())
}

async fn member(cmd: MemberCmd) -> anyhow::Result<()> {
    use tideway_api::client::MemberAction;
    let (name, target, action) = match cmd {
        MemberCmd::Readmit { name, target } => {
            let readmitted = target.client()?.member_readmit(&name).await?;
            if readmitted {
                println!("member/{name} re-admitted: its agent may register it again");
            } else {
                println!("member/{name} was not removed: nothing to re-admit");
            }
            return Ok(());
        }
        MemberCmd::Cordon { name, target } => (name, target, Some(MemberAction::Cordon)),
        MemberCmd::Uncordon { name, target } => (name, target, Some(MemberAction::Uncordon)),
        MemberCmd::Drain {
            name,
            dry_run,
            wait,
            timeout,
            target,
        } => {
            let client = target.client()?;
            let on = |name: &str| {
                let client = client.clone();
                let name = name.to_owned();
                async move { workloads_on(&client, &name).await }
            };
            if dry_run {
                let moving = on(&name).await?;
                println!(
                    "member/{name} would be drained (dry run): {} workload(s) checkpointed and \
                     moved to other members",
                    moving.len()
                );
                if !moving.is_empty() {
                    output::print_workloads(&moving, OutputFormat::Table)?;
                }
                return Ok(());
            }
            let m = client.member_lifecycle(&name, MemberAction::Drain).await?;
            let phase = m.status.map(|s| s.phase).unwrap_or_default();
            println!("member/{} drained (phase {phase:?})", m.metadata.name);
            if wait {
                let clock = tideway_api::clock::RealClock;
                let deadline = tideway_api::clock::Clock::instant(&clock)
                    + std::time::Duration::from_secs(timeout);
                let mut left: Vec<String> = Vec::new();
                loop {
                    let now: Vec<String> = on(&name)
                        .await?
                        .into_iter()
                        .map(|w| w.metadata.name)
                        .collect();
                    for gone in left.iter().filter(|w| !now.contains(w)) {
                        println!("workload/{gone} moved off member/{name}");
                    }
                    if now.is_empty() {
                        println!("member/{name} runs no workload");
                        return Ok(());
                    }
                    if tideway_api::clock::Clock::instant(&clock) > deadline {
                        anyhow::bail!(
                            "member/{name} still runs {} workload(s) after {timeout} s: {}",
                            now.len(),
                            now.join(", ")
                        );
                    }
                    left = now;
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
            return Ok(());
        }
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

/// The workloads assigned to or running on member `name`: what a drain moves.
async fn workloads_on(client: &Client, name: &str) -> anyhow::Result<Vec<tideway_api::Workload>> {
    let mut q = ListQuery {
        limit: Some(500),
        ..Default::default()
    };
    let mut on = Vec::new();
    loop {
        let page = client.list(&q).await?;
        on.extend(page.items.into_iter().filter(|w| {
            w.status.as_ref().is_some_and(|s| {
                s.cluster.as_deref() == Some(name)
                    && matches!(s.phase, WorkloadPhase::Assigned | WorkloadPhase::Running)
            })
        }));
        match page.continue_ {
            Some(c) => q.after = Some(c),
            None => return Ok(on),
        }
    }
}

/// Streams watch events until interrupted. A lost connection or an unavailable node is
/// retried from the last version seen, so nothing is missed or shown twice; a version
/// compacted away (410) lists again from 0; a refusal (403, 404, 400) ends the watch with
/// its error.
async fn watch_loop(
    client: &Client,
    id: Option<&str>,
    queue: Option<&str>,
    from: Option<u64>,
    output: OutputFormat,
) -> anyhow::Result<()> {
    use std::io::Write;
    use tideway_api::client::ClientError;
    let mut from = from.unwrap_or(0);
    if !matches!(output, OutputFormat::Json | OutputFormat::Name) {
        println!(
            "{:<9} {:<32} {:<10} {:<12} VERSION",
            "EVENT", "NAME", "PHASE", "CLUSTER"
        );
    }
    loop {
        let page = match client.watch(id, queue, from, 30).await {
            Ok(p) => p,
            // Resumed from too far back: list again (from 0, every workload as ADDED) and
            // go on from there, as a Kubernetes reflector re-lists on 410.
            Err(e) if e.is_gone() => {
                eprintln!("watch: {e}; listing again");
                from = 0;
                continue;
            }
            Err(ClientError::Problem(p)) if p.status != 503 => {
                return Err(ClientError::Problem(p).into());
            }
            Err(e) => {
                eprintln!("watch interrupted ({e}); resuming after version {from}");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        for ev in &page.items {
            if output == OutputFormat::Json {
                println!("{}", serde_json::to_string(ev)?);
            } else if output == OutputFormat::Name {
                println!("workload/{}", ev.name);
            } else {
                let st = ev.object.as_ref().and_then(|w| w.status.as_ref());
                println!(
                    "{:<9} {:<32} {:<10} {:<12} {}",
                    format!("{:?}", ev.kind).to_uppercase(),
                    ev.name,
                    st.map(|s| s.phase.as_str()).unwrap_or("-"),
                    st.and_then(|s| s.cluster.as_deref()).unwrap_or("-"),
                    ev.resource_version
                );
            }
        }
        std::io::stdout().flush()?;
        from = page.resource_version;
    }
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

/// The JWT verifier the flags configure, if any key is given.
fn jwt_verifier(
    a: &ServerArgs,
    clock: tideway_api::clock::SharedClock,
) -> anyhow::Result<Option<JwtVerifier>> {
    let mut v = JwtVerifier::new(
        JwtSettings {
            issuer: a.jwt_issuer.clone(),
            audience: a.jwt_audience.clone(),
            groups_claim: Some(a.jwt_groups_claim.clone()),
        },
        clock,
    );
    if let Some(p) = &a.jwt_hs256_secret_file {
        v = v.with_hs256_secret_file(p)?;
    }
    if let Some(p) = &a.jwt_public_key_file {
        v = v.with_public_key_pem(p)?;
    }
    if let Some(p) = &a.jwt_jwks_file {
        v = v.with_jwks_file(p)?;
    }
    Ok(v.has_keys().then_some(v))
}

async fn server(a: ServerArgs) -> anyhow::Result<()> {
    let jwt = jwt_verifier(&a, tideway_api::clock::RealClock::shared())?;
    let auth = match (&a.auth_tokens, jwt) {
        (Some(path), jwt) => {
            let mut auth = Authenticator::from_file(path)?;
            if let Some(v) = jwt {
                auth = auth.with_jwt(v);
            }
            Some(std::sync::Arc::new(auth))
        }
        (None, Some(v)) => Some(std::sync::Arc::new(
            Authenticator::new(TokenFile { tokens: vec![] }).with_jwt(v),
        )),
        (None, None) if is_loopback(&a.listen) || a.insecure_allow_anonymous => None,
        (None, None) => anyhow::bail!(
            "refusing to serve {} without authentication: pass --auth-tokens FILE, or \
             --insecure-allow-anonymous to accept anyone who can reach it",
            a.listen
        ),
    };
    let mut cfg = NodeConfig::new(a.id, a.listen.clone(), a.data.clone());
    peer_plane_settings(&mut cfg, &a)?;
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
    cfg.limits.rate_per_second = a.rate_limit;
    cfg.limits.rate_burst = a.rate_burst;
    cfg.limits.request_timeout = std::time::Duration::from_millis(a.request_timeout_ms);
    cfg.conn_limits = tideway_federation::listen::ConnLimits {
        header_read_timeout: (a.header_read_timeout_ms > 0)
            .then(|| std::time::Duration::from_millis(a.header_read_timeout_ms)),
        max_idle_per_ip: a.max_idle_connections_per_ip,
    };
    cfg.heartbeat_ms = a.heartbeat_ms;
    cfg.election_timeout_ms = (a.election_timeout_min_ms, a.election_timeout_max_ms);
    if a.network == NetworkPreset::Wan {
        cfg.heartbeat_ms = tideway_federation::node::WAN_HEARTBEAT_MS;
        cfg.election_timeout_ms = tideway_federation::node::WAN_ELECTION_TIMEOUT_MS;
    }
    cfg.snapshot_every = a.snapshot_every;
    let hb = std::time::Duration::from_millis(a.member_heartbeat_ms.max(100));
    cfg.dispatch.heartbeat_interval = hb;
    cfg.dispatch.not_ready_after = hb * a.member_missed_heartbeats.max(1);
    cfg.dispatch.retain_terminal = std::time::Duration::from_secs(a.retain_terminal);
    cfg.dispatch.compaction_interval =
        std::time::Duration::from_secs(a.retain_terminal.clamp(1, 10));
    cfg.dispatch.member_lost_after = std::time::Duration::from_millis(a.member_lost_after_ms);
    match a.audit_retain {
        Some(AuditRetain::Count(n)) => cfg.dispatch.audit_retain_count = Some(n),
        Some(AuditRetain::Age(d)) => cfg.dispatch.audit_retain_age = Some(d),
        None => {}
    }
    cfg.dispatch.redispatch_per_second = a.redispatch_per_second.max(0.1);
    cfg.dispatch.redispatch_per_member_per_second = a.redispatch_per_member_per_second.max(0.1);
    cfg.dispatch.flaps = tideway_federation::state::members::FlapPolicy {
        limit: a.flap_limit,
        window_secs: a.flap_window_secs.max(1),
        base_secs: a.quarantine_secs.max(1),
        max_secs: a.quarantine_max_secs.max(a.quarantine_secs).max(1),
    };
    let node = Node::start(cfg).await?;
    tracing::info!(addr = %node.addr, "federation node serving");
    wait_for_signal().await;
    tracing::info!("shutting down");
    node.shutdown().await;
    Ok(())
}

/// The peer plane and TLS of `tideway server`. A peer plane reachable from other machines
/// must be protected by the cluster secret: plaintext without a secret is allowed on
/// loopback (tests, `tideway dev`) or with `--insecure-peer-plane` only.
fn peer_plane_settings(cfg: &mut NodeConfig, a: &ServerArgs) -> anyhow::Result<()> {
    cfg.peer_listen = a.peer_listen.clone();
    cfg.peer_advertise = a.peer_advertise.clone();
    cfg.auto_promote = !a.learner;
    if let Some(path) = &a.cluster_secret_file {
        cfg.cluster_secret = Some(tideway_federation::server::peer_auth::read_secret(path)?);
    }
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        cfg.tls = Some(tideway_federation::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    let peer_bind = a.peer_listen.as_deref().unwrap_or(&a.listen);
    if cfg.cluster_secret.is_none() && !is_loopback(peer_bind) && !a.insecure_peer_plane {
        anyhow::bail!(
            "refusing to serve the peer plane (Raft, forwarding) on {peer_bind} without a \
             cluster secret: pass --cluster-secret-file FILE (the same on every node), or \
             --insecure-peer-plane on a trusted network"
        );
    }
    Ok(())
}

/// The workload the dev banner suggests submitting (the API docs' example).
const EXAMPLE_WORKLOAD: &str = include_str!("../api/testdata/workload-llama-ft.yaml");

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
    let start_at = a.start_at.or_else(|| dev_demo_start(a.demo));
    let clock = tideway_agent::sim_agent::sim_clock_from(a.time_scale, start_at)?;
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
    node_cfg.dispatch.retain_terminal = std::time::Duration::from_secs(a.retain_terminal);
    // Reads stay open on loopback, so the dashboard needs no token; every change needs it.
    node_cfg.auth = Some(std::sync::Arc::new(
        Authenticator::new(tokens).with_anonymous_reads(),
    ));
    // One user on loopback, whose admin token the three embedded agents share: no rate
    // limit (the request time bound stays).
    node_cfg.limits.rate_per_second = 0.0;
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
            heartbeat_ms: a.member_heartbeat_ms,
            time_scale: a.time_scale,
            token_file: None,
            token: Some(token.clone()),
            action: None,
        };
        let sim = SimAgent::build(&args.sim_options(Layout::Bytes(layout), clock.clone()))?;
        let mut cfg = args.agent_config(&sim.cluster, &sim.region, args.federation.clone());
        cfg.status_interval = cfg.status_interval.min(cfg.heartbeat_interval);
        agents.push(tokio::spawn(tideway_agent::agent::run(
            cfg,
            std::sync::Arc::new(sim.backend),
            stop.clone(),
        )));
    }
    apply_dev_schedule(&node.addr, &token).await;
    let demo_source = if a.demo {
        let (workloads, source) = crate::demo::stream(crate::demo::traces_dir().as_deref());
        let client = Client::with_token(&node.addr, Some(&token))?;
        tracing::info!(workloads = workloads.len(), %source, "demo stream");
        let feeder = tokio::spawn(crate::demo::feed(
            client,
            workloads,
            std::time::Duration::from_millis(a.demo_interval_ms.max(1)),
            stop.clone(),
        ));
        Some((source, feeder))
    } else {
        None
    };
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
        "  clock:    {}",
        crate::demo::clock_line(a.time_scale, start_at)
    );
    if let Some((source, _)) = &demo_source {
        println!(
            "  demo:     one workload every {} ms, {source}",
            a.demo_interval_ms
        );
    }
    // The example lives in the data directory, so the line works from any directory (a
    // path into the source tree only worked from the repository's root).
    let example = dir.join("example-workload.yaml");
    let example = match std::fs::write(&example, EXAMPLE_WORKLOAD) {
        Ok(()) => example.display().to_string(),
        Err(e) => {
            tracing::warn!(error = %e, "could not write the example workload");
            "workload.yaml".into()
        }
    };
    println!("Try: tideway submit -f {example} --addr {}", node.addr);
    println!("     tideway capacity --addr {}", node.addr);
    println!("     tideway schedule show day-night --addr {}", node.addr);
    println!("The CLI's configuration has the token (context 'dev'); other clients send it as");
    println!("'Authorization: Bearer <token>':");
    println!("admin token: {token}");
    wait_for_signal().await;
    let _ = stop_tx.send(true);
    if let Some((_, feeder)) = demo_source {
        let _ = feeder.await;
    }
    for a in agents {
        let _ = a.await;
    }
    node.shutdown().await;
    Ok(())
}

/// The day/night schedule `tideway dev` starts with.
const DEV_SCHEDULE: &str = include_str!("../deploy/dev/day-night.yaml");

/// With `--demo` and no `--start-at`, the fleet clock starts shortly before the dev
/// schedule's next morning boundary, so the demo shows a transition and its reclaim within
/// a wall minute or two.
fn dev_demo_start(demo: bool) -> Option<chrono::DateTime<chrono::Utc>> {
    if !demo {
        return None;
    }
    let schedule: tideway_api::QuotaSchedule =
        tideway_api::decode_yaml(DEV_SCHEDULE.as_bytes()).ok()?;
    // The wall clock, not a fleet clock: the fleet's clock is what this start makes.
    let now = tideway_api::clock::Clock::now(&tideway_api::clock::RealClock);
    crate::demo::start_before_boundary(&schedule, "day", now)
}

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
        ClusterCmd::Status {
            output,
            no_digest,
            target,
        } => {
            let status = |client: Client| async move {
                if no_digest {
                    client.cluster_status_brief().await
                } else {
                    client.cluster_status().await
                }
            };
            let here = status(target.client()?).await?;
            let mut nodes = Vec::new();
            for (id, addr) in &here.members {
                let asked = status(Client::with_token(addr, target.resolve()?.1.as_deref())?)
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
        ClusterCmd::Snapshot { output, target } => {
            let addr = target.resolve()?.0;
            let ack = target.client()?.cluster_snapshot().await?;
            match output {
                OutputFormat::Json | OutputFormat::Yaml => output::print_one(&ack, output)?,
                _ => {
                    let purged = match ack.purged {
                        Some(p) => format!("; the log up to index {p} is purged"),
                        None => "; no log was purged".to_string(),
                    };
                    println!(
                        "snapshot taken on {addr}: it covers the log up to index {}{purged}",
                        ack.snapshot
                    );
                }
            }
            Ok(())
        }
        ClusterCmd::Promote { id, target } => {
            let ack = target.client()?.cluster_promote(id).await?;
            println!(
                "node {id} is a voter (it had replicated index {})",
                ack.matched
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_retention_is_a_count_or_an_age() {
        assert_eq!(parse_audit_retain("5000"), Ok(AuditRetain::Count(5000)));
        assert_eq!(
            parse_audit_retain("30d"),
            Ok(AuditRetain::Age(std::time::Duration::from_secs(
                30 * 86_400
            )))
        );
        assert_eq!(
            parse_audit_retain("90m"),
            Ok(AuditRetain::Age(std::time::Duration::from_secs(5400)))
        );
        for bad in ["0", "0h", "1w", "", "h", "-3"] {
            assert!(parse_audit_retain(bad).is_err(), "{bad}");
        }
    }
}
