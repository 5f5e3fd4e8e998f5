//! Watch of workloads as a long-poll from a resource version (a log index).
//!
//! Every change of a workload sets its `metadata.resourceVersion` to the index of the entry
//! that made it, so "what changed after N" is the workloads whose version is above N, and
//! the workloads compacted after N are the `Compacted` audit records above N. An answer
//! reflects this node's state at some applied index A and says `resourceVersion: A` (or less,
//! when the page is cut), so the next call from there misses nothing; a node that has not
//! applied N yet first waits until it has, so resuming on another node is safe too.
//!
//! The deletions come from the audit trail's `Compacted` records; once the trail itself is
//! cut (retention), a watch from before the cut would silently miss deletions, so it is
//! answered 410 Gone naming the oldest version it can resume from, and the client lists
//! again from 0, as a Kubernetes reflector does.
//!
//! Long-poll rather than server-sent events: each answer is one ordinary JSON document that
//! any HTTP client, proxy and the typed client handle, and resuming after a disconnect is the
//! same call as the next poll. A client that watches keeps one request open per poll; the
//! wait is bounded (`timeoutSeconds`, at most [`MAX_WAIT_SECS`]).

use std::time::Duration;

use tideway_api::audit::AuditKind;
use tideway_api::watch::{WatchEvent, WatchEventType, WatchPage};

use super::AppState;
use super::authz::{self, Access};
use super::error::ApiError;

/// The longest one watch call waits for a change.
pub const MAX_WAIT_SECS: u64 = 60;
/// The default wait.
pub const DEFAULT_WAIT_SECS: u64 = 30;
/// At most this many events per answer (more in one log entry are never split).
pub const MAX_EVENTS: usize = 1000;

/// What a watch looks at.
#[derive(Debug, Clone, Default)]
pub struct WatchScope {
    /// One workload, by name or UID.
    pub name: Option<String>,
    /// The workloads of one queue.
    pub queue: Option<String>,
}

/// The changes after `from` in scope, as this node holds them.
fn changes(
    st: &AppState,
    access: Option<&Access>,
    scope: &WatchScope,
    from: u64,
) -> Result<(Vec<WatchEvent>, u64), ApiError> {
    st.read(|d| {
        let applied = d.last_applied.map(|l| l.index()).unwrap_or(0);
        let state = &d.state;
        // Deletions are known from the audit trail; where it was cut, they are lost. From 0
        // is a full list, which needs none.
        let oldest = state.audit.dropped_through;
        if from > 0 && from < oldest {
            return Err(ApiError::Gone {
                requested: from,
                oldest,
            });
        }
        let name = scope
            .name
            .as_deref()
            .map(|id| state.workload(id).map_or(id, |w| w.metadata.name.as_str()));
        let added: std::collections::BTreeSet<&str> = state
            .audit
            .events
            .iter()
            .rev()
            .take_while(|e| e.index > from)
            .filter(|e| e.kind == AuditKind::Submitted)
            .filter_map(|e| e.workload.as_deref())
            .collect();
        let mut items: Vec<WatchEvent> = Vec::new();
        let in_scope = |n: &str, queue: Option<&str>| {
            name.is_none_or(|x| x == n)
                && scope.queue.as_deref().is_none_or(|q| Some(q) == queue)
                && queue.is_some_and(|q| authz::readable(access, q))
        };
        for (n, w) in &state.workloads {
            let rv = w.metadata.resource_version.unwrap_or(0);
            if rv <= from || !in_scope(n, Some(&w.spec.queue)) {
                continue;
            }
            let kind = if from == 0 || added.contains(&**n) {
                WatchEventType::Added
            } else {
                WatchEventType::Modified
            };
            items.push(WatchEvent {
                kind,
                name: n.to_string(),
                resource_version: rv,
                object: Some(tideway_api::Workload::clone(w)),
            });
        }
        for e in state
            .audit
            .events
            .iter()
            .rev()
            .take_while(|e| e.index > from)
        {
            if e.kind != AuditKind::Compacted {
                continue;
            }
            let Some(n) = &e.workload else { continue };
            // A compacted record names no queue; only a caller who reads every queue sees it,
            // or the watcher of that one name (who saw it before).
            let visible = access.is_none_or(Access::reads_all) || name == Some(n.as_str());
            if visible && name.is_none_or(|x| x == n) && scope.queue.is_none() {
                items.push(WatchEvent {
                    kind: WatchEventType::Deleted,
                    name: n.to_string(),
                    resource_version: e.index,
                    object: None,
                });
            }
        }
        items.sort_by(|a, b| {
            a.resource_version
                .cmp(&b.resource_version)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut version = applied.max(from);
        if items.len() > MAX_EVENTS {
            let cut = items[MAX_EVENTS - 1].resource_version;
            items.retain(|e| e.resource_version <= cut);
            version = cut;
        }
        Ok((items, version))
    })?
}

/// Answers the changes after `from`, waiting up to `wait` for the first.
pub async fn watch(
    st: &AppState,
    access: Option<&Access>,
    scope: &WatchScope,
    from: u64,
    wait: Duration,
) -> Result<WatchPage, ApiError> {
    let deadline = tokio::time::Instant::now() + wait.min(Duration::from_secs(MAX_WAIT_SECS));
    // A version this node has not applied yet (the client watched another node): catch up
    // first, or the answer would claim a version it does not reflect.
    let applied = st.read(|d| d.last_applied.map(|l| l.index()).unwrap_or(0))?;
    if applied < from {
        // A version beyond what the leader has committed was never answered by any node: a
        // client's mistake, which no wait or retry mends.
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if let Some(last) = federation_index(st, left).await
            && from > last
        {
            return Err(ApiError::field(
                "query:resourceVersion",
                format!(
                    "version {from} is ahead of the federation's last committed version \
                     {last}; watch from a version a list or watch answered (0 lists \
                     everything)"
                ),
            ));
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match st
            .raft
            .wait(Some(left))
            .applied_index_at_least(Some(from), "watch catch-up")
            .await
        {
            Ok(_) => {}
            // Not caught up within the watch's own time: answered as any watch that saw no
            // change, from the same version, and the client asks again.
            Err(openraft::metrics::WaitError::Timeout(..)) => {
                return Ok(WatchPage {
                    items: Vec::new(),
                    resource_version: from,
                });
            }
            Err(e) => return Err(super::wait_failed("catching up to the watched version", &e)),
        }
    }
    loop {
        let (items, version) = changes(st, access, scope, from)?;
        let now = tokio::time::Instant::now();
        if !items.is_empty() || now >= deadline {
            return Ok(WatchPage {
                items,
                resource_version: version,
            });
        }
        let _ = st
            .raft
            .wait(Some(deadline - now))
            .applied_index_at_least(Some(version + 1), "watch")
            .await;
    }
}

/// The federation's last committed index, as the leader knows it (its ReadIndex), within
/// `within`; `None` when no leader answers in time (the caller then waits instead of
/// judging). Every version any node answered is at most this.
async fn federation_index(st: &AppState, within: Duration) -> Option<u64> {
    let me = *st.raft.node_id();
    let ask = async {
        match st.raft.current_leader().await? {
            l if l == me => st
                .raft
                .get_read_log_id(openraft::ReadPolicy::ReadIndex)
                .await
                .ok()
                .map(|(read, _)| read.index()),
            l => st.forwarder.read_index(l).await.ok(),
        }
    };
    tokio::time::timeout(within, ask).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use openraft::metrics::WaitError;

    /// Raft's wait error carries its whole metrics line; none of it reaches a client.
    #[test]
    fn a_failed_wait_answers_without_raft_state() {
        let e = WaitError::Timeout(
            std::time::Duration::from_millis(1500),
            "watch catch-up latest: Metrics{id:2, Follower, term:3, vote:<T3-N1:Q>, \
             last_log:T3-N1.88, membership:{voters:[{1,2,3}]}}"
                .into(),
        );
        let p = super::super::wait_failed("catching up to the watched version", &e).to_problem();
        assert_eq!(p.status, 503);
        let detail = p.detail.unwrap_or_default();
        assert!(
            detail.contains("catching up") && detail.contains("1500 ms"),
            "{detail}"
        );
        for internal in ["Metrics", "vote", "last_log", "membership", "term"] {
            assert!(!detail.contains(internal), "{internal} in {detail}");
        }
    }
}
