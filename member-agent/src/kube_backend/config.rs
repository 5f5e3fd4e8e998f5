//! `KubeConfig`: how the agent maps one Kubernetes cluster onto Tideway's model.
//!
//! Kubernetes clusters label their nodes in many ways; rather than guess, the operator states
//! which labels carry the pool, the GPU model and the topology. The config is read from the
//! agent's `--config` YAML, so every field is camelCase and unknown fields are errors: a typo
//! in a label key would otherwise silently produce an empty digest.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tideway_api::PoolKind;
use tideway_api::meta::{validate_label_key, validate_label_value, validate_name};

/// The extended resource the NVIDIA device plugin advertises.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Which local gang scheduler turns our jobs into pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerMode {
    /// A `batch.volcano.sh/v1alpha1` Job: gang via `minAvailable`, queue via `spec.queue`.
    Volcano,
    /// A suspended `batch/v1` Job that Kueue admits through a LocalQueue.
    Kueue,
}

/// Configuration of the kube backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeConfig {
    /// The member cluster's name in the federation; stamped on every digest.
    pub cluster: String,
    /// Where the agent creates jobs. Nodes and pods are read cluster-wide.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    pub mode: SchedulerMode,
    #[serde(default)]
    pub volcano: VolcanoConfig,
    #[serde(default)]
    pub kueue: KueueConfig,
    #[serde(default)]
    pub nodes: NodeLabels,
    /// Kind of each pool named by the pool label; a pool not listed here is `shared`, the
    /// kind that makes no promise to either training or inference.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, PoolKind>,
    /// Flavor -> the node labels that identify it, e.g.
    /// `H100: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}` or
    /// `L4: {node.kubernetes.io/instance-type: g6.xlarge}`. Used both ways: a node matching
    /// every label of a flavor has that flavor, and a job of that flavor gets those labels as
    /// its node selector. A flavor not listed is the raw value of the first `nodes.gpuModel`
    /// label present, selected by the first `nodes.gpuModel` key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flavors: BTreeMap<String, BTreeMap<String, String>>,
    /// Image of the placeholder container used when a workload carries no template: it holds
    /// the GPUs, which is what a capacity reservation or a smoke test needs.
    #[serde(default = "default_image")]
    pub default_image: String,
}

/// Volcano-specific settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VolcanoConfig {
    /// The Volcano queue of every job; when absent, the workload's own `spec.queue`, so that
    /// federation queues and Volcano queues can share names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

/// Kueue-specific settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KueueConfig {
    /// The LocalQueue (in `namespace`) every job is submitted to.
    #[serde(default = "default_local_queue")]
    pub local_queue: String,
}

impl Default for KueueConfig {
    fn default() -> Self {
        Self {
            local_queue: default_local_queue(),
        }
    }
}

/// Which node labels carry what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeLabels {
    /// Label naming the node's pool.
    #[serde(default = "default_pool_label")]
    pub pool: String,
    /// Pool of GPU nodes without the pool label; when absent such nodes are not reported,
    /// since a node nobody assigned to a pool is not ours to offer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_pool: Option<String>,
    /// Labels naming the GPU model, first match wins: GPU feature discovery's product label
    /// is precise, the instance type is the fallback on clouds without it.
    #[serde(default = "default_gpu_model_labels")]
    pub gpu_model: Vec<String>,
    #[serde(default = "default_zone_label")]
    pub zone: String,
    /// Rack (or NVLink/InfiniBand island) label; no rack domains are reported without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// Node condition types that mark the node's GPUs unhealthy when `True` (set by node
    /// problem detector or DCGM-based health checks). `Ready != True` always does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_conditions: Vec<String>,
    /// Node condition types that mean correctable ECC errors are piling up when `True`: the
    /// node is cordoned and its workloads get a checkpoint notice before they are evicted
    /// (see `node_health`; the label `tideway.dev/gpu-fault=ecc` does the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ecc_conditions: Vec<String>,
    /// Cordon faulty GPU nodes (`spec.unschedulable`); `false` only reports and evicts.
    #[serde(default = "default_true")]
    pub cordon_faulty: bool,
}

impl Default for NodeLabels {
    fn default() -> Self {
        Self {
            pool: default_pool_label(),
            default_pool: None,
            gpu_model: default_gpu_model_labels(),
            zone: default_zone_label(),
            rack: None,
            unhealthy_conditions: Vec::new(),
            ecc_conditions: Vec::new(),
            cordon_faulty: true,
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_namespace() -> String {
    "tideway".to_owned()
}
fn default_local_queue() -> String {
    "tideway".to_owned()
}
fn default_image() -> String {
    "registry.k8s.io/pause:3.10".to_owned()
}
fn default_pool_label() -> String {
    "tideway.dev/pool".to_owned()
}
fn default_gpu_model_labels() -> Vec<String> {
    vec![
        "nvidia.com/gpu.product".to_owned(),
        "node.kubernetes.io/instance-type".to_owned(),
    ]
}
fn default_zone_label() -> String {
    "topology.kubernetes.io/zone".to_owned()
}

/// A config that would make the backend misbehave; caught at start-up, not at first use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kube backend config: {field}: {reason}")]
pub struct ConfigError {
    pub field: String,
    pub reason: String,
}

impl KubeConfig {
    /// A config with the defaults for everything but the cluster name and the mode.
    pub fn new(cluster: impl Into<String>, mode: SchedulerMode) -> Self {
        Self {
            cluster: cluster.into(),
            namespace: default_namespace(),
            mode,
            volcano: VolcanoConfig::default(),
            kueue: KueueConfig::default(),
            nodes: NodeLabels::default(),
            pools: BTreeMap::new(),
            flavors: BTreeMap::new(),
            default_image: default_image(),
        }
    }

    /// Checks what Kubernetes would reject later (names, label keys), naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: &str, reason: String| ConfigError {
            field: field.to_owned(),
            reason,
        };
        if self.cluster.is_empty() {
            return Err(err("cluster", "must not be empty".to_owned()));
        }
        validate_name(&self.namespace).map_err(|e| err("namespace", e.to_string()))?;
        if self.mode == SchedulerMode::Kueue {
            validate_label_value(&self.kueue.local_queue)
                .map_err(|e| err("kueue.localQueue", e.to_string()))?;
            if self.kueue.local_queue.is_empty() {
                return Err(err("kueue.localQueue", "must not be empty".to_owned()));
            }
        }
        if let Some(q) = &self.volcano.queue
            && q.is_empty()
        {
            return Err(err("volcano.queue", "must not be empty".to_owned()));
        }
        validate_label_key(&self.nodes.pool).map_err(|e| err("nodes.pool", e.to_string()))?;
        validate_label_key(&self.nodes.zone).map_err(|e| err("nodes.zone", e.to_string()))?;
        if let Some(rack) = &self.nodes.rack {
            validate_label_key(rack).map_err(|e| err("nodes.rack", e.to_string()))?;
        }
        if self.nodes.gpu_model.is_empty() {
            return Err(err(
                "nodes.gpuModel",
                "must name at least one label".to_owned(),
            ));
        }
        for (i, key) in self.nodes.gpu_model.iter().enumerate() {
            validate_label_key(key)
                .map_err(|e| err(&format!("nodes.gpuModel[{i}]"), e.to_string()))?;
        }
        for (flavor, sel) in &self.flavors {
            let field = format!("flavors.{flavor}");
            if sel.is_empty() {
                return Err(err(&field, "must name at least one node label".to_owned()));
            }
            for (k, v) in sel {
                validate_label_key(k)
                    .and_then(|()| validate_label_value(v))
                    .map_err(|e| err(&field, e.to_string()))?;
            }
        }
        if self.default_image.is_empty() {
            return Err(err("defaultImage", "must not be empty".to_owned()));
        }
        Ok(())
    }

    /// The flavor of a node with `labels`: the first configured flavor whose labels all
    /// match, else the value of the first GPU model label present.
    pub fn flavor_of_node(&self, labels: &BTreeMap<String, String>) -> Option<String> {
        self.flavors
            .iter()
            .find(|(_, sel)| sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map(|(flavor, _)| flavor.clone())
            .or_else(|| {
                self.nodes
                    .gpu_model
                    .iter()
                    .find_map(|key| labels.get(key).filter(|v| !v.is_empty()).cloned())
            })
    }

    /// The node selector that places a pod of `flavor`.
    pub fn flavor_selector(&self, flavor: &str) -> BTreeMap<String, String> {
        match self.flavors.get(flavor) {
            Some(sel) => sel.clone(),
            None => self
                .nodes
                .gpu_model
                .first()
                .map(|key| BTreeMap::from([(key.clone(), flavor.to_owned())]))
                .unwrap_or_default(),
        }
    }

    pub fn pool_kind(&self, pool: &str) -> PoolKind {
        self.pools.get(pool).copied().unwrap_or(PoolKind::Shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_with_defaults() {
        let yaml = "cluster: gpu-west\nmode: volcano\nnodes:\n  rack: tideway.dev/rack\n";
        let cfg: KubeConfig = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(cfg.namespace, "tideway");
        assert_eq!(cfg.nodes.pool, "tideway.dev/pool");
        assert_eq!(
            cfg.nodes.gpu_model,
            ["nvidia.com/gpu.product", "node.kubernetes.io/instance-type"]
        );
        assert_eq!(cfg.nodes.zone, "topology.kubernetes.io/zone");
        assert_eq!(cfg.nodes.rack.as_deref(), Some("tideway.dev/rack"));
        assert_eq!(cfg.volcano.queue, None);
        assert!(
            cfg.nodes.cordon_faulty,
            "faulty nodes are cordoned by default"
        );
        assert!(cfg.nodes.ecc_conditions.is_empty());
        cfg.validate().unwrap();
    }

    #[test]
    fn unknown_fields_are_errors() {
        let yaml = "cluster: a\nmode: kueue\nnodes:\n  rak: x\n";
        assert!(serde_saphyr::from_str::<KubeConfig>(yaml).is_err());
    }

    #[test]
    fn validate_names_the_field() {
        let mut cfg = KubeConfig::new("a", SchedulerMode::Kueue);
        cfg.nodes.rack = Some("Bad Key".into());
        assert_eq!(cfg.validate().unwrap_err().field, "nodes.rack");
        let mut cfg = KubeConfig::new("a", SchedulerMode::Kueue);
        cfg.kueue.local_queue = String::new();
        assert_eq!(cfg.validate().unwrap_err().field, "kueue.localQueue");
        let mut cfg = KubeConfig::new("a", SchedulerMode::Volcano);
        cfg.namespace = "Bad".into();
        assert_eq!(cfg.validate().unwrap_err().field, "namespace");
    }

    #[test]
    fn flavor_mapping_both_ways() {
        let mut cfg = KubeConfig::new("a", SchedulerMode::Volcano);
        let h100 = BTreeMap::from([(
            "nvidia.com/gpu.product".to_owned(),
            "NVIDIA-H100-80GB-HBM3".to_owned(),
        )]);
        cfg.flavors.insert("H100".into(), h100.clone());
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(cfg.flavor_of_node(&h100).as_deref(), Some("H100"));
        let l4 = labels(&[("node.kubernetes.io/instance-type", "g6.xlarge")]);
        assert_eq!(cfg.flavor_of_node(&l4).as_deref(), Some("g6.xlarge"));
        assert_eq!(cfg.flavor_of_node(&labels(&[("x", "y")])), None);
        assert_eq!(cfg.flavor_selector("H100"), h100);
        assert_eq!(
            cfg.flavor_selector("A100"),
            labels(&[("nvidia.com/gpu.product", "A100")])
        );
        assert_eq!(cfg.pool_kind("anything"), PoolKind::Shared);
        cfg.flavors.insert("Empty".into(), BTreeMap::new());
        assert_eq!(cfg.validate().unwrap_err().field, "flavors.Empty");
    }
}
