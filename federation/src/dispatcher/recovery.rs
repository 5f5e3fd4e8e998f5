//! Member loss: when a member has been NotReady for longer than the wait timeout, the leader
//! moves its work elsewhere, a few workloads at a time.
//!
//! Each move is one `RecoverWorkloads` command: the old assignment is fenced (`Desired::Cancel`
//! for that attempt, so the member, if it comes back, is told to stop it, and its reports for
//! that attempt are refused) and the workload goes back to the queue to resume from its last
//! checkpoint on another member. Moves are rate limited per member and globally, so a lost
//! cluster with a thousand workloads does not become a burst of re-dispatches.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::Utc;
use tideway_api::MemberPhase;
use tideway_api::agent::Desired;
use tideway_api::clock::SharedClock;

use super::DispatchConfig;
use crate::propose::Proposer;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::command::Command;

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.last = now;
    }

    /// How many whole tokens are available now (without taking them).
    pub fn available(&mut self, now: Instant) -> u32 {
        self.refill(now);
        self.tokens.floor().max(0.0) as u32
    }

    pub fn take(&mut self, n: u32) {
        self.tokens -= f64::from(n);
    }

    /// When the next token is due.
    pub fn next_slot(&self) -> Duration {
        if self.tokens >= 1.0 || self.rate <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
        }
    }
}

/// The leader's re-dispatch budget: one bucket per member and one for the fleet.
pub struct RateLimits {
    per_member: HashMap<String, Bucket>,
    global: Bucket,
    cfg: DispatchConfig,
}

impl RateLimits {
    pub fn new(cfg: &DispatchConfig, now: Instant) -> Self {
        Self {
            per_member: HashMap::new(),
            global: Bucket::new(
                cfg.redispatch_per_second,
                cfg.redispatch_per_second.max(1.0),
                now,
            ),
            cfg: cfg.clone(),
        }
    }

    /// How many of `member`'s workloads may move now; takes them from both buckets.
    pub fn grant(&mut self, member: &str, wanted: usize, now: Instant) -> usize {
        let rate = self.cfg.redispatch_per_member_per_second;
        let b = self
            .per_member
            .entry(member.to_string())
            .or_insert_with(|| Bucket::new(rate, rate.max(1.0), now));
        let n = (wanted as u32)
            .min(b.available(now))
            .min(self.global.available(now));
        b.take(n);
        self.global.take(n);
        n as usize
    }
}

/// A lost member's work to move: the member, the liveness epoch it was lost in, and its
/// active assignments in UID order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostWork {
    pub member: String,
    pub epoch: u64,
    pub uids: Vec<String>,
}

/// The work of members lost for longer than the wait timeout. The wait runs from the moment
/// the member was declared NotReady (which is at least `not_ready_after` after its last
/// acknowledged heartbeat), so an agent whose lease ends earlier has always stopped the old
/// copies before any of them moves.
pub fn lost_work(
    d: &StateMachineData,
    lost_after: Duration,
    now: chrono::DateTime<Utc>,
) -> Vec<LostWork> {
    let mut out = Vec::new();
    for (name, m) in &d.state.members {
        let Some(st) = m.cluster.status.as_ref() else {
            continue;
        };
        if st.phase != MemberPhase::NotReady {
            continue;
        }
        let silent = m
            .not_ready_at
            .or(st.last_heartbeat)
            .map(|t| (now - t).to_std().unwrap_or_default())
            .unwrap_or(Duration::MAX);
        if silent < lost_after {
            continue;
        }
        let uids: Vec<String> = d
            .state
            .assignments
            .get(name)
            .map(|a| {
                a.iter()
                    .filter(|(_, r)| {
                        r.desired == Desired::Run || matches!(r.desired, Desired::Preempt { .. })
                    })
                    .map(|(u, _)| u.clone())
                    .collect()
            })
            .unwrap_or_default();
        if !uids.is_empty() {
            out.push(LostWork {
                member: name.clone(),
                epoch: m.epoch,
                uids,
            });
        }
    }
    out
}

/// Moves the work of lost members, within the rate limits. Runs on every node; acts on the
/// leader.
pub async fn recovery_loop(
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    cfg: DispatchConfig,
    clock: SharedClock,
) {
    let mut limits = RateLimits::new(&cfg, clock.instant());
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        if !raft.is_leader() {
            continue;
        }
        let lost = {
            let Ok(d) = data.read() else { continue };
            lost_work(&d, cfg.member_lost_after, clock.now())
        };
        for LostWork {
            member,
            epoch,
            uids,
        } in lost
        {
            let n = limits.grant(&member, uids.len(), clock.instant());
            if n == 0 {
                continue;
            }
            let batch: Vec<String> = uids.into_iter().take(n).collect();
            tracing::warn!(%member, moving = batch.len(), "member lost: moving its work");
            let _ = proposer
                .propose(Command::RecoverWorkloads {
                    cluster: member,
                    uids: batch,
                    at: clock.now(),
                    epoch: Some(epoch),
                })
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_moves_per_member_and_globally() {
        let cfg = DispatchConfig {
            redispatch_per_second: 3.0,
            redispatch_per_member_per_second: 2.0,
            ..DispatchConfig::default()
        };
        use tideway_api::clock::Clock;
        let t0 = tideway_api::clock::ManualClock::new(chrono::DateTime::UNIX_EPOCH).instant();
        let mut l = RateLimits::new(&cfg, t0);
        assert_eq!(l.grant("a", 1000, t0), 2, "per-member burst");
        assert_eq!(l.grant("b", 1000, t0), 1, "global burst left");
        assert_eq!(l.grant("c", 1000, t0), 0);
        let t1 = t0 + Duration::from_secs(1);
        let moved = l.grant("a", 1000, t1) + l.grant("b", 1000, t1) + l.grant("c", 1000, t1);
        assert_eq!(moved, 3, "a second later: the global rate");
        // Over ten seconds no more than the global rate moves, however many wait.
        let mut total = 0;
        for s in 2..=11 {
            let t = t0 + Duration::from_secs(s);
            total += l.grant("a", 1000, t) + l.grant("b", 1000, t) + l.grant("c", 1000, t);
        }
        assert!(total <= 30, "{total}");
    }
}
