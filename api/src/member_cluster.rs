//! `MemberCluster`: a cluster the federation may place work on.
//!
//! The spec is what the platform team declares (where it is, which pools and GPU models it
//! has); capacity itself is never declared but reported by the member agent, so it cannot
//! go stale in a manifest. Labels for placement live in `metadata.labels`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::meta::{API_VERSION, ObjectMeta, impl_resource};
use crate::validation::{CheckAt, Checker, at, impl_validate};
use crate::workload::TopologyLevel;

/// A cluster the federation may place work on, as declared by the platform team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MemberCluster {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `MemberCluster`.
    pub kind: String,
    /// Name, and labels that placement constraints match against.
    pub metadata: ObjectMeta,
    /// What the platform team declares.
    pub spec: MemberClusterSpec,
    /// What the federation last heard from the member's agent; None until it first reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MemberClusterStatus>,
}

impl_resource!(MemberCluster => "MemberCluster");

impl MemberCluster {
    /// A member with no status yet, at the current API version.
    pub fn new(name: impl Into<String>, spec: MemberClusterSpec) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: <Self as crate::meta::Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }
}

/// Where a member is and what it has; its capacity is reported, never declared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MemberClusterSpec {
    /// Region name; placement and the capacity view group members by it.
    pub region: String,
    /// Zone within the region, for members that sit in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Quota schedules move quota between pools, so every node belongs to one.
    pub pools: Vec<Pool>,
    /// GPU models (flavors) present, e.g. "H100"; lets the scheduler filter before the
    /// first capacity digest arrives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_models: Vec<String>,
    /// Topology levels the member's nodes are labelled with; a workload requiring a level
    /// the member does not know cannot be placed there.
    #[serde(default = "default_levels")]
    pub topology_levels: Vec<TopologyLevel>,
}

fn default_levels() -> Vec<TopologyLevel> {
    vec![TopologyLevel::Node]
}

impl MemberClusterSpec {
    /// A spec with no zone and no GPU models declared, labelled at node level only.
    pub fn new(region: impl Into<String>, pools: Vec<Pool>) -> Self {
        Self {
            region: region.into(),
            zone: None,
            pools,
            gpu_models: Vec::new(),
            topology_levels: default_levels(),
        }
    }

    /// Whether the member's nodes carry labels for `level`, so gangs can require it there.
    pub fn supports_level(&self, level: TopologyLevel) -> bool {
        self.topology_levels.contains(&level)
    }
}

/// A set of nodes that quota and tidal schedules treat as one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Pool {
    /// Unique within the member; digests and quota schedules refer to the pool by it.
    pub name: String,
    /// What the pool is for, which decides whose work it takes.
    pub kind: PoolKind,
}

/// What a pool is for; lower case on the wire (`training`, `inference`, `shared`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PoolKind {
    /// Batch and training work.
    Training,
    /// Latency-sensitive serving.
    Inference,
    /// Serves either; tidal schedules decide who gets it when.
    Shared,
}

/// The federation's view of a member's health; `NotReady` until its first heartbeat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum MemberPhase {
    /// Heartbeating and accepting new work.
    Ready,
    /// Missed heartbeats; its work is subject to the rescheduling state machine.
    #[default]
    NotReady,
    /// Finishing its work but taking no new assignments.
    Draining,
    /// Taking no new assignments; running work is left alone.
    Cordoned,
    /// Flapping (back from NotReady too often): no new work until the quarantine ends by
    /// itself (`quarantinedUntil`) or an operator uncordons it; running work is left alone.
    Quarantined,
}

impl MemberPhase {
    /// Only `Ready` members are offered new assignments.
    pub fn accepts_work(self) -> bool {
        self == Self::Ready
    }
}

/// What the federation last heard from the member's agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MemberClusterStatus {
    /// Derived from heartbeats and operator actions (drain, cordon).
    pub phase: MemberPhase,
    /// When the last heartbeat arrived (federation's wall clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<DateTime<Utc>>,
    /// Why the member is in its phase, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Version of the member agent that sent the last heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// While the member is quarantined for flapping: when the quarantine ends by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined_until: Option<DateTime<Utc>>,
}

impl CheckAt for MemberCluster {
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
        c.identifier(at(&p, "region"), &s.region);
        if let Some(zone) = &s.zone {
            c.identifier(at(&p, "zone"), zone);
        }
        if s.pools.is_empty() {
            c.push(at(&p, "pools"), "must contain at least one pool");
        }
        for (i, pool) in s.pools.iter().enumerate() {
            c.name(format!("{}[{i}].name", at(&p, "pools")), &pool.name);
        }
        c.unique(
            &p,
            "pools",
            "name",
            s.pools.iter().map(|pool| pool.name.as_str()),
        );
        for (i, m) in s.gpu_models.iter().enumerate() {
            c.identifier(format!("{}[{i}]", at(&p, "gpuModels")), m);
        }
        c.unique(&p, "gpuModels", "", s.gpu_models.iter().map(String::as_str));
        c.unique(
            &p,
            "topologyLevels",
            "",
            s.topology_levels.iter().map(|l| l.as_str()),
        );
    }
}

impl_validate!(MemberCluster);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{decode_json, decode_yaml};
    use crate::validation::Validate;

    const SAMPLE: &str = include_str!("../testdata/member-cluster.yaml");

    #[test]
    fn sample_decodes_validates_and_round_trips() {
        let mut m: MemberCluster = decode_yaml(SAMPLE.as_bytes()).unwrap();
        m.validate().unwrap();
        assert!(m.spec.supports_level(TopologyLevel::Rack));
        assert_eq!(m.metadata.labels["tideway.dev/network"], "infiniband");
        m.status = Some(MemberClusterStatus {
            phase: MemberPhase::Ready,
            last_heartbeat: Some("2025-03-01T12:00:00Z".parse().unwrap()),
            message: None,
            agent_version: Some("0.1.0".into()),
            quarantined_until: Some("2025-03-01T12:10:00Z".parse().unwrap()),
        });
        let json = serde_json::to_vec(&m).unwrap();
        assert_eq!(decode_json::<MemberCluster>(&json).unwrap(), m);
        let yaml = serde_saphyr::to_string(&m).unwrap();
        assert_eq!(decode_yaml::<MemberCluster>(yaml.as_bytes()).unwrap(), m);
        let mp = rmp_serde::to_vec_named(&m).unwrap();
        assert_eq!(rmp_serde::from_slice::<MemberCluster>(&mp).unwrap(), m);
        assert!(MemberPhase::Ready.accepts_work());
        assert!(!MemberPhase::Cordoned.accepts_work());
        assert!(!MemberPhase::Quarantined.accepts_work());
    }

    #[test]
    fn every_problem_is_reported() {
        let mut spec = MemberClusterSpec::new("", vec![]);
        spec.gpu_models = vec!["H100".into(), "H100".into()];
        spec.topology_levels = vec![TopologyLevel::Node, TopologyLevel::Node];
        let errs = MemberCluster::new("a", spec).validate().unwrap_err();
        for field in [
            "spec.region",
            "spec.pools",
            "spec.gpuModels[1]",
            "spec.topologyLevels[1]",
        ] {
            assert!(errs.has_field(field), "missing {field} in {errs}");
        }
        let mut spec = MemberClusterSpec::new(
            "eu",
            vec![
                Pool {
                    name: "p".into(),
                    kind: PoolKind::Shared,
                },
                Pool {
                    name: "p".into(),
                    kind: PoolKind::Training,
                },
            ],
        );
        spec.zone = Some("".into());
        let errs = MemberCluster::new("a", spec).validate().unwrap_err();
        assert!(errs.has_field("spec.pools[1].name"), "{errs}");
        assert!(errs.has_field("spec.zone"), "{errs}");
    }
}
