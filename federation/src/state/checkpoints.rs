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
use tideway_api::agent::Desired;
use tideway_api::{ClusterName, Uid};

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
}
