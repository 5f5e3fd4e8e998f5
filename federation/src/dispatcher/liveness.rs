//! Heartbeats, health transitions and digest coalescing on the leader.
//!
//! Heartbeats are not log entries: at thousands of members that would be the log's whole
//! traffic. The leader keeps them in memory and writes only what changes decisions: a member
//! turning NotReady or Ready, and a digest at most every few seconds or when it changes
//! significantly. A new leader starts every member's clock afresh, so it never declares a
//! member dead for heartbeats it was not there to see.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use tideway_api::MemberPhase;
use tideway_api::agent::Heartbeat;
use tideway_api::clock::SharedClock;
use tideway_api::digest::CapacityDigest;
use tideway_api::digest_delta::{self, DeltaError, VersionedDigest};

use openraft::ReadPolicy;

use super::DispatchConfig;
use crate::propose::forward::BeatOutcome;
use crate::propose::{ProposeError, Proposer, accepted};
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::command::Command;

#[derive(Debug, Clone)]
struct Beat {
    last: Instant,
    /// The digest the leader holds for the member, the base of its next delta: the freshest
    /// heard, or (for a new leader) the replicated one.
    digest: Option<VersionedDigest>,
    replicated_at: Option<Instant>,
}

/// What [`Liveness::beat`] decided.
struct Beaten {
    outcome: BeatOutcome,
    /// The digest to replicate now, when one is due.
    due: Option<CapacityDigest>,
}

/// The leader's memory of heartbeats, timed on the node's clock.
#[derive(Clone)]
pub struct Liveness {
    beats: Arc<Mutex<HashMap<String, Beat>>>,
    clock: SharedClock,
}

/// Whether a new digest differs enough from the replicated one to replicate it now.
pub fn significant_change(old: &CapacityDigest, new: &CapacityDigest) -> bool {
    if old.pools.len() != new.pools.len() {
        return true;
    }
    old.pools.iter().zip(&new.pools).any(|(a, b)| {
        if a.pool != b.pool || a.flavor != b.flavor {
            return true;
        }
        let (ca, cb) = (&a.counts, &b.counts);
        if ca.total != cb.total || ca.unhealthy != cb.unhealthy || ca.cordoned != cb.cordoned {
            return true;
        }
        let (fa, fb) = (ca.free(), cb.free());
        let threshold = (u64::from(ca.total) / 20).max(8);
        fa.abs_diff(fb) >= threshold || ca.largest_node_free() != cb.largest_node_free()
    })
}

impl Liveness {
    pub fn new(clock: SharedClock) -> Self {
        Self {
            beats: Arc::default(),
            clock,
        }
    }

    /// The clock heartbeats are timed on, which the leader loops share.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Records a heartbeat: the member is alive, and its digest (full, or a delta against
    /// the digest held) becomes the one held. A delta against another base changes nothing
    /// but liveness. Says whether a digest is due for replication, and which.
    ///
    /// Checked and applied under one lock, so two heartbeats of one member can never both
    /// apply a delta to the same base.
    fn beat(
        &self,
        name: &str,
        hb: &Heartbeat,
        replicated: Option<&CapacityDigest>,
        cfg: &DispatchConfig,
    ) -> Result<Beaten, DeltaError> {
        let now = self.clock.instant();
        let Ok(mut beats) = self.beats.lock() else {
            return Ok(Beaten {
                outcome: BeatOutcome::default(),
                due: None,
            });
        };
        let b = beats.entry(name.to_string()).or_insert(Beat {
            last: now,
            digest: None,
            replicated_at: None,
        });
        b.last = now;
        if b.digest.is_none() {
            // A new leader (or the first heartbeat since registration) holds what was
            // replicated: an agent whose base is that digest can go on with deltas.
            b.digest = replicated.cloned().map(VersionedDigest::new);
        }
        let mut outcome = BeatOutcome::default();
        let mut due = None;
        match digest_delta::receive(b.digest.as_ref(), hb) {
            Ok(Some(next)) => {
                let is_due = match (replicated, b.replicated_at) {
                    (None, _) | (_, None) => true,
                    (Some(old), Some(at)) => {
                        now.duration_since(at) >= cfg.digest_interval
                            || significant_change(old, &next.digest)
                    }
                };
                if is_due {
                    b.replicated_at = Some(now);
                    due = Some(next.digest.clone());
                }
                b.digest = Some(next);
            }
            Ok(None) => {}
            Err(DeltaError::BaseUnknown { .. }) => outcome.base_unknown = true,
            Err(e) => return Err(e),
        }
        outcome.replicated = due.is_some();
        outcome.version = b.digest.as_ref().map(|d| d.version.clone());
        Ok(Beaten { outcome, due })
    }

    /// The freshest digest the leader has heard for a member.
    pub fn latest_digest(&self, name: &str) -> Option<CapacityDigest> {
        self.beats.lock().ok().and_then(|b| {
            b.get(name)
                .and_then(|b| b.digest.as_ref().map(|d| d.digest.clone()))
        })
    }

    /// Time since the last heartbeat; a member never heard from starts its clock now.
    fn silence(&self, name: &str) -> std::time::Duration {
        let now = self.clock.instant();
        match self.beats.lock() {
            Ok(mut b) => {
                let beat = b.entry(name.to_string()).or_insert(Beat {
                    last: now,
                    digest: None,
                    replicated_at: None,
                });
                now.duration_since(beat.last)
            }
            Err(_) => std::time::Duration::ZERO,
        }
    }

    fn forget_all(&self) {
        if let Ok(mut b) = self.beats.lock() {
            b.clear();
        }
    }
}

/// The leader's handling of one heartbeat: remember it, bring a NotReady member back to
/// Ready, and replicate the digest when it is due. Answers whether the digest was replicated
/// and which digest version the leader holds.
///
/// The answer is the agent's lease: it is given only once this node has confirmed it still
/// leads (a leader cut off from the others must not keep an agent running work that the real
/// leader is about to move).
pub async fn heartbeat(
    raft: &Raft,
    live: &Liveness,
    data: &RwLock<StateMachineData>,
    proposer: &Proposer,
    cfg: &DispatchConfig,
    name: &str,
    hb: &Heartbeat,
) -> Result<BeatOutcome, ProposeError> {
    let known = {
        let d = data
            .read()
            .map_err(|_| ProposeError::Unavailable("state lock poisoned".into()))?;
        d.state.members.get(name).map(|m| {
            (
                m.digest.clone(),
                m.cluster
                    .status
                    .as_ref()
                    .map(|s| s.phase)
                    .unwrap_or_default(),
            )
        })
    };
    let Some((replicated, phase)) = known else {
        return Err(ProposeError::NotFound(format!(
            "member cluster '{name}' is not registered; register first"
        )));
    };
    let Beaten { outcome, due } = live
        .beat(name, hb, replicated.as_ref(), cfg)
        .map_err(|e| ProposeError::field(e.field(), e.to_string()))?;
    if outcome.base_unknown {
        tracing::debug!(member = %name, "digest delta against a base not held: asking for a full digest");
    }
    if phase == MemberPhase::NotReady {
        tracing::info!(member = %name, "member heartbeats resumed: Ready");
        accepted(
            proposer
                .propose(Command::MemberHealth {
                    name: name.to_string(),
                    phase: MemberPhase::Ready,
                    message: Some("heartbeats resumed".into()),
                    at: live.clock.now(),
                    flaps: Some(cfg.flaps),
                })
                .await?,
        )?;
    }
    if let Some(digest) = due {
        accepted(
            proposer
                .propose(Command::MemberDigest {
                    name: name.to_string(),
                    digest: Box::new(digest),
                    at: live.clock.now(),
                })
                .await?,
        )?;
    }
    raft.ensure_linearizable(ReadPolicy::LeaseRead)
        .await
        .map_err(|e| ProposeError::Unavailable(format!("leadership not confirmed: {e}")))?;
    Ok(outcome)
}

/// Marks members NotReady when their heartbeats stop. Runs on every node; acts on the leader.
pub async fn health_monitor(
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    live: Liveness,
    cfg: DispatchConfig,
) {
    let mut was_leader = false;
    let mut tick = tokio::time::interval(cfg.heartbeat_interval / 2);
    loop {
        tick.tick().await;
        let leader = raft.is_leader();
        if leader && !was_leader {
            // Fresh leadership: everyone gets a full timeout from now.
            live.forget_all();
        }
        was_leader = leader;
        if !leader {
            continue;
        }
        let now = live.clock.now();
        let ready: Vec<(String, std::time::Duration)> = {
            let Ok(d) = data.read() else { continue };
            d.state
                .members
                .iter()
                // Cordoned and draining members are live too, and can go silent.
                .filter_map(|(n, m)| {
                    let st = m.cluster.status.as_ref()?;
                    (st.phase != MemberPhase::NotReady).then(|| {
                        // A registration (committed, so seen by every leader) counts as a
                        // heartbeat: an agent that just registered is not declared lost for
                        // the silence before it, which would only make it flap.
                        let since = st
                            .last_heartbeat
                            .map(|t| (now - t).to_std().unwrap_or_default())
                            .unwrap_or(std::time::Duration::MAX);
                        (n.clone(), since)
                    })
                })
                .collect()
        };
        // Quarantines whose time is up end by themselves, on the leader's clock.
        let released: Vec<String> = {
            let Ok(d) = data.read() else { continue };
            d.state
                .members
                .iter()
                .filter(|(_, m)| {
                    m.cluster
                        .status
                        .as_ref()
                        .is_some_and(|s| s.phase == MemberPhase::Quarantined)
                        && m.quarantine.as_ref().is_some_and(|q| q.until <= now)
                })
                .map(|(n, _)| n.clone())
                .collect()
        };
        for name in released {
            tracing::info!(member = %name, "quarantine over");
            let _ = proposer
                .propose(Command::EndQuarantine {
                    name,
                    at: live.clock.now(),
                })
                .await;
        }
        for (name, since_committed) in ready {
            let silent = live.silence(&name).min(since_committed);
            if silent > cfg.not_ready_after {
                tracing::warn!(member = %name, ?silent, "member missed its heartbeats: NotReady");
                let _ = proposer
                    .propose(Command::MemberHealth {
                        name: name.clone(),
                        phase: MemberPhase::NotReady,
                        message: Some(format!("no heartbeat for {:.1} s", silent.as_secs_f64())),
                        at: live.clock.now(),
                        flaps: None,
                    })
                    .await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use tideway_api::PoolKind;
    use tideway_api::clock::ManualClock;
    use tideway_api::digest::{GpuCounts, PoolDigest};
    use tideway_api::digest_delta::DigestDelta;

    fn digest(free: u32, secs: i64) -> CapacityDigest {
        let mut hist = vec![0u32; 9];
        hist[free as usize] = 1;
        CapacityDigest {
            cluster: "m1".into(),
            generated_at: Utc.timestamp_opt(1_700_000_000 + secs, 0).single().unwrap(),
            pools: vec![PoolDigest {
                pool: "train".into(),
                kind: PoolKind::Training,
                flavor: "H100".into(),
                counts: GpuCounts {
                    total: 8,
                    allocated: 8 - free,
                    unhealthy: 0,
                    cordoned: 0,
                    free_histogram: hist,
                },
                domains: Vec::new(),
            }],
        }
    }

    fn delta(from: &CapacityDigest, to: &CapacityDigest) -> Heartbeat {
        let d = DigestDelta::between(
            &VersionedDigest::new(from.clone()),
            &VersionedDigest::new(to.clone()),
        )
        .unwrap();
        Heartbeat::delta(d)
    }

    fn live() -> Liveness {
        let start = Utc.timestamp_opt(1_700_000_000, 0).single().unwrap();
        Liveness::new(Arc::new(ManualClock::new(start)))
    }

    #[test]
    fn deltas_apply_to_the_held_digest_only() {
        let live = live();
        let cfg = DispatchConfig::default();
        let (a, b, c) = (digest(8, 0), digest(4, 2), digest(2, 4));
        let first = live
            .beat("m1", &Heartbeat::full(a.clone()), None, &cfg)
            .unwrap();
        assert_eq!(first.outcome.version, Some(a.version()));
        assert!(first.outcome.replicated && !first.outcome.base_unknown);
        assert_eq!(first.due, Some(a.clone()));

        let second = live.beat("m1", &delta(&a, &b), Some(&a), &cfg).unwrap();
        assert_eq!(second.outcome.version, Some(b.version()));
        assert_eq!(live.latest_digest("m1"), Some(b.clone()));

        // A delta against a digest the leader no longer holds changes nothing but liveness.
        let stale = live.beat("m1", &delta(&a, &c), Some(&a), &cfg).unwrap();
        assert!(stale.outcome.base_unknown && stale.due.is_none());
        assert_eq!(stale.outcome.version, Some(b.version()));
        assert_eq!(live.latest_digest("m1"), Some(b.clone()));

        // A new leader holds what was replicated (a, here): a delta against it applies, a
        // delta against the newer b the old leader held is refused.
        live.forget_all();
        let refused = live.beat("m1", &delta(&b, &c), Some(&a), &cfg).unwrap();
        assert!(refused.outcome.base_unknown);
        assert_eq!(refused.outcome.version, Some(a.version()));
        assert_eq!(live.latest_digest("m1"), Some(a.clone()));
        let applied = live.beat("m1", &delta(&a, &c), Some(&a), &cfg).unwrap();
        assert_eq!(applied.outcome.version, Some(c.version()));
        assert_eq!(live.latest_digest("m1"), Some(c));
    }

    #[test]
    fn a_digest_less_heartbeat_is_liveness() {
        let live = live();
        let cfg = DispatchConfig::default();
        let a = digest(8, 0);
        live.beat("m1", &Heartbeat::full(a.clone()), None, &cfg)
            .unwrap();
        let unchanged = delta(&a, &digest(8, 10));
        let out = live.beat("m1", &unchanged, Some(&a), &cfg).unwrap();
        assert!(!out.outcome.base_unknown);
        assert_eq!(
            live.latest_digest("m1").map(|d| d.generated_at),
            Some(digest(8, 10).generated_at),
            "an unchanged heartbeat refreshes when the numbers were taken"
        );
        let bare = Heartbeat {
            digest: None,
            digest_delta: None,
        };
        let out = live.beat("m1", &bare, Some(&a), &cfg).unwrap();
        assert_eq!(out.outcome.version, Some(a.version()));
        assert!(out.due.is_none() && !out.outcome.base_unknown);
        assert_eq!(live.silence("m1"), std::time::Duration::ZERO);
    }
}
