//! A job's lifecycle as the engine drives it: arrival (admissible or refused), waiting in its
//! queue, dispatch to a member, start, completion, eviction and deletion. Each transition
//! updates the job table, the fleet, the quota book, the accounts and the admission mode's
//! view together.

use tideway_agent::sim::PhaseChange;
use tideway_agent::sim::cluster::RUNTIME_LIMIT_REASON;
use tideway_api::Workload;
use tideway_api::agent::{Assignment, LocalPhase};
use tideway_scheduler::Gangs;

use super::super::config::Mode;
use super::super::metrics;
use super::super::time::Secs;
use super::super::trace::Job;
use super::super::workload::build_workload;
use super::jobs::{Arrival, Phase};
use super::{Engine, EventKind};

impl Engine {
    pub(super) fn arrive(&mut self, j: u32) {
        let job = self.jobs.job(j);
        let mut w = build_workload(job, &self.default_flavor, &self.settings);
        // The queue's time limits, as the live API applies them at submission.
        if let Some(q) = self.policy.spec.queue(&job.queue)
            && let Err(e) = q.spec.apply_time_limits(&mut w.spec)
        {
            self.reject(j, e.to_string());
            return;
        }
        let job = self.jobs.job(j);
        if let Err(why) = self.admissible(job, &w) {
            self.reject(j, why);
            return;
        }
        let Some(q) = self.quota.queue_id(&job.queue) else {
            let why = format!("queue {} is not defined", job.queue);
            self.reject(j, why);
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
            (0..self.fleet.len())
                .filter(|&c| self.fleet.allows(&w, c))
                .map(|c| c as u32)
                .collect()
        });
        let estimate = w
            .spec
            .runtime_estimate_seconds
            .unwrap_or(self.settings.tuning.default_runtime_estimate_seconds);
        let arrival = Arrival {
            queue: q as u32,
            prio,
            gangs,
            request,
            allowed,
            estimate: i64::try_from(estimate).unwrap_or(i64::MAX / 4),
        };
        self.jobs.arrived(j, arrival, w);
        self.enqueue(j);
        if let Some(at) = remove_at {
            self.push_event(at.max(self.now), EventKind::Remove, j);
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
        if !self.fleet.could_ever_fit(w, &gangs) {
            return Err("larger than any cluster it may run on".into());
        }
        Ok(())
    }

    /// Refuses a job for good, counting why.
    pub(super) fn reject(&mut self, j: u32, why: String) {
        self.acc.rejected(&why);
        self.jobs.reject(j, why);
    }

    /// Puts a job (back) in its queue's pending set.
    fn enqueue(&mut self, j: u32) {
        self.jobs.enqueue(j);
        self.changed = true;
        self.set_reason_at(j, metrics::QUEUED, self.now);
    }

    /// Records that `j` now waits for `reason` (closing the interval of the previous one).
    pub(crate) fn set_reason(&mut self, j: u32, reason: u8) {
        self.set_reason_at(j, reason, self.now);
    }

    pub(super) fn set_reason_at(&mut self, j: u32, reason: u8, at: Secs) {
        let closed = self.jobs.set_reason(j, reason, at);
        self.acc.reason_time(closed);
    }

    /// Dispatches `j` to member `c`, into `pool` (`restrict`), or into any pool of the right
    /// flavors (multi-flavor work, whose flavors live in different pools).
    /// Returns false when the member refused it (it is then rejected).
    pub(crate) fn assign(&mut self, j: u32, c: usize, pool: String, restrict: bool) -> bool {
        self.jobs.dequeue(j);
        self.set_reason(j, metrics::NO_REASON);
        let Some((workload, attempt)) = self.jobs.next_attempt(j) else {
            return false;
        };
        let assignment = Assignment {
            workload,
            pool: restrict.then(|| pool.clone()),
            attempt,
        };
        if let Err(e) = self.fleet.ensure(c, &assignment, self.now) {
            let why = format!("member {} refused it: {e}", self.fleet.name(c));
            self.reject(j, why);
            return false;
        }
        self.jobs.dispatched(j, c, pool);
        let q = self.jobs.queue(j);
        for &(f, g) in self.jobs.request(j) {
            self.quota.charge(q, f, g);
        }
        self.fleet.mark_dirty(c);
        if let Some(st) = &mut self.sched {
            // Planned with what the core was told when it chose this job.
            if let Some(secs) = st.planned(j) {
                self.jobs.set_estimate(j, secs);
            }
            st.assigned(j, &self.jobs, &self.fleet, self.now);
        }
        true
    }

    /// Ticks member `c` now (places what was just assigned) and applies the changes.
    pub(crate) fn tick_now(&mut self, c: usize) {
        let changes = self.fleet.tick(c, self.now);
        self.apply(c as u32, changes);
    }

    /// Applies what a member reports: starts, completions, evictions.
    pub(super) fn apply(&mut self, c: u32, changes: Vec<PhaseChange>) {
        if changes.is_empty() {
            return;
        }
        self.fleet.mark_dirty(c as usize);
        for ch in changes {
            let Some(j) = self.jobs.id(&ch.uid) else {
                continue;
            };
            if self.jobs.attempt(j) != ch.attempt {
                continue;
            }
            let at = ch.at.timestamp();
            match ch.phase {
                LocalPhase::Running => self.start(j, c, at),
                LocalPhase::Succeeded => {
                    let ran = self.jobs.ran(j, at);
                    if let (Some(st), Some(w)) = (&mut self.sched, self.jobs.workload(j)) {
                        st.completed(j, w, ran);
                    }
                    self.stop(j, at);
                    self.jobs.set_phase(j, Phase::Done);
                    self.jobs.drop_workload(j);
                    self.fleet.remove(c as usize, &ch.uid);
                }
                // Stopped at its limit: done, not retried (it would hit the limit again).
                LocalPhase::Failed { reason } if reason == RUNTIME_LIMIT_REASON => {
                    self.stop(j, at);
                    self.jobs.set_phase(j, Phase::TimedOut);
                    self.jobs.drop_workload(j);
                    self.fleet.remove(c as usize, &ch.uid);
                }
                LocalPhase::Evicted { .. } | LocalPhase::Failed { .. } => {
                    self.evicted(j, at);
                    self.fleet.remove(c as usize, &ch.uid);
                }
                LocalPhase::Pending | LocalPhase::Aborted { .. } => {}
            }
        }
    }

    fn start(&mut self, j: u32, c: u32, at: Secs) {
        let held = self
            .fleet
            .hold(c as usize, &self.jobs.job(j).uid, self.jobs.attempt(j));
        let gpus = held.iter().map(|(_, g)| g).sum();
        self.count_side(j, c as usize, gpus, true);
        if let Some(r) = self.jobs.started(j, held, at) {
            let end = at.saturating_add(i64::try_from(r).unwrap_or(i64::MAX));
            self.push_event(end, EventKind::Tick, c);
        }
        if let Some(st) = &mut self.sched {
            st.started(j, at, &self.jobs, &self.fleet);
        }
    }

    /// Releases what a job holds (GPUs, quota, its place among active jobs).
    fn stop(&mut self, j: u32, at: Secs) {
        let gpus = self.fleet.release(self.jobs.take_held(j));
        if let Some(c) = self.jobs.cluster(j) {
            self.count_side(j, c as usize, gpus, false);
        }
        let q = self.jobs.queue(j);
        for &(f, g) in self.jobs.request(j) {
            self.quota.release(q, f, g);
        }
        if let Some(pos) = self.jobs.stopped(j, gpus, at)
            && let Some(st) = &mut self.sched
        {
            st.stopped(j, pos);
        }
        self.changed = true;
    }

    /// A preempted (or failed) attempt: the work since the last checkpoint is lost and the
    /// job goes back to its place in the queue.
    fn evicted(&mut self, j: u32, at: Secs) {
        let gpus = self.jobs.held_gpus(j);
        let ran = self.jobs.ran(j, at);
        self.stop(j, at);
        let saved = match self.settings.checkpoint_interval_seconds {
            // The last periodic checkpoint, or a checkpoint notice's if later.
            Some(every) => (ran / every * every).max(self.jobs.checkpointed(j).min(ran)),
            None => 0,
        };
        self.jobs.evicted(j, ran, saved, gpus, at);
        self.enqueue(j);
    }

    /// An inference instance is deleted: from the queue, or from its member.
    pub(super) fn remove(&mut self, j: u32) {
        match self.jobs.phase(j) {
            Phase::Pending => {
                self.jobs.dequeue(j);
                self.set_reason(j, metrics::NO_REASON);
                self.jobs.set_end(j, self.now);
                self.jobs.set_phase(j, Phase::Removed);
            }
            Phase::Assigned | Phase::Running => {
                let c = self.jobs.cluster(j).unwrap_or(0) as usize;
                self.fleet.remove(c, &self.jobs.job(j).uid);
                self.fleet.mark_dirty(c);
                self.stop(j, self.now);
                self.jobs.set_phase(j, Phase::Removed);
            }
            _ => return,
        }
        self.jobs.drop_workload(j);
        self.changed = true;
    }

    /// Asks the member running `j` to stop it within `grace` seconds.
    pub(crate) fn preempt(&mut self, j: u32, grace: u64) {
        let Some(c) = self.jobs.cluster(j) else {
            return;
        };
        let c = c as usize;
        let changes = self
            .fleet
            .preempt(c, &self.jobs.job(j).uid, grace, self.now);
        self.push_event(
            self.now.saturating_add(grace as Secs),
            EventKind::Tick,
            c as u32,
        );
        self.apply(c as u32, changes);
    }
}
