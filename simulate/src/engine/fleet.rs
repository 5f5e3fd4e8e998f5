//! The fleet: one `SimCluster` per member, its current digest (the view the scheduler
//! sees), and the GPU pools of all members under one global index for accounting.
//!
//! A member's digest is recomputed lazily: changes mark it dirty, and `refresh` recomputes
//! it only when someone is about to read it.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tideway_agent::sim::{PhaseChange, SimCluster, capacity_digest};
use tideway_api::agent::Assignment;
use tideway_api::digest::CapacityDigest;
use tideway_api::{NodeGpus, Workload};
use tideway_scheduler::{ClusterView, Gangs};

use super::super::config::Member;
use super::super::time::{Secs, to_utc};

struct MemberState {
    name: String,
    sim: SimCluster,
    dirty: bool,
    /// Global pool index of each node.
    node_pool: Vec<u32>,
    /// The digest of the empty cluster: what could ever fit.
    empty: CapacityDigest,
    /// Global pool index of each pool of the digest, in digest order.
    digest_pools: Vec<u32>,
}

struct PoolState {
    member: u32,
    name: String,
    flavor: String,
    total: u64,
    node_gpus: u32,
    allocated: u64,
    label: String,
}

pub(crate) struct Fleet {
    members: Vec<MemberState>,
    member_ids: HashMap<String, usize>,
    /// Each member's current digest; stale while the member is `dirty`.
    views: Vec<ClusterView>,
    pools: Vec<PoolState>,
}

impl Fleet {
    /// Builds the members from their inventories; returns the GPU flavors seen, in
    /// first-seen order.
    pub fn new(members: Vec<Member>) -> (Self, Vec<String>) {
        let mut flavors: Vec<String> = Vec::new();
        let mut pools: Vec<PoolState> = Vec::new();
        let mut states = Vec::new();
        let mut views = Vec::new();
        for (mi, m) in members.into_iter().enumerate() {
            let sim = SimCluster::new(&m.inventory);
            let digest = capacity_digest(&sim, to_utc(0));
            let mut digest_pools = Vec::new();
            for p in &digest.pools {
                let node_gpus = sim
                    .nodes()
                    .iter()
                    .filter(|n| n.pool == p.pool && n.model == p.flavor)
                    .map(|n| n.gpus)
                    .max()
                    .unwrap_or(0);
                if !flavors.contains(&p.flavor) {
                    flavors.push(p.flavor.clone());
                }
                digest_pools.push(pools.len() as u32);
                pools.push(PoolState {
                    member: mi as u32,
                    name: p.pool.clone(),
                    flavor: p.flavor.clone(),
                    total: u64::from(p.counts.total),
                    node_gpus,
                    allocated: 0,
                    label: format!("{}/{}", m.name, p.pool),
                });
            }
            let node_pool = sim
                .nodes()
                .iter()
                .map(|n| {
                    digest
                        .pools
                        .iter()
                        .position(|p| p.pool == n.pool && p.flavor == n.model)
                        .map_or(u32::MAX, |i| digest_pools[i])
                })
                .collect();
            views.push(ClusterView {
                name: m.name.clone(),
                region: m.region.clone(),
                ready: true,
                digest: digest.clone(),
                declared_levels: None,
            });
            states.push(MemberState {
                name: m.name.clone(),
                sim,
                dirty: false,
                node_pool,
                empty: digest,
                digest_pools,
            });
        }
        // Labels must be unique: add the flavor where a pool name repeats in a cluster.
        let labels: Vec<String> = pools.iter().map(|p| p.label.clone()).collect();
        for (i, p) in pools.iter_mut().enumerate() {
            if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
                p.label = format!("{}/{}", p.label, p.flavor);
            }
        }
        let member_ids = views
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.clone(), i))
            .collect();
        let fleet = Self {
            members: states,
            member_ids,
            views,
            pools,
        };
        (fleet, flavors)
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn name(&self, c: usize) -> &str {
        &self.members[c].name
    }

    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    pub fn member_id(&self, name: &str) -> Option<usize> {
        self.member_ids.get(name).copied()
    }

    /// The GPU models of the fleet, sorted.
    pub fn flavor_set(&self) -> BTreeSet<&str> {
        self.pools.iter().map(|p| p.flavor.as_str()).collect()
    }

    /// Recomputes a member's digest if it changed since the last one.
    pub fn refresh(&mut self, c: usize, now: Secs) {
        if self.members[c].dirty {
            self.views[c].digest = capacity_digest(&self.members[c].sim, to_utc(now));
            self.members[c].dirty = false;
        }
    }

    pub fn refresh_all(&mut self, now: Secs) {
        for c in 0..self.members.len() {
            self.refresh(c, now);
        }
    }

    /// Member `c`'s digest as of its last refresh.
    pub fn digest(&self, c: usize) -> &CapacityDigest {
        &self.views[c].digest
    }

    /// Lends the views to the scheduler input (moved, not cloned); `put_views` returns them.
    /// The members' views (empty while lent to a cycle).
    pub fn views(&self) -> &[ClusterView] {
        &self.views
    }

    pub fn take_views(&mut self) -> Vec<ClusterView> {
        std::mem::take(&mut self.views)
    }

    pub fn put_views(&mut self, views: Vec<ClusterView>) {
        self.views = views;
    }

    pub fn mark_dirty(&mut self, c: usize) {
        self.members[c].dirty = true;
    }

    /// The workload's placement constraint (clusters, regions) allows member `c`.
    pub fn allows(&self, w: &Workload, c: usize) -> bool {
        match &w.spec.placement {
            None => true,
            Some(p) => {
                (p.clusters.is_empty() || p.clusters.iter().any(|n| *n == self.views[c].name))
                    && (p.regions.is_empty()
                        || p.regions.iter().any(|r| *r == self.views[c].region))
            }
        }
    }

    /// Some member the workload may run on could hold its gangs when empty.
    pub fn could_ever_fit(&self, w: &Workload, gangs: &Gangs) -> bool {
        self.members
            .iter()
            .enumerate()
            .any(|(c, m)| self.allows(w, c) && gangs.place(&m.empty).is_some())
    }

    /// Advances member `c` to `now`: what started, finished or was evicted.
    pub fn tick(&mut self, c: usize, now: Secs) -> Vec<PhaseChange> {
        self.members[c].sim.tick(to_utc(now))
    }

    pub fn ensure(&mut self, c: usize, assignment: &Assignment, now: Secs) -> Result<(), String> {
        self.members[c]
            .sim
            .ensure(assignment, to_utc(now))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    pub fn remove(&mut self, c: usize, uid: &str) {
        self.members[c].sim.remove(uid);
    }

    pub fn preempt(&mut self, c: usize, uid: &str, grace: u64, now: Secs) -> Vec<PhaseChange> {
        self.members[c]
            .sim
            .preempt(uid, Duration::from_secs(grace), to_utc(now))
    }

    /// The nodes a placed workload occupies, as a live member reports them in
    /// `status.nodes` (the core returns a victim's GPUs node by node with them).
    pub fn nodes_of(&self, c: usize, uid: &str, attempt: u32) -> Vec<NodeGpus> {
        let m = &self.members[c];
        m.sim
            .workload(uid, attempt)
            .map(|w| w.status(m.sim.nodes()).nodes)
            .unwrap_or_default()
    }

    /// Allocates the GPUs a placed workload holds, per global pool, and returns them.
    pub fn hold(&mut self, c: usize, uid: &str, attempt: u32) -> Vec<(u32, u64)> {
        let mut held: Vec<(u32, u64)> = Vec::new();
        let m = &self.members[c];
        if let Some(w) = m.sim.workload(uid, attempt) {
            for (&node, &gpus) in &w.placement {
                let p = m.node_pool[node];
                match held.iter_mut().find(|(hp, _)| *hp == p) {
                    Some(h) => h.1 += u64::from(gpus),
                    None => held.push((p, u64::from(gpus))),
                }
            }
        }
        for &(p, g) in &held {
            if let Some(pool) = self.pools.get_mut(p as usize) {
                pool.allocated += g;
            }
        }
        held
    }

    /// Frees what `hold` allocated; returns the GPUs freed.
    pub fn release(&mut self, held: Vec<(u32, u64)>) -> u64 {
        let mut gpus = 0;
        for (p, g) in held {
            if let Some(pool) = self.pools.get_mut(p as usize) {
                pool.allocated = pool.allocated.saturating_sub(g);
            }
            gpus += g;
        }
        gpus
    }

    /// Free GPUs per member as of the last refresh, in member order.
    pub fn free_per_member(&self) -> impl Iterator<Item = u64> + '_ {
        self.views
            .iter()
            .map(|v| v.digest.pools.iter().map(|p| p.counts.free()).sum())
    }

    /// The most free GPUs on any one node of the fleet, as of the last refresh: no pod
    /// larger than this can start now.
    pub fn largest_node_free(&self) -> u32 {
        self.views
            .iter()
            .flat_map(|v| &v.digest.pools)
            .map(|p| p.counts.largest_node_free())
            .max()
            .unwrap_or(0)
    }

    /// Per member, the most free GPUs on any one of its nodes, as of the last refresh.
    pub fn node_free_per_member(&self) -> impl Iterator<Item = u32> + '_ {
        self.views.iter().map(|v| {
            v.digest
                .pools
                .iter()
                .map(|p| p.counts.largest_node_free())
                .max()
                .unwrap_or(0)
        })
    }

    /// GPUs per node of the smallest-node pool: the least a reservation's default size
    /// threshold (one node of the gang's flavor) can be.
    pub fn smallest_node_gpus(&self) -> u64 {
        self.pools
            .iter()
            .map(|p| u64::from(p.node_gpus))
            .filter(|&g| g > 0)
            .min()
            .unwrap_or(0)
    }

    /// For every pool of every refreshed digest: (global pool, free GPUs, free GPUs that no
    /// whole node-sized pod could use).
    pub fn fragmentation(&self) -> Vec<(usize, u64, u64)> {
        let mut out = Vec::new();
        for (c, view) in self.views.iter().enumerate() {
            for (k, p) in view.digest.pools.iter().enumerate() {
                let gi = self.members[c].digest_pools.get(k).copied();
                let Some(gi) = gi.map(|g| g as usize) else {
                    continue;
                };
                let free = p.counts.free();
                let size = self.pools[gi].node_gpus.max(1);
                let usable = p.counts.pods_that_fit(size) * u64::from(size);
                out.push((gi, free, free.saturating_sub(usable)));
            }
        }
        out
    }

    /// The global pool of `flavor` on member `c`: the named one if it has the flavor, else
    /// the first of the flavor.
    pub fn pool_of(&self, c: usize, flavor: &str, name: Option<&str>) -> u32 {
        let pools = &self.members[c].digest_pools;
        let of_flavor = |&&p: &&u32| self.pools[p as usize].flavor == flavor;
        pools
            .iter()
            .filter(of_flavor)
            .find(|&&p| name.is_some_and(|n| self.pools[p as usize].name == n))
            .or_else(|| pools.iter().find(of_flavor))
            .copied()
            .unwrap_or(u32::MAX)
    }

    pub fn pool_count(&self) -> usize {
        self.pools.len()
    }

    /// GPUs allocated per global pool.
    pub fn allocated(&self) -> impl Iterator<Item = u64> + '_ {
        self.pools.iter().map(|p| p.allocated)
    }

    /// A pool's (member name, pool name, flavor, label, total GPUs).
    pub fn pool(&self, p: usize) -> Option<PoolInfo<'_>> {
        self.pools.get(p).map(|s| PoolInfo {
            cluster: self.name(s.member as usize),
            name: &s.name,
            flavor: &s.flavor,
            label: &s.label,
            total: s.total,
        })
    }
}

/// What the outputs say about a pool.
pub(crate) struct PoolInfo<'a> {
    pub cluster: &'a str,
    pub name: &'a str,
    pub flavor: &'a str,
    pub label: &'a str,
    pub total: u64,
}
