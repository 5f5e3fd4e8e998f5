//! The audit trail, kept in the replicated state: every change apply makes leaves a record
//! with its actor, its time, the policy version in force and the evidence.
//!
//! Records are derived in apply from the command and what it changed (a workload whose
//! resource version is now this entry's index changed here), so every node holds the same
//! trail, and the code that changes state needs no audit calls of its own. Compaction of
//! workloads leaves their records; the trail itself keeps the newest [`MAX_EVENTS`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::agent::Desired;
use tideway_api::audit::{AuditEvent, AuditKind};
use tideway_api::{
    CompactString, MemberPhase, QuotaAmount, QuotaTarget, WindowQuota, WorkloadPhase,
};

use super::FederationState;
use super::command::{Command, CommandResult, StoredObject};

/// The trail keeps this many records, dropping the oldest.
pub const MAX_EVENTS: usize = 200_000;

/// The actor of what the leader decides on its own.
pub const LEADER: &str = "system:leader";
/// The actor of an unauthenticated request (an anonymous, loopback-only server).
pub const ANONYMOUS: &str = "anonymous";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditTrail {
    /// Persistent (see [`super::workloads`]): a copy of the trail under the state lock is O(1).
    #[serde(serialize_with = "crate::parallel_encode::vector")]
    pub events: imbl::Vector<AuditEvent>,
    pub next_seq: u64,
    /// The policy version in force (see `state::policy`).
    pub policy_version: u64,
    /// The highest log index of a record dropped from the trail (retention or the cap): a
    /// watch resuming from before it would miss deletions, so it is answered 410 Gone.
    #[serde(default)]
    pub dropped_through: u64,
}

impl AuditTrail {
    /// Drops the oldest record, remembering how far the trail is now incomplete.
    fn drop_oldest(&mut self) {
        if let Some(e) = self.events.pop_front() {
            self.dropped_through = self.dropped_through.max(e.index);
        }
    }
}

/// What a command is about, taken before apply consumes it.
pub(super) enum Hint {
    Submit,
    Cancel,
    Policy {
        kind: &'static str,
        name: String,
    },
    Rollback,
    Register {
        name: String,
    },
    Health {
        name: String,
        phase: MemberPhase,
    },
    Assign {
        assigns: Vec<(String, String)>,
        victims: Vec<(String, String, String, u64)>,
    },
    Report {
        cluster: String,
        uids: Vec<String>,
    },
    Checkpointed {
        cluster: String,
        uids: Vec<String>,
    },
    Compact {
        names: Vec<String>,
    },
    Binding {
        name: String,
        deleted: bool,
    },
    AuditCompacted {
        before_seq: u64,
    },
    Tidal {
        schedule: String,
        from: Option<String>,
        to: Option<String>,
        boundary: DateTime<Utc>,
    },
    Checkpoints {
        notices: Vec<(String, String, DateTime<Utc>)>,
    },
    Quiet,
}

impl Hint {
    pub(super) fn of(cmd: &Command) -> (Hint, String) {
        match cmd {
            Command::SubmitWorkload { .. } => (Hint::Submit, ANONYMOUS.into()),
            Command::CancelWorkload { .. } => (Hint::Cancel, ANONYMOUS.into()),
            Command::PutQueue { queue, .. } => (
                Hint::Policy {
                    kind: "queue",
                    name: queue.metadata.name.clone(),
                },
                ANONYMOUS.into(),
            ),
            Command::PutPriorityClass { priority_class, .. } => (
                Hint::Policy {
                    kind: "priority class",
                    name: priority_class.metadata.name.clone(),
                },
                ANONYMOUS.into(),
            ),
            Command::PutQuotaSchedule { schedule, .. } => (
                Hint::Policy {
                    kind: "quota schedule",
                    name: schedule.metadata.name.clone(),
                },
                ANONYMOUS.into(),
            ),
            Command::PutPolicy { policy, .. } => (
                Hint::Policy {
                    kind: "policy",
                    name: policy.metadata.name.clone(),
                },
                ANONYMOUS.into(),
            ),
            Command::PutPolicyObjects {
                queues,
                priority_classes,
                quota_schedules,
                ..
            } => (
                Hint::Policy {
                    kind: "objects",
                    name: queues
                        .iter()
                        .map(|q| format!("queue/{}", q.metadata.name))
                        .chain(
                            priority_classes
                                .iter()
                                .map(|p| format!("priorityclass/{}", p.metadata.name)),
                        )
                        .chain(
                            quota_schedules
                                .iter()
                                .map(|s| format!("quotaschedule/{}", s.metadata.name)),
                        )
                        .collect::<Vec<_>>()
                        .join(", "),
                },
                ANONYMOUS.into(),
            ),
            Command::WidenPolicy { .. } => (
                Hint::Policy {
                    kind: "rollout",
                    name: "widened".into(),
                },
                ANONYMOUS.into(),
            ),
            Command::RollbackPolicy { only_candidate, .. } => (
                Hint::Rollback,
                if only_candidate.is_some() {
                    LEADER.into()
                } else {
                    ANONYMOUS.into()
                },
            ),
            Command::RegisterMember { member, .. } => (
                Hint::Register {
                    name: member.metadata.name.clone(),
                },
                format!("agent:{}", member.metadata.name),
            ),
            Command::MemberHealth { name, phase, .. } => (
                Hint::Health {
                    name: name.clone(),
                    phase: *phase,
                },
                LEADER.into(),
            ),
            Command::Assign {
                workload, cluster, ..
            } => (
                Hint::Assign {
                    assigns: vec![(workload.to_string(), cluster.to_string())],
                    victims: vec![],
                },
                LEADER.into(),
            ),
            Command::ApplyCycle { decisions, .. } => (
                Hint::Assign {
                    assigns: decisions
                        .assign
                        .iter()
                        .map(|a| (a.workload.to_string(), a.cluster.to_string()))
                        .collect(),
                    victims: decisions
                        .preempt
                        .iter()
                        .flat_map(|p| {
                            p.victims.iter().map(|v| {
                                (
                                    v.to_string(),
                                    p.cluster.to_string(),
                                    p.preemptor.to_string(),
                                    p.grace_seconds,
                                )
                            })
                        })
                        .collect(),
                },
                LEADER.into(),
            ),
            Command::ReportStatus { cluster, statuses } => (
                Hint::Report {
                    cluster: cluster.to_string(),
                    uids: statuses.iter().map(|s| s.uid.clone()).collect(),
                },
                format!("agent:{cluster}"),
            ),
            Command::CompactWorkloads { names, .. } => (
                Hint::Compact {
                    names: names.clone(),
                },
                LEADER.into(),
            ),
            Command::PutRoleBinding { binding, .. } => (
                Hint::Binding {
                    name: binding.metadata.name.clone(),
                    deleted: false,
                },
                ANONYMOUS.into(),
            ),
            Command::DeleteRoleBinding { name, .. } => (
                Hint::Binding {
                    name: name.clone(),
                    deleted: true,
                },
                ANONYMOUS.into(),
            ),
            Command::CompactAudit { before_seq, .. } => (
                Hint::AuditCompacted {
                    before_seq: *before_seq,
                },
                ANONYMOUS.into(),
            ),
            Command::TidalTransition {
                schedule,
                from,
                to,
                boundary,
                ..
            } => (
                Hint::Tidal {
                    schedule: schedule.clone(),
                    from: from.clone(),
                    to: to.clone(),
                    boundary: *boundary,
                },
                LEADER.into(),
            ),
            Command::RequestCheckpoints { notices, .. } => (
                Hint::Checkpoints {
                    notices: notices
                        .iter()
                        .map(|n| (n.uid.to_string(), n.cluster.to_string(), n.deadline))
                        .collect(),
                },
                LEADER.into(),
            ),
            Command::ReportCheckpoints {
                cluster,
                checkpoints,
            } => (
                Hint::Checkpointed {
                    cluster: cluster.to_string(),
                    uids: checkpoints.iter().map(|c| c.uid.clone()).collect(),
                },
                format!("agent:{cluster}"),
            ),
            Command::EndQuarantine { name, .. } => (
                Hint::Health {
                    name: name.clone(),
                    phase: MemberPhase::Ready,
                },
                LEADER.into(),
            ),
            Command::As { actor, command } => {
                let (hint, _) = Hint::of(command);
                (hint, actor.clone())
            }
            _ => (Hint::Quiet, LEADER.into()),
        }
    }
}

fn describe_scope(s: &tideway_api::RolloutScope) -> String {
    let mut parts = Vec::new();
    for (what, list) in [
        ("queues", &s.queues),
        ("pools", &s.pools),
        ("clusters", &s.clusters),
    ] {
        if !list.is_empty() {
            parts.push(format!("{what} {}", list.join(", ")));
        }
    }
    parts.join("; ")
}

/// Fields of one record, before it gets its place in the trail.
struct Rec {
    /// The version whose rules made this decision, when it is not simply the current one.
    version: Option<u64>,
    kind: AuditKind,
    workload: Option<CompactString>,
    queue: Option<CompactString>,
    cluster: Option<CompactString>,
    evidence: String,
}

impl FederationState {
    /// "schedule 'day-night': window day -> night at 2030-01-01T21:00:00+00:00; quotas:
    /// pool/inference share 0.7 -> share 0.3, ...": what changed and by how much, as the
    /// schedule writes it (shares resolve against live capacity, which apply does not see).
    fn transition_evidence(
        &self,
        schedule: &str,
        from: Option<String>,
        to: Option<String>,
        boundary: DateTime<Utc>,
    ) -> String {
        let name = |w: &Option<String>| w.clone().unwrap_or_else(|| "(default)".into());
        let mut out = format!(
            "schedule '{schedule}': window {} -> {} at {}",
            name(&from),
            name(&to),
            boundary.to_rfc3339()
        );
        let Some(spec) = self.tidal.schedules.get(schedule).map(|s| &s.spec) else {
            return out;
        };
        let before = spec.quotas_of(from.as_deref()).unwrap_or_default();
        let after = spec.quotas_of(to.as_deref()).unwrap_or_default();
        let key = |q: &WindowQuota| {
            let kind = match q.target {
                QuotaTarget::Pool(_) => "pool",
                QuotaTarget::Queue(_) => "queue",
            };
            match &q.flavor {
                Some(f) => format!("{kind}/{} {f}", q.target.name()),
                None => format!("{kind}/{}", q.target.name()),
            }
        };
        let amount = |q: Option<&WindowQuota>| match q.map(|q| q.amount) {
            Some(QuotaAmount::Gpus(n)) => format!("{n} GPUs"),
            Some(QuotaAmount::Share(x)) => format!("share {x}"),
            None => "own quota".into(),
        };
        let mut keys: Vec<String> = before.iter().chain(after).map(key).collect();
        keys.sort();
        keys.dedup();
        let changes: Vec<String> = keys
            .iter()
            .filter_map(|k| {
                let b = amount(before.iter().find(|q| &key(q) == k));
                let a = amount(after.iter().find(|q| &key(q) == k));
                (a != b).then(|| format!("{k} {b} -> {a}"))
            })
            .collect();
        if changes.is_empty() {
            out.push_str("; quotas unchanged");
        } else {
            out.push_str("; quotas: ");
            out.push_str(&changes.join(", "));
        }
        out
    }

    /// Appends the records of what the command at `index` changed; `version_before` is the
    /// policy version in force before it, so that a change that made a new version says so.
    pub(super) fn record(
        &mut self,
        index: u64,
        hint: Hint,
        actor: String,
        res: &CommandResult,
        version_before: u64,
    ) {
        let at = self.clock.unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
        let mut recs = Vec::new();
        match (hint, res) {
            (
                Hint::Submit,
                CommandResult::Created {
                    object: StoredObject::Workload(w),
                },
            ) => recs.push(Rec {
                version: None,
                kind: AuditKind::Submitted,
                workload: Some(w.metadata.name.as_str().into()),
                queue: Some(w.spec.queue.clone()),
                cluster: None,
                evidence: format!(
                    "submitted to queue '{}' with priority class '{}' by user {}",
                    w.spec.queue,
                    w.spec.priority_class,
                    w.spec.user.as_deref().unwrap_or("(none)")
                ),
            }),
            (
                Hint::Cancel,
                CommandResult::Created {
                    object: StoredObject::Workload(w),
                },
            ) => recs.push(Rec {
                version: None,
                kind: AuditKind::Cancelled,
                workload: Some(w.metadata.name.as_str().into()),
                queue: Some(w.spec.queue.clone()),
                cluster: None,
                evidence: w
                    .status
                    .as_ref()
                    .and_then(|s| s.message.clone())
                    .unwrap_or_else(|| "cancelled".into()),
            }),
            (Hint::Policy { kind, name }, CommandResult::Created { .. }) => {
                let v = self.policy.current();
                let evidence = match (kind, &self.policy.rollout) {
                    ("rollout", _) => {
                        format!("scoped rollout widened to the whole fleet: policy version {v}")
                    }
                    ("policy", Some(r)) if r.candidate == v => format!(
                        "policy '{name}' applied as version {v}, scoped to {} over version {}",
                        describe_scope(&r.scope),
                        r.base
                    ),
                    ("objects", _) => {
                        format!("{name} created or replaced together: policy version {v}")
                    }
                    _ => format!("{kind} '{name}' created or replaced: policy version {v}"),
                };
                recs.push(Rec {
                    version: None,
                    kind: AuditKind::PolicyChanged,
                    workload: None,
                    queue: (kind == "queue").then(|| name.as_str().into()),
                    cluster: None,
                    evidence,
                });
            }
            (
                Hint::Rollback,
                CommandResult::Created {
                    object: StoredObject::Policy(p),
                },
            ) => {
                let st = p.status.clone().unwrap_or_default();
                recs.push(Rec {
                    version: None,
                    kind: AuditKind::PolicyRolledBack,
                    workload: None,
                    queue: None,
                    cluster: None,
                    evidence: format!(
                        "version {} restores version {}{}",
                        st.version,
                        st.rolled_back_to.unwrap_or_default(),
                        st.message.map(|m| format!(": {m}")).unwrap_or_default()
                    ),
                });
            }
            (Hint::Binding { name, deleted }, CommandResult::Created { .. }) => {
                let evidence = match self.role_bindings.get(&name) {
                    Some(b) if !deleted => {
                        let scope = if b.spec.queues.is_empty() {
                            String::new()
                        } else {
                            format!(" in queues [{}]", b.spec.queues.join(", "))
                        };
                        format!(
                            "role binding '{name}': {}{scope} for subjects [{}] and groups [{}]",
                            b.spec.role.as_str(),
                            b.spec.subjects.join(", "),
                            b.spec.groups.join(", ")
                        )
                    }
                    _ => format!("role binding '{name}' deleted"),
                };
                recs.push(Rec {
                    version: None,
                    kind: AuditKind::AccessChanged,
                    workload: None,
                    queue: None,
                    cluster: None,
                    evidence,
                });
                // A bundle that lists the bindings owns them: this binding changed the
                // versioned rules too, and whoever watches policy changes must see it.
                let v = self.policy.current();
                if v != version_before {
                    let verb = if deleted {
                        "deleted"
                    } else {
                        "created or replaced"
                    };
                    recs.push(Rec {
                        version: None,
                        kind: AuditKind::PolicyChanged,
                        workload: None,
                        queue: None,
                        cluster: None,
                        evidence: format!("role binding '{name}' {verb}: policy version {v}"),
                    });
                }
            }
            (Hint::AuditCompacted { before_seq }, CommandResult::Updated { count })
                if *count > 0 =>
            {
                recs.push(Rec {
                    version: None,
                    kind: AuditKind::Compacted,
                    workload: None,
                    queue: None,
                    cluster: None,
                    evidence: format!(
                        "audit retention: {count} records numbered below {before_seq} dropped"
                    ),
                });
            }
            (
                Hint::Tidal {
                    schedule,
                    from,
                    to,
                    boundary,
                },
                CommandResult::Updated { count: 1 },
            ) => recs.push(Rec {
                version: None,
                kind: AuditKind::TidalTransition,
                workload: None,
                queue: None,
                cluster: None,
                evidence: self.transition_evidence(&schedule, from, to, boundary),
            }),
            (Hint::Register { name }, CommandResult::Created { .. }) => recs.push(Rec {
                version: None,
                kind: AuditKind::MemberRegistered,
                workload: None,
                queue: None,
                evidence: {
                    let m = self.members.get(&name);
                    let mut e = format!(
                        "member cluster '{name}' registered in region '{}'",
                        m.map(|m| m.cluster.spec.region.as_str()).unwrap_or("?")
                    );
                    // Back from NotReady once too often: the registration quarantined it.
                    if let Some(st) = m.and_then(|m| m.cluster.status.as_ref())
                        && st.phase == MemberPhase::Quarantined
                    {
                        e.push_str(&format!(
                            "; it is Quarantined: {}",
                            st.message.as_deref().unwrap_or_default()
                        ));
                    }
                    e
                },
                cluster: Some(name.into()),
            }),
            (Hint::Health { name, phase }, CommandResult::Created { .. }) => recs.push(Rec {
                version: None,
                kind: AuditKind::MemberHealth,
                workload: None,
                queue: None,
                evidence: {
                    // The phase it is in now: a return may have quarantined it.
                    let st = self
                        .members
                        .get(&name)
                        .and_then(|m| m.cluster.status.as_ref());
                    format!(
                        "member cluster '{name}' is {:?}: {}",
                        st.map(|s| s.phase).unwrap_or(phase),
                        st.and_then(|s| s.message.clone()).unwrap_or_default()
                    )
                },
                cluster: Some(name.into()),
            }),
            (Hint::Assign { assigns, victims }, _) => {
                for (name, cluster) in assigns {
                    let Some(w) = self.workloads.get(name.as_str()) else {
                        continue;
                    };
                    let st = w.status.clone().unwrap_or_default();
                    if w.metadata.resource_version == Some(index)
                        && st.cluster.as_deref() == Some(cluster.as_str())
                    {
                        recs.push(Rec {
                            version: Some(
                                self.policy
                                    .version_for(self.queues.get(w.spec.queue.as_str())),
                            ),
                            kind: AuditKind::Assigned,
                            workload: Some(name.as_str().into()),
                            queue: Some(w.spec.queue.clone()),
                            evidence: format!("attempt {} placed on {cluster}", st.attempts),
                            cluster: Some(cluster.into()),
                        });
                    }
                }
                for (uid, cluster, preemptor, grace) in victims {
                    let Some(rec) = self.assignments.get(&cluster).and_then(|m| m.get(&uid)) else {
                        continue;
                    };
                    if rec.revision != index || !matches!(rec.desired, Desired::Preempt { .. }) {
                        continue;
                    }
                    let w = &rec.assignment.workload;
                    let preemptor_queue = self
                        .by_uid(&preemptor)
                        .map(|p| p.spec.queue.clone())
                        .unwrap_or_else(|| w.spec.queue.clone());
                    let checkpoint = self
                        .by_uid(&uid)
                        .unwrap_or(w)
                        .last_checkpoint_at()
                        .map_or("no checkpoint reported".to_string(), |t| {
                            format!("last checkpoint at {t}")
                        });
                    recs.push(Rec {
                        version: Some(
                            self.policy
                                .version_for(self.queues.get(preemptor_queue.as_str())),
                        ),
                        kind: AuditKind::Preempted,
                        workload: Some(w.metadata.name.as_str().into()),
                        queue: Some(w.spec.queue.clone()),
                        evidence: format!(
                            "to make room for {preemptor}: checkpoint and stop within {grace} s \
                             (notice at {at}); {checkpoint}"
                        ),
                        cluster: Some(cluster.into()),
                    });
                }
            }
            (Hint::Checkpoints { notices }, _) => {
                for (uid, cluster, deadline) in notices {
                    let Some(rec) = self.assignments.get(&cluster).and_then(|m| m.get(&uid)) else {
                        continue;
                    };
                    if rec.revision != index || rec.checkpoint_by != Some(deadline) {
                        continue;
                    }
                    let w = &rec.assignment.workload;
                    let last = self
                        .by_uid(&uid)
                        .unwrap_or(w)
                        .last_checkpoint_at()
                        .map_or("no checkpoint reported".to_string(), |t| {
                            format!("last checkpoint at {}", t.to_rfc3339())
                        });
                    recs.push(Rec {
                        version: None,
                        kind: AuditKind::CheckpointRequested,
                        workload: Some(w.metadata.name.as_str().into()),
                        queue: Some(w.spec.queue.clone()),
                        evidence: format!(
                            "a quota boundary lowers its side's share: checkpoint by {} and \
                             keep running; {last}",
                            deadline.to_rfc3339()
                        ),
                        cluster: Some(cluster.into()),
                    });
                }
            }
            (Hint::Report { cluster, uids }, _) => {
                for uid in uids {
                    let Some(w) = self.by_uid(&uid) else {
                        continue;
                    };
                    if w.metadata.resource_version != Some(index) {
                        continue;
                    }
                    let st = w.status.clone().unwrap_or_default();
                    let kind = match st.phase {
                        WorkloadPhase::Running => AuditKind::Running,
                        WorkloadPhase::Succeeded => AuditKind::Succeeded,
                        WorkloadPhase::Failed => AuditKind::Failed,
                        WorkloadPhase::Pending => AuditKind::Requeued,
                        _ => continue,
                    };
                    recs.push(Rec {
                        version: None,
                        kind,
                        workload: Some(w.metadata.name.as_str().into()),
                        queue: Some(w.spec.queue.clone()),
                        cluster: Some(cluster.as_str().into()),
                        evidence: st.message.unwrap_or_default(),
                    });
                }
            }
            (Hint::Checkpointed { cluster, uids }, _) => {
                for uid in uids {
                    let Some(w) = self.by_uid(&uid) else {
                        continue;
                    };
                    if w.metadata.resource_version != Some(index) {
                        continue;
                    }
                    let Some(cp) = w.status.as_ref().and_then(|s| s.last_checkpoint_at) else {
                        continue;
                    };
                    recs.push(Rec {
                        version: None,
                        kind: AuditKind::Checkpointed,
                        workload: Some(w.metadata.name.as_str().into()),
                        queue: Some(w.spec.queue.clone()),
                        cluster: Some(cluster.as_str().into()),
                        evidence: format!(
                            "checkpoint at {}: a preemption now loses only the work since then",
                            cp.to_rfc3339()
                        ),
                    });
                }
            }
            (Hint::Compact { names }, CommandResult::Updated { count }) if *count > 0 => {
                let gone: Vec<&String> = names
                    .iter()
                    .filter(|n| !self.workloads.contains_key(n.as_str()))
                    .collect();
                for name in gone {
                    recs.push(Rec {
                        version: None,
                        kind: AuditKind::Compacted,
                        workload: Some(name.as_str().into()),
                        queue: None,
                        cluster: None,
                        evidence: "terminal past retention: removed from the live state".into(),
                    });
                }
            }
            _ => {}
        }
        let current = self.policy.current();
        for r in recs {
            let seq = self.audit.next_seq;
            self.audit.next_seq += 1;
            self.audit.events.push_back(AuditEvent {
                seq,
                index,
                at,
                kind: r.kind,
                actor: actor.as_str().into(),
                policy_version: r.version.unwrap_or(current),
                workload: r.workload,
                queue: r.queue,
                cluster: r.cluster,
                evidence: r.evidence,
            });
        }
        while self.audit.events.len() > MAX_EVENTS {
            self.audit.drop_oldest();
        }
    }
}

impl FederationState {
    /// Drops the records numbered below `before_seq`; answers how many went.
    pub(super) fn compact_audit(&mut self, before_seq: u64) -> CommandResult {
        let mut count = 0u32;
        while self
            .audit
            .events
            .front()
            .is_some_and(|e| e.seq < before_seq)
        {
            self.audit.drop_oldest();
            count += 1;
        }
        CommandResult::Updated { count }
    }

    /// The first record to keep under a retention of at most `count` records and records
    /// no older than `since`; `None` when nothing is to be dropped. The count leaves room for
    /// the record of the compaction itself, so a trail at its limit stays there instead of
    /// being compacted again on every pass.
    pub fn audit_retention_cut(
        &self,
        count: Option<usize>,
        since: Option<DateTime<Utc>>,
    ) -> Option<u64> {
        let events = &self.audit.events;
        let first = events.front()?.seq;
        let by_count = count.filter(|c| events.len() > *c).map(|c| {
            events
                .get(events.len() + 1 - c.max(1))
                .map_or(self.audit.next_seq, |e| e.seq)
        });
        let by_age = since.map(|t| {
            events
                .iter()
                .find(|e| e.at >= t)
                .map_or(self.audit.next_seq, |e| e.seq)
        });
        by_count
            .into_iter()
            .chain(by_age)
            .max()
            .filter(|cut| *cut > first)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::agent::{LocalPhase, LocalStatus};
    use tideway_api::{
        MemberCluster, MemberClusterSpec, PodSet, Queue, QueueSpec, Workload, WorkloadClass,
        WorkloadSpec,
    };

    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn every_change_of_a_workload_has_a_record_with_actor_and_policy_version_in_order() {
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
        s.apply(
            2,
            Command::by(
                Some("root"),
                Command::PutQueue {
                    queue: Box::new(Queue::new("research", QueueSpec::new("ml"))),
                    at: t(1),
                },
            ),
        );
        let mut w = Workload::new(
            "job",
            WorkloadSpec::new(
                "research",
                WorkloadClass::Training,
                vec![PodSet::new("w", 1, 8, "H100")],
            ),
        );
        w.metadata.uid = Some("u1".into());
        let submit = Command::by(
            Some("alice"),
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: "k".into(),
                at: t(2),
                digest: None,
            },
        );
        s.apply(3, submit.clone());
        // A replay changes nothing and records nothing.
        s.apply(4, submit);
        s.apply(
            5,
            Command::Assign {
                workload: "job".into(),
                cluster: "a".into(),
                pool: None,
                at: t(3),
            },
        );
        let running = LocalStatus {
            uid: "u1".into(),
            attempt: 1,
            phase: LocalPhase::Running,
            since: t(4),
            nodes: vec![],
        };
        s.apply(
            6,
            Command::ReportStatus {
                cluster: "a".into(),
                statuses: vec![running.clone()],
            },
        );
        // The same report again changes nothing.
        s.apply(
            7,
            Command::ReportStatus {
                cluster: "a".into(),
                statuses: vec![running],
            },
        );
        s.apply(
            8,
            Command::by(
                Some("olga"),
                Command::CancelWorkload {
                    id: "job".into(),
                    at: t(5),
                },
            ),
        );
        s.apply(
            9,
            Command::CompactWorkloads {
                names: vec!["job".into()],
                before: t(100),
                at: t(100),
            },
        );
        let trail: Vec<(AuditKind, &str, u64, u64)> = s
            .audit
            .events
            .iter()
            .filter(|e| e.workload.as_deref() == Some("job"))
            .map(|e| (e.kind, e.actor.as_str(), e.index, e.policy_version))
            .collect();
        // Version 1 is the queue applied at index 2 (version 0 is the built-in default).
        assert_eq!(
            trail,
            vec![
                (AuditKind::Submitted, "alice", 3, 1),
                (AuditKind::Assigned, LEADER, 5, 1),
                (AuditKind::Running, "agent:a", 6, 1),
                (AuditKind::Cancelled, "olga", 8, 1),
                (AuditKind::Compacted, LEADER, 9, 1),
            ]
        );
        let kinds: Vec<AuditKind> = s.audit.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds[..2],
            [AuditKind::MemberRegistered, AuditKind::PolicyChanged]
        );
        assert_eq!(s.audit.events[1].actor, "root");
        let seqs: Vec<u64> = s.audit.events.iter().map(|e| e.seq).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        assert!(
            !s.workloads.contains_key("job"),
            "compacted, its records stay"
        );

        // Retention: by count keeps the newest N; by age keeps those at or after the time.
        let n = s.audit.events.len();
        assert_eq!(
            s.audit_retention_cut(Some(n), None),
            None,
            "nothing to drop"
        );
        let cut = s.audit_retention_cut(Some(2), None).expect("a cut");
        assert_eq!(
            cut,
            s.audit.events[n - 1].seq,
            "one kept, one for the compaction"
        );
        let by_age = s.audit_retention_cut(None, Some(t(3))).expect("a cut");
        assert_eq!(
            by_age,
            s.audit
                .events
                .iter()
                .find(|e| e.at >= t(3))
                .expect("one")
                .seq
        );
        assert_eq!(
            s.audit_retention_cut(Some(2), Some(t(3))),
            Some(cut.max(by_age))
        );
        let last_dropped = s
            .audit
            .events
            .iter()
            .filter(|e| e.seq < cut)
            .map(|e| e.index)
            .max()
            .expect("some dropped");
        assert_eq!(s.audit.dropped_through, 0, "nothing dropped yet");
        s.apply(
            10,
            Command::CompactAudit {
                before_seq: cut,
                at: t(101),
            },
        );
        let kinds: Vec<AuditKind> = s.audit.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds.len(), 2, "one kept and the record of the compaction");
        assert_eq!(kinds[1], AuditKind::Compacted);
        assert!(
            s.audit.events[1].evidence.contains("dropped"),
            "{:?}",
            s.audit.events[1]
        );
        assert_eq!(s.audit.events[0].seq, cut);
        assert_eq!(
            s.audit_retention_cut(Some(2), None),
            None,
            "stable at the limit"
        );
        // How far the trail is cut, for watches resuming from before it (410 Gone): the
        // index of the last record dropped, below the first one kept.
        assert_eq!(s.audit.dropped_through, last_dropped);
        assert!(s.audit.dropped_through < s.audit.events[0].index);
    }

    #[test]
    fn a_policy_apply_and_each_tidal_transition_leave_one_record_naming_the_quota_changes() {
        use tideway_api::{
            Policy, PolicySpec, QuotaSchedule, QuotaScheduleSpec, QuotaWindow, ScheduleScope,
            Transition,
        };
        let q = |inf: f64| {
            vec![
                WindowQuota {
                    target: QuotaTarget::Pool("inference".into()),
                    flavor: None,
                    amount: QuotaAmount::Share(inf),
                },
                WindowQuota {
                    target: QuotaTarget::Pool("training".into()),
                    flavor: Some("H100".into()),
                    amount: QuotaAmount::Gpus(8),
                },
            ]
        };
        let schedule = QuotaSchedule::new(
            "tide",
            QuotaScheduleSpec {
                time_zone: "UTC".into(),
                windows: vec![
                    QuotaWindow::daily("day", "08:00", "20:00", q(0.7)),
                    QuotaWindow::daily("night", "20:00", "08:00", q(0.3)),
                ],
                default_quotas: None,
                transition: Transition::default(),
                scope: ScheduleScope::default(),
            },
        );
        let policy = Policy::new(
            "bundle",
            PolicySpec {
                quota_schedules: vec![schedule],
                ..PolicySpec::default()
            },
        );
        // 2030-01-01T12:00Z: day.
        let noon: DateTime<Utc> = "2030-01-01T12:00:00Z".parse().expect("time");
        let mut s = FederationState::default();
        s.apply(
            1,
            Command::by(
                Some("olga"),
                Command::PutPolicy {
                    policy: Box::new(policy),
                    at: noon,
                },
            ),
        );
        let boundary: DateTime<Utc> = "2030-01-01T20:00:00Z".parse().expect("time");
        let transition = Command::TidalTransition {
            schedule: "tide".into(),
            from: Some("day".into()),
            to: Some("night".into()),
            boundary,
            at: boundary,
        };
        s.apply(2, transition.clone());
        // The same change proposed again (a new leader) changes nothing and records nothing.
        s.apply(3, transition);
        let recs: Vec<&AuditEvent> = s.audit.events.iter().collect();
        assert_eq!(recs.len(), 2, "{recs:#?}");
        assert_eq!(recs[0].kind, AuditKind::PolicyChanged);
        assert_eq!(recs[0].actor, "olga");
        assert!(
            recs[0]
                .evidence
                .contains("policy 'bundle' created or replaced"),
            "{}",
            recs[0].evidence
        );
        assert_eq!(recs[1].kind, AuditKind::TidalTransition);
        assert_eq!(recs[1].actor, LEADER);
        assert_eq!(recs[1].index, 2);
        assert_eq!(recs[1].policy_version, 1);
        assert_eq!(
            recs[1].evidence,
            "schedule 'tide': window day -> night at 2030-01-01T20:00:00+00:00; quotas: \
             pool/inference share 0.7 -> share 0.3"
        );
    }
}
