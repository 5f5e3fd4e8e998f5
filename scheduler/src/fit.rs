//! "Does this gang fit this member now?", answered by the core's own capacity model, for
//! callers that place work without a scheduling cycle: the trace simulator's FIFO baseline,
//! and its refusal at submission of work that no cluster could ever hold. Answering with the
//! cycle's code (its gangs per flavor, its pool-kind rule, its histogram fit) keeps those
//! answers the same as the scheduler's and the member's gang scheduler's.

use tideway_api::digest::CapacityDigest;
use tideway_api::{PoolKind, Workload};

use super::capacity::{GroupNeed, PoolState};
use super::cycle::{gang_needs, kind_bit, shape_key};
use super::input::PodCount;

/// A workload's gangs, one per flavor (by flavor name, largest pods first), and the pool
/// kinds its class may use: what a cycle fits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gangs {
    needs: Vec<(String, GroupNeed)>,
    kinds: u8,
}

impl Gangs {
    /// The gangs a cycle would see for `w`, under the `poolAffinity` tuning.
    pub fn of(w: &Workload, pool_affinity: bool) -> Self {
        let key = shape_key(w, pool_affinity);
        let (level, required) = match w.spec.topology {
            Some(t) => (Some(t.level()), t.is_required()),
            None => (None, false),
        };
        Self {
            needs: gang_needs(&key.groups, level, required)
                .into_iter()
                .map(|(f, n)| (f.to_owned(), n))
                .collect(),
            kinds: key.kinds,
        }
    }

    /// `(flavor, GPUs, pods)` of each gang; pods largest first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64, &[PodCount])> {
        self.needs
            .iter()
            .map(|(f, n)| (f.as_str(), n.gpus, n.pods.as_slice()))
    }

    /// No gang asks for a GPU.
    pub fn is_empty(&self) -> bool {
        self.needs.is_empty()
    }

    /// Whether the class may use pools of `kind` (the `poolAffinity` rule).
    pub fn may_use(&self, kind: PoolKind) -> bool {
        kind_bit(kind) & self.kinds != 0
    }

    /// A pool (index in `digest.pools`) per gang, in [`Gangs::iter`] order, where each fits
    /// now, or `None` when one fits nowhere in this member. Pools are tried in digest order
    /// and the first that fits wins: the caller, not this, is where a policy would choose.
    pub fn place(&self, digest: &CapacityDigest) -> Option<Vec<usize>> {
        self.needs
            .iter()
            .map(|(flavor, need)| {
                digest.pools.iter().position(|p| {
                    p.flavor == *flavor
                        && self.may_use(p.kind)
                        && PoolState::from_digest(p).best_fit(need).is_some()
                })
            })
            .collect()
    }

    /// Free GPUs of `flavor` in the member's pools the class may use: with [`Gangs::place`],
    /// tells fragmentation (enough in total, not in one place) from a plain shortage.
    pub fn free_gpus(&self, digest: &CapacityDigest, flavor: &str) -> u64 {
        digest
            .pools
            .iter()
            .filter(|p| p.flavor == flavor && self.may_use(p.kind))
            .map(|p| p.counts.free())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::digest::{DomainDigest, GpuCounts, PoolDigest};
    use tideway_api::{PodSet, TopologyLevel, TopologyRequirement, WorkloadClass, WorkloadSpec};

    use super::*;

    fn digest(hist: &[u32], kind: PoolKind) -> CapacityDigest {
        let counts = GpuCounts {
            total: 8 * hist.iter().sum::<u32>(),
            allocated: 0,
            unhealthy: 0,
            cordoned: 0,
            free_histogram: hist.to_vec(),
        };
        CapacityDigest {
            pools: vec![PoolDigest {
                pool: "training".into(),
                kind,
                flavor: "P100".into(),
                domains: vec![DomainDigest {
                    level: TopologyLevel::Rack,
                    name: "r".into(),
                    zone: None,
                    counts: counts.clone(),
                }],
                counts,
            }],
            cluster: "c".into(),
            generated_at: chrono::DateTime::UNIX_EPOCH,
        }
    }

    fn gangs(pods: &[(u32, u32)], topology: Option<TopologyRequirement>) -> Gangs {
        let sets = pods
            .iter()
            .enumerate()
            .map(|(i, (c, g))| PodSet::new(format!("w{i}"), *c, *g, "P100"))
            .collect();
        let mut spec = WorkloadSpec::new("q", WorkloadClass::Training, sets);
        spec.topology = topology;
        Gangs::of(&Workload::new("w", spec), true)
    }

    #[test]
    fn whole_gangs_and_fragmentation() {
        // two nodes with 4 free each: 8 GPUs free, but no whole node
        let d = digest(&[0, 0, 0, 0, 2, 0, 0, 0, 0], PoolKind::Training);
        assert_eq!(gangs(&[(2, 4)], None).place(&d), Some(vec![0]));
        assert_eq!(gangs(&[(1, 8)], None).place(&d), None);
        assert_eq!(gangs(&[(1, 8), (1, 4)], None).place(&d), None);
        let node = Some(TopologyRequirement::Required(TopologyLevel::Node));
        assert_eq!(gangs(&[(1, 6)], node).place(&d), None);
        let rack = Some(TopologyRequirement::Required(TopologyLevel::Rack));
        assert_eq!(gangs(&[(2, 4)], rack).place(&d), Some(vec![0]));
        let g = gangs(&[(1, 4), (1, 8)], None);
        assert_eq!(g.free_gpus(&d, "P100"), 8);
        assert_eq!(
            g.iter()
                .map(|(f, n, p)| (f, n, p.len()))
                .collect::<Vec<_>>(),
            [("P100", 12, 2)],
            "one gang per flavor"
        );
        assert_eq!(g.iter().next().map(|(_, _, p)| p[0].gpus_per_pod), Some(8));
    }

    #[test]
    fn training_stays_off_inference_pools() {
        let d = digest(&[0, 0, 0, 0, 0, 0, 0, 0, 2], PoolKind::Inference);
        let g = gangs(&[(1, 1)], None);
        assert!(!g.may_use(PoolKind::Inference));
        assert_eq!(g.place(&d), None);
        assert_eq!(g.free_gpus(&d, "P100"), 0);
    }
}
