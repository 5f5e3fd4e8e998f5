//! The workloads by name, with a journal of which names changed: what lets the leader's
//! scheduling cycle keep its own copy of the backlog and, under the state lock, copy only
//! what changed since its last cycle instead of the whole backlog (a copy whose cost grew
//! with the backlog, with apply held off all that time; measured:
//! docs/benchmarks/state-lock.md).
//!
//! Reads go through `Deref` to the map; every way to change a workload (`get_mut`, `insert`,
//! `remove`) records its name, so no apply path can change one unseen. The journal is
//! derived: not serialized (snapshots and the state digest hold the map only, as before), and
//! each value (a new state, a clone, a decoded snapshot) gets a journal of its own identity,
//! so a reader that followed another one starts over instead of missing a change.
//!
//! The map is persistent ([`imbl::OrdMap`]) and holds each workload behind an `Arc`: a copy
//! of the whole map is O(1) and shares everything, so a snapshot or a state digest copies it
//! under the state lock and encodes the copy after the lock is released, and the cycle's
//! copy of a workload is the same allocation. A change after such a copy clones only the
//! changed workload and the map's path to it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tideway_api::{PendingReason, Workload, WorkloadPhase};

use super::digest_hash::{Error, ReasonHashes};

/// Journal entries always kept: a reader less than half this far behind can follow it.
///
/// It was 4,096, which left a reader able to follow only about 2,000 to 6,000 changes
/// behind while the state held under 150,000 workloads. Under the scale bench's fill the
/// leader's cycle was further behind than that and copied the whole backlog every cycle,
/// each such cycle several times as long as one that copies the changes (measured:
/// docs/benchmarks/scale.md). Half of 32,768 covers a few seconds of any rate this machine
/// reaches, for about 2 MB.
const SLACK: usize = 32_768;

/// Beyond [`SLACK`], one entry kept per this many workloads. Past that the oldest half is
/// dropped, and a reader behind it copies the whole backlog once. The journal only grows
/// (followers never read it, and the leader's reader cannot trim it from its copy), so the
/// bound is its memory: at a million workloads about 95,000 names, where one per workload
/// held up to a million on every node (measured: docs/benchmarks/scale.md). The leader's
/// cycle reads it every few hundred milliseconds, thousands of changes behind at most.
const PER_WORKLOADS: usize = 16;

/// Identities of journals, so a cursor from one never reads another.
static JOURNALS: AtomicU64 = AtomicU64::new(1);

/// Where a reader stands in a [`Workloads`] journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeCursor {
    journal: u64,
    position: u64,
}

#[derive(Debug)]
struct Journal {
    id: u64,
    /// Position of `names[0]`.
    start: u64,
    /// Persistent, so that a reader under the state lock takes the names changed since its
    /// cursor in O(log n) instead of counting up thousands of names there (a cold cache line
    /// each) while apply waits.
    names: imbl::Vector<Arc<str>>,
}

impl Journal {
    /// Records that `name` changed, in a map of `len` workloads (which sets the bound).
    fn note(&mut self, name: Arc<str>, len: usize) {
        self.names.push_back(name);
        let cap = SLACK + len / PER_WORKLOADS;
        if self.names.len() > cap {
            let dropped = self.names.len() - cap / 2;
            self.start += dropped as u64;
            self.names = self.names.skip(dropped);
        }
    }
}

impl Default for Journal {
    fn default() -> Self {
        Self {
            id: JOURNALS.fetch_add(1, Ordering::Relaxed),
            start: 0,
            names: imbl::Vector::new(),
        }
    }
}

/// The workloads by name, each shared with any copy that holds it.
pub type WorkloadMap = imbl::OrdMap<WorkloadKey, Arc<Workload>>;

/// A workload's name as the map's key: one allocation shared with the indexes beside the map,
/// and compared by pointer before by text.
///
/// The state digest diffs the map against its copy from the last digest. A copy of a changed
/// node holds the same keys (clones of the same `Arc`), yet comparing them as strings reads
/// every key's text, a cold cache line each: a third of a walk over 12,000 changed pending
/// reasons at a million workloads. Two keys that are one allocation are equal without that.
#[derive(Clone)]
pub struct WorkloadKey(Arc<str>);

impl WorkloadKey {
    /// The shared name, for an index that holds it too.
    pub fn shared(&self) -> &Arc<str> {
        &self.0
    }
}

impl std::fmt::Debug for WorkloadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (*self.0).fmt(f)
    }
}

impl std::ops::Deref for WorkloadKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for WorkloadKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for WorkloadKey {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for WorkloadKey {}

impl PartialOrd for WorkloadKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WorkloadKey {
    /// The text's order (what `Borrow<str>` lookups need), skipped when both are one name.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            std::cmp::Ordering::Equal
        } else {
            self.0.cmp(&other.0)
        }
    }
}

impl std::hash::Hash for WorkloadKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl From<Arc<str>> for WorkloadKey {
    fn from(name: Arc<str>) -> Self {
        Self(name)
    }
}

impl From<&str> for WorkloadKey {
    fn from(name: &str) -> Self {
        Self(name.into())
    }
}

impl Serialize for WorkloadKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for WorkloadKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Arc::<str>::deserialize(d).map(Self)
    }
}

/// Workloads by name, the journal of changed names, and the workloads' part of the state
/// digest.
#[derive(Debug)]
pub struct Workloads {
    map: WorkloadMap,
    journal: Journal,
    /// The wrapping sum of every workload's digest hash ([`ReasonHashes::workload`]), moved
    /// by each change as it is made. `None` when it is not known: a decoded map (until
    /// [`Self::restore_sum`]), or a workload that could not be encoded (the digest then walks
    /// the map as it did before the sum was kept).
    sum: Option<u64>,
    /// Hashes of the pending reasons last seen, for the sum.
    reasons: ReasonHashes,
}

impl Default for Workloads {
    fn default() -> Self {
        Self {
            map: WorkloadMap::default(),
            journal: Journal::default(),
            sum: Some(0),
            reasons: ReasonHashes::default(),
        }
    }
}

impl Clone for Workloads {
    /// A copy starts a journal of its own: its changes are not the original's. Its sum is the
    /// original's (the same map).
    fn clone(&self) -> Self {
        Self {
            map: self.map.clone(),
            journal: Journal::default(),
            sum: self.sum,
            reasons: ReasonHashes::default(),
        }
    }
}

impl Workloads {
    /// The next version of this map, to replace it as the live one: the same journal (its
    /// identity and names), so that a cursor a reader took from this version still reads
    /// the changes made to the next. This is what apply needs when it writes past a reader's
    /// copy (`StateMachineData::state_mut`): a [`Clone::clone`] starts a journal of its own,
    /// and the leader's cycle, whose cursor came from the version it copied, then copied the
    /// whole backlog every cycle. Only one of the two versions may change afterwards: the old
    /// one stays, frozen, with its readers.
    pub fn successor(&self) -> Self {
        Self {
            map: self.map.clone(),
            journal: Journal {
                id: self.journal.id,
                start: self.journal.start,
                names: self.journal.names.clone(),
            },
            sum: self.sum,
            reasons: self.reasons.clone(),
        }
    }
}

impl PartialEq for Workloads {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl Serialize for Workloads {
    /// The map alone (a snapshot encodes it on several threads, see `parallel_encode`).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        crate::parallel_encode::ordmap(&self.map, s)
    }
}

impl<'de> Deserialize<'de> for Workloads {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self {
            map: WorkloadMap::deserialize(d)?,
            journal: Journal::default(),
            sum: None,
            reasons: ReasonHashes::default(),
        })
    }
}

impl std::ops::Deref for Workloads {
    type Target = WorkloadMap;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<'a> IntoIterator for &'a Workloads {
    type Item = (&'a WorkloadKey, &'a Arc<Workload>);
    type IntoIter =
        imbl::ordmap::Iter<'a, WorkloadKey, Arc<Workload>, imbl::shared_ptr::DefaultSharedPtr>;

    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

impl Workloads {
    /// The workload `name`, to change: the change is journaled, and the digest's sum moved
    /// when the returned guard is dropped.
    pub fn get_mut(&mut self, name: &str) -> Option<WorkloadMut<'_>> {
        // One descent: a cycle's entry changes thousands of workloads spread over the map,
        // and a lookup to journal the key, then a second one to change the value, were a
        // large share of applying it (measured: docs/benchmarks/cluster-status.md).
        let len = self.map.len();
        let (key, w) = self.map.get_key_value_mut(name)?;
        self.journal.note(key.shared().clone(), len);
        // Not taken when the sum is not kept: the guard then leaves it unknown.
        let before = match self.sum {
            Some(_) => self.reasons.workload(key, w),
            None => Ok(0),
        };
        Some(WorkloadMut {
            key,
            w: Arc::make_mut(w),
            sum: &mut self.sum,
            reasons: &mut self.reasons,
            before,
        })
    }

    /// Gives pending workload `name` the reason `reason` (shared by `share` when it is
    /// stored, and handed back to it by value so it is never copied), unless it is not
    /// pending or already has an equal one; whether it did.
    ///
    /// Only the reason's part of the digest's sum moves: hashing the whole workload before
    /// and after, as [`Self::get_mut`] does, would cost a scheduling cycle's entry of
    /// thousands of reasons several milliseconds more under the state's write lock.
    pub fn set_pending_reason(
        &mut self,
        name: &str,
        reason: PendingReason,
        share: impl FnOnce(PendingReason) -> Arc<PendingReason>,
    ) -> bool {
        let len = self.map.len();
        let Some((key, w)) = self.map.get_key_value_mut(name) else {
            return false;
        };
        let Some(st) = w.status.as_ref() else {
            return false;
        };
        if st.phase != WorkloadPhase::Pending || st.pending_reason.as_deref() == Some(&reason) {
            return false;
        }
        self.journal.note(key.shared().clone(), len);
        let shared = share(reason);
        if self.sum.is_some() {
            let before = self.reasons.part_of(key, st.pending_reason.as_ref());
            let after = self.reasons.part_of(key, Some(&shared));
            self.sum = moved(self.sum, before, after);
        }
        if let Some(st) = Arc::make_mut(w).status.as_mut() {
            st.pending_reason = Some(shared);
        }
        true
    }

    /// Stores `w` as `name` (replacing any). The key is an `Arc<str>` so that the indexes
    /// beside the map (submission order, UIDs, idempotency records) and the journal share
    /// one copy of the name instead of each holding its own.
    pub fn insert(&mut self, name: impl Into<Arc<str>>, w: Workload) -> Option<Workload> {
        self.insert_shared(name, Arc::new(w))
            .map(Arc::unwrap_or_clone)
    }

    /// Stores `w` under `name`, sharing it with the caller (a submission's answer).
    pub fn insert_shared(
        &mut self,
        name: impl Into<Arc<str>>,
        w: Arc<Workload>,
    ) -> Option<Arc<Workload>> {
        let name = name.into();
        self.note_shared(name.clone());
        let added = self.sum.map(|_| self.reasons.workload(&name, &w));
        let old = self.map.insert(name.clone().into(), w);
        if let Some(added) = added {
            let removed = old
                .as_ref()
                .map_or(Ok(0), |o| self.reasons.workload(&name, o));
            self.sum = moved(self.sum, removed, added);
        }
        old
    }

    /// Forgets `name`.
    pub fn remove(&mut self, name: &str) -> Option<Workload> {
        let (key, w) = self.map.remove_with_key(name)?;
        if self.sum.is_some() {
            let removed = self.reasons.workload(&key, &w);
            self.sum = moved(self.sum, removed, Ok(0));
        }
        self.note_shared(key.0);
        Some(Arc::unwrap_or_clone(w))
    }

    /// The workloads' part of the state digest: the sum of their hashes, or `None` when it
    /// is not known (see the field).
    pub fn digest_sum(&self) -> Option<u64> {
        self.sum
    }

    /// After decoding: the sum the encoded map had (a snapshot carries it), or, when it is
    /// not given (a snapshot written before the sum was kept), the sum computed from the map.
    pub fn restore_sum(&mut self, sum: Option<u64>) {
        self.sum = match sum {
            Some(s) => Some(s),
            None => self.map.iter().try_fold(0, |total, (k, w)| {
                moved(Some(total), Ok(0), self.reasons.workload(k, w))
            }),
        };
    }

    fn note_shared(&mut self, name: Arc<str>) {
        self.journal.note(name, self.map.len());
    }

    /// Where the journal stands now: a reader that copied the workloads takes this with them.
    pub fn cursor(&self) -> ChangeCursor {
        ChangeCursor {
            journal: self.journal.id,
            position: self.journal.start + self.journal.names.len() as u64,
        }
    }

    /// The names changed since `cursor` (with repeats), or `None` when the journal no longer
    /// reaches back that far or is another value's: the reader copies everything again.
    pub fn changed_since(&self, cursor: ChangeCursor) -> Option<imbl::Vector<Arc<str>>> {
        if cursor.journal != self.journal.id || cursor.position < self.journal.start {
            return None;
        }
        let from = usize::try_from(cursor.position - self.journal.start).ok()?;
        (from <= self.journal.names.len()).then(|| self.journal.names.skip(from))
    }
}

/// A workload being changed ([`Workloads::get_mut`]): when dropped, the digest's sum moves
/// from the workload's hash before the change to its hash after.
pub struct WorkloadMut<'a> {
    key: &'a WorkloadKey,
    w: &'a mut Workload,
    sum: &'a mut Option<u64>,
    reasons: &'a mut ReasonHashes,
    /// The hash before the change (an error: it could not be taken, and the sum becomes
    /// unknown).
    before: Result<u64, Error>,
}

impl std::ops::Deref for WorkloadMut<'_> {
    type Target = Workload;

    fn deref(&self) -> &Workload {
        self.w
    }
}

impl std::ops::DerefMut for WorkloadMut<'_> {
    fn deref_mut(&mut self) -> &mut Workload {
        self.w
    }
}

impl Drop for WorkloadMut<'_> {
    fn drop(&mut self) {
        if self.sum.is_none() {
            return;
        }
        let before = std::mem::replace(&mut self.before, Ok(0));
        let after = self.reasons.workload(self.key, self.w);
        *self.sum = moved(*self.sum, before, after);
    }
}

/// `sum` with the hash `out` taken out and `into` added; unknown from the first hash that
/// could not be taken on (the digest then walks the map instead).
fn moved(sum: Option<u64>, out: Result<u64, Error>, into: Result<u64, Error>) -> Option<u64> {
    match (sum, out, into) {
        (Some(s), Ok(o), Ok(i)) => Some(s.wrapping_sub(o).wrapping_add(i)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{PodSet, WorkloadClass, WorkloadSpec};

    use super::*;

    fn workload(name: &str) -> Workload {
        let spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("p", 1, 1, "H100")],
        );
        Workload::new(name, spec)
    }

    #[test]
    fn keys_order_as_their_text_whether_or_not_they_share_it() {
        let a: Arc<str> = "a-1".into();
        let same = WorkloadKey::from(a.clone());
        let copy = WorkloadKey::from("a-1");
        assert_eq!(WorkloadKey::from(a), same);
        assert_eq!(same, copy);
        assert_eq!(same.cmp(&copy), std::cmp::Ordering::Equal);
        let names = ["b", "a-10", "a-1", "", "a-2", "a"];
        let mut keys: Vec<WorkloadKey> = names.iter().map(|n| WorkloadKey::from(*n)).collect();
        keys.sort();
        let mut texts = names.to_vec();
        texts.sort();
        assert_eq!(keys.iter().map(|k| &**k).collect::<Vec<_>>(), texts);
        // Looked up by text.
        let mut ws = Workloads::default();
        ws.insert("a-1", workload("a-1"));
        assert!(ws.contains_key("a-1") && ws.get_mut("a-1").is_some());
        assert_eq!(serde_json::to_string(&copy).expect("encode"), r#""a-1""#);
    }

    #[test]
    fn a_reader_sees_every_changed_name_once_behind_and_starts_over_when_lost() {
        let mut ws = Workloads::default();
        ws.insert("a", workload("a"));
        let cursor = ws.cursor();
        assert_eq!(ws.changed_since(cursor).map(|v| v.len()), Some(0));
        if let Some(mut w) = ws.get_mut("a") {
            w.spec.queue = "other".into();
        }
        ws.insert("b", workload("b"));
        ws.remove("a");
        assert!(ws.get_mut("missing").is_none());
        let seen = ws
            .changed_since(cursor)
            .map(|v| v.into_iter().collect::<Vec<_>>());
        assert_eq!(seen, Some(vec!["a".into(), "b".into(), "a".into()]));
        // A clone or a decoded copy is another journal: the cursor does not apply there.
        assert_eq!(ws.clone().changed_since(cursor), None);
        let back: Workloads =
            serde_json::from_slice(&serde_json::to_vec(&ws).expect("encode")).expect("decode");
        assert_eq!(back, ws);
        assert_eq!(back.changed_since(cursor), None);
        // A journal past its bound drops its oldest half: it stays within the bound, a
        // reader behind what it dropped starts over, and one within half the bound of the
        // head still sees every change since its cursor.
        for _ in 0..3 * SLACK {
            let _ = ws.get_mut("b");
        }
        assert!(ws.journal.names.len() <= SLACK + ws.len() / PER_WORKLOADS);
        assert_eq!(ws.changed_since(cursor), None);
        let recent = ws.cursor();
        for _ in 0..SLACK / 4 {
            let _ = ws.get_mut("b");
        }
        assert_eq!(ws.changed_since(recent).map(|v| v.len()), Some(SLACK / 4));
        assert_eq!(ws.changed_since(ws.cursor()).map(|v| v.len()), Some(0));
    }

    #[test]
    fn a_copy_keeps_what_it_copied_while_the_original_changes() {
        let mut ws = Workloads::default();
        for n in ["a", "b", "c"] {
            ws.insert(n, workload(n));
        }
        let copy = ws.clone();
        let before = rmp_serde::to_vec_named(&ws).expect("encode");
        if let Some(mut w) = ws.get_mut("b") {
            w.spec.queue = "changed".into();
        }
        ws.remove("c");
        ws.insert("d", workload("d"));
        assert_eq!(
            copy.get("b").map(|w| w.spec.queue.as_str()),
            Some("default")
        );
        assert!(copy.contains_key("c") && !copy.contains_key("d"));
        assert_eq!(rmp_serde::to_vec_named(&copy).expect("encode"), before);
        assert_eq!(ws.get("b").map(|w| w.spec.queue.as_str()), Some("changed"));
        // Untouched workloads are still one allocation in both.
        let (Some(a1), Some(a2)) = (ws.get("a"), copy.get("a")) else {
            panic!("a in both");
        };
        assert!(Arc::ptr_eq(a1, a2));
    }

    /// The sum of every workload's hash, taken afresh.
    fn sum_from_scratch(ws: &Workloads) -> u64 {
        let mut reasons = ReasonHashes::default();
        ws.iter().fold(0u64, |sum, (k, w)| {
            sum.wrapping_add(reasons.workload(k, w).expect("hash"))
        })
    }

    fn pending(name: &str) -> Workload {
        let mut w = workload(name);
        w.status = Some(tideway_api::WorkloadStatus {
            phase: WorkloadPhase::Pending,
            ..Default::default()
        });
        w
    }

    #[test]
    fn the_kept_sum_follows_every_kind_of_change_and_survives_a_decode() {
        let quota = |used| PendingReason::QuotaExhausted {
            queue: "default".into(),
            flavor: "H100".into(),
            used,
            limit: 8,
        };
        let mut ws = Workloads::default();
        assert_eq!(ws.digest_sum(), Some(0));
        let check = |ws: &Workloads, what: &str| {
            assert_eq!(ws.digest_sum(), Some(sum_from_scratch(ws)), "{what}");
        };
        for n in ["a", "b", "c"] {
            ws.insert(n, pending(n));
        }
        check(&ws, "inserted");
        ws.insert("b", workload("b"));
        check(&ws, "replaced");
        // A reason given, changed, given again (no change), and refused to a workload that is
        // not pending.
        assert!(ws.set_pending_reason("a", quota(1), PendingReason::shared));
        check(&ws, "a reason");
        assert!(ws.set_pending_reason("c", quota(1), PendingReason::shared));
        assert!(ws.set_pending_reason("a", quota(2), PendingReason::shared));
        check(&ws, "a changed reason");
        assert!(!ws.set_pending_reason("a", quota(2), PendingReason::shared));
        assert!(!ws.set_pending_reason("b", quota(2), PendingReason::shared));
        assert!(!ws.set_pending_reason("missing", quota(2), PendingReason::shared));
        check(&ws, "no change");
        // Two workloads swapping reasons move the sum.
        let before = ws.digest_sum();
        assert!(ws.set_pending_reason("a", quota(1), PendingReason::shared));
        assert!(ws.set_pending_reason("c", quota(2), PendingReason::shared));
        check(&ws, "swapped");
        assert_ne!(ws.digest_sum(), before);
        // A change through the guard, the reason among what it changes.
        if let Some(mut w) = ws.get_mut("a")
            && let Some(st) = w.status.as_mut()
        {
            st.pending_reason = None;
            st.message = Some("changed".into());
        }
        check(&ws, "changed in place");
        // A copy changes apart from the original, each sum its own map's.
        let mut copy = ws.clone();
        copy.remove("c");
        ws.insert("d", pending("d"));
        check(&ws, "the original");
        check(&copy, "the copy");
        ws.remove("a");
        ws.remove("missing");
        check(&ws, "removed");
        // A decoded map does not know its sum until told, or until it computes it.
        let bytes = rmp_serde::to_vec_named(&ws).expect("encode");
        let mut back: Workloads = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back.digest_sum(), None);
        back.insert("e", pending("e"));
        assert_eq!(back.digest_sum(), None, "not kept while unknown");
        back.remove("e");
        back.restore_sum(None);
        assert_eq!(back.digest_sum(), ws.digest_sum());
        let mut told: Workloads = rmp_serde::from_slice(&bytes).expect("decode");
        told.restore_sum(ws.digest_sum());
        check(&told, "told");
    }

    #[test]
    fn the_encoding_is_the_plain_maps_so_earlier_snapshots_still_load() {
        let mut plain = std::collections::BTreeMap::new();
        let mut ws = Workloads::default();
        for n in ["x", "a", "m"] {
            plain.insert(n.to_string(), workload(n));
            ws.insert(n, workload(n));
        }
        let bytes = rmp_serde::to_vec_named(&plain).expect("encode");
        assert_eq!(rmp_serde::to_vec_named(&ws).expect("encode"), bytes);
        let back: Workloads = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back, ws);
    }
}
