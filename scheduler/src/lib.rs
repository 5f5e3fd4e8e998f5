//! The scheduler core: a pure, deterministic function from one cycle's state, policy and
//! clock to decisions.
//!
//! No I/O, no wall clock, no randomness but `SchedulerInput::seed`: the same input gives the
//! same [`SchedulerOutput`], byte for byte. That is what lets the live leader, the trace
//! simulator and policy dry-run share this code, and what makes every decision replayable
//! and explainable.
//!
//! Layout, in the order a workload meets it: [`input`] (what a cycle sees), `ordering` and
//! `fair_share` (who goes first), `quota` (guarantees, borrowing, tidal overrides), `routing`
//! over `capacity` (which cluster, and taking its GPUs so nothing is booked twice),
//! `preemption` (evicting in one cluster), `reservation` (big gangs), and [`decision`] /
//! [`explain`] (what comes out). `cycle` walks the pending workloads. Only the data types and
//! [`schedule`] are public: the rest may change without breaking the leader or the simulator.
//!
//! # What the caller does with the decisions
//!
//! The core keeps no state between cycles; the caller (leader, simulator, dry-run) carries it:
//! - `Assign`: the workload becomes a [`RunningWorkload`] on that cluster with the decision's
//!   `placements`, `accounted_in_digest: false` until the member's digest shows its pods (so
//!   the next cycle does not book the same GPUs), `started_at` once the member reports it.
//! - `Preempt`: each victim gets `preempting_for: Some(preemptor)` and stays in `running`
//!   until it is gone (grace period, then kill); the preemptor stays pending and is reported
//!   `WaitingForPreemption` meanwhile, with the capacity held for it. Victims go back to the
//!   queue. The caller also counts the victims against the [`PreemptionBudget`].
//! - `Reserve`: becomes a [`Reservation`] in the next cycle's input; a reservation not
//!   re-emitted (the workload was assigned, or left) is dropped.
//! - `Pending`: the reason and explanation go into the workload's status.

mod capacity;
mod cycle;
pub mod decision;
mod defragment;
pub mod error;
mod estimate;
pub mod estimator;
pub mod explain;
mod fair_share;
pub mod fit;
mod hash;
pub mod input;
mod nodes;
mod ordering;
mod preemption;
mod promise;
mod quota;
mod reclaim;
pub use reclaim::side_guarantee_at;
mod reservation;
pub mod rollout;
mod routing;
pub mod tidal;
pub mod usage;

pub use decision::{
    CheckpointNotice, Decision, PreemptionCost, SchedulerOutput, SchedulerStats, VictimTier,
};
pub use error::InputError;
pub use estimator::{Estimate, EstimateBasis, EstimatorConfig, RuntimeEstimator};
pub use explain::{ClusterVerdict, Explanation, Unblock, Verdict};
pub use fit::Gangs;
pub use input::{
    ClusterView, DomainRef, PendingWorkload, PodCount, PoolPlacement, PreemptionBudget, QueueOrder,
    QuotaOverride, Reservation, RoutingWeights, RunningWorkload, SchedulerInput, SchedulerTuning,
};
pub use quota::{Limit, QueueInfo, QuotaBlock, QuotaBook};

/// Runs one scheduling cycle. Every pending workload gets exactly one decision; decisions
/// come in the order the workloads were considered (priority, fair share, FIFO).
///
/// Never panics on input: inconsistent data (unknown queues or clusters, digests that do not
/// add up) is handled conservatively and reported in explanations.
pub fn schedule(input: &SchedulerInput) -> SchedulerOutput {
    let mut cycle = cycle::Cycle::new(input);
    cycle.run();
    cycle.finish()
}
