//! What a federation node says about itself and its Raft group (`GET /v1/cluster/status`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One node's own view of the Raft group and of its state machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub id: u64,
    /// Leader, Follower, Candidate or Learner.
    pub state: String,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: Option<u64>,
    pub committed: Option<u64>,
    pub last_applied: Option<u64>,
    pub snapshot: Option<u64>,
    pub purged: Option<u64>,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// Member id to address, from the membership config.
    pub members: BTreeMap<u64, String>,
    /// Digest of the replicated state at `last_applied`; equal on nodes at the same index.
    pub state_digest: String,
    pub workloads: usize,
    /// Durable log writes (each one fsync) since this process started.
    pub log_syncs: u64,
    /// Log entries appended since this process started.
    pub log_entries: u64,
}
