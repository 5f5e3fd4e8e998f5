//! The simulated cluster's local gang scheduler: a pure function from node free capacity and
//! one gang to a placement of every pod, or a reason why the gang waits.
//!
//! What it guarantees, and what the property tests below check:
//! - all or nothing: either every pod of the gang is placed or none is (a half-started gang
//!   holds GPUs and does no work);
//! - one pod never spans nodes, and no node gets more GPUs than it has free;
//! - a required topology level is honoured: all pods in one node, one rack or one zone;
//! - only schedulable (healthy, uncordoned) nodes of the pod's flavor, in the requested pool;
//! - determinism: the same nodes and gang always give the same placement (ties broken by node
//!   index and domain name), so simulations replay exactly.
//!
//! How it chooses: narrowest scope first (the whole gang on one node, then in one rack, then in
//! one zone, then anywhere), stopping at a required level; within a level, best fit (the
//! domain, then the node, with the least free capacity that still fits), which leaves large
//! holes whole for large gangs. For gangs whose pods all have the same size, best fit is also
//! complete: the gang is placed whenever the capacity digest says it fits, so federation
//! routing and local placement agree. Mixed pod sizes are packed largest first, a heuristic.
//!
//! `gang.minCount` is not used: the gang is admitted only when all its pods fit, the strictest
//! reading, so the sim never runs a gang smaller than the user submitted.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tideway_api::{TopologyLevel, TopologyRequirement};

/// What the scheduler needs to know about one node; the index of a node is its position in
/// the slice given to [`place_gang`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCapacity<'a> {
    pub zone: &'a str,
    pub rack: &'a str,
    pub pool: &'a str,
    /// The GPU model.
    pub flavor: &'a str,
    pub free: u32,
    /// Healthy and not cordoned.
    pub schedulable: bool,
}

/// `count` pods of `gpus_per_pod` GPUs of `flavor`, one pod set of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodGroup<'a> {
    pub count: u32,
    pub gpus_per_pod: u32,
    pub flavor: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangRequest<'a> {
    pub pod_groups: Vec<PodGroup<'a>>,
    /// Only nodes of this pool; any pool when `None`.
    pub pool: Option<&'a str>,
    pub topology: Option<TopologyRequirement>,
}

/// Where one pod runs. Pods that need no GPU are not placed by this scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPlacement {
    /// Index of the pod group in the request.
    pub group: usize,
    /// Index of the pod in its group.
    pub pod: u32,
    /// Index of the node in the capacity slice.
    pub node: usize,
    pub gpus: u32,
}

/// The narrowest domain that holds the whole placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementScope {
    Node,
    Rack,
    Zone,
    Cluster,
}

impl PlacementScope {
    /// Narrowest first: the order in which the scheduler tries scopes.
    const ORDER: [PlacementScope; 4] = [Self::Node, Self::Rack, Self::Zone, Self::Cluster];

    fn of(level: TopologyLevel) -> Self {
        match level {
            TopologyLevel::Node => Self::Node,
            TopologyLevel::Rack => Self::Rack,
            TopologyLevel::Zone => Self::Zone,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangPlacement {
    /// Sorted by (group, pod).
    pub pods: Vec<PodPlacement>,
    pub scope: PlacementScope,
}

impl GangPlacement {
    /// GPUs taken on each node.
    pub fn gpus_by_node(&self) -> BTreeMap<usize, u32> {
        let mut out = BTreeMap::new();
        for p in &self.pods {
            *out.entry(p.node).or_insert(0) += p.gpus;
        }
        out
    }
}

/// Why a gang cannot be placed now; the variants map onto the federation's pending reasons.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "type", rename_all_fields = "camelCase")]
pub enum PlacementError {
    /// Nothing of this flavor (in this pool) could ever take the pod: wrong cluster or pool,
    /// or every such node is unhealthy or cordoned.
    #[error("no schedulable node of flavor {flavor}{}", pool.as_ref().map(|p| format!(" in pool {p}")).unwrap_or_default())]
    NoMatchingNodes {
        flavor: String,
        pool: Option<String>,
    },
    #[error("needs {requested} {flavor} GPUs, {free} free")]
    InsufficientCapacity {
        flavor: String,
        requested: u64,
        free: u64,
    },
    /// Enough in total, but no single domain of the required level holds the gang.
    #[error("no single {level} can hold the whole gang")]
    TopologyUnsatisfied { level: TopologyLevel },
    /// Enough free GPUs in total, but not in pieces big enough for the pods.
    #[error("enough free GPUs in total, but too fragmented to place every pod")]
    Fragmented,
}

/// One pod to place, with the flavor borrowed from the request.
#[derive(Debug, Clone, Copy)]
struct Pod<'a> {
    group: usize,
    index: u32,
    gpus: u32,
    flavor: &'a str,
}

/// Places every pod of the gang or none; see the module docs for the order of choices.
pub fn place_gang(
    nodes: &[NodeCapacity<'_>],
    request: &GangRequest<'_>,
) -> Result<GangPlacement, PlacementError> {
    // GPUs needed per flavor; u64 so that unvalidated counts cannot overflow.
    let mut demand: BTreeMap<&str, u64> = BTreeMap::new();
    for g in request.pod_groups.iter().filter(|g| g.gpus_per_pod > 0) {
        *demand.entry(g.flavor).or_insert(0) += u64::from(g.count) * u64::from(g.gpus_per_pod);
    }
    demand.retain(|_, gpus| *gpus > 0);
    if demand.is_empty() {
        return Ok(GangPlacement {
            pods: Vec::new(),
            scope: PlacementScope::Node,
        });
    }

    let matches = |n: &NodeCapacity<'_>| {
        n.schedulable && request.pool.is_none_or(|p| p == n.pool) && demand.contains_key(n.flavor)
    };
    let mut eligible = Vec::new();
    let mut free_by_flavor: BTreeMap<&str, (bool, u64)> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if matches(n) {
            let entry = free_by_flavor.entry(n.flavor).or_insert((false, 0));
            entry.0 = true;
            entry.1 += u64::from(n.free);
            if n.free > 0 {
                eligible.push(i);
            }
        }
    }
    for (flavor, requested) in &demand {
        match free_by_flavor.get(flavor) {
            None => {
                return Err(PlacementError::NoMatchingNodes {
                    flavor: (*flavor).to_owned(),
                    pool: request.pool.map(str::to_owned),
                });
            }
            Some((_, free)) if free < requested => {
                return Err(PlacementError::InsufficientCapacity {
                    flavor: (*flavor).to_owned(),
                    requested: *requested,
                    free: *free,
                });
            }
            Some(_) => {}
        }
    }

    // Now bounded by the free GPUs of the cluster, so expanding pods is cheap.
    let mut pods: Vec<Pod<'_>> = request
        .pod_groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.gpus_per_pod > 0)
        .flat_map(|(group, g)| {
            (0..g.count).map(move |index| Pod {
                group,
                index,
                gpus: g.gpus_per_pod,
                flavor: g.flavor,
            })
        })
        .collect();
    // Largest first; stable, so equal pods keep request order.
    pods.sort_by_key(|p| std::cmp::Reverse(p.gpus));

    let widest = match request.topology {
        Some(TopologyRequirement::Required(level)) => PlacementScope::of(level),
        Some(TopologyRequirement::Preferred(_)) | None => PlacementScope::Cluster,
    };
    for scope in PlacementScope::ORDER.into_iter().filter(|s| *s <= widest) {
        if let Some(mut placed) = place_in_scope(nodes, &eligible, &demand, &pods, scope) {
            placed.sort();
            return Ok(GangPlacement {
                pods: placed,
                scope,
            });
        }
    }
    Err(match request.topology {
        Some(TopologyRequirement::Required(level)) => PlacementError::TopologyUnsatisfied { level },
        _ => PlacementError::Fragmented,
    })
}

/// Best-fit domain of `scope` that holds every pod.
fn place_in_scope(
    nodes: &[NodeCapacity<'_>],
    eligible: &[usize],
    demand: &BTreeMap<&str, u64>,
    pods: &[Pod<'_>],
    scope: PlacementScope,
) -> Option<Vec<PodPlacement>> {
    match scope {
        PlacementScope::Node => {
            // One node has one flavor, so only a single-flavor gang can share one.
            if demand.len() != 1 {
                return None;
            }
            let (&flavor, &total) = demand.iter().next()?;
            let (_, node) = eligible
                .iter()
                .map(|&i| (nodes[i].free, i))
                .filter(|&(free, i)| nodes[i].flavor == flavor && u64::from(free) >= total)
                .min()?;
            Some(
                pods.iter()
                    .map(|p| PodPlacement {
                        group: p.group,
                        pod: p.index,
                        node,
                        gpus: p.gpus,
                    })
                    .collect(),
            )
        }
        PlacementScope::Rack | PlacementScope::Zone => {
            let mut domains: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
            for &i in eligible {
                let n = &nodes[i];
                let key = if scope == PlacementScope::Rack {
                    (n.zone, n.rack)
                } else {
                    (n.zone, "")
                };
                domains.entry(key).or_default().push(i);
            }
            // Domains with enough of every flavor, least free first, then by name.
            let mut candidates: Vec<(u64, (&str, &str), Vec<usize>)> = domains
                .into_iter()
                .filter_map(|(key, members)| {
                    let mut free: BTreeMap<&str, u64> = BTreeMap::new();
                    for &i in &members {
                        *free.entry(nodes[i].flavor).or_insert(0) += u64::from(nodes[i].free);
                    }
                    let enough = demand
                        .iter()
                        .all(|(f, need)| free.get(f).is_some_and(|have| have >= need));
                    enough.then(|| (free.values().sum(), key, members))
                })
                .collect();
            candidates.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            candidates
                .iter()
                .find_map(|(_, _, members)| pack(nodes, members, pods))
        }
        PlacementScope::Cluster => pack(nodes, eligible, pods),
    }
}

/// Best fit of every pod onto `members`, largest pods first: each pod goes to the node of its
/// flavor with the least free GPUs that still hold it (lowest index on ties).
fn pack(
    nodes: &[NodeCapacity<'_>],
    members: &[usize],
    pods: &[Pod<'_>],
) -> Option<Vec<PodPlacement>> {
    let mut by_flavor: BTreeMap<&str, BTreeSet<(u32, usize)>> = BTreeMap::new();
    for &i in members {
        by_flavor
            .entry(nodes[i].flavor)
            .or_default()
            .insert((nodes[i].free, i));
    }
    let mut placed = Vec::with_capacity(pods.len());
    for p in pods {
        let free = by_flavor.get_mut(p.flavor)?;
        let &(have, node) = free.range((p.gpus, 0)..).next()?;
        free.remove(&(have, node));
        free.insert((have - p.gpus, node));
        placed.push(PodPlacement {
            group: p.group,
            pod: p.index,
            node,
            gpus: p.gpus,
        });
    }
    Some(placed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tideway_api::TopologyRequirement::{Preferred, Required};

    fn node<'a>(zone: &'a str, rack: &'a str, free: u32) -> NodeCapacity<'a> {
        NodeCapacity {
            zone,
            rack,
            pool: "p",
            flavor: "H100",
            free,
            schedulable: true,
        }
    }

    fn gang(pods: u32, gpus: u32, topology: Option<TopologyRequirement>) -> GangRequest<'static> {
        GangRequest {
            pod_groups: vec![PodGroup {
                count: pods,
                gpus_per_pod: gpus,
                flavor: "H100",
            }],
            pool: None,
            topology,
        }
    }

    fn nodes_of(p: &GangPlacement) -> Vec<usize> {
        p.gpus_by_node().into_keys().collect()
    }

    #[test]
    fn whole_gang_on_the_tightest_single_node_first() {
        let nodes = [node("z", "a", 8), node("z", "a", 4), node("z", "b", 6)];
        let p = place_gang(&nodes, &gang(2, 2, None)).unwrap();
        assert_eq!(p.scope, PlacementScope::Node);
        assert_eq!(nodes_of(&p), [1]);
    }

    #[test]
    fn then_the_tightest_rack() {
        // Three 4-GPU pods fit on no single node. Rack a has 16 free, rack b 8 (too little),
        // rack c 12: c is the tightest rack that holds the gang.
        let nodes = [
            node("z", "a", 8),
            node("z", "a", 8),
            node("z", "b", 4),
            node("z", "b", 4),
            node("z", "c", 4),
            node("z", "c", 4),
            node("z", "c", 4),
        ];
        let p = place_gang(&nodes, &gang(3, 4, None)).unwrap();
        assert_eq!(p.scope, PlacementScope::Rack);
        assert_eq!(nodes_of(&p), [4, 5, 6]);
    }

    #[test]
    fn required_level_is_a_hard_limit() {
        let nodes = [node("z1", "a", 8), node("z2", "b", 8)];
        assert_eq!(
            place_gang(&nodes, &gang(2, 8, Some(Required(TopologyLevel::Rack)))),
            Err(PlacementError::TopologyUnsatisfied {
                level: TopologyLevel::Rack
            })
        );
        assert_eq!(
            place_gang(&nodes, &gang(2, 8, Some(Required(TopologyLevel::Zone)))),
            Err(PlacementError::TopologyUnsatisfied {
                level: TopologyLevel::Zone
            })
        );
        let p = place_gang(&nodes, &gang(2, 8, Some(Preferred(TopologyLevel::Rack)))).unwrap();
        assert_eq!(p.scope, PlacementScope::Cluster);
        assert_eq!(nodes_of(&p), [0, 1]);
    }

    #[test]
    fn filters_flavor_pool_and_health() {
        let mut nodes = vec![node("z", "a", 8); 4];
        nodes[0].schedulable = false;
        nodes[1].flavor = "L40S";
        nodes[2].pool = "other";
        let mut g = gang(1, 8, None);
        g.pool = Some("p");
        assert_eq!(nodes_of(&place_gang(&nodes, &g).unwrap()), [3]);
        g.pod_groups[0].count = 2;
        assert_eq!(
            place_gang(&nodes, &g),
            Err(PlacementError::InsufficientCapacity {
                flavor: "H100".into(),
                requested: 16,
                free: 8
            })
        );
        g.pool = Some("nope");
        assert!(matches!(
            place_gang(&nodes, &g),
            Err(PlacementError::NoMatchingNodes { .. })
        ));
    }

    #[test]
    fn fragmentation_is_reported() {
        let nodes = [node("z", "a", 4), node("z", "b", 4)];
        assert_eq!(
            place_gang(&nodes, &gang(1, 8, None)),
            Err(PlacementError::Fragmented)
        );
    }

    #[test]
    fn mixed_flavors_and_zero_gpu_pods() {
        let mut nodes = vec![node("z", "a", 8), node("z", "a", 4)];
        nodes[1].flavor = "L40S";
        let g = GangRequest {
            pod_groups: vec![
                PodGroup {
                    count: 3,
                    gpus_per_pod: 0,
                    flavor: "cpu",
                },
                PodGroup {
                    count: 1,
                    gpus_per_pod: 8,
                    flavor: "H100",
                },
                PodGroup {
                    count: 2,
                    gpus_per_pod: 2,
                    flavor: "L40S",
                },
            ],
            pool: None,
            topology: Some(Required(TopologyLevel::Rack)),
        };
        let p = place_gang(&nodes, &g).unwrap();
        assert_eq!(p.scope, PlacementScope::Rack);
        assert_eq!(p.pods.len(), 3, "zero-GPU pods are not placed");
        assert_eq!(p.gpus_by_node(), BTreeMap::from([(0, 8), (1, 4)]));
        // Two flavors never share a node.
        let mut node_only = g.clone();
        node_only.topology = Some(Required(TopologyLevel::Node));
        assert!(place_gang(&nodes, &node_only).is_err());
    }

    // ---- properties ----

    const ZONES: [&str; 3] = ["z0", "z1", "z2"];
    const RACKS: [&str; 4] = ["r0", "r1", "r2", "r3"];
    const FLAVORS: [&str; 2] = ["H100", "L40S"];
    const POOLS: [&str; 2] = ["train", "infer"];

    #[derive(Debug, Clone)]
    struct GenNode {
        zone: usize,
        rack: usize,
        flavor: usize,
        pool: usize,
        gpus: u32,
        used: u32,
        schedulable: bool,
    }

    fn gen_node() -> impl Strategy<Value = GenNode> {
        (
            0..3usize,
            0..4usize,
            0..2usize,
            0..2usize,
            prop::sample::select(vec![1u32, 2, 4, 8]),
            prop::bool::weighted(0.9),
        )
            .prop_flat_map(|(zone, rack, flavor, pool, gpus, schedulable)| {
                (0..=gpus).prop_map(move |used| GenNode {
                    zone,
                    rack,
                    flavor,
                    pool,
                    gpus,
                    used,
                    schedulable,
                })
            })
    }

    #[derive(Debug, Clone)]
    struct GenGang {
        groups: Vec<(u32, u32, usize)>,
        pool: Option<usize>,
        topology: Option<TopologyRequirement>,
    }

    fn gen_topology() -> impl Strategy<Value = Option<TopologyRequirement>> {
        let level = prop::sample::select(vec![
            TopologyLevel::Node,
            TopologyLevel::Rack,
            TopologyLevel::Zone,
        ]);
        prop_oneof![
            Just(None),
            level.clone().prop_map(|l| Some(Required(l))),
            level.prop_map(|l| Some(Preferred(l))),
        ]
    }

    fn gen_gang() -> impl Strategy<Value = GenGang> {
        (
            prop::collection::vec(
                (
                    1..6u32,
                    prop::sample::select(vec![1u32, 2, 4, 8]),
                    0..2usize,
                ),
                1..3,
            ),
            prop::option::of(0..2usize),
            gen_topology(),
        )
            .prop_map(|(groups, pool, topology)| GenGang {
                groups,
                pool,
                topology,
            })
    }

    fn capacities(nodes: &[GenNode], free: &[u32]) -> Vec<NodeCapacity<'static>> {
        nodes
            .iter()
            .zip(free)
            .map(|(n, &free)| NodeCapacity {
                zone: ZONES[n.zone],
                rack: RACKS[n.rack],
                pool: POOLS[n.pool],
                flavor: FLAVORS[n.flavor],
                free,
                schedulable: n.schedulable,
            })
            .collect()
    }

    fn request(g: &GenGang) -> GangRequest<'static> {
        GangRequest {
            pod_groups: g
                .groups
                .iter()
                .map(|&(count, gpus_per_pod, f)| PodGroup {
                    count,
                    gpus_per_pod,
                    flavor: FLAVORS[f],
                })
                .collect(),
            pool: g.pool.map(|p| POOLS[p]),
            topology: g.topology,
        }
    }

    /// Checks one placement against the request and the capacity it was made from.
    fn check_placement(
        caps: &[NodeCapacity<'_>],
        req: &GangRequest<'_>,
        p: &GangPlacement,
    ) -> Result<(), TestCaseError> {
        // Never a partial gang: every GPU pod, exactly once.
        let expected: Vec<(usize, u32)> = req
            .pod_groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.gpus_per_pod > 0)
            .flat_map(|(gi, g)| (0..g.count).map(move |i| (gi, i)))
            .collect();
        let got: Vec<(usize, u32)> = p.pods.iter().map(|x| (x.group, x.pod)).collect();
        prop_assert_eq!(got, expected);
        for pod in &p.pods {
            let g = &req.pod_groups[pod.group];
            let n = &caps[pod.node];
            prop_assert_eq!(pod.gpus, g.gpus_per_pod);
            prop_assert_eq!(n.flavor, g.flavor);
            prop_assert!(n.schedulable);
            prop_assert!(req.pool.is_none_or(|pool| pool == n.pool));
        }
        // Never over-allocation.
        for (node, gpus) in p.gpus_by_node() {
            prop_assert!(
                gpus <= caps[node].free,
                "node {} gets {} of {}",
                node,
                gpus,
                caps[node].free
            );
        }
        // The required level is honoured, and the reported scope is true.
        let nodes: BTreeSet<usize> = p.gpus_by_node().into_keys().collect();
        let racks: BTreeSet<(&str, &str)> = nodes
            .iter()
            .map(|&i| (caps[i].zone, caps[i].rack))
            .collect();
        let zones: BTreeSet<&str> = nodes.iter().map(|&i| caps[i].zone).collect();
        let within = |scope: PlacementScope| match scope {
            PlacementScope::Node => nodes.len() <= 1,
            PlacementScope::Rack => racks.len() <= 1,
            PlacementScope::Zone => zones.len() <= 1,
            PlacementScope::Cluster => true,
        };
        prop_assert!(within(p.scope));
        if let Some(Required(level)) = req.topology {
            prop_assert!(
                within(PlacementScope::of(level)),
                "required {} violated",
                level
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A stream of gangs placed one after the other on shrinking free capacity.
        #[test]
        fn gang_stream_invariants(
            nodes in prop::collection::vec(gen_node(), 0..24),
            gangs in prop::collection::vec(gen_gang(), 1..16),
        ) {
            let mut free: Vec<u32> = nodes.iter().map(|n| n.gpus - n.used).collect();
            for g in &gangs {
                let caps = capacities(&nodes, &free);
                let req = request(g);
                let first = place_gang(&caps, &req);
                // Determinism: the same input gives the same answer.
                prop_assert_eq!(&first, &place_gang(&caps, &req));
                if let Ok(p) = first {
                    check_placement(&caps, &req, &p)?;
                    for (node, gpus) in p.gpus_by_node() {
                        free[node] -= gpus;
                    }
                }
            }
        }

        /// For one pod size the scheduler places the gang exactly when the free histogram of
        /// the best domain says it fits: what the federation routes on is what the member does.
        #[test]
        fn uniform_gangs_fit_exactly_when_some_domain_has_room(
            nodes in prop::collection::vec(gen_node(), 0..24),
            pods in 1..8u32,
            gpus in prop::sample::select(vec![1u32, 2, 4, 8]),
            topology in gen_topology(),
        ) {
            let free: Vec<u32> = nodes.iter().map(|n| n.gpus - n.used).collect();
            let caps = capacities(&nodes, &free);
            let req = gang(pods, gpus, topology);
            let usable: Vec<&NodeCapacity<'_>> = caps.iter().filter(|n| n.schedulable && n.flavor == "H100").collect();
            let fit = |members: &mut dyn Iterator<Item = &&NodeCapacity<'_>>| members.map(|n| u64::from(n.free / gpus)).sum::<u64>() >= u64::from(pods);
            let fits = match topology {
                Some(Required(TopologyLevel::Node)) => usable.iter().any(|n| n.free >= pods * gpus),
                Some(Required(TopologyLevel::Rack)) => RACKS.iter().any(|r| ZONES.iter().any(|z| fit(&mut usable.iter().filter(|n| n.rack == *r && n.zone == *z)))),
                Some(Required(TopologyLevel::Zone)) => ZONES.iter().any(|z| fit(&mut usable.iter().filter(|n| n.zone == *z))),
                _ => fit(&mut usable.iter()),
            };
            prop_assert_eq!(place_gang(&caps, &req).is_ok(), fits);
        }
    }
}
