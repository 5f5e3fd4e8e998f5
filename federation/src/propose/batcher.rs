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
/// writes on a thread of its own (`raft::log_writer`), one gave 10,240 submissions/s against
/// 9,520 with two (wrk at the leader, means of three) and 6,918 / 6,118 against 6,847 / 5,541
/// with clients on every node (docs/operations.md, "Submissions against etcd").
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
    while let Some(first) = rx.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        // Drain after the permit: while all slots are busy, the queue grows into a bigger batch.
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
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
