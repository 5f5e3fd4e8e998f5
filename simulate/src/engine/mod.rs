//! The discrete-event loop: a virtual clock, an event queue, the fleet (one `SimCluster`
//! per member, `fleet`), the job table (`jobs`) and its transitions (`lifecycle`), the
//! accounts (`accounting`), and an admission step (FIFO or the scheduler core) whenever
//! something changed.
//!
//! Events are arrivals (a cursor over the jobs sorted by submit time, not heap entries:
//! 82,000 arrivals need no heap), and heap entries for member ticks (a completion or a
//! preemption deadline on a cluster), inference deletions and wake-ups. All events at one
//! timestamp are processed as one step: first member ticks (capacity freed at `t` is usable
//! at `t`), then deletions, then arrivals; then one admission step, and only if something
//! changed that could let work start (an arrival, freed capacity, an eviction). The sim
//! clusters are ticked only at their own event times and right after an assignment, so a
//! step costs what changed, not what exists.
//!
//! Determinism: jobs are ordered by (submit time, trace order); every map iterated for
//! decisions is ordered; the scheduler core gets a seed derived from `--seed` and the cycle
//! number. Same inputs and seed, same `summary.json` (bar the wall-clock fields).

mod accounting;
mod fleet;
mod jobs;
mod lifecycle;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

use tideway_api::Policy;
use tideway_api::clock::{Clock, RealClock};
use tideway_scheduler::{ClusterView, QuotaBook, SchedulerInput, SchedulerOutput};

use super::config::{Member, Mode, SimPolicy, SimulatorSettings};
use super::metrics::{self, JobRecord, Sample, Summary};
use super::sched::SchedState;
use super::tidal::{self, Tides, side_index};
use super::time::Secs;
use super::trace::{Job, Shape, TraceReport};
use accounting::{Accounting, PoolLine, QueueLine, SampleDue, SummaryInput};

pub(crate) use fleet::Fleet;
pub(crate) use jobs::{Jobs, Key, Queue};

/// Rows of `timeseries.csv` aimed at when `sampleSeconds` is not set.
const TARGET_SAMPLES: i64 = 2000;

/// Everything a run needs, already loaded.
pub struct RunInput {
    pub members: Vec<Member>,
    pub policy: SimPolicy,
    pub jobs: Vec<Job>,
    pub traces: Vec<TraceReport>,
    pub seed: u64,
}

/// Where the run is, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub now: Secs,
    pub first: Secs,
    pub last_arrival: Secs,
    pub arrived: usize,
    pub jobs: usize,
    pub events: u64,
    pub running: usize,
    pub pending: usize,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub summary: Summary,
    /// Pool labels (`cluster/pool`) in `Sample::allocated` order, with their totals.
    pub pools: Vec<(String, u64)>,
    pub samples: Vec<Sample>,
    pub records: Vec<JobRecord>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// A member has a completion or a preemption deadline due.
    Tick = 0,
    /// An inference instance is deleted.
    Remove = 1,
    /// Nothing happens but the admission step runs (a preemption budget refills).
    Wake = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: Secs,
    kind: EventKind,
    id: u32,
}

pub struct Engine {
    settings: SimulatorSettings,
    policy: Policy,
    seed: u64,
    affinity: bool,
    flavor_ids: HashMap<String, usize>,
    fleet: Fleet,
    quota: QuotaBook,
    jobs: Jobs,
    /// The next job to arrive (jobs are sorted by submit time: a cursor, not heap entries).
    next_arrival: usize,
    heap: BinaryHeap<Reverse<Event>>,
    now: Secs,
    /// Something happened since the last admission step that could let work start.
    changed: bool,
    acc: Accounting,
    sched: Option<SchedState>,
    /// Quota schedules on the virtual clock (scheduler mode only).
    tides: Option<Tides>,
    /// GPUs running per member, inference side then training side (for the tidal
    /// accounts).
    side_alloc: Vec<[u64; 2]>,
    traces: Vec<TraceReport>,
    notes: Vec<String>,
    /// Problems with the inputs that make results doubtful (over-committed guarantees).
    warnings: Vec<String>,
    default_flavor: String,
    first: Secs,
    last_arrival: Secs,
    started: Instant,
}

impl Engine {
    pub fn new(input: RunInput) -> Self {
        let RunInput {
            members,
            policy,
            mut jobs,
            traces,
            seed,
        } = input;
        let settings = policy.simulator;
        let policy = policy.policy;
        let affinity = settings.tuning.pool_affinity;
        let mut notes = Vec::new();

        let (fleet, mut flavors) = Fleet::new(members);
        // Flavors named by queues or workloads but absent from the fleet still get ids.
        for q in &policy.spec.queues {
            for fq in &q.spec.quotas {
                if !flavors.contains(&fq.flavor) {
                    flavors.push(fq.flavor.clone());
                }
            }
        }
        let default_flavor = settings.flavor.clone().unwrap_or_else(|| {
            let fleet = fleet.flavor_set();
            if fleet.len() > 1 {
                notes.push(format!(
                    "the fleet has several GPU models ({}); trace jobs without a flavor use {} (set simulator.flavor)",
                    fleet.iter().copied().collect::<Vec<_>>().join(", "),
                    fleet.first().copied().unwrap_or_default()
                ));
            }
            fleet.first().copied().unwrap_or("gpu").to_owned()
        });
        for j in &jobs {
            let names: Vec<String> = match &j.shape {
                Shape::Pods { flavor, .. } => {
                    vec![flavor.clone().unwrap_or_else(|| default_flavor.clone())]
                }
                Shape::Workload(w) => w
                    .spec
                    .pod_sets
                    .iter()
                    .map(|p| p.flavor.to_string())
                    .collect(),
            };
            for f in names {
                if !flavors.contains(&f) {
                    flavors.push(f);
                }
            }
        }
        let flavor_ids: HashMap<String, usize> = flavors
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), i))
            .collect();

        // The core's own quota book, kept for the whole run; queue ids are its ids.
        let quota = QuotaBook::new(&policy.spec.queues, &[], flavors);
        let queue_names: Vec<String> = quota.queues.iter().map(|q| q.name.clone()).collect();

        // Arrival order: submit time, then the order traces listed the jobs.
        jobs.sort_by_key(|j| j.submit);
        let first = jobs.first().map_or(0, |j| j.submit);
        let last_arrival = jobs.last().map_or(0, |j| j.submit);
        let job_count = jobs.len();
        let nq = queue_names.len();
        let scheduler_mode = settings.mode == Mode::Scheduler;
        let (jobs, duplicates) = Jobs::new(jobs, queue_names, scheduler_mode);
        let sample_every = settings
            .sample_seconds
            .map(|s| s as Secs)
            .unwrap_or_else(|| ((last_arrival - first) / TARGET_SAMPLES).max(60));

        let sched = scheduler_mode.then(|| SchedState::new(&policy, &settings, seed, job_count));
        let schedules = &policy.spec.quota_schedules;
        let tides = if schedules.is_empty() {
            None
        } else if scheduler_mode {
            Tides::new(schedules, fleet.views(), first, &mut notes)
        } else {
            notes.push(
                "quotaSchedules (tidal windows) are simulated in scheduler mode only: FIFO keeps the queues' own quotas"
                    .into(),
            );
            None
        };
        let side_alloc = vec![[0u64; 2]; fleet.len()];
        if sched.as_ref().is_some_and(SchedState::preemption_disabled) {
            notes.push(
                "preemption is off: simulator.runningView aggregate cannot name victims".into(),
            );
        }
        let mut warnings = overcommitted(&policy, &fleet);
        if settings.head_window.is_some() {
            warnings.push(
                "simulator.headWindow is ignored: every cycle shows the core all pending work that could change a decision (see simulator.pendingView)".into(),
            );
        }
        let acc = Accounting::new(fleet.pool_count(), nq, first, sample_every);
        let mut engine = Self {
            settings,
            policy,
            seed,
            affinity,
            flavor_ids,
            fleet,
            quota,
            jobs,
            next_arrival: 0,
            heap: BinaryHeap::new(),
            now: first,
            changed: false,
            acc,
            sched,
            tides,
            side_alloc,
            traces,
            notes,
            warnings,
            default_flavor,
            first,
            last_arrival,
            started: RealClock.instant(),
        };
        // A uid seen twice: the later job is refused, like a duplicate submission.
        for j in duplicates {
            engine.reject(j, "duplicate uid".into());
        }
        engine
    }

    /// Runs to the last event. `progress` is called every few thousand events.
    pub fn run(mut self, progress: &mut dyn FnMut(&Progress)) -> RunOutput {
        self.started = RealClock.instant();
        let mut since_progress = 0u32;
        while self.step() {
            since_progress += 1;
            if since_progress >= 2048 {
                since_progress = 0;
                progress(&self.progress());
            }
        }
        progress(&self.progress());
        self.finish()
    }

    /// Processes every event of the next instant (and admission then); false when nothing
    /// is left.
    fn step(&mut self) -> bool {
        let next_arrival = self.next_pending_arrival();
        let next_event = self.heap.peek().map(|Reverse(e)| e.at);
        let t = match (next_arrival, next_event) {
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (None, None) => return false,
        };
        // Schedules never end: their instants count only while something else is due.
        let t = match self.tides.as_ref().and_then(|x| x.next_instant(self.now)) {
            Some(b) => t.min(b),
            None => t,
        };
        self.advance(t);

        let mut ticks: Vec<u32> = Vec::new();
        let mut removals: Vec<u32> = Vec::new();
        while let Some(Reverse(e)) = self.heap.peek().copied() {
            if e.at != t {
                break;
            }
            self.heap.pop();
            self.acc.count_event();
            match e.kind {
                EventKind::Tick => ticks.push(e.id),
                EventKind::Remove => removals.push(e.id),
                EventKind::Wake => self.changed = true,
            }
        }
        ticks.sort_unstable();
        ticks.dedup();
        for c in ticks {
            let changes = self.fleet.tick(c as usize, t);
            self.apply(c, changes);
        }
        for j in removals {
            self.remove(j);
        }
        while let Some(a) = self.next_pending_arrival() {
            if a != t {
                break;
            }
            let j = self.next_arrival as u32;
            self.next_arrival += 1;
            self.acc.count_event();
            self.arrive(j);
        }

        if let Some(tides) = &mut self.tides
            && tides.advance(t)
        {
            self.changed = true;
        }

        if self.changed && self.jobs.pending_count() > 0 {
            match self.settings.mode {
                Mode::Fifo => self.fifo_step(),
                Mode::Scheduler => self.scheduler_step(),
            }
        }
        self.changed = false;
        true
    }

    /// Scheduler mode: runs up to the first scheduling cycle and returns the input the
    /// simulator gave the core there and the core's output, so a test can build the same
    /// input the live leader's way and compare.
    pub fn first_cycle(mut self) -> Option<(SchedulerInput, SchedulerOutput)> {
        self.sched.as_mut()?.capture_first();
        while self.step() {
            if let Some(c) = self.sched.as_mut().and_then(SchedState::captured) {
                return Some(c);
            }
        }
        None
    }

    fn progress(&self) -> Progress {
        Progress {
            now: self.now,
            first: self.first,
            last_arrival: self.last_arrival,
            arrived: self.next_arrival,
            jobs: self.jobs.len(),
            events: self.acc.events(),
            running: self.jobs.active().len(),
            pending: self.jobs.pending_count(),
        }
    }

    /// The next arrival's time, skipping jobs refused before the run (duplicates).
    fn next_pending_arrival(&mut self) -> Option<Secs> {
        while self.next_arrival < self.jobs.len()
            && self.jobs.phase(self.next_arrival as u32) == jobs::Phase::Rejected
        {
            self.next_arrival += 1;
        }
        (self.next_arrival < self.jobs.len())
            .then(|| self.jobs.job(self.next_arrival as u32).submit)
    }

    fn push_event(&mut self, at: Secs, kind: EventKind, id: u32) {
        self.heap.push(Reverse(Event { at, kind, id }));
    }

    /// Moves the clock to `t`, integrating utilization and over-quota time, and writes the
    /// samples that fall before `t` (the state is constant between events).
    fn advance(&mut self, t: Secs) {
        loop {
            match self.acc.sample_due(t) {
                SampleDue::None => break,
                SampleDue::Capped => {
                    self.notes.push(format!(
                        "timeseries.csv stops after {} rows; raise simulator.sampleSeconds",
                        accounting::MAX_SAMPLES
                    ));
                    break;
                }
                SampleDue::At(at) => self.sample(at),
            }
        }
        let dt = t - self.now;
        if dt > 0 {
            let nf = self.flavor_ids.len();
            let quota = &self.quota;
            let over = (0..self.jobs.queues().len())
                .map(|q| (0..nf).map(|f| quota.over_guarantee(q, f)).sum::<u64>());
            self.acc.integrate(dt, self.fleet.allocated(), over);
            // Windows are judged while work arrives, not over the drain of a backlog.
            if let Some(tides) = &mut self.tides {
                let last = self.last_arrival;
                tides.integrate(
                    t.min(last) - self.now.min(last),
                    &self.side_alloc,
                    self.jobs.pending_gpus_by_side()[1],
                );
            }
        }
        if self.now <= self.last_arrival && t > self.last_arrival {
            let extra = self.last_arrival - self.now;
            self.acc.at_last_arrival(dt - extra, self.fleet.allocated());
        }
        self.now = t;
    }

    fn sample(&mut self, at: Secs) {
        self.fleet.refresh_all(self.now);
        let sample = Sample {
            at,
            allocated: self.fleet.allocated().collect(),
            pending: self.jobs.pending_count() as u64,
            running: self.jobs.active().len() as u64,
        };
        self.acc.sample(sample, self.fleet.fragmentation());
    }

    // ---- what the admission modes (`fifo`, `sched`) read and do ----

    pub(crate) fn now(&self) -> Secs {
        self.now
    }

    pub(crate) fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    pub(crate) fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    pub(crate) fn quota(&self) -> &QuotaBook {
        &self.quota
    }

    /// Per queue (by id), the members its work is pinned to by `queueClusters`, or `None`
    /// when it may go anywhere.
    pub(crate) fn queue_members(&self) -> Vec<Option<Vec<usize>>> {
        self.jobs
            .queues()
            .iter()
            .map(|q| {
                self.settings.queue_clusters.get(q.name()).map(|names| {
                    names
                        .iter()
                        .filter_map(|n| self.fleet.member_id(n))
                        .collect()
                })
            })
            .collect()
    }

    /// Flavor names by id.
    pub(crate) fn flavor_names(&self) -> Vec<&str> {
        let mut names = vec![""; self.flavor_ids.len()];
        for (name, &id) in &self.flavor_ids {
            if let Some(slot) = names.get_mut(id) {
                *slot = name.as_str();
            }
        }
        names
    }

    /// Flavors with ids (the fleet's, then those only queues or jobs name).
    pub(crate) fn flavor_count(&self) -> usize {
        self.flavor_ids.len()
    }

    /// Recomputes member `c`'s digest if it changed.
    pub(crate) fn refresh(&mut self, c: usize) {
        self.fleet.refresh(c, self.now);
    }

    pub(crate) fn refresh_all(&mut self) {
        self.fleet.refresh_all(self.now);
    }

    /// Lends the members' views to a scheduler input; `put_views` returns them.
    pub(crate) fn take_views(&mut self) -> Vec<ClusterView> {
        self.fleet.take_views()
    }

    pub(crate) fn put_views(&mut self, views: Vec<ClusterView>) {
        self.fleet.put_views(views);
    }

    /// Moves a pending job's workload out (into a scheduler input).
    pub(crate) fn take_workload(&mut self, j: u32) -> Option<Box<tideway_api::Workload>> {
        self.jobs.take_workload(j)
    }

    /// Returns a workload `take_workload` lent.
    pub(crate) fn put_workload(&mut self, j: u32, w: Box<tideway_api::Workload>) {
        self.jobs.put_workload(j, w);
    }

    pub(crate) fn take_sched(&mut self) -> Option<SchedState> {
        self.sched.take()
    }

    pub(crate) fn put_sched(&mut self, st: SchedState) {
        self.sched = Some(st);
    }

    pub(crate) fn sched_mut(&mut self) -> Option<&mut SchedState> {
        self.sched.as_mut()
    }

    /// The quota overrides the schedules give a cycle at `now` (none without schedules).
    pub(crate) fn tidal_overrides(
        &self,
        clusters: &[ClusterView],
        queues: &[tideway_api::Queue],
    ) -> Vec<tideway_scheduler::QuotaOverride> {
        self.tides
            .as_ref()
            .map(|t| t.overrides(clusters, queues, self.now))
            .unwrap_or_default()
    }

    /// Marks the waiting inference jobs the schedules owe capacity at this cycle
    /// (`tidal::owed_inference`), given the cycle's overrides and member views.
    pub(crate) fn mark_owed_inference(
        &mut self,
        overrides: &[tideway_scheduler::QuotaOverride],
        views: &[ClusterView],
    ) {
        if self.tides.is_none() || self.jobs.pending_gpus_by_side()[0] == 0 {
            return;
        }
        let mut regions = vec![""; self.fleet.len()];
        for v in views {
            if let Some(c) = self.fleet.member_id(&v.name) {
                regions[c] = v.region.as_str();
            }
        }
        let jobs = &self.jobs;
        let waiting = jobs
            .queues()
            .iter()
            .flat_map(|q| q.pending())
            .map(|(_, j)| j)
            .filter(|&j| side_index(jobs.job(j).class) == 0)
            .map(|j| (j, jobs.job(j).gpus(), jobs.allowed(j)));
        let owed = tidal::owed_inference(overrides, &regions, &self.side_alloc, waiting, self.now);
        for j in owed {
            self.jobs.mark_owed(j, self.now);
        }
    }

    /// `gpus` of job `j` started (`+`) or stopped (`-`) on member `c`.
    fn count_side(&mut self, j: u32, c: usize, gpus: u64, started: bool) {
        let side = side_index(self.jobs.job(j).class);
        if let Some(a) = self.side_alloc.get_mut(c) {
            a[side] = if started {
                a[side].saturating_add(gpus)
            } else {
                a[side].saturating_sub(gpus)
            };
        }
    }

    /// Runs an admission step at `at` even if nothing else happens then.
    /// A checkpoint notice reached running job `j`.
    pub(crate) fn checkpoint(&mut self, j: u32, at: Secs) {
        self.jobs.checkpoint(j, at);
    }

    pub(crate) fn note_checkpoints(&mut self, n: usize) {
        if let Some(t) = &mut self.tides {
            t.noticed(n);
        }
    }

    pub(crate) fn wake_at(&mut self, at: Secs) {
        self.push_event(at, EventKind::Wake, 0);
    }

    // ---- the end ----

    fn finish(mut self) -> RunOutput {
        let end = self.now.max(self.first);
        if self.last_arrival >= end {
            self.acc.at_last_arrival_now();
        }
        for j in 0..self.jobs.len() as u32 {
            if self.jobs.has_reason(j) {
                self.set_reason_at(j, metrics::NO_REASON, end);
            }
        }
        let wall = self.started.elapsed().as_secs_f64();
        let fleet = &self.fleet;
        let records: Vec<JobRecord> = self
            .jobs
            .records(end, |c| fleet.name(c as usize).to_owned());
        let pools: Vec<PoolLine<'_>> = (0..fleet.pool_count())
            .filter_map(|p| fleet.pool(p))
            .map(|p| PoolLine {
                label: p.label,
                cluster: p.cluster,
                pool: p.name,
                flavor: p.flavor,
                total: p.total,
            })
            .collect();
        let queues = self
            .jobs
            .queues()
            .iter()
            .map(|q| QueueLine {
                name: q.name(),
                // What the queue declares; a queue without quotas is not quota-limited (the
                // core books it as unlimited) and reports no guarantee.
                guaranteed: self
                    .policy
                    .spec
                    .queues
                    .iter()
                    .find(|x| x.metadata.name == q.name())
                    .map_or(0, |x| {
                        x.spec
                            .quotas
                            .iter()
                            .filter(|fq| self.flavor_ids.contains_key(&fq.flavor))
                            .map(|fq| u64::from(fq.guaranteed))
                            .sum()
                    }),
            })
            .collect();
        let pool_labels = pools
            .iter()
            .map(|p| (p.label.to_owned(), p.total))
            .collect();
        let input = SummaryInput {
            mode: match self.settings.mode {
                Mode::Fifo => "fifo",
                Mode::Scheduler => "scheduler",
            },
            policy: self.policy.metadata.name.clone(),
            seed: self.seed,
            clusters: fleet.names(),
            first: self.first,
            end,
            last_arrival: self.last_arrival,
            wall,
            sched: self
                .sched
                .as_ref()
                .map(SchedState::stats)
                .unwrap_or_default(),
            traces: std::mem::take(&mut self.traces),
            notes: std::mem::take(&mut self.notes),
            warnings: std::mem::take(&mut self.warnings),
            estimates: self
                .sched
                .as_ref()
                .map(|st| st.estimate_summary(self.settings.runtime_estimates)),
            pools,
            queues,
        };
        let tidal = self.tides.as_ref().map(|t| t.finish(&records, end));
        let (mut summary, samples) = self.acc.finish(&records, input);
        summary.tidal = tidal;
        RunOutput {
            summary,
            pools: pool_labels,
            samples,
            records,
        }
    }
}

/// Guarantees that add up to more GPUs of a flavor than the fleet has: the core cannot keep
/// every promise at once, so a result measured on such a policy is not the policy's.
fn overcommitted(policy: &tideway_api::Policy, fleet: &Fleet) -> Vec<String> {
    let mut have: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for p in (0..fleet.pool_count()).filter_map(|p| fleet.pool(p)) {
        *have.entry(p.flavor).or_default() += p.total;
    }
    let mut promised: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for q in &policy.spec.queues {
        for fq in &q.spec.quotas {
            *promised.entry(fq.flavor.as_str()).or_default() += u64::from(fq.guaranteed);
        }
    }
    promised
        .into_iter()
        .filter_map(|(flavor, sum)| {
            let fleet_gpus = have.get(flavor).copied().unwrap_or(0);
            (sum > fleet_gpus).then(|| {
                format!(
                    "guarantees are over-committed: queues are guaranteed {sum} {flavor} GPUs, the fleet has {fleet_gpus}"
                )
            })
        })
        .collect()
}
