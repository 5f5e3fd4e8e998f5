//! `PriorityClass`: how important a workload is, whether it may be evicted, and who may
//! claim it.
//!
//! Priority is a class rather than a number on the workload so that platform teams control
//! who may use "critical", and so aging and preemptibility are policy, not user input.

use serde::{Deserialize, Serialize};

use crate::meta::{API_VERSION, ObjectMeta, impl_resource};
use crate::validation::{CheckAt, Checker, at, impl_validate};

/// Kubernetes reserves values above one billion for system classes; so do we.
pub const MAX_PRIORITY_VALUE: i32 = 1_000_000_000;
/// The bottom of the user range, mirroring [`MAX_PRIORITY_VALUE`].
pub const MIN_PRIORITY_VALUE: i32 = -1_000_000_000;

/// A named priority level that workloads refer to by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PriorityClass {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `PriorityClass`.
    pub kind: String,
    /// The name workloads give in `spec.priorityClass`.
    pub metadata: ObjectMeta,
    /// Value, eviction rules and who may use the class.
    pub spec: PriorityClassSpec,
}

impl_resource!(PriorityClass => "PriorityClass");

impl PriorityClass {
    /// A class at the current API version.
    pub fn new(name: impl Into<String>, spec: PriorityClassSpec) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: <Self as crate::meta::Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
        }
    }
}

/// What a priority class means for scheduling and who may use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PriorityClassSpec {
    /// Higher runs first and may preempt lower.
    pub value: i32,
    /// Whether this class's work may be evicted; `allowed` if left out.
    #[serde(default)]
    pub preemptibility: Preemptibility,
    /// Whether this class's work may evict others; `preemptLowerPriority` if left out.
    #[serde(default)]
    pub preemption_policy: PreemptionPolicy,
    /// Waiting raises effective priority so low-priority work cannot starve forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aging: Option<Aging>,
    /// Users allowed to submit with this class; empty allows everyone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_users: Vec<String>,
    /// Queues whose workloads may use this class; empty allows every queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_queues: Vec<String>,
    /// What the class is for, for people choosing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl PriorityClassSpec {
    /// A class of `value` with every other field at its default: preemptible, open to all, no aging.
    pub fn new(value: i32) -> Self {
        Self {
            value,
            preemptibility: Preemptibility::default(),
            preemption_policy: PreemptionPolicy::default(),
            aging: None,
            allowed_users: Vec::new(),
            allowed_queues: Vec::new(),
            description: None,
        }
    }

    /// Priority after waiting `waited_seconds`; i64 so value plus cap cannot overflow.
    pub fn effective_priority(&self, waited_seconds: u64) -> i64 {
        let bonus = self.aging.map_or(0, |a| {
            let hours = waited_seconds / 3600;
            (u64::from(a.rate_per_hour).saturating_mul(hours)).min(u64::from(a.cap))
        });
        i64::from(self.value) + i64::try_from(bonus).unwrap_or(i64::MAX)
    }

    /// Whether `user` may submit to `queue` with this class.
    pub fn permits(&self, user: Option<&str>, queue: &str) -> bool {
        let user_ok = self.allowed_users.is_empty()
            || user.is_some_and(|u| self.allowed_users.iter().any(|a| a == u));
        let queue_ok =
            self.allowed_queues.is_empty() || self.allowed_queues.iter().any(|q| q == queue);
        user_ok && queue_ok
    }
}

/// Whether workloads of this class may be evicted for others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Preemptibility {
    /// May be evicted for higher-priority work or tidal reclaim.
    #[default]
    Allowed,
    /// Evicted only when no `allowed` victim set suffices, and only after a checkpoint grace.
    Cautious,
    /// Never evicted, not even by tidal reclaim; such work must fit its window on its own.
    Forbidden,
}

/// Whether workloads of this class may evict others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum PreemptionPolicy {
    /// May evict lower-priority work to make room.
    #[default]
    PreemptLowerPriority,
    /// Waits for room instead of evicting anyone.
    Never,
}

/// How waiting raises a class's effective priority; see [`PriorityClassSpec::effective_priority`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Aging {
    /// Priority points gained per full hour of waiting.
    pub rate_per_hour: u32,
    /// The most aging can add, so aged work never overtakes a truly higher class.
    pub cap: u32,
}

impl CheckAt for PriorityClass {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.header(
            prefix,
            &self.api_version,
            &self.kind,
            <Self as crate::meta::Resource>::KIND,
            &self.metadata,
        );
        let p = at(prefix, "spec").path();
        let s = &self.spec;
        c.range(
            at(&p, "value"),
            s.value,
            MIN_PRIORITY_VALUE,
            MAX_PRIORITY_VALUE,
        );
        if let Some(aging) = s.aging {
            c.range(
                at(&p, "aging.ratePerHour"),
                aging.rate_per_hour,
                1,
                1_000_000,
            );
            c.range(
                at(&p, "aging.cap"),
                aging.cap,
                1,
                MAX_PRIORITY_VALUE.unsigned_abs(),
            );
        }
        for (i, user) in s.allowed_users.iter().enumerate() {
            c.text(format!("{}[{i}]", at(&p, "allowedUsers")), user);
        }
        c.unique(
            &p,
            "allowedUsers",
            "",
            s.allowed_users.iter().map(String::as_str),
        );
        for (i, queue) in s.allowed_queues.iter().enumerate() {
            c.name(format!("{}[{i}]", at(&p, "allowedQueues")), queue);
        }
        c.unique(
            &p,
            "allowedQueues",
            "",
            s.allowed_queues.iter().map(String::as_str),
        );
        if let Some(d) = &s.description
            && d.len() > crate::validation::MAX_TEXT_LEN
        {
            c.push(at(&p, "description"), "is too long");
        }
    }
}

impl_validate!(PriorityClass);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{decode_json, decode_yaml};
    use crate::validation::Validate;

    const SAMPLE: &str = include_str!("../testdata/priority-class.yaml");

    #[test]
    fn sample_decodes_validates_and_round_trips() {
        let pc: PriorityClass = decode_yaml(SAMPLE.as_bytes()).unwrap();
        pc.validate().unwrap();
        assert_eq!(pc.spec.preemptibility, Preemptibility::Cautious);
        let json = serde_json::to_vec(&pc).unwrap();
        assert_eq!(decode_json::<PriorityClass>(&json).unwrap(), pc);
        let yaml = serde_saphyr::to_string(&pc).unwrap();
        assert_eq!(decode_yaml::<PriorityClass>(yaml.as_bytes()).unwrap(), pc);
        let mp = rmp_serde::to_vec_named(&pc).unwrap();
        assert_eq!(rmp_serde::from_slice::<PriorityClass>(&mp).unwrap(), pc);
    }

    #[test]
    fn aging_is_capped() {
        let mut spec = PriorityClassSpec::new(100);
        assert_eq!(spec.effective_priority(10 * 3600), 100);
        spec.aging = Some(Aging {
            rate_per_hour: 5,
            cap: 20,
        });
        assert_eq!(spec.effective_priority(3599), 100);
        assert_eq!(spec.effective_priority(2 * 3600), 110);
        assert_eq!(spec.effective_priority(u64::MAX), 120);
    }

    #[test]
    fn permits_users_and_queues() {
        let mut spec = PriorityClassSpec::new(0);
        assert!(spec.permits(None, "q"));
        spec.allowed_users = vec!["alice".into()];
        spec.allowed_queues = vec!["prod".into()];
        assert!(spec.permits(Some("alice"), "prod"));
        assert!(!spec.permits(Some("bob"), "prod"));
        assert!(!spec.permits(None, "prod"));
        assert!(!spec.permits(Some("alice"), "dev"));
    }

    #[test]
    fn invalid_class_reports_every_problem() {
        let mut spec = PriorityClassSpec::new(i32::MAX);
        spec.aging = Some(Aging {
            rate_per_hour: 0,
            cap: 0,
        });
        spec.allowed_users = vec!["".into()];
        spec.allowed_queues = vec!["Prod".into()];
        let errs = PriorityClass::new("critical", spec).validate().unwrap_err();
        for field in [
            "spec.value",
            "spec.aging.ratePerHour",
            "spec.aging.cap",
            "spec.allowedUsers[0]",
            "spec.allowedQueues[0]",
        ] {
            assert!(errs.has_field(field), "missing {field} in {errs}");
        }
    }

    #[test]
    fn unknown_preemptibility_is_rejected() {
        let json = br#"{"apiVersion":"tideway.dev/v1alpha1","kind":"PriorityClass","metadata":{"name":"x"},"spec":{"value":1,"preemptibility":"sometimes"}}"#;
        let err = decode_json::<PriorityClass>(json).unwrap_err();
        assert_eq!(err.field(), "spec.preemptibility");
    }
}
