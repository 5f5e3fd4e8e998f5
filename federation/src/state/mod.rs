//! The replicated federation state: what every node holds after applying the log.
//!
//! Apply is a pure function of (state, log index, command): no clock, no randomness, no I/O,
//! so every node that applies the same log holds the same bytes.

pub mod bootstrap;
pub mod command;
pub mod members;
pub mod scheduling;
pub mod tidal;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::{FieldError, PriorityClass, Queue, Workload};

use self::command::{Command, CommandResult, Rejection, StoredObject};

/// How long an idempotency key is remembered after the submission it names.
pub const IDEMPOTENCY_RETENTION_SECS: i64 = 24 * 3600;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IdempotencyRecord {
    pub workload: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FederationState {
    /// Workloads by name.
    pub workloads: BTreeMap<String, Workload>,
    /// Submission order: sequence number to workload name; the stable order of listings.
    pub order: BTreeMap<u64, String>,
    pub next_seq: u64,
    pub idempotency: BTreeMap<String, IdempotencyRecord>,
    /// Idempotency keys by the time they were recorded, so expiry costs O(log n), not a scan.
    pub idempotency_expiry: BTreeSet<(DateTime<Utc>, String)>,
    /// UID to name.
    pub uids: BTreeMap<String, String>,
    pub queues: BTreeMap<String, Queue>,
    pub priority_classes: BTreeMap<String, PriorityClass>,
    /// Member clusters by name.
    pub members: members::Members,
    /// Assignments by member cluster, then by workload UID.
    pub assignments: BTreeMap<String, BTreeMap<String, tideway_api::agent::AssignmentRecord>>,
    /// Reservations, placements and preemptions of the scheduler.
    #[serde(default)]
    pub scheduling: scheduling::SchedulingState,
    /// Quota schedules, the window each is in, and the applied policy's settings.
    #[serde(default)]
    pub tidal: tidal::TidalState,
    /// The latest time any applied command carried; apply never looks at a clock.
    pub clock: Option<DateTime<Utc>>,
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
            workloads: BTreeMap::new(),
            order: BTreeMap::new(),
            next_seq: 1,
            idempotency: BTreeMap::new(),
            idempotency_expiry: BTreeSet::new(),
            uids: BTreeMap::new(),
            queues,
            priority_classes,
            members: BTreeMap::new(),
            assignments: BTreeMap::new(),
            scheduling: Default::default(),
            tidal: Default::default(),
            clock: None,
        }
    }
}

impl FederationState {
    /// The references a workload makes that this state cannot satisfy, with their fields.
    pub fn check_references(&self, w: &Workload) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if !self.queues.contains_key(&w.spec.queue) {
            errs.push(FieldError::new(
                "spec.queue",
                format!("queue '{}' does not exist", w.spec.queue),
            ));
        }
        if !self.priority_classes.contains_key(&w.spec.priority_class) {
            errs.push(FieldError::new(
                "spec.priorityClass",
                format!("priority class '{}' does not exist", w.spec.priority_class),
            ));
        }
        errs
    }

    /// Looks a workload up by name or by UID.
    pub fn workload(&self, id: &str) -> Option<&Workload> {
        self.workloads
            .get(id)
            .or_else(|| self.uids.get(id).and_then(|n| self.workloads.get(n)))
    }

    /// The workload an idempotency key created, if the key is still remembered.
    pub fn by_idempotency_key(&self, key: &str) -> Option<&Workload> {
        self.idempotency
            .get(key)
            .and_then(|r| self.workloads.get(&r.workload))
    }

    pub fn apply(&mut self, index: u64, cmd: Command) -> CommandResult {
        match cmd {
            Command::SubmitWorkload {
                workload,
                idempotency_key,
                at,
            } => self.submit(index, *workload, idempotency_key, at),
            Command::PutQueue { mut queue, at } => {
                self.tick(at);
                queue.metadata.resource_version = Some(index);
                queue.metadata.creation_timestamp.get_or_insert(at);
                self.queues
                    .insert(queue.metadata.name.clone(), (*queue).clone());
                CommandResult::Created {
                    object: StoredObject::Queue(queue),
                }
            }
            Command::RegisterMember {
                member,
                agent_version,
                at,
            } => {
                self.tick(at);
                self.register_member(*member, agent_version, at, index)
            }
            Command::MemberHealth {
                name,
                phase,
                message,
                at,
            } => {
                self.tick(at);
                self.member_health(&name, phase, message, at, index)
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
            Command::PutPriorityClass {
                mut priority_class,
                at,
            } => {
                self.tick(at);
                priority_class.metadata.resource_version = Some(index);
                priority_class.metadata.creation_timestamp.get_or_insert(at);
                self.priority_classes.insert(
                    priority_class.metadata.name.clone(),
                    (*priority_class).clone(),
                );
                CommandResult::Created {
                    object: StoredObject::PriorityClass(priority_class),
                }
            }
            Command::SetMemberIntent { name, intent, at } => {
                self.tick(at);
                self.set_member_intent(&name, intent, index)
            }
            Command::RecoverWorkloads { cluster, uids, at } => {
                self.tick(at);
                self.recover_workloads(&cluster, &uids, index)
            }
            Command::RemoveMember { name, at } => {
                self.tick(at);
                self.remove_member(&name)
            }
            Command::PutQuotaSchedule { schedule, at } => {
                self.tick(at);
                self.put_quota_schedule(*schedule, at, index)
            }
            Command::PutPolicy { policy, at } => {
                self.tick(at);
                self.put_policy(*policy, at, index)
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
        while let Some((at, _)) = self.idempotency_expiry.first() {
            if *at >= horizon {
                break;
            }
            if let Some((_, key)) = self.idempotency_expiry.pop_first() {
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
    ) -> CommandResult {
        self.tick(at);
        if let Some(existing) = self.by_idempotency_key(&key) {
            return CommandResult::Existing {
                object: StoredObject::Workload(Box::new(existing.clone())),
            };
        }
        if self.workloads.contains_key(&w.metadata.name) {
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
        self.order.insert(seq, w.metadata.name.clone());
        if let Some(uid) = &w.metadata.uid {
            self.uids.insert(uid.clone(), w.metadata.name.clone());
        }
        self.idempotency_expiry.insert((at, key.clone()));
        self.idempotency.insert(
            key,
            IdempotencyRecord {
                workload: w.metadata.name.clone(),
                at,
            },
        );
        self.workloads.insert(w.metadata.name.clone(), w.clone());
        CommandResult::Created {
            object: StoredObject::Workload(Box::new(w)),
        }
    }
}
