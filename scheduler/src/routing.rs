//! Routing: which member cluster takes a workload.
//!
//! Filter first (static per shape: placement regions and clusters, a pool of the flavor the
//! class may use, the required topology level reported, the member ready), then fit the
//! whole gang of each flavor in one domain of the required level, then score. The default
//! score bin-packs (fuller pools, tighter domains) so whole nodes and racks stay free for big
//! gangs; inference replicas with `placement.spread` instead prefer clusters and regions with
//! fewer replicas of their group. Equal scores fall to a seeded per-cluster key.
//!
//! Cost: fit answers are cached per (shape, cluster) with the cluster's capacity version, so
//! an admission recomputes only the cluster it changed; a shape that fits nowhere is marked
//! dead for the rest of the cycle (capacity only shrinks within a cycle), so the many
//! workloads behind it are answered in O(1).

use std::collections::BTreeMap;
use std::sync::Arc;

use tideway_api::{PendingReason, TopologyLevel};

use super::capacity::{FitChoice, GroupNeed, PoolState};
use super::cycle::{ClusterFit, Cycle, HoldKind, Shape, kind_bit};
use super::explain::{ClusterVerdict, Explanation, Unblock, Verdict};

/// Per-need fit of a shape in a set of pools; `None` when some need fits in none.
pub fn fit_in_pools(pools: &[PoolState], shape: &Shape, flavors: &[String]) -> Option<ClusterFit> {
    let mut choices = Vec::with_capacity(shape.needs.len());
    let (mut pack, mut frag) = (0.0, 0.0);
    for (f, need) in &shape.needs {
        let mut best: Option<(u64, usize, FitChoice)> = None;
        for (pi, pool) in pools.iter().enumerate() {
            if pool.flavor != flavors[*f] || kind_bit(pool.kind) & shape.kinds == 0 {
                continue;
            }
            if let Some(c) = pool.best_fit(need)
                && best.is_none_or(|(free, _, _)| c.free_there < free)
            {
                best = Some((c.free_there, pi, c));
            }
        }
        let (_, pi, choice) = best?;
        let pool = &pools[pi];
        let left = pool.free().saturating_sub(need.gpus);
        pack += if pool.total > 0 {
            left as f64 / pool.total as f64
        } else {
            0.0
        };
        frag += if choice.free_there > 0 {
            choice.free_there.saturating_sub(need.gpus) as f64 / choice.free_there as f64
        } else {
            0.0
        };
        choices.push((pi, choice));
    }
    let n = shape.needs.len().max(1) as f64;
    Some(ClusterFit {
        choices,
        pack: pack / n,
        frag: frag / n,
    })
}

/// Free GPUs and largest fit (GPUs) of one need in a cluster's allowed pools.
fn need_capacity(pools: &[PoolState], need: &GroupNeed, flavor: &str, kinds: u8) -> (u64, u64) {
    let mut free = 0;
    let mut largest = 0;
    for p in pools {
        if p.flavor == flavor && kind_bit(p.kind) & kinds != 0 {
            free += p.free();
            largest = largest.max(p.largest_fit_gpus(need));
        }
    }
    (free, largest)
}

/// "cluster in [sim-eu] while policy version 3 is rolled out": why a scoped rollout kept
/// a workload off the other clusters.
fn rollout_constraint(shape: &Shape, version: u64) -> String {
    format!(
        "cluster in [{}] while policy version {version} is rolled out",
        shape.rollout_clusters.join(", ")
    )
}

fn describe(shape: &Shape, flavors: &[String], rollout_version: u64) -> String {
    let mut parts: Vec<String> = shape
        .needs
        .iter()
        .map(|(f, _)| format!("flavor {}", flavors[*f]))
        .collect();
    if !shape.regions.is_empty() {
        parts.push(format!("region in [{}]", shape.regions.join(", ")));
    }
    if !shape.clusters.is_empty() {
        parts.push(format!("cluster in [{}]", shape.clusters.join(", ")));
    }
    if !shape.rollout_clusters.is_empty() {
        parts.push(rollout_constraint(shape, rollout_version));
    }
    if let Some(t) = shape.topology
        && t.is_required()
        && t.level() != TopologyLevel::Node
    {
        parts.push(format!("{} topology", t.level()));
    }
    parts.join(", ")
}

impl Cycle<'_> {
    /// Fills `candidates`, `statics` and (when nothing passes) `static_block`.
    pub fn filter_statically(&self, shape: &mut Shape) {
        let flavors = &self.book.flavors;
        let rollout_version = self.input.rollout.as_ref().map_or(0, |r| r.version);
        let mut not_ready = Vec::new();
        for (ci, c) in self.clusters.iter().enumerate() {
            let verdict = if !shape.clusters.is_empty() && !shape.clusters.contains(&c.name) {
                Some(Verdict::PlacementExcluded {
                    constraint: format!("cluster in [{}]", shape.clusters.join(", ")),
                })
            } else if !shape.regions.is_empty() && !shape.regions.contains(&c.region) {
                Some(Verdict::PlacementExcluded {
                    constraint: format!("region in [{}]", shape.regions.join(", ")),
                })
            } else if !shape.rollout_clusters.is_empty()
                && !shape.rollout_clusters.contains(&c.name)
            {
                Some(Verdict::PlacementExcluded {
                    constraint: rollout_constraint(shape, rollout_version),
                })
            } else {
                shape.needs.iter().find_map(|(f, need)| {
                    let pools: Vec<&PoolState> = c
                        .pools
                        .iter()
                        .filter(|p| p.flavor == flavors[*f] && kind_bit(p.kind) & shape.kinds != 0)
                        .collect();
                    if pools.is_empty() {
                        return Some(Verdict::FlavorAbsent {
                            flavor: flavors[*f].clone(),
                        });
                    }
                    match need.level {
                        Some(level)
                            if need.required
                                && (!c.declares(level)
                                    || !pools.iter().any(|p| p.supports(level))) =>
                        {
                            Some(Verdict::TopologyUnsupported { level })
                        }
                        _ => None,
                    }
                })
            };
            match verdict {
                Some(v) => shape.statics.push((ci, v)),
                None if !c.ready => {
                    not_ready.push(c.name.clone());
                    shape.statics.push((ci, Verdict::NotReady));
                }
                None => shape.candidates.push(ci),
            }
        }
        shape.cache = vec![(u64::MAX, None); shape.candidates.len()];
        if shape.candidates.is_empty() {
            let clusters: Vec<ClusterVerdict> = shape
                .statics
                .iter()
                .map(|(ci, v)| ClusterVerdict {
                    cluster: self.clusters[*ci].name.clone(),
                    verdict: v.clone(),
                })
                .collect();
            let (reason, unblock) = if let Some(first) = not_ready.first() {
                (
                    PendingReason::MemberUnavailable {
                        cluster: first.clone(),
                    },
                    Unblock::MemberReady {
                        clusters: not_ready,
                    },
                )
            } else {
                let constraint = describe(shape, flavors, rollout_version);
                let mut filtered: Vec<String> = shape
                    .statics
                    .iter()
                    .map(|(ci, _)| self.clusters[*ci].name.clone())
                    .collect();
                filtered.truncate(self.tuning.max_reason_clusters);
                (
                    PendingReason::NoMatchingCluster {
                        constraint: constraint.clone(),
                        clusters_filtered: filtered,
                    },
                    Unblock::RelaxPlacement { constraint },
                )
            };
            let explanation = Arc::new(Explanation::with_clusters(unblock, clusters));
            shape.static_block = Some((reason, explanation));
        }
    }

    /// The best cluster for pending workload `idx`, or the holds that kept it off clusters
    /// where it would fit (empty when it fits nowhere).
    pub fn route(&mut self, idx: u32) -> Result<(usize, ClusterFit), Vec<usize>> {
        let s = self.shape_of[idx as usize] as usize;
        if self.shapes[s].dead.is_some() {
            self.stats.fit_cache_hits += 1;
            return Err(Vec::new());
        }
        let w = &self.input.pending[idx as usize].workload;
        let spread = w.spec.placement.as_ref().is_some_and(|p| p.spread);
        let key = self.spread_key(w);
        let effective = self.ranks[idx as usize].effective;
        let runtime = self.pending_estimate(idx);
        let weights = self.tuning.weights;

        let mut best: Option<(f64, u64, usize, usize)> = None;
        let mut any_fit = false;
        let mut restricted = Vec::new();
        for pos in 0..self.shapes[s].candidates.len() {
            let ci = self.shapes[s].candidates[pos];
            let version = self.clusters[ci].version;
            if self.shapes[s].cache[pos].0 != version {
                let fit = fit_in_pools(
                    &self.clusters[ci].pools,
                    &self.shapes[s],
                    &self.book.flavors,
                );
                self.shapes[s].cache[pos] = (version, fit);
                self.stats.fit_evaluations += 1;
            } else {
                self.stats.fit_cache_hits += 1;
            }
            let Some(fit) = &self.shapes[s].cache[pos].1 else {
                continue;
            };
            any_fit = true;
            if !self.holds_on[ci].is_empty() {
                let fit = fit.clone();
                if let Some(h) = self.blocking_hold(ci, idx, s, effective, runtime, Some(&fit)) {
                    restricted.push(h);
                    continue;
                }
            }
            let Some(fit) = &self.shapes[s].cache[pos].1 else {
                continue;
            };
            let mut score = if spread {
                let total = f64::from(self.spread_total.get(key).copied().unwrap_or(0) + 1);
                let here = self.spread_cluster.get(&(key, ci)).copied().unwrap_or(0);
                let region = self.clusters[ci].region.as_str();
                let in_region = self.spread_region.get(&(key, region)).copied().unwrap_or(0);
                weights.spread_cluster * f64::from(here) / total
                    + weights.spread_region * f64::from(in_region) / total
                    + weights.fragmentation * fit.frag
            } else {
                weights.binpack * fit.pack + weights.fragmentation * fit.frag
            };
            // A reservation holder goes where its capacity was held.
            if self
                .own_hold
                .get(&idx)
                .is_some_and(|h| self.holds[*h].cluster == ci)
            {
                score -= 1.0e6;
            }
            let tie = self.clusters[ci].tie;
            let better = best.is_none_or(|(bs, bt, _, _)| score < bs || (score == bs && tie < bt));
            if better {
                best = Some((score, tie, ci, pos));
            }
        }
        if !any_fit {
            let death = self.explain_death(s);
            self.shapes[s].dead = Some(death);
            return Err(Vec::new());
        }
        match best {
            Some((_, _, ci, pos)) => match &self.shapes[s].cache[pos].1 {
                Some(fit) => Ok((ci, fit.clone())),
                None => Err(restricted),
            },
            None => Err(restricted),
        }
    }

    /// The hold on `ci` that keeps workload `idx` off it, if any: holds cover the holder's
    /// flavors and yield to higher priority; a reservation also admits backfill, work that
    /// ends before it starts (by `runtime`, the workload's estimate or the conservative
    /// default) or that, placed as `fit` says, leaves the holder the room it counts on.
    pub fn blocking_hold(
        &mut self,
        ci: usize,
        idx: u32,
        s: usize,
        effective: i64,
        runtime: u64,
        fit: Option<&ClusterFit>,
    ) -> Option<usize> {
        if let Some(h) = self.blocking_reservation(ci, idx, s, effective, runtime, fit) {
            return Some(h);
        }
        self.blocking_preemptors(ci, idx, s, fit)
    }

    /// The reservation on `ci` that keeps workload `idx` off it, if any (see
    /// `blocking_hold`); preemptor holds are not looked at.
    pub fn blocking_reservation(
        &mut self,
        ci: usize,
        idx: u32,
        s: usize,
        effective: i64,
        runtime: u64,
        fit: Option<&ClusterFit>,
    ) -> Option<usize> {
        for i in 0..self.holds_on[ci].len() {
            let h = self.holds_on[ci][i];
            let hold = &self.holds[h];
            if !hold.active
                || hold.kind != HoldKind::Reservation
                || hold.holder == idx
                || effective > hold.holder_effective
            {
                continue;
            }
            if !self.shapes[s].flavors().any(|f| hold.flavors.contains(&f)) {
                continue;
            }
            if super::cycle::plus_secs(self.now, runtime) <= hold.expected_start {
                continue;
            }
            match fit {
                Some(fit) if self.leaves_room(h, ci, s, fit) => continue,
                _ => return Some(h),
            }
        }
        None
    }

    /// The reason and explanation of a shape that fits in no candidate cluster.
    fn explain_death(&self, s: usize) -> (PendingReason, Arc<Explanation>) {
        let shape = &self.shapes[s];
        let flavors = &self.book.flavors;
        // Report on the need that fits in the fewest clusters.
        let mut worst = 0;
        let mut worst_fits = usize::MAX;
        for (n, (f, need)) in shape.needs.iter().enumerate() {
            let fits = shape
                .candidates
                .iter()
                .filter(|&&ci| {
                    self.clusters[ci].pools.iter().any(|p| {
                        p.flavor == flavors[*f]
                            && kind_bit(p.kind) & shape.kinds != 0
                            && p.best_fit(need).is_some()
                    })
                })
                .count();
            if fits < worst_fits {
                worst = n;
                worst_fits = fits;
            }
        }
        let (f, need) = &shape.needs[worst];
        let flavor = &flavors[*f];
        let mut verdicts: Vec<(usize, Verdict)> = shape.statics.clone();
        let mut free_total = 0u64;
        let mut largest_domain = 0u64;
        let mut per_cluster: Vec<(u64, &str)> = Vec::new();
        for &ci in &shape.candidates {
            let c = &self.clusters[ci];
            let (free, largest) = need_capacity(&c.pools, need, flavor, shape.kinds);
            free_total = free_total.max(free);
            largest_domain = largest_domain.max(largest);
            per_cluster.push((largest, c.name.as_str()));
            verdicts.push((
                ci,
                Verdict::TooSmall {
                    flavor: flavor.clone(),
                    needed_gpus: need.gpus,
                    largest_fit_gpus: largest,
                    free_gpus: free,
                },
            ));
        }
        verdicts.sort_by_key(|(ci, _)| *ci);
        let clusters: Vec<ClusterVerdict> = verdicts
            .into_iter()
            .map(|(ci, verdict)| ClusterVerdict {
                cluster: self.clusters[ci].name.clone(),
                verdict,
            })
            .collect();
        let level = need.required.then_some(need.level).flatten();
        if free_total >= need.gpus {
            (
                PendingReason::Fragmentation {
                    free_total,
                    largest_domain,
                },
                Arc::new(Explanation::with_clusters(
                    Unblock::Defragmentation {
                        flavor: flavor.clone(),
                        gpus: need.gpus,
                        level,
                    },
                    clusters,
                )),
            )
        } else {
            per_cluster.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
            let largest_fit_per_cluster: BTreeMap<String, u32> = per_cluster
                .iter()
                .take(self.tuning.max_reason_clusters)
                .map(|(g, c)| ((*c).to_owned(), u32::try_from(*g).unwrap_or(u32::MAX)))
                .collect();
            (
                PendingReason::InsufficientCapacity {
                    flavor: flavor.clone(),
                    needed: need.gpus,
                    largest_fit_per_cluster,
                },
                Arc::new(Explanation::with_clusters(
                    Unblock::CapacityFreed {
                        flavor: flavor.clone(),
                        gpus: need.gpus,
                        level,
                    },
                    clusters,
                )),
            )
        }
    }

    /// Why `idx` did not get a cluster: its dead shape's reason, or the holds in its way.
    pub fn capacity_reason(
        &mut self,
        idx: u32,
        restricted: &[usize],
    ) -> (PendingReason, Arc<Explanation>) {
        let s = self.shape_of[idx as usize] as usize;
        if self.shapes[s].dead.is_none() && restricted.is_empty() {
            // It fit when routed, but the take failed (inconsistent digest): explain now.
            let death = self.explain_death(s);
            return death;
        }
        if let Some(dead) = &self.shapes[s].dead {
            return dead.clone();
        }
        // Workloads of one shape blocked by the same holds share one explanation.
        if let Some((epoch, holds, reason, explanation)) = &self.shapes[s].held_only
            && *epoch == self.holds_epoch
            && holds == restricted
        {
            return (reason.clone(), explanation.clone());
        }
        let (f, need) = &self.shapes[s].needs[0];
        let flavor = self.book.flavors[*f].clone();
        let mut verdicts: Vec<(usize, Verdict)> = self.shapes[s].statics.clone();
        let mut largest_fit_per_cluster = BTreeMap::new();
        for &h in restricted {
            let hold = &self.holds[h];
            verdicts.push((
                hold.cluster,
                Verdict::Reserved {
                    for_uid: hold.holder_uid.clone(),
                    expected_start: hold.expected_start,
                },
            ));
            if largest_fit_per_cluster.len() < self.tuning.max_reason_clusters {
                let pools = &self.clusters[hold.cluster].pools;
                let (_, largest) = need_capacity(pools, need, &flavor, self.shapes[s].kinds);
                largest_fit_per_cluster.insert(
                    self.clusters[hold.cluster].name.clone(),
                    u32::try_from(largest).unwrap_or(u32::MAX),
                );
            }
        }
        verdicts.sort_by_key(|(ci, _)| *ci);
        verdicts.dedup_by_key(|(ci, _)| *ci);
        let clusters: Vec<ClusterVerdict> = verdicts
            .into_iter()
            .map(|(ci, verdict)| ClusterVerdict {
                cluster: self.clusters[ci].name.clone(),
                verdict,
            })
            .collect();
        let first = &self.holds[restricted[0]];
        let reason = PendingReason::InsufficientCapacity {
            flavor,
            needed: need.gpus,
            largest_fit_per_cluster,
        };
        let explanation = Arc::new(Explanation::with_clusters(
            Unblock::ReservationStarts {
                cluster: self.clusters[first.cluster].name.clone(),
                expected_start: first.expected_start,
            },
            clusters,
        ));
        self.shapes[s].held_only = Some((
            self.holds_epoch,
            restricted.to_vec(),
            reason.clone(),
            explanation.clone(),
        ));
        (reason, explanation)
    }
}
