//! Whether this node is still a member of the federation.
//!
//! A removed node gets no more appends: its log and its copy of the membership stop where
//! they were, so on its own it goes on believing it is a voter. It then forwarded writes to
//! the leader (answered 201 on a node that was no longer part of the group) and answered reads
//! with 503s and hangs. A node learns of its removal in two ways: the leader that removed it
//! tells it (best effort, right after the change committed), and a membership it applied
//! after listing itself no longer does. Either way it records the fact in its data directory
//! (a restart must not bring it back serving a stale copy), logs it once, and from then on
//! serves only its status, naming the members it last knew.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use openraft::async_runtime::watch::WatchReceiver;

use tideway_api::cluster::RemovedNotice;

use super::types::{NodeId, Raft};

/// The marker's file name in the data directory.
const MARKER: &str = "removed.json";

#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    #[error("recording the removal in {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a removal record: {source}")]
    Decode {
        path: String,
        source: serde_json::Error,
    },
}

/// This node's removal, once known.
#[derive(Debug)]
pub struct Removal {
    marker: Option<PathBuf>,
    notice: OnceLock<RemovedNotice>,
}

impl Removal {
    /// Reads the marker of an earlier removal from `data_dir`, if there is one.
    pub fn open(data_dir: &Path) -> Result<Self, RemovalError> {
        let marker = data_dir.join(MARKER);
        let notice = OnceLock::new();
        match std::fs::read(&marker) {
            Ok(bytes) => {
                let n: RemovedNotice =
                    serde_json::from_slice(&bytes).map_err(|source| RemovalError::Decode {
                        path: marker.display().to_string(),
                        source,
                    })?;
                tracing::warn!(
                    id = n.id,
                    reason = %n.reason,
                    "this node was removed from the federation: it serves only its status; \
                     to bring it back, empty its data directory and join it again"
                );
                let _ = notice.set(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(RemovalError::Read {
                    path: marker.display().to_string(),
                    source,
                });
            }
        }
        Ok(Self {
            marker: Some(marker),
            notice,
        })
    }

    /// A removal that is never recorded on disk, for tests.
    pub fn in_memory() -> Self {
        Self {
            marker: None,
            notice: OnceLock::new(),
        }
    }

    /// The removal, if this node has been removed.
    pub fn get(&self) -> Option<&RemovedNotice> {
        self.notice.get()
    }

    /// Records the removal (durably, before it takes effect) and logs it; only the first call
    /// does anything. Answers whether this call recorded it.
    pub fn mark(&self, notice: RemovedNotice) -> Result<bool, RemovalError> {
        if self.notice.get().is_some() {
            return Ok(false);
        }
        if let Some(path) = &self.marker {
            write_durably(path, &notice).map_err(|source| RemovalError::Write {
                path: path.display().to_string(),
                source,
            })?;
        }
        let members = describe(&notice.members);
        if self.notice.set(notice.clone()).is_err() {
            return Ok(false);
        }
        tracing::warn!(
            id = notice.id,
            reason = %notice.reason,
            members = %members,
            "this node was removed from the federation: from now on it serves only its \
             status; clients should use the members listed"
        );
        Ok(true)
    }

    /// What a refused request is told.
    pub fn refusal(&self) -> Option<String> {
        self.get().map(|n| {
            format!(
                "node {} is no longer a member of the federation ({}); use one of the members: {}",
                n.id,
                n.reason,
                describe(&n.members)
            )
        })
    }
}

/// `1 (127.0.0.1:7401), 3 (127.0.0.1:7403)`, or `none known`.
fn describe(members: &BTreeMap<u64, String>) -> String {
    if members.is_empty() {
        return "none known".to_owned();
    }
    members
        .iter()
        .map(|(id, addr)| format!("{id} ({addr})"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn write_durably(path: &Path, notice: &RemovedNotice) -> std::io::Result<()> {
    use std::io::Write;
    let bytes = serde_json::to_vec_pretty(notice).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Watches this node's own copy of the membership: once it has listed this node, a later one
/// that does not means the node was removed (the leader's notice may never have arrived, e.g.
/// when this node was down at the time). A node still joining has never been listed, so the
/// memberships it replays before its own admission do not count.
pub async fn watch_membership(raft: Raft, removal: std::sync::Arc<Removal>) {
    let me: NodeId = *raft.node_id();
    let mut rx = raft.metrics();
    let mut listed = false;
    loop {
        // The metrics change with every commit: only a membership without this node, after
        // one with it, is worth building a notice from.
        let gone = {
            let m = rx.borrow_and_update();
            let mem = m.membership_config.membership();
            let here = mem.nodes().any(|(id, _)| *id == me);
            listed |= here;
            (listed && !here).then(|| RemovedNotice {
                id: me,
                members: api_addrs(mem),
                reason: format!(
                    "the membership at log index {} no longer lists this node",
                    m.membership_config
                        .log_id()
                        .as_ref()
                        .map_or(0, |l| l.index())
                ),
            })
        };
        if let Some(notice) = gone {
            if let Err(e) = removal.mark(notice) {
                tracing::error!(error = %e, "the removal could not be recorded");
            }
            return;
        }
        if removal.get().is_some() || rx.changed().await.is_err() {
            return;
        }
    }
}

/// Each member's Raft id and API address: what `cluster status` lists and what a removed node
/// names for its clients to go to.
pub fn api_addrs(
    mem: &openraft::Membership<NodeId, super::node_info::NodeInfo>,
) -> BTreeMap<u64, String> {
    mem.nodes().map(|(id, n)| (*id, n.addr.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice() -> RemovedNotice {
        RemovedNotice {
            id: 2,
            members: BTreeMap::from([(1, "127.0.0.1:7401".into()), (3, "127.0.0.1:7403".into())]),
            reason: "removed by the leader, node 1".into(),
        }
    }

    #[test]
    fn a_removal_is_recorded_once_and_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = Removal::open(dir.path()).expect("open");
        assert!(r.get().is_none());
        assert!(r.refusal().is_none());
        assert!(r.mark(notice()).expect("mark"));
        let mut other = notice();
        other.reason = "a second word".into();
        assert!(!r.mark(other).expect("mark again"), "only the first counts");
        let refusal = r.refusal().expect("refused");
        assert!(
            refusal.contains("node 2 is no longer a member"),
            "{refusal}"
        );
        assert!(
            refusal.contains("1 (127.0.0.1:7401), 3 (127.0.0.1:7403)"),
            "{refusal}"
        );
        let again = Removal::open(dir.path()).expect("reopen");
        assert_eq!(again.get(), Some(&notice()));
    }

    #[test]
    fn a_damaged_marker_is_an_error_not_a_member() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(MARKER), b"[2]").expect("write");
        assert!(matches!(
            Removal::open(dir.path()),
            Err(RemovalError::Decode { .. })
        ));
    }
}
