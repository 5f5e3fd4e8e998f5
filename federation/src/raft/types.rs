//! The Raft type configuration of the federation group.
//!
//! Every durable decision of Tideway is an entry of this one Raft group, so the application
//! data is the state machine's [`Request`] and its answer is a [`Response`].

use std::io::Cursor;

use crate::state::command::{Request, Response};

openraft::declare_raft_types!(
    /// The type configuration of the federation Raft group.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = super::node_info::NodeInfo,
);

/// Snapshot bytes travel whole: the federation state is a few tens of MB at most, so
/// chunking buys nothing and whole transfers are simpler to make atomic.
pub type SnapshotData = Cursor<Vec<u8>>;

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig, super::state_machine::StateMachineStore>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
