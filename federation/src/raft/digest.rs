//! The state digest: equal on every node that applied the same log, and cheap to keep up to
//! date on a large state.
//!
//! The parts of the state that grow with the workloads or the running work are persistent
//! maps (see [`crate::state::workloads`]). The digest hashes each of their entries on its own
//! and adds the hashes up per part (a sum does not depend on the order it is taken in); the
//! members, few and shared, likewise. The usage ledger's ended runs and step series are
//! sequences (up to 200,000 runs and 20,000 steps a series): their sums are of neighbouring
//! pairs, which keep the order. The rest of the state, bounded by the fleet and its policy,
//! is encoded whole. The cache below keeps the last state it digested: the next digest walks
//! only what changed since then (`OrdMap::diff` skips the subtrees both copies share), so
//! `cluster status` on a busy node costs O(changes), not an encoding of the whole state
//! (which grows with the workloads; measured: docs/benchmarks/cluster-status.md). The
//! workloads' sum is not walked at all: their map keeps it as each change is applied (see
//! [`crate::state::digest_hash`]), since a scheduling cycle rewrites thousands of pending
//! reasons at once and the diff walk to find them was most of a digest at a million
//! workloads.

use std::hash::Hasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use tideway_api::clock::{Clock, RealClock};

use super::state_machine::StateMachineData;
use super::types::LogId;
use crate::state::FederationState;
use crate::state::digest_hash::{HashWriter, ReasonHashes, hash_of, hasher, same_but_reason};
use crate::state::usage::Steps;

pub use crate::state::digest_hash::Error;

/// Per part, the wrapping sum of its entries' hashes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
struct Sums {
    workloads: u64,
    order: u64,
    idempotency: u64,
    idempotency_expiry: u64,
    uids: u64,
    audit: u64,
    assignments: u64,
    members: u64,
    placements: u64,
    open_runs: u64,
    closed_runs: u64,
    capacity_steps: u64,
    guaranteed_steps: u64,
}

fn add(sum: &mut u64, h: u64) {
    *sum = sum.wrapping_add(h);
}

fn sub(sum: &mut u64, h: u64) {
    *sum = sum.wrapping_sub(h);
}

/// `sum` of `old`, moved to that of `new`: O(entries that differ).
fn map_moved<K, V>(
    sum: &mut u64,
    old: &imbl::OrdMap<K, V>,
    new: &imbl::OrdMap<K, V>,
) -> Result<(), Error>
where
    K: Serialize + Ord + Clone,
    V: Serialize + Clone + PartialEq,
{
    map_moved_with(sum, old, new, |k, v| hash_of(&(k, v)))
}

/// `map_moved`, with the hash of an entry given.
fn map_moved_with<K, V>(
    sum: &mut u64,
    old: &imbl::OrdMap<K, V>,
    new: &imbl::OrdMap<K, V>,
    mut hash: impl FnMut(&K, &V) -> Result<u64, Error>,
) -> Result<(), Error>
where
    K: Ord + Clone,
    V: Clone + PartialEq,
{
    use imbl::ordmap::DiffItem;
    for d in old.diff(new) {
        match d {
            DiffItem::Add(k, v) => add(sum, hash(k, v)?),
            DiffItem::Remove(k, v) => sub(sum, hash(k, v)?),
            DiffItem::Update { old, new } => {
                sub(sum, hash(old.0, old.1)?);
                add(sum, hash(new.0, new.1)?);
            }
        }
    }
    Ok(())
}

/// The workloads' sum, moved. A workload whose reason alone changed (what most of a
/// scheduling cycle's entry does) moves only the reason's part of its hash.
fn workloads_moved(
    sum: &mut u64,
    old: &crate::state::workloads::WorkloadMap,
    new: &crate::state::workloads::WorkloadMap,
    count: &mut WalkCount,
) -> Result<(), Error> {
    use imbl::ordmap::DiffItem;
    let mut reasons = ReasonHashes::default();
    for d in old.diff(new) {
        match d {
            DiffItem::Add(k, v) => {
                count.workloads += 1;
                add(sum, reasons.workload(k, v)?);
            }
            DiffItem::Remove(k, v) => {
                count.workloads += 1;
                sub(sum, reasons.workload(k, v)?);
            }
            DiffItem::Update { old, new } => {
                count.workloads += 1;
                if same_but_reason(old.1, new.1) {
                    count.reasons_only += 1;
                    sub(sum, reasons.part(old.0, old.1)?);
                    add(sum, reasons.part(new.0, new.1)?);
                } else {
                    sub(sum, reasons.workload(old.0, old.1)?);
                    add(sum, reasons.workload(new.0, new.1)?);
                }
            }
        }
    }
    Ok(())
}

fn set_moved<A: Serialize + Ord + Clone>(
    sum: &mut u64,
    old: &imbl::OrdSet<A>,
    new: &imbl::OrdSet<A>,
) -> Result<(), Error> {
    use imbl::ordset::DiffItem;
    for d in old.diff(new) {
        match d {
            DiffItem::Add(a) => add(sum, hash_of(a)?),
            DiffItem::Remove(a) => sub(sum, hash_of(a)?),
        }
    }
    Ok(())
}

fn assignments_moved(
    sum: &mut u64,
    old: &FederationState,
    new: &FederationState,
) -> Result<(), Error> {
    use imbl::ordmap::DiffItem;
    let empty = crate::state::assignments::ClusterAssignments::new();
    let clusters: std::collections::BTreeSet<&String> = old
        .assignments
        .iter()
        .chain(new.assignments.iter())
        .map(|(c, _)| c)
        .collect();
    for c in clusters {
        let (o, n) = (
            old.assignments.get(c).unwrap_or(&empty),
            new.assignments.get(c).unwrap_or(&empty),
        );
        for d in o.diff(n) {
            match d {
                DiffItem::Add(uid, r) => add(sum, hash_of(&(c, uid, r))?),
                DiffItem::Remove(uid, r) => sub(sum, hash_of(&(c, uid, r))?),
                DiffItem::Update { old, new } => {
                    sub(sum, hash_of(&(c, old.0, old.1))?);
                    add(sum, hash_of(&(c, new.0, new.1))?);
                }
            }
        }
    }
    Ok(())
}

/// The members of `a` that `b` does not hold as the same record (by pointer: members are
/// few and shared by `Arc`, so a change is a new allocation).
fn members_not_in<'a>(
    a: &'a crate::state::members::Members,
    b: &'a crate::state::members::Members,
) -> impl Iterator<
    Item = (
        &'a String,
        &'a std::sync::Arc<crate::state::members::MemberRecord>,
    ),
> {
    a.iter()
        .filter(|(name, rec)| b.get(*name).is_none_or(|r| !std::sync::Arc::ptr_eq(r, rec)))
}

/// The members' sum, moved from `old` to `new`.
fn members_moved(sum: &mut u64, old: &FederationState, new: &FederationState) -> Result<(), Error> {
    for gone in members_not_in(&old.members, &new.members) {
        sub(sum, hash_of(&gone)?);
    }
    for came in members_not_in(&new.members, &old.members) {
        add(sum, hash_of(&came)?);
    }
    Ok(())
}

/// An ordered sequence's sum: the hashes of each pair of neighbours, with `None` before the
/// first element and after the last (so the order is in the sum, not only the elements).
/// Sequences here change by dropping from the front and pushing at the back (and, for a
/// step series, by rewriting the last step), so most pairs are in both copies.
///
/// `prefix` is hashed with every pair: the key of the map the sequence is a value of.
///
/// This form, on slices, compares every element of the common run: it is the reference the
/// tests hold `vector_moved` (what the digest uses) to.
#[cfg(test)]
fn seq_moved<T, P>(sum: &mut u64, prefix: &P, old: &[&T], new: &[&T]) -> Result<(), Error>
where
    T: Serialize + PartialEq + ?Sized,
    P: Serialize + ?Sized,
{
    let n = old.len();
    // Where the new sequence's first element is in the old one (the elements dropped from
    // the front), and how far the two then agree. Any choice is correct (what is outside
    // the common run is removed and added explicitly); the first match is the cheap one.
    let k = new
        .first()
        .and_then(|f| old.iter().position(|o| o == f))
        .unwrap_or(n);
    let common = old[k..].iter().zip(new).take_while(|(a, b)| a == b).count();
    pairs_moved(
        sum,
        prefix,
        (n, |i: usize| old.get(i).copied()),
        (new.len(), |i: usize| new.get(i).copied()),
        k,
        common,
    )
}

/// Moves `sum` from the pairs of `old` to those of `new` (each a length and an element
/// getter), given that `old[k..k + common]` and `new[..common]` are equal: the pairs inside
/// that run are in both and are not hashed, so the cost is that of the pairs outside it.
/// A sequence's sum is over each pair of neighbours, with `None` before the first element
/// and after the last, so that the order is in the sum and not only the elements.
fn pairs_moved<'a, T, P>(
    sum: &mut u64,
    prefix: &P,
    old: (usize, impl Fn(usize) -> Option<&'a T>),
    new: (usize, impl Fn(usize) -> Option<&'a T>),
    k: usize,
    common: usize,
) -> Result<(), Error>
where
    T: Serialize + ?Sized + 'a,
    P: Serialize + ?Sized,
{
    // Extended sequences: `None`, the elements, `None`. The pair at `i` is (i, i + 1).
    let pair = |len: usize, get: &dyn Fn(usize) -> Option<&'a T>, i: usize| {
        let at = |j: usize| if j >= 1 && j <= len { get(j - 1) } else { None };
        hash_of(&(prefix, at(i), at(i + 1)))
    };
    // The pairs outside the common run starting at `offset`: the run's inner pairs
    // `offset + 1 ..= offset + common - 1` are in both copies.
    let outside = |len: usize, offset: usize| {
        let (head_end, tail_start) = if common >= 2 {
            (offset, offset + common)
        } else {
            (len, len + 1)
        };
        (0..=head_end).chain(tail_start..=len)
    };
    let ((n, old_at), (n_new, new_at)) = (old, new);
    for i in outside(n, k) {
        sub(sum, pair(n, &old_at, i)?);
    }
    for j in outside(n_new, 0) {
        add(sum, pair(n_new, &new_at, j)?);
    }
    Ok(())
}

/// A persistent sequence's sum, moved: nothing to do when the new copy shares the old one's
/// tree (the sequence did not change since). Otherwise the common run is found chunk by
/// chunk: a stretch where both copies point at the same memory (a leaf the two trees share)
/// is equal without comparing its elements, so a sequence of 200,000 ended runs that gained
/// a few at the back costs a few hundred pointer checks, not 200,000 comparisons.
fn vector_moved<T, P>(
    sum: &mut u64,
    prefix: &P,
    old: &imbl::Vector<T>,
    new: &imbl::Vector<T>,
) -> Result<(), Error>
where
    T: Serialize + PartialEq + Clone,
    P: Serialize + ?Sized,
{
    if old.ptr_eq(new) {
        return Ok(());
    }
    let (n, n_new) = (old.len(), new.len());
    // As in `seq_moved`: the first place new's first element stands in old. Elements dropped
    // from the front since the last digest are few, so the scan is short.
    let k = match new.front() {
        Some(first) => old.iter().position(|o| o == first).unwrap_or(n),
        None => n,
    };
    let mut common = 0;
    let (mut fo, mut fn_) = (old.focus(), new.focus());
    while k + common < n && common < n_new {
        let (ro, co) = fo.chunk_at(k + common);
        let (rn, cn) = fn_.chunk_at(common);
        let a = &co[k + common - ro.start..];
        let b = &cn[common - rn.start..];
        let len = a.len().min(b.len());
        if std::ptr::eq(a.as_ptr(), b.as_ptr()) {
            common += len;
            continue;
        }
        let same = a[..len]
            .iter()
            .zip(&b[..len])
            .take_while(|(x, y)| x == y)
            .count();
        common += same;
        if same < len {
            break;
        }
    }
    pairs_moved(
        sum,
        prefix,
        (n, |i: usize| old.get(i)),
        (n_new, |i: usize| new.get(i)),
        k,
        common,
    )
}

/// Step series by key, moved per key (a key only in one map is an empty series in the
/// other; the keys themselves are in the encoded rest of the state).
fn series_moved<K: Serialize + Ord>(
    sum: &mut u64,
    prefix: &str,
    old: std::collections::BTreeMap<K, &Steps>,
    new: std::collections::BTreeMap<K, &Steps>,
) -> Result<(), Error> {
    let empty = Steps::new();
    let keys: std::collections::BTreeSet<&K> = old.keys().chain(new.keys()).collect();
    for key in keys {
        let (o, n) = (
            old.get(key).copied().unwrap_or(&empty),
            new.get(key).copied().unwrap_or(&empty),
        );
        vector_moved(sum, &(prefix, key), o, n)?;
    }
    Ok(())
}

/// The fleet's capacity series, by flavor.
fn capacity_series(s: &FederationState) -> std::collections::BTreeMap<&String, &Steps> {
    s.usage.capacity.iter().collect()
}

/// The guarantee series, by queue and flavor.
fn guaranteed_series(
    s: &FederationState,
) -> std::collections::BTreeMap<(&String, &String), &Steps> {
    s.usage
        .guaranteed
        .iter()
        .flat_map(|(q, flavors)| flavors.iter().map(move |(f, steps)| ((q, f), steps)))
        .collect()
}

/// Where a digest takes the workloads' sum from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkloadsPart {
    /// The sum the map keeps as it changes, when it has one: a cycle's entry that rewrote
    /// thousands of pending reasons then costs the digest nothing, where walking the map's
    /// diff to find them was most of a digest at a million workloads (measured:
    /// docs/benchmarks/cluster-status.md).
    Kept,
    /// The map's diff against the last digest's copy, walked.
    Walked,
}

impl Sums {
    /// The sums of `s`, from scratch: moved from a state with none of the large parts, so
    /// that the from-scratch digest and the incremental one share every line that hashes.
    ///
    /// With [`WorkloadsPart::Walked`] every part is walked, the workloads too: the reference
    /// the sum the workloads' map keeps is held to.
    fn of(
        s: &FederationState,
        count: &mut WalkCount,
        workloads: WorkloadsPart,
    ) -> Result<Self, Error> {
        Self::default().moved(&FederationState::default(), s, count, workloads)
    }

    /// The sums of `new`, from those of `old` (`self`).
    fn moved(
        mut self,
        old: &FederationState,
        new: &FederationState,
        count: &mut WalkCount,
        workloads: WorkloadsPart,
    ) -> Result<Self, Error> {
        let mut lap = RealClock.instant();
        let mut part = |name: &'static str, count: &mut WalkCount| {
            let now = RealClock.instant();
            count.parts.push((name, now.duration_since(lap)));
            lap = now;
        };
        let kept = match workloads {
            WorkloadsPart::Kept => new.workloads.digest_sum(),
            WorkloadsPart::Walked => None,
        };
        match kept {
            Some(sum) => self.workloads = sum,
            None => workloads_moved(&mut self.workloads, &old.workloads, &new.workloads, count)?,
        }
        part("workloads", count);
        map_moved(&mut self.order, &old.order, &new.order)?;
        map_moved(&mut self.idempotency, &old.idempotency, &new.idempotency)?;
        set_moved(
            &mut self.idempotency_expiry,
            &old.idempotency_expiry,
            &new.idempotency_expiry,
        )?;
        map_moved(&mut self.uids, &old.uids, &new.uids)?;
        part("names", count);
        assignments_moved(&mut self.assignments, old, new)?;
        part("assignments", count);
        members_moved(&mut self.members, old, new)?;
        part("members", count);
        map_moved(
            &mut self.placements,
            &old.scheduling.placements,
            &new.scheduling.placements,
        )?;
        map_moved(&mut self.open_runs, &old.usage.open, &new.usage.open)?;
        vector_moved(
            &mut self.closed_runs,
            "closed",
            &old.usage.closed,
            &new.usage.closed,
        )?;
        series_moved(
            &mut self.capacity_steps,
            "capacity",
            capacity_series(old),
            capacity_series(new),
        )?;
        series_moved(
            &mut self.guaranteed_steps,
            "guaranteed",
            guaranteed_series(old),
            guaranteed_series(new),
        )?;
        part("usage", count);
        // The trail only grows at the back and is cut at the front, and a record never
        // changes: the records before `new`'s first leave, those after `old`'s last arrive.
        let (old_ev, new_ev) = (&old.audit.events, &new.audit.events);
        let first_new = new_ev.front().map_or(new.audit.next_seq, |e| e.seq);
        let next_old = old.audit.next_seq;
        for e in old_ev.iter().take_while(|e| e.seq < first_new) {
            sub(&mut self.audit, hash_of(e)?);
        }
        // Records are numbered in order, so the first new one is found by binary search:
        // the trail holds up to 200,000 records, and walking past the old ones on every
        // digest made each `cluster status` cost a pass over the whole trail.
        let arrived = new_ev
            .binary_search_by(|e| e.seq.cmp(&next_old))
            .unwrap_or_else(|at| at);
        for e in new_ev.focus().narrow(arrived..) {
            add(&mut self.audit, hash_of(e)?);
        }
        part("audit", count);
        Ok(self)
    }
}

/// The digest of `s`, given the sums of its large parts.
fn digest_with(s: &FederationState, sums: &Sums) -> Result<String, Error> {
    // The rest of the state, encoded whole: a copy (O(1) for the large parts) with them
    // left out, so that a part added to the state later is in the digest without a word here.
    let mut rest = s.clone();
    rest.workloads = Default::default();
    rest.order = Default::default();
    rest.idempotency = Default::default();
    rest.idempotency_expiry = Default::default();
    rest.uids = Default::default();
    rest.audit.events = Default::default();
    rest.assignments = Default::default();
    rest.members = Default::default();
    rest.scheduling.placements = Default::default();
    rest.usage.open = Default::default();
    rest.usage.closed = Default::default();
    // The series' keys stay (an empty series is not a missing one); their steps are summed.
    for steps in rest.usage.capacity.values_mut() {
        steps.clear();
    }
    for steps in rest
        .usage
        .guaranteed
        .values_mut()
        .flat_map(|m| m.values_mut())
    {
        steps.clear();
    }
    let lens = [
        s.assignments.iter().map(|(_, r)| r.len()).sum(),
        s.members.len(),
        s.workloads.len(),
        s.order.len(),
        s.idempotency.len(),
        s.idempotency_expiry.len(),
        s.uids.len(),
        s.audit.events.len(),
        s.scheduling.placements.len(),
        s.usage.open.len(),
        s.usage.closed.len(),
    ];
    let mut w = HashWriter(hasher());
    rmp_serde::encode::write_named(&mut w, &(&rest, sums, lens))?;
    Ok(format!("{:016x}", w.0.finish()))
}

/// A digest of the replicated state, computed from scratch (what the cache's incremental
/// digest always equals).
///
/// A state that cannot be encoded is an error, never the digest of nothing: two nodes that
/// both failed would otherwise report equal digests for different states.
pub fn state_digest(state: &FederationState) -> Result<String, Error> {
    digest_with(
        state,
        &Sums::of(state, &mut WalkCount::default(), WorkloadsPart::Walked)?,
    )
}

/// What a walk covered, for the log line of a slow one: how many workloads it hashed (and of
/// those, how many changed only their pending reason), and how long each part took.
#[derive(Debug, Clone, Default)]
pub struct WalkCount {
    pub workloads: u64,
    pub reasons_only: u64,
    pub parts: Vec<(&'static str, Duration)>,
}

/// This thread's time on a CPU and waiting for one, in nanoseconds (Linux; None elsewhere):
/// tells a slow walk that worked from one that was kept off the CPU on a busy machine.
fn thread_schedstat() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut it = s.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

/// A walk at least this long is logged with what it covered.
const SLOW_WALK: Duration = Duration::from_millis(20);

/// How long a digest's parts took (a digest answered from the cache has none).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Moving the sums over the entries changed since the last digest.
    pub walk: std::time::Duration,
    /// Encoding the rest of the state.
    pub rest: std::time::Duration,
    /// Handing the previous digest's copy (the old versions of what changed) to the thread
    /// that frees it; it was freed here until 2026-12-05.
    pub free: std::time::Duration,
}

fn poisoned() -> Error {
    Error::Syntax("the digest cache's lock is poisoned".to_string())
}

/// The state digest of the latest applied index, and the state it was computed from.
#[derive(Debug, Default)]
pub struct DigestCache {
    last: std::sync::Mutex<Option<Last>>,
    /// When a reader last asked for a digest (see [`super::digest_warmer`]).
    asked: std::sync::Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct Last {
    at: Option<LogId>,
    digest: String,
    /// The state (a copy) the digest is of, for the next digest to start from. It shares
    /// what did not change since with the live state; what did change is kept until the
    /// next digest, so memory holds at most the changes between two `cluster status` calls.
    state: Arc<FederationState>,
    sums: Sums,
}

/// Drops `last` on the digest's freeing thread (started on first use), or here if that
/// thread cannot be had.
fn free_later(last: Last) {
    static FREE: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Last>>> =
        std::sync::OnceLock::new();
    let tx = FREE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Last>();
        std::thread::Builder::new()
            .name("digest-free".into())
            .spawn(move || {
                for old in rx {
                    drop(old);
                }
            })
            .ok()
            .map(|_| tx)
    });
    match tx {
        Some(tx) => {
            if let Err(std::sync::mpsc::SendError(old)) = tx.send(last) {
                drop(old);
            }
        }
        None => drop(last),
    }
}

/// Entries applied since the last digest below which the walk is done at once, on the
/// caller's thread: a few dozen entries cost less to walk than handing the walk to another
/// thread costs on a busy 2-core node (measured with every walk handed off:
/// docs/benchmarks/cluster-status.md).
pub const INLINE_ENTRIES: u64 = 16;

/// What a reader under the state lock takes away to answer with the digest.
pub enum DigestSource {
    /// The cache had the digest of this index.
    Cached(String),
    /// A copy of the state at this index, to digest after the lock is released, and how
    /// many entries were applied since the last digest (`u64::MAX` when there is none).
    Copy(Option<LogId>, Arc<FederationState>, u64),
}

impl DigestSource {
    /// Whether resolving it is cheap enough to do on an async worker.
    pub fn is_small(&self) -> bool {
        match self {
            DigestSource::Cached(_) => true,
            DigestSource::Copy(_, _, behind) => *behind <= INLINE_ENTRIES,
        }
    }
}

impl DigestCache {
    /// Under the state lock: the cached digest of `d`'s index, or a copy of `d`'s state.
    /// A reader's ask: it keeps the digest warm for a while ([`Self::asked_within`]).
    pub fn source(&self, d: &StateMachineData) -> DigestSource {
        if let Ok(mut asked) = self.asked.lock() {
            *asked = Some(RealClock.instant());
        }
        self.source_unasked(d)
    }

    /// Whether a reader asked for a digest within `span`.
    pub fn asked_within(&self, span: Duration) -> bool {
        self.asked
            .lock()
            .ok()
            .and_then(|a| *a)
            .is_some_and(|at| at.elapsed() <= span)
    }

    /// `source`, for the warmer: not a reader's ask.
    pub fn source_unasked(&self, d: &StateMachineData) -> DigestSource {
        let index = |at: Option<LogId>| at.map_or(0, |l| l.index());
        let mut behind = u64::MAX;
        // Not waited for: a walk in progress holds the lock, and this runs under the state's.
        if let Ok(g) = self.last.try_lock()
            && let Some(last) = g.as_ref()
        {
            if last.at == d.last_applied {
                return DigestSource::Cached(last.digest.clone());
            }
            behind = index(d.last_applied).saturating_sub(index(last.at));
        }
        DigestSource::Copy(d.last_applied, d.copy(), behind)
    }

    /// `resolve`, unless a walk already holds the cache: then the source comes back, for
    /// the caller to wait on another thread rather than on its own.
    #[allow(clippy::type_complexity)]
    pub fn try_resolve(
        &self,
        source: DigestSource,
    ) -> Result<Result<(String, Option<Timing>), Error>, DigestSource> {
        match self.last.try_lock() {
            Ok(g) => Ok(self.resolve_locked(g, source)),
            Err(std::sync::TryLockError::WouldBlock) => Err(source),
            Err(std::sync::TryLockError::Poisoned(_)) => Ok(Err(poisoned())),
        }
    }

    /// After the lock: the digest `source` stands for, from the changes since the last one.
    pub fn resolve(&self, source: DigestSource) -> Result<String, Error> {
        self.resolve_timed(source).map(|(digest, _)| digest)
    }

    /// `resolve`, with how long its parts took.
    pub fn resolve_timed(&self, source: DigestSource) -> Result<(String, Option<Timing>), Error> {
        if let DigestSource::Cached(digest) = source {
            return Ok((digest, None));
        }
        // Held while the changes are walked: concurrent callers wait for one walk, instead of
        // each walking the same changes.
        let g = self.last.lock().map_err(|_| poisoned())?;
        self.resolve_locked(g, source)
    }

    fn resolve_locked(
        &self,
        mut g: std::sync::MutexGuard<'_, Option<Last>>,
        source: DigestSource,
    ) -> Result<(String, Option<Timing>), Error> {
        let (at, state) = match source {
            DigestSource::Cached(digest) => return Ok((digest, None)),
            DigestSource::Copy(at, state, _) => (at, state),
        };
        if let Some(last) = g.as_ref()
            && last.at == at
        {
            return Ok((last.digest.clone(), None));
        }
        let clock = RealClock;
        let started = clock.instant();
        let mut count = WalkCount::default();
        let sched_before = thread_schedstat();
        let sums = match g.as_ref() {
            Some(last) => last
                .sums
                .moved(&last.state, &state, &mut count, WorkloadsPart::Kept)?,
            None => Sums::of(&state, &mut count, WorkloadsPart::Kept)?,
        };
        let walked = clock.instant();
        let walk = walked.duration_since(started);
        if walk >= SLOW_WALK && g.is_some() {
            let (on_cpu_ms, waiting_ms) = match (sched_before, thread_schedstat()) {
                (Some(a), Some(b)) => (
                    b.0.saturating_sub(a.0) as f64 / 1e6,
                    b.1.saturating_sub(a.1) as f64 / 1e6,
                ),
                _ => (f64::NAN, f64::NAN),
            };
            let behind = match (g.as_ref().and_then(|l| l.at), at) {
                (Some(from), Some(to)) => to.index().saturating_sub(from.index()),
                _ => 0,
            };
            tracing::info!(
                walk_ms = walk.as_secs_f64() * 1e3,
                on_cpu_ms,
                waiting_for_cpu_ms = waiting_ms,
                entries = behind,
                workloads = count.workloads,
                reasons_only = count.reasons_only,
                parts = ?count.parts,
                "a slow state digest walk"
            );
        }
        let digest = digest_with(&state, &sums)?;
        let encoded = clock.instant();
        // The old copy holds the versions of what changed since. Freeing them was the tail
        // of the scale bench's status calls at a million workloads (measured:
        // docs/benchmarks/cluster-status.md); nobody waits for that memory, so it is freed
        // on a thread of its own, after the answer.
        if let Some(old) = g.replace(Last {
            at,
            digest: digest.clone(),
            state,
            sums,
        }) {
            free_later(old);
        }
        let timing = Timing {
            walk,
            rest: encoded.duration_since(walked),
            free: encoded.elapsed(),
        };
        Ok((digest, Some(timing)))
    }

    /// The digest of `d.state`, from the cache when `d` is at the index it was computed for.
    pub fn get(&self, d: &StateMachineData) -> Result<String, Error> {
        self.resolve(self.source(d))
    }
}

#[cfg(test)]
#[path = "digest_cost_tests.rs"]
mod digest_cost_tests;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use tideway_api::{PendingReason, Workload, WorkloadStatus};

    use super::*;
    use crate::raft::types::TypeConfig;
    use crate::state::assignments_tests::{Op, command, op};

    #[test]
    fn the_digest_is_cached_per_applied_index_and_follows_the_state() {
        let log_id = |i| openraft::testing::log_id::<TypeConfig>(1, 1, i);
        let cache = DigestCache::default();
        let mut d = StateMachineData {
            last_applied: Some(log_id(5)),
            ..Default::default()
        };
        let empty = cache.get(&d).expect("digest");
        assert_eq!(empty, state_digest(&d.state).expect("digest"));
        // A change that did not move the applied index is not seen: the cache answered.
        d.state_mut().next_seq += 1;
        assert_eq!(cache.get(&d).expect("digest"), empty);
        // The next index is encoded afresh, and equals a direct digest of the same state.
        d.last_applied = Some(log_id(6));
        let changed = cache.get(&d).expect("digest");
        assert_ne!(changed, empty);
        assert_eq!(changed, state_digest(&d.state).expect("digest"));
        // Equal states, equal digests, whatever their history.
        let other = FederationState {
            next_seq: d.state.next_seq,
            ..Default::default()
        };
        assert_eq!(state_digest(&other).expect("digest"), changed);
    }

    #[test]
    fn a_change_of_pending_reason_alone_moves_the_digest_as_from_scratch() {
        use tideway_api::{PodSet, WorkloadClass, WorkloadPhase, WorkloadSpec};
        let log_id = |i| openraft::testing::log_id::<TypeConfig>(1, 1, i);
        let quota = |used| {
            PendingReason::QuotaExhausted {
                queue: "q".into(),
                flavor: "H100".into(),
                used,
                limit: 8,
            }
            .shared()
        };
        let pending = |name: &str, reason: Arc<PendingReason>| {
            let spec = WorkloadSpec::new(
                "q",
                WorkloadClass::Training,
                vec![PodSet::new("p", 1, 1, "H100")],
            );
            let mut w = Workload::new(name, spec);
            w.status = Some(WorkloadStatus {
                phase: WorkloadPhase::Pending,
                pending_reason: Some(reason),
                ..Default::default()
            });
            w
        };
        let cache = DigestCache::default();
        let mut d = StateMachineData::default();
        d.state_mut().workloads.insert("a", pending("a", quota(8)));
        d.state_mut().workloads.insert("b", pending("b", quota(7)));
        d.last_applied = Some(log_id(1));
        let first = cache.get(&d).expect("digest");
        let mut seen = vec![first.clone()];
        // The reasons change places, then one changes alone, then one goes: each digest is
        // the one from scratch, and none equals an earlier one.
        let steps: [(&str, Option<Arc<PendingReason>>); 4] = [
            ("a", Some(quota(7))),
            ("b", Some(quota(8))),
            ("a", Some(PendingReason::Queued.shared())),
            ("b", None),
        ];
        for (i, (name, reason)) in steps.into_iter().enumerate() {
            if let Some(mut w) = d.state_mut().workloads.get_mut(name) {
                w.status.as_mut().expect("status").pending_reason = reason;
            }
            d.last_applied = Some(log_id(2 + i as u64));
            let got = cache.get(&d).expect("digest");
            assert_eq!(got, state_digest(&d.state).expect("digest"), "step {i}");
            assert!(!seen.contains(&got), "step {i}: {got} seen before");
            seen.push(got);
        }
        // Back to the first state by another path: the first digest again.
        for (name, used) in [("a", 8), ("b", 7)] {
            let mut w = d.state_mut().workloads.get_mut(name).expect("workload");
            w.status.as_mut().expect("status").pending_reason = Some(quota(used));
        }
        d.last_applied = Some(log_id(9));
        assert_eq!(cache.get(&d).expect("digest"), first);
    }

    #[test]
    fn a_walk_over_few_entries_is_done_at_once_unless_another_holds_the_cache() {
        let log_id = |i| openraft::testing::log_id::<TypeConfig>(1, 1, i);
        let cache = DigestCache::default();
        let mut d = StateMachineData {
            last_applied: Some(log_id(5)),
            ..Default::default()
        };
        // No digest yet: the whole state is walked, which is not small.
        assert!(!cache.source(&d).is_small());
        cache.get(&d).expect("digest");
        d.state_mut().next_seq += 1;
        d.last_applied = Some(log_id(5 + INLINE_ENTRIES));
        let source = cache.source(&d);
        assert!(source.is_small());
        let Ok(done) = cache.try_resolve(source) else {
            panic!("the cache was free");
        };
        let (got, timing) = done.expect("digest");
        assert!(timing.is_some(), "a walk is timed");
        assert_eq!(got, state_digest(&d.state).expect("digest"));
        // Far behind: handed off.
        d.state_mut().next_seq += 1;
        d.last_applied = Some(log_id(6 + 2 * INLINE_ENTRIES));
        assert!(!cache.source(&d).is_small());
        // A walk in progress (the lock held): the source comes back instead of waiting.
        d.last_applied = Some(log_id(7 + 2 * INLINE_ENTRIES));
        let held = cache.last.lock().expect("lock");
        let source = cache.source(&d);
        assert!(matches!(source, DigestSource::Copy(_, _, u64::MAX)));
        let back = cache.try_resolve(source);
        drop(held);
        let Err(source) = back else {
            panic!("a source is handed back while the cache is held");
        };
        assert_eq!(
            cache.resolve(source).expect("digest"),
            state_digest(&d.state).expect("digest")
        );
    }

    /// A sequence's sum from scratch: moved from the empty sequence, as a state's sums are
    /// moved from the empty state's.
    fn seq_sum<T: Serialize + PartialEq>(v: &[T]) -> u64 {
        let mut sum = 0;
        let refs: Vec<&T> = v.iter().collect();
        seq_moved(&mut sum, "t", &[], &refs).expect("hash");
        sum
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A sequence's sum moved from an older copy equals its sum from scratch, however it
        /// changed (dropped at the front, pushed at the back, last element rewritten, or
        /// replaced outright), with repeated elements to mislead the alignment; and it
        /// tells orders of distinct elements apart.
        #[test]
        fn a_sequence_sum_moves_to_the_sum_from_scratch(
            old in proptest::collection::vec(0u8..3, 0..12),
            drop in 0usize..14,
            push in proptest::collection::vec(0u8..3, 0..5),
            rewrite in proptest::option::of(0u8..3),
            replace in proptest::option::of(proptest::collection::vec(0u8..3, 0..8)),
        ) {
            let mut new: Vec<u8> = old.iter().skip(drop).copied().chain(push).collect();
            if let (Some(v), Some(last)) = (rewrite, new.last_mut()) {
                *last = v;
            }
            if let Some(r) = replace {
                new = r;
            }
            let mut sum = seq_sum(&old);
            let (o, n): (Vec<&u8>, Vec<&u8>) = (old.iter().collect(), new.iter().collect());
            seq_moved(&mut sum, "t", &o, &n).expect("hash");
            prop_assert_eq!(sum, seq_sum(&new));
            // Orders of distinct elements (a step series, stamped with rising times) differ.
            let mut distinct = new.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() == new.len() && new.len() >= 2 {
                let mut reversed = new.clone();
                reversed.reverse();
                prop_assert_ne!(seq_sum(&reversed), seq_sum(&new));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The same for persistent vectors long enough to be trees of shared chunks (imbl
        /// leaves hold 64 elements): the chunk-pointer shortcut of `vector_moved` gives the
        /// sum from scratch after the edits a trail sees (drops at the front, pushes at the
        /// back, the last element rewritten, or the whole replaced), with repeated elements.
        #[test]
        fn a_shared_vector_sum_moves_to_the_sum_from_scratch(
            old in proptest::collection::vec(0u16..3, 0..400),
            distinct in any::<bool>(),
            no_push in any::<bool>(),
            drop in 0usize..200,
            push in proptest::collection::vec(0u16..3, 0..150),
            rewrite in proptest::option::of(0u16..3),
            replace in proptest::option::of(proptest::collection::vec(0u16..3, 0..300)),
        ) {
            // Distinct elements (a trail's records all differ) align at the true drop, where
            // the shared chunks line up; repeated ones make the alignment guess wrong.
            let spread = |i: usize, v: u16| if distinct { (i as u16) * 4 + v } else { v };
            let old: Vec<u16> = old.into_iter().enumerate().map(|(i, v)| spread(i, v)).collect();
            let push: Vec<u16> = push.into_iter().enumerate().map(|(i, v)| spread(i + 400, v)).collect();
            // Half the cases push nothing, so that a rewritten last element is an old one.
            let push = if no_push { Vec::new() } else { push };
            let old_v: imbl::Vector<u16> = old.iter().copied().collect();
            let mut new_v = old_v.clone();
            for _ in 0..drop.min(new_v.len()) {
                new_v.pop_front();
            }
            for x in push {
                new_v.push_back(x);
            }
            if let Some(v) = rewrite
                && let Some(last) = new_v.back_mut()
            {
                *last = v;
            }
            if let Some(r) = replace {
                new_v = r.into_iter().collect();
            }
            let mut sum = seq_sum(&old);
            vector_moved(&mut sum, "t", &old_v, &new_v).expect("hash");
            let new: Vec<u16> = new_v.iter().copied().collect();
            prop_assert_eq!(sum, seq_sum(&new));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The cache's digest, walked from the changes since its last one (with the sum the
        /// workloads' map keeps, or without when a decoded map has none), equals the digest
        /// computed from scratch, whatever happened in between (submissions, assignments,
        /// reports, cancels, a cycle's pending reasons, compaction, snapshot installs); and it
        /// moves when the state does.
        #[test]
        fn the_incremental_digest_is_the_digest_from_scratch(
            ops in proptest::collection::vec((op(), any::<bool>()), 1..60)
        ) {
            let log_id = |i| openraft::testing::log_id::<TypeConfig>(1, 1, i);
            let cache = DigestCache::default();
            let mut d = StateMachineData::default();
            let mut index = 0u64;
            for c in 0..2u8 {
                index += 1;
                if let Some(cmd) = command(&d.state, &Op::Register(c), index) {
                    d.state_mut().apply(index, cmd);
                }
            }
            let mut last = None;
            for (op, look) in &ops {
                index += 1;
                match command(&d.state, op, index) {
                    Some(cmd) => {
                        d.state_mut().apply(index, cmd);
                    }
                    None => {
                        let bytes = rmp_serde::to_vec_named(&d.state).expect("encode");
                        d.state = Arc::new(rmp_serde::from_slice(&bytes).expect("decode"));
                        // As a snapshot restores it, or (every other index) left without
                        // the workloads' sum: the digest then walks the map.
                        if index.is_multiple_of(2) {
                            d.state_mut().workloads.restore_sum(None);
                        }
                    }
                }
                d.last_applied = Some(log_id(index));
                if !*look {
                    continue;
                }
                let got = cache.get(&d).expect("digest");
                prop_assert_eq!(&got, &state_digest(&d.state).expect("digest"), "after {:?}", op);
                if let Some((before, bytes)) = last.replace((got.clone(), rmp_serde::to_vec_named(&d.state).expect("encode"))) {
                    // Equal digests only for equal states.
                    let same = bytes == rmp_serde::to_vec_named(&d.state).expect("encode");
                    prop_assert_eq!(before == got, same);
                }
            }
        }
    }
}
