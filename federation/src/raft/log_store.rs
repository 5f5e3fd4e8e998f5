//! The durable Raft log, kept in redb.
//!
//! Every write transaction commits with `Durability::Immediate`, so redb has fsynced the file
//! before openraft is told the I/O completed: an entry the leader counts towards a quorum is on
//! disk. The transactions are made by one writer thread (see [`super::log_writer`]): `append`
//! returns once its entries are readable from the tail and reports them durable later. Entries
//! are encoded with MessagePack (see `docs/decisions/0002-binary-encoding.md`).

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::received::Received;

use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, RaftTypeConfig};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::log_tail::LogTail;
use super::log_writer::{Job, Shared, Writer};

pub(super) const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_logs");
pub(super) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

const KEY_VOTE: &str = "vote";
pub(super) const KEY_COMMITTED: &str = "committed";
const KEY_LAST_PURGED: &str = "last_purged";

/// Committed ids kept waiting for a write at most; the oldest go first (losing one costs a
/// restart only a longer replay).
const PENDING_COMMITTED: usize = 64;

/// A committed log id saved but not yet written, and the number of the last append handed
/// to the writer when it was saved.
#[derive(Debug)]
pub struct PendingCommitted {
    pub bytes: Vec<u8>,
    pub after: u64,
}

/// Counters that show whether concurrent proposals share fsyncs.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Durable write transactions (each one fsync).
    pub syncs: AtomicU64,
    /// Entries appended.
    pub entries: AtomicU64,
    /// Bytes of the entries appended (encoded), what the snapshot policy paces itself by.
    pub bytes: AtomicU64,
}

/// A redb-backed [`RaftLogStorage`], generic over the type config so the openraft
/// conformance suite can drive it with its own types.
pub struct RedbLogStore<C: RaftTypeConfig> {
    db: Arc<Database>,
    stats: Arc<LogStats>,
    /// The newest entries, decoded, shared with the readers (see [`super::log_tail`]).
    tail: Arc<Mutex<LogTail<EntryOf<C>>>>,
    /// The committed log id not yet written, encoded. openraft saves it on every commit,
    /// inline, before it applies what was committed; it needs no fsync (it only speeds up
    /// recovery and never runs ahead of the durable entries it names), so the next write
    /// transaction (an append, a purge, a truncation) carries it, instead of a transaction
    /// of its own on the blocking pool per commit, on every node.
    ///
    /// It is written only by a transaction after which every append handed to the writer
    /// before it was saved is durable (the number of the last such append rides with it):
    /// a committed id in the file never names an entry the file lacks. The ids saved since
    /// the last write wait in order, so that under a steady load the newest one that can be
    /// written is, rather than each being replaced by one that cannot yet.
    committed: Arc<Mutex<VecDeque<PendingCommitted>>>,
    /// The one thread that writes the log.
    writer: Arc<Writer<C>>,
    /// The number of the last append handed to the writer (the tail's write numbers).
    appends: Arc<AtomicU64>,
    /// The bytes of the entries this node was last sent by a leader, written as they are
    /// (see [`super::received`]).
    received: Arc<Received<LogIdOf<C>>>,
    _c: PhantomData<fn() -> C>,
}

impl<C: RaftTypeConfig> Clone for RedbLogStore<C> {
    fn clone(&self) -> Self {
        Self {
            db: self.db.clone(),
            stats: self.stats.clone(),
            tail: self.tail.clone(),
            committed: self.committed.clone(),
            writer: self.writer.clone(),
            appends: self.appends.clone(),
            received: self.received.clone(),
            _c: PhantomData,
        }
    }
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The log's page cache. redb's default is a 1 GiB ceiling, and a busy log climbs towards it:
/// the pages it writes stay cached (a large and still growing part of the leader's heap in a
/// heap profile of `tideway bench rss`; measured: docs/benchmarks/memory.md). The log is
/// written at its tail and read back near it (replication, apply), so a small cache serves
/// it; only a follower far behind reads older entries, from disk.
const LOG_CACHE_BYTES: usize = 64 * 1024 * 1024;

fn encode<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    rmp_serde::to_vec_named(v).map_err(io_err)
}

fn decode<T: DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    rmp_serde::from_slice(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

impl<C> RedbLogStore<C>
where
    C: RaftTypeConfig,
    EntryOf<C>: Serialize + DeserializeOwned + Clone,
    VoteOf<C>: Serialize + DeserializeOwned,
    LogIdOf<C>: Serialize + DeserializeOwned,
{
    /// Opens (or creates) the log at `path`.
    pub fn open(path: &Path) -> io::Result<Self> {
        let started = tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
        let db = redb::Builder::new()
            .set_cache_size(LOG_CACHE_BYTES)
            .create(path)
            .map_err(io_err)?;
        // After a kill, redb checks and repairs the file before it opens: a cost that grows
        // with the file, and part of every restart's time.
        tracing::info!(
            bytes = std::fs::metadata(path).map_or(0, |m| m.len()),
            seconds = started.elapsed().as_secs_f64(),
            "raft log opened"
        );
        let txn = db.begin_write().map_err(io_err)?;
        txn.open_table(LOGS).map_err(io_err)?;
        txn.open_table(META).map_err(io_err)?;
        txn.commit().map_err(io_err)?;
        let (db, stats, tail, committed) = (
            Arc::new(db),
            Arc::<LogStats>::default(),
            Arc::<Mutex<LogTail<EntryOf<C>>>>::default(),
            Arc::<Mutex<VecDeque<PendingCommitted>>>::default(),
        );
        let writer = Writer::start(Shared {
            db: db.clone(),
            stats: stats.clone(),
            tail: tail.clone(),
            committed: committed.clone(),
        })?;
        Ok(Self {
            db,
            stats,
            tail,
            committed,
            writer: Arc::new(writer),
            appends: Arc::default(),
            received: Arc::default(),
            _c: PhantomData,
        })
    }

    pub fn stats(&self) -> Arc<LogStats> {
        self.stats.clone()
    }

    /// Where the transport keeps the bytes of the entries it receives, for this log to write.
    pub fn received(&self) -> Arc<Received<LogIdOf<C>>> {
        self.received.clone()
    }

    /// The decoded tail with each entry's encoded bytes, for the transport to send them as
    /// they are.
    pub fn tail(&self) -> Arc<Mutex<LogTail<EntryOf<C>>>> {
        self.tail.clone()
    }

    /// Writes the committed log id saved since the last write transaction, durably (a clean
    /// stop: see `committed`).
    pub async fn flush_committed(&self) -> io::Result<()> {
        if self.committed.lock().map_err(io_err)?.is_empty() {
            return Ok(());
        }
        self.write(|_| Ok(())).await
    }

    /// A durable write, after every write asked before it, by the writer thread (in a
    /// transaction it may share with others and that carries the committed log id).
    async fn write<F>(&self, f: F) -> io::Result<()>
    where
        F: FnOnce(&redb::WriteTransaction) -> io::Result<()> + Send + 'static,
    {
        let (done, wait) = tokio::sync::oneshot::channel();
        self.writer.send(Job::Change {
            change: Box::new(f),
            done,
        })?;
        wait.await.map_err(io_err)?
    }

    /// Returns once every write asked before it is durable, so that redb holds all of it.
    async fn settled(&self) -> io::Result<()> {
        let (done, wait) = tokio::sync::oneshot::channel();
        self.writer.send(Job::Barrier(done))?;
        wait.await.map_err(io_err)?
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &str) -> io::Result<Option<T>> {
        let txn = self.db.begin_read().map_err(io_err)?;
        let table = txn.open_table(META).map_err(io_err)?;
        match table.get(key).map_err(io_err)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    async fn put_meta<T: Serialize>(&self, key: &'static str, value: &T) -> io::Result<()> {
        let bytes = encode(value)?;
        self.write(move |txn| {
            let mut t = txn.open_table(META).map_err(io_err)?;
            t.insert(key, bytes.as_slice()).map_err(io_err)?;
            Ok(())
        })
        .await
    }
}

fn to_bounds<RB: RangeBounds<u64>>(range: &RB) -> (Bound<u64>, Bound<u64>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

impl<C> RaftLogReader<C> for RedbLogStore<C>
where
    C: RaftTypeConfig,
    EntryOf<C>: Serialize + DeserializeOwned + Clone,
    VoteOf<C>: Serialize + DeserializeOwned,
    LogIdOf<C>: Serialize + DeserializeOwned,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        let (start, end) = to_bounds(&range);
        if let Some(entries) = self.tail.lock().map_err(io_err)?.read(start, end) {
            return Ok(entries);
        }
        // Beyond the tail (a follower far behind, a restart): redb holds all that the tail
        // does not once the appends handed to the writer are durable.
        self.settled().await?;
        let txn = self.db.begin_read().map_err(io_err)?;
        let table = txn.open_table(LOGS).map_err(io_err)?;
        let mut out = Vec::new();
        for item in table.range::<u64>((start, end)).map_err(io_err)? {
            let (_k, v) = item.map_err(io_err)?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<C>>, io::Error> {
        self.get_meta(KEY_VOTE)
    }
}

impl<C> RaftLogStorage<C> for RedbLogStore<C>
where
    C: RaftTypeConfig,
    EntryOf<C>: Serialize + DeserializeOwned + Clone,
    VoteOf<C>: Serialize + DeserializeOwned,
    LogIdOf<C>: Serialize + DeserializeOwned,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        self.settled().await?;
        let last_purged: Option<LogIdOf<C>> = self.get_meta(KEY_LAST_PURGED)?;
        let txn = self.db.begin_read().map_err(io_err)?;
        let table = txn.open_table(LOGS).map_err(io_err)?;
        let last = match table.last().map_err(io_err)? {
            Some((_k, v)) => {
                let entry: EntryOf<C> = decode(v.value())?;
                Some(entry.log_id())
            }
            None => last_purged.clone(),
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<C>) -> Result<(), io::Error> {
        self.put_meta(KEY_VOTE, vote).await
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        // Written by the next write transaction (see `committed`): lost in a crash before
        // it, as a non-durable commit would be, which costs a restart only a longer replay.
        let bytes = encode(&committed)?;
        // The entries it names were appended before it was saved: writes up to this number.
        let after = self.appends.load(Ordering::Relaxed);
        let mut pending = self.committed.lock().map_err(io_err)?;
        if pending.len() >= PENDING_COMMITTED {
            pending.pop_front();
        }
        pending.push_back(PendingCommitted { bytes, after });
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<C>>, io::Error> {
        if let Some(p) = self.committed.lock().map_err(io_err)?.back() {
            return decode::<Option<LogIdOf<C>>>(&p.bytes);
        }
        Ok(self
            .get_meta::<Option<LogIdOf<C>>>(KEY_COMMITTED)?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let write = self.appends.fetch_add(1, Ordering::Relaxed) + 1;
        let mut kept = Vec::new();
        for e in entries {
            let id = e.log_id();
            let bytes: Arc<[u8]> = match self.received.take(id.index(), &id) {
                Some(received) => received,
                None => encode(&e)?.into(),
            };
            kept.push((id.index(), e, bytes));
        }
        let mut rows = Vec::with_capacity(kept.len());
        {
            // Readable from the tail at once, as openraft requires when `append` returns.
            let mut tail = self.tail.lock().map_err(io_err)?;
            for (index, e, bytes) in kept {
                tail.appended(index, e, bytes.clone(), write);
                rows.push((index, bytes));
            }
        }
        self.writer.send(Job::Append {
            rows,
            write,
            callback,
        })
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        let from = last_log_id.map(|l| l.index() + 1).unwrap_or(0);
        // Cut first: a reader must not find in the tail what the log is losing.
        self.tail.lock().map_err(io_err)?.truncate_from(from);
        self.write(move |txn| {
            let mut t = txn.open_table(LOGS).map_err(io_err)?;
            t.retain_in(from.., |_, _| false).map_err(io_err)?;
            Ok(())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        let upto = log_id.index();
        self.tail.lock().map_err(io_err)?.purge_upto(upto);
        let bytes = encode(&Some(log_id))?;
        self.write(move |txn| {
            let mut m = txn.open_table(META).map_err(io_err)?;
            m.insert(KEY_LAST_PURGED, bytes.as_slice())
                .map_err(io_err)?;
            let mut t = txn.open_table(LOGS).map_err(io_err)?;
            t.retain_in(..=upto, |_, _| false).map_err(io_err)?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use openraft::StorageError;
    use openraft::testing::log::{StoreBuilder, Suite};
    use tempfile::TempDir;

    use super::*;
    use crate::raft::state_machine::StateMachineStore;
    use crate::raft::types::TypeConfig;

    struct Builder;

    impl StoreBuilder<TypeConfig, RedbLogStore<TypeConfig>, StateMachineStore, TempDir> for Builder {
        async fn build(
            &self,
        ) -> Result<(TempDir, RedbLogStore<TypeConfig>, StateMachineStore), StorageError<TypeConfig>>
        {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = RedbLogStore::open(&dir.path().join("log.redb")).expect("open log");
            let sm = StateMachineStore::open(&dir.path().join("snap")).expect("open sm");
            Ok((dir, log, sm))
        }
    }

    /// The openraft storage conformance suite, over the real redb log and the real state
    /// machine with the federation's own type config.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_openraft_storage_suite() {
        Suite::test_all(Builder)
            .await
            .expect("openraft storage suite");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn entries_and_vote_survive_reopen() {
        use openraft::entry::RaftEntry;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.redb");
        {
            let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("open");
            let vote = Vote::new(3, 1);
            log.save_vote(&vote).await.expect("vote");
            let entries: Vec<_> = (1..=5)
                .map(|i| openraft::testing::blank_ent::<TypeConfig>(3, 1, i))
                .collect();
            append_durably(&mut log, entries).await;
            assert_eq!(
                log.stats().syncs.load(Ordering::Relaxed),
                2,
                "vote + one batch append"
            );
            // Dropped without any shutdown: what was acknowledged must be on disk.
        }
        let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("reopen");
        let st = log.get_log_state().await.expect("state");
        assert_eq!(st.last_log_id.map(|l| l.index()), Some(5));
        let got = log.try_get_log_entries(2..4).await.expect("read");
        assert_eq!(
            got.iter().map(|e| e.log_id().index()).collect::<Vec<_>>(),
            vec![2, 3]
        );
        let vote = log.read_vote().await.expect("vote").expect("some vote");
        assert_eq!(vote, Vote::new(3, 1));
    }

    /// The committed log id costs no transaction of its own: it is written by the next one,
    /// and until then a reopened log recovers the one written before (a longer replay, never
    /// a committed id ahead of the durable entries).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_committed_id_rides_on_the_next_write() {
        use openraft::testing::log_id;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.redb");
        let entries = |from: u64, to: u64| -> Vec<_> {
            (from..=to)
                .map(|i| openraft::testing::blank_ent::<TypeConfig>(1, 1, i))
                .collect()
        };
        {
            let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("open");
            append_durably(&mut log, entries(1, 3)).await;
            log.save_committed(Some(log_id::<TypeConfig>(1, 1, 2)))
                .await
                .expect("save");
            assert_eq!(
                log.read_committed().await.expect("read"),
                Some(log_id::<TypeConfig>(1, 1, 2)),
                "read back at once"
            );
            let syncs = log.stats().syncs.load(Ordering::Relaxed);
            append_durably(&mut log, entries(4, 5)).await;
            assert_eq!(
                log.stats().syncs.load(Ordering::Relaxed),
                syncs + 1,
                "one transaction for the append and the committed id"
            );
            // Saved after the last write: in memory only when the process dies.
            log.save_committed(Some(log_id::<TypeConfig>(1, 1, 5)))
                .await
                .expect("save");
        }
        let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("reopen");
        assert_eq!(
            log.read_committed().await.expect("read"),
            Some(log_id::<TypeConfig>(1, 1, 2)),
            "the id the last write carried"
        );
        let st = log.get_log_state().await.expect("state");
        assert_eq!(st.last_log_id.map(|l| l.index()), Some(5));
        // A clean stop writes it.
        log.save_committed(Some(log_id::<TypeConfig>(1, 1, 5)))
            .await
            .expect("save");
        log.flush_committed().await.expect("flush");
        drop(log);
        let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("reopen");
        assert_eq!(
            log.read_committed().await.expect("read"),
            Some(log_id::<TypeConfig>(1, 1, 5)),
            "flushed on a clean stop"
        );
    }

    use crate::raft::types::Vote;

    /// An entry whose bytes the transport kept is written as those bytes (here a positional
    /// encoding, which no encoder of this log writes, so the row shows which were written),
    /// and reads back as the entry; an entry without kept bytes, or with bytes kept for
    /// another log id, is encoded as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn received_bytes_are_written_as_they_are_and_read_back_as_the_entry() {
        use openraft::entry::RaftEntry;
        use openraft::testing::log_id;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.redb");
        let ent = |term: u64, i: u64| openraft::testing::blank_ent::<TypeConfig>(term, 1, i);
        let positional = |e: &crate::raft::types::Entry| -> Arc<[u8]> {
            rmp_serde::to_vec(e).expect("encode").into()
        };
        let (e1, e2, e3) = (ent(2, 1), ent(2, 2), ent(2, 3));
        {
            let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("open");
            log.received().offer(
                1,
                vec![
                    (e1.log_id(), positional(&e1)),
                    // Kept for another term's entry at index 2: not this one's.
                    (log_id::<TypeConfig>(1, 1, 2), positional(&e2)),
                ],
            );
            append_durably(&mut log, vec![e1.clone(), e2.clone(), e3.clone()]).await;
        }
        let db = redb::Database::open(&path).expect("open db");
        let txn = db.begin_read().expect("read");
        let t = txn.open_table(LOGS).expect("table");
        let row = |i: u64| t.get(i).expect("get").expect("row").value().to_vec();
        assert_eq!(row(1), positional(&e1).to_vec(), "the received bytes");
        assert_eq!(row(2), rmp_serde::to_vec_named(&e2).expect("encode"));
        assert_eq!(row(3), rmp_serde::to_vec_named(&e3).expect("encode"));
        drop((t, txn, db));
        let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("reopen");
        let got = log.try_get_log_entries(1..4).await.expect("read");
        assert_eq!(format!("{got:?}"), format!("{:?}", vec![e1, e2, e3]));
    }

    /// Appends and waits for openraft's callback: durable from then on.
    async fn append_durably(
        log: &mut RedbLogStore<TypeConfig>,
        entries: Vec<crate::raft::types::Entry>,
    ) {
        use openraft::type_config::TypeConfigExt;
        let (tx, rx) = TypeConfig::oneshot();
        log.append(entries, IOFlushed::signal(tx))
            .await
            .expect("append");
        rx.await.expect("callback").expect("durable");
    }

    /// `append` returns before its fsync: what it took is readable at once and reported
    /// durable later, in order; a truncation and a rewrite queued behind appends not yet
    /// written land after them; and a reopened log holds exactly what was reported durable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_are_readable_at_once_and_durable_in_order() {
        use openraft::entry::RaftEntry;
        use openraft::type_config::TypeConfigExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.redb");
        let ent = |term: u64, i: u64| openraft::testing::blank_ent::<TypeConfig>(term, 1, i);
        // (index, term) of each entry read, by comparing with the log id it would have.
        let terms = |got: &[crate::raft::types::Entry]| -> Vec<(u64, u64)> {
            got.iter()
                .map(|e| {
                    let i = e.log_id().index();
                    let term = (1..=2)
                        .find(|t| e.log_id() == openraft::testing::log_id::<TypeConfig>(*t, 1, i))
                        .unwrap_or(0);
                    (i, term)
                })
                .collect()
        };
        {
            let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("open");
            let mut flushed = Vec::new();
            for i in 1..=20 {
                let (tx, rx) = TypeConfig::oneshot();
                log.append(vec![ent(1, i)], IOFlushed::signal(tx))
                    .await
                    .expect("append");
                flushed.push(rx);
                let got = log.try_get_log_entries(i..=i).await.expect("read");
                assert_eq!(terms(&got), vec![(i, 1)], "readable once append returns");
            }
            // A new leader's rewrite from 16 on, queued behind appends maybe not yet written.
            log.truncate_after(Some(openraft::testing::log_id::<TypeConfig>(1, 1, 15)))
                .await
                .expect("truncate");
            append_durably(&mut log, (16..=18).map(|i| ent(2, i)).collect()).await;
            for rx in flushed {
                rx.await.expect("callback").expect("durable");
            }
            let st = log.get_log_state().await.expect("state");
            assert_eq!(st.last_log_id.map(|l| l.index()), Some(18));
            // The rewrite replaced what followed 15, for readers too.
            let got = log.try_get_log_entries(14..=18).await.expect("read");
            assert_eq!(
                terms(&got),
                vec![(14, 1), (15, 1), (16, 2), (17, 2), (18, 2)]
            );
            assert!(
                log.stats().syncs.load(Ordering::Relaxed) <= 22,
                "at most one transaction per write"
            );
        }
        let mut log = RedbLogStore::<TypeConfig>::open(&path).expect("reopen");
        let got = log.try_get_log_entries(1..=20).await.expect("read");
        assert_eq!(got.len(), 18, "the truncated 19 and 20 stay gone");
        assert_eq!(
            terms(&got[13..]),
            vec![(14, 1), (15, 1), (16, 2), (17, 2), (18, 2)]
        );
    }
}
