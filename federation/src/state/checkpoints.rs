//! Hand-over checkpoint notices: "checkpoint by the boundary, keep running".
//!
//! The scheduler core decides which running work should checkpoint before a boundary that
//! lowers its side's quota; the leader proposes those notices, and apply records each on the
//! workload's assignment (`checkpointBy`), bumping its revision so the member's agent sees it
//! on its next poll. Work being preempted already has its notice (the preemption's grace), and
//! a record only ever moves to a later deadline, so a replayed or repeated notice changes
//! nothing.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::agent::{Desired, ReportedCheckpoint};
use tideway_api::{ClusterName, Uid, WorkloadPhase};

use super::FederationState;
use super::command::CommandResult;

/// One notice: the workload `uid` running on `cluster` should checkpoint by `deadline`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRequest {
    pub uid: Uid,
    pub cluster: ClusterName,
    pub deadline: DateTime<Utc>,
}

impl CheckpointRequest {
    /// Whether recording this notice would change the state: the workload still runs there
    /// and its assignment carries no deadline this late yet. The leader proposes only these.
    pub fn takes_effect(&self, state: &FederationState) -> bool {
        state
            .assignments
            .record(self.cluster.as_str(), self.uid.as_str())
            .is_some_and(|rec| {
                rec.desired == Desired::Run && rec.checkpoint_by.is_none_or(|d| d < self.deadline)
            })
    }
}

impl FederationState {
    /// Whether a member's checkpoint report would change the state: it names the live
    /// assignment of this cluster at its current attempt, of a running workload, and is newer
    /// than the checkpoint on record. The API checks this before proposing, so a replayed
    /// report writes nothing; apply checks it again, in log order.
    pub fn checkpoint_takes_effect(&self, cluster: &str, cp: &ReportedCheckpoint) -> bool {
        let Some(rec) = self.assignments.record(cluster, &cp.uid) else {
            return false;
        };
        let live = rec.desired == Desired::Run || matches!(rec.desired, Desired::Preempt { .. });
        if rec.assignment.attempt != cp.attempt || !live {
            return false;
        }
        self.by_uid(&cp.uid)
            .and_then(|w| w.status.as_ref())
            .is_some_and(|st| {
                st.phase == WorkloadPhase::Running
                    && st.last_checkpoint_at.is_none_or(|t| t < cp.at)
            })
    }

    /// Records each reported checkpoint that takes effect on its workload's status (the
    /// scheduler then prices preempting it by the work since then); answers how many did.
    pub(super) fn report_checkpoints(
        &mut self,
        cluster: &str,
        checkpoints: &[ReportedCheckpoint],
        index: u64,
    ) -> CommandResult {
        let mut count = 0u32;
        for cp in checkpoints {
            if !self.checkpoint_takes_effect(cluster, cp) {
                continue;
            }
            let Some(name) = self.uids.get(cp.uid.as_str()).cloned() else {
                continue;
            };
            let Some(mut w) = self.workloads.get_mut(&name) else {
                continue;
            };
            if let Some(st) = w.status.as_mut() {
                st.last_checkpoint_at = Some(cp.at);
                w.metadata.resource_version = Some(index);
                count += 1;
            }
        }
        CommandResult::Updated { count }
    }

    /// Records each notice that takes effect on its assignment; answers how many did.
    pub(super) fn request_checkpoints(
        &mut self,
        notices: &[CheckpointRequest],
        index: u64,
    ) -> CommandResult {
        let mut count = 0u32;
        for n in notices {
            if !n.takes_effect(self) {
                continue;
            }
            let Some(rec) = self
                .assignments
                .touch(n.cluster.as_str(), n.uid.as_str(), index)
            else {
                continue;
            };
            rec.checkpoint_by = Some(n.deadline);
            count += 1;
        }
        CommandResult::Updated { count }
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::audit::AuditKind;

    use super::*;
    use crate::state::command::Command;
    use crate::state::members::tests::{setup, t};

    /// A member `a` running workload `job` (uid `u1`), assigned at index 3: the members
    /// tests' fixture without a retry limit.
    fn running() -> FederationState {
        setup(None)
    }

    fn notice(uid: &str, deadline: DateTime<Utc>) -> Command {
        Command::RequestCheckpoints {
            notices: vec![CheckpointRequest {
                uid: uid.into(),
                cluster: "a".into(),
                deadline,
            }],
            at: t(10),
        }
    }

    fn kinds(s: &FederationState, kind: AuditKind) -> usize {
        s.audit.events.iter().filter(|e| e.kind == kind).count()
    }

    #[test]
    fn a_notice_is_recorded_once_and_the_agent_sees_it_after_its_revision() {
        let mut s = running();
        let res = s.apply(4, notice("u1", t(600)));
        assert_eq!(res, CommandResult::Updated { count: 1 });
        let recs = s.assignments_after("a", 3);
        assert_eq!(recs.len(), 1, "the agent polling after 3 sees the notice");
        assert_eq!(recs[0].checkpoint_by, Some(t(600)));
        assert_eq!(recs[0].revision, 4);
        assert_eq!(kinds(&s, AuditKind::CheckpointRequested), 1);
        let ev = s.audit.events.back().expect("a record");
        assert_eq!(ev.workload.as_deref(), Some("job"));
        assert!(ev.evidence.contains("checkpoint by"), "{}", ev.evidence);

        // Applying it again changes nothing: no new revision, no second record.
        let before = s.assignments.clone();
        let res = s.apply(5, notice("u1", t(600)));
        assert_eq!(res, CommandResult::Updated { count: 0 });
        assert_eq!(s.assignments, before);
        assert!(s.assignments_after("a", 4).is_empty());
        assert_eq!(kinds(&s, AuditKind::CheckpointRequested), 1);

        // An earlier deadline never replaces a later one; the next boundary's notice does.
        assert_eq!(
            s.apply(6, notice("u1", t(300))),
            CommandResult::Updated { count: 0 }
        );
        assert_eq!(
            s.apply(7, notice("u1", t(90_000))),
            CommandResult::Updated { count: 1 }
        );
        assert_eq!(s.assignments["a"]["u1"].checkpoint_by, Some(t(90_000)));
        assert_eq!(kinds(&s, AuditKind::CheckpointRequested), 2);
    }

    #[test]
    fn unknown_or_preempted_work_gets_no_notice() {
        let mut s = running();
        assert_eq!(
            s.apply(4, notice("nope", t(600))),
            CommandResult::Updated { count: 0 }
        );
        if let Some(rec) = s.assignments.record_mut_untracked("a", "u1") {
            rec.desired = Desired::Preempt { grace_seconds: 60 };
        }
        assert_eq!(
            s.apply(5, notice("u1", t(600))),
            CommandResult::Updated { count: 0 }
        );
        assert_eq!(s.assignments["a"]["u1"].checkpoint_by, None);
        assert_eq!(kinds(&s, AuditKind::CheckpointRequested), 0);
    }

    fn reported(uid: &str, attempt: u32, at: DateTime<Utc>) -> Command {
        reported_by("a", uid, attempt, at)
    }

    fn reported_by(cluster: &str, uid: &str, attempt: u32, at: DateTime<Utc>) -> Command {
        Command::ReportCheckpoints {
            cluster: cluster.into(),
            checkpoints: vec![ReportedCheckpoint {
                uid: uid.into(),
                attempt,
                at,
            }],
        }
    }

    fn status(s: &mut FederationState, idx: u64, phase: tideway_api::agent::LocalPhase) {
        s.apply(
            idx,
            Command::ReportStatus {
                cluster: "a".into(),
                statuses: vec![tideway_api::agent::LocalStatus {
                    uid: "u1".into(),
                    attempt: 1,
                    phase,
                    since: t(idx as i64),
                    nodes: Vec::new(),
                }],
            },
        );
    }

    fn last(s: &FederationState) -> Option<DateTime<Utc>> {
        s.workloads["job"].last_checkpoint_at()
    }

    #[test]
    fn a_reported_checkpoint_is_recorded_once_audited_and_newer_only() {
        let mut s = running();
        // Not running yet (assigned): nothing to record.
        assert_eq!(
            s.apply(4, reported("u1", 1, t(3))),
            CommandResult::Updated { count: 0 }
        );
        status(&mut s, 5, tideway_api::agent::LocalPhase::Running);
        assert_eq!(
            s.apply(6, reported("u1", 1, t(50))),
            CommandResult::Updated { count: 1 }
        );
        assert_eq!(last(&s), Some(t(50)));
        assert_eq!(s.workloads["job"].metadata.resource_version, Some(6));
        assert_eq!(kinds(&s, AuditKind::Checkpointed), 1);
        let ev = s.audit.events.back().expect("a record");
        assert_eq!(ev.actor, "agent:a");
        assert_eq!(ev.workload.as_deref(), Some("job"));
        assert!(ev.evidence.contains("checkpoint at"), "{}", ev.evidence);

        // A replay, an older checkpoint, another attempt or another cluster change nothing.
        let before = s.workloads["job"].clone();
        for (i, cmd) in [
            reported("u1", 1, t(50)),
            reported("u1", 1, t(40)),
            reported("u1", 2, t(60)),
            reported_by("b", "u1", 1, t(70)),
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(
                s.apply(7 + i as u64, cmd),
                CommandResult::Updated { count: 0 }
            );
        }
        assert_eq!(s.workloads["job"], before);
        assert_eq!(kinds(&s, AuditKind::Checkpointed), 1);
        // A newer one replaces it.
        assert_eq!(
            s.apply(20, reported("u1", 1, t(90))),
            CommandResult::Updated { count: 1 }
        );
        assert_eq!(last(&s), Some(t(90)));
        assert_eq!(kinds(&s, AuditKind::Checkpointed), 2);
    }

    #[test]
    fn an_attempt_that_ends_takes_its_checkpoint_with_it() {
        let mut s = running();
        status(&mut s, 4, tideway_api::agent::LocalPhase::Running);
        s.apply(5, reported("u1", 1, t(50)));
        assert_eq!(last(&s), Some(t(50)));
        status(
            &mut s,
            6,
            tideway_api::agent::LocalPhase::Evicted {
                reason: "node lost".into(),
            },
        );
        assert_eq!(phase_of(&s), WorkloadPhase::Pending);
        assert_eq!(last(&s), None, "the next attempt starts without it");
    }

    fn phase_of(s: &FederationState) -> WorkloadPhase {
        s.workloads["job"]
            .status
            .as_ref()
            .map(|st| st.phase)
            .unwrap_or_default()
    }
}
