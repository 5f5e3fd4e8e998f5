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
use tideway_api::agent::Desired;
use tideway_api::clock::SharedClock;
use tideway_api::explain::{RedispatchLimit, RedispatchWait};
use tideway_api::{MemberPhase, PendingReason};

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
        self.time_for(1)
    }

    /// How long until `k` whole tokens have accumulated (from the last refill), ignoring the
    /// burst cap: when the `k`-th of a queue of waiting moves gets its turn.
    pub fn time_for(&self, k: u32) -> Duration {
        let missing = f64::from(k) - self.tokens;
        if missing <= 0.0 {
            Duration::ZERO
        } else if self.rate <= 0.0 {
            Duration::MAX
        } else {
            Duration::try_from_secs_f64(missing / self.rate).unwrap_or(Duration::MAX)
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

    /// When the `k`-th (from 1) of `member`'s moves still waiting after this tick's grants
    /// gets its turn, and which bucket decides that. The fleet's bucket is shared with the
    /// other lost members, so its answer is the earliest possible slot.
    pub fn wait_for(&self, member: &str, k: u32) -> (Duration, RedispatchLimit) {
        let own = self
            .per_member
            .get(member)
            .map(|b| b.time_for(k))
            .unwrap_or_default();
        let fleet = self.global.time_for(k);
        if fleet > own {
            (fleet, RedispatchLimit::Global)
        } else {
            (own, RedispatchLimit::Member)
        }
    }

    /// One tick's decisions: which of the lost members' workloads move now (a batch per
    /// member), and, for `explain`, when each of the others may move.
    pub fn plan(
        &mut self,
        lost: Vec<LostWork>,
        now: Instant,
        wall: chrono::DateTime<Utc>,
    ) -> (Vec<LostWork>, RedispatchWaitMap) {
        let mut moves = Vec::new();
        let mut waits = RedispatchWaitMap::new();
        for LostWork {
            member,
            epoch,
            uids,
        } in lost
        {
            let n = self.grant(&member, uids.len(), now);
            let mut uids = uids.into_iter();
            let batch: Vec<String> = uids.by_ref().take(n).collect();
            for (i, uid) in uids.enumerate() {
                let k = u32::try_from(i + 1).unwrap_or(u32::MAX);
                let (wait, limit) = self.wait_for(&member, k);
                let next_slot = chrono::TimeDelta::from_std(wait)
                    .ok()
                    .and_then(|d| wall.checked_add_signed(d))
                    .unwrap_or(chrono::DateTime::<Utc>::MAX_UTC);
                waits.insert(
                    uid,
                    RedispatchWait {
                        reason: PendingReason::RateLimited,
                        from: member.clone().into(),
                        limit,
                        next_slot,
                    },
                );
            }
            if !batch.is_empty() {
                moves.push(LostWork {
                    member,
                    epoch,
                    uids: batch,
                });
            }
        }
        (moves, waits)
    }
}

/// Moves waiting on the rate limit, by workload UID: what `explain` shows as `RateLimited`.
pub type RedispatchWaitMap = HashMap<String, RedispatchWait>;

/// The leader's current [`RedispatchWaitMap`], shared with the API. Empty on followers.
pub type RedispatchWaits = Arc<RwLock<RedispatchWaitMap>>;

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
/// leader, which also publishes in `waits` the moves the limits hold back.
pub async fn recovery_loop(
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    cfg: DispatchConfig,
    clock: SharedClock,
    waits: RedispatchWaits,
) {
    let mut limits = RateLimits::new(&cfg, clock.instant());
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        if !raft.is_leader() {
            if let Ok(mut w) = waits.write()
                && !w.is_empty()
            {
                w.clear();
            }
            continue;
        }
        let lost = {
            let Ok(d) = data.read() else { continue };
            lost_work(&d, cfg.member_lost_after, clock.now())
        };
        let (moves, waiting) = limits.plan(lost, clock.instant(), clock.now());
        if let Ok(mut w) = waits.write() {
            *w = waiting;
        }
        for LostWork {
            member,
            epoch,
            uids,
        } in moves
        {
            tracing::warn!(%member, moving = uids.len(), "member lost: moving its work");
            let _ = proposer
                .propose(Command::RecoverWorkloads {
                    cluster: member,
                    uids,
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

    #[test]
    fn moves_held_back_are_rate_limited_with_their_next_slot() {
        use tideway_api::clock::Clock;
        let cfg = DispatchConfig {
            redispatch_per_second: 10.0,
            redispatch_per_member_per_second: 2.0,
            ..DispatchConfig::default()
        };
        let clock = tideway_api::clock::ManualClock::new(chrono::DateTime::UNIX_EPOCH);
        let (t0, wall) = (clock.instant(), clock.now());
        let mut l = RateLimits::new(&cfg, t0);
        let lost = |uids: &[&str]| {
            vec![LostWork {
                member: "eu".into(),
                epoch: 7,
                uids: uids.iter().map(|u| u.to_string()).collect(),
            }]
        };
        let (moves, waits) = l.plan(lost(&["a", "b", "c", "d", "e"]), t0, wall);
        assert_eq!(moves.len(), 1);
        assert_eq!(moves[0].uids, ["a", "b"], "the member's burst of two");
        assert_eq!(moves[0].epoch, 7);
        assert_eq!(waits.len(), 3);
        for (uid, secs) in [("c", 500), ("d", 1000), ("e", 1500)] {
            let w = &waits[uid];
            assert_eq!(w.reason, PendingReason::RateLimited);
            assert_eq!(w.limit, RedispatchLimit::Member);
            assert_eq!(w.from.as_str(), "eu");
            assert_eq!(
                w.next_slot,
                wall + chrono::TimeDelta::milliseconds(secs),
                "{uid}: two a second"
            );
        }
        // Half a second later the next one moves and the rest wait less.
        let t1 = t0 + Duration::from_millis(500);
        let wall1 = wall + chrono::TimeDelta::milliseconds(500);
        let (moves, waits) = l.plan(lost(&["c", "d", "e"]), t1, wall1);
        assert_eq!(moves[0].uids, ["c"]);
        assert!(!waits.contains_key("c"));
        assert_eq!(
            waits["d"].next_slot,
            wall1 + chrono::TimeDelta::milliseconds(500)
        );

        // A slow fleet-wide limit binds before a generous per-member one.
        let cfg = DispatchConfig {
            redispatch_per_second: 0.5,
            redispatch_per_member_per_second: 100.0,
            ..DispatchConfig::default()
        };
        let mut l = RateLimits::new(&cfg, t0);
        let (moves, waits) = l.plan(lost(&["a", "b"]), t0, wall);
        assert_eq!(moves[0].uids, ["a"]);
        assert_eq!(waits["b"].limit, RedispatchLimit::Global);
        assert_eq!(waits["b"].next_slot, wall + chrono::TimeDelta::seconds(2));
    }
}
