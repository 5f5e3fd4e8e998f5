//! The scheduling cycle's own copy of the workloads it reads: pending, holding capacity
//! (assigned or running), and succeeded (for learned run times), in submission order.
//!
//! The cycle used to copy the whole backlog out of the replicated state under the state
//! lock, holding off apply for tens to hundreds of milliseconds at 10k–50k pending. This copy
//! is owned by the loop and brought up to date under the lock from the state's journal of
//! changed workloads ([`crate::state::workloads`]): O(changes since the last cycle), not
//! O(backlog). The input is then built from it after the lock is released. A copy that
//! cannot follow the journal (first cycle, a snapshot installed, a journal trimmed) is taken
//! whole, once.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use std::collections::HashSet;
use tideway_api::{Workload, WorkloadPhase};

use super::name_index::NameIndex;
use super::window::PendingIndex;
use crate::state::FederationState;
use crate::state::workloads::ChangeCursor;

/// A succeeded workload's completion, what run-time estimates learn from.
#[derive(Debug, Clone)]
pub struct Completion {
    pub finished_at: DateTime<Utc>,
    pub seconds: u64,
    pub workload: Arc<Workload>,
}

/// The workloads changed since a [`Backlog`]'s last refresh (`None`: the journal cannot say,
/// so everything is copied), and where the journal stood.
#[derive(Debug)]
pub struct Changes {
    names: Option<imbl::Vector<Arc<str>>>,
    cursor: ChangeCursor,
}

/// The cycle's copy of the workloads it reads, by submission sequence.
#[derive(Debug, Default)]
pub struct Backlog {
    cursor: Option<ChangeCursor>,
    /// Every order entry below this is in `seq_of`.
    next_seq: u64,
    /// Names shared with the state's order index, not copied: a copy per pending workload was
    /// tens of megabytes at a million. Kept with their hashes, so the table's growth does
    /// not read every name again (see [`NameIndex`]).
    seq_of: NameIndex,
    /// Pending workloads.
    pub pending: BTreeMap<u64, Arc<Workload>>,
    /// Assigned or running workloads.
    pub active: BTreeMap<u64, Arc<Workload>>,
    /// Succeeded workloads that ran (start and finish known).
    pub succeeded: BTreeMap<u64, Completion>,
    /// The pending workloads again, by group, each in the core's order: the cycle reads the
    /// heads from here.
    pub index: PendingIndex,
    /// UID to name: the state's own persistent index as it was at the last refresh (an O(1)
    /// copy), which [`Backlog::by_uid`] reads through `seq_of`. A map of its own from UIDs to
    /// sequence numbers cost memory in proportion to the backlog (measured:
    /// docs/benchmarks/scale.md), and its growth as long again as `seq_of`'s.
    uids: imbl::OrdMap<Arc<str>, Arc<str>>,
    /// Pending entries changed since the index was last brought up to date: filing one in
    /// the index (its group key) is left for [`Backlog::settle`], after the state lock.
    dirty: Vec<u64>,
}

impl Backlog {
    /// A copy of `state`'s workloads.
    pub fn of(state: &FederationState) -> Self {
        let mut b = Self::default();
        b.refresh(state);
        b
    }

    /// Brings the copy up to date with `state`: only the workloads changed since the last
    /// refresh are copied, unless the journal cannot say which (then everything is).
    /// Answers how many workloads were copied.
    pub fn refresh(&mut self, state: &FederationState) -> usize {
        let changes = self.changes(state);
        self.apply(state, changes)
    }

    /// What changed in `state`'s workloads since this copy was last brought up to date: the
    /// only part of a refresh that needs the state itself rather than a copy of it, so the
    /// leader takes this and an O(1) copy of the state under the lock, and applies them after.
    pub fn changes(&self, state: &FederationState) -> Changes {
        Self::changes_at(self.cursor, state)
    }

    /// Where this copy stands in the workloads' journal.
    pub fn cursor(&self) -> Option<ChangeCursor> {
        self.cursor
    }

    /// [`Backlog::changes`] for a copy standing at `cursor`, without the copy at hand (apply
    /// takes them for the cycle, see `raft::copy_slot`).
    pub fn changes_at(cursor: Option<ChangeCursor>, state: &FederationState) -> Changes {
        Changes {
            names: cursor.and_then(|c| state.workloads.changed_since(c)),
            cursor: state.workloads.cursor(),
        }
    }

    /// [`Backlog::refresh`] from `changes`, taken from the state `state` is a copy of (at the
    /// same applied index).
    pub fn apply(&mut self, state: &FederationState, changes: Changes) -> usize {
        let Changes {
            names: changed,
            cursor,
        } = changes;
        let Some(changed) = changed else {
            *self = Self::default();
            for (seq, name) in &state.order {
                self.seq_of.insert(name.clone(), *seq);
                if let Some(w) = state.workloads.get(&**name) {
                    self.file(*seq, w);
                }
            }
            self.next_seq = next_seq(state);
            self.cursor = Some(cursor);
            self.uids = state.uids.clone();
            return state.order.len();
        };
        let names: HashSet<&str> = changed.iter().map(|n| &**n).collect();
        for name in &names {
            if let Some(seq) = self.seq_of.get(name) {
                self.unfile(seq);
            }
        }
        for (seq, name) in state.order.range(self.next_seq..) {
            self.seq_of.insert(name.clone(), *seq);
        }
        self.next_seq = next_seq(state).max(self.next_seq);
        for name in &names {
            match state.workloads.get(*name) {
                None => {
                    self.seq_of.remove(name);
                }
                Some(w) => {
                    if let Some(seq) = self.seq_of.get(name) {
                        self.file(seq, w);
                    }
                }
            }
        }
        self.cursor = Some(cursor);
        self.uids = state.uids.clone();
        names.len()
    }

    /// Brings the index of pending workloads up to date with the copy (no state needed).
    pub fn settle(&mut self) {
        for seq in std::mem::take(&mut self.dirty) {
            self.index.remove(seq);
            if let Some(w) = self.pending.get(&seq) {
                self.index.insert(seq, w.clone());
            }
        }
    }

    /// A pending or active workload by uid.
    pub fn by_uid(&self, uid: &str) -> Option<&Arc<Workload>> {
        let seq = self.seq_of.get(self.uids.get(uid)?)?;
        self.pending.get(&seq).or_else(|| self.active.get(&seq))
    }

    fn unfile(&mut self, seq: u64) {
        if self.pending.remove(&seq).is_none() {
            self.active.remove(&seq);
        }
        self.succeeded.remove(&seq);
        self.dirty.push(seq);
    }

    /// Files `w` by its phase; the copy shares the state's allocation (see
    /// [`crate::state::workloads`]), so a whole copy of a large backlog clones no workload.
    fn file(&mut self, seq: u64, w: &Arc<Workload>) {
        let Some(st) = &w.status else { return };
        match st.phase {
            WorkloadPhase::Pending => {
                self.dirty.push(seq);
                self.pending.insert(seq, w.clone());
            }
            WorkloadPhase::Assigned | WorkloadPhase::Running => {
                self.active.insert(seq, w.clone());
            }
            WorkloadPhase::Succeeded => {
                if let (Some(start), Some(end)) = (st.started_at, st.finished_at) {
                    self.succeeded.insert(
                        seq,
                        Completion {
                            finished_at: end,
                            seconds: u64::try_from((end - start).num_seconds()).unwrap_or(0),
                            workload: w.clone(),
                        },
                    );
                }
            }
            _ => {}
        }
    }
}

fn next_seq(state: &FederationState) -> u64 {
    state
        .order
        .get_max()
        .map_or(0, |(seq, _)| seq.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use tideway_scheduler::SchedulerInput;

    use super::*;
    use crate::dispatcher::cycle::{build_input, capture};
    use crate::state::assignments_tests::{Op, command, op, t};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A copy kept up to date from the journal, refreshed every few entries, gives the
        /// cycle the same input as a copy of the whole backlog, whatever the history
        /// (submissions, assignments, reports, cancels, moves, compaction and resubmission,
        /// snapshot installs). It is refreshed the leader's way: the changed names and an O(1)
        /// copy of the state taken together, applied from the copy, while the previous copy
        /// is still alive and shares the state's workloads: that copy must not see the changes
        /// made after it was taken.
        #[test]
        fn a_followed_copy_gives_the_input_a_whole_copy_gives(
            ops in proptest::collection::vec((op(), any::<bool>()), 1..70)
        ) {
            let mut s = FederationState::default();
            let mut index = 0u64;
            for c in 0..2u8 {
                index += 1;
                if let Some(cmd) = command(&s, &Op::Register(c), index) {
                    s.apply(index, cmd);
                }
            }
            let mut backlog = Backlog::default();
            let mut held: Option<(FederationState, SchedulerInput)> = None;
            for (op, refresh) in &ops {
                index += 1;
                match command(&s, op, index) {
                    Some(cmd) => {
                        s.apply(index, cmd);
                    }
                    None => {
                        let bytes = serde_json::to_vec(&s).expect("encode");
                        s = serde_json::from_slice(&bytes).expect("decode");
                    }
                }
                if !*refresh {
                    continue;
                }
                let changes = backlog.changes(&s);
                let copy = s.clone();
                backlog.apply(&copy, changes);
                let now = t(index as i64);
                let followed = capture(&copy, &backlog, |_| None, now, 1).finish(&backlog);
                if let Some((before, then)) = held.take() {
                    let again = build_input(&before, |_| None, then.now, 1);
                    prop_assert_eq!(&again, &then, "an earlier copy changed");
                }
                let whole = build_input(&s, |_| None, now, 1);
                prop_assert_eq!(&followed, &whole, "after {:?}", op);
                held = Some((copy, whole.clone()));
                // The index of groups the cycle reads heads from follows too.
                backlog.settle();
                let mut fresh = Backlog::of(&s);
                fresh.settle();
                prop_assert_eq!(backlog.index.len(), backlog.pending.len());
                prop_assert_eq!(backlog.index.depths(), fresh.index.depths());
                // Lookups by UID find what a whole copy finds: every pending or active
                // workload, and nothing else (a finished or removed one is not found).
                for w in s.workloads.values() {
                    let Some(uid) = w.metadata.uid.as_deref() else { continue };
                    prop_assert_eq!(
                        backlog.by_uid(uid).map(|f| &**f),
                        fresh.by_uid(uid).map(|f| &**f),
                        "uid {}", uid
                    );
                    let filed = w.status.as_ref().is_some_and(|st| matches!(
                        st.phase,
                        WorkloadPhase::Pending | WorkloadPhase::Assigned | WorkloadPhase::Running
                    ));
                    prop_assert_eq!(fresh.by_uid(uid).is_some(), filed, "uid {}", uid);
                }
            }
        }
    }

    #[test]
    fn a_refresh_copies_only_what_changed() {
        let mut s = FederationState::default();
        for i in 1..=50u64 {
            if let Some(cmd) = command(&s, &Op::Submit((i % 6) as u8), i) {
                s.apply(i, cmd);
            }
        }
        let mut backlog = Backlog::of(&s);
        assert_eq!(backlog.pending.len(), 6);
        assert_eq!(backlog.refresh(&s), 0, "nothing changed");
        if let Some(cmd) = command(&s, &Op::Cancel(2), 51) {
            s.apply(51, cmd);
        }
        assert_eq!(backlog.refresh(&s), 1);
        assert_eq!(backlog.pending.len(), 5);
    }
}
