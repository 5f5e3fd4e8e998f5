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

use super::snapshot_file::{FORMAT_V1, SnapshotDir, StoredSnapshot};
use super::types::{LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig};
use crate::state::FederationState;
use crate::state::command::Response;

/// What the state machine holds, kept under one lock so a snapshot is consistent.
#[derive(Debug, Default)]
pub struct StateMachineData {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    pub state: FederationState,
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
}

#[derive(Clone)]
pub struct StateMachineStore {
    data: Arc<RwLock<StateMachineData>>,
    dir: SnapshotDir,
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
        };
        if let Some(snap) = store.dir.load()? {
            store.restore(&snap.data)?;
        }
        Ok(store)
    }

    /// A shared handle for readers (the API layer).
    pub fn data(&self) -> Arc<RwLock<StateMachineData>> {
        self.data.clone()
    }

    fn restore(&self, bytes: &[u8]) -> io::Result<()> {
        let SnapshotFormat::V1(body) = decode_snapshot(bytes)?;
        let mut d = self.data.write().map_err(io_err)?;
        d.last_applied = body.last_applied;
        d.membership = body.membership;
        d.state = body.state;
        Ok(())
    }
}

fn decode_snapshot(bytes: &[u8]) -> io::Result<SnapshotFormat> {
    rmp_serde::from_slice(bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot data in an unknown or corrupt format: {e}"),
        )
    })
}

/// A digest of the replicated state, equal on every node that applied the same log.
///
/// The state is encoded straight into the hasher: no copy of a state that may hold a million
/// workloads. A state that cannot be encoded is an error, never the digest of nothing: two
/// nodes that both failed would otherwise report equal digests for different states.
pub fn state_digest(state: &FederationState) -> Result<String, rmp_serde::encode::Error> {
    use std::hash::Hasher;
    // DefaultHasher::new() has fixed keys, and SipHash buffers partial blocks, so the same
    // bytes hash the same on every node however the encoder splits its writes.
    let mut w = HashWriter(std::collections::hash_map::DefaultHasher::new());
    rmp_serde::encode::write_named(&mut w, state)?;
    Ok(format!("{:016x}", w.0.finish()))
}

/// An `io::Write` that only hashes what is written to it.
struct HashWriter<H>(H);

impl<H: std::hash::Hasher> io::Write for HashWriter<H> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The state digest of the latest applied index, kept so that polling `cluster status` on an
/// idle or slowly changing cluster encodes the state once per applied index, not once per call
/// (each encoding holds the state's read lock, and so holds off apply, for its whole length).
#[derive(Debug, Default)]
pub struct DigestCache {
    last: std::sync::Mutex<Option<(Option<LogId>, String)>>,
}

impl DigestCache {
    /// The digest of `d.state`, from the cache when `d` is at the index it was computed for.
    pub fn get(&self, d: &StateMachineData) -> Result<String, rmp_serde::encode::Error> {
        if let Ok(g) = self.last.lock()
            && let Some((at, digest)) = g.as_ref()
            && *at == d.last_applied
        {
            return Ok(digest.clone());
        }
        let digest = state_digest(&d.state)?;
        if let Ok(mut g) = self.last.lock() {
            *g = Some((d.last_applied, digest.clone()));
        }
        Ok(digest)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let (meta, bytes) = {
            let d = self.data.read().map_err(io_err)?;
            let body = SnapshotFormatRef::V1(SnapshotBodyRef {
                last_applied: &d.last_applied,
                membership: &d.membership,
                state: &d.state,
            });
            let bytes = rmp_serde::to_vec_named(&body).map_err(io_err)?;
            let meta = SnapshotMeta {
                last_log_id: d.last_applied,
                last_membership: d.membership.clone(),
            };
            (meta, bytes)
        };
        let stored = StoredSnapshot {
            format: FORMAT_V1,
            meta: meta.clone(),
            data: bytes,
        };
        let dir = self.dir.clone();
        let stored = tokio::task::spawn_blocking(move || dir.save(&stored).map(|_| stored))
            .await
            .map_err(io_err)??;
        Ok(Snapshot {
            meta,
            snapshot: std::io::Cursor::new(stored.data),
        })
    }
}

#[derive(serde::Serialize)]
struct SnapshotBodyRef<'a> {
    last_applied: &'a Option<LogId>,
    membership: &'a StoredMembership,
    state: &'a FederationState,
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
            let response = {
                let mut d = self.data.write().map_err(io_err)?;
                d.last_applied = Some(entry.log_id);
                match entry.payload {
                    EntryPayload::Blank => Response::default(),
                    EntryPayload::Normal(req) => {
                        let index = entry.log_id.index();
                        let results = req
                            .commands
                            .into_iter()
                            .map(|c| d.state.apply(index, c))
                            .collect();
                        Response { results }
                    }
                    EntryPayload::Membership(m) => {
                        d.membership = StoredMembership::new(Some(entry.log_id), m);
                        Response::default()
                    }
                }
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
        let bytes = snapshot.into_inner();
        self.restore(&bytes)?;
        let stored = StoredSnapshot {
            format: FORMAT_V1,
            meta: meta.clone(),
            data: bytes,
        };
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || dir.save(&stored))
            .await
            .map_err(io_err)??;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let dir = self.dir.clone();
        let snap = tokio::task::spawn_blocking(move || dir.load())
            .await
            .map_err(io_err)??;
        Ok(snap.map(|s| Snapshot {
            meta: s.meta,
            snapshot: std::io::Cursor::new(s.data),
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
        d.state.next_seq += 1;
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
}
