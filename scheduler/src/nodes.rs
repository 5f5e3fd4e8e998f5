//! Whole nodes: which capacity a set of victims (or finishing work) gives back, node by node.
//!
//! A digest says how many nodes have how many free GPUs, not which node a pod is on. Without
//! more, returned GPUs can only be modelled as separate small nodes (eight 1-GPU pods freed
//! on one 8-GPU node look like eight 1-GPU nodes), which never shows room for a gang of
//! whole nodes: a guarantee borrowed by small jobs never came back in a usable shape. Members
//! therefore report the nodes each running workload occupies (opaque ids, `status.nodes`),
//! and GPUs freed on the same node are returned as one node. It stays conservative: the
//! node's GPUs that were already free are counted apart, as the digest counts them.

use tideway_api::NodeGpus;

use super::capacity::PoolState;
use super::cycle::{Cycle, RunInfo};
use super::hash::DetMap;
use super::input::{PodCount, RunningWorkload};

/// The nodes of a running workload placed in ONE pool (and domain), located there; empty
/// when the member did not report them or the workload spans pools (the per-pod model is
/// used then).
pub fn located<'a>(
    pods: &[(usize, Option<usize>, PodCount)],
    r: &'a RunningWorkload,
) -> Vec<(usize, Option<usize>, &'a str, u32)> {
    let nodes: &[NodeGpus] = r.workload.status.as_ref().map_or(&[], |s| &s.nodes);
    let Some(&(pi, d, _)) = pods.first() else {
        return Vec::new();
    };
    if nodes.is_empty() || pods.iter().any(|(p, dd, _)| (*p, *dd) != (pi, d)) {
        return Vec::new();
    }
    // The report must account for the pods' GPUs, else it is stale or partial.
    let reported: u64 = nodes.iter().map(|n| u64::from(n.gpus)).sum();
    let placed: u64 = pods
        .iter()
        .map(|(_, _, pc)| u64::from(pc.gpus_per_pod) * u64::from(pc.count))
        .sum();
    if reported != placed {
        return Vec::new();
    }
    nodes
        .iter()
        .map(|n| (pi, d, n.node.as_str(), n.gpus))
        .collect()
}

impl<'a> Cycle<'a> {
    /// Counts the GPUs running work reports per node, and which clusters report every
    /// running workload's nodes.
    pub(super) fn load_node_use(&mut self) {
        for (ci, on) in self.on_cluster.iter().enumerate() {
            for &ri in on {
                let r = &self.running[ri as usize];
                if r.nodes.is_empty() {
                    self.nodes_known[ci] = false;
                }
                for &(_, _, node, gpus) in &r.nodes {
                    let e = self.node_used.entry((ci, node)).or_insert(0);
                    *e = e.saturating_add(gpus);
                }
            }
        }
    }

    /// Returns the GPUs of `victims` to a copy of their cluster's pools: node by node where
    /// the nodes are known, pod by pod otherwise. While defragmentation plans
    /// (`join_holes`), and where every running workload of the cluster reported its nodes,
    /// a node's other free GPUs are known too (its size less what runs there), and the
    /// returned GPUs join them: emptying a node that had holes gives a whole node, not a
    /// node the size of its victims beside the holes. The other planners keep the
    /// conservative model: with holes joined, reclaim on the contended Philly replay found
    /// more plans and lost 6,723 GPU-hours of work against 3,805 (docs/simulator.md).
    pub fn return_into(&self, pools: &mut [PoolState], victims: &[u32]) {
        self.return_victims(pools, victims, self.join_holes);
    }

    /// [`Self::return_into`], joining the holes when `join` and the cluster's nodes are known.
    pub fn return_victims(&self, pools: &mut [PoolState], victims: &[u32], join: bool) {
        let mut by_node: DetMap<(usize, Option<usize>, &str), u32> = DetMap::default();
        let mut order: Vec<(usize, Option<usize>, &str)> = Vec::new();
        let mut cluster = None;
        for &ri in victims {
            cluster = cluster.or(self.running[ri as usize].cluster);
            let r = &self.running[ri as usize];
            if r.nodes.is_empty() {
                for (pi, d, pc) in &r.pods {
                    if let Some(pool) = pools.get_mut(*pi) {
                        pool.add_free_nodes(*d, pc.gpus_per_pod, pc.count);
                    }
                }
                continue;
            }
            for &(pi, d, node, gpus) in &r.nodes {
                let e = by_node.entry((pi, d, node)).or_insert_with(|| {
                    order.push((pi, d, node));
                    0
                });
                *e = e.saturating_add(gpus);
            }
        }
        let known =
            cluster.filter(|&ci| join && self.nodes_known.get(ci).copied().unwrap_or(false));
        for key in order {
            let gpus = by_node.get(&key).copied().unwrap_or(0);
            let Some(pool) = pools.get_mut(key.0) else {
                continue;
            };
            let joined = known.is_some_and(|ci| {
                let used = self.node_used.get(&(ci, key.2)).copied().unwrap_or(0);
                used >= gpus
                    && pool.node_gpus >= used
                    && pool.join_free(key.1, pool.node_gpus - used, gpus)
            });
            if !joined {
                pool.add_free_nodes(key.1, gpus, 1);
            }
        }
    }

    /// `order` (victims, cheapest first) regrouped so that the victims sharing a node come
    /// together, nodes cheapest to empty first: evicting them frees whole nodes, where the
    /// cheapest-first order frees a little on every node. Victims without known nodes keep
    /// their place after the grouped ones.
    pub fn node_order(&self, order: &[u32]) -> Vec<u32> {
        let running: &[RunInfo<'a>] = &self.running;
        // Per node: (cautious victims, worst tier, victims, work lost), and its victims.
        let mut nodes: Vec<(&str, Vec<u32>)> = Vec::new();
        let mut at: DetMap<&str, usize> = DetMap::default();
        let mut unknown = Vec::new();
        for &ri in order {
            let r = &running[ri as usize];
            if r.nodes.is_empty() {
                unknown.push(ri);
                continue;
            }
            for &(_, _, node, _) in &r.nodes {
                let i = *at.entry(node).or_insert_with(|| {
                    nodes.push((node, Vec::new()));
                    nodes.len() - 1
                });
                nodes[i].1.push(ri);
            }
        }
        let cost = |victims: &[u32]| {
            let mut c = (0u32, super::decision::VictimTier::NotStarted, 0usize, 0u64);
            for &ri in victims {
                let r = &running[ri as usize];
                if r.preemptibility == tideway_api::Preemptibility::Cautious {
                    c.0 += 1;
                }
                c.1 = c.1.max(r.tier);
                c.2 += 1;
                let gpus = r.gpus.iter().fold(0u64, |a, (_, n)| a.saturating_add(*n));
                c.3 = c.3.saturating_add(r.work_lost_seconds.saturating_mul(gpus));
            }
            c
        };
        let by_loss = self.tuning.nodes_by_work_lost;
        let mut keyed: Vec<_> = nodes
            .into_iter()
            .map(|(node, victims)| {
                let (cautious, tier, count, lost) = cost(&victims);
                let key = if by_loss {
                    (cautious, tier, lost, count as u64)
                } else {
                    (cautious, tier, count as u64, lost)
                };
                (key, node, victims)
            })
            .collect();
        keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
        let mut out = Vec::with_capacity(order.len());
        let mut seen: DetMap<u32, ()> = DetMap::default();
        for (_, _, victims) in keyed {
            for ri in victims {
                if seen.insert(ri, ()).is_none() {
                    out.push(ri);
                }
            }
        }
        out.extend(unknown);
        out
    }
}
