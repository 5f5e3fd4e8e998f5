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
    /// What the operator wants of the member, kept apart from its liveness so a member that
    /// goes NotReady and comes back is still cordoned.
    #[serde(default)]
    pub intent: MemberIntent,
}

/// An operator's word on a member: take new work, take none, or also move its work off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MemberIntent {
    #[default]
    Schedulable,
    Cordoned,
    Draining,
}

impl MemberIntent {
    /// The phase a live (heartbeating) member with this intent shows.
    pub fn live_phase(self) -> MemberPhase {
        match self {
            MemberIntent::Schedulable => MemberPhase::Ready,
            MemberIntent::Cordoned => MemberPhase::Cordoned,
            MemberIntent::Draining => MemberPhase::Draining,
        }
    }
}

/// A workload whose member is lost after this many dispatches fails instead of moving again.
pub const MAX_ATTEMPTS_ON_LOSS: u32 = 3;

/// How long a drained workload is given to checkpoint and stop before it is moved.
pub const DRAIN_GRACE_SECONDS: u64 = 60;

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
        let intent = prev.map(|p| p.intent).unwrap_or_default();
        member.metadata.resource_version = Some(index);
        member.metadata.creation_timestamp = prev
            .and_then(|p| p.cluster.metadata.creation_timestamp)
            .or(Some(at));
        member.status = Some(MemberClusterStatus {
            phase: intent.live_phase(),
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
                intent,
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
        // A member coming back shows what the operator asked of it.
        status.phase = if phase == MemberPhase::NotReady {
            phase
        } else {
            rec.intent.live_phase()
        };
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
        let generated_at = digest.generated_at;
        rec.digest = Some(digest);
        self.scheduling.settling.retain(|_, st| {
            !(st.cluster.as_str() == name && st.left_at <= generated_at)
                && st.left_at + chrono::Duration::seconds(super::scheduling::SETTLING_LIMIT_SECS)
                    > at
        });
        CommandResult::Created {
            object: StoredObject::MemberCluster(Box::new(rec.cluster.clone())),
        }
    }

    /// Whether setting `intent` on member `name` would change anything; `None` when the member
    /// is unknown. The API checks this before proposing.
    pub fn intent_changes(&self, name: &str, intent: MemberIntent) -> Option<bool> {
        let rec = self.members.get(name)?;
        Some(rec.intent != intent || (intent == MemberIntent::Draining && self.has_running(name)))
    }

    /// Whether a member still holds work it was told to run.
    fn has_running(&self, name: &str) -> bool {
        self.assignments
            .get(name)
            .is_some_and(|m| m.values().any(|r| r.desired == Desired::Run))
    }

    /// Cordons, drains or uncordons a member. Draining sends every workload it runs a
    /// checkpoint notice (the preemption notice, so the agent checkpoints and stops it); the
    /// agent's report of the stop requeues the workload, and the scheduler places it elsewhere.
    pub(super) fn set_member_intent(
        &mut self,
        name: &str,
        intent: MemberIntent,
        index: u64,
    ) -> CommandResult {
        let Some(rec) = self.members.get_mut(name) else {
            return rejected(
                "metadata.name",
                format!("member cluster '{name}' is not registered"),
            );
        };
        rec.intent = intent;
        rec.cluster.metadata.resource_version = Some(index);
        let status = rec.cluster.status.get_or_insert_with(Default::default);
        if status.phase != MemberPhase::NotReady {
            status.phase = intent.live_phase();
        }
        status.message = Some(
            match intent {
                MemberIntent::Schedulable => "uncordoned",
                MemberIntent::Cordoned => "cordoned: no new work",
                MemberIntent::Draining => "draining: work is checkpointed and moved",
            }
            .into(),
        );
        let member = rec.cluster.clone();
        if intent == MemberIntent::Draining {
            let uids: Vec<String> = self
                .assignments
                .get(name)
                .map(|m| {
                    m.iter()
                        .filter(|(_, r)| r.desired == Desired::Run)
                        .map(|(u, _)| u.clone())
                        .collect()
                })
                .unwrap_or_default();
            for uid in uids {
                if let Some(rec) = self.assignments.get_mut(name).and_then(|m| m.get_mut(&uid)) {
                    rec.desired = Desired::Preempt {
                        grace_seconds: DRAIN_GRACE_SECONDS,
                    };
                    rec.revision = index;
                }
                if let Some(w) = self.uids.get(&uid).and_then(|n| self.workloads.get_mut(n)) {
                    if let Some(st) = w.status.as_mut() {
                        st.message = Some(format!(
                            "{name} is draining: checkpoint and stop within {DRAIN_GRACE_SECONDS} s, then move"
                        ));
                    }
                    w.metadata.resource_version = Some(index);
                }
            }
        }
        CommandResult::Created {
            object: StoredObject::MemberCluster(Box::new(member)),
        }
    }

    /// Moves work off a lost member. Each old assignment is fenced: `Desired::Cancel` for its
    /// attempt, so the member is told to stop it when it comes back, and its reports for that
    /// attempt are refused. The workload goes back to the queue to resume from its last
    /// checkpoint elsewhere, or fails once it has been dispatched [`MAX_ATTEMPTS_ON_LOSS`]
    /// times.
    pub(super) fn recover_workloads(
        &mut self,
        cluster: &str,
        uids: &[String],
        index: u64,
    ) -> CommandResult {
        let mut changed = 0u32;
        for uid in uids {
            let Some(rec) = self
                .assignments
                .get_mut(cluster)
                .and_then(|m| m.get_mut(uid))
            else {
                continue;
            };
            if !(rec.desired == Desired::Run || matches!(rec.desired, Desired::Preempt { .. })) {
                continue;
            }
            rec.desired = Desired::Cancel;
            rec.revision = index;
            let attempt = rec.assignment.attempt;
            self.scheduling.preempting.remove(uid);
            self.scheduling.placements.remove(uid);
            changed += 1;
            let Some(w) = self.uids.get(uid).and_then(|n| self.workloads.get_mut(n)) else {
                continue;
            };
            w.metadata.resource_version = Some(index);
            let st = w.status.get_or_insert_with(Default::default);
            if st.phase.is_terminal() {
                continue;
            }
            st.cluster = None;
            st.started_at = None;
            st.nodes.clear();
            if st.attempts >= MAX_ATTEMPTS_ON_LOSS {
                st.phase = WorkloadPhase::Failed;
                st.finished_at = self.clock;
                st.message = Some(format!(
                    "member {cluster} lost during attempt {attempt}; {} attempts spent",
                    st.attempts
                ));
            } else {
                st.phase = WorkloadPhase::Pending;
                st.pending_reason = Some(PendingReason::Queued);
                st.message = Some(format!(
                    "member {cluster} lost during attempt {attempt}: moving, from the last checkpoint"
                ));
            }
        }
        CommandResult::Updated { count: changed }
    }

    /// Why member `name` cannot be removed now, if it cannot.
    pub fn removal_blocked(&self, name: &str) -> Option<String> {
        let active = self
            .assignments
            .get(name)
            .map(|m| m.values().filter(|r| r.desired != Desired::Cancel).count())
            .unwrap_or(0);
        (active > 0).then(|| {
            format!("member cluster '{name}' still holds {active} workloads; drain it first")
        })
    }

    /// Forgets a member that holds no active work (its finished assignments go with it).
    pub(super) fn remove_member(&mut self, name: &str) -> CommandResult {
        if !self.members.contains_key(name) {
            return rejected(
                "metadata.name",
                format!("member cluster '{name}' is not registered"),
            );
        }
        if let Some(why) = self.removal_blocked(name) {
            return CommandResult::Rejected {
                rejection: Rejection::Busy { reason: why },
            };
        }
        self.assignments.remove(name);
        match self.members.remove(name) {
            Some(rec) => CommandResult::Created {
                object: StoredObject::MemberCluster(Box::new(rec.cluster)),
            },
            None => CommandResult::Updated { count: 0 },
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
            checkpoint_by: None,
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
            if !self.status_takes_effect(cluster, &st) {
                continue;
            }
            let Some(rec) = self
                .assignments
                .get_mut(cluster)
                .and_then(|m| m.get_mut(&st.uid))
            else {
                continue;
            };
            let Some(name) = self.uids.get(&st.uid) else {
                continue;
            };
            let Some(w) = self.workloads.get_mut(name) else {
                continue;
            };
            let retry_limit = w.spec.retry_limit.unwrap_or(0);
            let status = w.status.get_or_insert_with(Default::default);
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
                        if let Some(ps) = self.scheduling.placements.get_mut(&st.uid) {
                            super::scheduling::placed_where_reported(ps, &st.nodes);
                        }
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
                        // Backoff: a workload that fails at once must not be re-dispatched
                        // in a tight loop (a bad image, a broken node).
                        status.retry_not_before = Some(
                            st.since + tideway_api::workload::retry_backoff(&st.uid, st.attempt),
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
                if let Some(preemptor) = self.scheduling.preempting.remove(&st.uid) {
                    self.scheduling.settling.insert(
                        preemptor,
                        super::scheduling::Settling {
                            cluster: cluster.to_owned().into(),
                            left_at: st.since,
                        },
                    );
                }
                self.scheduling.placements.remove(&st.uid);
            }
            w.metadata.resource_version = Some(index);
            changed += 1;
        }
        CommandResult::Updated { count: changed }
    }

    /// Whether a status report would change anything: it names a live assignment of this
    /// cluster at its current attempt, of a workload that is not finished, and says something
    /// new. The API checks this before proposing, so a report that changes nothing writes
    /// nothing to the log; apply checks it again, in log order.
    pub fn status_takes_effect(&self, cluster: &str, st: &LocalStatus) -> bool {
        let Some(rec) = self.assignments.get(cluster).and_then(|m| m.get(&st.uid)) else {
            return false;
        };
        let live = rec.desired == Desired::Run || matches!(rec.desired, Desired::Preempt { .. });
        if rec.assignment.attempt != st.attempt || !live {
            return false;
        }
        let Some(w) = self.uids.get(&st.uid).and_then(|n| self.workloads.get(n)) else {
            return false;
        };
        let phase = w.status.as_ref().map(|s| s.phase).unwrap_or_default();
        match st.phase {
            _ if phase.is_terminal() => false,
            LocalPhase::Pending => false,
            // Still running: news only if it names nodes not yet recorded (pods bound late).
            LocalPhase::Running => {
                phase != WorkloadPhase::Running
                    || (!st.nodes.is_empty()
                        && w.status.as_ref().is_some_and(|s| s.nodes != st.nodes))
            }
            _ => true,
        }
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
    fn only_reports_that_change_something_take_effect() {
        let mut s = setup(None);
        let st = |uid: &str, attempt, phase| LocalStatus {
            uid: uid.into(),
            attempt,
            phase,
            since: t(9),
            nodes: vec![],
        };
        assert!(s.status_takes_effect("a", &st("u1", 1, LocalPhase::Running)));
        assert!(!s.status_takes_effect("zz", &st("u1", 1, LocalPhase::Running)));
        assert!(!s.status_takes_effect("a", &st("nope", 1, LocalPhase::Running)));
        assert!(!s.status_takes_effect("a", &st("u1", 2, LocalPhase::Running)));
        assert!(!s.status_takes_effect("a", &st("u1", 1, LocalPhase::Pending)));
        report(&mut s, 4, 1, LocalPhase::Running);
        assert!(!s.status_takes_effect("a", &st("u1", 1, LocalPhase::Running)));
        assert!(s.status_takes_effect("a", &st("u1", 1, LocalPhase::Succeeded)));
        report(&mut s, 5, 1, LocalPhase::Succeeded);
        assert!(!s.status_takes_effect("a", &st("u1", 1, LocalPhase::Succeeded)));
    }

    #[test]
    fn an_evicted_victim_leaves_its_preemptor_settling_until_a_newer_digest() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        s.scheduling.preempting.insert("u1".into(), "boss".into());
        report(
            &mut s,
            5,
            1,
            LocalPhase::Evicted {
                reason: "preempted".into(),
            },
        );
        assert_eq!(s.scheduling.settling["boss"].left_at, t(5));
        let digest = |at| Command::MemberDigest {
            name: "a".into(),
            digest: Box::new(tideway_api::digest::CapacityDigest {
                cluster: "a".into(),
                generated_at: at,
                pools: vec![],
            }),
            at,
        };
        s.apply(6, digest(t(4)));
        assert!(
            s.scheduling.settling.contains_key("boss"),
            "an older digest"
        );
        s.apply(7, digest(t(5)));
        assert!(
            s.scheduling.settling.is_empty(),
            "a digest taken after the exit"
        );
    }

    #[test]
    fn running_work_records_its_nodes_until_it_stops() {
        let mut s = setup(None);
        let nodes = vec![tideway_api::NodeGpus {
            node: "n1".into(),
            gpus: 8,
            zone: None,
            rack: None,
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

    fn intent(s: &mut FederationState, idx: u64, intent: MemberIntent) -> CommandResult {
        s.apply(
            idx,
            Command::SetMemberIntent {
                name: "a".into(),
                intent,
                at: t(idx as i64),
            },
        )
    }

    fn member_phase(s: &FederationState) -> MemberPhase {
        s.members["a"]
            .cluster
            .status
            .as_ref()
            .map(|s| s.phase)
            .unwrap_or_default()
    }

    #[test]
    fn cordon_survives_health_changes_and_reregistration_and_blocks_assignment() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        assert_eq!(s.intent_changes("a", MemberIntent::Cordoned), Some(true));
        intent(&mut s, 5, MemberIntent::Cordoned);
        assert_eq!(member_phase(&s), MemberPhase::Cordoned);
        assert_eq!(s.intent_changes("a", MemberIntent::Cordoned), Some(false));
        assert_eq!(s.intent_changes("zz", MemberIntent::Cordoned), None);
        assert_eq!(
            phase(&s),
            WorkloadPhase::Running,
            "running work is left alone"
        );
        for (idx, p) in [(6, MemberPhase::NotReady), (7, MemberPhase::Ready)] {
            s.apply(
                idx,
                Command::MemberHealth {
                    name: "a".into(),
                    phase: p,
                    message: None,
                    at: t(idx as i64),
                },
            );
        }
        assert_eq!(
            member_phase(&s),
            MemberPhase::Cordoned,
            "back, still cordoned"
        );
        s.apply(
            8,
            Command::RegisterMember {
                member: Box::new(MemberCluster::new(
                    "a",
                    MemberClusterSpec::new("eu", vec![]),
                )),
                agent_version: None,
                at: t(8),
            },
        );
        assert_eq!(
            member_phase(&s),
            MemberPhase::Cordoned,
            "re-registered, still cordoned"
        );
        report(&mut s, 9, 1, LocalPhase::Evicted { reason: "x".into() });
        let res = s.apply(
            10,
            Command::Assign {
                workload: "job".into(),
                cluster: "a".into(),
                pool: None,
                at: t(10),
            },
        );
        assert!(matches!(res, CommandResult::Rejected { .. }), "{res:?}");
        intent(&mut s, 11, MemberIntent::Schedulable);
        assert_eq!(member_phase(&s), MemberPhase::Ready);
    }

    #[test]
    fn drain_sends_checkpoint_notices_then_requeues_and_remove_waits_for_it() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        let res = s.apply(
            5,
            Command::RemoveMember {
                name: "a".into(),
                at: t(5),
            },
        );
        assert!(
            matches!(
                res,
                CommandResult::Rejected {
                    rejection: Rejection::Busy { .. }
                }
            ),
            "{res:?}"
        );
        intent(&mut s, 6, MemberIntent::Draining);
        assert_eq!(member_phase(&s), MemberPhase::Draining);
        let rec = &s.assignments["a"]["u1"];
        assert_eq!(
            rec.desired,
            Desired::Preempt {
                grace_seconds: DRAIN_GRACE_SECONDS
            }
        );
        assert_eq!(rec.revision, 6, "the agent sees the notice");
        assert_eq!(s.intent_changes("a", MemberIntent::Draining), Some(false));
        report(
            &mut s,
            7,
            1,
            LocalPhase::Evicted {
                reason: "drained".into(),
            },
        );
        assert_eq!(
            phase(&s),
            WorkloadPhase::Pending,
            "moved: back to the queue"
        );
        assert!(s.removal_blocked("a").is_none());
        let res = s.apply(
            8,
            Command::RemoveMember {
                name: "a".into(),
                at: t(8),
            },
        );
        assert!(matches!(res, CommandResult::Created { .. }), "{res:?}");
        assert!(!s.members.contains_key("a") && !s.assignments.contains_key("a"));
    }

    #[test]
    fn a_lost_member_s_work_is_fenced_requeued_and_fails_after_the_cap() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        let recover = |s: &mut FederationState, idx: u64| {
            s.apply(
                idx,
                Command::RecoverWorkloads {
                    cluster: "a".into(),
                    uids: vec!["u1".into(), "unknown".into()],
                    at: t(idx as i64),
                },
            )
        };
        assert_eq!(recover(&mut s, 5), CommandResult::Updated { count: 1 });
        assert_eq!(phase(&s), WorkloadPhase::Pending);
        let rec = &s.assignments["a"]["u1"];
        assert_eq!(
            (rec.desired.clone(), rec.revision),
            (Desired::Cancel, 5),
            "fenced"
        );
        // The member comes back and reports the old attempt: refused.
        assert!(!s.status_takes_effect(
            "a",
            &LocalStatus {
                uid: "u1".into(),
                attempt: 1,
                phase: LocalPhase::Succeeded,
                since: t(6),
                nodes: vec![],
            }
        ));
        assert_eq!(
            recover(&mut s, 6),
            CommandResult::Updated { count: 0 },
            "once"
        );
        for (idx, attempt) in [(7, 2), (9, 3)] {
            s.apply(
                idx,
                Command::Assign {
                    workload: "job".into(),
                    cluster: "a".into(),
                    pool: None,
                    at: t(idx as i64),
                },
            );
            assert_eq!(s.assignments["a"]["u1"].assignment.attempt, attempt);
            recover(&mut s, idx + 1);
        }
        assert_eq!(
            phase(&s),
            WorkloadPhase::Failed,
            "three dispatches lost: the cap"
        );
    }

    #[test]
    fn failures_retry_up_to_the_limit() {
        let mut s = setup(Some(1));
        let failed = || LocalPhase::Failed {
            reason: "exit 1".into(),
        };
        report(&mut s, 4, 1, failed());
        assert_eq!(phase(&s), WorkloadPhase::Pending, "one retry allowed");
        let not_before = s.workloads["job"]
            .status
            .as_ref()
            .and_then(|st| st.retry_not_before);
        assert_eq!(
            not_before,
            Some(t(4) + tideway_api::workload::retry_backoff("u1", 1)),
            "the retry waits out its backoff from the failure"
        );
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
