//! The discrete-event loop: a virtual clock, an event queue, one `SimCluster` per member,
//! and an admission step (FIFO or the scheduler core) whenever something changed.
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

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::time::{Duration, Instant};
use tideway_api::clock::{Clock, RealClock};

use rustc_hash::FxHashMap;
use tideway_agent::sim::cluster::RUNTIME_ANNOTATION;
use tideway_agent::sim::{PhaseChange, SimCluster, capacity_digest};
use tideway_api::agent::{Assignment, LocalPhase};
use tideway_api::digest::CapacityDigest;
use tideway_api::{Policy, Workload};
use tideway_scheduler::{ClusterView, Gangs, QuotaBook};

use super::config::{Member, Mode, SimPolicy, SimulatorSettings};
use super::metrics::{
    self, JobRecord, Outcome, PoolSummary, QueueSummary, REASONS, RunStats, Sample, Summary,
};
use super::sched::SchedState;
use super::summary::{group_summary, ratio};
use super::time::{Secs, iso, to_utc};
use super::trace::{Job, Shape, TraceReport};
use super::workload::build_workload;

/// Rows of `timeseries.csv` aimed at when `sampleSeconds` is not set.
const TARGET_SAMPLES: i64 = 2000;

/// A bound on `timeseries.csv` whatever `sampleSeconds` says: a one-second interval over a
/// year of trace must not exhaust memory.
const MAX_SAMPLES: usize = 1_000_000;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    NotArrived,
    Pending,
    /// Dispatched to a member, not placed there yet.
    Assigned,
    Running,
    Done,
    Removed,
    Rejected,
}

pub(super) struct JobState {
    pub phase: Phase,
    pub seq: u64,
    pub queue: u32,
    /// Priority class value (0 in FIFO mode): the pending order is (-prio, seq).
    pub prio: i64,
    pub attempt: u32,
    /// Run time the next attempt needs; `None` runs until deleted.
    pub remaining: Option<u64>,
    /// Built at arrival, dropped at the end.
    pub workload: Option<Box<Workload>>,
    /// Its gangs per flavor as the core sees them; set at arrival.
    pub gangs: Option<Gangs>,
    /// Members its placement allows, `None` for all.
    pub allowed: Option<Vec<u32>>,
    /// GPUs per flavor id, for quota.
    pub request: Vec<(usize, u64)>,
    pub cluster: Option<u32>,
    pub pool: Option<String>,
    pub run_start: Secs,
    pub first_start: Option<Secs>,
    pub end: Option<Secs>,
    /// GPUs held per global pool while running.
    pub held: Vec<(u32, u64)>,
    pub preemptions: u32,
    pub gpu_seconds: u64,
    pub lost_gpu_seconds: u64,
    pub reason: u8,
    pub reason_since: Secs,
    pub reasons_seen: u16,
    pub reject_reason: Option<String>,
    /// Position in `Engine::active` while assigned or running.
    pub active_pos: Option<u32>,
    /// What the scheduler may assume about the run time (its estimate, or the tuning's
    /// default), for aggregate running views.
    pub estimate: Secs,
    /// Aggregate groups it counts in while active, with its pods in each.
    pub aggs: Vec<(u32, u32)>,
}

pub(super) struct MemberState {
    pub name: String,
    pub sim: SimCluster,
    pub dirty: bool,
    /// Global pool index of each node.
    pub node_pool: Vec<u32>,
    /// The digest of the empty cluster: what could ever fit.
    pub empty: CapacityDigest,
    /// Global pool index of each pool of the digest, in digest order.
    pub digest_pools: Vec<u32>,
}

pub(super) struct PoolState {
    pub member: u32,
    pub name: String,
    pub flavor: String,
    pub total: u64,
    pub node_gpus: u32,
    pub allocated: u64,
    pub label: String,
}

/// Pending order within a queue: priority (highest first), then arrival.
pub(super) type Key = (i64, u64);

pub(super) struct QueueState {
    pub name: String,
    pub pending: BTreeMap<Key, u32>,
    /// The same, bucketed by GPUs (scheduler mode): finds work that could start without
    /// scanning work that cannot.
    pub by_size: BTreeMap<u64, BTreeSet<Key>>,
}

#[derive(Default)]
pub(super) struct Acc {
    pub events: u64,
    pub cycles: u64,
    pub sched_wall: Duration,
    pub preemption_decisions: u64,
    pub reservations: u64,
    pub alloc_secs: Vec<u128>,
    pub alloc_secs_at_last_arrival: Vec<u128>,
    pub frag_stranded: Vec<u64>,
    pub frag_free: Vec<u64>,
    pub over_secs: Vec<u64>,
    pub over_gpu_secs: Vec<u128>,
    pub reason_secs: Vec<[u64; REASONS.len()]>,
    pub samples: Vec<Sample>,
    pub next_sample: Secs,
    pub sample_every: Secs,
    pub rejected: BTreeMap<String, u64>,
}

pub struct Engine {
    pub(super) settings: SimulatorSettings,
    pub(super) policy: Policy,
    pub(super) seed: u64,
    pub(super) affinity: bool,
    pub(super) flavors: Vec<String>,
    pub(super) flavor_ids: HashMap<String, usize>,
    pub(super) members: Vec<MemberState>,
    pub(super) member_ids: HashMap<String, usize>,
    /// Each member's current digest; stale while the member is `dirty`.
    pub(super) views: Vec<ClusterView>,
    pub(super) pools: Vec<PoolState>,
    pub(super) queues: Vec<QueueState>,
    pub(super) quota: QuotaBook,
    pub(super) jobs: Vec<Job>,
    pub(super) js: Vec<JobState>,
    pub(super) uid_ids: FxHashMap<String, u32>,
    next_arrival: usize,
    heap: BinaryHeap<Reverse<Event>>,
    pub(super) now: Secs,
    pub(super) changed: bool,
    pub(super) pending_count: usize,
    /// Jobs assigned or running, in no particular order.
    pub(super) active: Vec<u32>,
    pub(super) acc: Acc,
    pub(super) sched: Option<SchedState>,
    traces: Vec<TraceReport>,
    notes: Vec<String>,
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

        // Members, their pools and digests.
        let mut flavors: Vec<String> = Vec::new();
        let mut pools: Vec<PoolState> = Vec::new();
        let mut states = Vec::new();
        let mut views = Vec::new();
        for (mi, m) in members.into_iter().enumerate() {
            let sim = SimCluster::new(&m.inventory);
            let digest = capacity_digest(&sim, to_utc(0));
            let mut digest_pools = Vec::new();
            for p in &digest.pools {
                let node_gpus = sim
                    .nodes()
                    .iter()
                    .filter(|n| n.pool == p.pool && n.model == p.flavor)
                    .map(|n| n.gpus)
                    .max()
                    .unwrap_or(0);
                if !flavors.contains(&p.flavor) {
                    flavors.push(p.flavor.clone());
                }
                digest_pools.push(pools.len() as u32);
                pools.push(PoolState {
                    member: mi as u32,
                    name: p.pool.clone(),
                    flavor: p.flavor.clone(),
                    total: u64::from(p.counts.total),
                    node_gpus,
                    allocated: 0,
                    label: format!("{}/{}", m.name, p.pool),
                });
            }
            let node_pool = sim
                .nodes()
                .iter()
                .map(|n| {
                    digest
                        .pools
                        .iter()
                        .position(|p| p.pool == n.pool && p.flavor == n.model)
                        .map_or(u32::MAX, |i| digest_pools[i])
                })
                .collect();
            views.push(ClusterView {
                name: m.name.clone(),
                region: m.region.clone(),
                ready: true,
                digest: digest.clone(),
                declared_levels: None,
            });
            states.push(MemberState {
                name: m.name,
                sim,
                dirty: false,
                node_pool,
                empty: digest,
                digest_pools,
            });
        }
        // Labels must be unique: add the flavor where a pool name repeats in a cluster.
        let labels: Vec<String> = pools.iter().map(|p| p.label.clone()).collect();
        for (i, p) in pools.iter_mut().enumerate() {
            if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
                p.label = format!("{}/{}", p.label, p.flavor);
            }
        }
        // Flavors named by queues or workloads but absent from the fleet still get ids.
        for q in &policy.spec.queues {
            for fq in &q.spec.quotas {
                if !flavors.contains(&fq.flavor) {
                    flavors.push(fq.flavor.clone());
                }
            }
        }
        let default_flavor = settings.flavor.clone().unwrap_or_else(|| {
            let fleet: BTreeSet<&str> = pools.iter().map(|p| p.flavor.as_str()).collect();
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
                Shape::Workload(w) => w.spec.pod_sets.iter().map(|p| p.flavor.clone()).collect(),
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
        let quota = QuotaBook::new(&policy.spec.queues, &[], flavors.clone());
        let queues: Vec<QueueState> = quota
            .queues
            .iter()
            .map(|q| QueueState {
                name: q.name.clone(),
                pending: BTreeMap::new(),
                by_size: BTreeMap::new(),
            })
            .collect();
        if !policy.spec.quota_schedules.is_empty() {
            notes.push(
                "quotaSchedules (tidal windows) are not simulated: queues keep their own quotas"
                    .into(),
            );
        }

        // Arrival order: submit time, then the order traces listed the jobs.
        jobs.sort_by_key(|j| j.submit);
        let first = jobs.first().map_or(0, |j| j.submit);
        let last_arrival = jobs.last().map_or(0, |j| j.submit);
        let js = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| JobState {
                phase: Phase::NotArrived,
                seq: i as u64,
                queue: 0,
                prio: 0,
                attempt: 0,
                remaining: j.runtime,
                workload: None,
                gangs: None,
                allowed: None,
                request: Vec::new(),
                cluster: None,
                pool: None,
                run_start: 0,
                first_start: None,
                end: None,
                held: Vec::new(),
                preemptions: 0,
                gpu_seconds: 0,
                lost_gpu_seconds: 0,
                reason: metrics::NO_REASON,
                reason_since: 0,
                reasons_seen: 0,
                reject_reason: None,
                active_pos: None,
                estimate: 0,
                aggs: Vec::new(),
            })
            .collect();
        let mut uid_ids = FxHashMap::with_capacity_and_hasher(jobs.len(), Default::default());
        let mut duplicates = Vec::new();
        for (i, j) in jobs.iter().enumerate() {
            if uid_ids.insert(j.uid.clone(), i as u32).is_some() {
                duplicates.push(i);
            }
        }
        let sample_every = settings
            .sample_seconds
            .map(|s| s as Secs)
            .unwrap_or_else(|| ((last_arrival - first) / TARGET_SAMPLES).max(60));

        let np = pools.len();
        let nq = queues.len();
        let sched = (settings.mode == Mode::Scheduler).then(|| SchedState::new(&policy, &settings));
        if sched.as_ref().is_some_and(|s| s.preemption_disabled) {
            notes.push(
                "preemption is off: simulator.runningView aggregate cannot name victims".into(),
            );
        }
        let member_ids = states
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
        let mut engine = Self {
            settings,
            policy,
            seed,
            affinity,
            flavors,
            flavor_ids,
            members: states,
            member_ids,
            views,
            pools,
            queues,
            quota,
            jobs,
            js,
            uid_ids,
            next_arrival: 0,
            heap: BinaryHeap::new(),
            now: first,
            changed: false,
            pending_count: 0,
            active: Vec::new(),
            acc: Acc {
                alloc_secs: vec![0; np],
                alloc_secs_at_last_arrival: vec![0; np],
                frag_stranded: vec![0; np],
                frag_free: vec![0; np],
                over_secs: vec![0; nq],
                over_gpu_secs: vec![0; nq],
                reason_secs: vec![[0; REASONS.len()]; nq],
                next_sample: first,
                sample_every,
                ..Acc::default()
            },
            sched,
            traces,
            notes,
            default_flavor,
            first,
            last_arrival,
            started: RealClock.instant(),
        };
        // A uid seen twice: the later job is refused, like a duplicate submission.
        for i in duplicates {
            engine.js[i].phase = Phase::Rejected;
            engine.reject(i as u32, "duplicate uid".into());
        }
        engine
    }

    /// Runs to the last event. `progress` is called every few thousand events.
    pub fn run(mut self, progress: &mut dyn FnMut(&Progress)) -> RunOutput {
        self.started = RealClock.instant();
        let mut since_progress = 0u32;
        loop {
            let next_arrival = self.next_pending_arrival();
            let next_event = self.heap.peek().map(|Reverse(e)| e.at);
            let t = match (next_arrival, next_event) {
                (Some(a), Some(e)) => a.min(e),
                (Some(a), None) => a,
                (None, Some(e)) => e,
                (None, None) => break,
            };
            self.advance(t);

            let mut ticks: Vec<u32> = Vec::new();
            let mut removals: Vec<u32> = Vec::new();
            while let Some(Reverse(e)) = self.heap.peek().copied() {
                if e.at != t {
                    break;
                }
                self.heap.pop();
                self.acc.events += 1;
                match e.kind {
                    EventKind::Tick => ticks.push(e.id),
                    EventKind::Remove => removals.push(e.id),
                    EventKind::Wake => self.changed = true,
                }
            }
            ticks.sort_unstable();
            ticks.dedup();
            for c in ticks {
                let changes = self.members[c as usize].sim.tick(to_utc(t));
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
                self.acc.events += 1;
                self.arrive(j);
            }

            if self.changed && self.pending_count > 0 {
                match self.settings.mode {
                    Mode::Fifo => self.fifo_step(),
                    Mode::Scheduler => self.scheduler_step(),
                }
            }
            self.changed = false;

            since_progress += 1;
            if since_progress >= 2048 {
                since_progress = 0;
                progress(&self.progress());
            }
        }
        progress(&self.progress());
        self.finish()
    }

    fn progress(&self) -> Progress {
        Progress {
            now: self.now,
            first: self.first,
            last_arrival: self.last_arrival,
            arrived: self.next_arrival,
            jobs: self.jobs.len(),
            events: self.acc.events,
            running: self.active.len(),
            pending: self.pending_count,
        }
    }

    /// The next arrival's time, skipping jobs refused before the run (duplicates).
    fn next_pending_arrival(&mut self) -> Option<Secs> {
        while self.next_arrival < self.jobs.len()
            && self.js[self.next_arrival].phase == Phase::Rejected
        {
            self.next_arrival += 1;
        }
        self.jobs.get(self.next_arrival).map(|j| j.submit)
    }

    /// Moves the clock to `t`, integrating utilization and over-quota time, and writes the
    /// samples that fall before `t` (the state is constant between events).
    fn advance(&mut self, t: Secs) {
        while self.acc.next_sample < t {
            if self.acc.samples.len() >= MAX_SAMPLES {
                self.notes.push(format!(
                    "timeseries.csv stops after {MAX_SAMPLES} rows; raise simulator.sampleSeconds"
                ));
                self.acc.next_sample = Secs::MAX;
                break;
            }
            let at = self.acc.next_sample;
            self.sample(at);
            self.acc.next_sample = self.acc.next_sample.saturating_add(self.acc.sample_every);
        }
        let dt = t - self.now;
        if dt > 0 {
            for (i, p) in self.pools.iter().enumerate() {
                self.acc.alloc_secs[i] += u128::from(p.allocated) * dt as u128;
            }
            for q in 0..self.queues.len() {
                let over: u64 = (0..self.flavors.len())
                    .map(|f| self.quota.over_guarantee(q, f))
                    .sum();
                if over > 0 {
                    self.acc.over_secs[q] += dt as u64;
                    self.acc.over_gpu_secs[q] += u128::from(over) * dt as u128;
                }
            }
        }
        if self.now <= self.last_arrival && t > self.last_arrival {
            // Snapshot at the last arrival, for utilization while submitting.
            let extra = self.last_arrival - self.now;
            for (i, p) in self.pools.iter().enumerate() {
                self.acc.alloc_secs_at_last_arrival[i] =
                    self.acc.alloc_secs[i] - u128::from(p.allocated) * (dt - extra).max(0) as u128;
            }
        }
        self.now = t;
    }

    fn sample(&mut self, at: Secs) {
        for c in 0..self.members.len() {
            self.refresh(c);
        }
        for (c, view) in self.views.iter().enumerate() {
            for (k, p) in view.digest.pools.iter().enumerate() {
                let gi = self.members[c].digest_pools.get(k).copied();
                let Some(gi) = gi.map(|g| g as usize) else {
                    continue;
                };
                let free = p.counts.free();
                let size = self.pools[gi].node_gpus.max(1);
                let usable = p.counts.pods_that_fit(size) * u64::from(size);
                self.acc.frag_free[gi] += free;
                self.acc.frag_stranded[gi] += free.saturating_sub(usable);
            }
        }
        self.acc.samples.push(Sample {
            at,
            allocated: self.pools.iter().map(|p| p.allocated).collect(),
            pending: self.pending_count as u64,
            running: self.active.len() as u64,
        });
    }

    /// Recomputes a member's digest if it changed since the last one.
    pub(super) fn refresh(&mut self, c: usize) {
        if self.members[c].dirty {
            self.views[c].digest = capacity_digest(&self.members[c].sim, to_utc(self.now));
            self.members[c].dirty = false;
        }
    }

    // ---- arrivals ----

    fn arrive(&mut self, j: u32) {
        let ji = j as usize;
        let job = &self.jobs[ji];
        let w = build_workload(job, &self.default_flavor, &self.settings);
        if let Err(why) = self.admissible(job, &w) {
            self.js[ji].phase = Phase::Rejected;
            self.reject(j, why);
            return;
        }
        let Some(q) = self.quota.queue_id(&job.queue) else {
            self.js[ji].phase = Phase::Rejected;
            self.reject(j, format!("queue {} is not defined", job.queue));
            return;
        };
        let prio = match self.settings.mode {
            Mode::Fifo => 0,
            Mode::Scheduler => {
                let name = &w.spec.priority_class;
                let default = &self.policy.spec.scheduler.default_priority_class;
                let class = self
                    .policy
                    .spec
                    .priority_class(name)
                    .or_else(|| self.policy.spec.priority_class(default));
                i64::from(class.map_or(0, |c| c.spec.value))
            }
        };
        let gangs = Gangs::of(&w, self.affinity);
        let request: Vec<(usize, u64)> = gangs
            .iter()
            .filter_map(|(flavor, gpus, _)| Some((*self.flavor_ids.get(flavor)?, gpus)))
            .collect();
        let remove_at = job.remove_at;
        let allowed = w.spec.placement.as_ref().map(|_| {
            (0..self.members.len())
                .filter(|&c| self.cluster_allowed(&w, c))
                .map(|c| c as u32)
                .collect()
        });
        let estimate = w
            .spec
            .runtime_estimate_seconds
            .unwrap_or(self.settings.tuning.default_runtime_estimate_seconds);
        let s = &mut self.js[ji];
        s.allowed = allowed;
        s.estimate = i64::try_from(estimate).unwrap_or(i64::MAX / 4);
        s.queue = q as u32;
        s.prio = prio;
        s.gangs = Some(gangs);
        s.request = request;
        s.workload = Some(Box::new(w));
        self.enqueue(j);
        if let Some(at) = remove_at {
            self.heap.push(Reverse(Event {
                at: at.max(self.now),
                kind: EventKind::Remove,
                id: j,
            }));
        }
    }

    /// Refuses at submission what could never run, as the federation would (JSON-lines
    /// workloads were validated by their reader, before the simulator gave them uids): an unknown
    /// queue or class, a flavor no cluster has, a gang no allowed cluster can hold even
    /// empty, a request above the queue's quota ceiling.
    fn admissible(&self, job: &Job, w: &Workload) -> Result<(), String> {
        let (Some(q), Some(queue)) = (
            self.quota.queue_id(&job.queue),
            self.policy
                .spec
                .queues
                .iter()
                .find(|q| q.metadata.name == job.queue),
        ) else {
            return Err(format!("queue {} is not defined", job.queue));
        };
        if !queue.spec.serves(w.spec.class) {
            return Err(format!(
                "queue {} does not serve {} workloads",
                job.queue, w.spec.class
            ));
        }
        if w.spec.total_gpus() == 0 {
            return Err("requests no GPUs".into());
        }
        let gangs = Gangs::of(w, self.affinity);
        for (flavor, gpus, _) in gangs.iter() {
            let Some(&f) = self.flavor_ids.get(flavor) else {
                return Err(format!("no cluster has {flavor} GPUs"));
            };
            if gpus > self.quota.max_ever(q, f) {
                return Err(format!(
                    "needs more {flavor} GPUs than its queue may ever use"
                ));
            }
        }
        let fits_somewhere = self
            .members
            .iter()
            .enumerate()
            .any(|(c, m)| self.cluster_allowed(w, c) && gangs.place(&m.empty).is_some());
        if !fits_somewhere {
            return Err("larger than any cluster it may run on".into());
        }
        Ok(())
    }

    /// The workload's placement constraint (clusters, regions) allows member `c`.
    pub(super) fn cluster_allowed(&self, w: &Workload, c: usize) -> bool {
        match &w.spec.placement {
            None => true,
            Some(p) => {
                (p.clusters.is_empty() || p.clusters.iter().any(|n| *n == self.views[c].name))
                    && (p.regions.is_empty()
                        || p.regions.iter().any(|r| *r == self.views[c].region))
            }
        }
    }

    fn reject(&mut self, j: u32, why: String) {
        *self.acc.rejected.entry(why.clone()).or_insert(0) += 1;
        self.js[j as usize].reject_reason = Some(why);
    }

    /// Puts a job (back) in its queue's pending set.
    pub(super) fn enqueue(&mut self, j: u32) {
        let now = self.now;
        let s = &mut self.js[j as usize];
        s.phase = Phase::Pending;
        let key = (-s.prio, s.seq);
        let q = s.queue as usize;
        let gpus: u64 = s.request.iter().map(|(_, g)| g).sum();
        self.queues[q].pending.insert(key, j);
        if self.sched.is_some() {
            self.queues[q].by_size.entry(gpus).or_default().insert(key);
        }
        self.pending_count += 1;
        self.changed = true;
        self.set_reason_at(j, metrics::QUEUED, now);
    }

    /// Takes a job out of its queue's pending set.
    pub(super) fn dequeue(&mut self, j: u32) {
        let s = &self.js[j as usize];
        let key = (-s.prio, s.seq);
        let q = s.queue as usize;
        let gpus: u64 = s.request.iter().map(|(_, g)| g).sum();
        if self.queues[q].pending.remove(&key).is_some() {
            self.pending_count -= 1;
        }
        if let Some(set) = self.queues[q].by_size.get_mut(&gpus) {
            set.remove(&key);
            if set.is_empty() {
                self.queues[q].by_size.remove(&gpus);
            }
        }
    }

    /// Records that `j` now waits for `reason` (closing the interval of the previous one).
    pub(super) fn set_reason(&mut self, j: u32, reason: u8) {
        let now = self.now;
        self.set_reason_at(j, reason, now);
    }

    fn set_reason_at(&mut self, j: u32, reason: u8, at: Secs) {
        let s = &mut self.js[j as usize];
        if s.reason == reason {
            return;
        }
        if s.reason != metrics::NO_REASON {
            let q = s.queue as usize;
            self.acc.reason_secs[q][s.reason as usize] += (at - s.reason_since).max(0) as u64;
        }
        s.reason = reason;
        s.reason_since = at;
        if reason != metrics::NO_REASON {
            s.reasons_seen |= 1 << reason;
        }
    }

    // ---- dispatch and member changes ----

    /// Dispatches `j` to member `c`, into `pool` (`restrict`), or into any pool of the right
    /// flavors (multi-flavor work, whose flavors live in different pools).
    /// Returns false when the member refused it (it is then rejected).
    pub(super) fn assign(&mut self, j: u32, c: usize, pool: String, restrict: bool) -> bool {
        let ji = j as usize;
        self.dequeue(j);
        self.set_reason(j, metrics::NO_REASON);
        let s = &mut self.js[ji];
        s.attempt += 1;
        let Some(template) = s.workload.as_deref() else {
            return false;
        };
        let mut workload = template.clone();
        match s.remaining {
            Some(r) => {
                workload
                    .metadata
                    .annotations
                    .insert(RUNTIME_ANNOTATION.to_owned(), r.to_string());
            }
            None => {
                workload.metadata.annotations.remove(RUNTIME_ANNOTATION);
                workload.spec.runtime_estimate_seconds = None;
            }
        }
        let assignment = Assignment {
            workload,
            pool: restrict.then(|| pool.clone()),
            attempt: s.attempt,
        };
        if let Err(e) = self.members[c].sim.ensure(&assignment, to_utc(self.now)) {
            self.js[ji].phase = Phase::Rejected;
            self.reject(
                j,
                format!("member {} refused it: {e}", self.members[c].name),
            );
            return false;
        }
        let s = &mut self.js[ji];
        s.phase = Phase::Assigned;
        s.cluster = Some(c as u32);
        s.pool = Some(pool);
        let q = s.queue as usize;
        for i in 0..self.js[ji].request.len() {
            let (f, g) = self.js[ji].request[i];
            self.quota.charge(q, f, g);
        }
        self.js[ji].active_pos = Some(self.active.len() as u32);
        self.active.push(j);
        self.members[c].dirty = true;
        if self.sched.is_some() {
            self.sched_assigned(j);
        }
        true
    }

    /// Ticks member `c` now (places what was just assigned) and applies the changes.
    pub(super) fn tick_now(&mut self, c: usize) {
        let changes = self.members[c].sim.tick(to_utc(self.now));
        self.apply(c as u32, changes);
    }

    /// Applies what a member reports: starts, completions, evictions.
    pub(super) fn apply(&mut self, c: u32, changes: Vec<PhaseChange>) {
        if changes.is_empty() {
            return;
        }
        self.members[c as usize].dirty = true;
        for ch in changes {
            let Some(&j) = self.uid_ids.get(&ch.uid) else {
                continue;
            };
            if self.js[j as usize].attempt != ch.attempt {
                continue;
            }
            let at = ch.at.timestamp();
            match ch.phase {
                LocalPhase::Running => self.start(j, c, at),
                LocalPhase::Succeeded => {
                    self.stop(j, at);
                    self.js[j as usize].phase = Phase::Done;
                    self.js[j as usize].workload = None;
                    self.members[c as usize].sim.remove(&ch.uid);
                }
                LocalPhase::Evicted { .. } | LocalPhase::Failed { .. } => {
                    self.evicted(j, at);
                    self.members[c as usize].sim.remove(&ch.uid);
                }
                LocalPhase::Pending | LocalPhase::Aborted { .. } => {}
            }
        }
    }

    fn start(&mut self, j: u32, c: u32, at: Secs) {
        let ji = j as usize;
        let uid = &self.jobs[ji].uid;
        let attempt = self.js[ji].attempt;
        let mut held: Vec<(u32, u64)> = Vec::new();
        if let Some(w) = self.members[c as usize].sim.workload(uid, attempt) {
            for (&node, &gpus) in &w.placement {
                let p = self.members[c as usize].node_pool[node];
                match held.iter_mut().find(|(hp, _)| *hp == p) {
                    Some(h) => h.1 += u64::from(gpus),
                    None => held.push((p, u64::from(gpus))),
                }
            }
        }
        for &(p, g) in &held {
            if let Some(pool) = self.pools.get_mut(p as usize) {
                pool.allocated += g;
            }
        }
        let s = &mut self.js[ji];
        s.held = held;
        s.phase = Phase::Running;
        s.run_start = at;
        s.first_start.get_or_insert(at);
        if let Some(r) = s.remaining {
            let end = at.saturating_add(i64::try_from(r).unwrap_or(i64::MAX));
            self.heap.push(Reverse(Event {
                at: end,
                kind: EventKind::Tick,
                id: c,
            }));
        }
        if self.sched.is_some() {
            self.sched_started(j, at);
        }
    }

    /// Releases what a job holds (GPUs, quota, its place among active jobs).
    fn stop(&mut self, j: u32, at: Secs) {
        let ji = j as usize;
        let held = std::mem::take(&mut self.js[ji].held);
        let mut gpus = 0;
        for (p, g) in held {
            if let Some(pool) = self.pools.get_mut(p as usize) {
                pool.allocated = pool.allocated.saturating_sub(g);
            }
            gpus += g;
        }
        if self.js[ji].phase == Phase::Running {
            let ran = (at - self.js[ji].run_start).max(0) as u64;
            self.js[ji].gpu_seconds += ran * gpus;
        }
        let q = self.js[ji].queue as usize;
        for i in 0..self.js[ji].request.len() {
            let (f, g) = self.js[ji].request[i];
            self.quota.release(q, f, g);
        }
        if let Some(pos) = self.js[ji].active_pos.take() {
            let pos = pos as usize;
            self.active.swap_remove(pos);
            if let Some(&moved) = self.active.get(pos) {
                self.js[moved as usize].active_pos = Some(pos as u32);
            }
            if self.sched.is_some() {
                self.sched_stopped(j, pos);
            }
        }
        self.js[ji].end = Some(at);
        self.changed = true;
    }

    /// A preempted (or failed) attempt: the work since the last checkpoint is lost and the
    /// job goes back to its place in the queue.
    fn evicted(&mut self, j: u32, at: Secs) {
        let ji = j as usize;
        let was_running = self.js[ji].phase == Phase::Running;
        let gpus: u64 = self.js[ji].held.iter().map(|(_, g)| g).sum();
        let ran = if was_running {
            (at - self.js[ji].run_start).max(0) as u64
        } else {
            0
        };
        self.stop(j, at);
        let saved = match self.settings.checkpoint_interval_seconds {
            Some(every) => ran / every * every,
            None => 0,
        };
        let s = &mut self.js[ji];
        s.end = None;
        s.preemptions += 1;
        s.lost_gpu_seconds += (ran - saved) * gpus;
        if let Some(r) = &mut s.remaining {
            *r = r.saturating_sub(saved);
        }
        s.cluster = None;
        self.enqueue(j);
    }

    /// An inference instance is deleted: from the queue, or from its member.
    fn remove(&mut self, j: u32) {
        let ji = j as usize;
        match self.js[ji].phase {
            Phase::Pending => {
                self.dequeue(j);
                self.set_reason(j, metrics::NO_REASON);
                self.js[ji].end = Some(self.now);
                self.js[ji].phase = Phase::Removed;
            }
            Phase::Assigned | Phase::Running => {
                let c = self.js[ji].cluster.unwrap_or(0) as usize;
                self.members[c].sim.remove(&self.jobs[ji].uid);
                self.members[c].dirty = true;
                let now = self.now;
                self.stop(j, now);
                self.js[ji].phase = Phase::Removed;
            }
            _ => return,
        }
        self.js[ji].workload = None;
        self.changed = true;
    }

    pub(super) fn wake_at(&mut self, at: Secs) {
        self.heap.push(Reverse(Event {
            at,
            kind: EventKind::Wake,
            id: 0,
        }));
    }

    pub(super) fn tick_at(&mut self, at: Secs, c: usize) {
        self.heap.push(Reverse(Event {
            at,
            kind: EventKind::Tick,
            id: c as u32,
        }));
    }

    // ---- the end ----

    fn finish(mut self) -> RunOutput {
        let end = self.now.max(self.first);
        if self.last_arrival >= end {
            self.acc.alloc_secs_at_last_arrival = self.acc.alloc_secs.clone();
        }
        for j in 0..self.js.len() {
            if self.js[j].reason != metrics::NO_REASON {
                self.set_reason_at(j as u32, metrics::NO_REASON, end);
            }
        }
        let wall = self.started.elapsed().as_secs_f64();
        let span = (end - self.first).max(0);
        let submitting = (self.last_arrival - self.first).max(0);

        let records: Vec<JobRecord> = self
            .jobs
            .iter()
            .zip(&self.js)
            .filter(|(_, s)| s.phase != Phase::NotArrived)
            .map(|(job, s)| JobRecord {
                uid: job.uid.clone(),
                tenant: job.tenant.clone(),
                queue: job.queue.clone(),
                class: job.class,
                gpus: job.gpus(),
                submit: job.submit,
                start: s.first_start,
                end: match s.phase {
                    Phase::Done | Phase::Removed => s.end,
                    _ => None,
                },
                cluster: s.cluster.map(|c| self.members[c as usize].name.clone()),
                preemptions: s.preemptions,
                gpu_seconds: s.gpu_seconds
                    + if s.phase == Phase::Running {
                        (end - s.run_start).max(0) as u64
                            * s.held.iter().map(|(_, g)| g).sum::<u64>()
                    } else {
                        0
                    },
                lost_gpu_seconds: s.lost_gpu_seconds,
                outcome: match s.phase {
                    Phase::Done => Outcome::Succeeded,
                    Phase::Removed => Outcome::Removed,
                    Phase::Rejected => Outcome::Rejected,
                    _ => Outcome::Unfinished,
                },
                reject_reason: s.reject_reason.clone(),
                reasons_seen: s.reasons_seen,
            })
            .collect();

        let fleet_gpus: u64 = self.pools.iter().map(|p| p.total).sum();
        let fleet_secs = fleet_gpus as f64 * span as f64;
        let group = |recs: &mut dyn Iterator<Item = &JobRecord>, reason_secs: &[u64]| {
            group_summary(recs, reason_secs, fleet_secs)
        };

        let total_reason_secs: Vec<u64> = (0..REASONS.len())
            .map(|r| self.acc.reason_secs.iter().map(|q| q[r]).sum())
            .collect();
        let overall = group(&mut records.iter(), &total_reason_secs);

        let mut queues = BTreeMap::new();
        for (qi, q) in self.queues.iter().enumerate() {
            let g = group(
                &mut records.iter().filter(|r| r.queue == q.name),
                &self.acc.reason_secs[qi],
            );
            // What the queue declares; a queue without quotas is not quota-limited (the core
            // books it as unlimited) and reports no guarantee.
            let guaranteed: u64 = self
                .policy
                .spec
                .queues
                .iter()
                .find(|x| x.metadata.name == q.name)
                .map_or(0, |x| {
                    x.spec
                        .quotas
                        .iter()
                        .filter(|fq| self.flavor_ids.contains_key(&fq.flavor))
                        .map(|fq| u64::from(fq.guaranteed))
                        .sum()
                });
            let util = (guaranteed > 0 && span > 0)
                .then(|| g.gpu_hours * 3600.0 / (guaranteed as f64 * span as f64));
            queues.insert(
                q.name.clone(),
                QueueSummary {
                    group: g,
                    guaranteed_gpus: guaranteed,
                    utilization_of_guarantee: util,
                    over_quota_hours: self.acc.over_secs[qi] as f64 / 3600.0,
                    over_quota_gpu_hours: self.acc.over_gpu_secs[qi] as f64 / 3600.0,
                },
            );
        }
        let mut classes = BTreeMap::new();
        let class_set: BTreeSet<_> = records.iter().map(|r| r.class).collect();
        for class in class_set {
            // Reason time is kept per queue; per class it is left out (counts stay).
            let g = group(
                &mut records.iter().filter(|r| r.class == class),
                &[0; REASONS.len()],
            );
            classes.insert(class.as_str().to_owned(), g);
        }

        let mut pools = BTreeMap::new();
        let mut total_alloc: u128 = 0;
        let mut total_alloc_sub: u128 = 0;
        for (i, p) in self.pools.iter().enumerate() {
            total_alloc += self.acc.alloc_secs[i];
            total_alloc_sub += self.acc.alloc_secs_at_last_arrival[i];
            let denom = p.total as f64 * span as f64;
            let denom_sub = p.total as f64 * submitting as f64;
            pools.insert(
                p.label.clone(),
                PoolSummary {
                    cluster: self.members[p.member as usize].name.clone(),
                    pool: p.name.clone(),
                    flavor: p.flavor.clone(),
                    total_gpus: p.total,
                    utilization: ratio(self.acc.alloc_secs[i] as f64, denom),
                    utilization_while_submitting: ratio(
                        self.acc.alloc_secs_at_last_arrival[i] as f64,
                        denom_sub,
                    ),
                    fragmentation: ratio(
                        self.acc.frag_stranded[i] as f64,
                        self.acc.frag_free[i] as f64,
                    ),
                },
            );
        }
        let bad_rows = self.traces.iter().map(|t| t.bad_rows.count).sum();
        let summary = Summary {
            mode: match self.settings.mode {
                Mode::Fifo => "fifo".into(),
                Mode::Scheduler => "scheduler".into(),
            },
            policy: self.policy.metadata.name.clone(),
            seed: self.seed,
            clusters: self.members.iter().map(|m| m.name.clone()).collect(),
            fleet_gpus,
            start: iso(self.first),
            end: iso(end),
            simulated_seconds: span,
            run: RunStats {
                wall_seconds: wall,
                events: self.acc.events,
                events_per_second: if wall > 0.0 {
                    self.acc.events as f64 / wall
                } else {
                    0.0
                },
                scheduler_cycles: self.acc.cycles,
                scheduler_wall_seconds: self.acc.sched_wall.as_secs_f64(),
                preemption_decisions: self.acc.preemption_decisions,
                reservations: self.acc.reservations,
            },
            traces: std::mem::take(&mut self.traces),
            bad_rows,
            rejected_by_reason: std::mem::take(&mut self.acc.rejected),
            overall,
            queues,
            classes,
            pools,
            utilization: ratio(total_alloc as f64, fleet_secs),
            utilization_while_submitting: ratio(
                total_alloc_sub as f64,
                fleet_gpus as f64 * submitting as f64,
            ),
            notes: std::mem::take(&mut self.notes),
        };
        RunOutput {
            summary,
            pools: self
                .pools
                .iter()
                .map(|p| (p.label.clone(), p.total))
                .collect(),
            samples: std::mem::take(&mut self.acc.samples),
            records,
        }
    }
}
