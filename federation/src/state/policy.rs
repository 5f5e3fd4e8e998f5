//! Policy versions in the replicated state: every change of queues, priority classes, quota
//! schedules or scheduler settings is a whole new version, made by one log entry.
//!
//! The store keeps the last [`POLICY_HISTORY`] versions in the state itself, so they travel
//! in snapshots and survive restarts and failovers like everything else. A version is the
//! bundle as applied; what the scheduler runs is installed from it into the state's queue,
//! priority class and schedule maps (the merged policy while a rollout is scoped, see
//! `tideway_scheduler::rollout`). A change that would leave active work without its queue
//! or priority class is refused as a whole: nothing is half-applied.

use std::collections::{BTreeSet, VecDeque};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::{
    FieldError, Policy, PolicySpec, PolicyStatus, PriorityClass, Queue, QuotaSchedule, RoleBinding,
    RollbackTrigger, RolloutScope, WorkloadPhase,
};
use tideway_scheduler::rollout::{effective_spec, queue_in_scope, resolve_scope};

use super::FederationState;
use super::bootstrap;
use super::command::{CommandResult, Rejection, StoredObject};

/// Versions retained; older ones are in the log (and its snapshots' history) only.
pub const POLICY_HISTORY: usize = 50;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStore {
    /// Retained versions, oldest first; the last is the current one.
    pub versions: VecDeque<Policy>,
    /// A scoped rollout in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<ActiveRollout>,
}

/// A candidate version applied to part of the fleet over a base version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveRollout {
    pub candidate: u64,
    pub base: u64,
    /// The base's spec, kept here so a rollback never depends on the bounded history.
    pub base_spec: PolicySpec,
    pub scope: RolloutScope,
    pub triggers: Vec<RollbackTrigger>,
    pub since: DateTime<Utc>,
}

/// Version 0: what a new federation runs before any policy is applied.
pub fn bootstrap_policy() -> Policy {
    let mut p = Policy::new(
        "bootstrap",
        PolicySpec {
            queues: vec![bootstrap::default_queue()],
            priority_classes: bootstrap::default_priority_classes(),
            ..Default::default()
        },
    );
    p.status = Some(PolicyStatus {
        version: 0,
        message: Some("the built-in default queue and priority classes".into()),
        ..Default::default()
    });
    p
}

impl Default for PolicyStore {
    fn default() -> Self {
        Self {
            versions: VecDeque::from([bootstrap_policy()]),
            rollout: None,
        }
    }
}

impl PolicyStore {
    /// The version in force (the candidate while a rollout is scoped).
    pub fn current(&self) -> u64 {
        self.versions.back().and_then(Policy::version).unwrap_or(0)
    }

    /// The current version's bundle.
    pub fn current_policy(&self) -> Option<&Policy> {
        self.versions.back()
    }

    /// A retained version.
    pub fn get(&self, version: u64) -> Option<&Policy> {
        self.versions.iter().find(|p| p.version() == Some(version))
    }

    /// The version whose rules decided for `queue`: the candidate if the queue is in a
    /// scoped rollout, the base if it is not, else the current version.
    pub fn version_for(&self, queue: Option<&Queue>) -> u64 {
        match (&self.rollout, queue) {
            (Some(r), Some(q)) if queue_in_scope(&r.scope, q) => r.candidate,
            (Some(r), _) => r.base,
            (None, _) => self.current(),
        }
    }

    /// The spec the fleet runs now: the current version's, merged over the base while a
    /// rollout is scoped.
    pub fn effective(&self) -> PolicySpec {
        let current = self
            .current_policy()
            .map(|p| p.spec.clone())
            .unwrap_or_default();
        match &self.rollout {
            Some(r) => effective_spec(&r.base_spec, &current, &r.scope),
            None => current,
        }
    }
}

/// How a new version came to be, for its status and its audit record.
pub struct Origin {
    pub at: DateTime<Utc>,
    pub index: u64,
    pub applied_by: Option<String>,
    pub message: Option<String>,
    pub rolled_back_to: Option<u64>,
}

impl FederationState {
    /// A whole bundle as the next version. A bundle with a scoped rollout starts one over the
    /// current version; a bundle without one applies everywhere (and ends a rollout).
    pub(super) fn put_policy(
        &mut self,
        mut policy: Policy,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let status = policy.status.take().unwrap_or_default();
        let origin = Origin {
            at,
            index,
            applied_by: status.applied_by,
            message: status.message,
            rolled_back_to: None,
        };
        let scoped = policy
            .spec
            .rollout
            .as_ref()
            .filter(|r| !r.scope.is_everything())
            .cloned();
        let rollout = match (scoped, &self.policy.rollout) {
            (Some(_), Some(r)) => {
                return busy(format!(
                    "version {} is being rolled out; widen it or roll it back first",
                    r.candidate
                ));
            }
            (Some(r), None) => {
                let base_spec = self.policy.effective();
                // Stored resolved, so that the merged policy, the placement restriction and
                // the version each decision names all read one scope.
                let scope = resolve_scope(&base_spec, &policy.spec, &r.scope);
                if scope.queues.is_empty() && scope.pools.is_empty() {
                    return CommandResult::Rejected {
                        rejection: Rejection::Invalid {
                            errors: vec![FieldError::new(
                                "spec.rollout.scope.clusters",
                                format!(
                                    "the candidate changes no queue and no pool quota of \
                                     version {}: a scope of clusters alone would roll out \
                                     nothing",
                                    self.policy.current()
                                ),
                            )],
                        },
                    };
                }
                Some(ActiveRollout {
                    candidate: self.policy.current() + 1,
                    base: self.policy.current(),
                    base_spec,
                    scope,
                    triggers: r.triggers,
                    since: at,
                })
            }
            (None, _) => None,
        };
        self.new_version(policy, rollout, origin)
    }

    /// This state as it would be with `policy` applied: for a dry-run on a copy of the live
    /// state. Refused exactly as an apply would be.
    pub fn preview_policy(&mut self, policy: Policy, at: DateTime<Utc>) -> Result<(), Rejection> {
        match self.put_policy(policy, at, 0) {
            CommandResult::Rejected { rejection } => Err(rejection),
            _ => Ok(()),
        }
    }

    /// What a lone object's change (a Queue, PriorityClass, QuotaSchedule or RoleBinding
    /// applied or deleted alone) edits into the next version: a copy of the current bundle,
    /// or a refusal while a scoped version is being rolled out.
    fn lone_change_base(&self) -> Result<Policy, CommandResult> {
        if let Some(r) = &self.policy.rollout {
            return Err(busy(format!(
                "version {} is being rolled out; widen it or roll it back first",
                r.candidate
            )));
        }
        let mut policy = self
            .policy
            .current_policy()
            .cloned()
            .unwrap_or_else(bootstrap_policy);
        policy.status = None;
        Ok(policy)
    }

    /// The current version with one object created or replaced, as the next version: a
    /// Queue, PriorityClass or QuotaSchedule applied alone is a policy change too.
    pub(super) fn put_policy_object(
        &mut self,
        object: PolicyObject,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let mut policy = match self.lone_change_base() {
            Ok(policy) => policy,
            Err(refused) => return refused,
        };
        let name = object.name().to_owned();
        let kind = object.kind();
        match object {
            PolicyObject::Queue(q) => replace(&mut policy.spec.queues, *q, |x| &x.metadata.name),
            PolicyObject::PriorityClass(pc) => {
                replace(&mut policy.spec.priority_classes, *pc, |x| &x.metadata.name)
            }
            PolicyObject::QuotaSchedule(s) => {
                replace(&mut policy.spec.quota_schedules, *s, |x| &x.metadata.name)
            }
        }
        let origin = Origin {
            at,
            index,
            applied_by: None,
            message: Some(format!("{kind} '{name}' applied")),
            rolled_back_to: None,
        };
        match self.new_version(policy, None, origin) {
            res @ (CommandResult::Created { .. } | CommandResult::Existing { .. }) => {
                let created = matches!(res, CommandResult::Created { .. });
                let stored = match kind {
                    "queue" => self
                        .queues
                        .get(&name)
                        .map(|q| StoredObject::Queue(Box::new(q.clone()))),
                    "priority class" => self
                        .priority_classes
                        .get(&name)
                        .map(|p| StoredObject::PriorityClass(Box::new(p.clone()))),
                    _ => self
                        .tidal
                        .schedules
                        .get(&name)
                        .map(|s| StoredObject::QuotaSchedule(Box::new(s.clone()))),
                };
                match stored {
                    Some(object) if created => CommandResult::Created { object },
                    Some(object) => CommandResult::Existing { object },
                    None => CommandResult::Updated { count: 0 },
                }
            }
            other => other,
        }
    }

    /// Several objects applied together (the policy objects of a multi-document apply), in
    /// order, as one version: a file of queues makes one version, not one per queue. The
    /// answer is the version (`Existing` when nothing changed).
    pub(super) fn put_policy_objects(
        &mut self,
        objects: Vec<PolicyObject>,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let mut policy = match self.lone_change_base() {
            Ok(policy) => policy,
            Err(refused) => return refused,
        };
        let names: Vec<String> = objects
            .iter()
            .map(|o| format!("{} '{}'", o.kind(), o.name()))
            .collect();
        for object in objects {
            match object {
                PolicyObject::Queue(q) => {
                    replace(&mut policy.spec.queues, *q, |x| &x.metadata.name)
                }
                PolicyObject::PriorityClass(pc) => {
                    replace(&mut policy.spec.priority_classes, *pc, |x| &x.metadata.name)
                }
                PolicyObject::QuotaSchedule(s) => {
                    replace(&mut policy.spec.quota_schedules, *s, |x| &x.metadata.name)
                }
            }
        }
        let origin = Origin {
            at,
            index,
            applied_by: None,
            message: Some(format!("{} applied", names.join(", "))),
            rolled_back_to: None,
        };
        self.new_version(policy, None, origin)
    }

    /// Restores version `to` (the rollout's base, or the version before the current, when
    /// absent) as the next version. With `only_candidate`, it applies only while that
    /// candidate is still being rolled out: a trigger that fired twice, or fired on a
    /// leader that lost its lead, rolls back once.
    pub(super) fn rollback_policy(
        &mut self,
        to: Option<u64>,
        only_candidate: Option<u64>,
        origin: Origin,
    ) -> CommandResult {
        if let Some(c) = only_candidate
            && self.policy.rollout.as_ref().map(|r| r.candidate) != Some(c)
        {
            return CommandResult::Updated { count: 0 };
        }
        let current = self.policy.current();
        let target = match (to, &self.policy.rollout) {
            (Some(v), _) => v,
            (None, Some(r)) => r.base,
            (None, None) => match self
                .policy
                .versions
                .iter()
                .filter_map(Policy::version)
                .filter(|v| *v < current)
                .max()
            {
                Some(v) => v,
                None => {
                    return CommandResult::Rejected {
                        rejection: Rejection::NotFound {
                            what: "an earlier policy version".into(),
                        },
                    };
                }
            },
        };
        let restored = match (self.policy.get(target), &self.policy.rollout) {
            (Some(p), _) => {
                let mut p = p.clone();
                p.status = None;
                p
            }
            // The base of a rollout is restorable even once it left the history.
            (None, Some(r)) if r.base == target => {
                Policy::new(format!("version-{target}"), r.base_spec.clone())
            }
            (None, _) => {
                let retained: Vec<u64> = self
                    .policy
                    .versions
                    .iter()
                    .filter_map(Policy::version)
                    .collect();
                return CommandResult::Rejected {
                    rejection: Rejection::NotFound {
                        what: format!(
                            "policy version {target} (retained: {})",
                            retained
                                .iter()
                                .map(u64::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    },
                };
            }
        };
        let mut restored = restored;
        // The restored rules apply to the whole fleet: restoring a scoped version does not
        // start its rollout again.
        restored.spec.rollout = None;
        let origin = Origin {
            rolled_back_to: Some(target),
            ..origin
        };
        self.new_version(restored, None, origin)
    }

    /// Applies the scoped candidate to the whole fleet, as the next version.
    pub(super) fn widen_policy(&mut self, origin: Origin) -> CommandResult {
        let Some(r) = &self.policy.rollout else {
            return busy("no policy version is being rolled out".into());
        };
        let candidate = r.candidate;
        let Some(mut p) = self.policy.current_policy().cloned() else {
            return busy("no policy version is being rolled out".into());
        };
        p.status = None;
        p.spec.rollout = None;
        let origin = Origin {
            message: origin
                .message
                .or_else(|| Some(format!("version {candidate} widened to the whole fleet"))),
            ..origin
        };
        self.new_version(p, None, origin)
    }

    /// Installs `policy` as the next version, or refuses it whole.
    fn new_version(
        &mut self,
        mut policy: Policy,
        rollout: Option<ActiveRollout>,
        origin: Origin,
    ) -> CommandResult {
        // The same rules again (and no rollout starting or ending) make no new version.
        if rollout.is_none()
            && self.policy.rollout.is_none()
            && origin.rolled_back_to.is_none()
            && let Some(cur) = self.policy.current_policy()
            && cur.spec == policy.spec
        {
            return CommandResult::Existing {
                object: StoredObject::Policy(Box::new(cur.clone())),
            };
        }
        let version = self.policy.current() + 1;
        let effective = with_builtins(match &rollout {
            Some(r) => effective_spec(&r.base_spec, &policy.spec, &r.scope),
            None => policy.spec.clone(),
        });
        let errors = self.still_referenced(&effective);
        if !errors.is_empty() {
            return CommandResult::Rejected {
                rejection: Rejection::Invalid { errors },
            };
        }
        policy.status = Some(PolicyStatus {
            version,
            applied_at: Some(origin.at),
            applied_by: origin.applied_by,
            rolled_back_to: origin.rolled_back_to,
            message: origin.message,
            rollout_base: rollout.as_ref().map(|r| r.base),
        });
        self.install(effective, origin.at, origin.index);
        self.tidal.policy_version = Some(version);
        self.audit.policy_version = version;
        self.policy.rollout = rollout;
        self.policy.versions.push_back(policy.clone());
        while self.policy.versions.len() > POLICY_HISTORY {
            self.policy.versions.pop_front();
        }
        CommandResult::Created {
            object: StoredObject::Policy(Box::new(policy)),
        }
    }

    /// Queues and priority classes that active workloads use and `spec` would drop.
    fn still_referenced(&self, spec: &PolicySpec) -> Vec<FieldError> {
        let mut queues = BTreeSet::new();
        let mut classes = BTreeSet::new();
        for w in self.workloads.values() {
            let active = w.status.as_ref().is_some_and(|s| {
                matches!(
                    s.phase,
                    WorkloadPhase::Pending | WorkloadPhase::Assigned | WorkloadPhase::Running
                )
            });
            if active {
                queues.insert(w.spec.queue.as_str());
                classes.insert(w.spec.priority_class.as_str());
            }
        }
        let mut errors = Vec::new();
        for q in queues {
            if spec.queue(q).is_none() {
                errors.push(FieldError::new(
                    "spec.queues",
                    format!("queue '{q}' has active workloads; the policy must keep it"),
                ));
            }
        }
        for c in classes {
            if spec.priority_class(c).is_none() {
                errors.push(FieldError::new(
                    "spec.priorityClasses",
                    format!(
                        "priority class '{c}' is used by active workloads; the policy must keep it"
                    ),
                ));
            }
        }
        errors
    }

    /// Makes `spec` the rules the scheduler runs: queues, priority classes and schedules
    /// are replaced as sets, the settings as a whole.
    fn install(&mut self, spec: PolicySpec, at: DateTime<Utc>, index: u64) {
        let stamp_q = |mut q: Queue, old: Option<&Queue>| {
            q.metadata.resource_version = Some(index);
            q.metadata.creation_timestamp = old
                .and_then(|o| o.metadata.creation_timestamp)
                .or(q.metadata.creation_timestamp)
                .or(Some(at));
            q
        };
        self.queues = spec
            .queues
            .into_iter()
            .map(|q| {
                let q = stamp_q(q.clone(), self.queues.get(&q.metadata.name));
                (q.metadata.name.clone(), q)
            })
            .collect();
        self.priority_classes = spec
            .priority_classes
            .into_iter()
            .map(|mut pc| {
                pc.metadata.resource_version = Some(index);
                pc.metadata.creation_timestamp = self
                    .priority_classes
                    .get(&pc.metadata.name)
                    .and_then(|o| o.metadata.creation_timestamp)
                    .or(pc.metadata.creation_timestamp)
                    .or(Some(at));
                (pc.metadata.name.clone(), pc)
            })
            .collect();
        let names: Vec<String> = spec
            .quota_schedules
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect();
        self.tidal.schedules.retain(|n, _| names.contains(n));
        self.tidal.windows.retain(|n, _| names.contains(n));
        for s in spec.quota_schedules {
            self.install_quota_schedule(s, at, index);
        }
        self.tidal.settings = Some(spec.scheduler);
        // A bundle that lists bindings owns them; one that does not leaves them alone.
        if let Some(bindings) = spec.role_bindings {
            self.role_bindings = bindings
                .into_iter()
                .map(|mut b| {
                    b.metadata.resource_version = Some(index);
                    b.metadata.creation_timestamp = self
                        .role_bindings
                        .get(&b.metadata.name)
                        .and_then(|o| o.metadata.creation_timestamp)
                        .or(b.metadata.creation_timestamp)
                        .or(Some(at));
                    (b.metadata.name.clone(), b)
                })
                .collect();
        }
    }

    /// Whether the version in force lists the role bindings (then a binding applied or
    /// deleted alone makes the next version, as a queue applied alone does).
    pub(super) fn policy_owns_role_bindings(&self) -> bool {
        self.policy
            .current_policy()
            .is_some_and(|p| p.spec.role_bindings.is_some())
    }

    /// A role binding created, replaced (`Some`) or deleted (`None` with its name) in the
    /// bundle that owns the bindings, as the next version.
    pub(super) fn put_policy_role_binding(
        &mut self,
        name: &str,
        binding: Option<RoleBinding>,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let mut policy = match self.lone_change_base() {
            Ok(policy) => policy,
            Err(refused) => return refused,
        };
        let list = policy.spec.role_bindings.get_or_insert_with(Vec::new);
        let verb = match binding {
            Some(b) => {
                replace(list, b, |x| &x.metadata.name);
                "applied"
            }
            None => {
                let before = list.len();
                list.retain(|b| b.metadata.name != name);
                if list.len() == before {
                    return CommandResult::Rejected {
                        rejection: Rejection::NotFound {
                            what: format!("role binding '{name}'"),
                        },
                    };
                }
                "deleted"
            }
        };
        // Deleted: the object the answer shows is the binding as it was.
        let old = self.role_bindings.get(name).cloned();
        let origin = Origin {
            at,
            index,
            applied_by: None,
            message: Some(format!("role binding '{name}' {verb}")),
            rolled_back_to: None,
        };
        match self.new_version(policy, None, origin) {
            CommandResult::Created { .. } | CommandResult::Existing { .. } => {
                match self.role_bindings.get(name).cloned().or(old) {
                    Some(b) => CommandResult::Created {
                        object: StoredObject::RoleBinding(Box::new(b)),
                    },
                    None => CommandResult::Updated { count: 0 },
                }
            }
            other => other,
        }
    }
}

/// A bundle that lists no priority classes (or no queues) runs the built-in ones of version
/// 0, as its validation assumes: leaving the list out means "the defaults", not "none".
fn with_builtins(mut spec: PolicySpec) -> PolicySpec {
    if spec.priority_classes.is_empty() {
        spec.priority_classes = bootstrap::default_priority_classes();
    }
    if spec.queues.is_empty() {
        spec.queues = vec![bootstrap::default_queue()];
    }
    spec
}

fn busy(reason: String) -> CommandResult {
    CommandResult::Rejected {
        rejection: Rejection::Busy { reason },
    }
}

fn replace<T>(list: &mut Vec<T>, item: T, name: impl Fn(&T) -> &String) {
    match list.iter().position(|x| name(x) == name(&item)) {
        Some(i) => list[i] = item,
        None => list.push(item),
    }
}

/// One object applied alone.
pub enum PolicyObject {
    Queue(Box<Queue>),
    PriorityClass(Box<PriorityClass>),
    QuotaSchedule(Box<QuotaSchedule>),
}

impl PolicyObject {
    fn kind(&self) -> &'static str {
        match self {
            Self::Queue(_) => "queue",
            Self::PriorityClass(_) => "priority class",
            Self::QuotaSchedule(_) => "quota schedule",
        }
    }

    fn name(&self) -> &str {
        match self {
            Self::Queue(q) => &q.metadata.name,
            Self::PriorityClass(p) => &p.metadata.name,
            Self::QuotaSchedule(s) => &s.metadata.name,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::audit::AuditKind;
    use tideway_api::{
        FlavorQuota, PodSet, QueueSpec, RollbackTrigger, Rollout, Workload, WorkloadClass,
        WorkloadSpec,
    };

    use super::*;
    use crate::state::command::Command;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    fn queue(name: &str, class: WorkloadClass, gpus: u32) -> Queue {
        let mut spec = QueueSpec::new(name);
        spec.classes = vec![class];
        spec.quotas = vec![FlavorQuota::guaranteed("H100", gpus)];
        Queue::new(name, spec)
    }

    fn bundle(serving: u32, batch: u32) -> Policy {
        let mut spec = PolicySpec {
            queues: vec![
                queue("serving", WorkloadClass::Inference, serving),
                queue("batch", WorkloadClass::Training, batch),
            ],
            priority_classes: bootstrap::default_priority_classes(),
            ..Default::default()
        };
        spec.scheduler.max_preemptions_per_minute = 5;
        Policy::new("fleet", spec)
    }

    fn put(s: &mut FederationState, index: u64, p: Policy) -> CommandResult {
        s.apply(
            index,
            Command::PutPolicy {
                policy: Box::new(p),
                at: t(index as i64),
            },
        )
    }

    fn rollback(
        s: &mut FederationState,
        index: u64,
        to: Option<u64>,
        only: Option<u64>,
    ) -> CommandResult {
        s.apply(
            index,
            Command::RollbackPolicy {
                to,
                only_candidate: only,
                applied_by: None,
                message: Some("why".into()),
                at: t(index as i64),
            },
        )
    }

    fn guaranteed(s: &FederationState, q: &str) -> u32 {
        s.queues[q].spec.quotas[0].guaranteed
    }

    #[test]
    fn versions_count_up_and_rollback_restores_content_as_a_new_version() {
        let mut s = FederationState::default();
        assert_eq!(s.policy.current(), 0);
        assert!(matches!(
            put(&mut s, 5, bundle(8, 8)),
            CommandResult::Created { .. }
        ));
        assert!(matches!(
            put(&mut s, 9, bundle(2, 14)),
            CommandResult::Created { .. }
        ));
        assert_eq!(s.policy.current(), 2);
        assert_eq!(guaranteed(&s, "serving"), 2);
        assert!(
            !s.queues.contains_key("default"),
            "the bundle replaces the set"
        );
        assert_eq!(s.tidal.settings().max_preemptions_per_minute, 5);

        let CommandResult::Created {
            object: StoredObject::Policy(p),
        } = rollback(&mut s, 12, None, None)
        else {
            panic!("rollback refused")
        };
        assert_eq!(p.version(), Some(3));
        assert_eq!(p.status.as_ref().and_then(|st| st.rolled_back_to), Some(1));
        assert_eq!(
            p.spec,
            s.policy.get(1).unwrap().spec,
            "content equals version 1"
        );
        assert_eq!(guaranteed(&s, "serving"), 8);
        let last = s.audit.events.back().unwrap();
        assert_eq!(last.kind, AuditKind::PolicyRolledBack);
        assert_eq!(last.policy_version, 3);
        assert!(
            last.evidence.contains("version 3 restores version 1: why"),
            "{}",
            last.evidence
        );

        // Unknown versions are refused and change nothing.
        let r = rollback(&mut s, 13, Some(42), None);
        assert!(
            matches!(
                r,
                CommandResult::Rejected {
                    rejection: Rejection::NotFound { .. }
                }
            ),
            "{r:?}"
        );
        assert_eq!(s.policy.current(), 3);
    }

    #[test]
    fn the_history_is_bounded_and_survives_a_snapshot() {
        let mut s = FederationState::default();
        for i in 0..(POLICY_HISTORY as u64 + 5) {
            put(&mut s, 10 + i, bundle(1 + i as u32, 1));
        }
        assert_eq!(s.policy.versions.len(), POLICY_HISTORY);
        assert_eq!(s.policy.current(), POLICY_HISTORY as u64 + 5);
        assert_eq!(s.policy.versions.front().and_then(Policy::version), Some(6));
        let bytes = rmp_serde::to_vec_named(&s).unwrap();
        let back: FederationState = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back.policy, s.policy);
        assert_eq!(back.queues, s.queues);
    }

    #[test]
    fn dropping_a_queue_in_use_is_refused_whole() {
        let mut s = FederationState::default();
        let w = Workload::new(
            "job",
            WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("p", 1, 1, "H100")],
            ),
        );
        s.apply(
            1,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: "k".into(),
                at: t(1),
                digest: None,
            },
        );
        let before = s.clone();
        let r = put(&mut s, 2, bundle(8, 8));
        let CommandResult::Rejected {
            rejection: Rejection::Invalid { errors },
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(errors[0].field, "spec.queues");
        assert!(
            errors[0].reason.contains("'default' has active workloads"),
            "{errors:?}"
        );
        assert_eq!(s.policy, before.policy);
        assert_eq!(s.queues, before.queues);
    }

    #[test]
    fn a_single_queue_applied_alone_is_a_version_too() {
        let mut s = FederationState::default();
        s.apply(
            1,
            Command::PutQueue {
                queue: Box::new(queue("serving", WorkloadClass::Inference, 3)),
                at: t(1),
            },
        );
        assert_eq!(s.policy.current(), 1);
        let v1 = s.policy.get(1).unwrap();
        assert!(v1.spec.queue("default").is_some() && v1.spec.queue("serving").is_some());
        assert_eq!(s.audit.events.back().map(|e| e.policy_version), Some(1));
    }

    #[test]
    fn the_same_rules_again_make_no_new_version() {
        let mut s = FederationState::default();
        put(&mut s, 1, bundle(8, 8));
        let events = s.audit.events.len();
        assert!(matches!(
            put(&mut s, 2, bundle(8, 8)),
            CommandResult::Existing { .. }
        ));
        let same = s.apply(
            3,
            Command::PutQueue {
                queue: Box::new(queue("batch", WorkloadClass::Training, 8)),
                at: t(3),
            },
        );
        assert!(matches!(same, CommandResult::Existing { .. }), "{same:?}");
        assert_eq!(s.policy.current(), 1);
        assert_eq!(s.audit.events.len(), events, "nothing to record");
        // A rollback to the same content is still a version: it is an act of its own.
        assert!(matches!(
            rollback(&mut s, 4, Some(0), None),
            CommandResult::Created { .. }
        ));
        assert!(matches!(
            rollback(&mut s, 5, Some(1), None),
            CommandResult::Created { .. }
        ));
        assert_eq!(s.policy.current(), 3);
    }

    #[test]
    fn a_bundle_without_priority_classes_runs_the_built_in_ones() {
        let mut s = FederationState::default();
        let mut p = bundle(1, 1);
        p.spec.priority_classes.clear();
        put(&mut s, 1, p);
        assert!(s.priority_classes.contains_key("normal"));
        assert!(
            s.policy.get(1).unwrap().spec.priority_classes.is_empty(),
            "as written"
        );
    }

    #[test]
    fn a_scoped_rollout_runs_the_candidate_in_scope_and_a_trigger_rolls_it_back_once() {
        let mut s = FederationState::default();
        put(&mut s, 1, bundle(8, 8));
        let mut cand = bundle(0, 4);
        cand.spec.rollout = Some(Rollout {
            scope: RolloutScope {
                pools: vec!["inference".into()],
                ..Default::default()
            },
            triggers: vec![RollbackTrigger::UnservedInference { seconds: 30 }],
        });
        put(&mut s, 2, cand.clone());
        assert_eq!(s.policy.current(), 2);
        assert_eq!(guaranteed(&s, "serving"), 0, "in scope: the candidate");
        assert_eq!(guaranteed(&s, "batch"), 8, "out of scope: the base");
        let r = s.policy.rollout.clone().unwrap();
        assert_eq!((r.candidate, r.base), (2, 1));
        assert_eq!(s.policy.version_for(s.queues.get("serving")), 2);
        assert_eq!(s.policy.version_for(s.queues.get("batch")), 1);
        // A second scoped candidate must wait.
        assert!(matches!(
            put(&mut s, 3, cand),
            CommandResult::Rejected {
                rejection: Rejection::Busy { .. }
            }
        ));
        // The trigger's rollback, proposed twice (by two leaders): applied once.
        assert!(matches!(
            rollback(&mut s, 4, None, Some(2)),
            CommandResult::Created { .. }
        ));
        assert_eq!(
            rollback(&mut s, 5, None, Some(2)),
            CommandResult::Updated { count: 0 }
        );
        assert_eq!(s.policy.current(), 3);
        assert!(s.policy.rollout.is_none());
        assert_eq!(guaranteed(&s, "serving"), 8);
        assert_eq!(guaranteed(&s, "batch"), 8);
    }

    #[test]
    fn widening_applies_the_candidate_everywhere_as_the_next_version() {
        let mut s = FederationState::default();
        put(&mut s, 1, bundle(8, 8));
        let mut cand = bundle(6, 4);
        cand.spec.rollout = Some(Rollout {
            scope: RolloutScope {
                queues: vec!["serving".into()],
                ..Default::default()
            },
            triggers: vec![],
        });
        put(&mut s, 2, cand);
        assert_eq!((guaranteed(&s, "serving"), guaranteed(&s, "batch")), (6, 8));
        let r = s.apply(
            3,
            Command::WidenPolicy {
                applied_by: None,
                message: None,
                at: t(3),
            },
        );
        assert!(matches!(r, CommandResult::Created { .. }), "{r:?}");
        assert_eq!(s.policy.current(), 3);
        assert_eq!((guaranteed(&s, "serving"), guaranteed(&s, "batch")), (6, 4));
        assert!(s.policy.get(3).unwrap().spec.rollout.is_none());
        assert!(matches!(
            s.apply(
                4,
                Command::WidenPolicy {
                    applied_by: None,
                    message: None,
                    at: t(4)
                }
            ),
            CommandResult::Rejected { .. }
        ));
    }

    #[test]
    fn a_clusters_only_scope_takes_the_changed_queues_and_refuses_a_candidate_without_changes() {
        let mut s = FederationState::default();
        put(&mut s, 1, bundle(8, 8));
        let scoped = |mut p: Policy| {
            p.spec.rollout = Some(Rollout {
                scope: RolloutScope {
                    clusters: vec!["sim-ap".into()],
                    ..Default::default()
                },
                triggers: vec![],
            });
            p
        };
        // The same rules on one cluster roll out nothing: refused by field, nothing written.
        let r = put(&mut s, 2, scoped(bundle(8, 8)));
        let CommandResult::Rejected {
            rejection: Rejection::Invalid { errors },
        } = r
        else {
            panic!("{r:?}");
        };
        assert_eq!(errors[0].field, "spec.rollout.scope.clusters");
        assert_eq!(s.policy.current(), 1);
        assert!(s.policy.rollout.is_none());
        // Only batch changes: it is the scope, stored resolved, and decides under version 2.
        put(&mut s, 3, scoped(bundle(8, 4)));
        assert_eq!(s.policy.current(), 2);
        let r = s.policy.rollout.clone().unwrap();
        assert_eq!(r.scope.queues, vec!["batch".to_string()]);
        assert_eq!(r.scope.clusters, vec!["sim-ap".to_string()]);
        assert_eq!(guaranteed(&s, "batch"), 4);
        assert_eq!(s.policy.version_for(s.queues.get("batch")), 2);
        assert_eq!(s.policy.version_for(s.queues.get("serving")), 1);
        let apply_record = s.audit.events.back().unwrap();
        assert!(
            apply_record
                .evidence
                .contains("queues batch; clusters sim-ap"),
            "{apply_record:?}"
        );
    }

    fn binding(name: &str, queue: &str) -> RoleBinding {
        RoleBinding::new(
            name,
            tideway_api::RoleBindingSpec {
                role: tideway_api::Role::Submitter,
                subjects: vec![],
                groups: vec![name.into()],
                queues: vec![queue.into()],
            },
        )
    }

    fn put_binding(s: &mut FederationState, index: u64, b: RoleBinding) -> CommandResult {
        s.apply(
            index,
            Command::PutRoleBinding {
                binding: Box::new(b),
                at: t(index as i64),
            },
        )
    }

    fn bound(s: &FederationState) -> Vec<(String, Vec<String>)> {
        s.role_bindings
            .values()
            .map(|b| (b.metadata.name.clone(), b.spec.queues.clone()))
            .collect()
    }

    /// The kinds of the audit records that the log entry at `index` wrote, in order.
    fn kinds_at(s: &FederationState, index: u64) -> Vec<AuditKind> {
        s.audit
            .events
            .iter()
            .filter(|e| e.index == index)
            .map(|e| e.kind)
            .collect()
    }

    #[test]
    fn a_bundle_without_bindings_leaves_them_alone_and_a_lone_binding_makes_no_version() {
        let mut s = FederationState::default();
        put(&mut s, 1, bundle(8, 8));
        put_binding(&mut s, 2, binding("ml", "batch"));
        assert_eq!(s.policy.current(), 1, "bindings are not the bundle's");
        let at2 = kinds_at(&s, 2);
        assert_eq!(
            at2,
            vec![AuditKind::AccessChanged],
            "access only, no version"
        );
        put(&mut s, 3, bundle(4, 8));
        assert_eq!(bound(&s), vec![("ml".into(), vec!["batch".into()])]);
        rollback(&mut s, 4, Some(1), None);
        assert_eq!(bound(&s).len(), 1, "nor is a rollback");
    }

    #[test]
    fn bindings_in_the_bundle_are_versioned_replaced_as_a_set_and_rolled_back() {
        let mut s = FederationState::default();
        put_binding(&mut s, 1, binding("legacy", "*"));
        let mut p = bundle(8, 8);
        p.spec.role_bindings = Some(vec![binding("ml", "batch")]);
        put(&mut s, 2, p);
        assert_eq!(s.policy.current(), 1);
        assert_eq!(
            bound(&s),
            vec![("ml".into(), vec!["batch".into()])],
            "the bundle's set replaces the bindings"
        );
        // Applied alone, a binding is the next version of the bundle that owns them.
        let r = put_binding(&mut s, 3, binding("ml", "serving"));
        assert!(
            matches!(
                r,
                CommandResult::Created {
                    object: StoredObject::RoleBinding(_)
                }
            ),
            "{r:?}"
        );
        assert_eq!(s.policy.current(), 2);
        // It changed both who may do what and the versioned rules: the trail says both,
        // and the policy change carries the new version.
        let at3: Vec<(AuditKind, u64)> = s
            .audit
            .events
            .iter()
            .filter(|e| e.index == 3)
            .map(|e| (e.kind, e.policy_version))
            .collect();
        assert_eq!(
            at3,
            vec![(AuditKind::AccessChanged, 2), (AuditKind::PolicyChanged, 2)]
        );
        let v2 = s.policy.get(2).unwrap();
        assert_eq!(
            v2.spec.role_bindings.as_ref().unwrap()[0].spec.queues,
            vec!["serving".to_string()]
        );
        assert_eq!(
            v2.status.as_ref().and_then(|st| st.message.as_deref()),
            Some("role binding 'ml' applied")
        );
        let diff = tideway_api::policy_version::diff(s.policy.get(1).unwrap(), v2);
        assert_eq!(
            diff.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(),
            vec!["spec.roleBindings[ml].spec.queues[0]"]
        );
        // Deleted alone: the next version again; unknown: not found, no version.
        let r = s.apply(
            4,
            Command::DeleteRoleBinding {
                name: "ml".into(),
                at: t(4),
            },
        );
        assert!(matches!(r, CommandResult::Created { .. }), "{r:?}");
        assert_eq!(s.policy.current(), 3);
        assert!(bound(&s).is_empty());
        let at4 = kinds_at(&s, 4);
        assert_eq!(
            at4,
            vec![AuditKind::AccessChanged, AuditKind::PolicyChanged]
        );
        let r = s.apply(
            5,
            Command::DeleteRoleBinding {
                name: "ml".into(),
                at: t(5),
            },
        );
        assert!(matches!(r, CommandResult::Rejected { .. }), "{r:?}");
        assert_eq!(s.policy.current(), 3);
        // A rollback restores who may do what with the rules.
        rollback(&mut s, 6, Some(1), None);
        assert_eq!(s.policy.current(), 4);
        assert_eq!(bound(&s), vec![("ml".into(), vec!["batch".into()])]);
    }
}
