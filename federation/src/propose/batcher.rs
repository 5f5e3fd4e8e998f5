//! Batches concurrent proposals into one Raft entry.
//!
//! Every node runs a proposer. Callers hand it one command and wait; it drains whatever else
//! is queued, and proposes the lot as one entry on the leader (or forwards the lot to the
//! leader in one request). Many submissions then share one log entry, one replication round and
//! one fsync per node, which is what makes acknowledged-after-commit submissions cheap.

use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{ClientWriteError, RaftError};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{Forwarder, ProposeError};
use crate::raft::types::{NodeId, Raft};
use crate::state::command::{Command, CommandResult, Request};
use openraft::async_runtime::watch::WatchReceiver;

/// The most commands in one entry; bounds entry size (a workload is about 1 KB encoded).
pub const MAX_BATCH: usize = 512;
/// Batches in flight at once per node. One: everything that queues while a batch commits goes
/// into the next, as large as it can be, and each entry's costs (its encoding, its append RPC
/// per follower, its apply) are paid by as many submissions as possible. Two kept the pipeline
/// fuller while the log's `append` blocked openraft's core for each fsync; since the log
/// writes on a thread of its own (`raft::log_writer`), one gave more submissions/s than two,
/// with wrk at the leader and with clients on every node (docs/benchmarks/submissions.md,
/// "The log written by a thread of its own").
const MAX_IN_FLIGHT: usize = 1;

type Reply = oneshot::Sender<Result<CommandResult, ProposeError>>;

#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<(Command, Reply)>,
}

impl Proposer {
    pub fn start(raft: Raft, forwarder: Forwarder) -> Self {
        let (tx, rx) = mpsc::channel(MAX_BATCH * 16);
        tokio::spawn(run(raft, forwarder, rx));
        Self { tx }
    }

    /// Proposes one command and waits until it is committed and applied (or refused).
    pub async fn propose(&self, cmd: Command) -> Result<CommandResult, ProposeError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send((cmd, tx))
            .await
            .map_err(|_| ProposeError::ShuttingDown)?;
        rx.await.map_err(|_| ProposeError::ShuttingDown)?
    }
}

async fn run(raft: Raft, forwarder: Forwarder, mut rx: mpsc::Receiver<(Command, Reply)>) {
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut last_len = 0;
    while let Some(first) = rx.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        // Gather after the permit: while all slots are busy, the queue grows into a bigger batch.
        let batch = gather(first, &mut rx, last_len).await;
        last_len = batch.len();
        let raft = raft.clone();
        let forwarder = forwarder.clone();
        tokio::spawn(async move {
            let (cmds, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            let outcome = commit(&raft, &forwarder, Arc::new(cmds)).await;
            match outcome {
                Ok(results) => {
                    for (reply, res) in replies.into_iter().zip(results) {
                        let _ = reply.send(Ok(res));
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
            drop(permit);
        });
    }
}

/// The most times a batch smaller than the last one lets the node's other tasks run before
/// it is proposed (see [`gather`]).
const MAX_LINGER_YIELDS: usize = 32;
/// ... and the longest it lingers so, however long those tasks take. Under load a linger
/// outlasts half a millisecond: bounded at 0.5 ms the rate rose less than at 5 ms, which did
/// as well as unbounded (measured: docs/benchmarks/submissions.md).
const MAX_LINGER: Duration = Duration::from_millis(5);

/// The batch that starts with `first`: everything queued behind it, and, when that is fewer
/// than the last batch held (`last_len`), what the node's other tasks queue while it yields
/// to them a few times, until it is as large as the last one.
///
/// Why: with one batch in flight, the clients a batch answers send their next submissions
/// while the next batch is already being cut, so under a steady load the batches alternate
/// between the clients answered and the rest, each about half of them, and every entry's
/// fixed costs (its append RPC per follower, a log write per node, openraft's round) are paid
/// by half as many submissions as could share them. The answered clients' submissions are
/// usually already arriving, decoded and validated by handler tasks that only need to run;
/// letting them run before the entry is cut took the rate up (64 clients at the leader,
/// same-time runs; see docs/benchmarks/submissions.md, "Batches as large as the last one").
/// A lone client never waits (its last batch was one), and yielding with nothing else to run
/// returns at once.
async fn gather<T>(first: T, rx: &mut mpsc::Receiver<T>, last_len: usize) -> Vec<T> {
    let mut batch = vec![first];
    drain(&mut batch, rx);
    let want = last_len.min(MAX_BATCH);
    if batch.len() >= want {
        return batch;
    }
    // A bound on the wait, not a time anything is decided by: the real clock.
    let started = tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
    for _ in 0..MAX_LINGER_YIELDS {
        tokio::task::yield_now().await;
        drain(&mut batch, rx);
        if batch.len() >= want || started.elapsed() >= MAX_LINGER {
            break;
        }
    }
    batch
}

/// Moves what is queued into `batch`, up to [`MAX_BATCH`].
fn drain<T>(batch: &mut Vec<T>, rx: &mut mpsc::Receiver<T>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
}

/// How long a batch keeps trying to reach a leader, across elections.
const COMMIT_DEADLINE: Duration = Duration::from_secs(10);
/// The first and the longest pause between attempts while the leader stays the same (a busy
/// or briefly unreachable leader). A change of leader ends the pause at once.
const MIN_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(200);

/// Whether another attempt may succeed: a refusal or a shutdown is final.
fn retryable(e: &ProposeError) -> bool {
    matches!(e, ProposeError::NoLeader | ProposeError::Unavailable(_))
}

/// The leader this node's Raft currently names (itself included).
fn known_leader(raft: &Raft) -> Option<NodeId> {
    raft.metrics().borrow_watched().current_leader
}

/// Waits up to `pause` for this node to learn of a leader other than `tried`. Failover time is
/// election time plus this wait: a fixed backoff would add up to its whole step after the
/// election, so the wait ends the moment Raft's metrics name someone new.
async fn until_new_leader(raft: &Raft, tried: Option<NodeId>, pause: Duration) {
    let mut rx = raft.metrics();
    let _ = tokio::time::timeout(pause, async {
        loop {
            let now = rx.borrow_watched().current_leader;
            if now.is_some() && now != tried {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
}

/// Commits a batch locally when this node leads, or forwards it to the leader. Retrying is safe:
/// every submission carries an idempotency key, so a batch applied twice answers twice alike.
///
/// The batch is shared, not copied, between attempts: the entry holds the same commands
/// (`Request` shares them), and a copy per attempt cloned every workload of every batch on
/// its way to the log, a retry or not.
async fn commit(
    raft: &Raft,
    forwarder: &Forwarder,
    cmds: Arc<Vec<Command>>,
) -> Result<Vec<CommandResult>, ProposeError> {
    let deadline = tokio::time::Instant::now() + COMMIT_DEADLINE;
    let mut pause = MIN_PAUSE;
    loop {
        let tried = known_leader(raft);
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let outcome = match forwarder.remote_leader().await {
            Err(e) => Err(e),
            Ok(Some(leader)) => forwarder.propose(leader, &cmds).await,
            // A leader cut off from its quorum never commits: bound each attempt.
            Ok(None) => tokio::time::timeout(remaining, commit_local(raft, Arc::clone(&cmds)))
                .await
                .unwrap_or_else(|_| {
                    Err(ProposeError::Unavailable(
                        "not committed in time: is a quorum reachable?".into(),
                    ))
                }),
        };
        match outcome {
            Err(e) if retryable(&e) && tokio::time::Instant::now() < deadline => {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                until_new_leader(raft, tried, pause.min(left)).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            other => return other,
        }
    }
}

pub async fn commit_local(
    raft: &Raft,
    cmds: Arc<Vec<Command>>,
) -> Result<Vec<CommandResult>, ProposeError> {
    let n = cmds.len();
    match raft.client_write(Request { commands: cmds }).await {
        Ok(resp) => {
            let results = resp.data.results;
            if results.len() != n {
                return Err(ProposeError::Unavailable(format!(
                    "state machine answered {} results for {n} commands",
                    results.len()
                )));
            }
            Ok(results)
        }
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
            Err(ProposeError::NoLeader)
        }
        Err(RaftError::Fatal(f)) => {
            tracing::error!(error = %f, "raft is down");
            Err(ProposeError::ShuttingDown)
        }
        Err(e) => Err(ProposeError::Unavailable(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Submissions that other tasks are about to queue: each of `n` tasks yields `after` times
    /// (a handler decoding its request), then sends.
    fn producers(tx: &mpsc::Sender<u32>, n: u32, after: usize) {
        for i in 0..n {
            let tx = tx.clone();
            tokio::spawn(async move {
                for _ in 0..after {
                    tokio::task::yield_now().await;
                }
                let _ = tx.send(i).await;
            });
        }
    }

    /// On one thread, so which task runs when is fixed: a batch smaller than the last one
    /// lets the tasks about to submit run and takes what they queue; one already as large as
    /// the last does not wait for them; nothing lingers past the yields when no more come.
    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_waits_for_submissions_about_to_arrive_only_when_the_last_was_larger() {
        let (tx, mut rx) = mpsc::channel(MAX_BATCH * 2);
        producers(&tx, 10, 2);
        let batch = gather(100, &mut rx, 11).await;
        assert_eq!(
            batch.len(),
            11,
            "the ten on their way were taken: {batch:?}"
        );
        assert_eq!(batch[0], 100);

        producers(&tx, 10, 2);
        let batch = gather(100, &mut rx, 1).await;
        assert_eq!(
            batch,
            vec![100],
            "a batch as large as the last is cut at once"
        );
        let rest = gather(101, &mut rx, 11).await;
        assert_eq!(rest.len(), 11, "the ten come in the next: {rest:?}");

        // More were expected than come: it stops after its yields, with what it has.
        producers(&tx, 3, 1);
        let batch = gather(100, &mut rx, 50).await;
        assert_eq!(batch.len(), 4);
        assert!(rx.try_recv().is_err());

        // Never more than an entry holds, even when more wait.
        for i in 0..(MAX_BATCH as u32 + 5) {
            tx.send(i).await.expect("queued");
        }
        let batch = gather(7, &mut rx, MAX_BATCH * 4).await;
        assert_eq!(batch.len(), MAX_BATCH);
        let rest = gather(8, &mut rx, 0).await;
        assert_eq!(rest.len(), 7);
    }
}
