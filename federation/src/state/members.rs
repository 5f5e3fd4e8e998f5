//! Member clusters, their digests, and the assignments the federation gives them.
//!
//! Registration, health transitions, coalesced digests, assignments and the agents' status
//! reports are all log entries, so a new leader knows the whole fleet and every placement the
//! moment it is elected.

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
    /// The member's liveness epoch: the log index at which it last became live (registered,
    /// or came back from NotReady). A move of its work decided while it was lost names the
    /// epoch it saw, and applies only if the member has not come back since: an agent that
    /// came back has fenced and resumed its work, so moving it then would run it twice.
    #[serde(default)]
    pub epoch: u64,
    /// When the member was declared NotReady (cleared when it comes back). The wait timeout
    /// before its work moves runs from here, so the agent's lease (which ends before) always
    /// stops the old copies before the federation moves them.
    #[serde(default)]
    pub not_ready_at: Option<DateTime<Utc>>,
    /// When the member came back from NotReady, within the flap window (oldest first).
    #[serde(default)]
    pub returns: Vec<DateTime<Utc>>,
    /// Its current quarantine for flapping, or the last one (kept to double the next).
    #[serde(default)]
    pub quarantine: Option<Quarantine>,
}

/// A member quarantined for flapping takes no new work until `until`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Quarantine {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Its length, which a repeat soon after doubles.
    pub secs: u64,
    /// In force; false once it ended (by itself or by an uncordon).
    pub active: bool,
}

/// When a member that keeps coming back from NotReady is quarantined, and for how long.
///
/// A member that flaps (its agent crash-loops, its network drops in and out) would otherwise
/// take new work at every return and lose it at the next drop: each loss is a move from a
/// checkpoint, and the fleet pays for it. The policy travels in the `MemberHealth` entry that
/// brings the member back, so every replica applies the leader's policy in log order, on the
/// leader's clock, whatever its own flags say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlapPolicy {
    /// More returns than this within `window_secs` quarantine the member; 0 never does.
    pub limit: u32,
    /// The window returns are counted in.
    pub window_secs: u64,
    /// The first quarantine's length. A member quarantined again less than `max_secs` after
    /// its last quarantine ended gets twice the last one, up to `max_secs`.
    pub base_secs: u64,
    /// The longest quarantine.
    pub max_secs: u64,
}

impl Default for FlapPolicy {
    fn default() -> Self {
        Self {
            limit: 3,
            window_secs: 600,
            base_secs: 300,
            max_secs: 3600,
        }
    }
}

/// The member's status message when a quarantine starts.
fn quarantine_message(q: &Quarantine, p: FlapPolicy) -> String {
    format!(
        "quarantined for {} s (until {}): back from NotReady more than {} times in {} s; no \
         new work until then or `tideway member uncordon`",
        q.secs,
        q.until.to_rfc3339(),
        p.limit,
        p.window_secs
    )
}

fn secs(s: u64) -> chrono::TimeDelta {
    chrono::TimeDelta::seconds(i64::try_from(s).unwrap_or(i64::MAX / 1000))
}

impl MemberRecord {
    /// Whether its phase takes work (Ready); without a status yet, it does not.
    pub fn accepts_work(&self) -> bool {
        self.cluster
            .status
            .as_ref()
            .is_some_and(|s| s.phase.accepts_work())
    }

    /// Whether a quarantine for flapping is in force.
    pub fn quarantined(&self) -> bool {
        self.quarantine.as_ref().is_some_and(|q| q.active)
    }

    /// The phase the member shows while live (heartbeating): what the operator asked of it,
    /// else Quarantined while a quarantine is in force, else Ready.
    pub fn live_phase(&self) -> MemberPhase {
        match self.intent {
            MemberIntent::Schedulable if self.quarantined() => MemberPhase::Quarantined,
            i => i.live_phase(),
        }
    }

    /// Counts a return from NotReady at `at`; answers whether it starts a quarantine.
    fn count_return(&mut self, p: FlapPolicy, at: DateTime<Utc>) -> bool {
        if p.limit == 0 {
            return false;
        }
        self.returns.retain(|t| at - *t < secs(p.window_secs));
        self.returns.push(at);
        if self.returns.len() <= p.limit as usize {
            return false;
        }
        let len = match &self.quarantine {
            Some(q) if at - q.until < secs(p.max_secs) => q.secs.saturating_mul(2),
            _ => p.base_secs,
        }
        .clamp(1, p.max_secs.max(1));
        self.quarantine = Some(Quarantine {
            since: at,
            until: at + secs(len),
            secs: len,
            active: true,
        });
        self.returns.clear();
        true
    }

    /// Ends a quarantine whose time is up by `at`; answers whether one ended.
    fn end_quarantine_due(&mut self, at: DateTime<Utc>) -> bool {
        match self.quarantine.as_mut() {
            Some(q) if q.active && q.until <= at => {
                q.active = false;
                true
            }
            _ => false,
        }
    }

    fn quarantined_until(&self) -> Option<DateTime<Utc>> {
        self.quarantine
            .as_ref()
            .filter(|q| q.active)
            .map(|q| q.until)
    }
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
    /// Whether any member cluster takes work (Ready): without one nothing can be placed or
    /// preempted.
    pub fn any_member_ready(&self) -> bool {
        self.members.values().any(|m| m.accepts_work())
    }

    pub(super) fn register_member(
        &mut self,
        mut member: MemberCluster,
        agent_version: Option<String>,
        flaps: Option<FlapPolicy>,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let name = member.metadata.name.clone();
        if let Some(why) = self.registration_refused(&name) {
            return CommandResult::Rejected {
                rejection: Rejection::Busy { reason: why },
            };
        }
        let prev = self.members.get(&name);
        let intent = prev.map(|p| p.intent).unwrap_or_default();
        // A re-registration does not end a quarantine, nor forget recent returns; one that
        // brings a NotReady member back (its agent restarted) is a return like a heartbeat.
        let returns = prev.map(|p| p.returns.clone()).unwrap_or_default();
        let quarantine = prev.and_then(|p| p.quarantine.clone());
        let was_lost = prev.is_some_and(|p| {
            p.cluster
                .status
                .as_ref()
                .is_none_or(|s| s.phase == MemberPhase::NotReady)
        });
        member.metadata.resource_version = Some(index);
        member.metadata.creation_timestamp = prev
            .and_then(|p| p.cluster.metadata.creation_timestamp)
            .or(Some(at));
        let digest = prev.and_then(|p| p.digest.clone());
        let mut rec = MemberRecord {
            cluster: member.clone(),
            digest,
            intent,
            epoch: index,
            not_ready_at: None,
            returns,
            quarantine,
        };
        let mut message = "registered".to_string();
        if was_lost
            && let Some(p) = flaps
            && rec.count_return(p, at)
            && let Some(q) = &rec.quarantine
        {
            message = quarantine_message(q, p);
        }
        member.status = Some(MemberClusterStatus {
            phase: rec.live_phase(),
            last_heartbeat: Some(at),
            message: Some(message),
            agent_version,
            quarantined_until: rec.quarantined_until(),
        });
        rec.cluster = member.clone();
        self.members.insert(name, std::sync::Arc::new(rec));
        CommandResult::Created {
            object: StoredObject::MemberCluster(Box::new(member)),
        }
    }

    pub(super) fn member_health(
        &mut self,
        name: &str,
        phase: MemberPhase,
        message: Option<String>,
        flaps: Option<FlapPolicy>,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let Some(rec) = self.members.get_mut(name).map(std::sync::Arc::make_mut) else {
            return rejected(
                "metadata.name",
                format!("member cluster '{name}' is not registered"),
            );
        };
        rec.cluster.metadata.resource_version = Some(index);
        let was_lost = rec
            .cluster
            .status
            .as_ref()
            .is_none_or(|s| s.phase == MemberPhase::NotReady);
        let mut message = message;
        if phase == MemberPhase::NotReady {
            if !was_lost {
                rec.not_ready_at = Some(at);
            }
        } else {
            rec.not_ready_at = None;
            if was_lost {
                rec.epoch = index;
                if let Some(p) = flaps
                    && rec.count_return(p, at)
                    && let Some(q) = &rec.quarantine
                {
                    message = Some(quarantine_message(q, p));
                }
            }
        }
        // A member coming back shows what the operator asked of it (or its quarantine).
        let live = rec.live_phase();
        let until = rec.quarantined_until();
        let status = rec.cluster.status.get_or_insert_with(Default::default);
        status.phase = if phase == MemberPhase::NotReady {
            phase
        } else {
            live
        };
        status.quarantined_until = until;
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
        let Some(rec) = self.members.get_mut(name).map(std::sync::Arc::make_mut) else {
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

    /// Ends member `name`'s quarantine if its time is up by `at` (the leader proposes this
    /// when its clock passes the end; apply checks again, so a late or repeated entry, or one
    /// racing an uncordon, changes nothing).
    pub(super) fn end_quarantine(
        &mut self,
        name: &str,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let Some(rec) = self.members.get_mut(name).map(std::sync::Arc::make_mut) else {
            return CommandResult::Updated { count: 0 };
        };
        if !rec.end_quarantine_due(at) {
            return CommandResult::Updated { count: 0 };
        }
        rec.cluster.metadata.resource_version = Some(index);
        let live = rec.live_phase();
        let status = rec.cluster.status.get_or_insert_with(Default::default);
        if status.phase != MemberPhase::NotReady {
            status.phase = live;
        }
        status.quarantined_until = None;
        status.message = Some("quarantine over: takes new work again".into());
        CommandResult::Created {
            object: StoredObject::MemberCluster(Box::new(rec.cluster.clone())),
        }
    }

    /// Whether setting `intent` on member `name` would change anything; `None` when the member
    /// is unknown. The API checks this before proposing.
    pub fn intent_changes(&self, name: &str, intent: MemberIntent) -> Option<bool> {
        let rec = self.members.get(name)?;
        Some(
            rec.intent != intent
                || (intent == MemberIntent::Draining && self.has_running(name))
                || (intent == MemberIntent::Schedulable && rec.quarantined()),
        )
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
        let Some(rec) = self.members.get_mut(name).map(std::sync::Arc::make_mut) else {
            return rejected(
                "metadata.name",
                format!("member cluster '{name}' is not registered"),
            );
        };
        rec.intent = intent;
        rec.cluster.metadata.resource_version = Some(index);
        let lifted = intent == MemberIntent::Schedulable && rec.quarantined();
        if intent == MemberIntent::Schedulable {
            // An operator's uncordon also ends a quarantine, and forgets the flapping.
            rec.quarantine = None;
            rec.returns.clear();
        }
        let live = rec.live_phase();
        let until = rec.quarantined_until();
        let status = rec.cluster.status.get_or_insert_with(Default::default);
        if status.phase != MemberPhase::NotReady {
            status.phase = live;
        }
        status.quarantined_until = until;
        status.message = Some(
            match intent {
                MemberIntent::Schedulable if lifted => "uncordoned: quarantine lifted",
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
                if let Some(rec) = self.assignments.touch(name, &uid, index) {
                    rec.desired = Desired::Preempt {
                        grace_seconds: DRAIN_GRACE_SECONDS,
                    };
                }
                if let Some(mut w) = self.by_uid_mut(&uid) {
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
        epoch: Option<u64>,
        index: u64,
    ) -> CommandResult {
        if !self.move_allowed(cluster, epoch) {
            return CommandResult::Updated { count: 0 };
        }
        let mut changed = 0u32;
        for uid in uids {
            let live = self.assignments.record(cluster, uid).is_some_and(|rec| {
                rec.desired == Desired::Run || matches!(rec.desired, Desired::Preempt { .. })
            });
            if !live {
                continue;
            }
            let Some(rec) = self.assignments.touch(cluster, uid, index) else {
                continue;
            };
            rec.desired = Desired::Cancel;
            let attempt = rec.assignment.attempt;
            self.scheduling.preempting.remove(uid);
            self.scheduling.placements.remove(uid);
            changed += 1;
            // Field by field, not `by_uid_mut`: `self.clock` is read while `w` is held.
            let Some(mut w) = self
                .uids
                .get(uid.as_str())
                .and_then(|n| self.workloads.get_mut(n))
            else {
                continue;
            };
            w.metadata.resource_version = Some(index);
            let st = w.status.get_or_insert_with(Default::default);
            if st.phase.is_terminal() {
                continue;
            }
            st.cluster = None;
            st.started_at = None;
            st.last_checkpoint_at = None;
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
                st.pending_reason = Some(PendingReason::Queued.shared());
                st.message = Some(format!(
                    "member {cluster} lost during attempt {attempt}: moving, from the last checkpoint"
                ));
            }
        }
        CommandResult::Updated { count: changed }
    }

    /// Whether a move of `cluster`'s work decided at liveness `epoch` may still apply. The
    /// leader decided on a member it saw NotReady; if the member came back (registered or
    /// heartbeated) before this entry applied, even if it was lost again since, its agent has
    /// fenced and resumed the work, and the wait timeout starts over: nothing moves then.
    /// (`None`: an entry written before epochs existed; only the phase is checked.)
    pub fn move_allowed(&self, cluster: &str, epoch: Option<u64>) -> bool {
        self.members.get(cluster).is_some_and(|m| {
            m.cluster
                .status
                .as_ref()
                .is_some_and(|st| st.phase == MemberPhase::NotReady)
                && epoch.is_none_or(|e| e == m.epoch)
        })
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
        self.assignments.remove_cluster(name);
        self.removed_members.insert(name.to_string());
        match self.members.remove(name) {
            Some(rec) => CommandResult::Created {
                object: StoredObject::MemberCluster(Box::new(
                    std::sync::Arc::unwrap_or_clone(rec).cluster,
                )),
            },
            None => CommandResult::Updated { count: 0 },
        }
    }

    /// Why member `name`'s agent may not register it, if it may not: an operator removed it.
    pub fn registration_refused(&self, name: &str) -> Option<String> {
        self.removed_members.contains(name).then(|| {
            format!(
                "member cluster '{name}' was removed by an operator; its agent may not register \
                 it again until an operator re-admits it (`tideway member readmit {name}`)"
            )
        })
    }

    /// Lets a removed member's agent register it again (it comes back with no work).
    pub(super) fn readmit_member(&mut self, name: &str) -> CommandResult {
        let count = u32::from(self.removed_members.remove(name));
        CommandResult::Updated { count }
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
        if !self.members.get(cluster).is_some_and(|m| m.accepts_work()) {
            return rejected(
                "cluster",
                format!("member cluster '{cluster}' is not Ready"),
            );
        }
        let Some(mut w) = self.workloads.get_mut(name) else {
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
        let stored = w.clone();
        self.assignments.insert(cluster, &uid, record);
        // A preemptor that starts no longer holds its victims' capacity.
        self.scheduling.preemptors.retain(|r| uid != r.uid);
        CommandResult::Created {
            object: StoredObject::Workload(std::sync::Arc::new(stored)),
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
            if self.assignments.record(cluster, &st.uid).is_none() {
                continue;
            }
            // Whether the agent is told to stop this attempt (its record changes).
            let mut cancel = false;
            let Some(name) = self.uids.get(st.uid.as_str()) else {
                continue;
            };
            let Some(mut w) = self.workloads.get_mut(name) else {
                continue;
            };
            let retry_limit = w.spec.retry_limit.unwrap_or(0);
            let status = w.status.get_or_insert_with(Default::default);
            let requeue = |status: &mut tideway_api::WorkloadStatus, why: String| {
                status.phase = WorkloadPhase::Pending;
                status.pending_reason = Some(PendingReason::Queued.shared());
                status.cluster = None;
                status.started_at = None;
                status.last_checkpoint_at = None;
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
                    // Recorded here, so the member may forget it (the sim drops it, the kube
                    // backend deletes the finished Job): otherwise every member keeps every
                    // workload it ever ran, and compaction later drops the record unseen.
                    cancel = true;
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
                    cancel = true;
                }
                LocalPhase::Evicted { reason } => {
                    // Evicted work (node fault, preemption) goes back to the queue.
                    requeue(status, format!("evicted from {cluster}: {reason}"));
                    cancel = true;
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
            if cancel && let Some(rec) = self.assignments.touch(cluster, &st.uid, index) {
                rec.desired = Desired::Cancel;
            }
            changed += 1;
        }
        CommandResult::Updated { count: changed }
    }

    /// Whether a status report would change anything: it names a live assignment of this
    /// cluster at its current attempt, of a workload that is not finished, and says something
    /// new. The API checks this before proposing, so a report that changes nothing writes
    /// nothing to the log; apply checks it again, in log order.
    pub fn status_takes_effect(&self, cluster: &str, st: &LocalStatus) -> bool {
        let Some(rec) = self.assignments.record(cluster, &st.uid) else {
            return false;
        };
        let live = rec.desired == Desired::Run || matches!(rec.desired, Desired::Preempt { .. });
        if rec.assignment.attempt != st.attempt || !live {
            return false;
        }
        let Some(w) = self.by_uid(&st.uid) else {
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
        let out = self.assignments.after(cluster, after);
        // Every test that reads assignments also checks the journal against a scan.
        #[cfg(test)]
        assert_eq!(
            out,
            self.assignments.scan_after(cluster, after),
            "the journal answers as a scan would"
        );
        out
    }
}

/// Members by name, for the capacity view and the scheduler.
/// Member records by name, each shared with any copy of the state: a copy under the state
/// lock does not clone the members' digests, and a change clones only the member it changes.
/// Persistent, like the workloads: a copy of the state under its lock (the scheduling cycle,
/// a snapshot, a digest) shares the map instead of cloning a name per member.
pub type Members = imbl::OrdMap<String, std::sync::Arc<MemberRecord>>;

#[cfg(test)]
pub(crate) mod tests {
    use chrono::TimeZone;
    use tideway_api::{MemberClusterSpec, PodSet, Workload, WorkloadClass, WorkloadSpec};

    use super::*;
    use crate::state::command::Command;

    pub(crate) fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    pub(crate) fn setup(retry_limit: Option<u32>) -> FederationState {
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
                digest: None,
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
    fn a_recorded_success_tells_the_member_to_forget_the_work() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        assert_eq!(s.assignments["a"]["u1"].desired, Desired::Run);
        report(&mut s, 6, 1, LocalPhase::Succeeded);
        let rec = &s.assignments["a"]["u1"];
        assert_eq!((rec.desired.clone(), rec.revision), (Desired::Cancel, 6));
        // The agent resuming from before the report sees the Cancel, and nothing after it.
        let after = s.assignments_after("a", 4);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].desired, Desired::Cancel);
        assert!(s.assignments_after("a", 6).is_empty());
        // No longer held: drain has nothing to move, removal is not blocked, a late or
        // replayed report of the same attempt changes nothing.
        assert!(!s.has_running("a"));
        assert_eq!(s.removal_blocked("a"), None);
        let before = s.clone();
        report(&mut s, 7, 1, LocalPhase::Succeeded);
        assert_eq!(s.workloads, before.workloads);
        assert_eq!(s.assignments, before.assignments);
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
                    flaps: None,
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
                flaps: None,
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
        let lost = |s: &mut FederationState, idx: u64| {
            s.apply(
                idx,
                Command::MemberHealth {
                    name: "a".into(),
                    phase: MemberPhase::NotReady,
                    message: None,
                    at: t(idx as i64),
                    flaps: None,
                },
            );
        };
        let recover = |s: &mut FederationState, idx: u64| {
            s.apply(
                idx,
                Command::RecoverWorkloads {
                    cluster: "a".into(),
                    uids: vec!["u1".into(), "unknown".into()],
                    at: t(idx as i64),
                    epoch: None,
                },
            )
        };
        // Back before the move applied: nothing moves (its agent may have resumed the work).
        assert_eq!(recover(&mut s, 5), CommandResult::Updated { count: 0 });
        assert_eq!(phase(&s), WorkloadPhase::Running);
        lost(&mut s, 5);
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
                Command::MemberHealth {
                    name: "a".into(),
                    phase: MemberPhase::Ready,
                    message: None,
                    at: t(idx as i64),
                    flaps: None,
                },
            );
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
            lost(&mut s, idx + 1);
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

    // Fencing: every interleaving of a move the leader decided with the member coming back.
    // A decision names the liveness epoch it saw the member lost in (`lost_epoch`).

    fn health(s: &mut FederationState, idx: u64, phase: MemberPhase) {
        s.apply(
            idx,
            Command::MemberHealth {
                name: "a".into(),
                phase,
                message: None,
                at: t(idx as i64),
                flaps: None,
            },
        );
    }

    fn reregister(s: &mut FederationState, idx: u64) {
        s.apply(
            idx,
            Command::RegisterMember {
                member: Box::new(MemberCluster::new(
                    "a",
                    MemberClusterSpec::new("eu", vec![]),
                )),
                agent_version: None,
                at: t(idx as i64),
                flaps: None,
            },
        );
    }

    fn lost_epoch(s: &FederationState) -> u64 {
        s.members["a"].epoch
    }

    fn move_at(s: &mut FederationState, idx: u64, epoch: u64) -> CommandResult {
        s.apply(
            idx,
            Command::RecoverWorkloads {
                cluster: "a".into(),
                uids: vec!["u1".into()],
                at: t(idx as i64),
                epoch: Some(epoch),
            },
        )
    }

    fn still_runs_on_a(s: &FederationState) -> bool {
        phase(s) == WorkloadPhase::Running && s.assignments["a"]["u1"].desired == Desired::Run
    }

    #[test]
    fn a_move_decided_while_lost_applies_while_still_lost() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        health(&mut s, 5, MemberPhase::NotReady);
        let e = lost_epoch(&s);
        assert_eq!(move_at(&mut s, 6, e), CommandResult::Updated { count: 1 });
        assert_eq!(s.assignments["a"]["u1"].desired, Desired::Cancel);
        assert_eq!(phase(&s), WorkloadPhase::Pending);
    }

    #[test]
    fn a_registration_between_decision_and_apply_refuses_the_move() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        health(&mut s, 5, MemberPhase::NotReady);
        let e = lost_epoch(&s);
        // The agent restarted, fenced (nothing cancelled yet) and registered: it runs u1.
        reregister(&mut s, 6);
        assert_eq!(move_at(&mut s, 7, e), CommandResult::Updated { count: 0 });
        assert!(still_runs_on_a(&s));
    }

    #[test]
    fn a_heartbeat_between_decision_and_apply_refuses_the_move() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        health(&mut s, 5, MemberPhase::NotReady);
        let e = lost_epoch(&s);
        health(&mut s, 6, MemberPhase::Ready);
        assert_ne!(lost_epoch(&s), e, "coming back starts a new epoch");
        assert_eq!(move_at(&mut s, 7, e), CommandResult::Updated { count: 0 });
        assert!(still_runs_on_a(&s));
    }

    #[test]
    fn a_flap_between_decision_and_apply_refuses_the_move_and_a_new_decision_applies() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        health(&mut s, 5, MemberPhase::NotReady);
        let e = lost_epoch(&s);
        health(&mut s, 6, MemberPhase::Ready);
        health(&mut s, 7, MemberPhase::NotReady);
        // NotReady again, but the agent renewed its lease in between: the wait starts over.
        assert_eq!(move_at(&mut s, 8, e), CommandResult::Updated { count: 0 });
        assert!(still_runs_on_a(&s));
        assert_eq!(s.members["a"].not_ready_at, Some(t(7)));
        let e2 = lost_epoch(&s);
        assert_eq!(move_at(&mut s, 9, e2), CommandResult::Updated { count: 1 });
        assert_eq!(phase(&s), WorkloadPhase::Pending);
    }

    #[test]
    fn a_registration_without_a_lost_phase_starts_a_new_epoch() {
        // The agent restarted within the heartbeat timeout: never NotReady, but it fenced
        // and re-read its work, so a decision from before (a slow leader) must not apply.
        let mut s = setup(None);
        let e = lost_epoch(&s);
        reregister(&mut s, 4);
        assert!(lost_epoch(&s) > e);
        health(&mut s, 5, MemberPhase::NotReady);
        assert_eq!(move_at(&mut s, 6, e), CommandResult::Updated { count: 0 });
    }

    #[test]
    fn a_move_applied_before_the_member_comes_back_stays_fenced() {
        let mut s = setup(None);
        report(&mut s, 4, 1, LocalPhase::Running);
        health(&mut s, 5, MemberPhase::NotReady);
        let e = lost_epoch(&s);
        move_at(&mut s, 6, e);
        // The agent comes back: its registration and heartbeats do not revive the work...
        reregister(&mut s, 7);
        health(&mut s, 8, MemberPhase::Ready);
        assert_eq!(s.assignments["a"]["u1"].desired, Desired::Cancel);
        assert!(
            s.assignments_after("a", 0)
                .iter()
                .any(|r| r.desired == Desired::Cancel),
            "the agent's fence reads the cancel"
        );
        // ...and its late reports for the fenced attempt are refused.
        report(&mut s, 9, 1, LocalPhase::Running);
        assert_eq!(phase(&s), WorkloadPhase::Pending);
        // A second decision for the same work (another leader) changes nothing.
        assert_eq!(move_at(&mut s, 10, e), CommandResult::Updated { count: 0 });
    }

    #[test]
    fn lost_since_is_the_first_not_ready_and_clears_on_return() {
        let mut s = setup(None);
        assert_eq!(s.members["a"].not_ready_at, None);
        health(&mut s, 5, MemberPhase::NotReady);
        health(&mut s, 6, MemberPhase::NotReady);
        assert_eq!(
            s.members["a"].not_ready_at,
            Some(t(5)),
            "a repeated NotReady does not restart the wait"
        );
        health(&mut s, 7, MemberPhase::Ready);
        assert_eq!(s.members["a"].not_ready_at, None);
        assert_eq!(lost_epoch(&s), 7);
        // A heartbeat while live does not start a new epoch (only a return does).
        health(&mut s, 8, MemberPhase::Ready);
        assert_eq!(lost_epoch(&s), 7);
    }

    #[test]
    fn a_move_for_a_removed_or_unknown_member_does_nothing() {
        let mut s = setup(None);
        health(&mut s, 4, MemberPhase::NotReady);
        let e = lost_epoch(&s);
        let res = s.apply(
            5,
            Command::RecoverWorkloads {
                cluster: "nope".into(),
                uids: vec!["u1".into()],
                at: t(5),
                epoch: Some(e),
            },
        );
        assert_eq!(res, CommandResult::Updated { count: 0 });
        assert_eq!(phase(&s), WorkloadPhase::Assigned);
    }

    #[test]
    fn a_removed_member_stays_removed_until_an_operator_readmits_it() {
        let mut s = setup(None);
        health(&mut s, 4, MemberPhase::NotReady);
        let e = lost_epoch(&s);
        move_at(&mut s, 4, e);
        let res = s.apply(
            5,
            Command::RemoveMember {
                name: "a".into(),
                at: t(5),
            },
        );
        assert!(matches!(res, CommandResult::Created { .. }), "{res:?}");
        // Its agent, still running, registers again on its next heartbeat: refused.
        let before = s.clone();
        reregister(&mut s, 6);
        assert!(!s.members.contains_key("a"), "the removal was undone");
        assert_eq!(s.members, before.members);
        let why = s.registration_refused("a").expect("refused");
        assert!(why.contains("'a'") && why.contains("readmit"), "{why}");
        // Re-admitted: the agent may register it again, and it comes back with no work.
        let res = s.apply(
            7,
            Command::ReadmitMember {
                name: "a".into(),
                at: t(7),
            },
        );
        assert_eq!(res, CommandResult::Updated { count: 1 });
        assert!(s.registration_refused("a").is_none());
        reregister(&mut s, 8);
        assert!(s.members.contains_key("a"));
        assert!(s.assignments_after("a", 0).is_empty());
        // Re-admitting a member that was not removed changes nothing.
        let res = s.apply(
            9,
            Command::ReadmitMember {
                name: "a".into(),
                at: t(9),
            },
        );
        assert_eq!(res, CommandResult::Updated { count: 0 });
    }

    // Flapping: a member back from NotReady too often is quarantined, with a backoff that
    // doubles per repeat; it ends by itself (`EndQuarantine`, proposed by the leader once its
    // clock passes the end) or by an uncordon.

    const FLAPS: FlapPolicy = FlapPolicy {
        limit: 2,
        window_secs: 100,
        base_secs: 30,
        max_secs: 100,
    };

    /// The member goes NotReady at `at` and comes back one second later, with the policy.
    fn flap(s: &mut FederationState, idx: u64, at: i64) {
        for (i, p) in [(0, MemberPhase::NotReady), (1, MemberPhase::Ready)] {
            s.apply(
                idx + i,
                Command::MemberHealth {
                    name: "a".into(),
                    phase: p,
                    message: None,
                    at: t(at + i as i64),
                    flaps: Some(FLAPS),
                },
            );
        }
    }

    fn until(s: &FederationState) -> Option<DateTime<Utc>> {
        s.members["a"]
            .cluster
            .status
            .as_ref()
            .and_then(|st| st.quarantined_until)
    }

    #[test]
    fn a_flapping_member_is_quarantined_with_a_doubling_backoff() {
        let mut s = setup(None);
        flap(&mut s, 10, 10);
        flap(&mut s, 12, 20);
        assert_eq!(
            member_phase(&s),
            MemberPhase::Ready,
            "two returns: the limit"
        );
        flap(&mut s, 14, 30);
        assert_eq!(member_phase(&s), MemberPhase::Quarantined, "a third");
        assert_eq!(until(&s), Some(t(31 + 30)));
        assert!(!member_phase(&s).accepts_work());
        assert_eq!(phase(&s), WorkloadPhase::Assigned, "its work stays");
        let ev = s.audit.events.back().map(|e| e.evidence.clone());
        assert!(
            ev.as_deref().is_some_and(|e| e.contains("Quarantined")),
            "audited: {ev:?}"
        );
        // Neither a re-registration nor a NotReady spell ends it.
        reregister(&mut s, 16);
        assert_eq!(member_phase(&s), MemberPhase::Quarantined);
        health(&mut s, 17, MemberPhase::NotReady);
        assert_eq!(until(&s), Some(t(61)));
        // Too early: nothing changes.
        let end = |s: &mut FederationState, idx: u64, at: i64| {
            s.apply(
                idx,
                Command::EndQuarantine {
                    name: "a".into(),
                    at: t(at),
                },
            )
        };
        assert_eq!(end(&mut s, 18, 60), CommandResult::Updated { count: 0 });
        assert!(s.members["a"].quarantined());
        assert!(matches!(end(&mut s, 19, 61), CommandResult::Created { .. }));
        assert_eq!(member_phase(&s), MemberPhase::NotReady, "still silent");
        assert_eq!(until(&s), None);
        assert_eq!(end(&mut s, 20, 62), CommandResult::Updated { count: 0 });

        // Flapping again soon after: twice as long.
        flap(&mut s, 21, 70);
        flap(&mut s, 23, 80);
        flap(&mut s, 25, 90);
        assert_eq!(until(&s), Some(t(91 + 60)));
        // And again: capped at the maximum.
        end(&mut s, 27, 151);
        assert_eq!(member_phase(&s), MemberPhase::Ready);
        for (i, at) in [160, 170, 180].into_iter().enumerate() {
            flap(&mut s, 28 + 2 * i as u64, at);
        }
        assert_eq!(until(&s), Some(t(181 + 100)));
    }

    #[test]
    fn returns_outside_the_window_and_a_zero_limit_never_quarantine() {
        let mut s = setup(None);
        for i in 0..5u64 {
            flap(&mut s, 10 + 2 * i, 60 * i as i64);
        }
        assert_eq!(member_phase(&s), MemberPhase::Ready, "one a minute: fine");
        let mut s = setup(None);
        for i in 0..5u64 {
            s.apply(
                10 + i,
                Command::MemberHealth {
                    name: "a".into(),
                    phase: if i % 2 == 0 {
                        MemberPhase::NotReady
                    } else {
                        MemberPhase::Ready
                    },
                    message: None,
                    at: t(10 + i as i64),
                    flaps: Some(FlapPolicy { limit: 0, ..FLAPS }),
                },
            );
        }
        assert_ne!(member_phase(&s), MemberPhase::Quarantined);
    }

    #[test]
    fn an_uncordon_lifts_a_quarantine_and_forgets_the_flapping() {
        let mut s = setup(None);
        for i in 0..3u64 {
            flap(&mut s, 10 + 2 * i, 10 * i as i64);
        }
        assert_eq!(member_phase(&s), MemberPhase::Quarantined);
        assert_eq!(
            s.intent_changes("a", MemberIntent::Schedulable),
            Some(true),
            "an uncordon changes something"
        );
        intent(&mut s, 20, MemberIntent::Schedulable);
        assert_eq!(member_phase(&s), MemberPhase::Ready);
        assert_eq!(until(&s), None);
        assert!(s.members["a"].quarantine.is_none());
        assert_eq!(
            s.intent_changes("a", MemberIntent::Schedulable),
            Some(false)
        );
        // A cordon during a quarantine shows Cordoned; uncordoned, the quarantine is gone too.
        for i in 0..3u64 {
            flap(&mut s, 30 + 2 * i, 100 + 10 * i as i64);
        }
        intent(&mut s, 40, MemberIntent::Cordoned);
        assert_eq!(member_phase(&s), MemberPhase::Cordoned);
        assert!(until(&s).is_some());
        intent(&mut s, 41, MemberIntent::Schedulable);
        assert_eq!(member_phase(&s), MemberPhase::Ready);
    }

    #[test]
    fn an_agent_restart_that_brings_the_member_back_counts_as_a_return() {
        let mut s = setup(None);
        let register = |s: &mut FederationState, idx: u64| {
            s.apply(
                idx,
                Command::RegisterMember {
                    member: Box::new(MemberCluster::new(
                        "a",
                        MemberClusterSpec::new("eu", vec![]),
                    )),
                    agent_version: None,
                    at: t(idx as i64),
                    flaps: Some(FLAPS),
                },
            )
        };
        // A registration of a live member is no return.
        for idx in 10..14 {
            register(&mut s, idx);
        }
        assert_eq!(member_phase(&s), MemberPhase::Ready);
        for i in 0..3u64 {
            health(&mut s, 20 + 2 * i, MemberPhase::NotReady);
            register(&mut s, 21 + 2 * i);
        }
        assert_eq!(member_phase(&s), MemberPhase::Quarantined);
        assert_eq!(until(&s), Some(t(25 + 30)));
        let ev = s.audit.events.back().map(|e| e.evidence.clone());
        assert!(
            ev.as_deref().is_some_and(|e| e.contains("Quarantined")),
            "audited: {ev:?}"
        );
    }
}
