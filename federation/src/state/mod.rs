//! The replicated federation state: what every node holds after applying the log.
//!
//! Apply is a pure function of (state, log index, command): no clock, no randomness, no I/O,
//! so every node that applies the same log holds the same bytes.

pub mod access;
pub mod assignments;
#[cfg(test)]
pub(crate) mod assignments_tests;
pub mod audit;
pub mod bootstrap;
pub mod checkpoints;
pub mod command;
mod command_decode;
pub mod digest_hash;
pub mod idempotency;
pub mod lifecycle;
pub mod members;
pub mod policy;
pub mod scheduling;
pub mod shared_strings;
pub mod tenancy;
pub mod tidal;
pub mod usage;
pub mod webhooks;
pub mod workloads;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::{FieldError, PriorityClass, Queue, RoleBinding, Workload};

use self::command::{Command, CommandResult, Rejection, StoredObject};

/// How long an idempotency key is remembered after the submission it names.
pub const IDEMPOTENCY_RETENTION_SECS: i64 = 24 * 3600;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IdempotencyRecord {
    /// The workload's name, shared with the order and UID indexes.
    pub workload: Arc<str>,
    pub at: DateTime<Utc>,
    /// The UID of the workload the key created: once that workload is compacted and its name
    /// reused, the key must not answer with the newcomer.
    #[serde(default)]
    pub uid: Option<Arc<str>>,
    /// [`idempotency::submission_digest`] of what the key submitted: the same key with other
    /// content is refused, never answered with the first workload.
    #[serde(default)]
    pub digest: Option<idempotency::SubmissionDigest>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FederationState {
    /// Workloads by name (read as a map; changes are journaled for the cycle's copy).
    pub workloads: workloads::Workloads,
    /// Submission order: sequence number to workload name; the stable order of listings.
    /// (This and the other maps that grow with the workloads are persistent, like
    /// [`workloads::Workloads`]: a copy of the state under its lock is cheap at any size.)
    ///
    /// The names, UIDs and keys these indexes hold are shared (`Arc<str>`, encoded as plain
    /// strings): one submission's name is in three of them (order, UIDs, its record), its
    /// UID and its key in two.
    #[serde(serialize_with = "crate::parallel_encode::ordmap")]
    pub order: imbl::OrdMap<u64, Arc<str>>,
    pub next_seq: u64,
    #[serde(serialize_with = "crate::parallel_encode::ordmap")]
    pub idempotency: imbl::OrdMap<Arc<str>, IdempotencyRecord>,
    /// Idempotency keys by the time they were recorded, so expiry costs O(log n), not a scan.
    #[serde(serialize_with = "crate::parallel_encode::ordset")]
    pub idempotency_expiry: imbl::OrdSet<(DateTime<Utc>, Arc<str>)>,
    /// UID to name.
    #[serde(serialize_with = "crate::parallel_encode::ordmap")]
    pub uids: imbl::OrdMap<Arc<str>, Arc<str>>,
    pub queues: BTreeMap<String, Queue>,
    pub priority_classes: BTreeMap<String, PriorityClass>,
    /// Member clusters by name.
    pub members: members::Members,
    /// Assignments by member cluster, then by workload UID, with the revision journal the
    /// agents' long-polls read (see [`assignments`]).
    pub assignments: assignments::Assignments,
    /// Reservations, placements and preemptions of the scheduler.
    #[serde(default)]
    pub scheduling: scheduling::SchedulingState,
    /// Quota schedules, the window each is in, and the applied policy's settings.
    #[serde(default)]
    pub tidal: tidal::TidalState,
    /// The latest time any applied command carried; apply never looks at a clock.
    pub clock: Option<DateTime<Utc>>,
    /// Every change, with its actor.
    #[serde(default)]
    pub audit: audit::AuditTrail,
    /// What chargeback reads: runs, capacity and guarantees over time.
    #[serde(default)]
    pub usage: usage::UsageLedger,
    /// Notification endpoints with their delivery cursors, by name.
    #[serde(default)]
    pub webhooks: BTreeMap<String, tideway_api::webhook::Webhook>,
    /// Policy versions, and the rollout in progress.
    #[serde(default)]
    pub policy: policy::PolicyStore,
    /// Who holds which role, by binding name.
    #[serde(default)]
    pub role_bindings: BTreeMap<String, RoleBinding>,
    /// Members an operator removed: their agents may not register them again until an
    /// operator re-admits them (a running agent would otherwise undo the removal on its next
    /// heartbeat).
    #[serde(default)]
    pub removed_members: BTreeSet<String>,
}

impl Default for FederationState {
    fn default() -> Self {
        let mut queues = BTreeMap::new();
        let q = bootstrap::default_queue();
        queues.insert(q.metadata.name.clone(), q);
        let mut priority_classes = BTreeMap::new();
        for pc in bootstrap::default_priority_classes() {
            priority_classes.insert(pc.metadata.name.clone(), pc);
        }
        Self {
            workloads: Default::default(),
            order: Default::default(),
            next_seq: 1,
            idempotency: Default::default(),
            idempotency_expiry: Default::default(),
            uids: Default::default(),
            queues,
            priority_classes,
            members: Default::default(),
            assignments: Default::default(),
            scheduling: Default::default(),
            tidal: Default::default(),
            clock: None,
            audit: Default::default(),
            usage: Default::default(),
            webhooks: BTreeMap::new(),
            policy: Default::default(),
            role_bindings: BTreeMap::new(),
            removed_members: BTreeSet::new(),
        }
    }
}

impl FederationState {
    /// The next version of this state, to replace it as the live one while readers keep this
    /// one: a copy ([`Clone`], O(1) in what grows with the workloads) whose workloads keep
    /// this version's journal ([`workloads::Workloads::successor`]). Only the new version may
    /// change from here on.
    pub fn successor(&self) -> Self {
        let mut next = self.clone();
        next.workloads = self.workloads.successor();
        next
    }

    /// The references a workload makes that this state cannot satisfy, with their fields.
    pub fn check_references(&self, w: &Workload) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if !self.queues.contains_key(w.spec.queue.as_str()) {
            errs.push(FieldError::new(
                "spec.queue",
                format!("queue '{}' does not exist", w.spec.queue),
            ));
        }
        if !self
            .priority_classes
            .contains_key(w.spec.priority_class.as_str())
        {
            errs.push(FieldError::new(
                "spec.priorityClass",
                format!("priority class '{}' does not exist", w.spec.priority_class),
            ));
        }
        errs
    }

    /// What the queue and the priority class permit, checked at submission: the queue's
    /// workload classes, and the class's `allowedUsers` and `allowedQueues` (`spec.user` is
    /// the authenticated subject when the API authenticates).
    ///
    /// Not re-checked in apply: a rule changed later must not turn an entry accepted before
    /// into a rejection when the log is replayed.
    pub fn check_permissions(&self, w: &Workload) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(q) = self.queues.get(w.spec.queue.as_str())
            && !q.spec.serves(w.spec.class)
        {
            let classes: Vec<&str> = q.spec.classes.iter().map(|c| c.as_str()).collect();
            errs.push(FieldError::new(
                "spec.class",
                format!(
                    "queue '{}' accepts only {} workloads, not {}",
                    w.spec.queue,
                    classes.join(", "),
                    w.spec.class.as_str()
                ),
            ));
        }
        if let Some(pc) = self.priority_classes.get(w.spec.priority_class.as_str()) {
            let user = w.spec.user.as_deref();
            let allowed = &pc.spec.allowed_users;
            if !allowed.is_empty() && !user.is_some_and(|u| allowed.iter().any(|a| a == u)) {
                errs.push(FieldError::new(
                    "spec.priorityClass",
                    format!(
                        "priority class '{}' is not allowed for user '{}'",
                        w.spec.priority_class,
                        user.unwrap_or("(anonymous)")
                    ),
                ));
            }
            let queues = &pc.spec.allowed_queues;
            if !queues.is_empty() && !queues.iter().any(|q| *q == w.spec.queue) {
                errs.push(FieldError::new(
                    "spec.priorityClass",
                    format!(
                        "priority class '{}' is not allowed in queue '{}'",
                        w.spec.priority_class, w.spec.queue
                    ),
                ));
            }
        }
        errs
    }

    /// Looks a workload up by name or by UID.
    pub fn workload(&self, id: &str) -> Option<&Workload> {
        self.workloads
            .get(id)
            .map(|w| &**w)
            .or_else(|| self.by_uid(id))
    }

    /// Looks a workload up by UID.
    pub fn by_uid(&self, uid: &str) -> Option<&Workload> {
        self.uids
            .get(uid)
            .and_then(|n| self.workloads.get(&**n))
            .map(|w| &**w)
    }

    /// The workload of `uid`, to change (journaled, see [`workloads::Workloads::get_mut`]).
    pub(crate) fn by_uid_mut(&mut self, uid: &str) -> Option<workloads::WorkloadMut<'_>> {
        let name = self.uids.get(uid)?;
        self.workloads.get_mut(name)
    }

    /// The workload an idempotency key created, if the key is still remembered.
    pub fn by_idempotency_key(&self, key: &str) -> Option<&Workload> {
        self.idempotency
            .get(key)
            .and_then(|r| self.workloads.get(&*r.workload).map(|w| (r, w)))
            .filter(|(r, w)| r.uid.is_none() || r.uid.as_deref() == w.metadata.uid.as_deref())
            .map(|(_, w)| &**w)
    }

    /// What a submission of `w` under `key` answers without creating anything: the workload
    /// the key created before (a replay), or a refusal if the key was used for other content.
    /// `None`: the key is new (or forgotten), go on and create.
    /// `digest` is the submission's ([`idempotency::submission_digest`]), asked for only when
    /// the key has a record to compare it with.
    pub fn replay(
        &self,
        key: &str,
        digest: impl FnOnce() -> idempotency::SubmissionDigest,
    ) -> Option<Result<&Workload, Rejection>> {
        let rec = self.idempotency.get(key)?;
        let existing = self.by_idempotency_key(key)?;
        match &rec.digest {
            Some(d) if *d != digest() => Some(Err(Rejection::IdempotencyKeyReused {
                key: key.to_string(),
                workload: existing.metadata.name.clone(),
            })),
            _ => Some(Ok(existing)),
        }
    }

    pub fn apply(&mut self, index: u64, cmd: Command) -> CommandResult {
        let (hint, actor) = audit::Hint::of(&cmd);
        let touch = usage::Touch::of(&cmd);
        let version_before = self.policy.current();
        let res = self.apply_command(index, cmd);
        self.record(index, hint, actor, &res, version_before);
        self.observe_usage(touch);
        res
    }

    fn apply_command(&mut self, index: u64, cmd: Command) -> CommandResult {
        match cmd {
            Command::As { actor, command } => {
                let before = self.policy.current();
                let result = self.apply_command(index, *command);
                // A version a lone object made (a Queue applied alone) names no applier of
                // its own: it is whoever sent the object, as the audit record says.
                if self.policy.current() != before
                    && let Some(st) = self
                        .policy
                        .versions
                        .back_mut()
                        .and_then(|p| p.status.as_mut())
                    && st.applied_by.is_none()
                {
                    st.applied_by = Some(actor);
                }
                result
            }
            Command::SubmitWorkload {
                workload,
                idempotency_key,
                at,
                digest,
            } => self.submit(index, *workload, idempotency_key, at, digest),
            Command::PutQueue { queue, at } => {
                self.tick(at);
                self.put_policy_object(policy::PolicyObject::Queue(queue), at, index)
            }
            Command::RegisterMember {
                member,
                agent_version,
                at,
                flaps,
            } => {
                self.tick(at);
                self.register_member(*member, agent_version, flaps, at, index)
            }
            Command::MemberHealth {
                name,
                phase,
                message,
                at,
                flaps,
            } => {
                self.tick(at);
                self.member_health(&name, phase, message, flaps, at, index)
            }
            Command::MemberDigest { name, digest, at } => {
                self.tick(at);
                self.member_digest(&name, *digest, at)
            }
            Command::Assign {
                workload,
                cluster,
                pool,
                at,
            } => {
                self.tick(at);
                self.assign(workload.as_str(), cluster.as_str(), pool, at, index)
            }
            Command::ApplyCycle { decisions, at } => {
                self.tick(at);
                self.apply_cycle(*decisions, at, index)
            }
            Command::ReportStatus { cluster, statuses } => {
                self.report_status(cluster.as_str(), statuses, index)
            }
            Command::PutPriorityClass { priority_class, at } => {
                self.tick(at);
                self.put_policy_object(
                    policy::PolicyObject::PriorityClass(priority_class),
                    at,
                    index,
                )
            }
            Command::RollbackPolicy {
                to,
                only_candidate,
                applied_by,
                message,
                at,
            } => {
                self.tick(at);
                let origin = policy::Origin {
                    at,
                    index,
                    applied_by,
                    message,
                    rolled_back_to: None,
                };
                self.rollback_policy(to, only_candidate, origin)
            }
            Command::WidenPolicy {
                applied_by,
                message,
                at,
            } => {
                self.tick(at);
                let origin = policy::Origin {
                    at,
                    index,
                    applied_by,
                    message,
                    rolled_back_to: None,
                };
                self.widen_policy(origin)
            }
            Command::SetMemberIntent { name, intent, at } => {
                self.tick(at);
                self.set_member_intent(&name, intent, index)
            }
            Command::RecoverWorkloads {
                cluster,
                uids,
                at,
                epoch,
            } => {
                self.tick(at);
                self.recover_workloads(&cluster, &uids, epoch, index)
            }
            Command::RemoveMember { name, at } => {
                self.tick(at);
                self.remove_member(&name)
            }
            Command::ReadmitMember { name, at } => {
                self.tick(at);
                self.readmit_member(&name)
            }
            Command::EndQuarantine { name, at } => {
                self.tick(at);
                self.end_quarantine(&name, at, index)
            }
            Command::PutQuotaSchedule { schedule, at } => {
                self.tick(at);
                self.put_quota_schedule(*schedule, at, index)
            }
            Command::PutPolicy { policy, at } => {
                self.tick(at);
                self.put_policy(*policy, at, index)
            }
            Command::PutPolicyObjects {
                queues,
                priority_classes,
                quota_schedules,
                at,
            } => {
                self.tick(at);
                let objects = queues
                    .into_iter()
                    .map(|q| policy::PolicyObject::Queue(Box::new(q)))
                    .chain(
                        priority_classes
                            .into_iter()
                            .map(|p| policy::PolicyObject::PriorityClass(Box::new(p))),
                    )
                    .chain(
                        quota_schedules
                            .into_iter()
                            .map(|s| policy::PolicyObject::QuotaSchedule(Box::new(s))),
                    )
                    .collect();
                self.put_policy_objects(objects, at, index)
            }
            Command::TidalTransition {
                schedule,
                from,
                to,
                boundary,
                at,
            } => {
                self.tick(at);
                self.tidal_transition(&schedule, from, to, boundary, at, index)
            }
            Command::CancelWorkload { id, at } => {
                self.tick(at);
                self.cancel(&id, at, index)
            }
            Command::PutWebhook { webhook, at } => {
                self.tick(at);
                self.put_webhook(*webhook, at, index)
            }
            Command::DeleteWebhook { name, at } => {
                self.tick(at);
                self.delete_webhook(&name)
            }
            Command::WebhookDelivered { name, seq, at } => {
                self.tick(at);
                self.webhook_delivered(&name, seq, at)
            }
            Command::WebhookFailed {
                name,
                seq,
                error,
                at,
            } => {
                self.tick(at);
                self.webhook_failed(&name, seq, &error)
            }
            Command::WebhookSkipped { name, to, at } => {
                self.tick(at);
                self.webhook_skipped(&name, to)
            }
            Command::CompactWorkloads { names, before, at } => {
                self.tick(at);
                self.compact(&names, before)
            }
            Command::PutRoleBinding { binding, at } => {
                self.tick(at);
                self.put_role_binding(*binding, at, index)
            }
            Command::DeleteRoleBinding { name, at } => {
                self.tick(at);
                self.delete_role_binding(&name, at, index)
            }
            Command::CompactAudit { before_seq, at } => {
                self.tick(at);
                self.compact_audit(before_seq)
            }
            Command::RequestCheckpoints { notices, at } => {
                self.tick(at);
                self.request_checkpoints(&notices, index)
            }
            Command::ReportCheckpoints {
                cluster,
                checkpoints,
            } => self.report_checkpoints(cluster.as_str(), &checkpoints, index),
        }
    }

    fn tick(&mut self, at: DateTime<Utc>) {
        if self.clock.is_none_or(|c| at > c) {
            self.clock = Some(at);
            self.expire_idempotency_keys(at);
        }
    }

    fn expire_idempotency_keys(&mut self, now: DateTime<Utc>) {
        let horizon = now - chrono::Duration::seconds(IDEMPOTENCY_RETENTION_SECS);
        while let Some((at, _)) = self.idempotency_expiry.get_min() {
            if *at >= horizon {
                break;
            }
            if let Some((_, key)) = self.idempotency_expiry.remove_min() {
                self.idempotency.remove(&key);
            }
        }
    }

    fn submit(
        &mut self,
        index: u64,
        mut w: Workload,
        key: String,
        at: DateTime<Utc>,
        digest: Option<idempotency::SubmissionDigest>,
    ) -> CommandResult {
        self.tick(at);
        // The digest the proposing node took, or (an entry without one) taken here. Taken
        // from the same workload either way; tests and debug builds check that.
        debug_assert!(
            digest.is_none_or(|d| d == idempotency::submission_digest(&w)),
            "a submission carried a digest that is not its workload's"
        );
        let digest = digest.unwrap_or_else(|| idempotency::submission_digest(&w));
        match self.replay(&key, || digest) {
            Some(Ok(existing)) => {
                return CommandResult::Existing {
                    object: StoredObject::Workload(Arc::new(existing.clone())),
                };
            }
            Some(Err(rejection)) => return CommandResult::Rejected { rejection },
            None => {}
        }
        if self.workloads.contains_key(w.metadata.name.as_str()) {
            return CommandResult::Rejected {
                rejection: Rejection::Conflict {
                    name: w.metadata.name.clone(),
                },
            };
        }
        let errors = self.check_references(&w);
        if !errors.is_empty() {
            return CommandResult::Rejected {
                rejection: Rejection::Invalid { errors },
            };
        }
        w.metadata.resource_version = Some(index);
        w.metadata.generation = Some(1);
        w.metadata.creation_timestamp = Some(at);
        w.status = Some(bootstrap::submitted_status(at));
        let seq = self.next_seq;
        self.next_seq += 1;
        let name: Arc<str> = w.metadata.name.as_str().into();
        let uid: Option<Arc<str>> = w.metadata.uid.as_deref().map(Arc::from);
        self.order.insert(seq, name.clone());
        if let Some(uid) = &uid {
            self.uids.insert(uid.clone(), name.clone());
        }
        // A submission without a client key carries its UID as the key (see the API's
        // submit): one string then serves the record, its expiry and the UID index.
        let key: Arc<str> = match &uid {
            Some(u) if **u == *key => u.clone(),
            _ => key.into(),
        };
        self.idempotency_expiry.insert((at, key.clone()));
        self.idempotency.insert(
            key,
            IdempotencyRecord {
                workload: name.clone(),
                at,
                uid,
                digest: Some(digest),
            },
        );
        let w = Arc::new(w);
        self.workloads.insert_shared(name, w.clone());
        CommandResult::Created {
            object: StoredObject::Workload(w),
        }
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{PodSet, Queue, QueueSpec, WorkloadClass, WorkloadSpec};

    use super::*;

    fn w(queue: &str, class: WorkloadClass, pc: &str, user: Option<&str>) -> Workload {
        let mut spec = WorkloadSpec::new(queue, class, vec![PodSet::new("p", 1, 1, "L40S")]);
        spec.priority_class = pc.into();
        spec.user = user.map(Into::into);
        Workload::new("w", spec)
    }

    #[test]
    fn the_queue_classes_and_the_priority_class_rules_are_named_by_field() {
        let mut s = FederationState::default();
        let mut spec = QueueSpec::new("ml");
        spec.classes = vec![WorkloadClass::Training];
        s.queues.insert("train".into(), Queue::new("train", spec));
        let mut pc = PriorityClass::new("vip", tideway_api::PriorityClassSpec::new(1000));
        pc.spec.allowed_users = vec!["alice".into()];
        pc.spec.allowed_queues = vec!["train".into()];
        s.priority_classes.insert("vip".into(), pc);

        let ok = w("train", WorkloadClass::Training, "vip", Some("alice"));
        assert!(s.check_permissions(&ok).is_empty());
        let errs = s.check_permissions(&w("train", WorkloadClass::Inference, "normal", None));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.class");
        assert!(errs[0].reason.contains("accepts only training"), "{errs:?}");
        let errs = s.check_permissions(&w("default", WorkloadClass::Training, "vip", Some("bob")));
        let reasons: Vec<&str> = errs.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(
            reasons,
            vec![
                "priority class 'vip' is not allowed for user 'bob'",
                "priority class 'vip' is not allowed in queue 'default'"
            ]
        );
        assert!(errs.iter().all(|e| e.field == "spec.priorityClass"));
    }
}
