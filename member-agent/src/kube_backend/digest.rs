//! Nodes and pods -> capacity digest.
//!
//! A pure function of the listed objects, so the arithmetic is tested on recorded API
//! responses without a client. What counts:
//!
//! - `total`: GPU *capacity* of the nodes (what was bought);
//! - `unhealthy`: GPUs the device plugin withdrew (`capacity - allocatable`, its signal for a
//!   failed device), plus every allocatable GPU of a node that is not `Ready` or carries a
//!   configured unhealthy condition;
//! - `cordoned`: allocatable GPUs of healthy nodes marked unschedulable;
//! - `allocated`: GPUs requested by pods bound to the nodes and not finished, wherever
//!   they are (a cordoned node's pods still hold their GPUs);
//! - `free_histogram`: over healthy, schedulable nodes only, since that is where a gang can
//!   land.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tideway_api::digest::{CapacityDigest, DomainDigest, GpuCounts, PoolDigest};
use tideway_api::workload::TopologyLevel;

use super::config::{GPU_RESOURCE, KubeConfig};

/// No node carries more GPUs; larger numbers are junk and would bloat the histogram.
pub const MAX_NODE_GPUS: u32 = 256;

/// The field selector for pods that may hold GPUs: bound to a node and not finished. Field
/// selectors have no "in", hence the two negations instead of `phase in (Pending, Running)`.
pub const ACTIVE_BOUND_PODS: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// One GPU node as the digest sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeGpus {
    pool: String,
    flavor: String,
    zone: Option<String>,
    rack: Option<String>,
    counts: GpuCounts,
}

/// Builds the digest of the cluster from all nodes and all active bound pods.
pub fn build_digest(
    config: &KubeConfig,
    nodes: &[Node],
    pods: &[Pod],
    now: DateTime<Utc>,
) -> CapacityDigest {
    let allocated = allocated_by_node(pods);
    let mut pools: BTreeMap<(String, String), PoolAcc> = BTreeMap::new();
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let used = allocated.get(name).copied().unwrap_or(0);
        let Some(n) = node_gpus(config, node, used) else {
            continue;
        };
        let acc = pools.entry((n.pool.clone(), n.flavor.clone())).or_default();
        acc.all.add(&n.counts);
        if let Some(zone) = &n.zone {
            acc.domains
                .entry((TopologyLevel::Zone, zone.clone()))
                .or_default()
                .add(&n.counts);
        }
        if let Some(rack) = &n.rack {
            acc.domains
                .entry((TopologyLevel::Rack, rack.clone()))
                .or_default()
                .add(&n.counts);
            if let Some(zone) = &n.zone {
                acc.rack_zone.insert(rack.clone(), zone.clone());
            }
        }
    }
    CapacityDigest {
        cluster: config.cluster.clone(),
        generated_at: now,
        pools: pools
            .into_iter()
            .map(|((pool, flavor), acc)| PoolDigest {
                kind: config.pool_kind(&pool),
                pool,
                flavor,
                counts: acc.all,
                domains: acc
                    .domains
                    .into_iter()
                    .map(|((level, name), counts)| DomainDigest {
                        level,
                        zone: (level == TopologyLevel::Rack)
                            .then(|| acc.rack_zone.get(&name).cloned())
                            .flatten(),
                        name,
                        counts,
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[derive(Default)]
struct PoolAcc {
    all: GpuCounts,
    /// Keyed by (level, name) so the output order is deterministic: racks, then zones.
    domains: BTreeMap<(TopologyLevel, String), GpuCounts>,
    /// Rack → the zone of its nodes.
    rack_zone: BTreeMap<String, String>,
}

/// GPUs requested by the pods on each node.
fn allocated_by_node(pods: &[Pod]) -> HashMap<String, u32> {
    let mut by_node: HashMap<String, u32> = HashMap::new();
    for pod in pods {
        let Some(spec) = &pod.spec else { continue };
        let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
            continue;
        };
        // The field selector already excludes finished pods; this keeps the function right
        // when handed an unfiltered list.
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let gpus = pod_gpus(&spec.containers, spec.init_containers.as_deref());
        if gpus > 0 {
            let e = by_node.entry(node.to_owned()).or_insert(0);
            *e = e.saturating_add(gpus);
        }
    }
    by_node
}

/// Names each occupied node's zone and rack from its labels (the ones the digest groups by),
/// so the federation knows which domain the local scheduler actually chose.
pub fn locate_nodes(
    occupied: &mut BTreeMap<(String, u32), Vec<tideway_api::NodeGpus>>,
    nodes: &[Node],
    config: &KubeConfig,
) {
    let mut at: BTreeMap<&str, (Option<String>, Option<String>)> = BTreeMap::new();
    for n in nodes {
        let (Some(name), Some(labels)) = (n.metadata.name.as_deref(), n.metadata.labels.as_ref())
        else {
            continue;
        };
        let get = |key: &str| labels.get(key).filter(|v| !v.is_empty()).cloned();
        let zone = get(&config.nodes.zone);
        let rack = config.nodes.rack.as_deref().and_then(get);
        at.insert(name, (zone, rack));
    }
    for ng in occupied.values_mut().flatten() {
        if let Some((zone, rack)) = at.get(ng.node.as_str()) {
            ng.zone.clone_from(zone);
            ng.rack.clone_from(rack);
        }
    }
}

/// The nodes each workload attempt's pods are bound to, with their GPUs, from the pods'
/// `tideway.dev/workload-uid` and `tideway.dev/attempt` labels (the pods of a user's own
/// template carry none and are not reported). The federation uses them to free whole nodes
/// for gangs; node names are opaque to it.
pub fn nodes_by_workload(pods: &[Pod]) -> BTreeMap<(String, u32), Vec<tideway_api::NodeGpus>> {
    let mut acc: BTreeMap<(String, u32), BTreeMap<String, u32>> = BTreeMap::new();
    for pod in pods {
        let Some(labels) = pod.metadata.labels.as_ref() else {
            continue;
        };
        let (Some(uid), Some(attempt)) = (
            labels.get(super::labels::WORKLOAD_UID),
            labels
                .get(super::labels::ATTEMPT)
                .and_then(|a| a.parse::<u32>().ok()),
        ) else {
            continue;
        };
        let Some(spec) = &pod.spec else { continue };
        let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
            continue;
        };
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let gpus = pod_gpus(&spec.containers, spec.init_containers.as_deref());
        if gpus > 0 {
            let e = acc
                .entry((uid.clone(), attempt))
                .or_default()
                .entry(node.to_owned())
                .or_insert(0);
            *e = e.saturating_add(gpus);
        }
    }
    acc.into_iter()
        .map(|(k, by_node)| {
            let nodes = by_node
                .into_iter()
                .map(|(node, gpus)| tideway_api::NodeGpus {
                    node,
                    gpus,
                    zone: None,
                    rack: None,
                })
                .collect();
            (k, nodes)
        })
        .collect()
}

/// The pod's effective GPU request, as the kube-scheduler computes it: the larger of the
/// app containers (plus restartable init "sidecar" containers, which run alongside them)
/// and the largest single ordinary init container, which runs alone.
pub fn pod_gpus(containers: &[Container], init_containers: Option<&[Container]>) -> u32 {
    let mut app: u32 = containers
        .iter()
        .map(container_gpus)
        .fold(0, u32::saturating_add);
    let mut init_max = 0;
    for c in init_containers.unwrap_or_default() {
        if c.restart_policy.as_deref() == Some("Always") {
            app = app.saturating_add(container_gpus(c));
        } else {
            init_max = init_max.max(container_gpus(c));
        }
    }
    app.max(init_max)
}

/// A container's GPUs: the request, or the limit when only a limit is set (Kubernetes
/// defaults an extended resource's request to its limit).
fn container_gpus(c: &Container) -> u32 {
    let Some(res) = &c.resources else { return 0 };
    let get = |m: &Option<BTreeMap<String, Quantity>>| {
        m.as_ref()
            .and_then(|m| m.get(GPU_RESOURCE))
            .map(gpu_quantity)
    };
    get(&res.requests).or_else(|| get(&res.limits)).unwrap_or(0)
}

/// GPUs are whole numbers; anything else (a typo, a fraction) counts as none rather than
/// failing the whole digest.
fn gpu_quantity(q: &Quantity) -> u32 {
    match q.0.trim().parse::<u32>() {
        Ok(n) => n.min(MAX_NODE_GPUS),
        Err(_) => {
            tracing::warn!(quantity = %q.0, "ignoring non-integer {GPU_RESOURCE} quantity");
            0
        }
    }
}

fn node_gpus(config: &KubeConfig, node: &Node, used: u32) -> Option<NodeGpus> {
    let status = node.status.as_ref()?;
    let allocatable = status
        .allocatable
        .as_ref()
        .and_then(|m| m.get(GPU_RESOURCE))
        .map_or(0, gpu_quantity);
    let capacity = status
        .capacity
        .as_ref()
        .and_then(|m| m.get(GPU_RESOURCE))
        .map_or(allocatable, gpu_quantity)
        .max(allocatable);
    if capacity == 0 {
        return None;
    }
    let labels = node.metadata.labels.as_ref();
    let label = |key: &str| {
        labels
            .and_then(|l| l.get(key))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let pool = label(&config.nodes.pool).or_else(|| config.nodes.default_pool.clone())?;
    // A GPU node of no known model still has GPUs; "unknown" keeps them in the totals.
    let flavor = labels
        .and_then(|l| config.flavor_of_node(l))
        .unwrap_or_else(|| "unknown".to_owned());

    let conditions = status.conditions.as_deref().unwrap_or_default();
    let ready = conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    // A broken GPU (a configured condition or the `tideway.dev/gpu-fault` label) makes the
    // node's GPUs unhealthy; an ECC warning keeps them out of new placements (cordoned).
    let fault = super::node_health::node_fault(config, node);
    let sick = matches!(fault, Some(super::node_health::NodeFault::GpuFault(_)));
    let warned = matches!(fault, Some(super::node_health::NodeFault::EccWarning));
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);

    let mut counts = GpuCounts {
        total: capacity,
        allocated: used.min(capacity),
        unhealthy: capacity - allocatable,
        ..GpuCounts::default()
    };
    if !ready || sick {
        counts.unhealthy = capacity;
    } else if cordoned || warned {
        counts.cordoned = allocatable;
    } else {
        let free = allocatable.saturating_sub(used) as usize;
        counts.free_histogram = vec![0; free + 1];
        counts.free_histogram[free] = 1;
    }
    Some(NodeGpus {
        pool,
        flavor,
        zone: label(&config.nodes.zone),
        rack: config.nodes.rack.as_deref().and_then(label),
        counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_backend::config::SchedulerMode;
    use serde_json::json;

    fn config() -> KubeConfig {
        let mut c = KubeConfig::new("west", SchedulerMode::Volcano);
        c.nodes.rack = Some("tideway.dev/rack".into());
        c
    }

    fn node(name: &str, gpus: u32, ready: &str, unschedulable: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "tideway.dev/pool": "train", "nvidia.com/gpu.product": "H100",
                "topology.kubernetes.io/zone": "z1", "tideway.dev/rack": "r1"}},
            "spec": {"unschedulable": unschedulable},
            "status": {
                "capacity": {"nvidia.com/gpu": gpus.to_string()},
                "allocatable": {"nvidia.com/gpu": gpus.to_string()},
                "conditions": [{"type": "Ready", "status": ready}]
            }
        }))
        .unwrap()
    }

    fn pod(node: &str, phase: &str, gpus: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn nodes_of_each_workload_come_from_its_pods_labels() {
        let labelled = |node: &str, uid: &str, phase: &str| -> Pod {
            let mut p = pod(node, phase, "4");
            p.metadata.labels = Some(BTreeMap::from([
                (
                    super::super::labels::WORKLOAD_UID.to_owned(),
                    uid.to_owned(),
                ),
                (super::super::labels::ATTEMPT.to_owned(), "2".to_owned()),
            ]));
            p
        };
        let pods = [
            labelled("a", "u1", "Running"),
            labelled("a", "u1", "Running"),
            labelled("b", "u1", "Running"),
            labelled("c", "u1", "Succeeded"),
            labelled("c", "u2", "Pending"),
            pod("d", "Running", "8"),
        ];
        let got = nodes_by_workload(&pods);
        let ng = |node: &str, gpus| tideway_api::NodeGpus {
            node: node.into(),
            gpus,
            zone: None,
            rack: None,
        };
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[&("u1".into(), 2)], vec![ng("a", 8), ng("b", 4)]);
        assert_eq!(got[&("u2".into(), 2)], vec![ng("c", 4)]);

        // The nodes' labels name the domain the local scheduler chose.
        let mut got = got;
        locate_nodes(&mut got, &[node("a", 8, "True", false)], &config());
        let a = &got[&("u1".into(), 2)][0];
        assert_eq!(
            (a.zone.as_deref(), a.rack.as_deref()),
            (Some("z1"), Some("r1"))
        );
        let b = &got[&("u1".into(), 2)][1];
        assert_eq!(
            (b.zone.as_deref(), b.rack.as_deref()),
            (None, None),
            "unknown node"
        );
    }

    #[test]
    fn histogram_counts_only_schedulable_healthy_nodes() {
        let nodes = [
            node("a", 8, "True", false),
            node("b", 8, "True", true),
            node("c", 8, "False", false),
        ];
        let pods = [
            pod("a", "Running", "3"),
            pod("b", "Running", "8"),
            pod("a", "Succeeded", "5"),
        ];
        let d = build_digest(&config(), &nodes, &pods, DateTime::UNIX_EPOCH);
        let c = &d.pools[0].counts;
        assert_eq!(c.total, 24);
        assert_eq!(c.allocated, 11);
        assert_eq!(c.cordoned, 8);
        assert_eq!(c.unhealthy, 8);
        assert_eq!(c.free_histogram, [0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn junk_quantities_do_not_panic_or_bloat() {
        let mut n = node("a", 8, "True", false);
        let st = n.status.as_mut().unwrap();
        st.allocatable
            .as_mut()
            .unwrap()
            .insert(GPU_RESOURCE.into(), Quantity("4294967295".into()));
        st.capacity
            .as_mut()
            .unwrap()
            .insert(GPU_RESOURCE.into(), Quantity("lots".into()));
        let d = build_digest(
            &config(),
            &[n],
            &[pod("a", "Running", "-1")],
            DateTime::UNIX_EPOCH,
        );
        let c = &d.pools[0].counts;
        assert_eq!(c.total, MAX_NODE_GPUS);
        assert_eq!(c.free_histogram.len(), MAX_NODE_GPUS as usize + 1);
    }

    #[test]
    fn init_and_sidecar_containers_follow_scheduler_rules() {
        let c = |gpus: &str, always: bool| -> Container {
            serde_json::from_value(json!({
                "name": "c",
                "restartPolicy": if always { Some("Always") } else { None },
                "resources": {"requests": {"nvidia.com/gpu": gpus}}
            }))
            .unwrap()
        };
        assert_eq!(pod_gpus(&[c("2", false)], Some(&[c("4", false)])), 4);
        assert_eq!(pod_gpus(&[c("2", false)], Some(&[c("1", true)])), 3);
        assert_eq!(pod_gpus(&[c("2", false), c("2", false)], None), 4);
    }

    #[test]
    fn nodes_without_pool_are_skipped_unless_defaulted() {
        let mut n = node("a", 8, "True", false);
        n.metadata
            .labels
            .as_mut()
            .unwrap()
            .remove("tideway.dev/pool");
        let mut cfg = config();
        assert!(
            build_digest(&cfg, &[n.clone()], &[], DateTime::UNIX_EPOCH)
                .pools
                .is_empty()
        );
        cfg.nodes.default_pool = Some("default".into());
        let d = build_digest(&cfg, &[n], &[], DateTime::UNIX_EPOCH);
        assert_eq!(d.pools[0].pool, "default");
    }
}
