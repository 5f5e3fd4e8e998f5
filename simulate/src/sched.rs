//! Scheduler mode: the federation's scheduler core decides, cycle by cycle, on a virtual
//! clock, exactly as the live leader would (same `schedule()`, same input types).
//!
//! What keeps a cycle cheap on a 100,000-job trace:
//! - the input is persistent: digests are recomputed only for members that changed, and
//!   pending workloads are moved into the input and back, never cloned;
//! - the scheduler only sees the pending work it could act on: the first `headWindow` of
//!   every queue (their reasons and reservations depend on being seen), reservation
//!   holders, and beyond the head only work small enough to fit the largest free pool
//!   it may use (a queue pinned to its own clusters by `queueClusters` looks at those
//!   only), in queue order, until the queue's quota headroom and the fleet's free GPUs are spent
//!   or `lookahead` workloads were taken. Work left out keeps its last reason (or
//!   `Queued`: not looked at). When a cycle assigned work and left fitting work out, it
//!   runs again at the same instant, so no capacity idles because of the window;
//! - running work is passed individually only when preemption or per-user limits need
//!   individual victims (`runningView: exact`); otherwise as aggregates per queue,
//!   cluster, pool, pod size and expected-end bucket (powers of two of the remaining time),
//!   which leave quota, fair share and reservation estimates the same (the latter within a
//!   bucket) at a cost independent of how much is running.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;
use tideway_api::clock::{Clock, RealClock};

use rustc_hash::FxHashSet;
use tideway_api::Policy;
use tideway_api::Workload;
use tideway_scheduler::{
    CheckpointNotice, Decision, Gangs, PendingWorkload, PreemptionBudget, QuotaBook, Reservation,
    RunningWorkload, RuntimeEstimator, SchedulerInput, SchedulerOutput, schedule,
};

use super::aggregate::{Aggregates, GroupKey, Names};
use super::config::{Estimates, PendingView, RunningView, SimulatorSettings};
use super::engine::{Engine, Fleet, Jobs, Key, Queue};
use super::metrics::{self, EstimateSummary};
use super::time::{Secs, to_utc};

/// Re-runs of a cycle at one instant when the window left fitting work out.
const MAX_ROUNDS: usize = 16;

/// The sliding window preemptions are rate-limited over (the settings say per minute).
const BUDGET_WINDOW: Secs = 60;

pub(crate) struct SchedState {
    input: SchedulerInput,
    exact: bool,
    reservations: Vec<Reservation>,
    evictions: VecDeque<Secs>,
    cycle: u64,
    aggregates: Aggregates,
    /// The aggregate groups each active job counts in, with its pods in each (aggregate
    /// view), by job.
    aggs: Vec<Vec<(u32, u32)>>,
    /// Preemption was asked for but the running view cannot name victims.
    preemption_disabled: bool,
    /// The run's seed; each cycle's is derived from it.
    seed: u64,
    pending_view: PendingView,
    lookahead: usize,
    stats: SchedStats,
    /// The live leader's estimator, fed with each job that completes (`online` estimates).
    estimator: Option<RuntimeEstimator>,
    /// Completions the estimator has learned from: its answers change only then.
    learned: u64,
    /// Per job: the estimator's answer (seconds, at least 1) and `learned` when it was
    /// asked; a job shown again before the next completion is not asked again (the answer
    /// is a percentile over string-keyed samples, asked for every job shown every cycle).
    estimates: Vec<(u64, Option<u64>)>,
    /// Per job: the run-time estimate the core was last shown for it (`None`: it had none
    /// and the core assumed its default).
    planned: Vec<Option<u64>>,
    accuracy: Accuracy,
    /// Reserved-but-idle accounting: when the last cycle ran and the GPUs its
    /// reservations held idle then.
    last_cycle_at: Option<Secs>,
    reserved_idle: u64,
    reserved_idle_gpu_seconds: u128,
    /// GPUs of each reservation holder, by uid.
    reserved_size: rustc_hash::FxHashMap<String, u64>,
    /// Keep the next cycle's input and output (`Engine::first_cycle`).
    capture: bool,
    captured: Option<(SchedulerInput, SchedulerOutput)>,
}

/// How the run-time estimates the core planned with compared with what jobs really took.
#[derive(Debug, Default, Clone)]
struct Accuracy {
    /// Estimate / actual of every completed job that had an estimate.
    ratios: Vec<f64>,
    under: u64,
    over: u64,
    defaulted: u64,
}

impl SchedState {
    pub fn new(policy: &Policy, settings: &SimulatorSettings, seed: u64, jobs: usize) -> Self {
        let sched = &policy.spec.scheduler;
        let needs_exact = sched.preemption
            || policy
                .spec
                .queues
                .iter()
                .any(|q| q.spec.per_user_active_limit.is_some());
        let exact = match settings.running_view {
            RunningView::Exact => true,
            RunningView::Aggregate => false,
            RunningView::Auto => needs_exact,
        };
        let mut scheduler_settings = sched.clone();
        let preemption_disabled = !exact && sched.preemption;
        if preemption_disabled {
            scheduler_settings.preemption = false;
        }
        Self {
            input: SchedulerInput {
                now: to_utc(0),
                seed: 0,
                settings: scheduler_settings,
                queues: policy.spec.queues.clone(),
                priority_classes: policy.spec.priority_classes.clone(),
                clusters: Vec::new(),
                pending: Vec::new(),
                running: Vec::new(),
                reservations: Vec::new(),
                preemption_budget: PreemptionBudget::per_minute(sched.max_preemptions_per_minute),
                quota_overrides: Vec::new(),
                rollout: None,
                preemptors: Vec::new(),
                unshown_pending: Default::default(),
            },
            exact,
            reservations: Vec::new(),
            evictions: VecDeque::new(),
            cycle: 0,
            aggregates: Aggregates::default(),
            aggs: vec![Vec::new(); jobs],
            preemption_disabled,
            seed,
            pending_view: settings.pending_view,
            lookahead: settings.lookahead,
            stats: SchedStats::default(),
            estimator: (settings.runtime_estimates == Estimates::Online)
                .then(RuntimeEstimator::default),
            learned: 0,
            estimates: vec![(u64::MAX, None); jobs],
            planned: vec![None; jobs],
            accuracy: Accuracy::default(),
            last_cycle_at: None,
            reserved_idle: 0,
            reserved_idle_gpu_seconds: 0,
            reserved_size: rustc_hash::FxHashMap::default(),
            capture: false,
            captured: None,
        }
    }

    /// Adds the GPUs the held reservations kept idle since the last cycle (free GPUs of the
    /// reserved cluster, up to the holder's size, as of now) and notes them for the next.
    fn count_reserved_idle(&mut self, now: Secs, fleet: &Fleet) {
        if let Some(last) = self.last_cycle_at {
            let span = u128::from((now - last).max(0).unsigned_abs());
            self.reserved_idle_gpu_seconds += span * u128::from(self.reserved_idle);
        }
        self.last_cycle_at = Some(now);
        let free: Vec<u64> = fleet.free_per_member().collect();
        self.reserved_idle = self
            .reservations
            .iter()
            .filter_map(|r| {
                let c = fleet.member_id(r.cluster.as_str())?;
                let size = self.reserved_size.get(r.uid.as_str()).copied().unwrap_or(0);
                Some(free.get(c).copied().unwrap_or(0).min(size))
            })
            .sum();
    }

    /// Keeps the next cycle's input and output.
    pub(crate) fn capture_first(&mut self) {
        self.capture = true;
    }

    /// The kept cycle, once.
    pub(crate) fn captured(&mut self) -> Option<(SchedulerInput, SchedulerOutput)> {
        self.captured.take()
    }

    /// The run-time estimate the core was last shown for job `j`.
    pub fn planned(&self, j: u32) -> Option<u64> {
        self.planned.get(j as usize).copied().flatten()
    }

    /// Job `j` (workload `w`) completed after running `ran` seconds: the estimator learns
    /// from it, and the estimate it was dispatched with is scored.
    pub(crate) fn completed(&mut self, j: u32, w: &Workload, ran: u64) {
        if let Some(e) = &mut self.estimator {
            e.observe(w, ran);
            self.learned += 1;
        }
        match self.planned(j) {
            None => self.accuracy.defaulted += 1,
            Some(est) => {
                if est < ran {
                    self.accuracy.under += 1;
                } else if est > ran {
                    self.accuracy.over += 1;
                }
                self.accuracy.ratios.push(est as f64 / (ran.max(1)) as f64);
            }
        }
    }

    /// The online estimator's answer for job `j` (workload `w`), asked again only after a
    /// completion taught it something.
    fn learned_estimate(&mut self, j: u32, w: &Workload) -> Option<u64> {
        let e = self.estimator.as_ref()?;
        let slot = self.estimates.get_mut(j as usize)?;
        if slot.0 != self.learned {
            *slot = (self.learned, e.estimate(w).map(|e| e.seconds.max(1)));
        }
        slot.1
    }

    /// Estimate accuracy and reserved-but-idle time, for the summary.
    pub fn estimate_summary(&self, source: Estimates) -> EstimateSummary {
        let mut ratios = self.accuracy.ratios.clone();
        ratios.sort_unstable_by(f64::total_cmp);
        let median_ratio = if ratios.is_empty() {
            0.0
        } else {
            ratios[(ratios.len() - 1) / 2]
        };
        EstimateSummary {
            source: match source {
                Estimates::Online => "online",
                Estimates::None => "none",
                Estimates::Exact => "exact (oracle)",
            }
            .to_owned(),
            oracle: source == Estimates::Exact,
            estimated: ratios.len() as u64,
            defaulted: self.accuracy.defaulted,
            under: self.accuracy.under,
            over: self.accuracy.over,
            median_ratio,
            reserved_idle_gpu_hours: self.reserved_idle_gpu_seconds as f64 / 3600.0,
        }
    }

    /// Preemption was asked for but the running view cannot name victims.
    pub fn preemption_disabled(&self) -> bool {
        self.preemption_disabled
    }

    /// What the core was asked to do and decided, for the summary.
    pub fn stats(&self) -> SchedStats {
        self.stats
    }

    fn budget(&mut self, now: Secs) -> PreemptionBudget {
        while self
            .evictions
            .front()
            .is_some_and(|&t| t + BUDGET_WINDOW <= now)
        {
            self.evictions.pop_front();
        }
        let max = self.input.settings.max_preemptions_per_minute;
        PreemptionBudget {
            window_seconds: BUDGET_WINDOW as u64,
            max,
            used_in_window: self.evictions.len() as u32,
            refills_at: self.evictions.front().map(|&t| to_utc(t + BUDGET_WINDOW)),
        }
    }
}

/// Counters of the scheduler core's work, for the summary (zero in FIFO mode).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SchedStats {
    cycles: u64,
    wall: Duration,
    preemption_decisions: u64,
    defragmentations: u64,
    reservations: u64,
}

impl SchedStats {
    pub fn cycles(&self) -> u64 {
        self.cycles
    }

    /// Wall-clock time spent in the core.
    pub fn wall_seconds(&self) -> f64 {
        self.wall.as_secs_f64()
    }

    pub fn preemption_decisions(&self) -> u64 {
        self.preemption_decisions
    }

    /// Preemptions that moved small checkpointing work to give a gang whole nodes.
    pub fn defragmentations(&self) -> u64 {
        self.defragmentations
    }

    /// Reservations created (not renewed).
    pub fn reservations(&self) -> u64 {
        self.reservations
    }
}

/// splitmix64: the cycle's seed from the run's seed and the cycle number.
fn mix(seed: u64, cycle: u64) -> u64 {
    let mut z = seed ^ cycle.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What bounds the pending view of one cycle.
struct WindowBounds {
    /// Show every pending workload (`pendingView: all`, or preemption: any workload may
    /// preempt or reclaim).
    all: bool,
    /// At most this many workloads per queue that could start.
    lookahead: usize,
    /// Per queue (by id): the most free GPUs in one cluster its work may use (a gang must
    /// fit one cluster), and the most free GPUs on one node there (a pod never spans
    /// nodes). A queue pinned to its own clusters (`queueClusters`, as in a static
    /// partition) is bounded by those alone: free GPUs elsewhere cannot start its backlog.
    reach: Vec<(u64, u32)>,
    /// Workloads of at least this many GPUs submitted at or before `reserve_before` may get
    /// a reservation (`None`: reservations are off).
    reserve_min: Option<u64>,
    reserve_before: Secs,
}

/// What a cycle shows the core.
struct View {
    /// Pending jobs to show.
    chosen: Vec<u32>,
    /// Work that could start was left out (the lookahead was reached).
    truncated: bool,
    /// Some shown work could start or get a reservation.
    actionable: bool,
}

/// The pending work a cycle shows the core.
///
/// Why the decisions are those of a cycle over all pending work (the live leader's): the
/// core decides each pending workload in turn, and a workload changes what others get only
/// by being admitted (quota, capacity, fair share, spread), by holding capacity
/// (reservation, preemption) or by being counted among those waiting for a flavor (whether
/// a reservation is worth its price). Left out here is only work that can do neither of
/// the first two: its GPUs exceed its queue's reachable quota or the largest free cluster
/// it may use, or its largest pod the largest free node there (capacity and quota only
/// shrink within a cycle), it cannot get a reservation (too small or too recent, or
/// reservations are off), holds none, and preemption is off. The third is kept by the
/// caller: what is left out is counted per flavor in the input's `unshown_pending`, so a
/// reservation is priced against every waiting workload, as on the live leader. Its
/// decision would have been "pending": it keeps its last reason. `pendingView: all` is the
/// check (a test compares).
fn window(jobs: &Jobs, quota: &QuotaBook, flavors: usize, b: &WindowBounds) -> View {
    let mut chosen: Vec<u32> = Vec::new();
    let mut truncated = false;
    if b.all {
        for qs in jobs.queues() {
            chosen.extend(qs.pending().map(|(_, j)| j));
        }
        let actionable = !chosen.is_empty();
        return View {
            chosen,
            truncated: false,
            actionable,
        };
    }
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut shown_on = vec![0u64; flavors];
    let show = |j: u32, seen: &mut FxHashSet<u32>, chosen: &mut Vec<u32>, shown_on: &mut [u64]| {
        if seen.insert(j) {
            chosen.push(j);
            for &(f, _) in jobs.request(j) {
                if let Some(n) = shown_on.get_mut(f) {
                    *n += 1;
                }
            }
        }
    };
    for (q, qs) in jobs.queues().iter().enumerate() {
        if qs.is_empty() {
            continue;
        }
        // Work that could start: within reach of the queue's quota and the free capacity.
        let room = |f: usize| quota.reachable(q, f).saturating_sub(quota.used(q, f));
        let max_room = (0..flavors).map(room).max().unwrap_or(0);
        let (largest_free, largest_node_free) = b.reach.get(q).copied().unwrap_or((0, 0));
        let bound = largest_free.min(max_room);
        let mut taken = 0usize;
        for key in merged(qs.sizes_up_to(bound)) {
            let Some(j) = qs.job_at(&key) else { continue };
            let fits_quota = jobs.request(j).iter().all(|&(f, n)| n <= room(f));
            let fits_node = jobs.gangs(j).is_some_and(|g| {
                g.iter()
                    .flat_map(|(_, _, pods)| pods)
                    .all(|p| p.gpus_per_pod <= largest_node_free)
            });
            if !(fits_quota && fits_node) {
                continue;
            }
            if taken >= b.lookahead {
                truncated = true;
                break;
            }
            taken += 1;
            show(j, &mut seen, &mut chosen, &mut shown_on);
        }
        // Work that could get a reservation.
        if let Some(min) = b.reserve_min {
            for key in merged(qs.sizes_from(min)) {
                if let Some(j) = qs.job_at(&key)
                    && jobs.job(j).submit <= b.reserve_before
                {
                    show(j, &mut seen, &mut chosen, &mut shown_on);
                }
            }
        }
    }
    let actionable = !chosen.is_empty();
    // Who waits for each flavor, up to two, as the core would count with all shown.
    for (f, shown) in shown_on.clone().into_iter().enumerate() {
        let want = jobs.pending_on_flavor(f).min(2);
        let mut have = shown.min(2);
        'queues: for qs in jobs.queues() {
            for (_, j) in qs.pending() {
                if have >= want {
                    break 'queues;
                }
                if !seen.contains(&j) && jobs.request(j).iter().any(|&(g, _)| g == f) {
                    show(j, &mut seen, &mut chosen, &mut shown_on);
                    have += 1;
                }
            }
        }
    }
    View {
        chosen,
        truncated,
        actionable,
    }
}

/// Keys of several size buckets merged into queue order.
fn merged<'a>(
    buckets: impl Iterator<Item = (u64, &'a BTreeSet<Key>)>,
) -> impl Iterator<Item = Key> {
    let mut iters: Vec<std::iter::Peekable<std::collections::btree_set::Iter<'a, Key>>> =
        buckets.map(|(_, set)| set.iter().peekable()).collect();
    std::iter::from_fn(move || {
        let mut best: Option<(usize, Key)> = None;
        for (i, it) in iters.iter_mut().enumerate() {
            if let Some(&&k) = it.peek()
                && best.is_none_or(|(_, b)| k < b)
            {
                best = Some((i, k));
            }
        }
        let (i, key) = best?;
        iters[i].next();
        Some(key)
    })
}

impl Engine {
    pub(super) fn scheduler_step(&mut self) {
        for _ in 0..MAX_ROUNDS {
            let (assigned, truncated) = self.cycle();
            if assigned == 0
                || !truncated
                || self.jobs().pending_count() == 0
                || self.free_gpus() == 0
            {
                break;
            }
        }
    }

    /// One scheduling cycle. Returns how many workloads were assigned and whether the
    /// window left out work that could have fitted.
    fn cycle(&mut self) -> (usize, bool) {
        let Some(mut st) = self.take_sched() else {
            return (0, false);
        };
        let now = self.now();
        self.refresh_all();
        st.count_reserved_idle(now, self.fleet());
        report_periodic_checkpoints(&mut st.input.running, now);

        // Free capacity bounds what could start.
        let largest_free = self.fleet().free_per_member().max().unwrap_or(0);
        let largest_node_free = self.fleet().largest_node_free();
        let preemption = st.input.settings.preemption;
        let all = preemption || st.pending_view == PendingView::All;
        let tuning = &st.input.settings.tuning;
        let reserve_min = (tuning.max_reservations > 0).then(|| {
            tuning
                .reservation_min_gpus
                .unwrap_or_else(|| self.fleet().smallest_node_gpus())
                .max(1)
        });
        let reserve_before =
            now.saturating_sub(i64::try_from(tuning.reservation_after_seconds).unwrap_or(i64::MAX));

        // Nothing can start and nothing may preempt or reserve: no cycle (new arrivals stay
        // `Queued`, not looked at), as the core would only answer "pending".
        let smallest = self
            .jobs()
            .queues()
            .iter()
            .filter_map(Queue::smallest)
            .min();
        if !all
            && st.reservations.is_empty()
            && reserve_min.is_none()
            && smallest.is_none_or(|s| s > largest_free)
        {
            self.put_sched(st);
            return (0, false);
        }

        // Reservations whose holder still waits.
        let jobs = self.jobs();
        st.reservations
            .retain(|r| jobs.id(&r.uid).is_some_and(|j| jobs.is_pending(j)));

        let free: Vec<u64> = self.fleet().free_per_member().collect();
        let node_free: Vec<u32> = self.fleet().node_free_per_member().collect();
        let reach = self
            .queue_members()
            .into_iter()
            .map(|members| match members {
                None => (largest_free, largest_node_free),
                Some(ms) => ms.iter().fold((0, 0), |(g, n), &c| {
                    (
                        g.max(free.get(c).copied().unwrap_or(0)),
                        n.max(node_free.get(c).copied().unwrap_or(0)),
                    )
                }),
            })
            .collect();
        let jobs = self.jobs();
        let bounds = WindowBounds {
            all,
            lookahead: st.lookahead,
            reach,
            reserve_min,
            reserve_before,
        };
        let View {
            mut chosen,
            truncated,
            actionable,
        } = window(jobs, self.quota(), self.flavor_count(), &bounds);
        if !actionable && st.reservations.is_empty() {
            self.put_sched(st);
            return (0, false);
        }
        let mut seen: FxHashSet<u32> = chosen.iter().copied().collect();
        for r in &st.reservations {
            if let Some(j) = jobs.id(&r.uid)
                && seen.insert(j)
            {
                chosen.push(j);
            }
        }
        if chosen.is_empty() {
            self.put_sched(st);
            return (0, false);
        }
        // The core decides in its own order; the input lists pending work in submission
        // order, as the live leader's does.
        chosen.sort_unstable_by_key(|&j| self.jobs().seq(j));
        // What is left out still counts among those waiting when a reservation is priced.
        let mut shown = vec![0u64; self.flavor_count()];
        for &j in &chosen {
            for &(f, _) in self.jobs().request(j) {
                if let Some(n) = shown.get_mut(f) {
                    *n += 1;
                }
            }
        }
        let unshown: std::collections::BTreeMap<String, u32> = self
            .flavor_names()
            .into_iter()
            .enumerate()
            .filter_map(|(f, name)| {
                let left = self.jobs().pending_on_flavor(f).saturating_sub(shown[f]);
                (left > 0).then(|| (name.to_owned(), u32::try_from(left).unwrap_or(u32::MAX)))
            })
            .collect();

        // The input: pending moved in, running view, digests, budget.
        st.input.pending.clear();
        // Which workloads got the learned estimate (their own copy is given back without).
        let mut filled: Vec<bool> = Vec::with_capacity(chosen.len());
        // The job of each entry of `input.pending`, to give the workloads back without a
        // uid lookup.
        let mut lent: Vec<u32> = Vec::with_capacity(chosen.len());
        for &j in &chosen {
            if let Some(mut w) = self.take_workload(j) {
                let mut learned = false;
                if w.spec.runtime_estimate_seconds.is_none()
                    && let Some(e) = st.learned_estimate(j, &w)
                {
                    w.spec.runtime_estimate_seconds = Some(e);
                    learned = true;
                }
                if let Some(slot) = st.planned.get_mut(j as usize) {
                    *slot = w.spec.runtime_estimate_seconds;
                }
                filled.push(learned);
                lent.push(j);
                st.input.pending.push(PendingWorkload {
                    workload: *w,
                    submitted_at: to_utc(self.jobs().job(j).submit),
                    seq: self.jobs().seq(j),
                });
            }
        }
        if !st.exact {
            st.fill_aggregates(self);
        }
        st.input.clusters = self.take_views();
        st.input.quota_overrides = self.tidal_overrides(&st.input.clusters, &st.input.queues);
        self.mark_owed_inference(&st.input.quota_overrides, &st.input.clusters);
        st.input.unshown_pending = unshown;
        st.input.now = to_utc(now);
        st.cycle += 1;
        st.input.seed = mix(st.seed ^ st.input.settings.tie_break_seed, st.cycle);
        st.input.reservations = st.reservations.clone();
        // Preemptors keep their hold until they start (removed on `Assign`) or give up.
        let give_up =
            chrono::Duration::seconds(tideway_scheduler::input::PREEMPTOR_HOLD_GIVE_UP_SECONDS);
        let at = to_utc(now);
        st.input
            .preemptors
            .retain(|p| p.expected_start + give_up > at);
        st.input.preemption_budget = st.budget(now);

        let t0 = RealClock.instant();
        let out = schedule(&st.input);
        st.stats.wall += t0.elapsed();
        if std::mem::take(&mut st.capture) {
            st.captured = Some((st.input.clone(), out.clone()));
        }
        st.stats.cycles += 1;
        st.stats.defragmentations += out.stats.defragmentations;

        self.put_views(std::mem::take(&mut st.input.clusters));
        for ((mut p, learned), j) in std::mem::take(&mut st.input.pending)
            .into_iter()
            .zip(filled)
            .zip(lent)
        {
            if learned {
                p.workload.spec.runtime_estimate_seconds = None;
            }
            self.put_workload(j, Box::new(p.workload));
        }
        let old_reservations = std::mem::take(&mut st.reservations);
        self.put_sched(st);
        self.apply_checkpoints(&out.checkpoints);
        let assigned = self.apply_decisions(out.decisions, &old_reservations);
        (assigned, truncated)
    }

    /// Carries out checkpoint notices: the running attempt saves its work now and keeps
    /// running (the member's report of the checkpoint is the running view's
    /// `lastCheckpointAt`, which the core reads so as not to ask again).
    fn apply_checkpoints(&mut self, notices: &[CheckpointNotice]) {
        if notices.is_empty() {
            return;
        }
        let now = self.now();
        let mut done = 0;
        for n in notices {
            let Some(j) = self.jobs().id(n.uid.as_str()) else {
                continue;
            };
            if self.jobs().running_since(j).is_none() {
                continue;
            }
            let pos = self.jobs().active_pos(j);
            self.checkpoint(j, now);
            if let Some(st) = self.sched_mut()
                && let Some(r) = pos.and_then(|p| st.input.running.get_mut(p as usize))
            {
                r.last_checkpoint_at = Some(to_utc(now));
            }
            done += 1;
        }
        self.note_checkpoints(done);
    }

    /// Carries out a cycle's decisions; returns how many workloads were assigned.
    fn apply_decisions(&mut self, decisions: Vec<Decision>, old: &[Reservation]) -> usize {
        let now = self.now();
        let mut assigned = 0;
        let mut touched: BTreeSet<usize> = BTreeSet::new();
        let mut reservations = Vec::new();
        for d in decisions {
            match d {
                Decision::Assign {
                    uid,
                    cluster,
                    pool,
                    placements,
                } => {
                    let (Some(j), Some(c)) = (
                        self.jobs().id(uid.as_str()),
                        self.fleet().member_id(cluster.as_str()),
                    ) else {
                        continue;
                    };
                    if let Some(st) = self.sched_mut() {
                        st.input.preemptors.retain(|p| p.uid != uid.as_str());
                    }
                    if self.assign(j, c, pool, placements.len() <= 1) {
                        touched.insert(c);
                        assigned += 1;
                    }
                }
                Decision::Preempt {
                    preemptor,
                    victims,
                    cluster,
                    grace_seconds,
                    ..
                } => {
                    if let Some(st) = self.sched_mut() {
                        st.stats.preemption_decisions += 1;
                        let created_at = to_utc(now);
                        st.input.preemptors.retain(|p| p.uid != preemptor.as_str());
                        st.input.preemptors.push(Reservation {
                            uid: preemptor.as_str().to_owned(),
                            cluster: cluster.as_str().to_owned(),
                            expected_start: created_at
                                + chrono::Duration::seconds(
                                    i64::try_from(grace_seconds).unwrap_or(i64::MAX / 2),
                                ),
                            created_at,
                        });
                    }
                    if let Some(j) = self.jobs().id(preemptor.as_str()) {
                        self.set_reason(j, metrics::WAITING_FOR_PREEMPTION);
                    }
                    for v in victims {
                        self.preempt_victim(v.as_str(), preemptor.as_str(), grace_seconds);
                    }
                }
                Decision::Reserve {
                    uid,
                    cluster,
                    expected_start,
                    reason,
                    ..
                } => {
                    let Some(j) = self.jobs().id(uid.as_str()) else {
                        continue;
                    };
                    self.set_reason(j, metrics::reason_index(&reason));
                    let size: u64 = self.jobs().request(j).iter().map(|(_, g)| g).sum();
                    if let Some(st) = self.sched_mut() {
                        st.reserved_size.insert(uid.as_str().to_owned(), size);
                    }
                    let created_at = match old.iter().find(|r| uid == r.uid.as_str()) {
                        Some(r) => r.created_at,
                        None => {
                            if let Some(st) = self.sched_mut() {
                                st.stats.reservations += 1;
                            }
                            to_utc(now)
                        }
                    };
                    reservations.push(Reservation {
                        uid: uid.into(),
                        cluster: cluster.into(),
                        expected_start,
                        created_at,
                    });
                }
                Decision::Pending { uid, reason, .. } => {
                    if let Some(j) = self.jobs().id(uid.as_str()) {
                        self.set_reason(j, metrics::reason_index(&reason));
                    }
                }
            }
        }
        let mut refill = None;
        if let Some(st) = self.sched_mut() {
            st.reserved_size
                .retain(|uid, _| reservations.iter().any(|r| r.uid.as_str() == uid));
            st.reservations = reservations;
            let budget = st.budget(now);
            if budget.remaining() == 0 {
                refill = budget.refills_at;
            }
        }
        for c in touched {
            self.tick_now(c);
        }
        // Preemptors held back by the budget get another cycle when it refills.
        if let Some(at) = refill {
            self.wake_at(at.timestamp());
        }
        assigned
    }

    /// Free GPUs in the fleet, from fresh digests.
    fn free_gpus(&mut self) -> u64 {
        self.refresh_all();
        self.fleet().free_per_member().sum()
    }

    /// Asks the member to stop victim `uid` within `grace` seconds, for `preemptor`.
    fn preempt_victim(&mut self, uid: &str, preemptor: &str, grace: u64) {
        let Some(v) = self.jobs().id(uid) else {
            return;
        };
        if !self.jobs().is_active(v) {
            return;
        }
        let (Some(_), Some(pos)) = (self.jobs().cluster(v), self.jobs().active_pos(v)) else {
            return;
        };
        let now = self.now();
        if let Some(st) = self.sched_mut() {
            st.evictions.push_back(now);
            if let Some(r) = st.input.running.get_mut(pos as usize).filter(|_| st.exact) {
                r.preempting_for = Some(preemptor.to_owned());
            }
        }
        self.preempt(v, grace);
    }
}

impl SchedState {
    /// A job was dispatched: it joins the running view (unplaced).
    pub(crate) fn assigned(&mut self, j: u32, jobs: &Jobs, fleet: &Fleet, now: Secs) {
        if self.exact {
            let (Some(w), Some(c)) = (jobs.workload(j), jobs.cluster(j)) else {
                return;
            };
            // Its position is the one it took among the active jobs (the last).
            let mut workload = w.clone();
            if workload.spec.runtime_estimate_seconds.is_none() {
                workload.spec.runtime_estimate_seconds = self.planned(j);
            }
            self.input.running.push(RunningWorkload {
                workload,
                cluster: fleet.name(c as usize).to_owned(),
                pool: jobs.pool(j).unwrap_or_default().to_owned(),
                placements: Vec::new(),
                started_at: None,
                admitted_at: to_utc(now),
                last_checkpoint_at: None,
                preemptible_after: None,
                accounted_in_digest: false,
                preempting_for: None,
            });
        } else {
            self.regroup(j, false, jobs, fleet);
        }
    }

    /// A job started on its member: it is now in the member's digest.
    pub(crate) fn started(&mut self, j: u32, at: Secs, jobs: &Jobs, fleet: &Fleet) {
        if self.exact {
            let pos = jobs.active_pos(j);
            if let Some(r) = pos.and_then(|p| self.input.running.get_mut(p as usize)) {
                r.started_at = Some(to_utc(at));
                r.accounted_in_digest = true;
                // The nodes it occupies, as a live member reports them: reclaim frees
                // whole nodes for a gang only when it knows which victims share a node.
                if let Some(c) = jobs.cluster(j) {
                    let nodes = fleet.nodes_of(c as usize, &jobs.job(j).uid, jobs.attempt(j));
                    r.workload.status.get_or_insert_with(Default::default).nodes = nodes;
                }
            }
        } else {
            self.regroup(j, true, jobs, fleet);
        }
    }

    /// A job left position `pos` of the active jobs (swap-removed there).
    pub(crate) fn stopped(&mut self, j: u32, pos: usize) {
        if self.exact {
            if pos < self.input.running.len() {
                self.input.running.swap_remove(pos);
            }
        } else if let Some(aggs) = self.aggs.get_mut(j as usize) {
            aggs.clear();
        }
    }

    /// The aggregate groups of an active job.
    fn regroup(&mut self, j: u32, placed: bool, jobs: &Jobs, fleet: &Fleet) {
        let Some(c) = jobs.cluster(j) else { return };
        let queue = jobs.queue(j) as u32;
        let mut aggs = Vec::new();
        for (flavor, _, pods) in jobs.gangs(j).into_iter().flat_map(Gangs::iter) {
            let pool = fleet.pool_of(c as usize, flavor, jobs.pool(j));
            for p in pods {
                let key = GroupKey {
                    queue,
                    cluster: c,
                    pool,
                    gpus_per_pod: p.gpus_per_pod,
                    placed,
                };
                aggs.push((self.aggregates.group(key), p.count));
            }
        }
        if let Some(slot) = self.aggs.get_mut(j as usize) {
            *slot = aggs;
        }
    }

    /// Fills the input's running list with aggregates; see the `aggregate` module.
    fn fill_aggregates(&mut self, engine: &Engine) {
        let now = engine.now();
        let jobs = engine.jobs();
        let fleet = engine.fleet();
        let aggs = &self.aggs;
        let active = jobs.active().iter().map(|&j| {
            let start = jobs.running_since(j).unwrap_or(now);
            (
                aggs.get(j as usize).map_or(&[][..], Vec::as_slice),
                start,
                start.saturating_add(jobs.estimate(j)).max(now),
            )
        });
        let names = |k: &GroupKey| {
            let pool = fleet.pool(k.pool as usize);
            Names {
                queue: jobs.queues()[k.queue as usize].name().to_owned(),
                cluster: fleet.name(k.cluster as usize).to_owned(),
                pool: pool.as_ref().map(|p| p.name.to_owned()).unwrap_or_default(),
                flavor: pool.map(|p| p.flavor.to_owned()).unwrap_or_default(),
            }
        };
        self.aggregates
            .fill(&mut self.input.running, active, now, names);
    }
}

/// Running work that checkpoints every `interval` seconds reports its last periodic
/// checkpoint, as a member reports what its workloads saved: the core measures the work a
/// victim would lose from it, and the simulator's own loss accounting counts from the same
/// instant (the last multiple of the interval into the attempt, or a later notice's).
fn report_periodic_checkpoints(running: &mut [RunningWorkload], now: Secs) {
    let now_utc = to_utc(now);
    for r in running {
        let (Some(started), Some(every)) = (
            r.started_at,
            r.workload
                .spec
                .checkpoint
                .as_ref()
                .map(|c| c.interval_seconds),
        ) else {
            continue;
        };
        let ran = u64::try_from((now_utc - started).num_seconds()).unwrap_or(0);
        let Some(done) = ran.checked_div(every).map(|n| n * every).filter(|d| *d > 0) else {
            continue;
        };
        let at = started + chrono::Duration::seconds(i64::try_from(done).unwrap_or(i64::MAX));
        if r.last_checkpoint_at.is_none_or(|t| t < at) {
            r.last_checkpoint_at = Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{Checkpoint, PodSet, WorkloadClass, WorkloadSpec};

    use super::*;

    fn running(every: Option<u64>, started: Option<Secs>) -> RunningWorkload {
        let mut spec = WorkloadSpec::new(
            "q",
            WorkloadClass::Training,
            vec![PodSet::new("w", 1, 1, "H100")],
        );
        spec.checkpoint = every.map(|interval_seconds| Checkpoint {
            interval_seconds,
            last_checkpoint_at: None,
        });
        RunningWorkload {
            workload: Workload::new("j", spec),
            cluster: "c".into(),
            pool: "p".into(),
            placements: Vec::new(),
            started_at: started.map(to_utc),
            admitted_at: to_utc(0),
            last_checkpoint_at: None,
            preemptible_after: None,
            accounted_in_digest: true,
            preempting_for: None,
        }
    }

    /// The last multiple of the interval into the attempt is reported, a later notice's
    /// checkpoint is kept, and work that does not checkpoint or has not started reports none.
    #[test]
    fn running_work_reports_its_last_periodic_checkpoint() {
        let mut rs = vec![
            running(Some(1800), Some(1000)),
            running(Some(1800), Some(1000)),
            running(None, Some(1000)),
            running(Some(1800), None),
            running(Some(1800), Some(4000)),
            running(Some(1800), Some(1000)),
        ];
        rs[1].last_checkpoint_at = Some(to_utc(4650));
        rs[5].last_checkpoint_at = Some(to_utc(4500));
        report_periodic_checkpoints(&mut rs, 1000 + 2 * 1800 + 100);
        assert_eq!(rs[0].last_checkpoint_at, Some(to_utc(1000 + 2 * 1800)));
        assert_eq!(rs[1].last_checkpoint_at, Some(to_utc(4650)));
        assert_eq!(rs[5].last_checkpoint_at, Some(to_utc(4600)));
        assert_eq!(rs[2].last_checkpoint_at, None);
        assert_eq!(rs[3].last_checkpoint_at, None);
        // Started 700 s ago: no checkpoint yet.
        assert_eq!(rs[4].last_checkpoint_at, None);
    }
}
