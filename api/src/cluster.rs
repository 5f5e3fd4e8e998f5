//! The federation's own membership: what a node says about itself and its Raft group
//! (`GET /v1/cluster/status`), the requests that change the group (join, remove), their
//! acknowledgements, and the fleet-wide report `tideway cluster status -o json` prints.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// One node's own view of the Raft group and of its state machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// This node's Raft id.
    pub id: u64,
    /// Leader, Follower, Candidate or Learner.
    pub state: String,
    /// The Raft term this node is in.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<u64>,
    /// Index of the last entry in this node's log.
    pub last_log_index: Option<u64>,
    /// Highest index this node knows to be committed.
    pub committed: Option<u64>,
    /// Highest index applied to this node's state machine.
    pub last_applied: Option<u64>,
    /// Index the latest snapshot covers.
    pub snapshot: Option<u64>,
    /// Highest index purged from the log.
    pub purged: Option<u64>,
    /// Voting members.
    pub voters: Vec<u64>,
    /// Non-voting members catching up.
    pub learners: Vec<u64>,
    /// Member id to address, from the membership config.
    pub members: BTreeMap<u64, String>,
    /// Digest of the replicated state at `last_applied`; equal on nodes at the same index.
    /// Left out when the request asked for none (`?digest=false`): encoding a large state
    /// for it holds off apply, so pollers that only look for the leader or an index skip it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_digest: Option<String>,
    /// Workloads in this node's copy of the state.
    pub workloads: usize,
    /// Durable log writes (each one fsync) since this process started.
    pub log_syncs: u64,
    /// Log entries appended since this process started.
    pub log_entries: u64,
    /// Set when this node has been removed from the federation: it serves nothing but its
    /// status, and says here why and which members it last knew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<RemovedNotice>,
    /// The round trip this node has measured to each peer it sends Raft heartbeats to (a
    /// leader: each follower), by Raft id; empty on a node that has not led. Nodes in other
    /// regions show it here, and the timeouts to choose follow from it (docs/operations.md,
    /// "Across regions").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub peer_rtt: BTreeMap<u64, PeerRtt>,
}

/// A measured round trip to one peer: smoothed as TCP smooths it (RFC 6298).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PeerRtt {
    /// Smoothed round trip of a heartbeat, in milliseconds.
    pub rtt_ms: f64,
    /// Its mean deviation, in milliseconds.
    pub rttvar_ms: f64,
    /// How long the next heartbeat to the peer may take before it is given up:
    /// `rtt + 4·rttvar`, at least 50 ms, at most 5 s.
    pub deadline_ms: f64,
    /// Heartbeats measured since this node started.
    pub samples: u64,
}

/// What a node knows of its own removal from the federation: sent by the leader that removed
/// it, or seen in a membership it applied that no longer lists it; kept in its data directory
/// so that a restart does not bring it back serving a stale copy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RemovedNotice {
    /// The Raft id of the removed node.
    pub id: u64,
    /// The members (Raft id to API address) of the federation after the removal, as last
    /// known: where clients should go instead.
    pub members: BTreeMap<u64, String>,
    /// How the node learned it: who removed it, or which membership left it out.
    pub reason: String,
}

/// `POST /v1/cluster/join`: add a node as a learner; with `promote`, make it a voter once it
/// has caught up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    /// The joining node's Raft id.
    pub id: u64,
    /// Where clients and agents reach its API (`HOST:PORT`).
    pub addr: String,
    /// Where the other nodes reach its peer plane (Raft and forwarding), when it listens for
    /// them apart from the API (`--peer-listen`); absent, they use `addr`.
    #[serde(default, rename = "peerAddr", skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
    /// Promote the node to voter as soon as it has caught up (what `tideway server --join`
    /// asks for unless `--learner`); otherwise it stays a learner until an admin promotes it
    /// (`POST /v1/cluster/promote`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub promote: bool,
}

/// `POST /v1/cluster/promote`: make a learner that has caught up a voter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PromoteRequest {
    /// The learner's Raft id.
    pub id: u64,
}

/// The answer to a promotion: the node is a voter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PromoteAck {
    /// The id of the node that is now a voter.
    pub promoted: u64,
    /// The leader's log index the learner had replicated when it was promoted.
    pub matched: u64,
}

/// The answer to a join: the node is a voter at `addr`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinAck {
    /// Its address, as given in the request.
    pub addr: String,
    /// The id of the node that joined.
    pub joined: u64,
}

/// `POST /v1/cluster/remove`: remove a voter or a learner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RemoveRequest {
    /// The Raft id of the node to remove.
    pub id: u64,
}

/// The answer to a remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RemoveAck {
    /// The id of the node that is no longer a member.
    pub removed: u64,
}

/// The answer to `POST /v1/cluster/snapshot`. Fields in alphabetical order: that is the
/// order `tideway cluster snapshot` has always printed them in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotAck {
    /// Highest log index purged after the snapshot.
    pub purged: Option<u64>,
    /// The index the new snapshot covers.
    pub snapshot: u64,
}

/// `POST /v1/debug/partition` (fault injection, tests only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PartitionRequest {
    /// Peers this node stops talking to; empty heals.
    pub blocked: Vec<u64>,
}

/// The answer to a partition request: the peers now blocked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PartitionAck {
    /// Peers this node no longer talks to.
    pub blocked: BTreeSet<u64>,
}

/// `tideway cluster status -o json`: the group as one node sees it, and each member's own
/// status. Fields in alphabetical order, as the command has always printed them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterReport {
    /// The leader, as the asked node knows it.
    pub leader: Option<u64>,
    /// Non-voting members.
    pub learners: Vec<u64>,
    /// Every member, asked directly.
    pub nodes: Vec<NodeReport>,
    /// The asked node's term.
    pub term: u64,
    /// Voting members.
    pub voters: Vec<u64>,
}

/// One member in a [`ClusterReport`]: its own status, or why it could not be asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeReport {
    /// Its address from the membership config.
    pub addr: String,
    /// Why it could not be asked (when not reachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its Raft id.
    pub id: u64,
    /// Whether it answered.
    pub reachable: bool,
    /// What it said about itself (when reachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeStatus>,
}

impl NodeReport {
    /// A member's entry from the result of asking it.
    pub fn new(id: u64, addr: String, asked: Result<NodeStatus, String>) -> Self {
        match asked {
            Ok(s) => Self {
                addr,
                error: None,
                id,
                reachable: true,
                status: Some(s),
            },
            Err(e) => Self {
                addr,
                error: Some(e),
                id,
                reachable: false,
                status: None,
            },
        }
    }
}
