//! tideway-federation: the replicated federation layer of Tideway.
//!
//! Layers, top down, each using only those below it: `node` (a node's lifecycle), `server`
//! (the HTTP API), `dispatcher` (the leader loops: liveness and scheduling cycles), `propose`
//! (batching commands and forwarding every leader-only request), `raft` (log store, state
//! machine, snapshots, transport) and `state` (the replicated data and its pure apply).
//! `metrics` is the registry the layers record into; the server renders it. `hex` is the
//! lowercase hex the stored digests use; `scale_mix` the workloads the scale bench submits; `two_threads` splits a
//! restart's work over two threads, `parallel_encode` a snapshot's encoding over several.

pub mod dispatcher;
pub mod hex;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod node;
pub(crate) mod parallel_encode;
pub mod propose;
pub mod raft;
pub mod scale_mix;
pub mod server;
pub mod state;
pub mod thread_stats;
pub mod tls;
mod two_threads;

pub use node::{Node, NodeConfig, NodeError};
