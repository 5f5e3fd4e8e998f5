//! The Raft type configuration of the federation group.
//!
//! Every durable decision of Tideway is an entry of this one Raft group, so the application
//! data is the state machine's [`Request`] and its answer is a [`Response`].

use crate::state::command::{Request, Response};

openraft::declare_raft_types!(
    /// The type configuration of the federation Raft group.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = super::node_info::NodeInfo,
);

/// A snapshot's state part: in memory, or in the snapshot file until it is sent. It travels
/// whole (chunking buys nothing at a few hundred MB, and whole transfers are simpler to make
/// atomic), but it is read from disk only when a follower needs it: building a snapshot and
/// a node's start need only its meta.
pub type SnapshotData = super::snapshot_file::Body;

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig, super::state_machine::StateMachineStore>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
