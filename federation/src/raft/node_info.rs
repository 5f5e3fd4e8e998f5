//! What the membership records about each federation node: where clients reach its API and
//! where the other nodes reach its peer plane.
//!
//! Stored in every membership log entry and snapshot, so it must stay decodable from what
//! older versions wrote: those wrote openraft's `BasicNode` (`{addr}`), and `peer_addr` is
//! an optional field that decodes as absent from them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node's API address (`HOST:PORT`): what agents, the CLI and `cluster status` use.
    pub addr: String,
    /// Its peer-plane address (`--peer-listen`), when Raft and forwarding are served apart
    /// from the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
}

impl NodeInfo {
    pub fn new(addr: impl Into<String>, peer_addr: Option<String>) -> Self {
        Self {
            addr: addr.into(),
            peer_addr,
        }
    }

    /// Where another node sends Raft RPCs and forwarded requests.
    pub fn peer(&self) -> &str {
        self.peer_addr.as_deref().unwrap_or(&self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A membership written before the peer plane existed (openraft's `BasicNode`) still
    /// decodes, and its peer address is its API address.
    #[test]
    fn decodes_what_basic_node_wrote() {
        let old = rmp_serde::to_vec_named(&openraft::BasicNode {
            addr: "10.0.0.1:7400".into(),
        })
        .unwrap();
        let n: NodeInfo = rmp_serde::from_slice(&old).unwrap();
        assert_eq!(n, NodeInfo::new("10.0.0.1:7400", None));
        assert_eq!(n.peer(), "10.0.0.1:7400");
        let new = NodeInfo::new("10.0.0.1:7400", Some("10.0.0.1:7500".into()));
        let back: NodeInfo =
            rmp_serde::from_slice(&rmp_serde::to_vec_named(&new).unwrap()).unwrap();
        assert_eq!(back.peer(), "10.0.0.1:7500");
    }
}
