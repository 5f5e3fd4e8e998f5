//! Scheduler mode: the federation's scheduler core decides, cycle by cycle, on a virtual
//! clock, exactly as the live leader would (same `schedule()`, same input types).
//!
//! What keeps a cycle cheap on a 100,000-job trace:
//! - the input is persistent: digests are recomputed only for members that changed, and
//!   pending workloads are moved into the input and back, never cloned;
//! - the scheduler only sees the pending work it could act on: the first `headWindow` of
//!   every queue (their reasons and reservations depend on being seen), reservation
//!   holders, and beyond the head only work small enough to fit the largest free pool,
//!   in queue order, until the queue's quota headroom and the fleet's free GPUs are spent
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
use tideway_scheduler::{
    Decision, Gangs, PendingWorkload, PreemptionBudget, Reservation, RunningWorkload,
    SchedulerInput, schedule,
};

use super::aggregate::{Aggregates, GroupKey, Names};
use super::config::{RunningView, SimulatorSettings};
use super::engine::{Engine, Key, Phase};
use super::metrics;
use super::time::{Secs, to_utc};

/// Re-runs of a cycle at one instant when the window left fitting work out.
const MAX_ROUNDS: usize = 16;

/// The sliding window preemptions are rate-limited over (the settings say per minute).
const BUDGET_WINDOW: Secs = 60;

pub(super) struct SchedState {
    input: SchedulerInput,
    exact: bool,
    reservations: Vec<Reservation>,
    evictions: VecDeque<Secs>,
    cycle: u64,
    aggregates: Aggregates,
    /// Preemption was asked for but the running view cannot name victims.
    pub preemption_disabled: bool,
}

impl SchedState {
    pub fn new(policy: &Policy, settings: &SimulatorSettings) -> Self {
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
                tuning: settings.tuning.clone(),
                queues: policy.spec.queues.clone(),
                priority_classes: policy.spec.priority_classes.clone(),
                clusters: Vec::new(),
                pending: Vec::new(),
                running: Vec::new(),
                reservations: Vec::new(),
                preemption_budget: PreemptionBudget::per_minute(sched.max_preemptions_per_minute),
                quota_overrides: Vec::new(),
            },
            exact,
            reservations: Vec::new(),
            evictions: VecDeque::new(),
            cycle: 0,
            aggregates: Aggregates::default(),
            preemption_disabled,
        }
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

/// splitmix64: the cycle's seed from the run's seed and the cycle number.
fn mix(seed: u64, cycle: u64) -> u64 {
    let mut z = seed ^ cycle.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Engine {
    pub(super) fn scheduler_step(&mut self) {
        for _ in 0..MAX_ROUNDS {
            let (assigned, truncated) = self.cycle();
            if assigned == 0 || !truncated || self.pending_count == 0 || self.free_gpus() == 0 {
                break;
            }
        }
    }

    /// One scheduling cycle. Returns how many workloads were assigned and whether the
    /// window left out work that could have fitted.
    fn cycle(&mut self) -> (usize, bool) {
        let Some(mut st) = self.sched.take() else {
            return (0, false);
        };
        let now = self.now;
        for c in 0..self.members.len() {
            self.refresh(c);
        }

        // Free capacity bounds what could start.
        let nf = self.flavors.len();
        let mut largest_free = 0u64;
        let mut total_free = 0u64;
        for v in &self.views {
            // A gang must fit one cluster (each flavor in one of its pools): the cluster's
            // free GPUs bound what one workload can take there.
            let free: u64 = v.digest.pools.iter().map(|p| p.counts.free()).sum();
            largest_free = largest_free.max(free);
            total_free += free;
        }

        // Nothing can start: no pending work is as small as the largest free pool (and
        // nothing may preempt). Skipping leaves new arrivals `Queued` (not looked at).
        let preemption = st.input.settings.preemption;
        let smallest = self
            .queues
            .iter()
            .filter_map(|q| q.by_size.keys().next().copied())
            .min();
        if !preemption && smallest.is_none_or(|s| s > largest_free) {
            self.sched = Some(st);
            return (0, false);
        }

        // Reservations whose holder still waits.
        st.reservations.retain(|r| {
            self.uid_ids
                .get(&r.uid)
                .is_some_and(|&j| self.js[j as usize].phase == Phase::Pending)
        });

        // The window.
        let head = self.settings.head_window;
        let lookahead = self.settings.lookahead;
        let mut chosen: Vec<u32> = Vec::new();
        let mut truncated = false;
        for (q, qs) in self.queues.iter().enumerate() {
            if qs.pending.is_empty() {
                continue;
            }
            let mut last_head: Option<Key> = None;
            for (k, &j) in qs.pending.iter().take(head) {
                chosen.push(j);
                last_head = Some(*k);
            }
            let room: u64 = (0..nf)
                .map(|f| {
                    self.quota
                        .reachable(q, f)
                        .saturating_sub(self.quota.used(q, f))
                })
                .sum();
            let mut budget = total_free.min(room);
            if budget == 0 && !preemption {
                continue;
            }
            let bound = budget.min(largest_free);
            // Merge the size buckets that could fit, in queue order.
            let mut iters: Vec<(
                u64,
                std::iter::Peekable<std::collections::btree_set::Iter<'_, Key>>,
            )> = qs
                .by_size
                .range(..=bound)
                .map(|(g, set)| (*g, set.iter().peekable()))
                .collect();
            let mut taken = 0usize;
            loop {
                let mut best: Option<(usize, Key)> = None;
                for (i, (_, it)) in iters.iter_mut().enumerate() {
                    if let Some(&&k) = it.peek()
                        && best.is_none_or(|(_, b)| k < b)
                    {
                        best = Some((i, k));
                    }
                }
                let Some((i, key)) = best else {
                    break;
                };
                iters[i].1.next();
                if last_head.is_some_and(|h| key <= h) {
                    continue;
                }
                let gpus = iters[i].0;
                if taken >= lookahead || gpus > budget {
                    truncated = true;
                    break;
                }
                taken += 1;
                budget -= gpus;
                if let Some(&j) = qs.pending.get(&key) {
                    chosen.push(j);
                }
            }
        }
        let mut seen: FxHashSet<u32> = chosen.iter().copied().collect();
        for r in &st.reservations {
            if let Some(&j) = self.uid_ids.get(&r.uid)
                && seen.insert(j)
            {
                chosen.push(j);
            }
        }
        if chosen.is_empty() {
            self.sched = Some(st);
            return (0, false);
        }

        // The input: pending moved in, running view, digests, budget.
        st.input.pending.clear();
        for &j in &chosen {
            let s = &mut self.js[j as usize];
            if let Some(w) = s.workload.take() {
                st.input.pending.push(PendingWorkload {
                    workload: *w,
                    submitted_at: to_utc(self.jobs[j as usize].submit),
                    seq: s.seq,
                });
            }
        }
        if !st.exact {
            self.fill_aggregates(&mut st);
        }
        st.input.clusters = std::mem::take(&mut self.views);
        st.input.now = to_utc(now);
        st.cycle += 1;
        st.input.seed = mix(self.seed ^ st.input.settings.tie_break_seed, st.cycle);
        st.input.reservations = st.reservations.clone();
        st.input.preemption_budget = st.budget(now);

        let t0 = RealClock.instant();
        let out = schedule(&st.input);
        self.acc.sched_wall += t0.elapsed();
        self.acc.cycles += 1;

        self.views = std::mem::take(&mut st.input.clusters);
        for p in std::mem::take(&mut st.input.pending) {
            let uid = p.workload.metadata.uid.as_deref().unwrap_or_default();
            if let Some(&j) = self.uid_ids.get(uid) {
                self.js[j as usize].workload = Some(Box::new(p.workload));
            }
        }
        let old_reservations = std::mem::take(&mut st.reservations);
        self.sched = Some(st);

        // Apply the decisions.
        let mut assigned = 0;
        let mut touched: BTreeSet<usize> = BTreeSet::new();
        let mut reservations = Vec::new();
        for d in out.decisions {
            match d {
                Decision::Assign {
                    uid,
                    cluster,
                    pool,
                    placements,
                } => {
                    let (Some(&j), Some(&c)) = (
                        self.uid_ids.get(uid.as_str()),
                        self.member_ids.get(cluster.as_str()),
                    ) else {
                        continue;
                    };
                    if self.assign(j, c, pool, placements.len() <= 1) {
                        touched.insert(c);
                        assigned += 1;
                    }
                }
                Decision::Preempt {
                    preemptor,
                    victims,
                    grace_seconds,
                    ..
                } => {
                    self.acc.preemption_decisions += 1;
                    if let Some(&j) = self.uid_ids.get(preemptor.as_str()) {
                        self.set_reason(j, metrics::WAITING_FOR_PREEMPTION);
                    }
                    for v in victims {
                        self.preempt(v.as_str(), preemptor.as_str(), grace_seconds);
                    }
                }
                Decision::Reserve {
                    uid,
                    cluster,
                    expected_start,
                    reason,
                    ..
                } => {
                    let Some(&j) = self.uid_ids.get(uid.as_str()) else {
                        continue;
                    };
                    self.set_reason(j, metrics::reason_index(&reason));
                    let created_at = match old_reservations.iter().find(|r| uid == r.uid.as_str()) {
                        Some(r) => r.created_at,
                        None => {
                            self.acc.reservations += 1;
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
                    if let Some(&j) = self.uid_ids.get(uid.as_str()) {
                        self.set_reason(j, metrics::reason_index(&reason));
                    }
                }
            }
        }
        let mut refill = None;
        if let Some(st) = &mut self.sched {
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
        (assigned, truncated)
    }

    /// Free GPUs in the fleet, from fresh digests.
    fn free_gpus(&mut self) -> u64 {
        for c in 0..self.members.len() {
            self.refresh(c);
        }
        self.views
            .iter()
            .flat_map(|v| &v.digest.pools)
            .map(|p| p.counts.free())
            .sum()
    }

    /// Asks the member to stop victim `uid` within `grace` seconds, for `preemptor`.
    fn preempt(&mut self, uid: &str, preemptor: &str, grace: u64) {
        let Some(&v) = self.uid_ids.get(uid) else {
            return;
        };
        let s = &self.js[v as usize];
        if !matches!(s.phase, Phase::Assigned | Phase::Running) {
            return;
        }
        let (Some(c), Some(pos)) = (s.cluster, s.active_pos) else {
            return;
        };
        let c = c as usize;
        if let Some(st) = &mut self.sched {
            st.evictions.push_back(self.now);
            if let Some(r) = st.input.running.get_mut(pos as usize).filter(|_| st.exact) {
                r.preempting_for = Some(preemptor.to_owned());
            }
        }
        let changes =
            self.members[c]
                .sim
                .preempt(uid, Duration::from_secs(grace), to_utc(self.now));
        self.tick_at(self.now.saturating_add(grace as Secs), c);
        self.apply(c as u32, changes);
    }

    /// A job was dispatched: it joins the running view (unplaced).
    pub(super) fn sched_assigned(&mut self, j: u32) {
        let Some(st) = &mut self.sched else { return };
        let s = &self.js[j as usize];
        if st.exact {
            let (Some(w), Some(c)) = (s.workload.as_deref(), s.cluster) else {
                return;
            };
            // Its position is the one it took in `Engine::active` (the last).
            st.input.running.push(RunningWorkload {
                workload: w.clone(),
                cluster: self.members[c as usize].name.clone(),
                pool: s.pool.clone().unwrap_or_default(),
                placements: Vec::new(),
                started_at: None,
                admitted_at: to_utc(self.now),
                last_checkpoint_at: None,
                preemptible_after: None,
                accounted_in_digest: false,
                preempting_for: None,
            });
        } else {
            self.regroup(j, false);
        }
    }

    /// A job started on its member: it is now in the member's digest.
    pub(super) fn sched_started(&mut self, j: u32, at: Secs) {
        let Some(st) = &mut self.sched else { return };
        let pos = self.js[j as usize].active_pos;
        if st.exact {
            if let Some(r) = pos.and_then(|p| st.input.running.get_mut(p as usize)) {
                r.started_at = Some(to_utc(at));
                r.accounted_in_digest = true;
            }
        } else {
            self.regroup(j, true);
        }
    }

    /// A job left position `pos` of `Engine::active` (swap-removed there).
    pub(super) fn sched_stopped(&mut self, j: u32, pos: usize) {
        let Some(st) = &mut self.sched else { return };
        if st.exact {
            if pos < st.input.running.len() {
                st.input.running.swap_remove(pos);
            }
        } else {
            self.js[j as usize].aggs.clear();
        }
    }

    /// The aggregate groups of an active job.
    fn regroup(&mut self, j: u32, placed: bool) {
        let s = &self.js[j as usize];
        let Some(c) = s.cluster else { return };
        let mut aggs = Vec::new();
        for (flavor, _, pods) in s.gangs.iter().flat_map(Gangs::iter) {
            let pool = self.pool_of(c as usize, flavor, s.pool.as_deref());
            for p in pods {
                let key = GroupKey {
                    queue: s.queue,
                    cluster: c,
                    pool,
                    gpus_per_pod: p.gpus_per_pod,
                    placed,
                };
                if let Some(st) = &mut self.sched {
                    aggs.push((st.aggregates.group(key), p.count));
                }
            }
        }
        self.js[j as usize].aggs = aggs;
    }

    /// Fills the input's running list with aggregates; see the `aggregate` module.
    fn fill_aggregates(&self, st: &mut SchedState) {
        let now = self.now;
        let jobs = self.active.iter().map(|&j| {
            let s = &self.js[j as usize];
            let start = if s.phase == Phase::Running {
                s.run_start
            } else {
                now
            };
            (
                s.aggs.as_slice(),
                start,
                start.saturating_add(s.estimate).max(now),
            )
        });
        let names = |k: &GroupKey| {
            let pool = self.pools.get(k.pool as usize);
            Names {
                queue: self.queues[k.queue as usize].name.clone(),
                cluster: self.members[k.cluster as usize].name.clone(),
                pool: pool.map(|p| p.name.clone()).unwrap_or_default(),
                flavor: pool.map(|p| p.flavor.clone()).unwrap_or_default(),
            }
        };
        st.aggregates.fill(&mut st.input.running, jobs, now, names);
    }

    /// The global pool of `flavor` on member `c`: the named one if it has the flavor, else
    /// the first of the flavor.
    fn pool_of(&self, c: usize, flavor: &str, name: Option<&str>) -> u32 {
        let pools = &self.members[c].digest_pools;
        let of_flavor = |&&p: &&u32| self.pools[p as usize].flavor == flavor;
        pools
            .iter()
            .filter(of_flavor)
            .find(|&&p| name.is_some_and(|n| self.pools[p as usize].name == n))
            .or_else(|| pools.iter().find(of_flavor))
            .copied()
            .unwrap_or(u32::MAX)
    }
}
