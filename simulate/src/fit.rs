//! "Does this gang fit this cluster now?", answered from the capacity digest, as the
//! federation answers it: FIFO admission and the rejection of work that can never fit use
//! it, so they agree with what the scheduler core and the member's gang scheduler do.
//!
//! Pods are taken out of a copy of the free histogram best fit first, largest pods first,
//! which is what the sim cluster's gang scheduler does; for gangs of equal pods the digest
//! answer is exact (see `member-agent/src/sim/gang.rs`).

use tideway_api::digest::{CapacityDigest, GpuCounts, PoolDigest};
use tideway_api::{PoolKind, TopologyLevel, TopologyRequirement, WorkloadClass};

/// Pods of one flavor: `(count, gpus_per_pod)`, largest pods first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlavorNeed {
    pub flavor: String,
    pub pods: Vec<(u32, u32)>,
}

impl FlavorNeed {
    pub fn gpus(&self) -> u64 {
        self.pods
            .iter()
            .map(|(c, g)| u64::from(*c) * u64::from(*g))
            .sum()
    }
}

/// The pool kinds a class may use; the scheduler core's `poolAffinity` rule.
pub fn kind_allowed(class: WorkloadClass, kind: PoolKind, affinity: bool) -> bool {
    if !affinity {
        return true;
    }
    match class {
        WorkloadClass::Training => matches!(kind, PoolKind::Training | PoolKind::Shared),
        WorkloadClass::Inference => matches!(kind, PoolKind::Inference | PoolKind::Shared),
        WorkloadClass::Eval | WorkloadClass::Experiment => true,
    }
}

fn take_all(counts: &GpuCounts, pods: &[(u32, u32)]) -> bool {
    let mut c = counts.clone();
    pods.iter().all(|&(n, g)| g == 0 || c.take(u64::from(n), g))
}

/// Whether the pods fit in this pool now, within one domain of a required level.
pub fn fits_pool(p: &PoolDigest, need: &FlavorNeed, topology: Option<TopologyRequirement>) -> bool {
    match topology {
        Some(TopologyRequirement::Required(TopologyLevel::Node)) => {
            need.gpus() <= u64::from(p.counts.largest_node_free())
        }
        Some(TopologyRequirement::Required(level)) => p
            .domains
            .iter()
            .filter(|d| d.level == level)
            .any(|d| take_all(&d.counts, &need.pods)),
        _ => take_all(&p.counts, &need.pods),
    }
}

/// Free GPUs of the flavor in the pools the class may use; tells fragmentation (enough in
/// total, not in one place) from a plain shortage.
pub fn free_gpus(d: &CapacityDigest, flavor: &str, class: WorkloadClass, affinity: bool) -> u64 {
    d.pools
        .iter()
        .filter(|p| p.flavor == flavor && kind_allowed(class, p.kind, affinity))
        .map(|p| p.counts.free())
        .sum()
}

/// A pool per need, all in this cluster, or `None`. Pools are tried in digest order (by
/// name), the first that fits wins: FIFO is not meant to be clever.
pub fn place(
    d: &CapacityDigest,
    needs: &[FlavorNeed],
    class: WorkloadClass,
    topology: Option<TopologyRequirement>,
    affinity: bool,
) -> Option<Vec<usize>> {
    needs
        .iter()
        .map(|need| {
            d.pools.iter().position(|p| {
                p.flavor == need.flavor
                    && kind_allowed(class, p.kind, affinity)
                    && fits_pool(p, need, topology)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use tideway_api::digest::DomainDigest;

    use super::*;

    fn pool(hist: &[u32]) -> PoolDigest {
        let counts = GpuCounts {
            total: 8 * hist.iter().sum::<u32>(),
            allocated: 0,
            unhealthy: 0,
            cordoned: 0,
            free_histogram: hist.to_vec(),
        };
        PoolDigest {
            pool: "training".into(),
            kind: PoolKind::Training,
            flavor: "P100".into(),
            domains: vec![DomainDigest {
                level: TopologyLevel::Rack,
                name: "r".into(),
                zone: None,
                counts: counts.clone(),
            }],
            counts,
        }
    }

    #[test]
    fn whole_gangs_and_fragmentation() {
        // two nodes with 4 free each: 8 GPUs free, but no whole node
        let p = pool(&[0, 0, 0, 0, 2, 0, 0, 0, 0]);
        let need = |pods: Vec<(u32, u32)>| FlavorNeed {
            flavor: "P100".into(),
            pods,
        };
        assert!(fits_pool(&p, &need(vec![(2, 4)]), None));
        assert!(!fits_pool(&p, &need(vec![(1, 8)]), None));
        assert!(!fits_pool(&p, &need(vec![(1, 8), (1, 4)]), None));
        assert!(!fits_pool(
            &p,
            &need(vec![(1, 6)]),
            Some(TopologyRequirement::Required(TopologyLevel::Node))
        ));
        assert!(fits_pool(
            &p,
            &need(vec![(2, 4)]),
            Some(TopologyRequirement::Required(TopologyLevel::Rack))
        ));
        assert!(kind_allowed(WorkloadClass::Eval, PoolKind::Inference, true));
        assert!(!kind_allowed(
            WorkloadClass::Training,
            PoolKind::Inference,
            true
        ));
    }
}
