//! `SchedulerTuning`: the scheduler core's implementation knobs, carried by the policy.
//!
//! They live here, beside [`crate::SchedulerSettings`], so that a policy bundle can carry
//! them (`spec.scheduler.tuning`) and the live leader, the simulator and a policy dry-run
//! read the same values from the same document: a knob only the simulator could set would
//! measure a policy that never runs.

use serde::{Deserialize, Serialize};

/// Routing score weights; every term is normalised to 0..=1 and lower scores win.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RoutingWeights {
    /// Prefer pools left fuller (bin packing keeps whole nodes free for big gangs).
    pub binpack: f64,
    /// Prefer placements that strand the fewest GPUs in the chosen domain.
    pub fragmentation: f64,
    /// For `placement.spread`: prefer clusters with fewer replicas of the same group.
    pub spread_cluster: f64,
    /// For `placement.spread`: prefer regions with fewer replicas of the same group.
    pub spread_region: f64,
}

impl Default for RoutingWeights {
    fn default() -> Self {
        Self {
            binpack: 1.0,
            fragmentation: 1.0,
            spread_cluster: 1.0,
            spread_region: 1.0,
        }
    }
}

/// The order among pending workloads of equal priority and fair share.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum QueueOrder {
    /// Submission order.
    #[default]
    Fifo,
    /// Least expected GPU-time first (run-time estimate times GPUs), like Helios's QSSF:
    /// better average completion time when estimates are good, at the price of FIFO
    /// fairness. Aging still lifts long-waiting work.
    ShortestExpectedFirst,
}

/// Implementation knobs, each with a default that suits a fleet of tens of clusters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SchedulerTuning {
    /// A gang that waited this long without fitting may get a reservation.
    pub reservation_after_seconds: u64,
    /// Live reservations at once, fleet-wide; 0 (the default) turns reservations off. On the
    /// contended Philly replay every row with reservations had a worse average completion
    /// time than the same row without (measured: docs/benchmarks/sim-contended.md) and did
    /// not shorten the gangs' wait either, while guarantee reclaim gives a queue's gangs
    /// their nodes back within a bounded time. Turn them on (16 is a fair size for tens of
    /// clusters) where gangs borrow beyond their guarantee and must not starve.
    pub max_reservations: u32,
    /// Live reservations per cluster (and never two on the same flavor of one cluster).
    pub max_reservations_per_cluster: u32,
    /// Only gangs of at least this many GPUs (of one flavor) get reservations; unset means
    /// one node's GPUs, i.e. work that needs whole nodes, which a stream of small jobs can
    /// starve. Smaller work fits into any freed GPUs and only waits its turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_min_gpus: Option<u64>,
    /// What a reservation may cost others per second of waiting it saves its gang: the
    /// GPU-seconds it is expected to keep idle, over the mean GPUs of the pending work, may
    /// be at most this many times the gang's wait so far (see `reservation`). 0 allows
    /// reservations only where nobody else waits.
    pub reservation_idle_factor: f64,
    /// Assumed runtime of work without an estimate: when running work is expected to end
    /// (reservation start times) and how long pending work would hold what it takes
    /// (backfill). Conservative on purpose: a short guess would break reservations.
    pub default_runtime_estimate_seconds: u64,
    /// How equals (same priority, same fair share) are ordered.
    pub order: QueueOrder,
    /// Stop assigning after this many decisions in one cycle (`Queued` for the rest).
    pub max_assignments_per_cycle: Option<u32>,
    /// Preemption plans evaluated per cycle; bounds the cycle's cost under overload.
    pub max_preemption_attempts_per_cycle: u32,
    /// Notice given to a victim that cannot checkpoint.
    pub preemption_grace_seconds: u64,
    /// Notice given to a checkpointable victim, to write a checkpoint first.
    pub checkpoint_grace_seconds: u64,
    /// The least notice a `cautious` victim gets.
    pub cautious_grace_seconds: u64,
    /// How candidate clusters and pools are scored.
    pub weights: RoutingWeights,
    /// Training-like work goes to training or shared pools, inference to inference or
    /// shared pools; eval and experiment go anywhere.
    pub pool_affinity: bool,
    /// Inference replicas carrying this label spread against each other; others spread
    /// within their queue.
    pub spread_label: String,
    /// Per-cluster lists inside a `PendingReason` are cut to this many entries (the full
    /// breakdown is in the explanation), so 100,000 reasons stay small.
    pub max_reason_clusters: usize,
    /// Kept as history: only gangs of at least this many GPUs (of one flavor) reclaim their
    /// queue's lent guarantee from equal-priority borrowers of the cohort. Unset (the
    /// default): every workload within its queue's guarantee does, which keeps the promise
    /// that no queue waits longer than on its static partition. The threshold was fitted to
    /// one replay (12 on the contended Philly fleet) and did not carry over to other fleets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim_min_gpus: Option<u64>,
    /// Experimental, off by default: a workload within its queue's guarantee reclaims only
    /// when it would otherwise wait longer than on the queue's static partition, by more
    /// than a victim's notice (the scheduler core's `promise`). It loses less work than
    /// reclaiming for every workload but, measured on contended replays, leaves some queues
    /// worse off than their static partition (docs/benchmarks/sim-robust.md), so the
    /// guarantee-first default does not use it. Ignored when `reclaimMinGpus` is set.
    pub reclaim_by_partition_wait: bool,
    /// Reclaim from equal-priority borrowers of the cohort evicts only work that would lose
    /// at most this much (seconds since its start or last checkpoint; not-started work loses
    /// none); unset: any borrower. Evicting a borrower that cannot checkpoint throws away all
    /// it ran, and on a heavy-tailed trace the cheapest victims to empty a whole node with
    /// are often one long job of that node: bounding the loss keeps reclaim to recently
    /// started borrowers, and a gang that finds none waits for the next ones to start.
    /// Victims of a higher-priority preemptor are not bounded by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim_max_work_lost_seconds: Option<u64>,
    /// Reclaim from equal-priority borrowers evicts only work that would lose at most this
    /// many times as long as the reclaiming workload has waited (a gang that waited a day
    /// may cost a borrower a day's work, one that waited a minute only a minute's); unset:
    /// no such bound. With `reclaimMaxWorkLostSeconds` the smaller bound applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim_loss_per_wait: Option<f64>,
    /// When a gang needs whole nodes freed, empty first the nodes whose victims lose the
    /// least work (GPU-seconds since start or last checkpoint), fewest victims breaking
    /// ties (the default); off: fewest victims first, work lost breaking ties. Work that
    /// cannot checkpoint loses all it ran, so one long job is a dearer victim than three
    /// that just started: on the contended Philly replay reclaim lost about a third of the
    /// work this way (measured: docs/benchmarks/sim-contended.md).
    pub nodes_by_work_lost: bool,
    /// Only gangs whose queue stays within its guarantee with them get reservations; work
    /// that would borrow waits for idle capacity instead of holding it idle for itself.
    pub reservation_within_guarantee: bool,
    /// Gangs of at least this many GPUs that fit nowhere, while their cluster has enough
    /// GPUs free in scattered holes, may move smaller checkpointing work of equal or lower
    /// priority off the nodes they need, when that work fits again in the holes at once
    /// (defragmentation; docs/scheduling.md). Unset: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defragment_min_gpus: Option<u64>,
    /// Defragmentation moves only work that would lose at most this much (seconds since its
    /// last checkpoint or start).
    pub defragment_max_work_lost_seconds: u64,
}

impl Default for SchedulerTuning {
    fn default() -> Self {
        Self {
            reservation_after_seconds: 1800,
            max_reservations: 0,
            max_reservations_per_cluster: 1,
            reservation_min_gpus: None,
            reservation_idle_factor: 1.0,
            default_runtime_estimate_seconds: 24 * 3600,
            order: QueueOrder::Fifo,
            max_assignments_per_cycle: None,
            max_preemption_attempts_per_cycle: 64,
            preemption_grace_seconds: 30,
            checkpoint_grace_seconds: 300,
            cautious_grace_seconds: 600,
            weights: RoutingWeights::default(),
            pool_affinity: true,
            spread_label: "tideway.dev/replica-of".to_owned(),
            max_reason_clusters: 5,
            reclaim_min_gpus: None,
            reclaim_by_partition_wait: false,
            reclaim_max_work_lost_seconds: None,
            reclaim_loss_per_wait: None,
            nodes_by_work_lost: true,
            reservation_within_guarantee: false,
            defragment_min_gpus: None,
            defragment_max_work_lost_seconds: 600,
        }
    }
}

impl SchedulerTuning {
    /// Whether every knob has its default: such a section is left out of a document.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Reports every knob out of its range under `prefix` (`spec.scheduler.tuning`): a
    /// factor that is negative or not a number would silently turn a feature off or on.
    pub(crate) fn check(&self, prefix: &str, c: &mut crate::validation::Checker) {
        use crate::validation::at;
        let factor = |c: &mut crate::validation::Checker, field: &str, v: f64, max: f64| {
            if !(v.is_finite() && (0.0..=max).contains(&v)) {
                c.push(
                    at(prefix, field),
                    format!("must be a number from 0 to {max}, got {v}"),
                );
            }
        };
        factor(
            c,
            "reservationIdleFactor",
            self.reservation_idle_factor,
            1e6,
        );
        if let Some(v) = self.reclaim_loss_per_wait {
            factor(c, "reclaimLossPerWait", v, 1e6);
        }
        let w = at(prefix, "weights").path();
        for (field, v) in [
            ("binpack", self.weights.binpack),
            ("fragmentation", self.weights.fragmentation),
            ("spreadCluster", self.weights.spread_cluster),
            ("spreadRegion", self.weights.spread_region),
        ] {
            if !(v.is_finite() && (0.0..=1000.0).contains(&v)) {
                c.push(
                    at(&w, field),
                    format!("must be a number from 0 to 1000, got {v}"),
                );
            }
        }
        c.range(
            at(prefix, "maxReservationsPerCluster"),
            self.max_reservations_per_cluster,
            1,
            1000,
        );
        c.range(
            at(prefix, "defaultRuntimeEstimateSeconds"),
            self.default_runtime_estimate_seconds,
            1,
            365 * 24 * 3600,
        );
        c.range(
            at(prefix, "maxPreemptionAttemptsPerCycle"),
            self.max_preemption_attempts_per_cycle,
            1,
            100_000,
        );
        c.range(
            at(prefix, "maxReasonClusters"),
            self.max_reason_clusters,
            1,
            1000,
        );
        if let Some(n) = self.max_assignments_per_cycle {
            c.range(at(prefix, "maxAssignmentsPerCycle"), n, 1, u32::MAX);
        }
        if let Some(n) = self.reservation_min_gpus {
            c.range(at(prefix, "reservationMinGpus"), n, 1, 1_000_000);
        }
        if let Some(n) = self.reclaim_min_gpus {
            c.range(at(prefix, "reclaimMinGpus"), n, 1, 1_000_000);
        }
        if let Some(n) = self.defragment_min_gpus {
            c.range(at(prefix, "defragmentMinGpus"), n, 2, 1_000_000);
        }
        c.range(
            at(prefix, "defragmentMaxWorkLostSeconds"),
            self.defragment_max_work_lost_seconds,
            0,
            365 * 24 * 3600,
        );
        c.text(at(prefix, "spreadLabel"), &self.spread_label);
    }
}
