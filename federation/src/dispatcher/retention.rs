//! Retention of terminal workloads on the leader: once a finished, failed or cancelled
//! workload is older than the retention time, the leader proposes to compact it out of the
//! live state, so memory stays bounded on a federation that runs for months. The audit
//! trail is compacted the same way, by the configured count or age of records.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use tideway_api::clock::SharedClock;

use super::DispatchConfig;
use crate::propose::Proposer;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::command::Command;
use crate::state::lifecycle::{MAX_COMPACT_BATCH, finished_at};
use crate::state::workloads::{ChangeCursor, WorkloadMap};

/// The terminal workloads by when they finished: what the loop compacts from. Kept up to
/// date from the workloads' journal of changed names, so a tick costs the changes since the
/// last one. Scanning every workload for the terminal ones, under the state lock on every
/// tick, held apply off for a time that grew with the backlog (a million pending workloads
/// and none terminal: the whole map walked every ten seconds to find nothing).
#[derive(Debug, Default)]
pub struct Finished {
    cursor: Option<ChangeCursor>,
    by_time: BTreeSet<(DateTime<Utc>, Arc<str>)>,
    of: HashMap<Arc<str>, DateTime<Utc>>,
}

/// What a tick takes under the state lock: a copy of the map, and the names changed since
/// the last tick (`None`: the journal does not reach back, so everything is looked at).
pub struct FinishedChanges {
    map: WorkloadMap,
    names: Option<imbl::Vector<Arc<str>>>,
    cursor: ChangeCursor,
}

impl FinishedChanges {
    /// Whether applying them walks the whole map (better done off the async workers).
    pub fn is_full(&self) -> bool {
        self.names.is_none()
    }
}

impl Finished {
    /// Under the lock: O(1) for the map, O(changes) for the names.
    pub fn changes(&self, state: &crate::state::FederationState) -> FinishedChanges {
        FinishedChanges {
            map: (*state.workloads).clone(),
            names: self.cursor.and_then(|c| state.workloads.changed_since(c)),
            cursor: state.workloads.cursor(),
        }
    }

    /// After the lock: brings the index up to date with the copy.
    pub fn apply(&mut self, changes: FinishedChanges) {
        let FinishedChanges { map, names, cursor } = changes;
        match names {
            None => {
                self.by_time.clear();
                self.of.clear();
                for (name, w) in &map {
                    if let Some(at) = finished_at(w) {
                        self.insert(name.shared().clone(), at);
                    }
                }
            }
            Some(names) => {
                for name in names {
                    if let Some(at) = self.of.remove(&name) {
                        self.by_time.remove(&(at, name.clone()));
                    }
                    if let Some((key, w)) = map.get_key_value(&*name)
                        && let Some(at) = finished_at(w)
                    {
                        self.insert(key.shared().clone(), at);
                    }
                }
            }
        }
        self.cursor = Some(cursor);
    }

    fn insert(&mut self, name: Arc<str>, at: DateTime<Utc>) {
        self.by_time.insert((at, name.clone()));
        self.of.insert(name, at);
    }

    /// Up to `limit` names of workloads that finished before `before`, oldest first.
    pub fn due(&self, before: DateTime<Utc>, limit: usize) -> Vec<String> {
        self.by_time
            .iter()
            .take_while(|(at, _)| *at < before)
            .take(limit)
            .map(|(_, n)| n.to_string())
            .collect()
    }
}

/// Compacts terminal workloads past their retention. Runs on every node; acts on the leader.
pub async fn compaction_loop(
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    cfg: DispatchConfig,
    clock: SharedClock,
) {
    let retain = chrono::Duration::from_std(cfg.retain_terminal)
        .unwrap_or_else(|_| chrono::Duration::days(36_500));
    let mut tick = tokio::time::interval(cfg.compaction_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut finished = Finished::default();
    loop {
        tick.tick().await;
        if !raft.is_leader() {
            // A follower's index would go stale; a new leader starts over from its state.
            finished = Finished::default();
            continue;
        }
        // Several batches per tick when a backlog built up, one entry each.
        loop {
            let before = clock.now() - retain;
            let changes = match data.read() {
                Ok(d) => finished.changes(&d.state),
                Err(_) => break,
            };
            if changes.is_full() {
                let mut taken = std::mem::take(&mut finished);
                let Ok(done) = tokio::task::spawn_blocking(move || {
                    taken.apply(changes);
                    taken
                })
                .await
                else {
                    break;
                };
                finished = done;
            } else {
                finished.apply(changes);
            }
            let names = finished.due(before, MAX_COMPACT_BATCH);
            if names.is_empty() {
                break;
            }
            let full = names.len() == MAX_COMPACT_BATCH;
            let n = names.len();
            match proposer
                .propose(Command::CompactWorkloads {
                    names,
                    before,
                    at: clock.now(),
                })
                .await
            {
                Ok(res) => tracing::debug!(proposed = n, ?res, "compacted terminal workloads"),
                Err(e) => {
                    tracing::warn!(error = %e, "compaction of terminal workloads failed");
                    break;
                }
            }
            if !full {
                break;
            }
        }
        compact_audit(&data, &proposer, &cfg, &clock).await;
    }
}

/// Proposes to drop the audit records past the retention, if there are any.
async fn compact_audit(
    data: &Arc<RwLock<StateMachineData>>,
    proposer: &Proposer,
    cfg: &DispatchConfig,
    clock: &SharedClock,
) {
    if cfg.audit_retain_count.is_none() && cfg.audit_retain_age.is_none() {
        return;
    }
    let since = cfg
        .audit_retain_age
        .and_then(|a| chrono::Duration::from_std(a).ok())
        .map(|a| clock.now() - a);
    let cut = match data.read() {
        Ok(d) => d.state.audit_retention_cut(cfg.audit_retain_count, since),
        Err(_) => return,
    };
    let Some(before_seq) = cut else { return };
    match proposer
        .propose(Command::CompactAudit {
            before_seq,
            at: clock.now(),
        })
        .await
    {
        Ok(res) => tracing::debug!(before_seq, ?res, "compacted the audit trail"),
        Err(e) => tracing::warn!(error = %e, "compaction of the audit trail failed"),
    }
}
