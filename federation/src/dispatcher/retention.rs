//! Retention of terminal workloads on the leader: once a finished, failed or cancelled
//! workload is older than the retention time, the leader proposes to compact it out of the
//! live state, so memory stays bounded on a federation that runs for months. The audit
//! trail is compacted the same way, by the configured count or age of records.

use std::sync::{Arc, RwLock};

use tideway_api::clock::SharedClock;

use super::DispatchConfig;
use crate::propose::Proposer;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::command::Command;
use crate::state::lifecycle::MAX_COMPACT_BATCH;

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
    loop {
        tick.tick().await;
        if !raft.is_leader() {
            continue;
        }
        // Several batches per tick when a backlog built up, one entry each.
        loop {
            let before = clock.now() - retain;
            let names = match data.read() {
                Ok(d) => d.state.compactable(before, MAX_COMPACT_BATCH),
                Err(_) => break,
            };
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
