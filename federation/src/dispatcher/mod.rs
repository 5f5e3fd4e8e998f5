//! Leader-only loops: member liveness and health transitions, digest coalescing, quota
//! schedule transitions, and the scheduling cycle that runs the scheduler core and commits
//! its decisions.
//!
//! Every node runs these tasks; each pass first checks that this node leads, so a new leader
//! takes over at once and a deposed one stops acting. Everything they decide is proposed as a
//! log entry, never written around Raft.

pub mod backlog;
mod convert;
pub mod cycle;
#[cfg(test)]
mod cycle_tests;
pub mod dry_run;
pub mod estimates;
pub mod liveness;
mod name_index;
pub mod queue_view;
pub mod recovery;
pub mod retention;
pub mod rollout;
#[cfg(test)]
mod scale_tests;
pub mod tidal;
pub mod tidal_preview;
pub mod webhooks;
pub mod window;
pub mod window_reason;
#[cfg(test)]
mod window_tests;

use std::time::Duration;

/// Settings of the leader loops.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// How often agents are expected to heartbeat.
    pub heartbeat_interval: Duration,
    /// A Ready member whose heartbeats stop for this long becomes NotReady.
    pub not_ready_after: Duration,
    /// A member's digest is replicated at most this often, unless it changes significantly.
    pub digest_interval: Duration,
    /// How often the leader runs a scheduling cycle.
    pub cycle_interval: Duration,
    /// Terminal workloads stay readable this long after they finish, then are compacted.
    pub retain_terminal: Duration,
    /// How often the leader looks for terminal workloads past their retention.
    pub compaction_interval: Duration,
    /// The audit trail keeps at most this many records (and never more than
    /// `state::audit::MAX_EVENTS`).
    pub audit_retain_count: Option<usize>,
    /// The audit trail keeps records this long.
    pub audit_retain_age: Option<Duration>,
    /// A member NotReady this long (since it was declared NotReady) is lost: its work moves.
    pub member_lost_after: Duration,
    /// Workloads moved off lost members, at most this many a second in the whole fleet...
    pub redispatch_per_second: f64,
    /// ...and this many a second off any one member.
    pub redispatch_per_member_per_second: f64,
    /// When a member that keeps coming back from NotReady is quarantined.
    pub flaps: crate::state::members::FlapPolicy,
}

impl DispatchConfig {
    /// How long an agent may run its work after sending a heartbeat that was acknowledged
    /// (`leaseMs` in the answer). The member's work moves no sooner than `not_ready_after +
    /// member_lost_after` after the leader received that heartbeat, which is after the agent
    /// sent it; the lease ends [`Self::agent_lease_margin`] earlier than that, so an agent
    /// that self-fences when its lease runs out has stopped its copies before any of them
    /// moves (docs/agents.md, "The lease").
    pub fn agent_lease(&self) -> Duration {
        (self.not_ready_after + self.member_lost_after).saturating_sub(self.agent_lease_margin())
    }

    /// What the lease keeps between the end of an agent's lease and the earliest move of its
    /// work: half the wait timeout (30 s by default). It absorbs what the two timings do not
    /// share: the federation nodes' wall clocks (a member is declared NotReady at one
    /// leader's time and lost by another's), the agent's and the leader's clock rates, and
    /// the time the agent takes to stop its work once the lease runs out (its 100 ms guard
    /// tick, and the backend deleting the work: a Kubernetes pod's termination grace period).
    pub fn agent_lease_margin(&self) -> Duration {
        self.member_lost_after / 2
    }
}

impl Default for DispatchConfig {
    fn default() -> Self {
        let heartbeat_interval = Duration::from_secs(2);
        Self {
            heartbeat_interval,
            not_ready_after: heartbeat_interval * 3,
            digest_interval: Duration::from_secs(5),
            cycle_interval: Duration::from_millis(500),
            retain_terminal: Duration::from_secs(3600),
            compaction_interval: Duration::from_secs(10),
            audit_retain_count: None,
            audit_retain_age: None,
            member_lost_after: Duration::from_secs(60),
            redispatch_per_second: 20.0,
            redispatch_per_member_per_second: 5.0,
            flaps: Default::default(),
        }
    }
}

#[cfg(test)]
mod lease_tests {
    use super::*;

    #[test]
    fn the_agent_lease_ends_a_margin_before_the_work_may_move() {
        // The defaults: NotReady after 6 s, lost 60 s later; the lease is 36 s, 30 s short.
        let d = DispatchConfig::default();
        assert_eq!(d.agent_lease(), Duration::from_secs(36));
        assert_eq!(d.agent_lease_margin(), Duration::from_secs(30));
        for (hb_ms, missed, lost_ms) in
            [(2000, 3, 60_000), (500, 3, 2000), (100, 1, 1), (250, 4, 0)]
        {
            let heartbeat_interval = Duration::from_millis(hb_ms);
            let c = DispatchConfig {
                heartbeat_interval,
                not_ready_after: heartbeat_interval * missed,
                member_lost_after: Duration::from_millis(lost_ms),
                ..DispatchConfig::default()
            };
            let earliest_move = c.not_ready_after + c.member_lost_after;
            assert_eq!(
                c.agent_lease() + c.agent_lease_margin(),
                earliest_move,
                "{hb_ms} ms × {missed}, lost after {lost_ms} ms"
            );
            if lost_ms > 0 {
                assert!(c.agent_lease() < earliest_move, "the lease ends first");
            }
            assert!(c.agent_lease() >= c.not_ready_after, "outlives a NotReady");
        }
    }
}
