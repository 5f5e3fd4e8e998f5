//! The leader's scheduling loop: the scheduler core over the replicated state, its decisions
//! committed as one batched entry per cycle.
//!
//! The core is pure, so the loop only translates: state → `SchedulerInput`, and
//! `SchedulerOutput` → `ApplyCycle`. The last output is kept in memory on the leader; it is
//! what `explain` answers from.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Duration, Utc};
use tideway_api::agent::Desired;
use tideway_api::{PendingReason, Workload};

use super::DispatchConfig;
use super::backlog::Backlog;
use super::liveness::Liveness;
use super::window::GroupKey;
use crate::metrics::Metrics;
use crate::propose::Proposer;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::FederationState;
use crate::state::checkpoints::CheckpointRequest;
use crate::state::command::Command;
use crate::state::scheduling::{AssignDecision, CycleDecisions, PreemptDecision, Reservation};
use tideway_scheduler::{
    ClusterView, Decision, PendingWorkload, PreemptionBudget, RunningWorkload, SchedulerInput,
    SchedulerOutput,
};

/// Most changed pending reasons written per cycle: a backlog of 100,000 new workloads gets
/// its reasons over a few cycles instead of in one multi-megabyte entry.
pub const MAX_REASONS_PER_CYCLE: usize = 2000;

/// A workload is not preempted again within this long of starting.
pub const MIN_RUNTIME_BEFORE_PREEMPTION_SECS: i64 = 600;

/// The last cycle the leader ran, for `explain`.
#[derive(Debug)]
pub struct LastCycle {
    pub at: DateTime<Utc>,
    pub output: SchedulerOutput,
    /// Pending workload UID → index into `output.decisions` (the workloads it was shown).
    pub by_uid: BTreeMap<String, usize>,
    /// The answer for the workloads of a group it was not shown: the index of the group's
    /// last shown (and pending) member's decision. See `window`.
    pub groups: HashMap<GroupKey, usize>,
}

impl LastCycle {
    /// The decision the cycle gave `w`, or would have given it (the one of its group).
    pub fn decision_for(&self, w: &Workload) -> Option<&Decision> {
        let uid = tideway_scheduler::input::uid_of(w);
        let i = match self.by_uid.get(uid) {
            Some(i) => *i,
            None => *self.groups.get(&super::window::group_key(w))?,
        };
        self.output.decisions.get(i)
    }
}

/// What a cycle's blocking part hands back to the loop.
struct Ran {
    backlog: Backlog,
    wide: HashMap<GroupKey, usize>,
    cursors: Cursors,
    output: SchedulerOutput,
    reps: HashMap<GroupKey, (usize, usize)>,
    decisions: CycleDecisions,
    depth: BTreeMap<String, i64>,
    took: std::time::Duration,
    runs: u32,
    shown: usize,
    /// Where the blocking part's time went, for [`SLOW_CYCLE`]'s line.
    parts: BlockingParts,
}

/// The blocking pool's share of a cycle, part by part: how long the task waited for a
/// thread, brought the backlog's index up to date, and turned the core's output into
/// decisions and reasons.
#[derive(Debug, Clone, Copy, Default)]
struct BlockingParts {
    queued: std::time::Duration,
    settle: std::time::Duration,
    decide: std::time::Duration,
}

/// Per group: the reason being written to the members the core was not shown, and the
/// last member it was written to (or found already carrying it).
type Cursors = HashMap<GroupKey, (PendingReason, (DateTime<Utc>, u64))>;

/// Gives the members of each truncated group that the core was not shown their group's
/// reason, as a cycle over the whole backlog would, within the cycle's budget of reasons:
/// a cursor per group remembers how far the reason has been written, so each cycle goes on
/// from there instead of reading the whole group again.
fn spread_reasons(
    backlog: &Backlog,
    out: &SchedulerOutput,
    reps: &HashMap<GroupKey, (usize, usize)>,
    cursors: &mut Cursors,
    d: &mut CycleDecisions,
) {
    cursors.retain(|k, _| reps.contains_key(k));
    let mut keys: Vec<_> = reps.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let Some(reason) = reps
            .get(&key)
            .and_then(|(i, _)| out.decisions.get(*i))
            .and_then(Decision::pending_reason)
        else {
            continue;
        };
        let shown = reps.get(&key).map_or(0, |(_, n)| *n);
        let from = cursors
            .get(&key)
            .filter(|(r, _)| *r == reason)
            .map(|(_, at)| *at);
        let mut last = from;
        for (at, w) in backlog.index.tail(key, shown, from) {
            if d.reasons.len() >= MAX_REASONS_PER_CYCLE {
                break;
            }
            last = Some(at);
            if w.status.as_ref().and_then(|s| s.pending_reason.as_deref()) != Some(&reason) {
                d.reasons.push((w.metadata.name.clone(), reason.clone()));
            }
        }
        if let Some(at) = last {
            cursors.insert(key, (reason, at));
        }
    }
}

/// Run-time estimates learned from the copy's completions.
fn learned_of(backlog: &Backlog) -> tideway_scheduler::RuntimeEstimator {
    let done = backlog
        .succeeded
        .iter()
        .map(|(seq, c)| (c.finished_at, *seq, &*c.workload, c.seconds))
        .collect();
    super::estimates::learned_from(done)
}

pub type LastCycleSlot = Arc<RwLock<Option<Arc<LastCycle>>>>;

/// The scheduler's view of the replicated state at `now` (the whole backlog copied: for
/// one-off inputs; the leader's loop keeps a [`Backlog`] and uses [`capture`]).
pub fn build_input(
    state: &FederationState,
    latest: impl Fn(&str) -> Option<tideway_api::digest::CapacityDigest>,
    now: DateTime<Utc>,
    cycle: u64,
) -> SchedulerInput {
    let backlog = Backlog::of(state);
    capture(state, &backlog, latest, now, cycle).finish(&backlog)
}

/// What a cycle reads from the replicated state besides the backlog copy: bounded by the
/// members, the running work and the policy, not by the backlog.
pub struct Captured {
    input: SchedulerInput,
    /// Pending preemptors that sit out this cycle (see [`capture`]).
    sitting_out: HashSet<String>,
}

/// Reads what the cycle needs from `state` (the leader passes the copy it took under the
/// state lock); `backlog` must have been refreshed from the same state. The pending
/// workloads are added by [`Captured::finish`], after the lock is released.
pub fn capture(
    state: &FederationState,
    backlog: &Backlog,
    latest: impl Fn(&str) -> Option<tideway_api::digest::CapacityDigest>,
    now: DateTime<Utc>,
    cycle: u64,
) -> Captured {
    let settings = state.tidal.settings();
    let mut clusters = Vec::new();
    let mut digest_at = BTreeMap::new();
    for (name, rec) in &state.members {
        let Some(digest) = latest(name).or_else(|| rec.digest.clone()) else {
            continue;
        };
        digest_at.insert(name.clone(), digest.generated_at);
        clusters.push(ClusterView {
            name: name.clone(),
            region: rec.cluster.spec.region.clone(),
            ready: rec.accepts_work(),
            digest,
            declared_levels: Some(rec.cluster.spec.topology_levels.clone()),
        });
    }
    // A preemptor whose victims have left, before the member's digest shows it: the
    // capacity is free but looks used, so it sits out this cycle instead of having a second
    // set of victims preempted for it.
    let sitting_out = state
        .scheduling
        .settling
        .iter()
        .filter(|(_, s)| {
            digest_at
                .get(s.cluster.as_str())
                .is_some_and(|d| *d < s.left_at)
                && s.left_at + Duration::seconds(crate::state::scheduling::SETTLING_LIMIT_SECS)
                    > now
        })
        .map(|(uid, _)| uid.clone())
        .collect();
    let mut running = Vec::new();
    for w in backlog.active.values() {
        let Some(st) = &w.status else { continue };
        let Some(cluster) = st.cluster.clone() else {
            continue;
        };
        let uid = w.metadata.uid.clone().unwrap_or_default();
        let rec = state.assignments.record(&cluster, &uid);
        let admitted_at = st.admitted_at.unwrap_or(now);
        running.push(RunningWorkload {
            workload: Workload::clone(w),
            pool: rec
                .and_then(|r| r.assignment.pool.clone())
                .unwrap_or_default(),
            placements: state
                .scheduling
                .placements
                .get(&uid)
                .map(|ps| ps.iter().map(Into::into).collect())
                .unwrap_or_default(),
            started_at: st.started_at,
            admitted_at,
            last_checkpoint_at: w.last_checkpoint_at(),
            preemptible_after: st
                .started_at
                .map(|s| s + Duration::seconds(MIN_RUNTIME_BEFORE_PREEMPTION_SECS)),
            // Its pods are in the digest only if the digest was taken after they started
            // (both times come from the member's clock). Until then the scheduler takes its
            // GPUs itself: at worst counted twice for a moment, never booked twice.
            accounted_in_digest: st
                .started_at
                .zip(digest_at.get(&cluster))
                .is_some_and(|(s, d)| s <= *d),
            preempting_for: rec
                .filter(|r| matches!(r.desired, Desired::Preempt { .. }))
                .and_then(|_| state.scheduling.preempting.get(&uid).cloned()),
            cluster,
        });
    }
    let window = Duration::seconds(60);
    let recent: Vec<_> = state
        .scheduling
        .evictions
        .iter()
        .filter(|t| **t > now - window)
        .collect();
    let preemption_budget = PreemptionBudget {
        window_seconds: 60,
        max: settings.max_preemptions_per_minute,
        used_in_window: recent.len() as u32,
        refills_at: recent.first().map(|t| **t + window),
    };
    let queues: Vec<_> = state.queues.values().cloned().collect();
    let quota_overrides = super::tidal::quota_overrides(state, &clusters, &queues, now);
    let rollout = state
        .policy
        .rollout
        .as_ref()
        .and_then(|r| tideway_scheduler::rollout::placement(&r.scope, &queues, r.candidate));
    // Preemptors keep their victims' capacity until they start or give up (the state drops
    // given-up ones only when a cycle applies; `now` may be later). A member without a
    // digest is not in the input, and neither is a hold on it.
    let preemptors = state
        .scheduling
        .preemptors
        .iter()
        .filter(|r| !crate::state::scheduling::preemptor_gave_up(r, now))
        .filter(|r| clusters.iter().any(|c| c.name == r.cluster.as_str()))
        .map(Into::into)
        .collect();
    let input = SchedulerInput {
        now,
        seed: settings.tie_break_seed ^ cycle,
        queues,
        priority_classes: state.priority_classes.values().cloned().collect(),
        clusters,
        pending: Vec::new(),
        running,
        reservations: state
            .scheduling
            .reservations
            .iter()
            .map(Into::into)
            .collect(),
        preemption_budget,
        quota_overrides,
        preemptors,
        unshown_pending: Default::default(),
        settings,
        rollout,
    };
    Captured { input, sitting_out }
}

impl Captured {
    /// The input, with the pending workloads of `backlog` (the copy `capture` read with) and
    /// the run-time estimates learned from its completions: the backlog-sized work, done
    /// without the state lock.
    pub fn finish(self, backlog: &Backlog) -> SchedulerInput {
        let Captured {
            mut input,
            sitting_out,
        } = self;
        let now = input.now;
        input.pending = backlog
            .pending
            .iter()
            .filter(|(_, w)| {
                w.metadata
                    .uid
                    .as_ref()
                    .is_none_or(|uid| !sitting_out.contains(uid))
            })
            .map(|(seq, w)| PendingWorkload {
                workload: Workload::clone(w),
                submitted_at: w
                    .status
                    .as_ref()
                    .and_then(|s| s.submitted_at)
                    .unwrap_or(now),
                seq: *seq,
            })
            .collect();
        let done = backlog
            .succeeded
            .iter()
            .map(|(seq, c)| (c.finished_at, *seq, &*c.workload, c.seconds))
            .collect();
        super::estimates::fill(&mut input, &super::estimates::learned_from(done));
        input
    }
}

/// The log entry for a cycle's output: only what changes the state.
pub fn decisions_of(
    state: &FederationState,
    out: &SchedulerOutput,
    now: DateTime<Utc>,
) -> CycleDecisions {
    let reservations: Vec<tideway_scheduler::Reservation> = state
        .scheduling
        .reservations
        .iter()
        .map(Into::into)
        .collect();
    decisions_with(|uid| state.by_uid(uid), &reservations, out, now)
}

/// [`decisions_of`] over any view of the workloads (by uid) and the reservations the input
/// carried: the leader's loop reads its own copy of the backlog, without the state lock.
/// What it proposes is checked again when the entry applies.
pub fn decisions_with<'w>(
    workload: impl Fn(&str) -> Option<&'w Workload>,
    reservations: &[tideway_scheduler::Reservation],
    out: &SchedulerOutput,
    now: DateTime<Utc>,
) -> CycleDecisions {
    let mut d = CycleDecisions::default();
    for dec in &out.decisions {
        match dec {
            Decision::Assign {
                uid,
                cluster,
                pool,
                placements,
            } => {
                if let Some(w) = workload(uid.as_str()) {
                    d.assign.push(AssignDecision {
                        workload: w.metadata.name.as_str().into(),
                        cluster: cluster.clone(),
                        pool: pool.clone(),
                        placements: placements.iter().map(Into::into).collect(),
                    });
                }
            }
            Decision::Preempt {
                preemptor,
                victims,
                cluster,
                grace_seconds,
                ..
            } => d.preempt.push(PreemptDecision {
                preemptor: preemptor.clone(),
                cluster: cluster.clone(),
                victims: victims.clone(),
                grace_seconds: *grace_seconds,
            }),
            Decision::Reserve {
                uid,
                cluster,
                expected_start,
                ..
            } => d.reservations.push(Reservation {
                uid: uid.clone(),
                cluster: cluster.clone(),
                expected_start: *expected_start,
                created_at: reservations
                    .iter()
                    .find(|r| r.uid == *uid && r.cluster == *cluster)
                    .map(|r| r.created_at)
                    .unwrap_or(now),
            }),
            Decision::Pending { .. } => {}
        }
        if d.reasons.len() >= MAX_REASONS_PER_CYCLE {
            continue;
        }
        let Some(w) = workload(dec.uid()) else {
            continue;
        };
        let current = w.status.as_ref().and_then(|s| s.pending_reason.as_deref());
        let changed = match dec {
            Decision::Pending { reason, .. } | Decision::Reserve { reason, .. } => {
                current != Some(reason)
            }
            _ => dec.pending_reason().is_some_and(|r| current != Some(&r)),
        };
        if changed && let Some(reason) = dec.pending_reason() {
            d.reasons.push((w.metadata.name.clone(), reason));
        }
    }
    d
}

/// The cycle's hand-over notices that would change the state. The core gives a notice every
/// cycle until the work checkpoints; the ones already on their assignments are not proposed
/// again, so each notice costs one log entry.
pub fn checkpoints_of(state: &FederationState, out: &SchedulerOutput) -> Vec<CheckpointRequest> {
    out.checkpoints
        .iter()
        .map(|n| CheckpointRequest {
            uid: n.uid.clone(),
            cluster: n.cluster.clone(),
            deadline: n.deadline,
        })
        .filter(|n| n.takes_effect(state))
        .collect()
}

/// Whether the leader's applied state is one a cycle may decide on: it holds every entry
/// that can still commit before the cycle's own.
///
/// The core charges a queue for the work the applied state shows assigned or running, and
/// apply does not check quotas again. Two cases would let a cycle decide on a state that
/// lacks an earlier cycle's admissions, and both cycles' admissions then apply, over the
/// queue's quota:
/// - a new leader's log can hold a previous leader's entries (a cycle among them) that
///   commit only with this term's first entry: until an entry of this term is applied,
///   they may be unapplied;
/// - a cycle whose proposal failed (a time-out: the leader lost its quorum) may still
///   commit once the quorum is back: `barrier` is the leader's last log index when it
///   failed, and the next cycle waits until that index is applied.
pub(crate) fn may_decide(
    last_applied: Option<&crate::raft::types::LogId>,
    current_term: u64,
    barrier: u64,
) -> bool {
    use openraft::vote::RaftLeaderId;
    last_applied
        .is_some_and(|l| l.committed_leader_id().term() == current_term && l.index() >= barrier)
}

/// A hold of the state lock by the cycle that is logged, with whether its thread was
/// preempted meanwhile: half the 1 ms bound apply may be held off for.
const LONG_HOLD: std::time::Duration = std::time::Duration::from_micros(500);

/// A whole cycle at least this long is logged with where its time went: half the 1 s the
/// whole cycle is meant to stay within, even at a million pending workloads.
const SLOW_CYCLE: std::time::Duration = std::time::Duration::from_millis(500);

/// How long the cycle waits for apply to take its copy before it takes it itself: apply
/// has had nothing to apply meanwhile, so a read lock of the cycle's own holds off nothing
/// that waits.
const APPLY_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// What a cycle takes under the state lock: the state's version of that moment, one
/// reference count (see [`StateMachineData::copy`]). The names changed since the last cycle,
/// the policy's version and the members' readiness are all read from it after the lock:
/// they used to be read under it, cold memory on a busy machine that held apply off for up
/// to a millisecond and more.
struct Taken {
    copy: Arc<FederationState>,
    /// How long taking it held the lock.
    took: std::time::Duration,
}

impl Taken {
    fn of(d: &StateMachineData) -> Self {
        let started = tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
        let copy = d.copy();
        Self {
            copy,
            took: started.elapsed(),
        }
    }
}

/// The state a cycle reads: under its own read lock, or through apply's copy slot.
pub struct StateSource {
    pub data: Arc<RwLock<StateMachineData>>,
    pub copy_slot: Arc<crate::raft::copy_slot::CopySlot>,
}

/// Runs a cycle every `cycle_interval` on the leader.
pub async fn schedule_loop(
    raft: Raft,
    source: StateSource,
    proposer: Proposer,
    live: Liveness,
    cfg: DispatchConfig,
    last: LastCycleSlot,
    metrics: Arc<Metrics>,
) {
    let StateSource { data, copy_slot } = source;
    let clock = live.clock().clone();
    let mut cycle = 0u64;
    let mut pause = cfg.cycle_interval;
    let mut backlog = Backlog::default();
    let mut wide = HashMap::new();
    let mut cursors = HashMap::new();
    // See `may_decide`: the log index a failed proposal of a cycle may be at.
    let mut barrier = 0u64;
    loop {
        tokio::time::sleep(pause).await;
        pause = cfg.cycle_interval;
        if !raft.is_leader() {
            continue;
        }
        let ready = {
            use openraft::async_runtime::watch::WatchReceiver;
            let m = raft.metrics();
            let m = m.borrow_watched();
            may_decide(m.last_applied.as_ref(), m.current_term, barrier)
        };
        if !ready {
            tracing::debug!(barrier, "cycle skipped: earlier entries not applied yet");
            continue;
        }
        cycle += 1;
        let began = clock.instant();
        // The names changed since the last cycle and a copy of the state that shares what
        // grows with the workloads (see `state::workloads`), taken together under the state
        // lock: by apply after its next entry (see `raft::copy_slot`), or, when apply has
        // nothing to do for `APPLY_WAIT`, under a read lock of the cycle's own. The backlog is
        // brought up to date and the input captured from the copy, after the lock.
        let cursor = backlog.cursor();
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        copy_slot.post(Box::new(move |d| {
            let _ = tx.send(Taken::of(d));
        }));
        let taken = match tokio::time::timeout(APPLY_WAIT, &mut rx).await {
            Ok(Ok(taken)) => Some(taken),
            _ if !copy_slot.withdraw() => rx.await.ok(),
            _ => None,
        };
        let taken = match taken {
            Some(taken) => {
                metrics.observe_cycle_copy_by_apply(taken.took);
                taken
            }
            None => {
                let Ok(d) = data.read() else { continue };
                // Held from here: the wait for the lock is apply's turn, not the cycle's hold.
                let switches = crate::thread_stats::involuntary_switches();
                let taken = Taken::of(&d);
                drop(d);
                if taken.took >= LONG_HOLD {
                    // Slow work, or the thread taken off its core while it held the lock.
                    let preempted = crate::thread_stats::involuntary_switches()
                        .zip(switches)
                        .map(|(after, before)| after.saturating_sub(before));
                    tracing::info!(
                        held_us = taken.took.as_micros() as u64,
                        preempted,
                        "the cycle held the state lock long"
                    );
                }
                metrics.observe_cycle_lock(taken.took);
                taken
            }
        };
        let Taken { copy, took } = taken;
        // Without a Ready member nothing can be placed or preempted: skip the cycle rather
        // than bring the backlog up to date to learn that.
        if !copy.any_member_ready() {
            continue;
        }
        let changes = Backlog::changes_at(cursor, &copy);
        let version = copy.policy.current();
        // The cycle's time is read once its state is: the state may hold entries applied
        // while it waited for apply.
        let now = clock.now();
        let mark = clock.instant();
        let copy_wait = mark.saturating_duration_since(began);
        let copied = backlog.apply(&copy, changes);
        let backlog_took = clock.instant().saturating_duration_since(mark);
        tracing::debug!(
            took_us = took.as_micros() as u64,
            copied,
            "cycle input taken"
        );
        let mark = clock.instant();
        let captured = capture(&copy, &backlog, |n| live.latest_digest(n), now, cycle);
        let capture_took = clock.instant().saturating_duration_since(mark);
        // Everything sized by the backlog runs off the async workers, on the loop's own copy:
        // the heads of each group of alike workloads, not the whole backlog (see `window`).
        // On a thread of its own at a lower priority than the threads that serve requests
        // and apply entries: a cycle at a million pending takes a share of a core every few
        // hundred milliseconds (measured: docs/benchmarks/scale.md), and on two cores it took
        // that from submissions.
        let taken = std::mem::take(&mut backlog);
        let mut wide_now = std::mem::take(&mut wide);
        let mut cursors_now = std::mem::take(&mut cursors);
        let core_clock = clock.clone();
        let handed = clock.instant();
        let Ok(ran) = crate::parallel_encode::low_priority_thread("scheduler-cycle", move || {
            let mut parts = BlockingParts {
                queued: core_clock.instant().saturating_duration_since(handed),
                ..BlockingParts::default()
            };
            let mut taken = taken;
            let mark = core_clock.instant();
            taken.settle();
            let est = learned_of(&taken);
            parts.settle = core_clock.instant().saturating_duration_since(mark);
            let started = core_clock.instant();
            let (input, output, window, runs) = super::window::run(
                &captured.input,
                &taken.index,
                &captured.sitting_out,
                &mut wide_now,
                |i| super::estimates::fill(i, &est),
            );
            let took = core_clock.instant().saturating_duration_since(started);
            let mark = core_clock.instant();
            let mut decisions = decisions_with(
                |uid| taken.by_uid(uid).map(|w| &**w),
                &input.reservations,
                &output,
                now,
            );
            let reps = window.representatives(&output);
            spread_reasons(&taken, &output, &reps, &mut cursors_now, &mut decisions);
            let depth = taken.index.depths();
            parts.decide = core_clock.instant().saturating_duration_since(mark);
            Ran {
                backlog: taken,
                wide: wide_now,
                cursors: cursors_now,
                output,
                reps,
                decisions,
                depth,
                took,
                runs,
                shown: input.pending.len(),
                parts,
            }
        })
        .await
        else {
            // The copy went with the task: the next cycle takes a whole one.
            continue;
        };
        let Ran {
            backlog: b,
            wide: w,
            cursors: c,
            output,
            reps,
            mut decisions,
            depth,
            took,
            runs,
            shown,
            parts,
        } = ran;
        let returned = clock.instant();
        (backlog, wide, cursors) = (b, w, c);
        metrics.observe_cycle(took, &depth);
        tracing::debug!(
            took_ms = took.as_millis() as u64,
            runs,
            shown,
            pending = backlog.index.len(),
            "scheduling cycle over the heads of the backlog"
        );
        // Scheduling never takes more than about a fifth of a core, however large the
        // backlog: the leader's first duty is to commit.
        pause = pause.max(took * 4);
        decisions.policy_version = Some(version);
        for a in &decisions.assign {
            tracing::info!(
                workload = %a.workload,
                cluster = %a.cluster,
                pool = %a.pool,
                "workload assigned"
            );
        }
        for dec in &output.decisions {
            if let Decision::Assign { uid, .. } = dec
                && let Some(st) = backlog.by_uid(uid.as_str()).and_then(|w| w.status.as_ref())
            {
                if let Some(sub) = st.submitted_at {
                    metrics.observe_assign((now - sub).to_std().unwrap_or_default());
                }
                if st.attempts > 0 {
                    metrics.reroute();
                }
            }
        }
        for p in &decisions.preempt {
            tracing::info!(
                preemptor = %p.preemptor,
                cluster = %p.cluster,
                victims = ?p.victims,
                grace_seconds = p.grace_seconds,
                "preempting workloads"
            );
        }
        // One notice per victim, counted by the victim's queue (an alert fires on a queue
        // that keeps losing work).
        metrics.preempted(
            decisions
                .preempt
                .iter()
                .flat_map(|p| &p.victims)
                .map(|uid| {
                    backlog
                        .by_uid(uid.as_str())
                        .map_or("", |w| w.spec.queue.as_str())
                }),
        );
        // Hand-over notices are checked against the assignments, under the lock; a cycle
        // without any does not take it again.
        let notices = if output.checkpoints.is_empty() {
            Vec::new()
        } else {
            let Ok(d) = data.read() else { continue };
            let relocked = clock.instant();
            let copy = d.copy();
            drop(d);
            metrics.observe_cycle_lock(clock.instant().saturating_duration_since(relocked));
            checkpoints_of(&copy, &output)
        };
        for n in &notices {
            tracing::info!(
                uid = %n.uid,
                cluster = %n.cluster,
                deadline = %n.deadline,
                "checkpoint notice before a quota boundary"
            );
        }
        let wall = clock.instant().saturating_duration_since(began);
        metrics.observe_cycle_wall(wall);
        if wall >= SLOW_CYCLE {
            let ms = |d: std::time::Duration| d.as_millis() as u64;
            tracing::info!(
                wall_ms = ms(wall),
                copy_ms = ms(copy_wait),
                backlog_ms = ms(backlog_took),
                capture_ms = ms(capture_took),
                queued_ms = ms(parts.queued),
                settle_ms = ms(parts.settle),
                core_ms = ms(took),
                decide_ms = ms(parts.decide),
                after_ms = ms(clock.instant().saturating_duration_since(returned)),
                copied,
                pending = backlog.index.len(),
                "a slow scheduling cycle"
            );
        }
        let by_uid = output
            .decisions
            .iter()
            .enumerate()
            .map(|(i, d)| (d.uid().to_string(), i))
            .collect();
        if let Ok(mut slot) = last.write() {
            *slot = Some(Arc::new(LastCycle {
                at: now,
                output,
                by_uid,
                groups: reps.into_iter().map(|(k, (i, _))| (k, i)).collect(),
            }));
        }
        if !notices.is_empty()
            && let Err(e) = proposer
                .propose(Command::RequestCheckpoints { notices, at: now })
                .await
        {
            tracing::warn!(error = %e, "could not commit checkpoint notices");
        }
        if decisions.is_empty() && decisions.reservations.is_empty() {
            continue;
        }
        if let Err(e) = proposer
            .propose(Command::ApplyCycle {
                decisions: Box::new(decisions),
                at: now,
            })
            .await
        {
            // It may still commit: the next cycle waits until it is applied or gone.
            barrier = crate::raft::metrics(&raft).last_log_index.unwrap_or(0);
            tracing::warn!(error = %e, barrier, "could not commit a scheduling cycle");
        }
    }
}
