//! Tideway's resource model: the Kubernetes-style documents users submit and the federation
//! stores in its Raft log.
//!
//! Everything that crosses a process boundary (REST, agent protocol, Raft log, CLI files) is
//! one of these types, so they live in one small crate that the server, the agent, the CLI and
//! the tests all share. Decoding ([`decode`]) and validation ([`validation`]) are kept apart:
//! decoding stops at the first structural problem, validation reports every semantic problem
//! at once, and both name the offending field with the same camelCase JSON path.

#![warn(missing_docs)]

/// The workload's short strings (queue, flavor, priority class, pod set names): up to 24 bytes
/// are held inline, so a million pending workloads do not each allocate them. Serialized as
/// plain strings, so the wire, the log and snapshots are the same bytes as with `String`.
pub use compact_str::CompactString;

pub mod agent;
pub mod audit;
pub mod auth;
pub mod capacity;
#[cfg(feature = "client")]
pub mod client;
pub mod clock;
pub mod cluster;
pub mod cron;
pub mod decode;
pub mod digest;
pub mod digest_delta;
pub mod explain;
#[cfg(feature = "client")]
pub mod http;
pub mod list;
pub mod member_cluster;
pub mod meta;
pub mod names;
pub mod policy;
pub mod policy_version;
pub mod priority_class;
pub mod problem;
pub mod queue;
pub mod quota_schedule;
pub mod role_binding;
pub mod rollout;
pub mod tuning;
pub mod usage;
pub mod validation;
pub mod watch;
pub mod webhook;
pub mod workload;

pub use decode::{
    AnyResource, DecodeError, Format, decode_any, decode_json, decode_resource, decode_yaml,
    peek_type_meta, split_documents,
};
pub use member_cluster::{
    MemberCluster, MemberClusterSpec, MemberClusterStatus, MemberPhase, Pool, PoolKind,
};
pub use meta::{API_VERSION, MetaError, ObjectMeta, Resource, TypeMeta, new_uid, validate_name};
pub use names::{ClusterName, Uid, WorkloadName};
pub use policy::{Policy, PolicySpec, PolicyStatus, SchedulerSettings};
pub use policy_version::{
    DiffEntry, DiffRequest, DryRunReport, DryRunWorkload, PolicyDiff, PolicyHistory,
    PolicyVersionSummary, QuotaMove, RollbackRequest,
};
pub use priority_class::{
    Aging, Preemptibility, PreemptionPolicy, PriorityClass, PriorityClassSpec,
};
pub use problem::Problem;
pub use queue::{
    FlavorQuota, PreemptionScope, Queue, QueueFlavorStatus, QueuePreemption, QueueSpec,
    QueueStatus, QuotaSetBy, SideQuotaStatus,
};
pub use quota_schedule::{
    DayOfWeek, QuotaAmount, QuotaChange, QuotaSchedule, QuotaScheduleSpec, QuotaScheduleStatus,
    QuotaTarget, QuotaWindow, ReclaimOrder, ReclaimPreview, ScheduleError, ScheduleNext,
    ScheduleScope, ScheduleTimeline, ScheduleTransition, TimelineHour, TimelineQuota, Transition,
    WindowQuota,
};
pub use role_binding::{Role, RoleBinding, RoleBindingSpec};
pub use rollout::{RollbackTrigger, Rollout, RolloutScope};
pub use validation::{FieldError, Validate, ValidationErrors};
pub use workload::{
    Checkpoint, Gang, NodeGpus, PendingReason, Placement, PodSet, Submitted, TopologyLevel,
    TopologyRequirement, UnknownVariant, Workload, WorkloadClass, WorkloadPhase, WorkloadSpec,
    WorkloadStatus,
};
