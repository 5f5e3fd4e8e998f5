//! `Queue`: a tenant's share of the fleet, per GPU flavor, and how it competes for more.
//!
//! The quota model is Kueue's (guaranteed, borrowing and lending limits within a cohort)
//! because that is what platform teams already reason in; fair share across a cohort is
//! weighted dominant-resource fairness.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::meta::{API_VERSION, ObjectMeta, impl_resource};
use crate::validation::{CheckAt, Checker, FieldError, at, impl_validate};
use crate::workload::WorkloadClass;

/// Larger than any fleet; only guards arithmetic against absurd input.
pub const MAX_QUOTA_GPUS: u32 = 1_000_000;
/// Caps `fairShareWeight` for the same reason as [`MAX_QUOTA_GPUS`].
pub const MAX_FAIR_SHARE_WEIGHT: f64 = 1_000_000.0;

/// Where workloads wait for quota; a workload names its queue in `spec.queue`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Queue {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `Queue`.
    pub kind: String,
    /// The name workloads give as their queue.
    pub metadata: ObjectMeta,
    /// Owner, quotas and competition rules.
    pub spec: QueueSpec,
    /// Computed by the federation; None in a document a user writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<QueueStatus>,
}

impl_resource!(Queue => "Queue");

impl Queue {
    /// A queue at the current API version.
    pub fn new(name: impl Into<String>, spec: QueueSpec) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: <Self as crate::meta::Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }
}

/// A tenant's quotas and how the queue competes with others in its cohort.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueueSpec {
    /// The team that owns the queue; audit records and dashboards group by it.
    pub tenant: String,
    /// Queues in one cohort lend unused guaranteed quota to each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Workload classes accepted; empty accepts every class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<WorkloadClass>,
    /// One entry per flavor; a flavor without an entry has no quota in this queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<FlavorQuota>,
    /// Relative share under fair sharing within the cohort; 1 if left out, must be positive.
    #[serde(default = "default_weight")]
    pub fair_share_weight: f64,
    /// Whom the queue's work may evict; see [`QueuePreemption`] for the defaults.
    #[serde(default)]
    pub preemption: QueuePreemption,
    /// Caps admitted-or-running workloads per user so one person cannot drain the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_user_active_limit: Option<u32>,
    /// The `runtimeLimitSeconds` a workload submitted without one gets (Slurm's partition
    /// `DefaultTime`): backfill and reservations can then plan with a bound instead of the
    /// conservative default, and the member stops the workload there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_runtime_limit_seconds: Option<u64>,
    /// The largest `runtimeLimitSeconds` the queue accepts (Slurm's `MaxTime`); a workload
    /// asking for more is refused at submission, naming the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runtime_limit_seconds: Option<u64>,
}

fn default_weight() -> f64 {
    1.0
}

impl QueueSpec {
    /// A queue of `tenant` with no cohort, no quota, weight 1 and default preemption.
    pub fn new(tenant: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            cohort: None,
            classes: Vec::new(),
            quotas: Vec::new(),
            fair_share_weight: default_weight(),
            preemption: QueuePreemption::default(),
            per_user_active_limit: None,
            default_runtime_limit_seconds: None,
            max_runtime_limit_seconds: None,
        }
    }

    /// Applies the queue's time limits to a workload submitted to it: the default limit when
    /// it names none (or the maximum when only that is set), and a refusal naming
    /// `spec.runtimeLimitSeconds` when it asks for more than the maximum.
    pub fn apply_time_limits(&self, spec: &mut crate::WorkloadSpec) -> Result<(), FieldError> {
        if spec.runtime_limit_seconds.is_none() {
            spec.runtime_limit_seconds = self
                .default_runtime_limit_seconds
                .or(self.max_runtime_limit_seconds);
        }
        match (spec.runtime_limit_seconds, self.max_runtime_limit_seconds) {
            (Some(limit), Some(max)) if limit > max => Err(FieldError::new(
                "spec.runtimeLimitSeconds",
                format!("must be at most the queue's maxRuntimeLimitSeconds ({max}) (got {limit})"),
            )),
            _ => Ok(()),
        }
    }

    /// Whether the queue accepts workloads of `class`.
    pub fn serves(&self, class: WorkloadClass) -> bool {
        self.classes.is_empty() || self.classes.contains(&class)
    }

    /// The quota entry for GPU model `flavor`; None means no quota in this queue.
    pub fn quota_for(&self, flavor: &str) -> Option<&FlavorQuota> {
        self.quotas.iter().find(|q| q.flavor == flavor)
    }
}

/// A queue's quota of one GPU flavor, in GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FlavorQuota {
    /// GPU model, e.g. `H100`; unique within the queue.
    pub flavor: String,
    /// Always available to this queue; reclaimed from borrowers when needed.
    pub guaranteed: u32,
    /// How far above `guaranteed` the queue may borrow from its cohort; unset is unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<u32>,
    /// How much of `guaranteed` the cohort may borrow while idle; unset lends all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<u32>,
    /// Hard cap on usage regardless of borrowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
}

impl FlavorQuota {
    /// A plain guarantee of `gpus`, with no borrowing or lending limit and no cap.
    pub fn guaranteed(flavor: impl Into<String>, gpus: u32) -> Self {
        Self {
            flavor: flavor.into(),
            guaranteed: gpus,
            borrowing_limit: None,
            lending_limit: None,
            max: None,
        }
    }

    /// The most this queue may ever use of the flavor; `None` when only the cohort's capacity
    /// limits it.
    pub fn ceiling(&self) -> Option<u64> {
        let by_borrowing = self
            .borrowing_limit
            .map(|b| u64::from(self.guaranteed) + u64::from(b));
        match (by_borrowing, self.max.map(u64::from)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What the cohort may borrow from this queue while it is idle.
    pub fn lendable(&self) -> u32 {
        self.lending_limit
            .map_or(self.guaranteed, |l| l.min(self.guaranteed))
    }
}

/// Which workloads a queue's work may evict; camelCase on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum PreemptionScope {
    /// Evicts nobody.
    Never,
    /// Only workloads of lower priority.
    LowerPriority,
    /// Any workload, whatever its priority.
    Any,
}

/// Defaults honour the quota promise: a queue may evict lower-priority work of its own, and
/// may take back its guaranteed quota from any borrower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct QueuePreemption {
    /// Eviction inside the queue itself; `lowerPriority` by default.
    pub within_queue: PreemptionScope,
    /// Eviction of cohort borrowers to take back guaranteed quota; `any` by default.
    pub reclaim_within_cohort: PreemptionScope,
}

impl Default for QueuePreemption {
    fn default() -> Self {
        Self {
            within_queue: PreemptionScope::LowerPriority,
            reclaim_within_cohort: PreemptionScope::Any,
        }
    }
}

/// Computed by the federation; never submitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct QueueStatus {
    /// Workloads waiting for admission.
    pub pending_workloads: u32,
    /// Workloads admitted or running.
    pub active_workloads: u32,
    /// GPUs in use, by flavor.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub used_gpus: BTreeMap<String, u64>,
    /// Part of `usedGpus` above the guarantee, i.e. borrowed from the cohort.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub borrowed_gpus: BTreeMap<String, u64>,
    /// Per flavor: the work, the GPUs, and the quota in force now with what sets it (a
    /// tidal window or the queue's own spec). Computed when read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flavors: Vec<QueueFlavorStatus>,
}

/// One flavor of a queue, as it stands now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct QueueFlavorStatus {
    /// The GPU model.
    pub flavor: String,
    /// Pending workloads asking for this flavor.
    pub pending_workloads: u32,
    /// Admitted, assigned or running workloads holding this flavor.
    pub active_workloads: u32,
    /// GPUs of the flavor the active workloads hold.
    pub used_gpus: u64,
    /// Used above the guarantee in force: borrowed from the cohort.
    pub borrowed_gpus: u64,
    /// Guarantee in force left unused while the cohort's other queues borrow (at most what
    /// they borrow): lent to them, and reclaimable.
    pub lent_gpus: u64,
    /// The queue's guarantee in force; `None` when the queue has no quota for the flavor
    /// (unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_gpus: Option<u64>,
    /// The schedule and window that set `quotaGpus`; `None` when it is the queue's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_by: Option<QuotaSetBy>,
    /// The fleet sides' quotas in force for the flavor (a schedule's pool quotas) and what
    /// this queue's work of each side uses of it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sides: Vec<SideQuotaStatus>,
}

/// The tidal window a quota in force comes from, and until when it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct QuotaSetBy {
    /// The quota schedule's name.
    pub schedule: String,
    /// The window; `None` between windows (the schedule's `defaultQuotas`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// The next boundary, when the quota may change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// The schedule's IANA time zone, to show `until` as the schedule's users read it.
    pub time_zone: String,
    /// `until` in that zone's wall-clock time, e.g. `Tue 22:00 CET`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_local: Option<String>,
    /// Seconds from the read to `until` on the federation's clock (which `tideway dev` runs
    /// faster than the wall clock, so a client's own clock cannot say it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_left: Option<i64>,
}

impl QuotaSetBy {
    /// `at` in an IANA zone's wall-clock time, `Tue 22:00 CET` (UTC for an unknown zone).
    pub fn local(at: chrono::DateTime<chrono::Utc>, zone: &str) -> String {
        match zone.parse::<chrono_tz::Tz>() {
            Ok(tz) => at.with_timezone(&tz).format("%a %H:%M %Z").to_string(),
            Err(_) => at.format("%a %H:%M UTC").to_string(),
        }
    }
}

/// A fleet side's quota in force for one flavor (from a schedule's pool quota).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct SideQuotaStatus {
    /// `inference` or `training` (training, eval and experiment work).
    pub side: String,
    /// What this queue's work of the side uses of the flavor.
    pub used_gpus: u64,
    /// What the whole side uses across queues, against `quotaGpus`.
    pub side_used_gpus: u64,
    /// The side's guarantee in force.
    pub quota_gpus: u64,
    /// The schedule and window that set it.
    pub set_by: QuotaSetBy,
}

impl CheckAt for Queue {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.header(
            prefix,
            &self.api_version,
            &self.kind,
            <Self as crate::meta::Resource>::KIND,
            &self.metadata,
        );
        self.spec.check_at(&at(prefix, "spec").path(), c);
    }
}

impl CheckAt for QueueSpec {
    fn check_at(&self, p: &str, c: &mut Checker) {
        c.name(at(p, "tenant"), &self.tenant);
        if let Some(cohort) = &self.cohort {
            c.name(at(p, "cohort"), cohort);
        }
        for (name, v) in [
            (
                "defaultRuntimeLimitSeconds",
                self.default_runtime_limit_seconds,
            ),
            ("maxRuntimeLimitSeconds", self.max_runtime_limit_seconds),
        ] {
            if let Some(v) = v {
                c.range(
                    at(p, name),
                    v,
                    1,
                    crate::workload::MAX_RUNTIME_ESTIMATE_SECONDS,
                );
            }
        }
        if let (Some(d), Some(m)) = (
            self.default_runtime_limit_seconds,
            self.max_runtime_limit_seconds,
        ) && d > m
        {
            c.push(
                at(p, "defaultRuntimeLimitSeconds"),
                format!("must not exceed maxRuntimeLimitSeconds ({m}) (got {d})"),
            );
        }
        c.unique(
            p,
            "classes",
            "",
            self.classes.iter().map(|class| class.as_str()),
        );
        for (i, q) in self.quotas.iter().enumerate() {
            let qp = format!("{}[{i}]", at(p, "quotas"));
            c.identifier(at(&qp, "flavor"), &q.flavor);
            c.range(at(&qp, "guaranteed"), q.guaranteed, 0, MAX_QUOTA_GPUS);
            if let Some(b) = q.borrowing_limit {
                c.range(at(&qp, "borrowingLimit"), b, 0, MAX_QUOTA_GPUS);
            }
            if let Some(l) = q.lending_limit
                && l > q.guaranteed
            {
                c.push(
                    at(&qp, "lendingLimit"),
                    format!("must not exceed guaranteed ({}) (got {l})", q.guaranteed),
                );
            }
            if let Some(m) = q.max {
                if m < q.guaranteed {
                    c.push(
                        at(&qp, "max"),
                        format!("must be at least guaranteed ({}) (got {m})", q.guaranteed),
                    );
                } else {
                    c.range(at(&qp, "max"), m, 0, MAX_QUOTA_GPUS);
                }
            }
        }
        c.unique(
            p,
            "quotas",
            "flavor",
            self.quotas.iter().map(|q| q.flavor.as_str()),
        );
        let w = self.fair_share_weight;
        if !(w.is_finite() && w > 0.0 && w <= MAX_FAIR_SHARE_WEIGHT) {
            c.push(
                at(p, "fairShareWeight"),
                format!("must be greater than 0 and at most {MAX_FAIR_SHARE_WEIGHT} (got {w})"),
            );
        }
        if let Some(limit) = self.per_user_active_limit {
            c.range(at(p, "perUserActiveLimit"), limit, 1, 1_000_000);
        }
    }
}

impl_validate!(Queue);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{decode_json, decode_yaml};
    use crate::validation::Validate;

    #[test]
    fn time_limits_default_and_cap() {
        let mut q = QueueSpec::new("t");
        q.default_runtime_limit_seconds = Some(3600);
        q.max_runtime_limit_seconds = Some(7200);
        let mut spec = crate::WorkloadSpec::new(
            "q",
            WorkloadClass::Training,
            vec![crate::PodSet::new("w", 1, 1, "H100")],
        );
        q.apply_time_limits(&mut spec).unwrap();
        assert_eq!(spec.runtime_limit_seconds, Some(3600), "default applied");
        spec.runtime_limit_seconds = Some(5000);
        q.apply_time_limits(&mut spec).unwrap();
        assert_eq!(spec.runtime_limit_seconds, Some(5000), "own limit kept");
        spec.runtime_limit_seconds = Some(9000);
        let e = q.apply_time_limits(&mut spec).unwrap_err();
        assert_eq!(e.field, "spec.runtimeLimitSeconds");
        assert!(e.reason.contains("7200"), "{e}");
        // Only a maximum: work without a limit gets the maximum.
        q.default_runtime_limit_seconds = None;
        spec.runtime_limit_seconds = None;
        q.apply_time_limits(&mut spec).unwrap();
        assert_eq!(spec.runtime_limit_seconds, Some(7200));

        let bad: Queue = decode_yaml(
            b"apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: { name: q }\nspec: { tenant: t, defaultRuntimeLimitSeconds: 9000, maxRuntimeLimitSeconds: 3600 }\n",
        )
        .unwrap();
        let errs = bad.validate().unwrap_err().into_inner();
        assert!(
            errs.iter()
                .any(|e| e.field == "spec.defaultRuntimeLimitSeconds"),
            "{errs:?}"
        );
    }

    const QUEUE_YAML: &str = include_str!("../testdata/queue.yaml");

    #[test]
    fn sample_decodes_validates_and_round_trips() {
        let q: Queue = decode_yaml(QUEUE_YAML.as_bytes()).unwrap();
        q.validate().unwrap();
        assert_eq!(q.metadata.name, "research");
        assert!(q.spec.serves(WorkloadClass::Training));
        assert!(!q.spec.serves(WorkloadClass::Inference));
        let h100 = q.spec.quota_for("H100").unwrap();
        assert_eq!(h100.ceiling(), Some(96));
        assert_eq!(h100.lendable(), 16);

        let json = serde_json::to_vec(&q).unwrap();
        assert_eq!(decode_json::<Queue>(&json).unwrap(), q);
        let yaml = serde_saphyr::to_string(&q).unwrap();
        assert_eq!(decode_yaml::<Queue>(yaml.as_bytes()).unwrap(), q);
        let mp = rmp_serde::to_vec_named(&q).unwrap();
        assert_eq!(rmp_serde::from_slice::<Queue>(&mp).unwrap(), q);
    }

    #[test]
    fn status_round_trips() {
        let mut q = Queue::new("q", QueueSpec::new("team"));
        q.status = Some(QueueStatus {
            pending_workloads: 3,
            active_workloads: 1,
            used_gpus: [("H100".to_owned(), 8)].into(),
            borrowed_gpus: BTreeMap::new(),
            flavors: Vec::new(),
        });
        let json = serde_json::to_vec(&q).unwrap();
        assert_eq!(decode_json::<Queue>(&json).unwrap(), q);
        let mp = rmp_serde::to_vec_named(&q).unwrap();
        assert_eq!(rmp_serde::from_slice::<Queue>(&mp).unwrap(), q);
    }

    #[test]
    fn defaults_are_filled_in() {
        let q: Queue = decode_json(
            br#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Queue","metadata":{"name":"q"},"spec":{"tenant":"t"}}"#,
        )
        .unwrap();
        q.validate().unwrap();
        assert_eq!(q.spec.fair_share_weight, 1.0);
        assert_eq!(q.spec.preemption, QueuePreemption::default());
        assert!(q.spec.serves(WorkloadClass::Inference));
    }

    #[test]
    fn bad_quotas_are_all_reported() {
        let mut spec = QueueSpec::new("Team");
        spec.cohort = Some("".into());
        spec.classes = vec![WorkloadClass::Eval, WorkloadClass::Eval];
        spec.quotas = vec![
            FlavorQuota {
                flavor: "H100".into(),
                guaranteed: 8,
                borrowing_limit: Some(MAX_QUOTA_GPUS + 1),
                lending_limit: Some(9),
                max: Some(4),
            },
            FlavorQuota::guaranteed("H100", 1),
        ];
        spec.fair_share_weight = 0.0;
        spec.per_user_active_limit = Some(0);
        let errs = Queue::new("q", spec).validate().unwrap_err();
        for field in [
            "spec.tenant",
            "spec.cohort",
            "spec.classes[1]",
            "spec.quotas[0].borrowingLimit",
            "spec.quotas[0].lendingLimit",
            "spec.quotas[0].max",
            "spec.quotas[1].flavor",
            "spec.fairShareWeight",
            "spec.perUserActiveLimit",
        ] {
            assert!(errs.has_field(field), "missing {field} in {errs}");
        }
        assert_eq!(errs.len(), 9, "{errs}");
    }

    #[test]
    fn ceiling_combines_borrowing_and_max() {
        let mut q = FlavorQuota::guaranteed("A100", 10);
        assert_eq!(q.ceiling(), None);
        q.max = Some(30);
        assert_eq!(q.ceiling(), Some(30));
        q.borrowing_limit = Some(5);
        assert_eq!(q.ceiling(), Some(15));
        q.max = None;
        assert_eq!(q.ceiling(), Some(15));
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::validation::Validate;

    prop_compose! {
        fn flavor_quota()(
            flavor in "[A-Z][A-Z0-9]{1,5}",
            guaranteed in 0u32..10_000,
            borrowing in proptest::option::of(0u32..10_000),
            lend_frac in proptest::option::of(0.0f64..=1.0),
            extra in proptest::option::of(0u32..10_000),
        ) -> FlavorQuota {
            FlavorQuota {
                flavor,
                guaranteed,
                borrowing_limit: borrowing,
                lending_limit: lend_frac.map(|f| (f64::from(guaranteed) * f) as u32),
                max: extra.map(|e| guaranteed + e),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn valid_queues_round_trip_and_respect_their_guarantee(
            quotas in prop::collection::btree_map("[A-Z][0-9]{2}", flavor_quota(), 0..4),
            weight in 1u32..1000,
            cohort in proptest::option::of("[a-z]{1,8}"),
        ) {
            let mut spec = QueueSpec::new("team");
            spec.cohort = cohort;
            spec.fair_share_weight = f64::from(weight) / 10.0;
            spec.quotas = quotas
                .into_iter()
                .map(|(flavor, q)| FlavorQuota { flavor, ..q })
                .collect();
            let q = Queue::new("q", spec);
            prop_assert!(q.validate().is_ok(), "{:?}", q.validate());
            for fq in &q.spec.quotas {
                prop_assert!(fq.ceiling().is_none_or(|c| c >= u64::from(fq.guaranteed)));
                prop_assert!(fq.lendable() <= fq.guaranteed);
            }
            let mp = rmp_serde::to_vec_named(&q).unwrap();
            prop_assert_eq!(&rmp_serde::from_slice::<Queue>(&mp).unwrap(), &q);
            let json = serde_json::to_vec(&q).unwrap();
            prop_assert_eq!(&crate::decode::decode_json::<Queue>(&json).unwrap(), &q);
        }
    }
}
