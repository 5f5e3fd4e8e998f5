//! The job table: every trace job's state through its lifecycle (not arrived, pending,
//! assigned, running, done), the queues' pending sets, and the list of active jobs.
//!
//! This module only keeps the table consistent; the transitions that also involve the
//! fleet, quota and the admission mode are orchestrated in `lifecycle`.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;
use tideway_agent::sim::cluster::RUNTIME_ANNOTATION;
use tideway_api::Workload;
use tideway_scheduler::Gangs;

use super::super::metrics::{self, JobRecord, Outcome};
use super::super::tidal::side_index;
use super::super::time::Secs;
use super::super::trace::Job;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    NotArrived,
    Pending,
    /// Dispatched to a member, not placed there yet.
    Assigned,
    Running,
    Done,
    /// Stopped at its run-time limit.
    TimedOut,
    Removed,
    Rejected,
}

/// Pending order within a queue: priority (highest first), then arrival.
pub(crate) type Key = (i64, u64);

struct JobState {
    phase: Phase,
    seq: u64,
    queue: u32,
    /// Priority class value (0 in FIFO mode): the pending order is (-prio, seq).
    prio: i64,
    attempt: u32,
    /// Run time the next attempt needs; `None` runs until deleted.
    remaining: Option<u64>,
    /// Built at arrival, dropped at the end.
    workload: Option<Box<Workload>>,
    /// Its gangs per flavor as the core sees them; set at arrival.
    gangs: Option<Gangs>,
    /// Members its placement allows, `None` for all.
    allowed: Option<Vec<u32>>,
    /// GPUs per flavor id, for quota.
    request: Vec<(usize, u64)>,
    cluster: Option<u32>,
    pool: Option<String>,
    run_start: Secs,
    first_start: Option<Secs>,
    /// Seconds into the current attempt of its last checkpoint notice (0: none).
    noticed_at_ran: u64,
    /// When it was last evicted, while it waits to run again.
    evicted_at: Option<Secs>,
    /// Each wait to run again after an eviction, in seconds.
    rewaits: Vec<Secs>,
    /// Since when a quota schedule owes this waiting job its capacity (`mark_owed`).
    owed_since: Option<Secs>,
    /// Each owed part of a wait, in seconds.
    owed_waits: Vec<Secs>,
    end: Option<Secs>,
    /// GPUs held per global pool while running.
    held: Vec<(u32, u64)>,
    preemptions: u32,
    gpu_seconds: u64,
    lost_gpu_seconds: u64,
    reason: u8,
    reason_since: Secs,
    reasons_seen: u16,
    reject_reason: Option<String>,
    /// Position in `Jobs::active` while assigned or running.
    active_pos: Option<u32>,
    /// What the scheduler may assume about the run time (its estimate, or the tuning's
    /// default), for aggregate running views.
    estimate: Secs,
}

/// What a job becomes at arrival, besides its workload.
pub(super) struct Arrival {
    pub queue: u32,
    pub prio: i64,
    pub gangs: Gangs,
    pub request: Vec<(usize, u64)>,
    pub allowed: Option<Vec<u32>>,
    pub estimate: Secs,
}

/// One queue's pending work.
pub(crate) struct Queue {
    name: String,
    pending: BTreeMap<Key, u32>,
    /// The same, bucketed by GPUs (scheduler mode): finds work that could start without
    /// scanning work that cannot.
    by_size: BTreeMap<u64, BTreeSet<Key>>,
}

impl Queue {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The first pending job, with its key.
    pub fn head(&self) -> Option<(Key, u32)> {
        self.pending.first_key_value().map(|(k, &j)| (*k, j))
    }

    /// Pending jobs in queue order.
    pub fn pending(&self) -> impl Iterator<Item = (Key, u32)> + '_ {
        self.pending.iter().map(|(k, &j)| (*k, j))
    }

    /// The job pending under `key`.
    pub fn job_at(&self, key: &Key) -> Option<u32> {
        self.pending.get(key).copied()
    }

    /// The size buckets of at most `bound` GPUs (scheduler mode), smallest first.
    pub fn sizes_up_to(&self, bound: u64) -> impl Iterator<Item = (u64, &BTreeSet<Key>)> + '_ {
        self.by_size.range(..=bound).map(|(g, set)| (*g, set))
    }

    /// The size buckets of at least `min` GPUs (scheduler mode), smallest first.
    pub fn sizes_from(&self, min: u64) -> impl Iterator<Item = (u64, &BTreeSet<Key>)> + '_ {
        self.by_size.range(min..).map(|(g, set)| (*g, set))
    }

    /// The GPUs of its smallest pending job (scheduler mode).
    pub fn smallest(&self) -> Option<u64> {
        self.by_size.keys().next().copied()
    }
}

pub(crate) struct Jobs {
    jobs: Vec<Job>,
    js: Vec<JobState>,
    uid_ids: FxHashMap<String, u32>,
    queues: Vec<Queue>,
    /// Whether queues keep `by_size` (scheduler mode).
    by_size: bool,
    pending_count: usize,
    /// Pending jobs asking for each flavor id: the core's "does anyone else wait for this
    /// flavor" test must see the same answer from a partial pending view.
    pending_by_flavor: Vec<u64>,
    /// GPUs asked by pending jobs per fleet side (see `tidal::side_index`).
    pending_gpus_by_side: [u64; 2],
    /// Jobs assigned or running, in no particular order.
    active: Vec<u32>,
}

impl Jobs {
    /// The table of `jobs` (sorted by arrival) in `queues`; also returns the jobs whose uid
    /// an earlier job already has.
    pub fn new(jobs: Vec<Job>, queues: Vec<String>, by_size: bool) -> (Self, Vec<u32>) {
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
                noticed_at_ran: 0,
                evicted_at: None,
                rewaits: Vec::new(),
                owed_since: None,
                owed_waits: Vec::new(),
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
            })
            .collect();
        let mut uid_ids = FxHashMap::with_capacity_and_hasher(jobs.len(), Default::default());
        let mut duplicates = Vec::new();
        for (i, j) in jobs.iter().enumerate() {
            if uid_ids.insert(j.uid.clone(), i as u32).is_some() {
                duplicates.push(i as u32);
            }
        }
        let queues = queues
            .into_iter()
            .map(|name| Queue {
                name,
                pending: BTreeMap::new(),
                by_size: BTreeMap::new(),
            })
            .collect();
        let table = Self {
            jobs,
            js,
            uid_ids,
            queues,
            by_size,
            pending_count: 0,
            pending_by_flavor: Vec::new(),
            pending_gpus_by_side: [0; 2],
            active: Vec::new(),
        };
        (table, duplicates)
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn job(&self, j: u32) -> &Job {
        &self.jobs[j as usize]
    }

    /// The job with this uid.
    pub fn id(&self, uid: &str) -> Option<u32> {
        self.uid_ids.get(uid).copied()
    }

    pub(super) fn phase(&self, j: u32) -> Phase {
        self.js[j as usize].phase
    }

    pub fn is_pending(&self, j: u32) -> bool {
        self.js[j as usize].phase == Phase::Pending
    }

    /// Assigned or running.
    pub fn is_active(&self, j: u32) -> bool {
        matches!(self.js[j as usize].phase, Phase::Assigned | Phase::Running)
    }

    pub(super) fn set_phase(&mut self, j: u32, phase: Phase) {
        self.js[j as usize].phase = phase;
    }

    pub fn queues(&self) -> &[Queue] {
        &self.queues
    }

    /// Pending jobs asking for flavor id `f`.
    pub fn pending_on_flavor(&self, f: usize) -> u64 {
        self.pending_by_flavor.get(f).copied().unwrap_or(0)
    }

    /// GPUs asked by pending jobs of each fleet side: [inference, training].
    pub fn pending_gpus_by_side(&self) -> [u64; 2] {
        self.pending_gpus_by_side
    }

    pub fn pending_count(&self) -> usize {
        self.pending_count
    }

    /// Jobs assigned or running, in no particular order.
    pub fn active(&self) -> &[u32] {
        &self.active
    }

    pub fn seq(&self, j: u32) -> u64 {
        self.js[j as usize].seq
    }

    pub fn queue(&self, j: u32) -> usize {
        self.js[j as usize].queue as usize
    }

    /// GPUs per flavor id, for quota.
    pub fn request(&self, j: u32) -> &[(usize, u64)] {
        &self.js[j as usize].request
    }

    pub fn allowed(&self, j: u32) -> Option<&[u32]> {
        self.js[j as usize].allowed.as_deref()
    }

    pub fn gangs(&self, j: u32) -> Option<&Gangs> {
        self.js[j as usize].gangs.as_ref()
    }

    pub fn cluster(&self, j: u32) -> Option<u32> {
        self.js[j as usize].cluster
    }

    pub fn pool(&self, j: u32) -> Option<&str> {
        self.js[j as usize].pool.as_deref()
    }

    pub fn active_pos(&self, j: u32) -> Option<u32> {
        self.js[j as usize].active_pos
    }

    pub fn estimate(&self, j: u32) -> Secs {
        self.js[j as usize].estimate
    }

    /// When the current attempt started running, if it runs.
    /// Sets what the scheduler assumes about the job's run time while it runs.
    pub fn set_estimate(&mut self, j: u32, secs: u64) {
        self.js[j as usize].estimate = i64::try_from(secs).unwrap_or(i64::MAX / 4);
    }

    pub fn running_since(&self, j: u32) -> Option<Secs> {
        let s = &self.js[j as usize];
        (s.phase == Phase::Running).then_some(s.run_start)
    }

    pub fn workload(&self, j: u32) -> Option<&Workload> {
        self.js[j as usize].workload.as_deref()
    }

    /// Moves the workload out (into a scheduler input); `put_workload` returns it.
    pub fn take_workload(&mut self, j: u32) -> Option<Box<Workload>> {
        self.js[j as usize].workload.take()
    }

    pub fn put_workload(&mut self, j: u32, w: Box<Workload>) {
        self.js[j as usize].workload = Some(w);
    }

    pub fn drop_workload(&mut self, j: u32) {
        self.js[j as usize].workload = None;
    }

    /// Records what arrival made of the job.
    pub(super) fn arrived(&mut self, j: u32, a: Arrival, w: Workload) {
        let s = &mut self.js[j as usize];
        s.allowed = a.allowed;
        s.estimate = a.estimate;
        s.queue = a.queue;
        s.prio = a.prio;
        s.gangs = Some(a.gangs);
        s.request = a.request;
        s.workload = Some(Box::new(w));
    }

    pub fn reject(&mut self, j: u32, why: String) {
        let s = &mut self.js[j as usize];
        s.phase = Phase::Rejected;
        s.reject_reason = Some(why);
    }

    /// Puts a job (back) in its queue's pending set.
    pub fn enqueue(&mut self, j: u32) {
        let s = &mut self.js[j as usize];
        s.phase = Phase::Pending;
        let key = (-s.prio, s.seq);
        let q = s.queue as usize;
        let gpus: u64 = s.request.iter().map(|(_, g)| g).sum();
        if self.queues[q].pending.insert(key, j).is_none() {
            self.pending_count += 1;
            self.pending_gpus_by_side[side_index(self.jobs[j as usize].class)] += gpus;
            for &(f, _) in &s.request {
                if self.pending_by_flavor.len() <= f {
                    self.pending_by_flavor.resize(f + 1, 0);
                }
                self.pending_by_flavor[f] += 1;
            }
        }
        if self.by_size {
            self.queues[q].by_size.entry(gpus).or_default().insert(key);
        }
    }

    /// Takes a job out of its queue's pending set.
    pub fn dequeue(&mut self, j: u32) {
        let s = &self.js[j as usize];
        let key = (-s.prio, s.seq);
        let q = s.queue as usize;
        let gpus: u64 = s.request.iter().map(|(_, g)| g).sum();
        if self.queues[q].pending.remove(&key).is_some() {
            self.pending_count -= 1;
            let side = &mut self.pending_gpus_by_side[side_index(self.jobs[j as usize].class)];
            *side = side.saturating_sub(gpus);
            for &(f, _) in &s.request {
                if let Some(n) = self.pending_by_flavor.get_mut(f) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        if let Some(set) = self.queues[q].by_size.get_mut(&gpus) {
            set.remove(&key);
            if set.is_empty() {
                self.queues[q].by_size.remove(&gpus);
            }
        }
    }

    /// Records that `j` waits for `reason` from `at`; returns the interval it closed, as
    /// (queue, previous reason, seconds), for accounting.
    pub fn set_reason(&mut self, j: u32, reason: u8, at: Secs) -> Option<(usize, u8, u64)> {
        let s = &mut self.js[j as usize];
        if s.reason == reason {
            return None;
        }
        let closed = (s.reason != metrics::NO_REASON).then(|| {
            (
                s.queue as usize,
                s.reason,
                (at - s.reason_since).max(0) as u64,
            )
        });
        s.reason = reason;
        s.reason_since = at;
        if reason != metrics::NO_REASON {
            s.reasons_seen |= 1 << reason;
        }
        closed
    }

    /// Whether `j` waits for some reason.
    pub fn has_reason(&self, j: u32) -> bool {
        self.js[j as usize].reason != metrics::NO_REASON
    }

    /// Starts the next attempt: the workload to dispatch, its run time annotated (what the
    /// sim member runs it for), and the attempt number.
    pub fn next_attempt(&mut self, j: u32) -> Option<(Workload, u32)> {
        let s = &mut self.js[j as usize];
        s.attempt += 1;
        let mut workload = s.workload.as_deref()?.clone();
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
        Some((workload, s.attempt))
    }

    pub fn attempt(&self, j: u32) -> u32 {
        self.js[j as usize].attempt
    }

    /// The job was dispatched to member `c`: it becomes active.
    pub fn dispatched(&mut self, j: u32, c: usize, pool: String) {
        let s = &mut self.js[j as usize];
        s.phase = Phase::Assigned;
        s.cluster = Some(c as u32);
        s.pool = Some(pool);
        s.active_pos = Some(self.active.len() as u32);
        self.active.push(j);
    }

    /// The job's attempt started at `at` holding `held`; returns the run time it needs.
    pub fn started(&mut self, j: u32, held: Vec<(u32, u64)>, at: Secs) -> Option<u64> {
        let s = &mut self.js[j as usize];
        s.held = held;
        s.phase = Phase::Running;
        s.run_start = at;
        s.first_start.get_or_insert(at);
        s.noticed_at_ran = 0;
        if let Some(e) = s.evicted_at.take() {
            s.rewaits.push((at - e).max(0));
        }
        if let Some(o) = s.owed_since.take() {
            s.owed_waits.push((at - o).max(0));
        }
        s.remaining
    }

    /// From `at` on, a quota schedule owes waiting job `j` its capacity (its wait counts
    /// against the schedule's promise); kept from the first such moment until it starts.
    pub fn mark_owed(&mut self, j: u32, at: Secs) {
        self.js[j as usize].owed_since.get_or_insert(at);
    }

    /// What a running attempt holds, given back to the fleet.
    pub fn take_held(&mut self, j: u32) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.js[j as usize].held)
    }

    pub fn held_gpus(&self, j: u32) -> u64 {
        self.js[j as usize].held.iter().map(|(_, g)| g).sum()
    }

    /// Seconds the current attempt has run at `at` (0 unless running).
    pub fn ran(&self, j: u32, at: Secs) -> u64 {
        let s = &self.js[j as usize];
        if s.phase == Phase::Running {
            (at - s.run_start).max(0) as u64
        } else {
            0
        }
    }

    /// A checkpoint notice reached the running attempt at `at`: it checkpoints then (what
    /// it did so far is saved) and keeps running.
    pub fn checkpoint(&mut self, j: u32, at: Secs) {
        let ran = self.ran(j, at);
        self.js[j as usize].noticed_at_ran = ran;
    }

    /// Seconds of the current attempt saved by its last checkpoint notice.
    pub fn checkpointed(&self, j: u32) -> u64 {
        self.js[j as usize].noticed_at_ran
    }

    /// The attempt stopped at `at` after using `gpus`: counts its GPU time and takes it out
    /// of the active jobs. Returns the position it left there.
    pub fn stopped(&mut self, j: u32, gpus: u64, at: Secs) -> Option<usize> {
        let ran = self.ran(j, at);
        let s = &mut self.js[j as usize];
        s.gpu_seconds += ran * gpus;
        s.end = Some(at);
        let pos = s.active_pos.take()? as usize;
        self.active.swap_remove(pos);
        if let Some(&moved) = self.active.get(pos) {
            self.js[moved as usize].active_pos = Some(pos as u32);
        }
        Some(pos)
    }

    /// The stopped attempt was preempted after running `ran` seconds on `gpus`, of which
    /// `saved` were checkpointed: the rest is lost and needs to run again.
    pub fn evicted(&mut self, j: u32, ran: u64, saved: u64, gpus: u64, at: Secs) {
        let s = &mut self.js[j as usize];
        s.end = None;
        s.evicted_at = Some(at);
        s.preemptions += 1;
        s.lost_gpu_seconds += (ran - saved) * gpus;
        if let Some(r) = &mut s.remaining {
            *r = r.saturating_sub(saved);
        }
        s.cluster = None;
    }

    /// Sets when a job that never ran (or was removed) ended.
    pub fn set_end(&mut self, j: u32, at: Secs) {
        self.js[j as usize].end = Some(at);
    }

    /// One record per job that arrived, as of `end`; `cluster` names member ids.
    pub fn records(&self, end: Secs, cluster: impl Fn(u32) -> String) -> Vec<JobRecord> {
        self.jobs
            .iter()
            .zip(&self.js)
            .filter(|(_, s)| s.phase != Phase::NotArrived)
            .map(|(job, s)| {
                // The waits that ended, and the one still open since `since`: to the job's
                // end if it ended, else to the end of the run.
                let with_open_wait = |ended: &[Secs], since: Option<Secs>| -> Vec<Secs> {
                    let until = match s.phase {
                        Phase::Removed | Phase::Done | Phase::TimedOut => s.end.unwrap_or(end),
                        _ => end,
                    };
                    ended
                        .iter()
                        .copied()
                        .chain(since.map(|t| (until - t).max(0)))
                        .collect()
                };
                JobRecord {
                    uid: job.uid.clone(),
                    tenant: job.tenant.clone(),
                    queue: job.queue.clone(),
                    class: job.class,
                    gpus: job.gpus(),
                    submit: job.submit,
                    start: s.first_start,
                    end: match s.phase {
                        Phase::Done | Phase::TimedOut | Phase::Removed => s.end,
                        _ => None,
                    },
                    cluster: s.cluster.map(&cluster),
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
                        Phase::TimedOut => Outcome::TimedOut,
                        Phase::Removed => Outcome::Removed,
                        Phase::Rejected => Outcome::Rejected,
                        _ => Outcome::Unfinished,
                    },
                    reject_reason: s.reject_reason.clone(),
                    reasons_seen: s.reasons_seen,
                    rewaits: with_open_wait(&s.rewaits, s.evicted_at),
                    owed_waits: with_open_wait(&s.owed_waits, s.owed_since),
                }
            })
            .collect()
    }
}
