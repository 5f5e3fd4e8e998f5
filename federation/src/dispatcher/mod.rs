//! Leader-only loops: member liveness and health transitions, digest coalescing, quota
//! schedule transitions, and the scheduling cycle that runs the scheduler core and commits
//! its decisions.
//!
//! Every node runs these tasks; each pass first checks that this node leads, so a new leader
//! takes over at once and a deposed one stops acting. Everything they decide is proposed as a
//! log entry, never written around Raft.

mod convert;
pub mod cycle;
#[cfg(test)]
mod cycle_tests;
pub mod estimates;
pub mod liveness;
pub mod retention;
pub mod tidal;

use std::time::Duration;

/// Settings of the leader loops.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// How often agents are expected to heartbeat.
    pub heartbeat_interval: Duration,
    /// A Ready member whose heartbeats stop for this long becomes NotReady.
    pub not_ready_after: Duration,
    /// A member's digest is replicated at most this often, unless it changes significantly.
    pub digest_interval: Duration,
    /// How often the leader runs a scheduling cycle.
    pub cycle_interval: Duration,
    /// Terminal workloads stay readable this long after they finish, then are compacted.
    pub retain_terminal: Duration,
    /// How often the leader looks for terminal workloads past their retention.
    pub compaction_interval: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        let heartbeat_interval = Duration::from_secs(2);
        Self {
            heartbeat_interval,
            not_ready_after: heartbeat_interval * 3,
            digest_interval: Duration::from_secs(5),
            cycle_interval: Duration::from_millis(500),
            retain_terminal: Duration::from_secs(3600),
            compaction_interval: Duration::from_secs(10),
        }
    }
}
