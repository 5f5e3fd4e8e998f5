//! tideway-federation: the replicated federation layer of Tideway.
//!
//! Layers, bottom up: `state` (the replicated data and its pure apply), `raft` (log store,
//! state machine, snapshots, transport), `proposer` and `forward` (getting commands to the
//! leader in batches), `server` (the HTTP API), and `node` (a node's lifecycle). `scheduler`
//! is the pure decision core the leader, the simulator and policy dry-run share.

pub mod dispatcher;
pub mod forward;
pub mod node;
pub mod proposer;
pub mod raft;
pub mod server;
pub mod state;

pub use node::{Node, NodeConfig, NodeError};
