//! Batches concurrent proposals into one Raft entry.
//!
//! Every node runs a proposer. Callers hand it one command and wait; it drains whatever else
//! is queued, and proposes the lot as one entry on the leader (or forwards the lot to the
//! leader in one request). Many submissions then share one log entry, one replication round and
//! one fsync per node, which is what makes acknowledged-after-commit submissions cheap.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use openraft::errors::{ClientWriteError, RaftError};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{Forwarder, ProposeError};
use crate::raft::types::Raft;
use crate::state::command::{Command, CommandResult, Request};

/// The most commands in one entry; bounds entry size (a workload is about 1 KB encoded).
pub const MAX_BATCH: usize = 512;
/// Batches in flight at once per node: two keep the pipeline busy (one commits while the
/// next fills) without splitting concurrent proposals into batches of one.
const MAX_IN_FLIGHT: usize = 2;

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
            let outcome = commit(&raft, &forwarder, cmds).await;
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

/// Waits between attempts: short at first (an election takes a few hundred milliseconds),
/// with jitter so that every node's batches do not hit a new leader in the same instant.
fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_millis(500))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(COMMIT_DEADLINE))
}

/// Whether another attempt may succeed: a refusal or a shutdown is final.
fn retryable(e: &ProposeError) -> bool {
    matches!(e, ProposeError::NoLeader | ProposeError::Unavailable(_))
}

/// Commits a batch locally when this node leads, or forwards it to the leader. Retrying is safe:
/// every submission carries an idempotency key, so a batch applied twice answers twice alike.
async fn commit(
    raft: &Raft,
    forwarder: &Forwarder,
    cmds: Vec<Command>,
) -> Result<Vec<CommandResult>, ProposeError> {
    let deadline = tokio::time::Instant::now() + COMMIT_DEADLINE;
    let attempt = || async {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        match forwarder.remote_leader().await? {
            Some(leader) => forwarder.propose(leader, &cmds).await,
            // A leader cut off from its quorum never commits: bound each attempt.
            None => tokio::time::timeout(remaining, commit_local(raft, cmds.clone()))
                .await
                .unwrap_or_else(|_| {
                    Err(ProposeError::Unavailable(
                        "not committed in time: is a quorum reachable?".into(),
                    ))
                }),
        }
    };
    attempt
        .retry(backoff())
        .when(|e| retryable(e) && tokio::time::Instant::now() < deadline)
        .await
}

pub async fn commit_local(
    raft: &Raft,
    cmds: Vec<Command>,
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
