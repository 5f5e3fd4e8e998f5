//! The end of a workload's life: cancellation, and compaction of terminal workloads out of
//! the live state.
//!
//! A cancel is a log entry like a submission, so every node agrees on the moment the workload
//! stopped counting against quota. A workload on a member keeps its assignment record, now
//! saying `Cancel`, so the agent learns of it through the same revision stream it reads for
//! new work. Compaction names the workloads it removes (the leader chose them); apply checks
//! each again, so a log replayed anywhere removes exactly the same ones.

use chrono::{DateTime, Utc};
use tideway_api::agent::Desired;
use tideway_api::{Workload, WorkloadPhase};

use super::FederationState;
use super::command::{CommandResult, Rejection, StoredObject};

/// At most this many workloads are compacted by one command, so that one entry stays small.
pub const MAX_COMPACT_BATCH: usize = 1000;

/// When a terminal workload finished, for retention: its own finish time, else its
/// submission time (a workload that never ran still ages out).
pub(crate) fn finished_at(w: &Workload) -> Option<DateTime<Utc>> {
    let st = w.status.as_ref()?;
    if !st.phase.is_terminal() {
        return None;
    }
    st.finished_at
        .or(st.submitted_at)
        .or(w.metadata.creation_timestamp)
}

fn not_found(id: &str) -> CommandResult {
    CommandResult::Rejected {
        rejection: Rejection::NotFound {
            what: format!("workload '{id}'"),
        },
    }
}

impl FederationState {
    /// What a cancel of `id` answers when it would change nothing (an unknown workload, one
    /// already cancelled, one that already succeeded or failed); otherwise the name of the
    /// workload it stops. The node asks before proposing, so such a cancel writes nothing to
    /// the log; apply asks again at the entry's log position.
    pub fn cancel_outcome(&self, id: &str) -> Result<String, CommandResult> {
        let name = if self.workloads.contains_key(id) {
            Some(id.to_string())
        } else {
            self.uids.get(id).map(|n| n.to_string())
        };
        let Some((name, w)) = name.and_then(|n| self.workloads.get(n.as_str()).map(|w| (n, w)))
        else {
            return Err(not_found(id));
        };
        match w.status.as_ref().map(|s| s.phase).unwrap_or_default() {
            WorkloadPhase::Cancelled => Err(CommandResult::Existing {
                object: StoredObject::Workload(std::sync::Arc::new(Workload::clone(w))),
            }),
            phase @ (WorkloadPhase::Succeeded | WorkloadPhase::Failed) => {
                Err(CommandResult::Rejected {
                    rejection: Rejection::Terminal { name, phase },
                })
            }
            _ => Ok(name),
        }
    }

    /// Cancels a pending or running workload, by name or UID. Cancelling a cancelled workload
    /// answers it unchanged; one that already succeeded or failed is refused.
    pub(super) fn cancel(&mut self, id: &str, at: DateTime<Utc>, index: u64) -> CommandResult {
        let name = match self.cancel_outcome(id) {
            Ok(name) => name,
            Err(answer) => return answer,
        };
        let Some(mut w) = self.workloads.get_mut(&name) else {
            return not_found(id);
        };
        let uid = w.metadata.uid.clone().unwrap_or_default();
        let status = w.status.get_or_insert_with(Default::default);
        let cluster = status.cluster.take();
        status.phase = WorkloadPhase::Cancelled;
        status.pending_reason = None;
        status.finished_at = Some(at);
        status.message = Some(match &cluster {
            Some(c) => format!("cancelled; {c} is told to stop it"),
            None => "cancelled".to_string(),
        });
        w.metadata.resource_version = Some(index);
        let stored = w.clone();
        if let Some(rec) = cluster
            .as_ref()
            .and_then(|c| self.assignments.touch(c, &uid, index))
        {
            rec.desired = Desired::Cancel;
        }
        self.scheduling.placements.remove(&uid);
        self.scheduling.preempting.remove(&uid);
        self.scheduling.settling.remove(&uid);
        self.scheduling.reservations.retain(|r| uid != r.uid);
        self.scheduling.preemptors.retain(|r| uid != r.uid);
        CommandResult::Created {
            object: StoredObject::Workload(std::sync::Arc::new(stored)),
        }
    }

    /// The terminal workloads that finished before `before`, oldest submission first, at most
    /// `limit`, by a scan of every workload. The leader finds the same set from its
    /// journal-fed index (`dispatcher::retention::Finished`, tested against this), without
    /// the scan; this stays the reference and what tests that drive the state by hand use.
    pub fn compactable(&self, before: DateTime<Utc>, limit: usize) -> Vec<String> {
        self.order
            .values()
            .filter(|name| {
                self.workloads
                    .get(&***name)
                    .and_then(|w| finished_at(w))
                    .is_some_and(|f| f < before)
            })
            .take(limit)
            .map(|n| n.to_string())
            .collect()
    }

    /// Removes the named workloads if they are still terminal and finished before `before`;
    /// their names become free for new submissions. Answers how many went.
    pub(super) fn compact(&mut self, names: &[String], before: DateTime<Utc>) -> CommandResult {
        let mut removed = 0u32;
        for name in names {
            let Some(w) = self.workloads.get(name.as_str()) else {
                continue;
            };
            if finished_at(w).is_none_or(|f| f >= before) {
                continue;
            }
            let Some(w) = self.workloads.remove(name) else {
                continue;
            };
            if let Some(uid) = &w.metadata.uid {
                self.uids.remove(uid.as_str());
                self.assignments.remove_uid(uid);
                self.scheduling.placements.remove(uid);
                self.scheduling.preempting.remove(uid);
                self.scheduling.settling.remove(uid);
                self.scheduling.preemptors.retain(|r| *uid != r.uid);
            }
            removed += 1;
        }
        if removed > 0 {
            let gone: Vec<u64> = self
                .order
                .iter()
                .filter(|(_, n)| !self.workloads.contains_key(&***n))
                .map(|(seq, _)| *seq)
                .collect();
            for seq in gone {
                self.order.remove(&seq);
            }
        }
        CommandResult::Updated { count: removed }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::{
        MemberCluster, MemberClusterSpec, PodSet, Workload, WorkloadClass, WorkloadSpec,
    };

    use super::*;
    use crate::state::command::Command;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    fn workload(name: &str) -> Workload {
        let mut w = Workload::new(
            name,
            WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("worker", 1, 1, "H100")],
            ),
        );
        w.metadata.uid = Some(format!("uid-{name}"));
        w
    }

    fn submit(s: &mut FederationState, index: u64, name: &str, key: &str) -> CommandResult {
        s.apply(
            index,
            Command::SubmitWorkload {
                workload: Box::new(workload(name)),
                idempotency_key: key.into(),
                at: t(index as i64),
                digest: None,
            },
        )
    }

    fn with_member() -> FederationState {
        let mut s = FederationState::default();
        s.apply(
            1,
            Command::RegisterMember {
                member: Box::new(MemberCluster::new(
                    "a",
                    MemberClusterSpec::new("eu", vec![]),
                )),
                agent_version: None,
                at: t(0),
                flaps: None,
            },
        );
        s
    }

    fn phase(s: &FederationState, name: &str) -> WorkloadPhase {
        s.workloads[name].status.as_ref().expect("status").phase
    }

    #[test]
    fn cancelling_an_assigned_workload_tells_its_member_to_remove_it() {
        let mut s = with_member();
        submit(&mut s, 2, "w", "k");
        s.apply(
            3,
            Command::Assign {
                workload: "w".into(),
                cluster: "a".into(),
                pool: None,
                at: t(3),
            },
        );
        let res = s.apply(
            4,
            Command::CancelWorkload {
                id: "uid-w".into(),
                at: t(4),
            },
        );
        assert!(matches!(res, CommandResult::Created { .. }), "{res:?}");
        assert_eq!(phase(&s, "w"), WorkloadPhase::Cancelled);
        let rec = &s.assignments["a"]["uid-w"];
        assert_eq!(rec.desired, Desired::Cancel);
        assert_eq!(
            rec.revision, 4,
            "the agent sees the change after revision 3"
        );
        assert_eq!(
            s.workloads["w"].status.as_ref().and_then(|x| x.finished_at),
            Some(t(4))
        );
        // A late Running report from the member does not bring it back.
        s.apply(
            5,
            Command::ReportStatus {
                cluster: "a".into(),
                statuses: vec![tideway_api::agent::LocalStatus {
                    uid: "uid-w".into(),
                    attempt: 1,
                    phase: tideway_api::agent::LocalPhase::Running,
                    since: t(5),
                    nodes: vec![],
                }],
            },
        );
        assert_eq!(phase(&s, "w"), WorkloadPhase::Cancelled);
    }

    #[test]
    fn a_cancel_that_would_change_nothing_is_answered_before_the_log() {
        let mut s = with_member();
        submit(&mut s, 2, "w", "k");
        assert_eq!(s.cancel_outcome("w"), Ok("w".to_string()));
        assert_eq!(s.cancel_outcome("uid-w"), Ok("w".to_string()));
        assert!(matches!(
            s.cancel_outcome("nope"),
            Err(CommandResult::Rejected {
                rejection: Rejection::NotFound { .. }
            })
        ));
        s.apply(
            3,
            Command::CancelWorkload {
                id: "w".into(),
                at: t(3),
            },
        );
        assert!(matches!(
            s.cancel_outcome("uid-w"),
            Err(CommandResult::Existing { .. })
        ));
    }

    #[test]
    fn cancel_is_idempotent_refuses_finished_work_and_names_the_unknown() {
        let mut s = with_member();
        submit(&mut s, 2, "w", "k");
        let cancel = |s: &mut FederationState, i: u64, id: &str| {
            s.apply(
                i,
                Command::CancelWorkload {
                    id: id.into(),
                    at: t(i as i64),
                },
            )
        };
        assert!(matches!(
            cancel(&mut s, 3, "w"),
            CommandResult::Created { .. }
        ));
        let again = cancel(&mut s, 4, "w");
        let CommandResult::Existing {
            object: StoredObject::Workload(w),
        } = again
        else {
            panic!("second cancel answers the workload: {again:?}");
        };
        assert_eq!(w.metadata.resource_version, Some(3), "nothing changed");
        assert_eq!(
            cancel(&mut s, 5, "nope"),
            CommandResult::Rejected {
                rejection: Rejection::NotFound {
                    what: "workload 'nope'".into()
                }
            }
        );
        if let Some(mut w) = s.workloads.get_mut("w")
            && let Some(st) = w.status.as_mut()
        {
            st.phase = WorkloadPhase::Succeeded;
        }
        assert_eq!(
            cancel(&mut s, 6, "w"),
            CommandResult::Rejected {
                rejection: Rejection::Terminal {
                    name: "w".into(),
                    phase: WorkloadPhase::Succeeded
                }
            }
        );
    }

    /// The leader's index of finished workloads, followed from the journal, names what a
    /// scan of every workload names, as workloads come, end and are compacted.
    #[test]
    fn the_finished_index_follows_the_state_as_a_scan_does() {
        use crate::dispatcher::retention::Finished;
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        let mut s = with_member();
        let mut idx = Finished::default();
        let mut index = 2;
        for round in 0..6i64 {
            for i in 0..5 {
                submit(
                    &mut s,
                    index,
                    &format!("w{round}-{i}"),
                    &format!("k{round}-{i}"),
                );
                index += 1;
            }
            // Cancel two of this round's and, from the third round on, compact what ended
            // before the previous round.
            for i in [1, 3] {
                s.apply(
                    index,
                    Command::CancelWorkload {
                        id: format!("w{round}-{i}"),
                        at: t(index as i64),
                    },
                );
                index += 1;
            }
            if round >= 2 {
                let names = s.compactable(t(index as i64 - 10), 1000);
                s.apply(
                    index,
                    Command::CompactWorkloads {
                        names,
                        before: t(index as i64 - 10),
                        at: t(index as i64),
                    },
                );
                index += 1;
            }
            // Every other round from the journal, once from a whole copy (a new leader).
            if round == 3 {
                idx = Finished::default();
            }
            let changes = idx.changes(&s);
            assert_eq!(changes.is_full(), round == 0 || round == 3);
            idx.apply(changes);
            for before in [t(0), t(index as i64 / 2), t(index as i64 + 1)] {
                assert_eq!(
                    sorted(idx.due(before, 1000)),
                    sorted(s.compactable(before, 1000)),
                    "round {round}, before {before}"
                );
            }
        }
        // Oldest first, and bounded.
        let due = idx.due(t(index as i64 + 1), 2);
        assert_eq!(due.len(), 2);
        let at = |n: &str| finished_at(&s.workloads[n]).expect("finished");
        assert!(at(&due[0]) <= at(&due[1]));
    }

    #[test]
    fn compaction_frees_the_name_and_forgets_the_old_key() {
        let mut s = with_member();
        submit(&mut s, 2, "w", "k1");
        submit(&mut s, 3, "live", "k2");
        s.apply(
            4,
            Command::CancelWorkload {
                id: "w".into(),
                at: t(4),
            },
        );
        // Retention not over yet: nothing is compactable.
        assert!(s.compactable(t(4), 10).is_empty());
        let names = s.compactable(t(100), 10);
        assert_eq!(names, vec!["w".to_string()], "only the terminal one");
        // A name proposed for compaction that is not terminal stays.
        let res = s.apply(
            5,
            Command::CompactWorkloads {
                names: vec!["w".into(), "live".into()],
                before: t(100),
                at: t(5),
            },
        );
        assert_eq!(res, CommandResult::Updated { count: 1 });
        assert!(!s.workloads.contains_key("w"));
        assert!(!s.uids.contains_key("uid-w"));
        assert_eq!(
            s.order.values().map(|n| &**n).collect::<Vec<_>>(),
            vec!["live"]
        );
        // The old key no longer answers with whatever now holds the name.
        assert!(s.by_idempotency_key("k1").is_none());
        let mut again = workload("w");
        again.metadata.uid = Some("uid-w2".into());
        let res = s.apply(
            6,
            Command::SubmitWorkload {
                workload: Box::new(again),
                idempotency_key: "k3".into(),
                at: t(6),
                digest: None,
            },
        );
        assert!(matches!(res, CommandResult::Created { .. }), "{res:?}");
        assert!(s.by_idempotency_key("k1").is_none());
        assert_eq!(
            s.by_idempotency_key("k3")
                .and_then(|w| w.metadata.uid.clone()),
            Some("uid-w2".into())
        );
    }

    #[test]
    fn compaction_is_deterministic_across_replicas() {
        let mut a = with_member();
        for i in 0..20u64 {
            submit(&mut a, 2 + i, &format!("w{i}"), &format!("k{i}"));
        }
        for i in (0..20u64).step_by(3) {
            a.apply(
                30 + i,
                Command::CancelWorkload {
                    id: format!("w{i}"),
                    at: t(30 + i as i64),
                },
            );
        }
        let mut b = a.clone();
        let names = a.compactable(t(40), 3);
        assert_eq!(names, vec!["w0", "w3", "w6"], "oldest first, bounded");
        let cmd = Command::CompactWorkloads {
            names,
            before: t(40),
            at: t(60),
        };
        a.apply(61, cmd.clone());
        b.apply(61, cmd);
        assert_eq!(a, b);
        assert_eq!(a.workloads.len(), 17);
    }
}
