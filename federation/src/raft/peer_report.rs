//! One log line per unreachable peer per [`REPORT_EVERY`], not one per failed RPC.
//!
//! A leader sends a dead follower a heartbeat every heartbeat interval and retries its
//! appends as fast as they fail; logging each failure (as openraft does, at WARN, with the
//! error's whole `Debug` chain) buried everything else in the log at ~18 lines a second.
//! Every site that talks to a peer (the Raft client in `network`, the follower's leader
//! watch in `leader_watch`) reports its outcome here instead: the first failure is logged
//! with its error, then at most one line per peer every [`REPORT_EVERY`] with the count of
//! failures since, and one line when the peer answers again. [`QUIET_OPENRAFT`] turns
//! openraft's own per-RPC lines down so that these are the only ones.

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tideway_api::clock::{RealClock, SharedClock};

use super::types::NodeId;

/// How often a peer that keeps failing is logged again.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Log directives (for `tracing_subscriber::EnvFilter`) that keep openraft's line per failed
/// heartbeat and per failed replication RPC out of the log: [`PeerReports`] says the same,
/// rate-limited. Added to the filter unless the operator's own filter names these targets.
pub const QUIET_OPENRAFT: &[&str] = &[
    "openraft::core::heartbeat=error",
    "openraft::replication=error",
];

/// What one outcome calls for in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Nothing: the peer is fine, or it failed again within the interval.
    Quiet,
    /// The first failure after the peer was fine.
    Down,
    /// A failure an interval or more after the last line: `failures` since that line,
    /// `down_for` since the first.
    StillDown { failures: u64, down_for: Duration },
    /// The peer answered after failing `failures` times over `down_for`.
    Recovered { failures: u64, down_for: Duration },
}

#[derive(Debug)]
struct Failing {
    since: Instant,
    last_line: Instant,
    /// Failures since the last line.
    unreported: u64,
    total: u64,
}

/// Per-peer failure state shared by every client of this node's peers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PeerReports {
    /// Raft's timers run on the machine's monotonic clock, never a scaled one (see
    /// `leader_watch::Contact`); so does this.
    clock: SharedClock,
    every: Duration,
    failing: Arc<Mutex<HashMap<NodeId, Failing>>>,
}

impl Default for PeerReports {
    fn default() -> Self {
        Self::new(RealClock::shared(), REPORT_EVERY)
    }
}

impl PeerReports {
    pub fn new(clock: SharedClock, every: Duration) -> Self {
        Self {
            clock,
            every,
            failing: Arc::default(),
        }
    }

    /// Notes a failed request to `peer` and logs it if it is due.
    pub fn failed(&self, peer: NodeId, addr: &str, rpc: &str, error: &dyn Display) {
        match self.note_failure(peer) {
            Report::Down => tracing::warn!(
                peer,
                addr,
                rpc,
                error = %error,
                "raft peer unreachable; logging it again at most every {} s until it answers",
                self.every.as_secs()
            ),
            Report::StillDown { failures, down_for } => tracing::warn!(
                peer,
                addr,
                failures,
                down_for_s = down_for.as_secs(),
                cause = last_cause(&error.to_string()),
                "raft peer still unreachable"
            ),
            Report::Quiet | Report::Recovered { .. } => {}
        }
    }

    /// Notes an answer from `peer`; logs its recovery if it was failing.
    pub fn answered(&self, peer: NodeId, addr: &str) {
        if let Report::Recovered { failures, down_for } = self.note_answer(peer) {
            tracing::info!(
                peer,
                addr,
                failures,
                down_for_s = down_for.as_secs(),
                "raft peer reachable again"
            );
        }
    }

    /// Reports `res` of an `rpc` to `peer` and hands it back.
    pub fn outcome<T, E: Display>(
        &self,
        peer: NodeId,
        addr: &str,
        rpc: &str,
        res: Result<T, E>,
    ) -> Result<T, E> {
        match &res {
            Ok(_) => self.answered(peer, addr),
            Err(e) => self.failed(peer, addr, rpc, e),
        }
        res
    }

    fn note_failure(&self, peer: NodeId) -> Report {
        let now = self.clock.instant();
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(f) = failing.get_mut(&peer) else {
            failing.insert(
                peer,
                Failing {
                    since: now,
                    last_line: now,
                    unreported: 0,
                    total: 1,
                },
            );
            return Report::Down;
        };
        f.total += 1;
        f.unreported += 1;
        if now.saturating_duration_since(f.last_line) < self.every {
            return Report::Quiet;
        }
        let failures = std::mem::take(&mut f.unreported);
        f.last_line = now;
        Report::StillDown {
            failures,
            down_for: now.saturating_duration_since(f.since),
        }
    }

    fn note_answer(&self, peer: NodeId) -> Report {
        let now = self.clock.instant();
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        match failing.remove(&peer) {
            Some(f) => Report::Recovered {
                failures: f.total,
                down_for: now.saturating_duration_since(f.since),
            },
            None => Report::Quiet,
        }
    }
}

/// The innermost cause of an error whose `Display` lists its sources (`…; source: cause`):
/// what the first line said in full, the repeats say in a few words.
fn last_cause(error: &str) -> &str {
    error.rsplit("; source: ").next().unwrap_or(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use tideway_api::clock::ManualClock;

    fn reports() -> (Arc<ManualClock>, PeerReports) {
        let start = chrono::Utc
            .with_ymd_and_hms(2026, 1, 5, 12, 0, 0)
            .single()
            .expect("a time");
        let clock = Arc::new(ManualClock::new(start));
        let shared: SharedClock = clock.clone();
        (clock, PeerReports::new(shared, REPORT_EVERY))
    }

    #[test]
    fn a_dead_peer_is_logged_once_then_once_per_interval_with_a_count() {
        let (clock, r) = reports();
        assert_eq!(
            r.note_answer(3),
            Report::Quiet,
            "a healthy peer says nothing"
        );
        assert_eq!(r.note_failure(3), Report::Down);
        // 18 failures a second for 10 s: one line at the end of the interval, with the count.
        let mut lines = Vec::new();
        for _ in 0..180 {
            clock.advance(Duration::from_millis(56));
            let rep = r.note_failure(3);
            if rep != Report::Quiet {
                lines.push(rep);
            }
        }
        assert_eq!(lines.len(), 1, "{lines:?}");
        let Report::StillDown { failures, down_for } = lines[0].clone() else {
            panic!("{lines:?}");
        };
        assert!((170..=180).contains(&failures), "{failures}");
        assert!(down_for >= REPORT_EVERY, "{down_for:?}");
        // Another peer is reported on its own.
        assert_eq!(r.note_failure(2), Report::Down);
        // The answer ends it, with the whole count and duration; the next failure is new.
        clock.advance(Duration::from_secs(5));
        let Report::Recovered { failures, down_for } = r.note_answer(3) else {
            panic!("recovered");
        };
        assert_eq!(failures, 181);
        assert!(down_for >= Duration::from_secs(15), "{down_for:?}");
        assert_eq!(r.note_answer(3), Report::Quiet);
        assert_eq!(r.note_failure(3), Report::Down);
    }

    #[test]
    fn repeats_name_the_innermost_cause() {
        assert_eq!(
            last_cause(
                "Unreachable node: opening it; source: tcp connect error; source: Connection refused"
            ),
            "Connection refused"
        );
        assert_eq!(last_cause("timed out"), "timed out");
    }
}
