//! What one scheduling cycle sees: the state, the policy and the clock, all passed in.
//!
//! Every type here is plain serde data because the same input is replicated state on the
//! leader, a recorded frame in the trace simulator and the document a policy dry-run
//! replays. Nothing here is read from the environment: `now` and `seed` are fields.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::digest::CapacityDigest;
use tideway_api::{FlavorQuota, PriorityClass, Queue, SchedulerSettings, TopologyLevel, Workload};

use super::error::InputError;
use super::hash::DetSet;
use super::rollout::RolloutPlacement;
use super::tidal::{FleetSide, Handover};

/// One cycle's input. `schedule` never fails on it; [`SchedulerInput::validate`] reports
/// inconsistencies a caller may want to refuse before replaying a recorded frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerInput {
    /// The cycle's clock; waiting times, aging and runtime estimates are measured from it.
    pub now: DateTime<Utc>,
    /// Seeds tie-breaks. The leader derives it from `settings.tie_break_seed` and the cycle
    /// number so ties rotate between cycles yet replay identically.
    pub seed: u64,
    pub settings: SchedulerSettings,
    pub queues: Vec<Queue>,
    pub priority_classes: Vec<PriorityClass>,
    pub clusters: Vec<ClusterView>,
    pub pending: Vec<PendingWorkload>,
    /// Workloads holding quota: admitted or assigned but not started, and running.
    #[serde(default)]
    pub running: Vec<RunningWorkload>,
    /// Reservations from the previous cycle's `Reserve` decisions.
    #[serde(default)]
    pub reservations: Vec<Reservation>,
    pub preemption_budget: PreemptionBudget,
    /// Effective quotas of the active tidal window, replacing the queues' own per flavor.
    #[serde(default)]
    pub quota_overrides: Vec<QuotaOverride>,
    /// While a version scoped to clusters is rolled out: the queues whose pending work is
    /// placed only on those clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPlacement>,
    /// Preemptors of earlier `Preempt` decisions that have not started yet, each with the
    /// cluster it preempted on (`expectedStart`: when its victims' grace ends). The caller
    /// keeps one from the decision until the preemptor is assigned or leaves. The capacity
    /// its victims free stays held for it after they are gone, until it starts: without
    /// this, the first workload decided after the victims leave takes their GPUs, and the
    /// preemptor reclaims again (see `reclaim`). Empty keeps the hold only while victims
    /// are still leaving.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preemptors: Vec<Reservation>,
    /// Pending workloads per flavor that the caller left out of `pending` (the simulator
    /// shows the core only the work it could act on). They count among those waiting when
    /// a reservation is priced, so the price is that of a cycle over all pending work, as
    /// on the live leader, which passes all of it and leaves this empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unshown_pending: BTreeMap<String, u32>,
}

/// A member cluster as the scheduler needs it: where it is, whether it takes work, and what
/// its agent last reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub name: String,
    pub region: String,
    /// Ready members take new work; others are only reported in explanations.
    pub ready: bool,
    pub digest: CapacityDigest,
    /// The topology levels the member declares its nodes are labelled with; `None` when it
    /// declares none, and then only the domains in its digest count. A required level the
    /// member does not declare is never placed there, whatever the digest shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_levels: Option<Vec<TopologyLevel>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingWorkload {
    pub workload: Workload,
    /// When the submission was committed; waiting time (aging, reservations) counts from it.
    pub submitted_at: DateTime<Utc>,
    /// Raft log index of the submission: the FIFO order among equals, unique and total.
    pub seq: u64,
}

/// A workload that holds quota and (once assigned) member capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningWorkload {
    pub workload: Workload,
    pub cluster: String,
    /// The pool of its first pod set; `placements` has the full picture when known.
    pub pool: String,
    /// Where its pods were put, as the `Assign` decision said. Empty when unknown (e.g. work
    /// adopted from before the federation); then only `pool` is known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<PoolPlacement>,
    /// `None` while admitted or assigned but not started: the cheapest preemption victims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    pub admitted_at: DateTime<Utc>,
    /// The member's latest report; falls back to `spec.checkpoint.lastCheckpointAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    /// Not a preemption victim before this instant, so work is not evicted again and again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible_after: Option<DateTime<Utc>>,
    /// False while the member's digest does not show its pods yet (an assignment still in
    /// flight); the scheduler then takes its capacity out of the digest itself, so the
    /// next cycle cannot book the same GPUs twice.
    #[serde(default = "yes")]
    pub accounted_in_digest: bool,
    /// Set while it is being evicted (grace period running) for this preemptor's uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempting_for: Option<String>,
}

fn yes() -> bool {
    true
}

/// A carried preemptor (`SchedulerInput::preemptors`) that has not started this long after
/// its victims' grace ended has given up its hold (its capacity went elsewhere, or it no
/// longer fits there): it competes like any other pending workload and may reclaim again.
/// Callers may drop such entries.
pub const PREEMPTOR_HOLD_GIVE_UP_SECONDS: i64 = 600;

/// A hold on one cluster for a big gang that waited too long; see `reservation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    pub uid: String,
    pub cluster: String,
    pub expected_start: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

/// Evictions allowed per sliding window; the leader counts, the scheduler spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionBudget {
    pub window_seconds: u64,
    /// Victims (workloads evicted) allowed per window.
    pub max: u32,
    pub used_in_window: u32,
    /// When the oldest eviction leaves the window; explanations cite it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refills_at: Option<DateTime<Utc>>,
}

impl PreemptionBudget {
    pub fn remaining(&self) -> u32 {
        self.max.saturating_sub(self.used_in_window)
    }

    /// The budget the settings allow, nothing spent yet.
    pub fn per_minute(max: u32) -> Self {
        Self {
            window_seconds: 60,
            max,
            used_in_window: 0,
            refills_at: None,
        }
    }
}

/// The quota a tidal window gives one queue (or one fleet side) for one flavor; it replaces
/// the queue's own `FlavorQuota` for as long as the window is open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaOverride {
    /// The queue whose quota this replaces; empty for a fleet side's quota.
    pub queue: String,
    /// Set (with `queue` empty) for a pool quota: the guarantee of a side of the fleet
    /// (inference, or training-like work) within `regions`. That side may run beyond it on
    /// idle capacity; the other side, below its own guarantee, reclaims the excess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<FleetSide>,
    /// Regions a side quota covers; empty means the whole fleet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    pub quota: FlavorQuota,
    /// The window's name, for explanations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// When the window ends. A zero quota with an end is reported as `WindowClosed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// How the coming boundary is crossed (lead time, notice, reclaim order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<Handover>,
}

/// Where a workload's pods of one flavor go: the `Assign` decision says it, and the same
/// record comes back in `RunningWorkload::placements`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPlacement {
    pub flavor: String,
    pub pool: String,
    /// The narrowest reported domain holding every pod of this placement, if any; the
    /// member's gang scheduler should keep the pods there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<DomainRef>,
    pub pods: Vec<PodCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainRef {
    pub level: TopologyLevel,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCount {
    pub gpus_per_pod: u32,
    pub count: u32,
}

pub use tideway_api::tuning::{QueueOrder, RoutingWeights, SchedulerTuning};

/// The identity decisions use: the uid, or the name for objects not yet stored.
pub fn uid_of(w: &Workload) -> &str {
    w.metadata.uid.as_deref().unwrap_or(&w.metadata.name)
}

impl SchedulerInput {
    /// Reports the first inconsistency; `schedule` copes with all of them deterministically,
    /// but a recorded frame that fails here was not produced by a healthy leader.
    pub fn validate(&self) -> Result<(), InputError> {
        let mut clusters = DetSet::default();
        for c in &self.clusters {
            if !clusters.insert(c.name.as_str()) {
                return Err(InputError::DuplicateCluster(c.name.clone()));
            }
            if c.digest.cluster != c.name {
                return Err(InputError::DigestMismatch {
                    cluster: c.name.clone(),
                    digest: c.digest.cluster.clone(),
                });
            }
        }
        let mut uids = DetSet::default();
        let mut seqs = DetSet::default();
        for p in &self.pending {
            let uid = uid_of(&p.workload);
            if !uids.insert(uid) {
                return Err(InputError::DuplicateWorkload(uid.to_owned()));
            }
            if !seqs.insert(p.seq) {
                return Err(InputError::DuplicateSeq(p.seq));
            }
        }
        for r in &self.running {
            let uid = uid_of(&r.workload);
            if !uids.insert(uid) {
                return Err(InputError::DuplicateWorkload(uid.to_owned()));
            }
            if !clusters.contains(r.cluster.as_str()) {
                return Err(InputError::UnknownCluster {
                    workload: uid.to_owned(),
                    cluster: r.cluster.clone(),
                });
            }
        }
        for r in self.reservations.iter().chain(&self.preemptors) {
            if !clusters.contains(r.cluster.as_str()) {
                return Err(InputError::UnknownCluster {
                    workload: r.uid.clone(),
                    cluster: r.cluster.clone(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{Gang, PodSet, WorkloadClass, WorkloadSpec};

    use super::*;

    fn typical() -> PendingWorkload {
        let mut spec = WorkloadSpec::new(
            "research-training",
            WorkloadClass::Training,
            vec![PodSet::new("worker", 16, 8, "H100")],
        );
        spec.priority_class = "normal".into();
        spec.user = Some("alice.example@example.com".into());
        spec.gang = Some(Gang { min_count: 16 });
        spec.topology = Some(tideway_api::TopologyRequirement::Required(
            TopologyLevel::Rack,
        ));
        spec.runtime_estimate_seconds = Some(4 * 3600);
        spec.checkpoint = Some(tideway_api::Checkpoint {
            interval_seconds: 1800,
            last_checkpoint_at: None,
        });
        let mut w = Workload::new("llama-finetune-run-0042", spec);
        w.metadata.uid = Some("6f1c2a9e-3b7d-4c51-9a0e-2f4b8d7c6e15".into());
        PendingWorkload {
            workload: w,
            submitted_at: "2030-01-01T00:00:00Z".parse().unwrap(),
            seq: 123_456_789,
        }
    }

    /// Pending workloads are replicated state and the bulk of a cycle's input: they must stay
    /// small. (The opaque `template` is not the scheduler's business; callers leave it out.)
    #[test]
    fn a_pending_workload_stays_under_two_kib() {
        let p = typical();
        let msgpack = rmp_serde::to_vec_named(&p).unwrap().len();
        let json = serde_json::to_vec(&p).unwrap().len();
        assert!(msgpack <= 2048, "{msgpack} B MessagePack");
        assert!(json <= 2048, "{json} B JSON");
        assert!(std::mem::size_of::<PendingWorkload>() <= 1024);
    }

    #[test]
    fn validate_reports_duplicates_and_unknown_clusters() {
        let mut input = SchedulerInput {
            now: "2030-01-01T00:00:00Z".parse().unwrap(),
            seed: 0,
            settings: SchedulerSettings::default(),
            queues: Vec::new(),
            priority_classes: Vec::new(),
            clusters: Vec::new(),
            pending: vec![typical(), typical()],
            running: Vec::new(),
            reservations: Vec::new(),
            preemption_budget: PreemptionBudget::per_minute(10),
            quota_overrides: Vec::new(),
            rollout: None,
            preemptors: Vec::new(),
            unshown_pending: Default::default(),
        };
        assert!(matches!(
            input.validate(),
            Err(InputError::DuplicateWorkload(_))
        ));
        input.pending.pop();
        assert_eq!(input.validate(), Ok(()));
        input.reservations.push(Reservation {
            uid: "x".into(),
            cluster: "nowhere".into(),
            expected_start: input.now,
            created_at: input.now,
        });
        assert!(matches!(
            input.validate(),
            Err(InputError::UnknownCluster { .. })
        ));
    }
}
