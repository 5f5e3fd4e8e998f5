//! The in-cycle copy of every member's capacity digest, which decisions consume as they are
//! made so that two decisions in one cycle never book the same GPUs.
//!
//! A digest gives, per pool, a histogram of free GPUs per node for the pool and for each rack
//! and zone. To take capacity exactly as pods would, each pool is turned into a tree whose
//! leaves partition its nodes (racks, or zones, or the whole pool, plus anonymous
//! "remainder" leaves for nodes the member did not place in a reported domain). Placing a pod
//! on a node with `k` free GPUs moves that node from bucket `k` to bucket `k - g` in its leaf
//! and in every ancestor, so every level stays exact.
//!
//! Which zone a rack is in comes from the rack's `zone` in the digest; a member that does not
//! say is understood from a `zone/rack` name, from there being one zone, or from a unique
//! zone whose histogram contains the rack's;
//! when none of these settles it the pool's racks are ignored (rack-level gangs are not
//! placed there this cycle), which can only under-admit, never double-book.

use tideway_api::digest::{GpuCounts, PoolDigest};
use tideway_api::{PoolKind, TopologyLevel};

use super::input::{DomainRef, PodCount};

/// `hist[k]` = schedulable nodes with exactly `k` free GPUs.
pub type Hist = Vec<u32>;

/// No node has more GPUs than this; bounds the histograms the scheduler itself grows.
const MAX_NODE_GPUS: usize = 1024;

pub use tideway_api::digest::{
    free_in as free_gpus, largest_free_in as largest_node, pods_that_fit_in as pods_that_fit,
};

/// Whether `pods` (sorted by GPUs per pod, largest first) fit in `hist`. Exact for one pod
/// size; for mixed sizes it runs the same best-fit-decreasing placement `take` would, so a
/// "yes" is always a placement that exists.
pub fn fits(hist: &[u32], pods: &[PodCount]) -> bool {
    match pods {
        [] => true,
        [one] => pods_that_fit(hist, one.gpus_per_pod) >= u64::from(one.count),
        _ => {
            let mut scratch = hist.to_vec();
            pods.iter()
                .all(|p| take_from(&mut scratch, *p, &mut |_, _, _| {}))
        }
    }
}

/// Best-fit: put `p` pods onto the nodes with the fewest free GPUs that still hold one,
/// calling `moved(k, new_k, nodes)` for each batch of nodes moved between buckets.
fn take_from(hist: &mut Hist, p: PodCount, moved: &mut dyn FnMut(usize, usize, u32)) -> bool {
    let g = p.gpus_per_pod as usize;
    let mut left = u64::from(p.count);
    if g == 0 {
        return true;
    }
    let mut k = g;
    while left > 0 {
        while k < hist.len() && hist[k] == 0 {
            k += 1;
        }
        if k >= hist.len() {
            return false;
        }
        let per = (k / g) as u64;
        let nodes = u64::from(hist[k]);
        let full = (left / per).min(nodes);
        if full > 0 {
            let new_k = k - per as usize * g;
            hist[k] -= full as u32;
            hist[new_k] += full as u32;
            moved(k, new_k, full as u32);
            left -= full * per;
        } else {
            // Fewer pods left than one node of this bucket holds.
            let new_k = k - left as usize * g;
            hist[k] -= 1;
            hist[new_k] += 1;
            moved(k, new_k, 1);
            left = 0;
        }
    }
    true
}

fn dominated(small: &[u32], big: &[u32]) -> bool {
    small
        .iter()
        .enumerate()
        .all(|(k, n)| *n <= big.get(k).copied().unwrap_or(0))
}

fn sub_clamped(big: &[u32], small: &[u32]) -> Hist {
    let mut out = big.to_vec();
    for (k, n) in small.iter().enumerate() {
        if let Some(o) = out.get_mut(k) {
            *o = o.saturating_sub(*n);
        }
    }
    out
}

fn add_into(acc: &mut Hist, h: &[u32]) {
    if acc.len() < h.len() {
        acc.resize(h.len(), 0);
    }
    for (k, n) in h.iter().enumerate() {
        acc[k] = acc[k].saturating_add(*n);
    }
}

/// A rack, a zone, or an anonymous remainder leaf (`level == None`).
#[derive(Debug, Clone)]
pub struct Domain {
    pub level: Option<TopologyLevel>,
    pub name: String,
    pub hist: Hist,
    /// The zone holding this rack or remainder, when known.
    pub parent: Option<usize>,
    /// Leaf domains under this one (itself when it is a leaf).
    pub leaves: Vec<usize>,
    /// Estimated GPUs per node, for "would it fit if the domain were empty" estimates.
    pub node_gpus: u32,
    pub nodes: u32,
}

impl Domain {
    pub fn reference(&self) -> Option<DomainRef> {
        self.level.map(|level| DomainRef {
            level,
            name: self.name.clone(),
        })
    }
}

#[derive(Debug, Clone)]
pub struct PoolState {
    pub name: String,
    pub kind: PoolKind,
    pub flavor: String,
    pub hist: Hist,
    /// All GPUs of the pool, allocated or not; normalises the bin-packing score.
    pub total: u64,
    pub node_gpus: u32,
    pub nodes: u32,
    pub domains: Vec<Domain>,
    pub leaves: Vec<usize>,
    pub racks: Vec<usize>,
    pub zones: Vec<usize>,
}

/// Where a gang of one flavor would go in a pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitChoice {
    /// A domain of the required (or preferred) level, or `None` for pool-wide or one node.
    pub domain: Option<usize>,
    /// Free GPUs where the gang goes (the domain, or the pool).
    pub free_there: u64,
}

/// A gang of one flavor: its pods (largest first) and topology.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupNeed {
    pub pods: Vec<PodCount>,
    pub gpus: u64,
    pub level: Option<TopologyLevel>,
    pub required: bool,
}

impl GroupNeed {
    /// The largest pod, which decides "largest fit" numbers in explanations.
    pub fn pod_gpus(&self) -> u32 {
        self.pods.first().map_or(0, |p| p.gpus_per_pod)
    }
}

fn estimate_node_gpus(counts: &GpuCounts, hist: &[u32]) -> (u32, u32) {
    let nodes: u64 = hist.iter().map(|n| u64::from(*n)).sum();
    let schedulable = u64::from(counts.total)
        .saturating_sub(u64::from(counts.unhealthy))
        .saturating_sub(u64::from(counts.cordoned));
    let avg = schedulable.checked_div(nodes).unwrap_or(0);
    let per = avg
        .max(u64::from(largest_node(hist)))
        .min(u64::from(u32::MAX));
    (per as u32, nodes.min(u64::from(u32::MAX)) as u32)
}

impl PoolState {
    pub fn from_digest(d: &PoolDigest) -> Self {
        let hist = d.counts.free_histogram.clone();
        let (node_gpus, nodes) = estimate_node_gpus(&d.counts, &hist);
        let mut pool = Self {
            name: d.pool.clone(),
            kind: d.kind,
            flavor: d.flavor.clone(),
            hist,
            total: u64::from(d.counts.total),
            node_gpus,
            nodes,
            domains: Vec::new(),
            leaves: Vec::new(),
            racks: Vec::new(),
            zones: Vec::new(),
        };
        pool.build_tree(d);
        pool
    }

    fn push_domain(
        &mut self,
        level: Option<TopologyLevel>,
        name: &str,
        counts: Option<&GpuCounts>,
        hist: Hist,
    ) -> usize {
        let (node_gpus, nodes) = match counts {
            Some(c) => estimate_node_gpus(c, &hist),
            None => (self.node_gpus, hist.iter().sum()),
        };
        self.domains.push(Domain {
            level,
            name: name.to_owned(),
            hist,
            parent: None,
            leaves: Vec::new(),
            node_gpus,
            nodes,
        });
        self.domains.len() - 1
    }

    fn build_tree(&mut self, d: &PoolDigest) {
        let of_level = |l: TopologyLevel| -> Vec<_> {
            let mut seen = std::collections::BTreeSet::new();
            d.domains
                .iter()
                .filter(|x| x.level == l && seen.insert(x.name.as_str()))
                .collect()
        };
        let racks = of_level(TopologyLevel::Rack);
        let mut zones = of_level(TopologyLevel::Zone);
        // A level whose domains together hold more nodes than the pool is inconsistent.
        let sum = |ds: &[&tideway_api::digest::DomainDigest]| {
            let mut acc = Hist::new();
            for x in ds {
                add_into(&mut acc, &x.counts.free_histogram);
            }
            acc
        };
        if !dominated(&sum(&zones), &self.hist) {
            zones.clear();
        }
        let mut racks = racks;
        if !dominated(&sum(&racks), &self.hist) {
            racks.clear();
        }
        // Which zone holds each rack.
        let mut rack_zone: Vec<Option<usize>> = vec![None; racks.len()];
        if !zones.is_empty() && !racks.is_empty() {
            // The member says it (`zone` on each rack): nothing to infer.
            let declared: Option<Vec<usize>> = racks
                .iter()
                .map(|r| {
                    let z = r.zone.as_ref()?;
                    zones.iter().position(|x| &x.name == z)
                })
                .collect();
            let mapped = if declared.is_some() {
                declared
            } else if zones.len() == 1 {
                Some(vec![0; racks.len()])
            } else {
                let by_name: Option<Vec<usize>> = racks
                    .iter()
                    .map(|r| {
                        let prefix = r.name.split_once('/')?.0;
                        zones.iter().position(|z| z.name == prefix)
                    })
                    .collect();
                by_name.or_else(|| {
                    racks
                        .iter()
                        .map(|r| {
                            let mut c = zones.iter().enumerate().filter(|(_, z)| {
                                dominated(&r.counts.free_histogram, &z.counts.free_histogram)
                            });
                            match (c.next(), c.next()) {
                                (Some((i, _)), None) => Some(i),
                                _ => None,
                            }
                        })
                        .collect()
                })
            };
            // Racks of a zone must fit in it.
            let consistent = mapped.filter(|m| {
                zones.iter().enumerate().all(|(zi, z)| {
                    let mut acc = Hist::new();
                    for (ri, r) in racks.iter().enumerate() {
                        if m[ri] == zi {
                            add_into(&mut acc, &r.counts.free_histogram);
                        }
                    }
                    dominated(&acc, &z.counts.free_histogram)
                })
            });
            match consistent {
                Some(m) => rack_zone = m.into_iter().map(Some).collect(),
                None => racks.clear(),
            }
        }

        let zone_idx: Vec<usize> = zones
            .iter()
            .map(|z| {
                self.push_domain(
                    Some(TopologyLevel::Zone),
                    &z.name,
                    Some(&z.counts),
                    z.counts.free_histogram.clone(),
                )
            })
            .collect();
        self.zones = zone_idx.clone();
        let mut covered = Hist::new();
        if racks.is_empty() {
            for &zi in &zone_idx {
                self.domains[zi].leaves.push(zi);
                self.leaves.push(zi);
                add_into(&mut covered, &self.domains[zi].hist);
            }
        } else {
            let mut per_zone: Vec<Hist> = vec![Hist::new(); zone_idx.len()];
            for (ri, r) in racks.iter().enumerate() {
                let i = self.push_domain(
                    Some(TopologyLevel::Rack),
                    &r.name,
                    Some(&r.counts),
                    r.counts.free_histogram.clone(),
                );
                self.racks.push(i);
                self.leaves.push(i);
                self.domains[i].leaves.push(i);
                add_into(&mut covered, &r.counts.free_histogram);
                if let Some(z) = rack_zone[ri] {
                    let zi = zone_idx[z];
                    self.domains[i].parent = Some(zi);
                    self.domains[zi].leaves.push(i);
                    add_into(&mut per_zone[z], &r.counts.free_histogram);
                }
            }
            // Nodes of a zone in no reported rack.
            for (z, &zi) in zone_idx.iter().enumerate() {
                let rest = sub_clamped(&self.domains[zi].hist, &per_zone[z]);
                if rest.iter().any(|n| *n > 0) {
                    add_into(&mut covered, &rest);
                    let i = self.push_domain(None, "", None, rest);
                    self.domains[i].parent = Some(zi);
                    self.domains[i].leaves.push(i);
                    self.domains[zi].leaves.push(i);
                    self.leaves.push(i);
                }
            }
        }
        // Nodes of the pool in no reported domain (or all of them, when none is reported).
        let rest = sub_clamped(&self.hist, &covered);
        if rest.iter().any(|n| *n > 0) || self.leaves.is_empty() {
            let i = self.push_domain(None, "", None, rest);
            self.domains[i].leaves.push(i);
            self.leaves.push(i);
        }
    }

    pub fn supports(&self, level: TopologyLevel) -> bool {
        match level {
            TopologyLevel::Node => true,
            TopologyLevel::Rack => !self.racks.is_empty(),
            TopologyLevel::Zone => !self.zones.is_empty(),
        }
    }

    fn level_domains(&self, level: TopologyLevel) -> &[usize] {
        match level {
            TopologyLevel::Node => &[],
            TopologyLevel::Rack => &self.racks,
            TopologyLevel::Zone => &self.zones,
        }
    }

    pub fn free(&self) -> u64 {
        free_gpus(&self.hist)
    }

    /// The tightest place for the gang, or `None` when it does not fit.
    pub fn best_fit(&self, need: &GroupNeed) -> Option<FitChoice> {
        match need.level {
            Some(TopologyLevel::Node) if need.required || self.single_node_fits(need) => {
                self.single_node_fits(need).then(|| FitChoice {
                    domain: None,
                    free_there: u64::from(largest_node(&self.hist)),
                })
            }
            Some(level) if level != TopologyLevel::Node => {
                let best = self
                    .level_domains(level)
                    .iter()
                    .filter(|&&d| fits(&self.domains[d].hist, &need.pods))
                    .map(|&d| (free_gpus(&self.domains[d].hist), d))
                    .min();
                match best {
                    Some((free, d)) => Some(FitChoice {
                        domain: Some(d),
                        free_there: free,
                    }),
                    None if need.required => None,
                    None => self.pool_fit(need),
                }
            }
            _ => self.pool_fit(need),
        }
    }

    fn single_node_fits(&self, need: &GroupNeed) -> bool {
        u64::from(largest_node(&self.hist)) >= need.gpus
    }

    fn pool_fit(&self, need: &GroupNeed) -> Option<FitChoice> {
        fits(&self.hist, &need.pods).then(|| FitChoice {
            domain: None,
            free_there: self.free(),
        })
    }

    /// The largest gang of the need's pod size that fits where it must go, in GPUs; for
    /// explanations.
    pub fn largest_fit_gpus(&self, need: &GroupNeed) -> u64 {
        let g = need.pod_gpus();
        if g == 0 {
            return 0;
        }
        let pods = match need.level {
            Some(TopologyLevel::Node) if need.required => u64::from(largest_node(&self.hist) / g),
            Some(level) if need.required && level != TopologyLevel::Node => self
                .level_domains(level)
                .iter()
                .map(|&d| pods_that_fit(&self.domains[d].hist, g))
                .max()
                .unwrap_or(0),
            _ => pods_that_fit(&self.hist, g),
        };
        pods.saturating_mul(u64::from(g))
    }

    /// Whether the gang would fit if every node of some domain were empty: the test for
    /// "worth waiting (and reserving) for".
    pub fn fits_when_empty(&self, need: &GroupNeed) -> bool {
        // Each pod size on nodes of its own (conservative for mixed sizes); no histogram is
        // built, so an absurd node size in a digest costs nothing.
        let empty_fit = |nodes: u32, node_gpus: u32| -> bool {
            let mut used = 0u64;
            for p in &need.pods {
                if p.gpus_per_pod == 0 {
                    continue;
                }
                let per = u64::from(node_gpus / p.gpus_per_pod);
                if per == 0 {
                    return false;
                }
                used += u64::from(p.count).div_ceil(per);
            }
            used <= u64::from(nodes)
        };
        match need.level {
            Some(TopologyLevel::Node) if need.required => {
                u64::from(self.node_gpus) >= need.gpus && self.nodes > 0
            }
            Some(level) if need.required && level != TopologyLevel::Node => self
                .level_domains(level)
                .iter()
                .any(|&d| empty_fit(self.domains[d].nodes, self.domains[d].node_gpus)),
            _ => empty_fit(self.nodes, self.node_gpus),
        }
    }

    /// Take the gang's capacity where `choice` says; returns the narrowest reported domain
    /// holding all its pods. `None` when it no longer fits (the caller checked, so only an
    /// inconsistent digest gets here; nothing is taken then).
    pub fn take(&mut self, need: &GroupNeed, choice: FitChoice) -> Option<Option<DomainRef>> {
        // Every step first runs on a scratch histogram, so a failure leaves the pool as it
        // was; only a digest whose leaves disagree with their ancestors could fail midway,
        // and then less is free than reported, which is the safe direction.
        let used = match (need.level, choice.domain) {
            (_, Some(d)) => self.take_in(d, need),
            (Some(TopologyLevel::Node), None) if need.required || self.single_node_fits(need) => {
                self.take_one_node(need.gpus)
            }
            _ => self.take_pool(need),
        };
        used.map(|leaves| self.common_domain(&leaves))
    }

    /// Takes the capacity of a workload the digest does not show yet, as far as it goes.
    pub fn take_unaccounted(&mut self, domain: Option<&DomainRef>, pods: &[PodCount]) {
        let d = domain.and_then(|r| self.find_domain(r));
        for p in pods {
            let all = GroupNeed {
                pods: vec![*p],
                gpus: u64::from(p.gpus_per_pod) * u64::from(p.count),
                level: None,
                required: false,
            };
            let at_once = match d {
                Some(d) => self.take_in(d, &all).is_some() || self.take_pool(&all).is_some(),
                None => self.take_pool(&all).is_some(),
            };
            if at_once {
                continue;
            }
            let mut left = *p;
            // Place what fits in the recorded domain, then anywhere, pod by pod; the rest is
            // not there to take (the digest already shows less than it should).
            while left.count > 0 {
                let one = PodCount {
                    gpus_per_pod: left.gpus_per_pod,
                    count: 1,
                };
                let need = GroupNeed {
                    pods: vec![one],
                    gpus: u64::from(one.gpus_per_pod),
                    level: None,
                    required: false,
                };
                let ok = match d {
                    Some(d) => self.take_in(d, &need).is_some() || self.take_pool(&need).is_some(),
                    None => self.take_pool(&need).is_some(),
                };
                if !ok {
                    break;
                }
                left.count -= 1;
            }
        }
    }

    pub fn find_domain(&self, r: &DomainRef) -> Option<usize> {
        self.level_domains(r.level)
            .iter()
            .copied()
            .find(|&d| self.domains[d].name == r.name)
    }

    fn take_in(&mut self, d: usize, need: &GroupNeed) -> Option<Vec<usize>> {
        let mut used = Vec::new();
        for p in &need.pods {
            let mut scratch = self.domains[d].hist.clone();
            let mut moves = Vec::new();
            if !take_from(&mut scratch, *p, &mut |k, nk, n| moves.push((k, nk, n))) {
                return None;
            }
            for (k, nk, n) in moves {
                self.move_nodes_under(d, k, nk, n, &mut used)?;
            }
        }
        Some(used)
    }

    fn take_pool(&mut self, need: &GroupNeed) -> Option<Vec<usize>> {
        let mut used = Vec::new();
        for p in &need.pods {
            let mut scratch = self.hist.clone();
            let mut moves = Vec::new();
            if !take_from(&mut scratch, *p, &mut |k, nk, n| moves.push((k, nk, n))) {
                return None;
            }
            for (k, nk, n) in moves {
                self.move_nodes_anywhere(k, nk, n, &mut used)?;
            }
        }
        Some(used)
    }

    fn take_one_node(&mut self, gpus: u64) -> Option<Vec<usize>> {
        let k = (gpus as usize..self.hist.len()).find(|&k| self.hist[k] > 0)?;
        let mut used = Vec::new();
        self.move_nodes_anywhere(k, k - gpus as usize, 1, &mut used)?;
        Some(used)
    }

    /// Moves `n` nodes from bucket `k` to `nk`, taking them from leaves under `d`.
    fn move_nodes_under(
        &mut self,
        d: usize,
        k: usize,
        nk: usize,
        mut n: u32,
        used: &mut Vec<usize>,
    ) -> Option<()> {
        for li in 0..self.domains[d].leaves.len() {
            if n == 0 {
                break;
            }
            let leaf = self.domains[d].leaves[li];
            let have = self.domains[leaf].hist.get(k).copied().unwrap_or(0);
            let t = have.min(n);
            if t > 0 {
                self.move_in_leaf(leaf, k, nk, t);
                used.push(leaf);
                n -= t;
            }
        }
        (n == 0).then_some(())
    }

    fn move_nodes_anywhere(
        &mut self,
        k: usize,
        nk: usize,
        mut n: u32,
        used: &mut Vec<usize>,
    ) -> Option<()> {
        for li in 0..self.leaves.len() {
            if n == 0 {
                break;
            }
            let leaf = self.leaves[li];
            let have = self.domains[leaf].hist.get(k).copied().unwrap_or(0);
            let t = have.min(n);
            if t > 0 {
                self.move_in_leaf(leaf, k, nk, t);
                used.push(leaf);
                n -= t;
            }
        }
        (n == 0).then_some(())
    }

    /// The one place buckets change: a leaf, its zone and the pool move together.
    fn move_in_leaf(&mut self, leaf: usize, k: usize, nk: usize, n: u32) {
        fn mv(h: &mut Hist, k: usize, nk: usize, n: u32) {
            if h.len() <= k.max(nk) {
                h.resize(k.max(nk) + 1, 0);
            }
            h[k] = h[k].saturating_sub(n);
            h[nk] = h[nk].saturating_add(n);
        }
        mv(&mut self.domains[leaf].hist, k, nk, n);
        if let Some(z) = self.domains[leaf].parent {
            mv(&mut self.domains[z].hist, k, nk, n);
        }
        mv(&mut self.hist, k, nk, n);
    }

    /// Adds `n` nodes with `free` GPUs each (capacity a preemption or a finishing workload
    /// returns) to `domain` and its ancestors, or to the pool only when the domain is
    /// unknown. Used on scratch copies: it is conservative, since returned GPUs may in truth
    /// join a node's other free GPUs, which only helps. Pods bigger than any node this model
    /// can hold are not returned at all (an unvalidated size must not allocate gigabytes).
    pub fn add_free_nodes(&mut self, domain: Option<usize>, free: u32, n: u32) {
        let k = free as usize;
        if n == 0 || k > MAX_NODE_GPUS.max(self.hist.len()) {
            return;
        }
        let add = |h: &mut Hist| {
            if h.len() <= k {
                h.resize(k + 1, 0);
            }
            h[k] = h[k].saturating_add(n);
        };
        if let Some(d) = domain {
            add(&mut self.domains[d].hist);
            if let Some(z) = self.domains[d].parent {
                add(&mut self.domains[z].hist);
            }
        }
        add(&mut self.hist);
    }

    /// Turns one node with `free` GPUs free, in `domain` (or anywhere in the pool), into a
    /// node with `free + add`: capacity returned to a node whose other free GPUs are known
    /// (see `nodes`). False, with nothing changed, when the model holds no such node there.
    pub fn join_free(&mut self, domain: Option<usize>, free: u32, add: u32) -> bool {
        let (k, nk) = (free as usize, free as usize + add as usize);
        if add == 0 || nk > MAX_NODE_GPUS.max(self.hist.len()) {
            return false;
        }
        let mut used = Vec::new();
        match domain {
            Some(d) => self.move_nodes_under(d, k, nk, 1, &mut used).is_some(),
            None => self.move_nodes_anywhere(k, nk, 1, &mut used).is_some(),
        }
    }

    fn common_domain(&self, leaves: &[usize]) -> Option<DomainRef> {
        let first = *leaves.first()?;
        if leaves.iter().all(|l| *l == first) && self.domains[first].level.is_some() {
            return self.domains[first].reference();
        }
        let zone = self.domains[first].parent?;
        leaves
            .iter()
            .all(|l| self.domains[*l].parent == Some(zone))
            .then(|| self.domains[zone].reference())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::digest::DomainDigest;

    use super::*;

    fn counts(hist: &[u32]) -> GpuCounts {
        GpuCounts {
            total: 8 * hist.iter().sum::<u32>(),
            allocated: 0,
            unhealthy: 0,
            cordoned: 0,
            free_histogram: hist.to_vec(),
        }
    }

    fn dom(level: TopologyLevel, name: &str, hist: &[u32]) -> DomainDigest {
        DomainDigest {
            level,
            name: name.into(),
            zone: None,
            counts: counts(hist),
        }
    }

    fn pool(domains: Vec<DomainDigest>, hist: &[u32]) -> PoolDigest {
        PoolDigest {
            pool: "p".into(),
            kind: PoolKind::Training,
            flavor: "H100".into(),
            counts: counts(hist),
            domains,
        }
    }

    fn need(count: u32, g: u32, level: Option<TopologyLevel>) -> GroupNeed {
        GroupNeed {
            pods: vec![PodCount {
                gpus_per_pod: g,
                count,
            }],
            gpus: u64::from(count * g),
            level,
            required: true,
        }
    }

    #[test]
    fn racks_map_to_zones_by_name_and_stay_consistent() {
        let d = pool(
            vec![
                dom(TopologyLevel::Rack, "z1/a", &[0, 0, 0, 0, 0, 0, 0, 0, 2]),
                dom(TopologyLevel::Rack, "z2/b", &[0, 0, 0, 0, 0, 0, 0, 0, 2]),
                dom(TopologyLevel::Zone, "z1", &[0, 0, 0, 0, 0, 0, 0, 0, 2]),
                dom(TopologyLevel::Zone, "z2", &[0, 0, 0, 0, 0, 0, 0, 0, 3]),
            ],
            &[0, 0, 0, 0, 0, 0, 0, 0, 5],
        );
        let mut p = PoolState::from_digest(&d);
        assert_eq!(p.racks.len(), 2);
        // z2 has a node in no rack: a remainder leaf.
        assert_eq!(p.leaves.len(), 3);
        let n = need(3, 8, Some(TopologyLevel::Zone));
        let c = p.best_fit(&n).unwrap();
        assert_eq!(p.domains[c.domain.unwrap()].name, "z2");
        assert_eq!(
            p.take(&n, c).unwrap(),
            Some(DomainRef {
                level: TopologyLevel::Zone,
                name: "z2".into()
            })
        );
        assert_eq!(p.free(), 16);
        // Rack z2/b is now full; only z1/a can take a 2-node rack gang.
        let r = need(2, 8, Some(TopologyLevel::Rack));
        let c = p.best_fit(&r).unwrap();
        assert_eq!(p.domains[c.domain.unwrap()].name, "z1/a");
        p.take(&r, c).unwrap();
        assert!(p.best_fit(&need(1, 1, None)).is_none());
        assert_eq!(p.free(), 0);
    }

    #[test]
    fn ambiguous_racks_are_dropped_not_guessed() {
        let d = pool(
            vec![
                dom(TopologyLevel::Rack, "a", &[0, 0, 0, 0, 0, 0, 0, 0, 1]),
                dom(TopologyLevel::Zone, "z1", &[0, 0, 0, 0, 0, 0, 0, 0, 1]),
                dom(TopologyLevel::Zone, "z2", &[0, 0, 0, 0, 0, 0, 0, 0, 1]),
            ],
            &[0, 0, 0, 0, 0, 0, 0, 0, 2],
        );
        let p = PoolState::from_digest(&d);
        assert!(!p.supports(TopologyLevel::Rack));
        assert!(p.supports(TopologyLevel::Zone));
    }

    /// Returned GPUs join a node's known holes, in its rack and zone too; where the model
    /// has no node with that many free, nothing changes and the caller counts them apart.
    #[test]
    fn returned_gpus_join_a_node_with_holes() {
        let d = pool(
            vec![
                dom(TopologyLevel::Rack, "z1/a", &[0, 0, 0, 0, 2]),
                dom(TopologyLevel::Zone, "z1", &[0, 0, 0, 0, 2]),
            ],
            &[0, 0, 0, 0, 2],
        );
        let mut p = PoolState::from_digest(&d);
        let rack = p.racks[0];
        assert!(p.best_fit(&need(1, 8, None)).is_none());
        assert!(p.join_free(Some(rack), 4, 4));
        assert_eq!(p.hist, vec![0, 0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(p.domains[rack].hist, p.hist);
        assert!(p.best_fit(&need(1, 8, Some(TopologyLevel::Rack))).is_some());
        // No node with 3 free: refused, the pool unchanged.
        let before = p.hist.clone();
        assert!(!p.join_free(None, 3, 1));
        assert_eq!(p.hist, before);
    }

    #[test]
    fn best_fit_packs_small_pods_onto_fullest_nodes() {
        let d = pool(vec![], &[0, 1, 0, 0, 0, 0, 0, 0, 1]);
        let mut p = PoolState::from_digest(&d);
        let n = need(1, 1, None);
        let c = p.best_fit(&n).unwrap();
        p.take(&n, c).unwrap();
        // The 1-free node was used, the 8-free node kept whole.
        assert_eq!(p.hist, vec![1, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert!(p.best_fit(&need(1, 8, None)).is_some());
    }

    #[test]
    fn mixed_pods_fit_check_matches_take() {
        let hist = [0, 0, 0, 0, 1, 0, 0, 0, 1];
        let pods = [
            PodCount {
                gpus_per_pod: 8,
                count: 1,
            },
            PodCount {
                gpus_per_pod: 2,
                count: 2,
            },
        ];
        assert!(fits(&hist, &pods));
        let more = [
            pods[0],
            PodCount {
                gpus_per_pod: 2,
                count: 3,
            },
        ];
        assert!(!fits(&hist, &more));
    }
}
