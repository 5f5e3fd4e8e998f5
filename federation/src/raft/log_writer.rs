//! The Raft log's one writer thread: every write transaction of the log, in the order asked,
//! with the writes that queued up behind a commit grouped into the next transaction and its
//! one fsync.
//!
//! openraft asks `append` to return once the entries are readable and to report them durable
//! later, through its callback. The log used to return only after its fsync, and openraft's
//! core awaits `append`: on a leader the core did nothing else for the length of every fsync,
//! and sent an entry to the followers only after it was on the leader's disk, so the leader's
//! fsync and the followers' ran one after the other instead of at once. Now `append` hands
//! its entries to this thread and returns; openraft counts the leader's own copy towards a
//! quorum only when the callback says it is durable, exactly as before.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use openraft::RaftTypeConfig;
use openraft::alias::EntryOf;
use openraft::storage::IOFlushed;
use redb::{Database, Durability};

use super::log_store::{LOGS, LogStats, META, PendingCommitted};
use super::log_tail::LogTail;

/// A change to make inside a write transaction.
pub type Change = Box<dyn FnOnce(&redb::WriteTransaction) -> io::Result<()> + Send>;

/// Jobs grouped into one transaction at most: bounds the time a group holds its first job's
/// caller when a long queue has built up.
const MAX_GROUP: usize = 256;

/// What the writer is asked to do.
pub enum Job<C: RaftTypeConfig> {
    /// Encoded entries to insert, reported through openraft's callback once durable; `write`
    /// is the number the tail knows them by.
    Append {
        rows: Vec<(u64, Arc<[u8]>)>,
        write: u64,
        callback: IOFlushed<C>,
    },
    /// Any other change, reported to the caller waiting on `done` once durable.
    Change {
        change: Change,
        done: tokio::sync::oneshot::Sender<io::Result<()>>,
    },
    /// Nothing to write: answered once every job queued before it is durable.
    Barrier(tokio::sync::oneshot::Sender<io::Result<()>>),
}

/// What the writer thread shares with the log.
pub struct Shared<C: RaftTypeConfig> {
    pub db: Arc<Database>,
    pub stats: Arc<LogStats>,
    pub tail: Arc<Mutex<LogTail<EntryOf<C>>>>,
    /// The committed log id not yet written (see `RedbLogStore::committed`).
    pub committed: Arc<Mutex<VecDeque<PendingCommitted>>>,
}

/// The handle to the writer thread. Dropping it lets the thread finish what is queued and
/// waits for that, so that the file is closed (and can be opened again) once the log is.
pub struct Writer<C: RaftTypeConfig> {
    tx: Option<Sender<Job<C>>>,
    thread: Option<JoinHandle<()>>,
}

impl<C: RaftTypeConfig> Writer<C> {
    pub fn start(shared: Shared<C>) -> io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || run(shared, rx))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn send(&self, job: Job<C>) -> io::Result<()> {
        self.tx
            .as_ref()
            .ok_or_else(|| io::Error::other("the log's writer has stopped"))?
            .send(job)
            .map_err(|_| io::Error::other("the log's writer has stopped"))
    }
}

impl<C: RaftTypeConfig> Drop for Writer<C> {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run<C: RaftTypeConfig>(shared: Shared<C>, rx: Receiver<Job<C>>) {
    // Appends up to this number are durable.
    let mut durable = 0u64;
    // After a failed transaction nothing more is written: a later group's entries would
    // follow a hole where the failed ones should be (openraft stops on the error anyway).
    let mut failed: Option<io::Error> = None;
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let newest = group
            .iter()
            .filter_map(|j| match j {
                Job::Append { write, .. } => Some(*write),
                _ => None,
            })
            .max();
        let after = durable.max(newest.unwrap_or(0));
        let result = match &failed {
            Some(e) => Err(io::Error::new(
                e.kind(),
                format!("the log stopped writing after an error: {e}"),
            )),
            None if group.iter().all(|j| matches!(j, Job::Barrier(_))) => Ok(()),
            None => commit(&shared, &mut group, after),
        };
        if let Err(e) = &result
            && failed.is_none()
        {
            tracing::error!(error = %e, "writing the raft log");
            failed = Some(io::Error::new(e.kind(), e.to_string()));
        }
        if result.is_ok() {
            durable = after;
            if newest.is_some()
                && let Ok(mut tail) = shared.tail.lock()
            {
                tail.durable(after);
            }
        }
        for job in group {
            let res = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            };
            match job {
                Job::Append { callback, .. } => callback.io_completed(res),
                Job::Change { done, .. } | Job::Barrier(done) => {
                    let _ = done.send(res);
                }
            }
        }
    }
}

/// One durable transaction for the group's jobs, in their order, carrying the committed log
/// id saved since the last one if every append it may name is durable with it (appends up
/// to `after`). The changes are taken out of the jobs (each runs once).
fn commit<C: RaftTypeConfig>(
    shared: &Shared<C>,
    group: &mut [Job<C>],
    after: u64,
) -> io::Result<()> {
    let committed = {
        let mut pending = shared.committed.lock().map_err(io_err)?;
        match pending.iter().rposition(|p| p.after <= after) {
            Some(i) => pending.drain(..=i).next_back(),
            None => None,
        }
    };
    let mut txn = shared.db.begin_write().map_err(io_err)?;
    txn.set_durability(Durability::Immediate).map_err(io_err)?;
    let (mut entries, mut bytes) = (0u64, 0u64);
    for job in group.iter_mut() {
        match job {
            Job::Append { rows, .. } => {
                let mut t = txn.open_table(LOGS).map_err(io_err)?;
                for (idx, b) in rows.iter() {
                    t.insert(*idx, &b[..]).map_err(io_err)?;
                    bytes += b.len() as u64;
                }
                entries += rows.len() as u64;
            }
            Job::Change { change, .. } => {
                let change = std::mem::replace(change, Box::new(|_| Ok(())));
                change(&txn)?;
            }
            Job::Barrier(_) => {}
        }
    }
    if let Some(p) = committed {
        let mut t = txn.open_table(META).map_err(io_err)?;
        t.insert(super::log_store::KEY_COMMITTED, p.bytes.as_slice())
            .map_err(io_err)?;
    }
    txn.commit().map_err(io_err)?;
    shared.stats.syncs.fetch_add(1, Ordering::Relaxed);
    shared.stats.entries.fetch_add(entries, Ordering::Relaxed);
    shared.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
    Ok(())
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}
