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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySummary {
    pub total: u64,
    pub allocated: u64,
    pub free: u64,
    pub unhealthy: u64,
    pub cordoned: u64,
    /// GPUs a queue uses beyond its guarantee, lent by its cohort (quota accounting).
    pub borrowed: u64,
}

impl CapacitySummary {
    pub fn add_counts(&mut self, c: &GpuCounts) {
        self.total += u64::from(c.total);
        self.allocated += u64::from(c.allocated);
        self.free += c.free();
        self.unhealthy += u64::from(c.unhealthy);
        self.cordoned += u64::from(c.cordoned);
    }

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
#[serde(rename_all = "camelCase")]
pub struct LargestGang {
    pub pod_gpus: u32,
    pub node: u64,
    pub rack: u64,
    pub zone: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainCapacity {
    pub level: TopologyLevel,
    pub name: String,
    pub capacity: CapacitySummary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolCapacity {
    pub pool: String,
    pub kind: PoolKind,
    pub flavor: String,
    pub capacity: CapacitySummary,
    pub fragmentation: f64,
    pub largest_gang: LargestGang,
    pub domains: Vec<DomainCapacity>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCapacity {
    pub cluster: String,
    pub region: String,
    pub phase: MemberPhase,
    pub last_heartbeat: Option<DateTime<Utc>>,
    /// When the digest behind these numbers was taken; None if the member never sent one.
    pub digest_at: Option<DateTime<Utc>>,
    pub capacity: CapacitySummary,
    pub pools: Vec<PoolCapacity>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegionCapacity {
    pub region: String,
    pub capacity: CapacitySummary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlavorCapacity {
    pub flavor: String,
    pub capacity: CapacitySummary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityView {
    pub fleet: CapacitySummary,
    pub regions: Vec<RegionCapacity>,
    pub flavors: Vec<FlavorCapacity>,
    pub clusters: Vec<ClusterCapacity>,
    /// How `fragmentation` is defined, so the number is never read without its meaning.
    pub fragmentation_definition: String,
}

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
