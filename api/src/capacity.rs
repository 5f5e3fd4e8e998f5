//! The fleet-wide capacity view (`GET /v1/capacity`), computed from the members' digests.
//!
//! Fragmentation is the share of free GPUs that cannot host a pod of the pool's typical size,
//! taken as its node size capped at 8 GPUs: a whole-node pod, the building block of training
//! gangs. 0 means every free GPU is usable by such a pod; 1 means none is.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::digest::{GpuCounts, PoolDigest};
use crate::member_cluster::{MemberPhase, PoolKind};
use crate::workload::TopologyLevel;

/// GPU counts of some part of the fleet; every field is a number of GPUs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CapacitySummary {
    /// All GPUs, healthy or not.
    pub total: u64,
    /// GPUs held by running pods.
    pub allocated: u64,
    /// Schedulable GPUs not held by any pod.
    pub free: u64,
    /// GPUs on unhealthy nodes (e.g. ECC errors), not schedulable.
    pub unhealthy: u64,
    /// GPUs on cordoned or draining nodes, not schedulable.
    pub cordoned: u64,
    /// GPUs a queue uses beyond its guarantee, lent by its cohort (quota accounting).
    pub borrowed: u64,
}

impl CapacitySummary {
    /// Adds a digest's counts; `borrowed` is quota accounting, so it is left unchanged.
    pub fn add_counts(&mut self, c: &GpuCounts) {
        self.total += u64::from(c.total);
        self.allocated += u64::from(c.allocated);
        self.free += c.free();
        self.unhealthy += u64::from(c.unhealthy);
        self.cordoned += u64::from(c.cordoned);
    }

    /// Adds another summary, `borrowed` included (rolling clusters up into regions and the fleet).
    pub fn add(&mut self, o: &CapacitySummary) {
        self.total += o.total;
        self.allocated += o.allocated;
        self.free += o.free;
        self.unhealthy += o.unhealthy;
        self.cordoned += o.cordoned;
        self.borrowed += o.borrowed;
    }
}

/// The largest gang, in pods of `pod_gpus` GPUs, that fits in one domain of each level.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LargestGang {
    /// GPUs per pod the sizes below are counted in (the pool's typical pod size).
    pub pod_gpus: u32,
    /// Pods that fit on the best single node.
    pub node: u64,
    /// Pods that fit in the best single rack.
    pub rack: u64,
    /// Pods that fit in the best single zone.
    pub zone: u64,
}

/// Capacity of one topology domain (a rack or a zone) of a pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DomainCapacity {
    /// Whether the domain is a rack or a zone.
    pub level: TopologyLevel,
    /// The domain's name as the member reports it.
    pub name: String,
    /// Counts over the domain's nodes.
    pub capacity: CapacitySummary,
}

/// Capacity of one (pool, flavor) of a member cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PoolCapacity {
    /// Pool name, unique within its cluster.
    pub pool: String,
    /// What the pool is for (training, inference...), from the member's configuration.
    pub kind: PoolKind,
    /// GPU model, the quota flavor.
    pub flavor: String,
    /// Counts over the whole pool.
    pub capacity: CapacitySummary,
    /// Share of free GPUs that cannot host a typical pod: 0 (all usable) to 1 (none); see the module docs.
    pub fragmentation: f64,
    /// The largest gang of typical pods that fits in one node, rack or zone.
    pub largest_gang: LargestGang,
    /// Per-domain counts, so a reader can see where the free GPUs are.
    pub domains: Vec<DomainCapacity>,
}

/// Capacity of one member cluster as of its last digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClusterCapacity {
    /// Member cluster name.
    pub cluster: String,
    /// Region the member is registered in.
    pub region: String,
    /// The member's phase: a `NotReady` member's numbers may be stale.
    pub phase: MemberPhase,
    /// Last heartbeat the federation received; None if it never heard from the member.
    pub last_heartbeat: Option<DateTime<Utc>>,
    /// When the digest behind these numbers was taken; None if the member never sent one.
    pub digest_at: Option<DateTime<Utc>>,
    /// Sum over the member's pools.
    pub capacity: CapacitySummary,
    /// One entry per (pool, flavor).
    pub pools: Vec<PoolCapacity>,
}

/// Capacity summed over a region's member clusters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegionCapacity {
    /// Region name, as registered by its members.
    pub region: String,
    /// Sum over the region's members.
    pub capacity: CapacitySummary,
}

/// Capacity of one GPU model (quota flavor) across the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FlavorCapacity {
    /// GPU model name, e.g. `H100`.
    pub flavor: String,
    /// Sum over every pool of this model.
    pub capacity: CapacitySummary,
}

/// Body of `GET /v1/capacity`: the fleet, then broken down by region, flavor and cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CapacityView {
    /// Sum over every member cluster.
    pub fleet: CapacitySummary,
    /// One entry per region, sorted by name.
    pub regions: Vec<RegionCapacity>,
    /// One entry per GPU model.
    pub flavors: Vec<FlavorCapacity>,
    /// One entry per member cluster.
    pub clusters: Vec<ClusterCapacity>,
    /// How `fragmentation` is defined, so the number is never read without its meaning.
    pub fragmentation_definition: String,
}

/// The text of `CapacityView::fragmentation_definition`, one wording shared by API and CLI.
pub const FRAGMENTATION_DEFINITION: &str = "share of free GPUs on schedulable nodes that cannot host a pod of the pool's typical size (its node size, at most 8 GPUs)";

/// The pool's typical pod size: its schedulable node size, capped at 8.
pub fn typical_pod_gpus(p: &PoolDigest) -> u32 {
    let nodes: u32 = p.counts.free_histogram.iter().sum();
    let schedulable = p
        .counts
        .total
        .saturating_sub(p.counts.unhealthy)
        .saturating_sub(p.counts.cordoned);
    if nodes == 0 {
        return 8;
    }
    (schedulable / nodes).clamp(1, 8)
}

impl PoolCapacity {
    /// Builds the view of one pool from its digest, at its typical pod size.
    pub fn from_digest(p: &PoolDigest) -> Self {
        let pod = typical_pod_gpus(p);
        let mut capacity = CapacitySummary::default();
        capacity.add_counts(&p.counts);
        PoolCapacity {
            pool: p.pool.clone(),
            kind: p.kind,
            flavor: p.flavor.clone(),
            capacity,
            fragmentation: p.fragmentation(pod),
            largest_gang: LargestGang {
                pod_gpus: pod,
                node: p.largest_fit(TopologyLevel::Node, pod),
                rack: p.largest_fit(TopologyLevel::Rack, pod),
                zone: p.largest_fit(TopologyLevel::Zone, pod),
            },
            domains: p
                .domains
                .iter()
                .map(|d| {
                    let mut c = CapacitySummary::default();
                    c.add_counts(&d.counts);
                    DomainCapacity {
                        level: d.level,
                        name: d.name.clone(),
                        capacity: c,
                    }
                })
                .collect(),
        }
    }
}
