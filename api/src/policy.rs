//! `Policy`: everything that decides scheduling, bundled and versioned as one document.
//!
//! Queues, quota schedules, priority classes and scheduler settings change together far more
//! often than alone, and a decision must be explainable by "policy version N". One bundle
//! makes apply, diff, dry-run and rollback whole-policy operations: never half-applied.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::meta::{API_VERSION, ObjectMeta, Resource, impl_resource};
use crate::priority_class::PriorityClass;
use crate::queue::Queue;
use crate::quota_schedule::{QuotaSchedule, QuotaTarget};
use crate::role_binding::RoleBinding;
use crate::rollout::Rollout;
use crate::tuning::SchedulerTuning;
use crate::validation::{CheckAt, Checker, at, impl_validate};
use crate::workload::DEFAULT_PRIORITY_CLASS;

/// The scheduling policy bundle; applying one creates a new policy version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Policy {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `Policy`.
    pub kind: String,
    /// Name of the bundle.
    pub metadata: ObjectMeta,
    /// Queues, quota schedules, priority classes and scheduler settings, applied together.
    pub spec: PolicySpec,
    /// Set by the server on apply or rollback; None in a document a user writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PolicyStatus>,
}

impl_resource!(Policy => "Policy");

impl Policy {
    /// A bundle as a user writes it: no status yet.
    pub fn new(name: impl Into<String>, spec: PolicySpec) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: <Self as Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }

    /// The version the server assigned when this bundle was applied.
    pub fn version(&self) -> Option<u64> {
        self.status.as_ref().map(|s| s.version)
    }
}

/// The contents of a policy bundle; names are unique within each list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicySpec {
    /// Every queue; a workload naming a queue not listed here is rejected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<Queue>,
    /// Tidal schedules that move quota between queues over the day and week.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quota_schedules: Vec<QuotaSchedule>,
    /// Priority classes workloads may name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_classes: Vec<PriorityClass>,
    /// Scheduler knobs; each has a default, so the whole section may be left out.
    #[serde(default)]
    pub scheduler: SchedulerSettings,
    /// Scoped first, then widened; with triggers that roll it back. None: everywhere at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// Who may do what, versioned with the rules it governs. Present (even empty), the
    /// bundle owns the bindings: applying or restoring it replaces them as a set, and a
    /// binding applied alone makes the next version. Absent, the bindings are left as they
    /// are and kept apart from the versions, as before bundles could carry them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_bindings: Option<Vec<RoleBinding>>,
}

impl PolicySpec {
    /// The queue named `name`, if the bundle has one.
    pub fn queue(&self, name: &str) -> Option<&Queue> {
        self.queues.iter().find(|q| q.name() == name)
    }

    /// The priority class named `name`, if the bundle has one.
    pub fn priority_class(&self, name: &str) -> Option<&PriorityClass> {
        self.priority_classes.iter().find(|p| p.name() == name)
    }

    /// The quota schedule named `name`, if the bundle has one.
    pub fn quota_schedule(&self, name: &str) -> Option<&QuotaSchedule> {
        self.quota_schedules.iter().find(|s| s.name() == name)
    }
}

/// Knobs of the scheduler core; every one is part of the policy version so a replay
/// reproduces decisions exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct SchedulerSettings {
    /// Weighted dominant-resource fairness across queues of a cohort.
    pub fair_sharing: bool,
    /// Whether higher-priority work may evict lower-priority work at all.
    pub preemption: bool,
    /// Bounds disruption: a burst of high-priority work cannot evict the whole fleet at once.
    pub max_preemptions_per_minute: u32,
    /// Bounds re-dispatch after member loss so a lost cluster cannot cause a storm.
    pub max_redispatches_per_minute: u32,
    /// Missing heartbeats for this long marks a member NotReady.
    pub member_heartbeat_timeout_seconds: u64,
    /// How long work on a NotReady member is left alone before it is rescheduled elsewhere.
    pub member_loss_grace_seconds: u64,
    /// Re-dispatches after member loss before a workload fails. Not read by the scheduler yet.
    pub max_reschedule_attempts: u32,
    /// Seeds tie-breaks so equal candidates are ordered the same way on every replay.
    pub tie_break_seed: u64,
    /// Applied to workloads that name no priority class.
    pub default_priority_class: String,
    /// The core's implementation knobs (reservations, reclaim, routing weights, graces).
    /// Part of the version like the rest, so the live leader, `tideway simulate` and a
    /// dry-run decide with the same values. Left out of a document when all are defaults.
    #[serde(skip_serializing_if = "SchedulerTuning::is_default")]
    pub tuning: SchedulerTuning,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            fair_sharing: true,
            preemption: true,
            max_preemptions_per_minute: 10,
            max_redispatches_per_minute: 30,
            member_heartbeat_timeout_seconds: 30,
            member_loss_grace_seconds: 120,
            max_reschedule_attempts: 3,
            tie_break_seed: 0,
            default_priority_class: DEFAULT_PRIORITY_CLASS.to_owned(),
            tuning: SchedulerTuning::default(),
        }
    }
}

/// Written by the server on apply or rollback.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyStatus {
    /// Monotonic; decisions and audit records cite it.
    pub version: u64,
    /// When the server applied this version (its wall clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<DateTime<Utc>>,
    /// Who applied it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_by: Option<String>,
    /// Set when this version was created by rolling back to an earlier one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<u64>,
    /// A note on this version for people, e.g. why it was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// While this version's rollout is scoped: the version the rest of the fleet runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_base: Option<u64>,
}

impl CheckAt for Policy {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.header(
            prefix,
            &self.api_version,
            &self.kind,
            <Self as Resource>::KIND,
            &self.metadata,
        );
        let p = at(prefix, "spec").path();
        let s = &self.spec;

        for (i, q) in s.queues.iter().enumerate() {
            q.check_at(&format!("{}[{i}]", at(&p, "queues")), c);
        }
        for (i, qs) in s.quota_schedules.iter().enumerate() {
            qs.check_at(&format!("{}[{i}]", at(&p, "quotaSchedules")), c);
        }
        for (i, pc) in s.priority_classes.iter().enumerate() {
            pc.check_at(&format!("{}[{i}]", at(&p, "priorityClasses")), c);
        }
        c.unique(
            &p,
            "queues",
            "metadata.name",
            s.queues.iter().map(Resource::name),
        );
        c.unique(
            &p,
            "quotaSchedules",
            "metadata.name",
            s.quota_schedules.iter().map(Resource::name),
        );
        c.unique(
            &p,
            "priorityClasses",
            "metadata.name",
            s.priority_classes.iter().map(Resource::name),
        );
        let bindings = s.role_bindings.as_deref().unwrap_or_default();
        for (i, b) in bindings.iter().enumerate() {
            b.check_at(&format!("{}[{i}]", at(&p, "roleBindings")), c);
        }
        c.unique(
            &p,
            "roleBindings",
            "metadata.name",
            bindings.iter().map(Resource::name),
        );

        // References inside the bundle must resolve, or the policy would be applied with
        // dangling names that silently match nothing.
        let queues: BTreeSet<&str> = s.queues.iter().map(Resource::name).collect();
        for (i, qs) in s.quota_schedules.iter().enumerate() {
            for (j, w) in qs.spec.windows.iter().enumerate() {
                for (k, quota) in w.quotas.iter().enumerate() {
                    if let QuotaTarget::Queue(name) = &quota.target
                        && !queues.contains(name.as_str())
                    {
                        c.push(
                            format!(
                                "{}[{i}].spec.windows[{j}].quotas[{k}].queue",
                                at(&p, "quotaSchedules")
                            ),
                            format!("queue {name:?} is not defined in this policy"),
                        );
                    }
                }
            }
        }
        for (i, pc) in s.priority_classes.iter().enumerate() {
            for (j, name) in pc.spec.allowed_queues.iter().enumerate() {
                if !queues.contains(name.as_str()) {
                    c.push(
                        format!("{}[{i}].spec.allowedQueues[{j}]", at(&p, "priorityClasses")),
                        format!("queue {name:?} is not defined in this policy"),
                    );
                }
            }
        }

        for (i, b) in bindings.iter().enumerate() {
            for (j, name) in b.spec.queues.iter().enumerate() {
                if name != "*" && !queues.contains(name.as_str()) {
                    c.push(
                        format!("{}[{i}].spec.queues[{j}]", at(&p, "roleBindings")),
                        format!("queue {name:?} is not defined in this policy"),
                    );
                }
            }
        }

        if let Some(r) = &s.rollout {
            let names: Vec<&str> = s.queues.iter().map(Resource::name).collect();
            crate::rollout::check(r, &at(&p, "rollout").path(), &names, c);
        }

        let sp = at(&p, "scheduler").path();
        let st = &s.scheduler;
        c.range(
            at(&sp, "maxPreemptionsPerMinute"),
            st.max_preemptions_per_minute,
            1,
            10_000,
        );
        c.range(
            at(&sp, "maxRedispatchesPerMinute"),
            st.max_redispatches_per_minute,
            1,
            100_000,
        );
        c.range(
            at(&sp, "memberHeartbeatTimeoutSeconds"),
            st.member_heartbeat_timeout_seconds,
            1,
            3600,
        );
        c.range(
            at(&sp, "memberLossGraceSeconds"),
            st.member_loss_grace_seconds,
            0,
            7 * 24 * 3600,
        );
        c.range(
            at(&sp, "maxRescheduleAttempts"),
            st.max_reschedule_attempts,
            0,
            100,
        );
        st.tuning.check(&at(&sp, "tuning").path(), c);
        let default_pc = at(&sp, "defaultPriorityClass");
        c.name(default_pc, &st.default_priority_class);
        if !s.priority_classes.is_empty() && s.priority_class(&st.default_priority_class).is_none()
        {
            c.push(
                default_pc,
                format!(
                    "priority class {:?} is not defined in this policy",
                    st.default_priority_class
                ),
            );
        }
    }
}

impl_validate!(Policy);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{decode_json, decode_yaml};
    use crate::validation::Validate;

    const SAMPLE: &str = include_str!("../testdata/policy.yaml");

    #[test]
    fn sample_decodes_validates_and_round_trips() {
        let mut p: Policy = decode_yaml(SAMPLE.as_bytes()).unwrap();
        p.validate().unwrap();
        assert_eq!(p.spec.queues.len(), 2);
        assert!(p.spec.queue("research").is_some());
        assert_eq!(p.spec.priority_class("normal").unwrap().spec.value, 100);
        assert!(p.spec.quota_schedule("day-night").is_some());
        assert_eq!(p.spec.scheduler.max_preemptions_per_minute, 20);
        assert_eq!(p.spec.scheduler.max_reschedule_attempts, 3, "defaulted");
        p.status = Some(PolicyStatus {
            version: 7,
            applied_at: Some("2025-03-01T12:00:00Z".parse().unwrap()),
            applied_by: Some("ops".into()),
            rolled_back_to: None,
            message: None,
            rollout_base: None,
        });
        assert_eq!(p.version(), Some(7));
        let json = serde_json::to_vec(&p).unwrap();
        assert_eq!(decode_json::<Policy>(&json).unwrap(), p);
        let yaml = serde_saphyr::to_string(&p).unwrap();
        assert_eq!(decode_yaml::<Policy>(yaml.as_bytes()).unwrap(), p);
        let mp = rmp_serde::to_vec_named(&p).unwrap();
        assert_eq!(rmp_serde::from_slice::<Policy>(&mp).unwrap(), p);
    }

    #[test]
    fn embedded_problems_carry_their_full_path() {
        let mut p: Policy = decode_yaml(SAMPLE.as_bytes()).unwrap();
        p.spec.queues[1].spec.quotas[0].max = Some(0);
        p.spec.queues[1].metadata.name = "research".into();
        p.spec.quota_schedules[0].spec.time_zone = "Nowhere".into();
        p.spec.priority_classes[0].spec.allowed_queues = vec!["ghost".into()];
        p.spec.scheduler.default_priority_class = "urgent".into();
        p.spec.scheduler.max_preemptions_per_minute = 0;
        let errs = p.validate().unwrap_err();
        for field in [
            "spec.queues[1].spec.quotas[0].max",
            "spec.queues[1].metadata.name",
            "spec.quotaSchedules[0].spec.timeZone",
            // "serving" no longer exists once queue 1 was renamed.
            "spec.quotaSchedules[0].spec.windows[0].quotas[0].queue",
            "spec.priorityClasses[0].spec.allowedQueues[0]",
            "spec.scheduler.defaultPriorityClass",
            "spec.scheduler.maxPreemptionsPerMinute",
        ] {
            assert!(errs.has_field(field), "missing {field} in {errs}");
        }
    }

    /// The core's knobs ride in the policy: decoded strictly, range-checked on apply with
    /// the full path, and left out of the document when all are defaults.
    #[test]
    fn scheduler_tuning_is_part_of_the_policy() {
        let mut p: Policy = decode_yaml(SAMPLE.as_bytes()).unwrap();
        let plain = serde_json::to_string(&p).unwrap();
        assert!(!plain.contains("tuning"), "{plain}");

        let yaml = SAMPLE.replace(
            "  scheduler:\n",
            "  scheduler:\n    tuning: {reclaimMinGpus: 12, weights: {binpack: 2}}\n",
        );
        assert_ne!(yaml, SAMPLE, "the sample has a scheduler section");
        let tuned: Policy = decode_yaml(yaml.as_bytes()).unwrap();
        assert_eq!(tuned.spec.scheduler.tuning.reclaim_min_gpus, Some(12));
        assert_eq!(tuned.spec.scheduler.tuning.weights.binpack, 2.0);
        tuned.validate().unwrap();
        let json = serde_json::to_string(&tuned).unwrap();
        assert_eq!(decode_json::<Policy>(json.as_bytes()).unwrap(), tuned);

        let typo = SAMPLE.replace(
            "  scheduler:\n",
            "  scheduler:\n    tuning: {maxReservation: 0}\n",
        );
        let err = decode_yaml::<Policy>(typo.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("maxReservation"), "{err}");

        p.spec.scheduler.tuning.reservation_idle_factor = -1.0;
        p.spec.scheduler.tuning.weights.fragmentation = f64::NAN;
        p.spec.scheduler.tuning.max_reason_clusters = 0;
        let errs = p.validate().unwrap_err();
        for field in [
            "spec.scheduler.tuning.reservationIdleFactor",
            "spec.scheduler.tuning.weights.fragmentation",
            "spec.scheduler.tuning.maxReasonClusters",
        ] {
            assert!(errs.has_field(field), "missing {field} in {errs}");
        }
    }

    /// The examples under `deploy/` are what users copy: they must apply as they are.
    #[test]
    fn tidal_examples_under_deploy_validate() {
        let p: Policy =
            decode_yaml(include_str!("../../deploy/policies/follow-the-sun.yaml").as_bytes())
                .unwrap();
        p.validate().unwrap();
        assert_eq!(p.spec.quota_schedules.len(), 3);
        let s: crate::QuotaSchedule =
            decode_yaml(include_str!("../../deploy/dev/day-night.yaml").as_bytes()).unwrap();
        s.validate().unwrap();
    }

    #[test]
    fn a_rollout_names_queues_and_pools_of_the_bundle() {
        let mut p: Policy = decode_yaml(SAMPLE.as_bytes()).unwrap();
        p.spec.rollout = Some(crate::Rollout {
            scope: crate::RolloutScope {
                queues: vec!["ghost".into()],
                pools: vec!["gpu".into(), "inference".into()],
                clusters: vec![],
            },
            triggers: vec![crate::RollbackTrigger::P95WaitWorse {
                queue: "nobody".into(),
                percent: -1.0,
                window_seconds: 600,
            }],
        });
        let errs = p.validate().unwrap_err();
        for field in [
            "spec.rollout.scope.queues[0]",
            "spec.rollout.scope.pools[0]",
            "spec.rollout.triggers[0].p95WaitWorse.queue",
            "spec.rollout.triggers[0].p95WaitWorse.percent",
        ] {
            assert!(errs.has_field(field), "missing {field} in {errs}");
        }
        assert_eq!(errs.len(), 4, "{errs}");
        // Clusters alone are valid here (they take what the candidate changes, which only
        // the live state can tell); a bad cluster name is not.
        let alone = "scope: {clusters: [sim-eu]}\n";
        p.spec.rollout = Some(serde_saphyr::from_str(alone).unwrap());
        p.validate().unwrap();
        let bad = "scope: {clusters: [Not_A_Name]}\n";
        p.spec.rollout = Some(serde_saphyr::from_str(bad).unwrap());
        let errs = p.validate().unwrap_err();
        assert!(errs.has_field("spec.rollout.scope.clusters[0]"), "{errs}");
        let yaml = "scope: {pools: [inference], clusters: [sim-eu]}\ntriggers:\n- unservedInference: {seconds: 30}\n";
        let r: crate::Rollout = serde_saphyr::from_str(yaml).unwrap();
        p.spec.rollout = Some(r);
        p.validate().unwrap();
    }

    #[test]
    fn role_bindings_are_checked_with_the_bundle() {
        let mut p: Policy = decode_yaml(SAMPLE.as_bytes()).unwrap();
        let queue = p.spec.queues[0].metadata.name.clone();
        let binding = |name: &str, queues: &str| -> RoleBinding {
            decode_yaml(
                format!(
                    "apiVersion: tideway.dev/v1alpha1\nkind: RoleBinding\nmetadata: {{name: {name}}}\nspec: {{role: submitter, groups: [ml], queues: [{queues}]}}\n"
                )
                .as_bytes(),
            )
            .unwrap()
        };
        p.spec.role_bindings = Some(vec![
            binding("ml", &queue),
            binding("ml", "ghost"),
            binding("all", "\"*\""),
        ]);
        let errs = p.validate().unwrap_err();
        assert!(
            errs.has_field("spec.roleBindings[1].spec.queues[0]"),
            "an unknown queue: {errs}"
        );
        assert!(
            errs.has_field("spec.roleBindings[1].metadata.name"),
            "a duplicate name: {errs}"
        );
        assert_eq!(errs.len(), 2, "{errs}");
        p.spec.role_bindings = Some(vec![binding("ml", &queue), binding("all", "\"*\"")]);
        p.validate().unwrap();
        let yaml = serde_saphyr::to_string(&p).unwrap();
        assert_eq!(decode_yaml::<Policy>(yaml.as_bytes()).unwrap(), p);
        // Absent is not empty: an older bundle leaves the bindings alone.
        let old: Policy = decode_yaml(SAMPLE.as_bytes()).unwrap();
        assert_eq!(old.spec.role_bindings, None);
    }

    #[test]
    fn empty_policy_is_valid() {
        let p = Policy::new("empty", PolicySpec::default());
        p.validate().unwrap();
        let mp = rmp_serde::to_vec_named(&p).unwrap();
        assert_eq!(rmp_serde::from_slice::<Policy>(&mp).unwrap(), p);
    }
}
