//! Member clusters, their digests, and the assignments the federation gives them.
//!
//! Registration, health transitions, coalesced digests, assignments and the agents' status
//! reports are all log entries, so a new leader knows the whole fleet and every placement the
//! moment it is elected.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::agent::{Assignment, AssignmentRecord, Desired, LocalPhase, LocalStatus};
use tideway_api::digest::CapacityDigest;
use tideway_api::{
    FieldError, MemberCluster, MemberClusterStatus, MemberPhase, PendingReason, WorkloadPhase,
};

use super::FederationState;
use super::command::{CommandResult, Rejection, StoredObject};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub cluster: MemberCluster,
    /// The last replicated digest (coalesced: not every heartbeat's).
    pub digest: Option<CapacityDigest>,
}

fn rejected(field: &str, reason: String) -> CommandResult {
    CommandResult::Rejected {
        rejection: Rejection::Invalid {
            errors: vec![FieldError::new(field, reason)],
        },
    }
}

impl FederationState {
    pub(super) fn register_member(
        &mut self,
        mut member: MemberCluster,
        agent_version: Option<String>,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let name = member.metadata.name.clone();
        let prev = self.members.get(&name);
        member.metadata.resource_version = Some(index);
        member.metadata.creation_timestamp = prev
            .and_then(|p| p.cluster.metadata.creation_timestamp)
            .or(Some(at));
        member.status = Some(MemberClusterStatus {
            phase: MemberPhase::Ready,
            last_heartbeat: Some(at),
            message: Some("registered".into()),
            agent_version,
        });
        let digest = prev.and_then(|p| p.digest.clone());
        self.members.insert(
            name,
            MemberRecord {
                cluster: member.clone(),
                digest,
            },
        );
        CommandResult::Created {
            object: StoredObject::MemberCluster(Box::new(member)),
        }
    }

    pub(super) fn member_health(
        &mut self,
        name: &str,
        phase: MemberPhase,
        message: Option<String>,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let Some(rec) = self.members.get_mut(name) else {
            return rejected(
                "metadata.name",
                format!("member cluster '{name}' is not registered"),
            );
        };
        rec.cluster.metadata.resource_version = Some(index);
        let status = rec.cluster.status.get_or_insert_with(Default::default);
        status.phase = phase;
        status.message = message;
        if phase == MemberPhase::Ready {
            status.last_heartbeat = Some(at);
        }
        CommandResult::Created {
            object: StoredObject::MemberCluster(Box::new(rec.cluster.clone())),
        }
    }

    pub(super) fn member_digest(
        &mut self,
        name: &str,
        digest: CapacityDigest,
        at: DateTime<Utc>,
    ) -> CommandResult {
        let Some(rec) = self.members.get_mut(name) else {
            return rejected(
                "cluster",
                format!("member cluster '{name}' is not registered"),
            );
        };
        if let Some(s) = rec.cluster.status.as_mut() {
            s.last_heartbeat = Some(at);
        }
        rec.digest = Some(digest);
        CommandResult::Created {
            object: StoredObject::MemberCluster(Box::new(rec.cluster.clone())),
        }
    }

    /// Places a pending workload on a member cluster.
    pub(super) fn assign(
        &mut self,
        name: &str,
        cluster: &str,
        pool: Option<String>,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        if !self
            .members
            .get(cluster)
            .and_then(|m| m.cluster.status.as_ref())
            .is_some_and(|s| s.phase.accepts_work())
        {
            return rejected(
                "cluster",
                format!("member cluster '{cluster}' is not Ready"),
            );
        }
        let Some(w) = self.workloads.get_mut(name) else {
            return rejected("workload", format!("workload '{name}' does not exist"));
        };
        let status = w.status.get_or_insert_with(Default::default);
        if status.phase != WorkloadPhase::Pending {
            return rejected(
                "workload",
                format!("workload '{name}' is {:?}, not Pending", status.phase),
            );
        }
        status.phase = WorkloadPhase::Assigned;
        status.cluster = Some(cluster.to_string());
        status.pending_reason = None;
        status.message = Some(format!("assigned to {cluster}"));
        status.attempts += 1;
        status.admitted_at = Some(at);
        let attempt = status.attempts;
        w.metadata.resource_version = Some(index);
        let uid = w.metadata.uid.clone().unwrap_or_default();
        let record = AssignmentRecord {
            revision: index,
            assignment: Assignment {
                workload: w.clone(),
                pool,
                attempt,
            },
            desired: Desired::Run,
        };
        self.assignments
            .entry(cluster.to_string())
            .or_default()
            .insert(uid, record);
        CommandResult::Created {
            object: StoredObject::Workload(Box::new(w.clone())),
        }
    }

    /// Applies an agent's status report. Reports for an older attempt, or for a workload the
    /// cluster no longer holds, are ignored: a replayed or late report changes nothing.
    pub(super) fn report_status(
        &mut self,
        cluster: &str,
        statuses: Vec<LocalStatus>,
        index: u64,
    ) -> CommandResult {
        let mut changed = 0u32;
        for st in statuses {
            let Some(rec) = self
                .assignments
                .get_mut(cluster)
                .and_then(|m| m.get_mut(&st.uid))
            else {
                continue;
            };
            let preempting = matches!(rec.desired, Desired::Preempt { .. });
            if rec.assignment.attempt != st.attempt || !(rec.desired == Desired::Run || preempting)
            {
                continue;
            }
            let Some(name) = self.uids.get(&st.uid) else {
                continue;
            };
            let Some(w) = self.workloads.get_mut(name) else {
                continue;
            };
            let retry_limit = w.spec.retry_limit.unwrap_or(0);
            let status = w.status.get_or_insert_with(Default::default);
            if status.phase.is_terminal() {
                continue;
            }
            let requeue = |status: &mut tideway_api::WorkloadStatus, why: String| {
                status.phase = WorkloadPhase::Pending;
                status.pending_reason = Some(PendingReason::Queued);
                status.cluster = None;
                status.started_at = None;
                status.nodes.clear();
                status.message = Some(why);
            };
            if st.phase != LocalPhase::Running {
                status.nodes.clear();
            }
            match &st.phase {
                LocalPhase::Pending => continue,
                LocalPhase::Running => {
                    // The nodes may be reported after the start (pods bound late).
                    if !st.nodes.is_empty() {
                        status.nodes.clone_from(&st.nodes);
                    }
                    if status.phase == WorkloadPhase::Running {
                        continue;
                    }
                    status.phase = WorkloadPhase::Running;
                    status.started_at = Some(st.since);
                    status.message = Some(format!("running on {cluster}"));
                }
                LocalPhase::Succeeded => {
                    status.phase = WorkloadPhase::Succeeded;
                    status.finished_at = Some(st.since);
                    status.message = Some(format!("succeeded on {cluster}"));
                }
                LocalPhase::Failed { reason } | LocalPhase::Aborted { reason } => {
                    // Retries keep the original priority; attempts count every dispatch.
                    if status.attempts <= retry_limit {
                        requeue(
                            status,
                            format!("attempt {} failed on {cluster}: {reason}", st.attempt),
                        );
                    } else {
                        status.phase = WorkloadPhase::Failed;
                        status.finished_at = Some(st.since);
                        status.message = Some(format!("failed on {cluster}: {reason}"));
                    }
                    rec.desired = Desired::Cancel;
                    rec.revision = index;
                }
                LocalPhase::Evicted { reason } => {
                    // Evicted work (node fault, preemption) goes back to the queue.
                    requeue(status, format!("evicted from {cluster}: {reason}"));
                    rec.desired = Desired::Cancel;
                    rec.revision = index;
                }
            }
            if status.phase != WorkloadPhase::Running && status.phase != WorkloadPhase::Assigned {
                // Done with this placement: evicted, finished, failed or requeued.
                self.scheduling.preempting.remove(&st.uid);
                self.scheduling.placements.remove(&st.uid);
            }
            w.metadata.resource_version = Some(index);
            changed += 1;
        }
        CommandResult::Updated { count: changed }
    }

    /// Assignments of `cluster` changed after `after`, in revision order.
    pub fn assignments_after(&self, cluster: &str, after: u64) -> Vec<AssignmentRecord> {
        let mut out: Vec<AssignmentRecord> = self
            .assignments
            .get(cluster)
            .map(|m| m.values().filter(|r| r.revision > after).cloned().collect())
            .unwrap_or_default();
        out.sort_by_key(|r| r.revision);
        out
    }
}

/// Members by name, for the capacity view and the scheduler.
pub type Members = BTreeMap<String, MemberRecord>;

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::{MemberClusterSpec, PodSet, Workload, WorkloadClass, WorkloadSpec};

    use super::*;
    use crate::state::command::Command;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    fn setup(retry_limit: Option<u32>) -> FederationState {
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
            },
        );
        let mut spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("w", 1, 8, "H100")],
        );
        spec.retry_limit = retry_limit;
        let mut w = Workload::new("job", spec);
        w.metadata.uid = Some("u1".into());
        s.apply(
            2,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: "k".into(),
                at: t(1),
            },
        );
        s.apply(
            3,
            Command::Assign {
                workload: "job".into(),
                cluster: "a".into(),
                pool: None,
                at: t(2),
            },
        );
        s
    }

    fn report(s: &mut FederationState, idx: u64, attempt: u32, phase: LocalPhase) {
        report_on(s, idx, attempt, phase, Vec::new());
    }

    fn report_on(
        s: &mut FederationState,
        idx: u64,
        attempt: u32,
        phase: LocalPhase,
        nodes: Vec<tideway_api::NodeGpus>,
    ) {
        s.apply(
            idx,
            Command::ReportStatus {
                cluster: "a".into(),
                statuses: vec![LocalStatus {
                    uid: "u1".into(),
                    attempt,
                    phase,
                    since: t(idx as i64),
                    nodes,
                }],
            },
        );
    }

    fn phase(s: &FederationState) -> WorkloadPhase {
        s.workloads["job"]
            .status
            .as_ref()
            .map(|s| s.phase)
            .unwrap_or_default()
    }

    #[test]
    fn lifecycle_assigned_running_succeeded() {
        let mut s = setup(None);
        assert_eq!(phase(&s), WorkloadPhase::Assigned);
        assert_eq!(s.assignments_after("a", 0).len(), 1);
        assert!(
            s.assignments_after("a", 3).is_empty(),
            "resumes after the revision"
        );
        report(&mut s, 4, 1, LocalPhase::Running);
        assert_eq!(phase(&s), WorkloadPhase::Running);
        // A replayed report changes nothing.
        let before = s.clone();
        report(&mut s, 5, 1, LocalPhase::Running);
        assert_eq!(s.workloads, before.workloads);
        report(&mut s, 6, 1, LocalPhase::Succeeded);
        assert_eq!(phase(&s), WorkloadPhase::Succeeded);
    }

    #[test]
    fn running_work_records_its_nodes_until_it_stops() {
        let mut s = setup(None);
        let nodes = vec![tideway_api::NodeGpus {
            node: "n1".into(),
            gpus: 8,
        }];
        let status = |s: &FederationState| s.workloads.values().next().unwrap().status.clone();
        report(&mut s, 4, 1, LocalPhase::Running);
        assert!(status(&s).unwrap().nodes.is_empty());
        // Nodes reported after the start (pods bound late) are recorded too.
        report_on(&mut s, 5, 1, LocalPhase::Running, nodes.clone());
        assert_eq!(status(&s).unwrap().nodes, nodes);
        report(&mut s, 6, 1, LocalPhase::Succeeded);
        assert!(status(&s).unwrap().nodes.is_empty());
    }

    #[test]
    fn eviction_requeues_and_stale_attempts_are_ignored() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        report(
            &mut s,
            5,
            1,
            LocalPhase::Evicted {
                reason: "ECC errors".into(),
            },
        );
        assert_eq!(phase(&s), WorkloadPhase::Pending);
        assert_eq!(s.assignments["a"]["u1"].desired, Desired::Cancel);
        s.apply(
            6,
            Command::Assign {
                workload: "job".into(),
                cluster: "a".into(),
                pool: None,
                at: t(6),
            },
        );
        assert_eq!(s.assignments["a"]["u1"].assignment.attempt, 2);
        // A late report from attempt 1 must not touch attempt 2.
        report(&mut s, 7, 1, LocalPhase::Succeeded);
        assert_eq!(phase(&s), WorkloadPhase::Assigned);
    }

    #[test]
    fn failures_retry_up_to_the_limit() {
        let mut s = setup(Some(1));
        let failed = || LocalPhase::Failed {
            reason: "exit 1".into(),
        };
        report(&mut s, 4, 1, failed());
        assert_eq!(phase(&s), WorkloadPhase::Pending, "one retry allowed");
        s.apply(
            5,
            Command::Assign {
                workload: "job".into(),
                cluster: "a".into(),
                pool: None,
                at: t(5),
            },
        );
        report(&mut s, 6, 2, failed());
        assert_eq!(phase(&s), WorkloadPhase::Failed);
    }
}
