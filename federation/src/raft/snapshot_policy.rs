//! When a node builds a snapshot: after at least `--snapshot-every` log entries, *and* once
//! the log since the last snapshot holds at least half as many bytes as that snapshot did,
//! both scaled by a factor per node between 1 and 1.5 ([`stagger`]).
//!
//! A fixed entry count makes the cost of snapshots grow with the state: every 20,000 entries
//! the whole state is encoded again on each node, at a CPU cost that grows with the
//! workloads (measured: docs/benchmarks/scale.md). Under a steady submission load a 2-core
//! machine then spent a core on snapshots alone, and failovers slowed down as the state grew.
//! Tying the interval to the snapshot's size bounds the work: encoding a snapshot costs about
//! twice what writing the log since the last one did. Restart stays bounded as well, since
//! the log to replay is never much more than half the snapshot. (Redis rewrites its
//! append-only file on a rule of the same kind, when the file has grown by a share of its
//! last rewrite.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::log_store::LogStats;
use super::types::Raft;

/// Spreads the nodes' snapshots apart: node `id` waits `stagger(id)` times the entries and
/// the log bytes the rule asks for, a factor in [1, 1.5). Every node applies the same log, so
/// without it all of them reached the rule within a second of each other and built their
/// snapshots at once: at a million workloads, three nodes encoding a gigabyte each on the
/// same cores, and on separate machines a majority of the group slowed down together, which
/// is what a commit waits for. Consecutive ids land far apart (multiples of the golden
/// ratio's fractional part): 1.31, 1.12 and 1.43 for nodes 1, 2 and 3.
pub fn stagger(id: u64) -> f64 {
    const SPREAD: f64 = 0.618_033_988_749_895;
    // Only the fractional part matters; the id's low bits carry it.
    let frac = ((id % 1_000_003) as f64 * SPREAD).fract();
    1.0 + frac / 2.0
}

/// How often a node looks at its log to decide.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Whether a snapshot is due, given the entries and log bytes written since the last one and
/// that snapshot's size.
pub fn due(
    entries_since: u64,
    log_bytes_since: u64,
    snapshot_bytes: u64,
    min_entries: u64,
) -> bool {
    entries_since >= min_entries.max(1) && log_bytes_since.saturating_mul(2) >= snapshot_bytes
}

/// [`due`] for node `id`: both of the rule's amounts scaled by [`stagger`].
pub fn due_on(
    id: u64,
    entries_since: u64,
    log_bytes_since: u64,
    snapshot_bytes: u64,
    min_entries: u64,
) -> bool {
    let f = stagger(id);
    let scaled = |v: u64| (v as f64 * f).round() as u64;
    due(
        entries_since,
        log_bytes_since,
        scaled(snapshot_bytes),
        scaled(min_entries),
    )
}

/// Triggers this node's snapshots by [`due_on`], for as long as the node runs.
pub async fn snapshot_loop(
    id: u64,
    raft: Raft,
    log: Arc<LogStats>,
    snapshot_bytes: Arc<AtomicU64>,
    min_entries: u64,
) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The log bytes written when the snapshot at `seen` was found: what the next one counts
    // from. After a restart the log replayed since the snapshot is not counted (at most half
    // a snapshot's worth, by this rule).
    let mut seen = None;
    let mut mark = log.bytes.load(Ordering::Relaxed);
    loop {
        tick.tick().await;
        let m = super::metrics(&raft);
        let snapshot = m.snapshot.map(|l| l.index());
        if snapshot != seen {
            seen = snapshot;
            mark = log.bytes.load(Ordering::Relaxed);
        }
        let applied = m.last_applied.map_or(0, |l| l.index());
        let entries_since = applied.saturating_sub(snapshot.unwrap_or(0));
        let bytes_since = log.bytes.load(Ordering::Relaxed).saturating_sub(mark);
        if due_on(
            id,
            entries_since,
            bytes_since,
            snapshot_bytes.load(Ordering::Relaxed),
            min_entries,
        ) {
            tracing::debug!(entries_since, bytes_since, "building a snapshot");
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
            until_built(&raft, snapshot).await;
        }
    }
}

/// The longest a node waits for a snapshot it asked for before it may ask again (one that
/// failed never shows).
const MAX_BUILD_WAIT: Duration = Duration::from_secs(120);

/// Waits until the metrics show a snapshot other than `before`: the one just asked for, built.
/// A build in progress does not show in the metrics until it is done, and asking again
/// meanwhile queues a second build behind the first: at a million workloads nodes wrote two
/// snapshots back to back, the second 800 entries after the first, when the loop waited a
/// fixed second instead (measured: docs/benchmarks/scale.md).
async fn until_built(raft: &Raft, before: Option<u64>) {
    // Times out (a build that failed never shows) or sees the snapshot: either way the loop
    // goes on.
    let _ = raft
        .wait(Some(MAX_BUILD_WAIT))
        .metrics(
            |m| m.snapshot.map(|l| l.index()) != before,
            "snapshot built",
        )
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_count_is_a_floor_and_the_snapshot_size_sets_the_pace() {
        // A small state: the entry count decides, as `--snapshot-every` always did.
        assert!(!due(19_999, 10_000_000, 50_000, 20_000));
        assert!(due(20_000, 10_000_000, 50_000, 20_000));
        // A large state: 20,000 entries are not enough while the log since the snapshot is
        // less than half the snapshot.
        assert!(!due(20_000, 9_000_000, 400_000_000, 20_000));
        assert!(!due(1_000_000, 199_999_999, 400_000_000, 20_000));
        assert!(due(1_000_000, 200_000_000, 400_000_000, 20_000));
        // No snapshot yet: the entry count alone.
        assert!(due(20_000, 0, 0, 20_000));
        // A zero floor is read as one entry, never a snapshot of nothing new.
        assert!(!due(0, 0, 0, 0));
    }

    #[test]
    fn nodes_reach_the_rule_at_different_points() {
        let f: Vec<f64> = (1..=7).map(stagger).collect();
        for (i, a) in f.iter().enumerate() {
            assert!((1.0..1.5).contains(a), "node {}: {a}", i + 1);
            for b in &f[..i] {
                // Any two of the first seven nodes at least 4% of the floor apart.
                assert!((a - b).abs() >= 0.04, "{f:?}");
            }
        }
        // Nodes 1, 2 and 3 of a group: 1.31, 1.12 and 1.43 times the floor.
        assert!(!due_on(1, 26_000, 0, 0, 20_000) && due_on(1, 26_200, 0, 0, 20_000));
        assert!(!due_on(2, 22_300, 0, 0, 20_000) && due_on(2, 22_400, 0, 0, 20_000));
        assert!(!due_on(3, 28_500, 0, 0, 20_000) && due_on(3, 28_600, 0, 0, 20_000));
        // The size rule is scaled the same way: node 3 waits for 1.43 times half the snapshot.
        assert!(!due_on(3, 1_000_000, 280_000_000, 400_000_000, 20_000));
        assert!(due_on(3, 1_000_000, 286_000_000, 400_000_000, 20_000));
        // Huge ids do not overflow.
        assert!((1.0..1.5).contains(&stagger(u64::MAX)));
    }
}
