//! What a scheduling cycle decided, applied as one log entry.
//!
//! The leader runs the pure scheduler core over the replicated state and proposes its
//! decisions in one `ApplyCycle` command: assignments, preemptions (a checkpoint notice to the
//! victims' agents), the reservations for big gangs, and the pending reasons that changed.
//! Apply re-checks each decision against the state at its log position, so a decision made on
//! a state that moved on in the meantime is dropped, never half-applied.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::agent::Desired;
use tideway_api::{ClusterName, Uid, WorkloadName};
use tideway_api::{PendingReason, WorkloadPhase};

use tideway_api::TopologyLevel;

use super::FederationState;
use super::command::CommandResult;

/// Evictions are remembered this long, for the preemption budget's window.
pub const PREEMPTION_MEMORY_SECS: i64 = 3600;

/// Where some of a workload's pods go: one pool of one flavor, optionally kept inside one
/// topology domain. The state's own record of the scheduler's placement, so that a change in
/// the core's types is a deliberate change of the log and snapshot format, not a silent one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub flavor: String,
    pub pool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<Domain>,
    pub pods: Vec<Pods>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Domain {
    pub level: TopologyLevel,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pods {
    pub gpus_per_pod: u32,
    pub count: u32,
}

/// A hold on one cluster for a big gang that waited too long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// UID of the gang.
    pub uid: Uid,
    pub cluster: ClusterName,
    pub expected_start: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleDecisions {
    pub assign: Vec<AssignDecision>,
    pub preempt: Vec<PreemptDecision>,
    /// The whole set of live reservations after this cycle.
    pub reservations: Vec<Reservation>,
    /// Workload name → its new pending reason; only the ones that changed.
    pub reasons: Vec<(String, PendingReason)>,
    /// The policy version the cycle ran under; a cycle that meets another version in
    /// apply is dropped whole (the next cycle decides under the new rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
}

/// Distinct reasons one cycle's apply remembers to share by comparison (see `apply_cycle`).
const SEEN_REASONS: usize = 16;

impl CycleDecisions {
    pub fn is_empty(&self) -> bool {
        self.assign.is_empty() && self.preempt.is_empty() && self.reasons.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssignDecision {
    /// Workload name.
    pub workload: WorkloadName,
    pub cluster: ClusterName,
    pub pool: String,
    pub placements: Vec<Placement>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptDecision {
    /// UID of the workload the victims make room for.
    pub preemptor: Uid,
    pub cluster: ClusterName,
    /// Victim UIDs, all on `cluster`.
    pub victims: Vec<Uid>,
    pub grace_seconds: u64,
}

/// Scheduler bookkeeping that lives in the replicated state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulingState {
    pub reservations: Vec<Reservation>,
    /// Where each assigned workload's pods went (by UID), as the scheduler decided.
    /// (Persistent: a copy of the state under its lock is O(1) in the running work.)
    pub placements: imbl::OrdMap<String, Vec<Placement>>,
    /// Victim UID → the preemptor it is making room for, while its notice runs.
    pub preempting: BTreeMap<String, String>,
    /// Times of recent evictions, oldest first.
    pub evictions: Vec<DateTime<Utc>>,
    /// Preemptor UID → where and when its last victim left, until that member's digest is
    /// newer. Until then the digest still shows the victims' GPUs as used, and a cycle would
    /// see no room and preempt a second set of victims for the same workload.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settling: BTreeMap<String, Settling>,
    /// Preemptors of applied `Preempt` decisions that have not started, each with the
    /// cluster its victims leave and when their grace ends. Carried into every cycle's
    /// input so the capacity the victims free stays held for the preemptor after they are
    /// gone, as the simulator does; without it the first workload decided after they leave
    /// takes their GPUs. Dropped when the preemptor is assigned, cancelled or compacted, or
    /// [`PREEMPTOR_HOLD_GIVE_UP_SECONDS`](tideway_scheduler::input::PREEMPTOR_HOLD_GIVE_UP_SECONDS)
    /// after `expected_start`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preemptors: Vec<Reservation>,
}

/// A preemption whose victims have left, not yet seen in the member's digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settling {
    pub cluster: ClusterName,
    /// When the last victim left, on the member's clock (as digests are stamped).
    pub left_at: DateTime<Utc>,
}

/// How long a preemptor waits for a digest that shows its victims gone before it is
/// scheduled as if they were (a member that stops reporting is handled by liveness).
pub const SETTLING_LIMIT_SECS: i64 = 600;

/// Moves a running workload's planned topology domains to where its member reports the pods
/// actually are. A member's gang scheduler picks its own nodes within the pool (Volcano,
/// Kueue and the sim backend all do), so the rack the federation planned may not be the rack
/// the pods landed in; a preemption planned on the planned rack would evict work elsewhere
/// and free no whole rack. Only a report that puts every pod in one domain of the level is
/// taken: pods of several pod sets in several domains cannot be told apart by node alone.
pub(super) fn placed_where_reported(placements: &mut [Placement], nodes: &[tideway_api::NodeGpus]) {
    for p in placements.iter_mut() {
        let Some(domain) = p.domain.as_mut() else {
            continue;
        };
        let name_of = |n: &tideway_api::NodeGpus| match domain.level {
            TopologyLevel::Node => Some(n.node.clone()),
            TopologyLevel::Rack => n.rack.clone(),
            TopologyLevel::Zone => n.zone.clone(),
        };
        let mut names = nodes.iter().map(name_of);
        let Some(Some(first)) = names.next() else {
            continue;
        };
        if names.all(|n| n.as_deref() == Some(first.as_str())) {
            domain.name = first;
        }
    }
}

impl FederationState {
    pub(super) fn apply_cycle(
        &mut self,
        d: CycleDecisions,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        if d.policy_version.is_some_and(|v| v != self.policy.current()) {
            return CommandResult::Updated { count: 0 };
        }
        let mut changed = 0u32;
        for a in d.assign {
            let uid = self
                .workloads
                .get(a.workload.as_str())
                .and_then(|w| w.metadata.uid.clone());
            if let CommandResult::Created { .. } = self.assign(
                a.workload.as_str(),
                a.cluster.as_str(),
                Some(a.pool),
                at,
                index,
            ) {
                if let Some(uid) = uid {
                    self.scheduling.settling.remove(&uid);
                    self.scheduling.placements.insert(uid, a.placements);
                }
                changed += 1;
            }
        }
        for p in d.preempt {
            let mut marked = false;
            for victim in &p.victims {
                let runs = self
                    .assignments
                    .record(p.cluster.as_str(), victim.as_str())
                    .is_some_and(|rec| rec.desired == Desired::Run);
                if !runs {
                    continue;
                }
                let Some(rec) = self
                    .assignments
                    .touch(p.cluster.as_str(), victim.as_str(), index)
                else {
                    continue;
                };
                rec.desired = Desired::Preempt {
                    grace_seconds: p.grace_seconds,
                };
                self.scheduling
                    .preempting
                    .insert(victim.to_string(), p.preemptor.to_string());
                self.scheduling.evictions.push(at);
                if let Some(mut w) = self.by_uid_mut(victim.as_str())
                    && let Some(st) = w.status.as_mut()
                {
                    st.message = Some(format!(
                        "preempted for {}: checkpoint and stop within {} s",
                        p.preemptor, p.grace_seconds
                    ));
                    w.metadata.resource_version = Some(index);
                }
                changed += 1;
                marked = true;
            }
            if marked {
                self.hold_for_preemptor(&p, at);
            }
        }
        self.drop_given_up_preemptors(at);
        let horizon = at - Duration::seconds(PREEMPTION_MEMORY_SECS);
        self.scheduling.evictions.retain(|t| *t >= horizon);
        self.scheduling.reservations = d.reservations;
        // In name order: neighbours in the map are then changed one after another, so each
        // node on their path is copied once while warm in the cache (a cycle's reasons are
        // spread over the whole backlog). Measured in `digest_walk_cost`, the gain over the
        // cycle's order was within the run-to-run noise; the stable sort keeps the last
        // reason given for a name the one that stands.
        let mut reasons = d.reasons;
        reasons.sort_by(|a, b| a.0.cmp(&b.0));
        // A cycle writes a handful of distinct reasons (one per shape and blocker) for
        // thousands of workloads: those already shared in this entry are found by comparing,
        // without hashing each reason again for `PendingReason::shared`.
        let mut seen: Vec<Arc<PendingReason>> = Vec::new();
        for (name, reason) in reasons {
            let share = |reason: PendingReason| match seen.iter().find(|r| ***r == reason) {
                Some(r) => Arc::clone(r),
                None => {
                    let r = reason.shared();
                    if seen.len() < SEEN_REASONS {
                        seen.push(Arc::clone(&r));
                    }
                    r
                }
            };
            if self.workloads.set_pending_reason(&name, reason, share) {
                changed += 1;
            }
        }
        CommandResult::Updated { count: changed }
    }

    /// Records (or renews) the hold of a preemptor still pending whose victims were just told
    /// to stop: from `at` until their grace ends, and then until it starts or gives up.
    fn hold_for_preemptor(&mut self, p: &PreemptDecision, at: DateTime<Utc>) {
        let pending = self
            .by_uid(p.preemptor.as_str())
            .and_then(|w| w.status.as_ref())
            .is_some_and(|st| st.phase == WorkloadPhase::Pending);
        if !pending {
            return;
        }
        let grace = Duration::seconds(i64::try_from(p.grace_seconds).unwrap_or(i64::MAX / 2));
        let preemptors = &mut self.scheduling.preemptors;
        preemptors.retain(|r| r.uid != p.preemptor);
        preemptors.push(Reservation {
            uid: p.preemptor.clone(),
            cluster: p.cluster.clone(),
            expected_start: at + grace,
            created_at: at,
        });
    }

    /// Drops the preemptor holds given up by `at` (on the entry's time, so every replica
    /// drops the same ones).
    fn drop_given_up_preemptors(&mut self, at: DateTime<Utc>) {
        self.scheduling
            .preemptors
            .retain(|r| !preemptor_gave_up(r, at));
    }
}

/// Whether a preemptor's hold has lapsed at `now`: it has not started
/// `PREEMPTOR_HOLD_GIVE_UP_SECONDS` after its victims' grace ended.
pub fn preemptor_gave_up(r: &Reservation, now: DateTime<Utc>) -> bool {
    r.expected_start + Duration::seconds(tideway_scheduler::input::PREEMPTOR_HOLD_GIVE_UP_SECONDS)
        <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, rack: Option<&str>) -> tideway_api::NodeGpus {
        tideway_api::NodeGpus {
            node: name.into(),
            gpus: 8,
            zone: Some("z1".into()),
            rack: rack.map(Into::into),
        }
    }

    fn planned(level: TopologyLevel, name: &str) -> Vec<Placement> {
        vec![Placement {
            flavor: "H100".into(),
            pool: "training".into(),
            domain: Some(Domain {
                level,
                name: name.into(),
            }),
            pods: Vec::new(),
        }]
    }

    #[test]
    fn a_placement_follows_the_rack_the_member_reports() {
        let mut ps = planned(TopologyLevel::Rack, "r1");
        placed_where_reported(&mut ps, &[node("n5", Some("r2")), node("n6", Some("r2"))]);
        assert_eq!(ps[0].domain.as_ref().map(|d| d.name.as_str()), Some("r2"));
        let mut ps = planned(TopologyLevel::Zone, "z0");
        placed_where_reported(&mut ps, &[node("n5", Some("r2"))]);
        assert_eq!(ps[0].domain.as_ref().map(|d| d.name.as_str()), Some("z1"));
    }

    use crate::state::command::Command;
    use crate::state::members::tests::{setup, t};
    use tideway_api::{PodSet, Workload, WorkloadClass, WorkloadSpec};

    /// `job` (u1) runs on `a`; `boss` (b1) is pending and preempts it with a 30 s grace at
    /// `t(10)`.
    fn preempted() -> FederationState {
        let mut s = setup(None);
        let spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("w", 1, 8, "H100")],
        );
        let mut w = Workload::new("boss", spec);
        w.metadata.uid = Some("b1".into());
        s.apply(
            4,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: "kb".into(),
                at: t(5),
                digest: None,
            },
        );
        s.apply(5, preempt(t(10)));
        s
    }

    fn preempt(at: DateTime<Utc>) -> Command {
        Command::ApplyCycle {
            decisions: Box::new(CycleDecisions {
                preempt: vec![PreemptDecision {
                    preemptor: "b1".into(),
                    cluster: "a".into(),
                    victims: vec!["u1".into()],
                    grace_seconds: 30,
                }],
                ..CycleDecisions::default()
            }),
            at,
        }
    }

    fn empty_cycle(at: DateTime<Utc>) -> Command {
        Command::ApplyCycle {
            decisions: Box::default(),
            at,
        }
    }

    #[test]
    fn a_cycles_reasons_land_in_any_order_the_last_for_a_name_winning_and_equal_ones_shared() {
        let mut s = preempted();
        for (i, name) in ["c", "a", "d"].into_iter().enumerate() {
            let spec = WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("w", 1, 8, "H100")],
            );
            s.apply(
                10 + i as u64,
                Command::SubmitWorkload {
                    workload: Box::new(Workload::new(name, spec)),
                    idempotency_key: format!("k{name}"),
                    at: t(6),
                    digest: None,
                },
            );
        }
        let quota = |used| PendingReason::QuotaExhausted {
            queue: "default".into(),
            flavor: "H100".into(),
            used,
            limit: 8,
        };
        // Not in name order, "d" twice (the later one stands), "a" and "c" the same reason,
        // and a name that is not there.
        let reasons = vec![
            ("d".to_string(), quota(1)),
            ("c".to_string(), quota(8)),
            ("missing".to_string(), quota(8)),
            ("a".to_string(), quota(8)),
            ("d".to_string(), quota(2)),
        ];
        let got = s.apply(
            20,
            Command::ApplyCycle {
                decisions: Box::new(CycleDecisions {
                    reasons,
                    ..CycleDecisions::default()
                }),
                at: t(7),
            },
        );
        assert_eq!(got, CommandResult::Updated { count: 4 });
        let reason = |name: &str| {
            s.workloads[name]
                .status
                .as_ref()
                .and_then(|st| st.pending_reason.clone())
                .expect("a reason")
        };
        assert_eq!(*reason("d"), quota(2));
        assert_eq!(*reason("a"), quota(8));
        assert!(Arc::ptr_eq(&reason("a"), &reason("c")), "one copy");
    }

    #[test]
    fn a_preempt_decision_records_its_preemptor_until_the_grace_ends() {
        let s = preempted();
        assert_eq!(
            s.scheduling.preemptors,
            vec![Reservation {
                uid: "b1".into(),
                cluster: "a".into(),
                expected_start: t(40),
                created_at: t(10),
            }]
        );
    }

    #[test]
    fn a_preempt_decision_with_no_running_victim_records_nothing() {
        let mut s = preempted();
        s.scheduling.preemptors.clear();
        // u1 is already being preempted, so a second decision for it changes nothing.
        s.apply(6, preempt(t(20)));
        assert!(s.scheduling.preemptors.is_empty());
    }

    #[test]
    fn an_assigned_preemptor_holds_nothing() {
        let mut s = preempted();
        s.apply(
            6,
            Command::Assign {
                workload: "boss".into(),
                cluster: "a".into(),
                pool: None,
                at: t(50),
            },
        );
        assert!(s.scheduling.preemptors.is_empty());
    }

    #[test]
    fn a_cancelled_or_compacted_preemptor_holds_nothing() {
        let mut s = preempted();
        s.apply(
            6,
            Command::CancelWorkload {
                id: "boss".into(),
                at: t(20),
            },
        );
        assert!(s.scheduling.preemptors.is_empty(), "cancelled");
        // A hold left on a finished workload (as an older log may have) goes with it.
        let hold = preempted().scheduling.preemptors;
        assert_eq!(hold.len(), 1);
        s.scheduling.preemptors = hold;
        s.apply(
            7,
            Command::CompactWorkloads {
                names: vec!["boss".into()],
                before: t(30),
                at: t(30),
            },
        );
        assert!(!s.workloads.contains_key("boss"));
        assert!(s.scheduling.preemptors.is_empty(), "compacted");
    }

    #[test]
    fn a_hold_is_given_up_after_its_grace_and_the_give_up_time() {
        let mut s = preempted();
        let give_up =
            t(40) + Duration::seconds(tideway_scheduler::input::PREEMPTOR_HOLD_GIVE_UP_SECONDS);
        s.apply(6, empty_cycle(give_up - Duration::seconds(1)));
        assert_eq!(s.scheduling.preemptors.len(), 1, "still held");
        assert!(!preemptor_gave_up(
            &s.scheduling.preemptors[0],
            give_up - Duration::seconds(1)
        ));
        assert!(preemptor_gave_up(&s.scheduling.preemptors[0], give_up));
        s.apply(7, empty_cycle(give_up));
        assert!(s.scheduling.preemptors.is_empty(), "given up");
    }

    #[test]
    fn a_snapshot_without_preemptors_decodes_and_one_with_them_round_trips() {
        let old = r#"{"reservations":[],"placements":{},"preempting":{"u1":"b1"},"evictions":[]}"#;
        let st: SchedulingState = serde_json::from_str(old).expect("old snapshot");
        assert!(st.preemptors.is_empty());
        assert_eq!(st.preempting["u1"], "b1");
        let s = preempted();
        let json = serde_json::to_string(&s).expect("encode");
        let back: FederationState = serde_json::from_str(&json).expect("decode");
        assert_eq!(back.scheduling.preemptors, s.scheduling.preemptors);
        assert_eq!(back, s);
    }

    #[test]
    fn a_report_that_spans_domains_or_lacks_them_changes_nothing() {
        let mut ps = planned(TopologyLevel::Rack, "r1");
        placed_where_reported(&mut ps, &[node("n5", Some("r2")), node("n7", Some("r3"))]);
        assert_eq!(ps[0].domain.as_ref().map(|d| d.name.as_str()), Some("r1"));
        placed_where_reported(&mut ps, &[node("n5", None)]);
        assert_eq!(ps[0].domain.as_ref().map(|d| d.name.as_str()), Some("r1"));
        placed_where_reported(&mut ps, &[node("n5", Some("r2")), node("n6", None)]);
        assert_eq!(ps[0].domain.as_ref().map(|d| d.name.as_str()), Some("r1"));
    }
}
