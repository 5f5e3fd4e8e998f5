//! The assignment journal against the records, after random command sequences: every
//! command that changes a record (assign, reports, cancel, drain, preemption, loss recovery
//! with fencing epochs, checkpoint notices, member removal and re-admission, compaction,
//! snapshot restore) leaves the journal answering every resume point exactly as a scan, and
//! never changes what an agent reads without moving the record's revision to its index.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use tideway_api::agent::{LocalPhase, LocalStatus};
use tideway_api::{
    MemberCluster, MemberClusterSpec, MemberPhase, PendingReason, PodSet, Workload, WorkloadClass,
    WorkloadSpec,
};

use super::FederationState;
use super::checkpoints::CheckpointRequest;
use super::command::Command;
use super::members::MemberIntent;
use super::scheduling::{CycleDecisions, PreemptDecision};

const CLUSTERS: [&str; 2] = ["a", "b"];
const WORKLOADS: u8 = 6;

pub(crate) fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + s, 0)
        .single()
        .expect("time")
}

fn cluster(c: u8) -> String {
    CLUSTERS[usize::from(c) % CLUSTERS.len()].to_string()
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Register(u8),
    Submit(u8),
    Assign(u8, u8),
    Report(u8, u8, u8, u8),
    Cancel(u8),
    Intent(u8, u8),
    Preempt(u8, Vec<u8>),
    Health(u8, bool),
    Recover(u8, Vec<u8>, Option<u64>),
    Remove(u8),
    Readmit(u8),
    Checkpoint(u8, u8, i64),
    Compact(u8),
    /// A cycle's pending reasons: workload, and which of a few reasons (the last is `Queued`).
    Reasons(Vec<(u8, u8)>),
    Restore,
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    let w = 0..WORKLOADS;
    let c = 0u8..2;
    prop_oneof![
        1 => c.clone().prop_map(Op::Register),
        3 => w.clone().prop_map(Op::Submit),
        4 => (w.clone(), c.clone()).prop_map(|(w, c)| Op::Assign(w, c)),
        4 => (c.clone(), w.clone(), 1u8..4, 0u8..4).prop_map(|(c, w, a, p)| Op::Report(c, w, a, p)),
        1 => w.clone().prop_map(Op::Cancel),
        1 => (c.clone(), 0u8..3).prop_map(|(c, i)| Op::Intent(c, i)),
        2 => (c.clone(), proptest::collection::vec(w.clone(), 1..3)).prop_map(|(c, v)| Op::Preempt(c, v)),
        2 => (c.clone(), any::<bool>()).prop_map(|(c, up)| Op::Health(c, up)),
        2 => (c.clone(), proptest::collection::vec(w.clone(), 1..4), proptest::option::of(0u64..4))
            .prop_map(|(c, v, e)| Op::Recover(c, v, e)),
        1 => c.clone().prop_map(Op::Remove),
        1 => c.clone().prop_map(Op::Readmit),
        2 => (c, w.clone(), 0i64..5).prop_map(|(c, w, d)| Op::Checkpoint(c, w, d)),
        1 => w.clone().prop_map(Op::Compact),
        2 => proptest::collection::vec((w, 0u8..4), 1..5).prop_map(Op::Reasons),
        1 => Just(Op::Restore),
    ]
}

/// One of a few pending reasons, equal ones equal: the last is `Queued`.
fn reason(r: u8) -> PendingReason {
    match r {
        0..=2 => PendingReason::QuotaExhausted {
            queue: "default".into(),
            flavor: "H100".into(),
            used: u64::from(r),
            limit: 2,
        },
        _ => PendingReason::Queued,
    }
}

/// The UID workload `w` has now (a compacted name comes back with a new UID).
fn uid(s: &FederationState, w: u8) -> String {
    s.workloads
        .get(format!("w{w}").as_str())
        .and_then(|w| w.metadata.uid.clone())
        .unwrap_or_else(|| format!("u{w}"))
}

pub(crate) fn command(s: &FederationState, op: &Op, index: u64) -> Option<Command> {
    let at = t(index as i64);
    Some(match op {
        Op::Register(c) => Command::RegisterMember {
            member: Box::new(MemberCluster::new(
                cluster(*c),
                MemberClusterSpec::new("eu", vec![]),
            )),
            agent_version: None,
            at,
            flaps: None,
        },
        Op::Submit(w) => {
            let spec = WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("p", 1, 1, "H100")],
            );
            let mut wl = Workload::new(format!("w{w}"), spec);
            wl.metadata.uid = Some(format!("u{w}-{index}"));
            Command::SubmitWorkload {
                workload: Box::new(wl),
                idempotency_key: format!("k{index}"),
                at,
                digest: None,
            }
        }
        Op::Assign(w, c) => Command::Assign {
            workload: format!("w{w}").as_str().into(),
            cluster: cluster(*c).as_str().into(),
            pool: None,
            at,
        },
        Op::Report(c, w, attempt, p) => Command::ReportStatus {
            cluster: cluster(*c).as_str().into(),
            statuses: vec![LocalStatus {
                uid: uid(s, *w).as_str().into(),
                attempt: u32::from(*attempt),
                phase: match p {
                    0 => LocalPhase::Running,
                    1 => LocalPhase::Succeeded,
                    2 => LocalPhase::Failed {
                        reason: "oom".into(),
                    },
                    _ => LocalPhase::Evicted {
                        reason: "node".into(),
                    },
                },
                since: at,
                nodes: Vec::new(),
            }],
        },
        Op::Cancel(w) => Command::CancelWorkload {
            id: format!("w{w}"),
            at,
        },
        Op::Intent(c, i) => Command::SetMemberIntent {
            name: cluster(*c),
            intent: match i {
                0 => MemberIntent::Schedulable,
                1 => MemberIntent::Cordoned,
                _ => MemberIntent::Draining,
            },
            at,
        },
        Op::Preempt(c, victims) => Command::ApplyCycle {
            decisions: Box::new(CycleDecisions {
                preempt: vec![PreemptDecision {
                    preemptor: "someone".into(),
                    cluster: cluster(*c).as_str().into(),
                    victims: victims.iter().map(|w| uid(s, *w).as_str().into()).collect(),
                    grace_seconds: 30,
                }],
                ..CycleDecisions::default()
            }),
            at,
        },
        Op::Health(c, up) => Command::MemberHealth {
            name: cluster(*c),
            phase: if *up {
                MemberPhase::Ready
            } else {
                MemberPhase::NotReady
            },
            message: None,
            at,
            // Returns may quarantine the member (no new work), which must not touch records.
            flaps: Some(Default::default()),
        },
        Op::Recover(c, ws, epoch) => Command::RecoverWorkloads {
            cluster: cluster(*c),
            uids: ws.iter().map(|w| uid(s, *w)).collect(),
            at,
            epoch: *epoch,
        },
        Op::Remove(c) => Command::RemoveMember {
            name: cluster(*c),
            at,
        },
        Op::Readmit(c) => Command::ReadmitMember {
            name: cluster(*c),
            at,
        },
        Op::Checkpoint(c, w, d) => Command::RequestCheckpoints {
            notices: vec![CheckpointRequest {
                uid: uid(s, *w).as_str().into(),
                cluster: cluster(*c).as_str().into(),
                deadline: t(1000 + d * 100),
            }],
            at,
        },
        Op::Compact(w) => Command::CompactWorkloads {
            names: vec![format!("w{w}")],
            before: t(1_000_000),
            at,
        },
        Op::Reasons(reasons) => Command::ApplyCycle {
            decisions: Box::new(CycleDecisions {
                reasons: reasons
                    .iter()
                    .map(|(w, r)| (format!("w{w}"), reason(*r)))
                    .collect(),
                ..CycleDecisions::default()
            }),
            at,
        },
        Op::Restore => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_journal_answers_as_a_scan_and_every_change_moves_the_revision(
        ops in proptest::collection::vec(op(), 1..70)
    ) {
        let mut s = FederationState::default();
        let mut index = 0u64;
        for c in 0..2u8 {
            index += 1;
            if let Some(cmd) = command(&s, &Op::Register(c), index) {
                s.apply(index, cmd);
            }
        }
        for op in &ops {
            index += 1;
            let before = s.assignments.clone();
            match command(&s, op, index) {
                Some(cmd) => {
                    s.apply(index, cmd);
                }
                // A node that installs a snapshot decodes the records and rebuilds the
                // journal from them.
                None => {
                    let bytes = serde_json::to_vec(&s).expect("encode");
                    let restored: FederationState =
                        serde_json::from_slice(&bytes).expect("decode");
                    prop_assert!(restored == s);
                    s = restored;
                }
            }
            for (name, recs) in s.assignments.iter() {
                for (uid, rec) in recs {
                    let old = before.record(name, uid);
                    if old != Some(rec) {
                        prop_assert_eq!(
                            rec.revision, index,
                            "{} on {} changed at {} ({:?}) but reads revision {}",
                            uid, name, index, op, rec.revision
                        );
                    }
                }
            }
            for c in CLUSTERS {
                let points = [0, index / 2, index.saturating_sub(2), index - 1, index];
                for after in points {
                    prop_assert_eq!(
                        s.assignments.after(c, after),
                        s.assignments.scan_after(c, after),
                        "cluster {} after {} following {:?}", c, after, op
                    );
                }
            }
        }
    }
}
