//! Node health -> predictive cordon and checkpoint notices, for the kube backend.
//!
//! The sim backend is told about node faults through `tideway agent fault`; on Kubernetes the
//! agent reads them from the Node objects it lists for every digest anyway (no extra API call
//! to notice a fault). A node is faulty when:
//!
//! - its `Ready` condition is `False` or `Unknown` (or absent): the kubelet is gone or sick,
//!   so its pods are lost or about to be -> **NotReady**, evict now;
//! - it carries the label [`GPU_FAULT_LABEL`] (`tideway.dev/gpu-fault`, set by an operator, a
//!   DCGM health check or a node-problem-detector plugin): the value `ecc` means correctable
//!   ECC errors are piling up (the GPU still works, but is likely to fail) -> **ECC warning**,
//!   checkpoint notice and evict after the grace; any other value (`xid-79`, `true`...) means
//!   the GPU is broken -> **GPU fault**, evict now;
//! - a condition listed in `nodes.unhealthyConditions` (e.g. NPD's `GpuUnhealthy`) is `True`
//!   -> **GPU fault**; one listed in `nodes.eccConditions` is `True` -> **ECC warning**.
//!
//! For each faulty node the agent cordons the node (`spec.unschedulable`, with the annotation
//! [`CORDONED_FOR`] saying why, so an operator sees who did it and nothing else uncordons it
//! by accident), and gives every workload with a pod there the preemption notice: its jobs
//! get `tideway.dev/preempt-at` (now, or now + the ECC grace) and `tideway.dev/checkpoint-
//! requested`, and the agent's status poll deletes them at the deadline and reports them
//! Evicted, so the federation requeues them from their last checkpoint. The next digest
//! counts the node's GPUs as unhealthy or cordoned. The agent never uncordons: a node it
//! cordoned stays cordoned until an operator repairs and uncordons it.
//!
//! Pure: from listed objects to actions, tested on recorded Node shapes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use super::config::KubeConfig;

/// The label that reports a GPU fault on a node (`ecc`: an ECC warning; anything else: a
/// GPU fault).
pub const GPU_FAULT_LABEL: &str = "tideway.dev/gpu-fault";
/// The annotation the agent puts on a node it cordoned, saying why.
pub const CORDONED_FOR: &str = "tideway.dev/cordoned-for";
/// How long a workload on a node with an ECC warning has to checkpoint before it is evicted
/// (as the sim's ECC faults).
pub const ECC_GRACE: Duration = Duration::from_secs(60);

/// What is wrong with a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeFault {
    /// `Ready` is not `True`.
    NotReady,
    /// A GPU is broken: the label's value or the condition's type.
    GpuFault(String),
    /// Correctable ECC errors: checkpoint and move before the GPU fails.
    EccWarning,
}

impl NodeFault {
    /// How long the workloads on the node get to checkpoint before they are evicted.
    pub fn grace(&self) -> Duration {
        match self {
            NodeFault::EccWarning => ECC_GRACE,
            NodeFault::NotReady | NodeFault::GpuFault(_) => Duration::ZERO,
        }
    }

    /// For people: the node annotation, the eviction reason, the log.
    pub fn describe(&self, node: &str) -> String {
        match self {
            NodeFault::NotReady => format!("node {node} is NotReady"),
            NodeFault::GpuFault(what) => format!("GPU fault on node {node} ({what})"),
            NodeFault::EccWarning => format!("ECC errors on node {node}: checkpoint and move"),
        }
    }
}

/// The node's fault, if it has one; a GPU fault outranks an ECC warning, which outranks
/// NotReady (a NotReady node with a broken GPU is reported for the GPU).
pub fn node_fault(config: &KubeConfig, node: &Node) -> Option<NodeFault> {
    let label = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(GPU_FAULT_LABEL))
        .map(|v| v.trim())
        .filter(|v| !v.is_empty() && !v.eq_ignore_ascii_case("false"));
    if let Some(v) = label {
        return Some(if v.eq_ignore_ascii_case("ecc") {
            NodeFault::EccWarning
        } else {
            NodeFault::GpuFault(v.to_owned())
        });
    }
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let is_true = |types: &[String]| {
        conditions
            .iter()
            .find(|c| c.status == "True" && types.contains(&c.type_))
            .map(|c| c.type_.clone())
    };
    if let Some(t) = is_true(&config.nodes.unhealthy_conditions) {
        return Some(NodeFault::GpuFault(t));
    }
    if is_true(&config.nodes.ecc_conditions).is_some() {
        return Some(NodeFault::EccWarning);
    }
    let ready = conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (!ready).then_some(NodeFault::NotReady)
}

/// What the agent does about its faulty nodes this round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthActions {
    /// Nodes to cordon (not yet unschedulable), with the reason for the annotation.
    pub cordon: Vec<(String, String)>,
    /// Workloads (by UID) to give the preemption notice, with its grace and reason; the
    /// shortest grace wins when a workload spans several faulty nodes.
    pub evict: BTreeMap<String, (Duration, String)>,
}

/// The actions for `nodes`, given where each workload attempt's pods are (`occupied`, from
/// the digest's pod list). Only GPU nodes the digest counts are considered: a faulty node
/// without GPUs is not ours to cordon.
pub fn plan(
    config: &KubeConfig,
    nodes: &[Node],
    occupied: &BTreeMap<(String, u32), Vec<tideway_api::NodeGpus>>,
) -> HealthActions {
    let mut out = HealthActions::default();
    let mut faulty: BTreeMap<&str, NodeFault> = BTreeMap::new();
    for node in nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let gpus = node
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get(super::config::GPU_RESOURCE))
            .is_some_and(|q| q.0.trim() != "0");
        if !gpus {
            continue;
        }
        let Some(fault) = node_fault(config, node) else {
            continue;
        };
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if !cordoned {
            out.cordon.push((name.to_owned(), fault.describe(name)));
        }
        faulty.insert(name, fault);
    }
    for ((uid, _), on) in occupied {
        for ng in on {
            let Some(fault) = faulty.get(ng.node.as_str()) else {
                continue;
            };
            let grace = fault.grace();
            let e = out
                .evict
                .entry(uid.clone())
                .or_insert_with(|| (grace, fault.describe(&ng.node)));
            if grace < e.0 {
                *e = (grace, fault.describe(&ng.node));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_backend::config::SchedulerMode;
    use serde_json::json;

    fn config() -> KubeConfig {
        let mut c = KubeConfig::new("west", SchedulerMode::Volcano);
        c.nodes.unhealthy_conditions = vec!["GpuUnhealthy".into()];
        c.nodes.ecc_conditions = vec!["GpuEccErrors".into()];
        c
    }

    /// A Node as `kubectl get node -o json` shows one (trimmed to what we read).
    fn node(name: &str, ready: &str, labels: serde_json::Value, extra: &[(&str, &str)]) -> Node {
        let mut conditions = vec![json!({"type": "Ready", "status": ready})];
        for (t, s) in extra {
            conditions.push(json!({"type": t, "status": s}));
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": conditions
            }
        }))
        .expect("node")
    }

    #[test]
    fn faults_come_from_ready_labels_and_configured_conditions() {
        let c = config();
        let none = json!({});
        assert_eq!(node_fault(&c, &node("a", "True", none.clone(), &[])), None);
        assert_eq!(
            node_fault(&c, &node("a", "False", none.clone(), &[])),
            Some(NodeFault::NotReady)
        );
        assert_eq!(
            node_fault(&c, &node("a", "Unknown", none.clone(), &[])),
            Some(NodeFault::NotReady)
        );
        assert_eq!(
            node_fault(&c, &node("a", "True", json!({GPU_FAULT_LABEL: "ecc"}), &[])),
            Some(NodeFault::EccWarning)
        );
        assert_eq!(
            node_fault(
                &c,
                &node("a", "True", json!({GPU_FAULT_LABEL: "xid-79"}), &[])
            ),
            Some(NodeFault::GpuFault("xid-79".into()))
        );
        assert_eq!(
            node_fault(
                &c,
                &node("a", "True", json!({GPU_FAULT_LABEL: "false"}), &[])
            ),
            None,
            "a cleared label"
        );
        assert_eq!(
            node_fault(
                &c,
                &node("a", "True", none.clone(), &[("GpuUnhealthy", "True")])
            ),
            Some(NodeFault::GpuFault("GpuUnhealthy".into()))
        );
        assert_eq!(
            node_fault(
                &c,
                &node("a", "True", none.clone(), &[("GpuUnhealthy", "False")])
            ),
            None
        );
        assert_eq!(
            node_fault(
                &c,
                &node("a", "True", none.clone(), &[("GpuEccErrors", "True")])
            ),
            Some(NodeFault::EccWarning)
        );
        assert_eq!(
            node_fault(&c, &node("a", "True", none, &[("MemoryPressure", "True")])),
            None,
            "an unconfigured condition"
        );
        // A broken GPU outranks NotReady.
        assert_eq!(
            node_fault(
                &c,
                &node("a", "False", json!({GPU_FAULT_LABEL: "xid"}), &[])
            ),
            Some(NodeFault::GpuFault("xid".into()))
        );
    }

    fn on(node: &str) -> Vec<tideway_api::NodeGpus> {
        vec![tideway_api::NodeGpus {
            node: node.into(),
            gpus: 8,
            zone: None,
            rack: None,
        }]
    }

    #[test]
    fn faulty_nodes_are_cordoned_and_their_work_noticed() {
        let c = config();
        let mut cordoned = node("n-down", "Unknown", json!({}), &[]);
        if let Some(s) = cordoned.spec.as_mut() {
            s.unschedulable = Some(true);
        }
        let nodes = vec![
            node("n-ok", "True", json!({}), &[]),
            node("n-ecc", "True", json!({GPU_FAULT_LABEL: "ecc"}), &[]),
            node("n-xid", "True", json!({GPU_FAULT_LABEL: "xid-48"}), &[]),
            cordoned,
        ];
        let mut occupied = BTreeMap::new();
        occupied.insert(("u-ok".to_string(), 1), on("n-ok"));
        occupied.insert(("u-ecc".to_string(), 1), on("n-ecc"));
        occupied.insert(("u-down".to_string(), 2), on("n-down"));
        // A gang across the ECC node and the broken one: evicted now.
        let mut both = on("n-ecc");
        both.extend(on("n-xid"));
        occupied.insert(("u-both".to_string(), 1), both);
        let a = plan(&c, &nodes, &occupied);
        assert_eq!(
            a.cordon,
            vec![
                ("n-ecc".to_string(), NodeFault::EccWarning.describe("n-ecc")),
                (
                    "n-xid".to_string(),
                    NodeFault::GpuFault("xid-48".into()).describe("n-xid")
                ),
            ],
            "the already cordoned NotReady node is not patched again"
        );
        assert!(!a.evict.contains_key("u-ok"));
        assert_eq!(a.evict["u-ecc"].0, ECC_GRACE);
        assert_eq!(a.evict["u-down"].0, Duration::ZERO);
        assert!(a.evict["u-down"].1.contains("NotReady"));
        assert_eq!(a.evict["u-both"].0, Duration::ZERO, "the shortest grace");
        assert!(a.evict["u-both"].1.contains("xid-48"));
    }

    #[test]
    fn nodes_without_gpus_are_left_alone() {
        let c = config();
        let mut n: Node = node("cpu", "False", json!({}), &[]);
        if let Some(s) = n.status.as_mut() {
            s.capacity = None;
            s.allocatable = None;
        }
        assert_eq!(plan(&c, &[n], &BTreeMap::new()), HealthActions::default());
    }
}
