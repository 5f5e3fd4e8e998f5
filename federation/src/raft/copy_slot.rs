//! A reader's work done by apply, at the end of an entry, under the write lock apply holds.
//!
//! The scheduling cycle needs the state's version of one moment, taken under the state lock
//! (since 2026-12-07 one reference count, [`StateMachineData::copy`]; before, a copy of the
//! state's parts, about a tenth of a millisecond warm and up to a millisecond cold). Taken
//! under a read lock of its own, it holds off apply for as long as the cycle's thread holds
//! the lock, and on a machine whose cores are all busy that thread is now and then taken off
//! its core meanwhile: then apply waits a scheduler time slice, a millisecond or more (the
//! cycle logs such holds with their preemptions). Posted here instead, the copy is taken by
//! apply itself right after it applies its next entry, while it holds the lock anyway: apply
//! never waits for the cycle. When apply has nothing to apply for a while, the cycle takes
//! its job back and reads under the lock as before (`withdraw`), holding off nothing that is
//! waiting.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::state_machine::StateMachineData;

/// Work on the state as apply leaves it after an entry.
pub type Job = Box<dyn FnOnce(&StateMachineData) + Send>;

#[derive(Default)]
pub struct CopySlot {
    /// Set while a job waits: apply's check after each entry is one load.
    posted: AtomicBool,
    job: Mutex<Option<Job>>,
}

impl CopySlot {
    /// Leaves `job` for apply's next entry (replacing a job still waiting).
    pub fn post(&self, job: Job) {
        if let Ok(mut slot) = self.job.lock() {
            *slot = Some(job);
            self.posted.store(true, Ordering::Release);
        }
    }

    /// Takes the job back if apply has not taken it: `true` if it was still waiting (it will
    /// not run), `false` if apply took it (it runs or ran).
    pub fn withdraw(&self) -> bool {
        let Ok(mut slot) = self.job.lock() else {
            return false;
        };
        self.posted.store(false, Ordering::Release);
        slot.take().is_some()
    }

    /// Apply, after an entry, holding the write lock: runs the waiting job on `d`, if any.
    pub fn serve(&self, d: &StateMachineData) {
        if !self.posted.load(Ordering::Acquire) {
            return;
        }
        let job = match self.job.lock() {
            Ok(mut slot) => {
                self.posted.store(false, Ordering::Release);
                slot.take()
            }
            Err(_) => None,
        };
        if let Some(job) = job {
            job(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn a_job_runs_once_at_the_next_serve_unless_withdrawn_first() {
        let slot = CopySlot::default();
        let d = StateMachineData::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let job = |ran: &Arc<AtomicUsize>| -> Job {
            let ran = ran.clone();
            Box::new(move |_| {
                ran.fetch_add(1, Ordering::SeqCst);
            })
        };
        // Nothing posted: serving does nothing.
        slot.serve(&d);
        slot.post(job(&ran));
        slot.serve(&d);
        slot.serve(&d);
        assert_eq!(ran.load(Ordering::SeqCst), 1, "once");
        assert!(!slot.withdraw(), "already taken by apply");
        // Withdrawn before apply came by: it never runs.
        slot.post(job(&ran));
        assert!(slot.withdraw());
        slot.serve(&d);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        // A job posted over a waiting one replaces it.
        slot.post(job(&ran));
        slot.post(job(&ran));
        slot.serve(&d);
        assert_eq!(ran.load(Ordering::SeqCst), 2);
    }
}
