//! `Workload`: one unit of work a user submits once and Tideway places on one member cluster.
//!
//! The spec says what the work needs (pod sets, gang, topology, placement) and what the
//! scheduler may assume about it (runtime estimate, checkpoints); it never names nodes, since
//! node-level placement is the member cluster's gang scheduler's job.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::meta::{API_VERSION, ObjectMeta, impl_resource, is_false};
use crate::validation::{CheckAt, Checker, at, impl_validate};

/// At most this many pod sets, like Kueue, so a workload stays explainable.
pub const MAX_POD_SETS: usize = 16;
/// Far beyond any real job; it only stops absurd input from overflowing arithmetic downstream.
pub const MAX_POD_COUNT: u32 = 100_000;
/// No node has more GPUs than this; a bigger number is a typo for a total.
pub const MAX_GPUS_PER_POD: u32 = 64;
/// A year: estimates beyond that carry no scheduling information.
pub const MAX_RUNTIME_ESTIMATE_SECONDS: u64 = 365 * 24 * 3600;
/// A week: a longer interval makes checkpoint-aware preemption meaningless.
pub const MAX_CHECKPOINT_INTERVAL_SECONDS: u64 = 7 * 24 * 3600;
/// Retries beyond this are a crash loop, not resilience.
pub const MAX_RETRY_LIMIT: u32 = 100;
/// The priority class a workload gets when it names none.
pub const DEFAULT_PRIORITY_CLASS: &str = "normal";

/// One unit of work: submitted once, placed on one member cluster as a whole.
// `Eq`, so that two `Arc`s of one workload compare by pointer before by value: the state
// digest's walk compares every workload of a changed map node, nearly all of them shared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    /// Always [`API_VERSION`].
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub api_version: CompactString,
    /// Always `Workload`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub kind: CompactString,
    /// Name (unique among workloads) and labels; the server sets the uid.
    pub metadata: ObjectMeta,
    /// What the work needs, as the user wrote it (the server may fill in `user`).
    pub spec: WorkloadSpec,
    /// Written by the federation; None in a document a user writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkloadStatus>,
}

impl_resource!(Workload => "Workload");

impl Workload {
    /// A workload at the current API version, with no status.
    pub fn new(name: impl Into<String>, spec: WorkloadSpec) -> Self {
        Self {
            api_version: CompactString::const_new(API_VERSION),
            kind: CompactString::const_new(<Self as crate::meta::Resource>::KIND),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }

    /// The newest checkpoint known: the member's report for the running attempt, or what
    /// the submitter stated (`spec.checkpoint.lastCheckpointAt`), whichever is later.
    pub fn last_checkpoint_at(&self) -> Option<DateTime<Utc>> {
        let stated = self
            .spec
            .checkpoint
            .as_ref()
            .and_then(|c| c.last_checkpoint_at);
        let reported = self.status.as_ref().and_then(|s| s.last_checkpoint_at);
        stated.max(reported)
    }
}

/// Queues are per class; the class also drives defaults such as how a tidal window treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum WorkloadClass {
    /// Long-running jobs, usually gangs; checkpoint-aware preemption matters most here.
    Training,
    /// Serving replicas; the usual winner of daytime tidal windows.
    Inference,
    /// Evaluation runs of trained models.
    Eval,
    /// Short exploratory runs.
    Experiment,
}

impl WorkloadClass {
    /// Every class, in the order `--help` and error messages list them.
    pub const ALL: [WorkloadClass; 4] = [
        Self::Training,
        Self::Inference,
        Self::Eval,
        Self::Experiment,
    ];

    /// The name as serialized and as the CLI takes it (`training`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Training => "training",
            Self::Inference => "inference",
            Self::Eval => "eval",
            Self::Experiment => "experiment",
        }
    }
}

impl fmt::Display for WorkloadClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A class or phase name that is not one of the known ones; says which are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{given}'; one of {expected}")]
pub struct UnknownVariant {
    /// `class` or `phase`.
    pub what: &'static str,
    /// What was given.
    pub given: String,
    /// The accepted spellings, comma-separated.
    pub expected: String,
}

/// Parses the lowercase spelling the CLI takes (`--class training`); case does not matter.
impl std::str::FromStr for WorkloadClass {
    type Err = UnknownVariant;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownVariant {
                what: "class",
                given: s.to_string(),
                expected: Self::ALL.map(Self::as_str).join(", "),
            })
    }
}

/// What a workload needs and what the scheduler may assume about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadSpec {
    /// The queue it waits in; must name a queue of the current policy.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub queue: CompactString,
    /// Must be one the queue serves.
    pub class: WorkloadClass,
    /// A priority class of the current policy; `normal` if left out.
    #[serde(default = "default_priority_class")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub priority_class: CompactString,
    /// Who submitted it; the server fills it from authentication when absent. Per-user limits
    /// and priority-class permissions apply to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub user: Option<CompactString>,
    /// At least one, at most [`MAX_POD_SETS`]; names unique.
    pub pod_sets: Vec<PodSet>,
    /// Present when the pods are only useful together (all-or-nothing admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<Gang>,
    /// A topology domain the gang must (or should) fit in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyRequirement>,
    /// Regions and clusters it may run in; anywhere if left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Placement>))]
    pub placement: Option<Box<Placement>>,
    /// Lets tidal windows and backfill decide whether the work can finish before a boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_estimate_seconds: Option<u64>,
    /// A hard limit, as Slurm's time limit: the member stops the workload once it has run
    /// this long. Without an estimate the scheduler plans with the limit (it cannot run
    /// longer), so a tight limit buys earlier backfill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_limit_seconds: Option<u64>,
    /// Present when the work checkpoints; makes it cheaper to preempt and reclaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
    /// Re-dispatches allowed after a failure on a member; 0 if left out (fail at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<u32>,
    /// Passed untouched to the member cluster (a pod template or Volcano task template);
    /// Tideway never interprets it, so the federation does not track Kubernetes API changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<serde_json::Value>))]
    pub template: Option<Box<serde_json::Value>>,
}

fn default_priority_class() -> CompactString {
    CompactString::const_new(DEFAULT_PRIORITY_CLASS)
}

impl WorkloadSpec {
    /// A spec with the required fields and defaults for the rest; tests and the CLI build on it.
    pub fn new(
        queue: impl Into<CompactString>,
        class: WorkloadClass,
        pod_sets: Vec<PodSet>,
    ) -> Self {
        Self {
            queue: queue.into(),
            class,
            priority_class: default_priority_class(),
            user: None,
            pod_sets,
            gang: None,
            topology: None,
            placement: None,
            runtime_estimate_seconds: None,
            runtime_limit_seconds: None,
            checkpoint: None,
            retry_limit: None,
            template: None,
        }
    }

    /// Computed in u64 so that unvalidated input cannot overflow.
    pub fn total_gpus(&self) -> u64 {
        self.pod_sets.iter().map(PodSet::total_gpus).sum()
    }

    /// Pods over every pod set.
    pub fn total_pods(&self) -> u64 {
        self.pod_sets.iter().map(|p| u64::from(p.count)).sum()
    }

    /// GPUs needed per flavor; quota is accounted per flavor.
    pub fn gpus_by_flavor(&self) -> BTreeMap<&str, u64> {
        let mut by_flavor = BTreeMap::new();
        for p in &self.pod_sets {
            *by_flavor.entry(p.flavor.as_str()).or_insert(0) += p.total_gpus();
        }
        by_flavor
    }

    /// Pods that must start together; without an explicit gang every pod is required.
    pub fn gang_min_pods(&self) -> u64 {
        self.gang
            .map_or_else(|| self.total_pods(), |g| u64::from(g.min_count))
    }

    /// Whether the work checkpoints, which makes it cheaper to preempt.
    pub fn is_checkpointable(&self) -> bool {
        self.checkpoint.is_some()
    }
}

/// A group of identical pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodSet {
    /// Unique within the workload.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub name: CompactString,
    /// Pods in the set, at most [`MAX_POD_COUNT`].
    pub count: u32,
    /// Whole GPUs each pod needs on one node, at most [`MAX_GPUS_PER_POD`].
    pub gpus_per_pod: u32,
    /// The GPU model (e.g. "H100"); quotas and capacity are per flavor.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub flavor: CompactString,
    /// Kubernetes quantity, passed through to the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Kubernetes quantity, passed through to the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

impl PodSet {
    /// A set of `count` pods of `gpus_per_pod` GPUs of `flavor`, with no CPU or memory request.
    pub fn new(
        name: impl Into<CompactString>,
        count: u32,
        gpus_per_pod: u32,
        flavor: &str,
    ) -> Self {
        Self {
            name: name.into(),
            count,
            gpus_per_pod,
            flavor: flavor.into(),
            cpu: None,
            memory: None,
        }
    }

    /// GPUs over every pod of the set.
    pub fn total_gpus(&self) -> u64 {
        u64::from(self.count) * u64::from(self.gpus_per_pod)
    }
}

/// All-or-nothing admission: no pod starts until `min_count` can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Gang {
    /// Pods that must start together; at most the workload's total.
    pub min_count: u32,
}

/// Topology domains from narrowest to widest; `Ord` follows that, so "fits in a rack"
/// implies "fits in a zone".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TopologyLevel {
    /// One node.
    Node,
    /// A rack of nodes, as the member labels it.
    Rack,
    /// A zone of racks.
    Zone,
}

impl TopologyLevel {
    /// The name as serialized and as the CLI takes it (`rack`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Node => "node",
            Self::Rack => "rack",
            Self::Zone => "zone",
        }
    }
}

impl fmt::Display for TopologyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Written `{required: rack}` or `{preferred: zone}`. An enum in Rust so that "both" and
/// "neither" cannot be represented; the map form keeps the YAML the way users write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "TopologyRepr", into = "TopologyRepr")]
pub enum TopologyRequirement {
    /// The whole gang must fit in one domain of this level, or the workload waits.
    Required(TopologyLevel),
    /// One domain is preferred, but spreading over several is acceptable.
    Preferred(TopologyLevel),
}

impl TopologyRequirement {
    /// The level, required or preferred.
    pub fn level(self) -> TopologyLevel {
        match self {
            Self::Required(l) | Self::Preferred(l) => l,
        }
    }

    /// Whether the workload waits rather than spreading over domains.
    pub fn is_required(self) -> bool {
        matches!(self, Self::Required(_))
    }
}

#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TopologyRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    required: Option<TopologyLevel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preferred: Option<TopologyLevel>,
}

// The wire form is the repr's, so the OpenAPI schema is too.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for TopologyRequirement {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <TopologyRepr as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for TopologyRequirement {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <TopologyRepr as utoipa::ToSchema>::schemas(schemas)
    }
}

impl TryFrom<TopologyRepr> for TopologyRequirement {
    type Error = &'static str;
    fn try_from(r: TopologyRepr) -> Result<Self, Self::Error> {
        match (r.required, r.preferred) {
            (Some(l), None) => Ok(Self::Required(l)),
            (None, Some(l)) => Ok(Self::Preferred(l)),
            _ => Err("exactly one of `required` or `preferred` must be set"),
        }
    }
}

impl From<TopologyRequirement> for TopologyRepr {
    fn from(t: TopologyRequirement) -> Self {
        match t {
            TopologyRequirement::Required(l) => Self {
                required: Some(l),
                preferred: None,
            },
            TopologyRequirement::Preferred(l) => Self {
                required: None,
                preferred: Some(l),
            },
        }
    }
}

/// Where the workload may run; empty lists mean anywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Placement {
    /// Regions allowed, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Member clusters allowed, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Spread independent replicas over clusters (inference) instead of packing them.
    #[serde(default, skip_serializing_if = "is_false")]
    pub spread: bool,
}

/// How often the work checkpoints, so preemption can estimate the work it would lose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Checkpoint {
    /// Seconds between checkpoints, at most [`MAX_CHECKPOINT_INTERVAL_SECONDS`].
    pub interval_seconds: u64,
    /// Reported by the member; the work lost on preemption is measured from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_at: Option<DateTime<Utc>>,
}

/// Where a workload is in its life; PascalCase on the wire (`Running`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum WorkloadPhase {
    /// Waiting for quota or capacity; see `status.pendingReason`.
    #[default]
    Pending,
    /// Quota reserved, no cluster chosen yet.
    Admitted,
    /// Handed to a member cluster, not yet running there.
    Assigned,
    /// Running on its member cluster.
    Running,
    /// Finished successfully (terminal).
    Succeeded,
    /// Failed with no retries left (terminal).
    Failed,
    /// Cancelled by a user (terminal).
    Cancelled,
    /// Evicted to make room; it goes back to the queue unless its retries are spent.
    Preempted,
}

impl WorkloadPhase {
    /// Every phase, in lifecycle order.
    pub const ALL: [WorkloadPhase; 8] = [
        Self::Pending,
        Self::Admitted,
        Self::Assigned,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
        Self::Preempted,
    ];

    /// The name as serialized (`Running`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Admitted => "Admitted",
            Self::Assigned => "Assigned",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Cancelled => "Cancelled",
            Self::Preempted => "Preempted",
        }
    }

    /// No further transition will happen.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// Holds quota (and, once assigned, member capacity).
    pub fn holds_quota(self) -> bool {
        matches!(self, Self::Admitted | Self::Assigned | Self::Running)
    }
}

impl fmt::Display for WorkloadPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses a phase in any case: the CLI's lowercase `--phase running` and the API's
/// `?phase=Running` name the same phase.
impl std::str::FromStr for WorkloadPhase {
    type Err = UnknownVariant;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownVariant {
                what: "phase",
                given: s.to_string(),
                expected: Self::ALL.map(Self::as_str).join(", "),
            })
    }
}

/// Written by the federation; users never set it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// Where the workload is in its life.
    pub phase: WorkloadPhase,
    /// Why it is not running, in a form a dashboard can render and a script can match on.
    // Shared: the workloads of one shape blocked by the same thing hold one reason (a
    // pending workload's largest part otherwise; see `PendingReason::shared`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "shared_reason"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<PendingReason>))]
    pub pending_reason: Option<Arc<PendingReason>>,
    /// The latest change, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The member cluster it is assigned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Dispatch attempts so far; compared with `spec.retryLimit`.
    #[serde(default)]
    pub attempts: u32,
    /// When the server accepted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_at: Option<DateTime<Utc>>,
    /// When quota was reserved for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<DateTime<Utc>>,
    /// When its member reported it running (wall clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The nodes its pods occupy while it runs, as its member reports them: opaque ids, only
    /// compared with each other. With them the scheduler knows which victims together free
    /// a whole node for a gang.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeGpus>,
    /// After a failed attempt: not dispatched again before this time (exponential backoff
    /// with a jitter derived from the uid, so every replica computes the same time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_not_before: Option<DateTime<Utc>>,
    /// The newest checkpoint its member reported for the current attempt (cleared when the
    /// attempt ends): a preemption now loses only the work since then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_at: Option<DateTime<Utc>>,
}

/// GPUs a workload holds on one node of its member cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeGpus {
    /// Opaque and stable while the node exists (the member's node name, or a hash of it).
    pub node: String,
    /// GPUs its pods hold on that node.
    pub gpus: u32,
    /// The node's zone, when the member knows it. With `rack`, it tells the federation in
    /// which topology domain the member's own gang scheduler actually placed the pods, which
    /// may differ from the domain the federation planned; preemption plans on the truth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The node's rack, when the member knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
}

/// Why a workload is waiting, with the numbers that explain it. Tagged by `type` so clients
/// can switch on it; the variant names are stable API.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum PendingReason {
    /// Not looked at by the scheduler yet.
    Queued,
    /// The queue's quota of the flavor is used up.
    QuotaExhausted {
        /// The queue whose quota is exhausted.
        queue: String,
        /// The GPU model.
        flavor: String,
        /// GPUs of the flavor the queue uses now.
        used: u64,
        /// The most the queue may use of the flavor now.
        limit: u64,
    },
    /// No cluster has enough free GPUs of the flavor for the gang.
    InsufficientCapacity {
        /// The GPU model.
        flavor: String,
        /// GPUs the workload needs of it.
        needed: u64,
        /// Largest gang (in GPUs) that fits in one domain of the required level, per cluster.
        largest_fit_per_cluster: BTreeMap<String, u32>,
    },
    /// Enough GPUs are free in total, but not in one topology domain.
    Fragmentation {
        /// Most free GPUs of the flavor in any one candidate cluster.
        free_total: u64,
        /// Largest fit in one domain of the required level, in GPUs.
        largest_domain: u64,
    },
    /// No member cluster satisfies the placement and class constraints.
    NoMatchingCluster {
        /// The constraint no cluster met, for people.
        constraint: String,
        /// Clusters filtered out by it (the list may be truncated).
        clusters_filtered: Vec<String>,
    },
    /// The current quota window gives this queue nothing until the next one opens.
    WindowClosed {
        /// When the next window opens.
        until: DateTime<Utc>,
    },
    /// Held back by a rate limit (preemptions or re-dispatches per minute).
    RateLimited,
    /// Only clusters that are not Ready could take it; it waits for them.
    MemberUnavailable {
        /// The first such member cluster.
        cluster: String,
    },
    /// Victims are being evicted to make room; it starts once they are gone.
    WaitingForPreemption {
        /// The workloads being evicted for it, by uid.
        victims: Vec<String>,
    },
    /// Its side of the fleet loses quota at `boundary` (a tidal window closes) and its
    /// runtime estimate would outlast that: starting it now would only see it reclaimed.
    /// It starts after the boundary, or at once if it can checkpoint.
    WindowClosing {
        /// When the window closes and the side's quota drops.
        boundary: DateTime<Utc>,
        /// The runtime estimate that would outlast it, in seconds.
        estimate_seconds: u64,
    },
    /// Its last attempt failed; it is dispatched again after an exponential backoff.
    BackingOff {
        /// When it may be dispatched again.
        until: DateTime<Utc>,
        /// Dispatch attempts so far.
        attempts: u32,
    },
}

/// The first retry's delay after a failed attempt; each later one doubles it.
pub const RETRY_BACKOFF_BASE_SECONDS: i64 = 10;
/// The longest delay between two attempts.
pub const RETRY_BACKOFF_MAX_SECONDS: i64 = 600;

/// How long a workload waits before attempt `attempts + 1`, after `attempts` failed ones:
/// exponential, capped, plus up to a quarter more. The jitter comes from the uid and the
/// attempt, not from a random source, so every replica applying the failure computes the
/// same time, while workloads that failed together (a member's bad node) spread out.
pub fn retry_backoff(uid: &str, attempts: u32) -> chrono::TimeDelta {
    let doublings = attempts.saturating_sub(1).min(16);
    let base = (RETRY_BACKOFF_BASE_SECONDS << doublings).min(RETRY_BACKOFF_MAX_SECONDS);
    // FNV-1a over the uid and the attempt: stable across builds and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in uid.bytes().chain(attempts.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let jitter_ms = (h % 1000) as i64 * base * 1000 / 4000;
    chrono::TimeDelta::milliseconds(base * 1000 + jitter_ms)
}

/// Distinct reasons [`PendingReason::shared`] remembers per thread before it starts over.
/// A backlog has few distinct reasons (one per shape and blocker), so this bounds only the
/// memory a pathological mix could pin.
const SHARED_REASONS_MAX: usize = 4096;

thread_local! {
    static SHARED_REASONS: std::cell::RefCell<std::collections::HashSet<Arc<PendingReason>>> =
        std::cell::RefCell::new(std::collections::HashSet::new());
}

impl PendingReason {
    /// The reason behind an `Arc` that equal reasons decoded or applied on this thread share.
    /// A backlog of a million workloads has a handful of distinct reasons, and a reason with
    /// its per-cluster map is larger than the rest of a pending workload's status: one copy
    /// each would be half a gigabyte.
    pub fn shared(self) -> Arc<PendingReason> {
        if matches!(self, Self::Queued) {
            static QUEUED: std::sync::LazyLock<Arc<PendingReason>> =
                std::sync::LazyLock::new(|| Arc::new(PendingReason::Queued));
            return Arc::clone(&QUEUED);
        }
        SHARED_REASONS.with(|cell| {
            let mut set = cell.borrow_mut();
            if let Some(found) = set.get(&self) {
                return Arc::clone(found);
            }
            if set.len() >= SHARED_REASONS_MAX {
                set.clear();
            }
            let arc = Arc::new(self);
            set.insert(Arc::clone(&arc));
            arc
        })
    }

    /// The `type` tag, for metrics labels and log fields.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Queued => "Queued",
            Self::QuotaExhausted { .. } => "QuotaExhausted",
            Self::InsufficientCapacity { .. } => "InsufficientCapacity",
            Self::Fragmentation { .. } => "Fragmentation",
            Self::NoMatchingCluster { .. } => "NoMatchingCluster",
            Self::WindowClosed { .. } => "WindowClosed",
            Self::RateLimited => "RateLimited",
            Self::MemberUnavailable { .. } => "MemberUnavailable",
            Self::WaitingForPreemption { .. } => "WaitingForPreemption",
            Self::WindowClosing { .. } => "WindowClosing",
            Self::BackingOff { .. } => "BackingOff",
        }
    }
}

/// One sentence for `tideway explain` and `status.message`.
impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Queued => f.write_str("waiting to be scheduled"),
            Self::QuotaExhausted {
                queue,
                flavor,
                used,
                limit,
            } => write!(
                f,
                "queue {queue} has used {used} of its {limit} {flavor} GPUs"
            ),
            Self::InsufficientCapacity {
                flavor,
                needed,
                largest_fit_per_cluster,
            } => {
                write!(f, "needs {needed} {flavor} GPUs in one topology domain")?;
                if !largest_fit_per_cluster.is_empty() {
                    let fits: Vec<String> = largest_fit_per_cluster
                        .iter()
                        .map(|(c, n)| format!("{c}={n}"))
                        .collect();
                    write!(f, "; largest fit per cluster: {}", fits.join(", "))?;
                }
                Ok(())
            }
            Self::Fragmentation {
                free_total,
                largest_domain,
            } => write!(
                f,
                "{free_total} GPUs are free but the largest topology domain has only {largest_domain}"
            ),
            Self::NoMatchingCluster {
                constraint,
                clusters_filtered,
            } => {
                write!(f, "no member cluster satisfies {constraint}")?;
                if !clusters_filtered.is_empty() {
                    write!(f, " (filtered out: {})", clusters_filtered.join(", "))?;
                }
                Ok(())
            }
            Self::WindowClosed { until } => {
                write!(f, "the quota window is closed until {}", until.to_rfc3339())
            }
            Self::RateLimited => f.write_str("dispatch is rate limited"),
            Self::MemberUnavailable { cluster } => {
                write!(f, "member cluster {cluster} is unavailable")
            }
            Self::WaitingForPreemption { victims } => write!(
                f,
                "waiting for {} workload(s) to be preempted: {}",
                victims.len(),
                victims.join(", ")
            ),
            Self::WindowClosing {
                boundary,
                estimate_seconds,
            } => write!(
                f,
                "the quota window closes at {} and its estimated {estimate_seconds} s would outlast it",
                boundary.to_rfc3339()
            ),
            Self::BackingOff { until, attempts } => write!(
                f,
                "attempt {attempts} failed; retried after its backoff, at {}",
                until.to_rfc3339()
            ),
        }
    }
}

/// Kubernetes quantity syntax ("500m", "4", "64Gi", "1.5"); the member parses it for real,
/// this only rejects what it certainly would.
fn is_quantity(s: &str) -> bool {
    const SUFFIXES: [&str; 14] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "m", "k", "M", "G", "T", "P", "E", "",
    ];
    let Some(number) = SUFFIXES.iter().find_map(|suffix| s.strip_suffix(suffix)) else {
        return false;
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits = |p: &str| p.chars().all(|c| c.is_ascii_digit());
    !int.is_empty() && digits(int) && digits(frac) && !(number.ends_with('.'))
}

impl CheckAt for Workload {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.header(
            prefix,
            &self.api_version,
            &self.kind,
            <Self as crate::meta::Resource>::KIND,
            &self.metadata,
        );
        self.spec.check_at(&at(prefix, "spec").path(), c);
    }
}

impl CheckAt for WorkloadSpec {
    fn check_at(&self, p: &str, c: &mut Checker) {
        c.name(at(p, "queue"), &self.queue);
        c.name(at(p, "priorityClass"), &self.priority_class);
        if let Some(user) = &self.user {
            c.text(at(p, "user"), user);
        }

        if self.pod_sets.is_empty() {
            c.push(at(p, "podSets"), "must contain at least one pod set");
        } else if self.pod_sets.len() > MAX_POD_SETS {
            c.push(
                at(p, "podSets"),
                format!(
                    "must contain at most {MAX_POD_SETS} pod sets (got {})",
                    self.pod_sets.len()
                ),
            );
        }
        for (i, ps) in self.pod_sets.iter().enumerate() {
            ps.check_at(&format!("{}[{i}]", at(p, "podSets")), c);
        }
        c.unique(
            p,
            "podSets",
            "name",
            self.pod_sets.iter().map(|s| s.name.as_str()),
        );

        if let Some(gang) = self.gang {
            let field = at(p, "gang.minCount");
            let total = self.total_pods();
            if gang.min_count == 0 {
                c.push(field, "must be at least 1");
            } else if u64::from(gang.min_count) > total && !self.pod_sets.is_empty() {
                c.push(
                    field,
                    format!(
                        "must not exceed the total pod count {total} (got {})",
                        gang.min_count
                    ),
                );
            }
        }

        if let Some(placement) = &self.placement {
            let pp = at(p, "placement").path();
            for (i, region) in placement.regions.iter().enumerate() {
                c.identifier(format!("{}[{i}]", at(&pp, "regions")), region);
            }
            c.unique(
                &pp,
                "regions",
                "",
                placement.regions.iter().map(String::as_str),
            );
            for (i, cluster) in placement.clusters.iter().enumerate() {
                c.name(format!("{}[{i}]", at(&pp, "clusters")), cluster);
            }
            c.unique(
                &pp,
                "clusters",
                "",
                placement.clusters.iter().map(String::as_str),
            );
            if placement.spread && self.gang.is_some() {
                c.push(
                    at(&pp, "spread"),
                    "cannot be combined with a gang: a gang never spans clusters",
                );
            }
        }

        if let Some(estimate) = self.runtime_estimate_seconds {
            c.range(
                at(p, "runtimeEstimateSeconds"),
                estimate,
                1,
                MAX_RUNTIME_ESTIMATE_SECONDS,
            );
        }
        if let Some(limit) = self.runtime_limit_seconds {
            c.range(
                at(p, "runtimeLimitSeconds"),
                limit,
                1,
                MAX_RUNTIME_ESTIMATE_SECONDS,
            );
            if self.runtime_estimate_seconds.is_some_and(|e| e > limit) {
                c.push(
                    at(p, "runtimeEstimateSeconds"),
                    "must not exceed runtimeLimitSeconds: the workload is stopped at its limit",
                );
            }
        }
        if let Some(checkpoint) = &self.checkpoint {
            c.range(
                at(p, "checkpoint.intervalSeconds"),
                checkpoint.interval_seconds,
                1,
                MAX_CHECKPOINT_INTERVAL_SECONDS,
            );
        }
        if let Some(limit) = self.retry_limit {
            c.range(at(p, "retryLimit"), limit, 0, MAX_RETRY_LIMIT);
        }
        if let Some(template) = &self.template
            && !template.is_object()
        {
            c.push(at(p, "template"), "must be an object");
        }
    }
}

impl CheckAt for PodSet {
    fn check_at(&self, p: &str, c: &mut Checker) {
        c.name(at(p, "name"), &self.name);
        c.range(at(p, "count"), self.count, 1, MAX_POD_COUNT);
        c.range(at(p, "gpusPerPod"), self.gpus_per_pod, 1, MAX_GPUS_PER_POD);
        c.identifier(at(p, "flavor"), &self.flavor);
        for (field, value) in [("cpu", &self.cpu), ("memory", &self.memory)] {
            if let Some(q) = value
                && !is_quantity(q)
            {
                c.push(
                    at(p, field),
                    format!("must be a Kubernetes quantity such as \"4\", \"500m\" or \"64Gi\" (got {q:?})"),
                );
            }
        }
    }
}

impl_validate!(Workload);

/// The answer to a submission: the stored workload, with what the caller should know about
/// it next to it (as the Kubernetes API answers with warnings). `warnings` is left out when
/// empty, so a submission with nothing to warn about is answered with the workload alone, as
/// before the field existed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Submitted {
    /// The workload as stored.
    #[serde(flatten)]
    pub workload: Workload,
    /// Sentences about a workload that was accepted but cannot run as things stand (e.g. a
    /// flavor no member cluster offers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Serde for [`WorkloadStatus::pending_reason`]: the wire form is the reason itself; decoding
/// shares equal reasons ([`PendingReason::shared`]), so a snapshot or log entry of many
/// workloads loads into one copy per distinct reason.
mod shared_reason {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::PendingReason;

    pub fn serialize<S: Serializer>(
        reason: &Option<Arc<PendingReason>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        reason.as_deref().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Arc<PendingReason>>, D::Error> {
        Ok(Option::<PendingReason>::deserialize(d)?.map(PendingReason::shared))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn retry_backoff_doubles_is_capped_and_jittered_the_same_everywhere() {
        let b = |uid: &str, n| super::retry_backoff(uid, n).num_milliseconds();
        for n in 1..=8 {
            let base = (10_000i64 << (n - 1)).min(600_000);
            let d = b("u-1", n);
            assert!(d >= base && d < base + base / 4, "attempt {n}: {d} ms");
            assert_eq!(d, b("u-1", n), "deterministic");
        }
        assert!(b("u-1", 40) <= 750_000, "capped, no overflow");
        let spread: std::collections::BTreeSet<i64> =
            (0..20).map(|i| b(&format!("u-{i}"), 1)).collect();
        assert!(
            spread.len() > 10,
            "jitter spreads workloads that failed together"
        );
    }
    use super::*;
    use crate::decode::{decode_json, decode_yaml};
    use crate::validation::Validate;

    pub(crate) const LLAMA_YAML: &str = include_str!("../testdata/workload-llama-ft.yaml");
    pub(crate) const BENCH_JSON: &str = include_str!("../testdata/workload-bench.json");

    #[test]
    fn phases_and_classes_parse_from_their_cli_spelling() {
        assert_eq!(
            "running".parse::<WorkloadPhase>().unwrap(),
            WorkloadPhase::Running
        );
        assert_eq!(
            "Preempted".parse::<WorkloadPhase>().unwrap(),
            WorkloadPhase::Preempted
        );
        for p in WorkloadPhase::ALL {
            assert_eq!(p.as_str().to_lowercase().parse::<WorkloadPhase>(), Ok(p));
        }
        for c in WorkloadClass::ALL {
            assert_eq!(c.as_str().parse::<WorkloadClass>(), Ok(c));
        }
        assert_eq!(
            "TRAINING".parse::<WorkloadClass>().unwrap(),
            WorkloadClass::Training
        );
        let e = "runing".parse::<WorkloadPhase>().unwrap_err();
        assert!(e.to_string().contains("Running"), "{e}");
        assert!("gpu".parse::<WorkloadClass>().is_err());
    }

    fn sample() -> Workload {
        let mut spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("worker", 2, 8, "H100")],
        );
        spec.gang = Some(Gang { min_count: 2 });
        spec.topology = Some(TopologyRequirement::Required(TopologyLevel::Rack));
        spec.runtime_estimate_seconds = Some(7200);
        spec.checkpoint = Some(Checkpoint {
            interval_seconds: 600,
            last_checkpoint_at: None,
        });
        Workload::new("llama-ft-1", spec)
    }

    fn full() -> Workload {
        let mut w = sample();
        w.metadata.uid = Some(crate::meta::new_uid());
        w.metadata.labels.insert("team".into(), "nlp".into());
        w.metadata
            .annotations
            .insert("tideway.dev/note".into(), "anything goes here".into());
        w.metadata.creation_timestamp = Some("2025-03-01T12:00:00Z".parse().unwrap());
        w.metadata.resource_version = Some(42);
        w.metadata.generation = Some(1);
        w.spec.user = Some("alice@example.com".into());
        w.spec.pod_sets.push(PodSet {
            name: "launcher".into(),
            count: 1,
            gpus_per_pod: 1,
            flavor: "H100".into(),
            cpu: Some("500m".into()),
            memory: Some("64Gi".into()),
        });
        w.spec.topology = Some(TopologyRequirement::Preferred(TopologyLevel::Zone));
        w.spec.placement = Some(Box::new(Placement {
            regions: vec!["eu-west".into()],
            clusters: vec!["a".into(), "b".into()],
            spread: false,
        }));
        w.spec.retry_limit = Some(3);
        w.spec.checkpoint = Some(Checkpoint {
            interval_seconds: 600,
            last_checkpoint_at: Some("2025-03-01T12:30:00.123456789Z".parse().unwrap()),
        });
        w.spec.template = Some(Box::new(serde_json::json!({
            "spec": {"containers": [{"name": "main", "image": "llama:1", "args": ["--lr", "0.1"]}]},
            "weird": {"yes": "no", "n": 1.5, "null": null, "t": true},
            "tricky": ["true", "1", "null", "~", "1.5", "", " x", "a: b", "- x", "0x10",
                "yes", "no", "on", "08:00", "1e3", "#c", "'q'", "\"d\"", "multi\nline", "ü"]
        })));
        w.status = Some(WorkloadStatus {
            phase: WorkloadPhase::Pending,
            pending_reason: Some(Arc::new(PendingReason::InsufficientCapacity {
                flavor: "H100".into(),
                needed: 16,
                largest_fit_per_cluster: [("a".to_owned(), 8), ("b".to_owned(), 0)].into(),
            })),
            message: Some("waiting".into()),
            cluster: None,
            attempts: 2,
            submitted_at: Some("2025-03-01T12:00:01Z".parse().unwrap()),
            admitted_at: None,
            started_at: None,
            finished_at: None,
            nodes: vec![NodeGpus {
                node: "n-17".into(),
                gpus: 8,
                zone: Some("eu-west-1a".into()),
                rack: None,
            }],
            retry_not_before: Some("2025-03-01T12:05:00Z".parse().unwrap()),
            last_checkpoint_at: Some("2025-03-01T12:01:00Z".parse().unwrap()),
        });
        w
    }

    #[test]
    fn required_yaml_example_decodes_and_validates() {
        let w: Workload = decode_yaml(LLAMA_YAML.as_bytes()).unwrap();
        w.validate().unwrap();
        assert_eq!(w, sample());
        assert_eq!(w.spec.total_gpus(), 16);
        assert_eq!(w.spec.gang_min_pods(), 2);
    }

    #[test]
    fn runtime_limit_bounds_the_estimate() {
        let mut w = sample();
        w.spec.runtime_limit_seconds = Some(3600);
        let errs = w.validate().unwrap_err();
        assert!(errs.has_field("spec.runtimeEstimateSeconds"), "{errs}");
        assert_eq!(errs.len(), 1, "{errs:#?}");
        w.spec.runtime_limit_seconds = Some(7200);
        w.validate().unwrap();
        let json = serde_json::to_string(&w).unwrap();
        assert!(json.contains("\"runtimeLimitSeconds\":7200"), "{json}");
    }

    #[test]
    fn required_json_example_decodes_and_validates() {
        let w: Workload = decode_json(BENCH_JSON.trim().as_bytes()).unwrap();
        w.validate().unwrap();
        assert_eq!(w.metadata.name, "bench-1");
        assert_eq!(w.spec.total_gpus(), 8);
        assert_eq!(
            w.spec.topology,
            Some(TopologyRequirement::Required(TopologyLevel::Rack))
        );
        // Serializing gives back exactly the submitted document.
        assert_eq!(serde_json::to_string(&w).unwrap(), BENCH_JSON.trim());
    }

    #[test]
    fn full_workload_round_trips_every_format() {
        let w = full();
        w.validate().unwrap();
        let json = serde_json::to_vec(&w).unwrap();
        assert_eq!(decode_json::<Workload>(&json).unwrap(), w);
        let yaml = serde_saphyr::to_string(&w).unwrap();
        assert_eq!(
            decode_yaml::<Workload>(yaml.as_bytes()).unwrap(),
            w,
            "{yaml}"
        );
        let mp = rmp_serde::to_vec_named(&w).unwrap();
        assert_eq!(rmp_serde::from_slice::<Workload>(&mp).unwrap(), w);
    }

    #[test]
    fn decoded_statuses_share_equal_reasons_and_keep_their_wire_form() {
        // One status per pending workload of a backlog: a million copies of the same map of
        // clusters were half of a pending workload's memory.
        let reason = PendingReason::InsufficientCapacity {
            flavor: "H100".into(),
            needed: 64,
            largest_fit_per_cluster: [("a".to_owned(), 32), ("b".to_owned(), 8)].into(),
        };
        let status = WorkloadStatus {
            phase: WorkloadPhase::Pending,
            pending_reason: Some(reason.clone().shared()),
            ..WorkloadStatus::default()
        };
        let json = serde_json::to_string(&status).unwrap();
        assert!(
            json.contains(r#""pendingReason":{"type":"InsufficientCapacity","flavor":"H100""#),
            "{json}"
        );
        let mp = rmp_serde::to_vec_named(&status).unwrap();
        let a: WorkloadStatus = rmp_serde::from_slice(&mp).unwrap();
        let b: WorkloadStatus = serde_json::from_str(&json).unwrap();
        assert_eq!(a, status);
        assert_eq!(a.pending_reason.as_deref(), Some(&reason));
        let (ra, rb) = (a.pending_reason.unwrap(), b.pending_reason.unwrap());
        assert!(Arc::ptr_eq(&ra, &rb), "equal reasons decode to one copy");
        let other = PendingReason::InsufficientCapacity {
            flavor: "H100".into(),
            needed: 64,
            largest_fit_per_cluster: [("a".to_owned(), 32)].into(),
        };
        assert!(
            !Arc::ptr_eq(&ra, &other.shared()),
            "different reasons stay apart"
        );
        assert!(Arc::ptr_eq(
            &PendingReason::Queued.shared(),
            &PendingReason::Queued.shared()
        ));
        let none: WorkloadStatus = serde_json::from_str(r#"{"phase":"Running"}"#).unwrap();
        assert_eq!(none.pending_reason, None);
    }

    #[test]
    fn every_pending_reason_round_trips() {
        let reasons = vec![
            PendingReason::Queued,
            PendingReason::QuotaExhausted {
                queue: "q".into(),
                flavor: "H100".into(),
                used: 16,
                limit: 16,
            },
            PendingReason::InsufficientCapacity {
                flavor: "A100".into(),
                needed: 64,
                largest_fit_per_cluster: [("a".to_owned(), 32)].into(),
            },
            PendingReason::Fragmentation {
                free_total: 20,
                largest_domain: 6,
            },
            PendingReason::NoMatchingCluster {
                constraint: "region in [us-east]".into(),
                clusters_filtered: vec!["eu-1".into()],
            },
            PendingReason::WindowClosed {
                until: "2025-03-01T20:00:00Z".parse().unwrap(),
            },
            PendingReason::RateLimited,
            PendingReason::BackingOff {
                until: "2025-03-01T20:00:00Z".parse().unwrap(),
                attempts: 2,
            },
            PendingReason::MemberUnavailable {
                cluster: "a".into(),
            },
            PendingReason::WaitingForPreemption {
                victims: vec!["w1".into(), "w2".into()],
            },
            PendingReason::WindowClosing {
                boundary: "2025-03-01T22:00:00Z".parse().unwrap(),
                estimate_seconds: 7200,
            },
        ];
        for reason in reasons {
            let json = serde_json::to_string(&reason).unwrap();
            assert!(
                json.starts_with(&format!(r#"{{"type":"{}""#, reason.code())),
                "{json}"
            );
            assert_eq!(
                serde_json::from_str::<PendingReason>(&json).unwrap(),
                reason
            );
            let yaml = serde_saphyr::to_string(&reason).unwrap();
            assert_eq!(
                serde_saphyr::from_str::<PendingReason>(&yaml).unwrap(),
                reason
            );
            let mp = rmp_serde::to_vec_named(&reason).unwrap();
            assert_eq!(rmp_serde::from_slice::<PendingReason>(&mp).unwrap(), reason);
            assert!(!reason.to_string().is_empty());
        }
        let json = r#"{"type":"Fragmentation","freeTotal":20,"largestDomain":6}"#;
        assert!(serde_json::from_str::<PendingReason>(json).is_ok());
        let bad = r#"{"type":"Fragmentation","freeTotal":20,"largestDomain":6,"x":1}"#;
        assert!(serde_json::from_str::<PendingReason>(bad).is_err());
    }

    #[test]
    fn topology_is_exactly_one_of_required_or_preferred() {
        let t: TopologyRequirement = serde_json::from_str(r#"{"preferred":"zone"}"#).unwrap();
        assert_eq!(t, TopologyRequirement::Preferred(TopologyLevel::Zone));
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"preferred":"zone"}"#
        );
        for bad in [r#"{}"#, r#"{"required":"rack","preferred":"zone"}"#] {
            let err = serde_json::from_str::<TopologyRequirement>(bad).unwrap_err();
            assert!(err.to_string().contains("exactly one"), "{err}");
        }
        assert!(serde_json::from_str::<TopologyRequirement>(r#"{"required":"row"}"#).is_err());
        assert!(TopologyLevel::Node < TopologyLevel::Rack);
        assert!(TopologyLevel::Rack < TopologyLevel::Zone);
    }

    #[test]
    fn invalid_spec_reports_every_problem_with_its_path() {
        let mut w = sample();
        w.api_version = "v1".into();
        w.kind = "Job".into();
        w.metadata.name = "Not_A_Name".into();
        w.spec.queue = String::new().into();
        w.spec.priority_class = String::new().into();
        w.spec.pod_sets = vec![
            PodSet::new("worker", 0, 0, "H100"),
            PodSet::new("worker", 100_001, 65, ""),
        ];
        w.spec.gang = Some(Gang { min_count: 200_000 });
        w.spec.runtime_estimate_seconds = Some(0);
        w.spec.runtime_limit_seconds = Some(0);
        w.spec.checkpoint = Some(Checkpoint {
            interval_seconds: 0,
            last_checkpoint_at: None,
        });
        w.spec.template = Some(Box::new(serde_json::json!([1])));
        w.spec.pod_sets[0].memory = Some("lots".into());
        let errs = w.validate().unwrap_err();
        for field in [
            "apiVersion",
            "kind",
            "metadata.name",
            "spec.queue",
            "spec.priorityClass",
            "spec.podSets[0].count",
            "spec.podSets[0].gpusPerPod",
            "spec.podSets[0].memory",
            "spec.podSets[1].count",
            "spec.podSets[1].gpusPerPod",
            "spec.podSets[1].flavor",
            "spec.podSets[1].name",
            "spec.gang.minCount",
            "spec.runtimeEstimateSeconds",
            "spec.runtimeLimitSeconds",
            "spec.checkpoint.intervalSeconds",
            "spec.template",
        ] {
            assert!(errs.has_field(field), "missing {field} in {errs}");
        }
        assert_eq!(errs.len(), 17, "{errs:#?}");
    }

    #[test]
    fn empty_pod_sets_and_zero_gang() {
        let mut w = sample();
        w.spec.pod_sets.clear();
        w.spec.gang = Some(Gang { min_count: 0 });
        let errs = w.validate().unwrap_err();
        assert!(errs.has_field("spec.podSets"), "{errs}");
        assert!(errs.has_field("spec.gang.minCount"), "{errs}");
    }

    #[test]
    fn spread_gang_and_placement_duplicates() {
        let mut w = sample();
        w.spec.placement = Some(Box::new(Placement {
            regions: vec!["eu".into(), "eu".into()],
            clusters: vec!["Bad".into()],
            spread: true,
        }));
        let errs = w.validate().unwrap_err();
        assert!(errs.has_field("spec.placement.spread"), "{errs}");
        assert!(errs.has_field("spec.placement.regions[1]"), "{errs}");
        assert!(errs.has_field("spec.placement.clusters[0]"), "{errs}");
    }

    #[test]
    fn helpers() {
        let mut spec = WorkloadSpec::new(
            "q",
            WorkloadClass::Inference,
            vec![
                PodSet::new("a", 3, 2, "H100"),
                PodSet::new("b", 2, 4, "A100"),
                PodSet::new("c", 1, 1, "H100"),
            ],
        );
        assert_eq!(spec.total_gpus(), 15);
        assert_eq!(spec.total_pods(), 6);
        assert_eq!(spec.gang_min_pods(), 6);
        spec.gang = Some(Gang { min_count: 4 });
        assert_eq!(spec.gang_min_pods(), 4);
        assert_eq!(
            spec.gpus_by_flavor(),
            BTreeMap::from([("A100", 8), ("H100", 7)])
        );
        // No overflow on unvalidated input.
        let huge = PodSet::new("x", u32::MAX, u32::MAX, "H100");
        assert_eq!(huge.total_gpus(), u64::from(u32::MAX) * u64::from(u32::MAX));
        assert!(WorkloadPhase::Cancelled.is_terminal());
        assert!(!WorkloadPhase::Preempted.is_terminal());
        assert!(WorkloadPhase::Running.holds_quota());
    }

    #[test]
    fn quantities() {
        for ok in ["4", "500m", "64Gi", "1.5", "128G", "0.5Ki"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "lots", "4 Gi", "-1", "1.", ".5", "Gi", "1.5.5"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn priority_class_defaults_to_normal() {
        let json = r#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"x"},
            "spec":{"queue":"q","class":"eval","podSets":[{"name":"w","count":1,"gpusPerPod":1,"flavor":"L4"}]}}"#;
        let w: Workload = decode_json(json.as_bytes()).unwrap();
        assert_eq!(w.spec.priority_class, "normal");
        w.validate().unwrap();
    }
}

#[cfg(test)]
pub(crate) mod strategies {
    //! Generators of valid workloads for the property tests here and in `decode`.
    use proptest::prelude::*;

    use super::*;

    fn name() -> impl Strategy<Value = String> {
        "[a-z]([a-z0-9-]{0,20}[a-z0-9])?"
    }

    fn class() -> impl Strategy<Value = WorkloadClass> {
        prop::sample::select(WorkloadClass::ALL.to_vec())
    }

    fn level() -> impl Strategy<Value = TopologyLevel> {
        prop::sample::select(vec![
            TopologyLevel::Node,
            TopologyLevel::Rack,
            TopologyLevel::Zone,
        ])
    }

    fn timestamp() -> impl Strategy<Value = DateTime<Utc>> {
        (0i64..4_000_000_000, 0u32..1_000_000_000)
            .prop_map(|(s, ns)| DateTime::from_timestamp(s, ns).expect("in range"))
    }

    fn template() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            "[a-zA-Z0-9 :._-]{0,12}".prop_map(serde_json::Value::String),
        ];
        let value = leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        prop::collection::btree_map("[a-z]{1,6}", value, 0..4)
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()))
    }

    prop_compose! {
        fn pod_set()(
            name in name(),
            count in 1u32..=MAX_POD_COUNT,
            gpus in 1u32..=MAX_GPUS_PER_POD,
            flavor in "[A-Z][A-Z0-9]{1,5}",
            cpu in proptest::option::of("[1-9][0-9]{0,2}m?"),
            memory in proptest::option::of("[1-9][0-9]{0,3}(Gi|Mi)"),
        ) -> PodSet {
            PodSet { name: name.into(), count, gpus_per_pod: gpus, flavor: flavor.into(), cpu, memory }
        }
    }

    prop_compose! {
        pub(crate) fn valid_workload()(
            name in name(),
            queue in name(),
            class in class(),
            priority_class in name(),
            user in proptest::option::of("[a-z]{1,8}@[a-z]{1,8}\\.com"),
            pod_sets in prop::collection::vec(pod_set(), 1..4),
            gang_frac in proptest::option::of(0.0f64..=1.0),
            topology in proptest::option::of((any::<bool>(), level())),
            regions in prop::collection::btree_set("[a-z]{2}-[a-z]{2,6}", 0..3),
            spread in any::<bool>(),
            runtime in proptest::option::of(1u64..=MAX_RUNTIME_ESTIMATE_SECONDS),
            checkpoint in proptest::option::of((1u64..=MAX_CHECKPOINT_INTERVAL_SECONDS, proptest::option::of(timestamp()))),
            retry_limit in proptest::option::of(0u32..=MAX_RETRY_LIMIT),
            template in proptest::option::of(template()),
            created in proptest::option::of(timestamp()),
            labels in prop::collection::btree_map("[a-z]{1,8}", "[a-z0-9]{0,8}", 0..3),
        ) -> Workload {
            let mut pod_sets = pod_sets;
            for (i, p) in pod_sets.iter_mut().enumerate() {
                p.name = format!("{}-{i}", p.name).into();
            }
            let mut spec = WorkloadSpec::new(queue, class, pod_sets);
            spec.priority_class = priority_class.into();
            spec.user = user.map(Into::into);
            let total = spec.total_pods();
            spec.gang = gang_frac.map(|f| Gang {
                min_count: ((total as f64 * f).ceil() as u64).clamp(1, total) as u32,
            });
            spec.topology = topology.map(|(required, level)| {
                if required {
                    TopologyRequirement::Required(level)
                } else {
                    TopologyRequirement::Preferred(level)
                }
            });
            if !regions.is_empty() || spread {
                spec.placement = Some(Box::new(Placement {
                    regions: regions.into_iter().collect(),
                    clusters: vec![],
                    spread: spread && spec.gang.is_none(),
                }));
            }
            spec.runtime_estimate_seconds = runtime;
            spec.checkpoint = checkpoint.map(|(interval_seconds, last_checkpoint_at)| Checkpoint {
                interval_seconds,
                last_checkpoint_at,
            });
            spec.retry_limit = retry_limit;
            spec.template = template.map(Box::new);
            let mut w = Workload::new(name, spec);
            w.metadata.creation_timestamp = created;
            w.metadata.labels = labels;
            w
        }
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::strategies::valid_workload;
    use super::*;
    use crate::decode::{decode_json, decode_yaml};
    use crate::validation::Validate;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn generated_workloads_are_valid_and_round_trip(w in valid_workload()) {
            prop_assert!(w.validate().is_ok(), "{:?}", w.validate());
            let json = serde_json::to_vec(&w).unwrap();
            prop_assert_eq!(&decode_json::<Workload>(&json).unwrap(), &w);
            let mp = rmp_serde::to_vec_named(&w).unwrap();
            prop_assert_eq!(&rmp_serde::from_slice::<Workload>(&mp).unwrap(), &w);
            let yaml = serde_saphyr::to_string(&w).unwrap();
            prop_assert_eq!(&decode_yaml::<Workload>(yaml.as_bytes()).unwrap(), &w);
        }

        #[test]
        fn gang_min_pods_never_exceeds_total_pods(w in valid_workload()) {
            prop_assert!(w.spec.gang_min_pods() <= w.spec.total_pods());
            prop_assert!(w.spec.total_gpus() >= w.spec.total_pods());
        }

        #[test]
        fn zeroing_any_count_is_reported_at_that_pod_set(
            w in valid_workload(),
            idx in any::<prop::sample::Index>(),
            gpus in any::<bool>(),
        ) {
            let mut w = w;
            let i = idx.index(w.spec.pod_sets.len());
            let field = if gpus {
                w.spec.pod_sets[i].gpus_per_pod = 0;
                format!("spec.podSets[{i}].gpusPerPod")
            } else {
                w.spec.pod_sets[i].count = 0;
                format!("spec.podSets[{i}].count")
            };
            let errs = w.validate().unwrap_err();
            prop_assert!(errs.has_field(&field), "{}", errs);
        }
    }
}
