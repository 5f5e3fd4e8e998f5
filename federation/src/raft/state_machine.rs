//! The in-memory federation state machine, with durable snapshots.
//!
//! The state lives in memory behind a lock that is never held across an await. Durability comes
//! from the Raft log plus the latest snapshot file: on restart the snapshot is loaded and
//! openraft re-applies the committed log after it.

use std::io;
use std::sync::{Arc, RwLock};

use futures::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use super::snapshot_file::{Body, SnapshotDir};
use super::types::{LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig};
use crate::state::FederationState;
use crate::state::command::Response;

/// What the state machine holds, kept under one lock so a snapshot is consistent.
#[derive(Debug, Default)]
pub struct StateMachineData {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    /// Shared, so that a reader's copy under the lock is one reference count (see
    /// [`StateMachineData::copy`]); apply writes through [`StateMachineData::state_mut`], which
    /// copies the state (O(1) in what grows with the workloads) only when a reader still
    /// holds the version it would change. A reader's copy used to be that copy itself, made
    /// under the reader's lock: a tenth of a millisecond warm, and up to a millisecond when the
    /// memory it touched was cold, all of it holding off apply.
    pub state: Arc<FederationState>,
}

impl StateMachineData {
    /// A copy of the state for a reader, O(1): take it under the lock, use it after.
    pub fn copy(&self) -> Arc<FederationState> {
        self.state.clone()
    }

    /// The state for apply to change, copied first if a reader holds the current version.
    /// The copy is the state's [`FederationState::successor`], not a plain clone: it keeps
    /// the workloads' journal, so the cycle's cursor into it stays good.
    pub fn state_mut(&mut self) -> &mut FederationState {
        if Arc::get_mut(&mut self.state).is_none() {
            self.state = Arc::new(self.state.successor());
        }
        // Unshared now: no copy is made here.
        Arc::make_mut(&mut self.state)
    }
}

/// The bytes of a snapshot's state part (everything but the meta), in a versioned envelope:
/// a node given a snapshot in a format it does not know refuses it with "unknown variant
/// `vN`" instead of reading garbage. A change of the state's shape is a new variant.
#[derive(serde::Deserialize)]
enum SnapshotFormat {
    #[serde(rename = "v1")]
    V1(SnapshotBody),
}

/// [`SnapshotFormat`] for writing, by reference (the same encoding).
#[derive(serde::Serialize)]
enum SnapshotFormatRef<'a> {
    #[serde(rename = "v1")]
    V1(SnapshotBodyRef<'a>),
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotBody {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    state: FederationState,
    /// The workloads' part of the state digest, as the map kept it
    /// ([`crate::state::workloads::Workloads::digest_sum`]): computing it again from a
    /// million workloads would add seconds to a restart. Absent from snapshots written
    /// before it was kept (they then compute it once), and ignored by nodes that predate it.
    #[serde(default)]
    workloads_sum: Option<u64>,
}

#[derive(Clone)]
pub struct StateMachineStore {
    data: Arc<RwLock<StateMachineData>>,
    dir: SnapshotDir,
    /// Size of the latest snapshot's state part, built, installed or loaded (see
    /// [`super::snapshot_policy`]).
    snapshot_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// Where apply records how long it held the write lock per entry (the node's metrics).
    apply_lock_held: Option<prometheus_client::metrics::histogram::Histogram>,
    /// And how long it waited for the lock first (what readers held it off by).
    apply_lock_wait: Option<prometheus_client::metrics::histogram::Histogram>,
    /// A reader's job apply runs after its next entry (the scheduling cycle's copy).
    copy_slot: Arc<super::copy_slot::CopySlot>,
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl StateMachineStore {
    /// Opens the state machine, loading the latest snapshot from `dir` if there is one.
    pub fn open(dir: &std::path::Path) -> io::Result<Self> {
        let dir = SnapshotDir::open(dir)?;
        let store = Self {
            data: Arc::default(),
            dir,
            snapshot_bytes: Arc::default(),
            apply_lock_held: None,
            apply_lock_wait: None,
            copy_slot: Arc::default(),
        };
        let started = tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
        if let Some(snap) = store.dir.load()? {
            store.restore(snap.data())?;
            store.note_size(snap.data().len() as u64);
            // How long a restart spends before replaying the log: the operator's first
            // question when a node is slow to come back.
            let d = store.data.read().map_err(io_err)?;
            tracing::info!(
                index = d.last_applied.map_or(0, |l| l.index()),
                bytes = snap.data().len(),
                workloads = d.state.workloads.len(),
                seconds = started.elapsed().as_secs_f64(),
                "state loaded from the latest snapshot"
            );
        }
        Ok(store)
    }

    /// The size of the latest snapshot, kept up to date as snapshots are built and installed.
    pub fn snapshot_bytes(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.snapshot_bytes.clone()
    }

    fn note_size(&self, bytes: u64) {
        self.snapshot_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records each apply's hold of the write lock in `h` from now on.
    pub fn record_apply_lock_in(&mut self, h: prometheus_client::metrics::histogram::Histogram) {
        self.apply_lock_held = Some(h);
    }

    /// Records each apply's wait for the write lock in `h` from now on.
    pub fn record_apply_wait_in(&mut self, h: prometheus_client::metrics::histogram::Histogram) {
        self.apply_lock_wait = Some(h);
    }

    /// Where a reader leaves work for apply to do after its next entry (see
    /// [`super::copy_slot`]).
    pub fn copy_slot(&self) -> Arc<super::copy_slot::CopySlot> {
        self.copy_slot.clone()
    }

    /// A shared handle for readers (the API layer).
    pub fn data(&self) -> Arc<RwLock<StateMachineData>> {
        self.data.clone()
    }

    fn restore(&self, bytes: &[u8]) -> io::Result<()> {
        let SnapshotFormat::V1(mut body) = decode_snapshot(bytes)?;
        // Before the lock: the state is not yet anyone else's.
        body.state.share_strings();
        body.state.workloads.restore_sum(body.workloads_sum);
        let mut d = self.data.write().map_err(io_err)?;
        d.last_applied = body.last_applied;
        d.membership = body.membership;
        d.state = Arc::new(body.state);
        Ok(())
    }
}

fn decode_snapshot(bytes: &[u8]) -> io::Result<SnapshotFormat> {
    // The workloads map on a thread of its own (see `snapshot_decode`).
    super::snapshot_decode::decode_split(bytes, |f: &mut SnapshotFormat, w| {
        let SnapshotFormat::V1(body) = f;
        body.state.workloads = w;
    })
    .map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot data in an unknown or corrupt format: {e}"),
        )
    })
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;

    /// Copies the state under the read lock (O(1) for what grows with the workloads, see
    /// [`crate::state::workloads`]) and encodes the copy straight into the snapshot file on a
    /// blocking thread: apply goes on meanwhile, and no buffer the size of the state is ever
    /// held (see [`super::snapshot_file`]). Encoding under the lock used to hold apply off for
    /// the whole encoding (measured: docs/benchmarks/state-lock.md), and with it a runtime
    /// worker.
    ///
    /// openraft takes only the meta of what this returns (`sm::worker`, 0.10.0-alpha.37): the
    /// body stays in the file, opened, until a follower needs it.
    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let (last_applied, membership, state) = {
            let d = self.data.read().map_err(io_err)?;
            (d.last_applied, d.membership.clone(), d.copy())
        };
        let dir = self.dir.clone();
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership.clone(),
        };
        let started = tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
        let workloads = state.workloads.len();
        let written = {
            let meta = meta.clone();
            crate::parallel_encode::low_priority_thread("snapshot-writer", move || {
                let body = SnapshotFormatRef::V1(SnapshotBodyRef {
                    last_applied: &last_applied,
                    membership: &membership,
                    state: &state,
                    workloads_sum: state.workloads.digest_sum(),
                });
                let written =
                    dir.save_with(&meta, |w| crate::parallel_encode::write_named(w, &body));
                // The copy's old nodes are freed here, all at once: give their pages back.
                drop(state);
                let before = crate::memory::rss_kib();
                let took = crate::memory::release_free_pages();
                tracing::debug!(
                    rss_before_kib = before,
                    rss_after_kib = crate::memory::rss_kib(),
                    seconds = took,
                    "free heap pages returned after a snapshot"
                );
                written
            })
            .await??
        };
        self.note_size(written.len());
        // Each node builds its own snapshots on its own schedule: this line is how an operator
        // (or `bench scale`) sees what each one cost, and whether two overlapped.
        tracing::info!(
            index = last_applied.map_or(0, |l| l.index()),
            bytes = written.len(),
            workloads,
            seconds = started.elapsed().as_secs_f64(),
            "snapshot written"
        );
        Ok(Snapshot {
            meta,
            snapshot: Body::File(written),
        })
    }
}

#[derive(serde::Serialize)]
struct SnapshotBodyRef<'a> {
    last_applied: &'a Option<LogId>,
    membership: &'a StoredMembership,
    state: &'a FederationState,
    workloads_sum: Option<u64>,
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let d = self.data.read().map_err(io_err)?;
        Ok((d.last_applied, d.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            // The commands are shared with the log's tail, so taking them copies them: done
            // before the lock, so that readers do not wait for the copy.
            let (commands, membership) = match entry.payload {
                EntryPayload::Blank => (Vec::new(), None),
                EntryPayload::Normal(req) => (req.into_commands(), None),
                EntryPayload::Membership(m) => (Vec::new(), Some(m)),
            };
            let response = {
                let asked = tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
                let mut d = self.data.write().map_err(io_err)?;
                let held = tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
                let waited = held.saturating_duration_since(asked);
                d.last_applied = Some(entry.log_id);
                let index = entry.log_id.index();
                let results = commands
                    .into_iter()
                    .map(|c| d.state_mut().apply(index, c))
                    .collect();
                if let Some(m) = membership {
                    d.membership = StoredMembership::new(Some(entry.log_id), m);
                }
                let response = Response { results };
                self.copy_slot.serve(&d);
                drop(d);
                if let Some(h) = &self.apply_lock_held {
                    h.observe(held.elapsed().as_secs_f64());
                }
                if let Some(h) = &self.apply_lock_wait {
                    h.observe(waited.as_secs_f64());
                }
                response
            };
            if let Some(r) = responder {
                r.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let bytes = tokio::task::spawn_blocking(move || snapshot.into_bytes())
            .await
            .map_err(io_err)??;
        self.restore(&bytes)?;
        self.note_size(bytes.len() as u64);
        let dir = self.dir.clone();
        let meta = meta.clone();
        tokio::task::spawn_blocking(move || dir.save(&meta, &bytes))
            .await
            .map_err(io_err)??;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let dir = self.dir.clone();
        // Only the header is read: openraft asks for the current snapshot at every start, and
        // needs its data only to send it to a follower.
        let snap = tokio::task::spawn_blocking(move || dir.latest())
            .await
            .map_err(io_err)??;
        Ok(snap.map(|(meta, body)| Snapshot {
            meta,
            snapshot: body,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_data_carries_its_format_and_refuses_an_unknown_one() {
        let state = FederationState::default();
        let membership = StoredMembership::default();
        let bytes = rmp_serde::to_vec_named(&SnapshotFormatRef::V1(SnapshotBodyRef {
            last_applied: &None,
            membership: &membership,
            state: &state,
            workloads_sum: None,
        }))
        .expect("encode");
        let SnapshotFormat::V1(body) = decode_snapshot(&bytes).expect("v1 decodes");
        assert_eq!(body.state, state);
        let at = bytes
            .windows(3)
            .position(|w| w == [0xa2, b'v', b'1'])
            .expect("the envelope names its version");
        let mut v2 = bytes.clone();
        v2[at + 2] = b'2';
        let err = decode_snapshot(&v2).err().expect("v2 refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("unknown variant `v2`"), "{err}");
    }
}

#[cfg(test)]
mod sum_tests {
    use tideway_api::{PodSet, Workload, WorkloadClass, WorkloadSpec};

    use super::*;

    /// A restored state takes the workloads' digest sum its snapshot carries (what keeps a
    /// restart from hashing every workload again), and computes it from an older snapshot
    /// that carries none.
    #[test]
    fn a_snapshot_carries_the_workloads_sum_and_an_older_one_has_it_computed() {
        let mut state = FederationState::default();
        for n in ["a", "b"] {
            let spec = WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("p", 1, 1, "H100")],
            );
            state.workloads.insert(n, Workload::new(n, spec));
        }
        let kept = state.workloads.digest_sum().expect("kept");
        let membership = StoredMembership::default();
        let encode = |sum: Option<u64>| {
            rmp_serde::to_vec_named(&SnapshotFormatRef::V1(SnapshotBodyRef {
                last_applied: &None,
                membership: &membership,
                state: &state,
                workloads_sum: sum,
            }))
            .expect("encode")
        };
        let dir = tempfile::tempdir().expect("dir");
        let store = StateMachineStore::open(dir.path()).expect("open");
        let restored = |bytes: &[u8]| {
            store.restore(bytes).expect("restore");
            let d = store.data.read().expect("state");
            d.state.workloads.digest_sum()
        };
        // Carried: taken as it is, not computed (a value no map of these two has shows it).
        assert_eq!(restored(&encode(Some(kept ^ 1))), Some(kept ^ 1));
        assert_eq!(restored(&encode(None)), Some(kept));
    }
}

/// A state of `n` submissions as a leader applies them (workload `w{i}`, UID, idempotency key,
/// a time per submission), for the snapshot tests.
#[cfg(test)]
fn submitted_state(n: u64) -> FederationState {
    use crate::state::command::Command;
    use tideway_api::{PodSet, Workload, WorkloadClass, WorkloadSpec};

    let mut state = FederationState::default();
    for i in 1..=n {
        let spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("p", 1, 1 + (i % 3) as u32, "H100")],
        );
        let mut w = Workload::new(format!("w{i}"), spec);
        w.metadata.uid = Some(format!("00000000-0000-4000-8000-{i:012}"));
        let at = chrono::DateTime::from_timestamp(1_800_000_000 + i as i64, 0).expect("time");
        state.apply(
            i,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: format!("key-{i}"),
                at,
                digest: None,
            },
        );
    }
    state
}

#[cfg(test)]
mod split_decode_tests {
    use super::*;

    /// The two-thread decode gives the state the one-thread decode gives, it really splits
    /// (the workloads map is found), and a body it cannot scan is refused as before.
    #[test]
    fn a_snapshot_decoded_on_two_threads_is_the_snapshot_decoded_on_one() {
        let state = submitted_state(50);
        assert_eq!(state.workloads.len(), 50);
        let membership = StoredMembership::default();
        let bytes = rmp_serde::to_vec_named(&SnapshotFormatRef::V1(SnapshotBodyRef {
            last_applied: &None,
            membership: &membership,
            state: &state,
            workloads_sum: state.workloads.digest_sum(),
        }))
        .expect("encode");
        let range = super::super::snapshot_decode::workloads_range(&bytes).expect("found");
        assert!(range.len() > 50 * 100, "the map's bytes: {range:?}");
        let whole: SnapshotFormat = rmp_serde::from_slice(&bytes).expect("one thread");
        let SnapshotFormat::V1(whole) = whole;
        let SnapshotFormat::V1(split) = decode_snapshot(&bytes).expect("two threads");
        assert_eq!(split.state, whole.state);
        assert_eq!(split.state, state);
        assert_eq!(split.workloads_sum, state.workloads.digest_sum());
        // Cut short, inside the map or after it: an error, never a partial state.
        for cut in [range.start + 10, range.end + 3, bytes.len() - 1] {
            let err = decode_snapshot(&bytes[..cut]).err().expect("refused");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "cut at {cut}");
        }
    }
}

/// A snapshot encoded on several threads is the snapshot encoded on one, byte for byte, and
/// written to a file it decodes to the same state: the format does not depend on how it was
/// written. 2,500 submissions put every collection that is encoded in chunks over more than
/// two chunks.
#[cfg(test)]
mod parallel_encode_tests {
    use super::*;

    #[test]
    fn a_snapshot_encoded_on_several_threads_is_the_same_bytes() {
        let state = submitted_state(2_500);
        assert_eq!(state.audit.events.len(), 2_500);
        let membership = StoredMembership::default();
        let body = SnapshotFormatRef::V1(SnapshotBodyRef {
            last_applied: &None,
            membership: &membership,
            state: &state,
            workloads_sum: state.workloads.digest_sum(),
        });
        let plain = rmp_serde::to_vec_named(&body).expect("one thread");
        let mut parallel = Vec::new();
        crate::parallel_encode::write_named(&mut parallel, &body).expect("several threads");
        assert_eq!(parallel.len(), plain.len());
        assert!(parallel == plain, "the bytes differ");

        let dir = tempfile::tempdir().expect("dir");
        let snapshots = SnapshotDir::open(dir.path()).expect("dir");
        let meta = SnapshotMeta::default();
        snapshots
            .save_with(&meta, |w| crate::parallel_encode::write_named(w, &body))
            .expect("written");
        let loaded = snapshots.load().expect("read").expect("a snapshot");
        assert!(loaded.data() == plain.as_slice());
        let SnapshotFormat::V1(back) = decode_snapshot(loaded.data()).expect("decodes");
        assert_eq!(back.state, state);
    }
}

#[cfg(test)]
mod copy_slot_tests {
    use openraft::entry::RaftEntry;

    use super::super::types::Entry;
    use super::*;
    use crate::state::assignments_tests::{Op, command};
    use crate::state::command::Request;

    /// An entry submitting one workload (the submission of the state tests' `Op::Submit`).
    fn submit(i: u64) -> Entry {
        let cmd =
            command(&FederationState::default(), &Op::Submit(i as u8), i).expect("a submission");
        Entry::new_normal(
            openraft::testing::log_id::<TypeConfig>(1, 1, i),
            Request::new(vec![cmd]),
        )
    }

    /// A job posted for apply runs once, after the next entry, on the state with that entry
    /// applied; an entry applied with nothing posted runs nothing.
    #[tokio::test]
    async fn apply_runs_a_posted_job_once_on_the_state_after_its_next_entry() {
        let dir = tempfile::tempdir().expect("dir");
        let mut sm = StateMachineStore::open(dir.path()).expect("open");
        let slot = sm.copy_slot();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        sm.apply(futures::stream::iter(vec![Ok((submit(1), None))]))
            .await
            .expect("apply");
        let s = seen.clone();
        slot.post(Box::new(move |d| {
            if let Ok(mut v) = s.lock() {
                v.push((d.last_applied.map(|l| l.index()), d.state.workloads.len()));
            }
        }));
        sm.apply(futures::stream::iter(vec![
            Ok((submit(2), None)),
            Ok((submit(3), None)),
        ]))
        .await
        .expect("apply");
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen, vec![(Some(2), 2)], "once, right after entry 2");
        assert!(!slot.withdraw(), "nothing left waiting");
    }

    /// A reader's copy is the version of its moment, shared rather than copied; apply then
    /// writes a version of its own, leaves the reader's as it was, and copies nothing while
    /// no reader holds the version it changes.
    #[tokio::test]
    async fn a_readers_copy_is_shared_and_apply_leaves_it_as_it_was() {
        let dir = tempfile::tempdir().expect("dir");
        let mut sm = StateMachineStore::open(dir.path()).expect("open");
        let data = sm.data();
        sm.apply(futures::stream::iter(vec![Ok((submit(1), None))]))
            .await
            .expect("apply");
        let copy = data.read().expect("lock").copy();
        assert!(Arc::ptr_eq(&copy, &data.read().expect("lock").state));
        sm.apply(futures::stream::iter(vec![Ok((submit(2), None))]))
            .await
            .expect("apply");
        assert_eq!(copy.workloads.len(), 1, "the reader's version is unchanged");
        // The cycle's cursor comes from the version it copied, and must follow the next.
        let cursor = copy.workloads.cursor();
        let live = data.read().expect("lock").copy();
        assert_eq!(live.workloads.len(), 2);
        assert!(
            !Arc::ptr_eq(&copy, &live),
            "apply wrote a version of its own"
        );
        let changed = live.workloads.changed_since(cursor).map(|n| n.len());
        assert_eq!(changed, Some(1), "the live version kept the copy's journal");
        drop((copy, live));
        let before = Arc::as_ptr(&data.read().expect("lock").state);
        sm.apply(futures::stream::iter(vec![Ok((submit(3), None))]))
            .await
            .expect("apply");
        let d = data.read().expect("lock");
        assert_eq!(d.state.workloads.len(), 3);
        assert_eq!(
            Arc::as_ptr(&d.state),
            before,
            "with no reader holding it, apply changed the state in place"
        );
    }
}

#[cfg(test)]
#[path = "restart_cost_tests.rs"]
mod restart_cost_tests;
