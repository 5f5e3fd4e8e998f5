//! Replication: the Raft type config, the durable log, the state machine, snapshots and the
//! HTTP transport between federation nodes.

pub mod append_stream;
pub mod copy_slot;
pub mod digest;
pub mod digest_warmer;
pub mod direct_io;
mod heartbeat_relay;
pub mod leader_watch;
pub mod log_store;
pub mod log_tail;
mod log_writer;
pub mod network;
pub mod node_info;
pub mod peer_plane;
pub mod peer_report;
pub mod received;
pub mod removal;
pub mod rtt;
pub(crate) mod snapshot_decode;
pub mod snapshot_file;
pub mod snapshot_policy;
pub mod state_machine;
pub mod transport;
pub mod types;

use openraft::RaftMetrics;
use openraft::async_runtime::watch::WatchReceiver;

/// A copy of the node's current Raft metrics.
pub fn metrics(raft: &types::Raft) -> RaftMetrics<types::TypeConfig> {
    raft.metrics().borrow_watched().clone()
}
