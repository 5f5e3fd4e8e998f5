//! What a simulated member cluster is made of: zones, racks and GPU nodes in pools.
//!
//! Two sources build the same validated [`Inventory`]: a hand-written YAML config (the demo,
//! `tideway dev`, tests) and the real Alibaba node inventory CSV (realistic fleets for the
//! trace simulator). The CSV has no topology, so racks and zones are laid out
//! deterministically: the same file and layout always give the same cluster, which keeps
//! simulations replayable.
//!
//! Validation collects every problem with the field (YAML path or CSV line and column) that
//! caused it, because someone fixing a config wants all problems at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use tideway_api::{
    DecodeError, FieldError, PoolKind, ValidationErrors, decode_yaml, validate_name,
};

/// The simulator keeps every node in memory and scans them per scheduling pass; a count
/// beyond this is a typo (GPUs typed where nodes were meant), not a cluster.
pub const MAX_NODES: usize = 100_000;

/// The API bounds GPUs per pod by the same number: no real node has more.
pub const MAX_GPUS_PER_NODE: u32 = tideway_api::workload::MAX_GPUS_PER_POD;

/// Longest name or identifier we accept, the DNS-label limit Kubernetes uses too.
const MAX_IDENTIFIER_LEN: usize = tideway_api::meta::MAX_NAME_LEN;

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not parse or does not match the config shape; names the field.
    #[error("cluster config: {0}")]
    Decode(#[from] DecodeError),
    /// The config or layout parsed but is not a valid cluster; every problem with its field.
    #[error("invalid cluster inventory: {0}")]
    Invalid(ValidationErrors),
    /// A row of the inventory CSV is unusable. `line` is 1-based and counts the header.
    #[error("inventory CSV line {line}, column {column}: {reason}")]
    Csv {
        line: usize,
        column: String,
        reason: String,
    },
}

/// A simulated cluster as written in YAML.
///
/// ```yaml
/// cluster: sim-eu-1
/// region: eu-west
/// zones:
///   - name: eu-west-1a
///     racks:
///       - name: a-r1
///         nodeGroups:
///           - { count: 4, gpusPerNode: 8, model: H100, pool: training, poolKind: training }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterConfig {
    pub cluster: String,
    pub region: String,
    pub zones: Vec<ZoneConfig>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ZoneConfig {
    pub name: String,
    pub racks: Vec<RackConfig>,
}

/// Rack names are unique across the cluster, not just the zone: the capacity digest names
/// topology domains by name alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RackConfig {
    pub name: String,
    pub node_groups: Vec<NodeGroupConfig>,
}

/// `count` identical nodes; they are named `<rack>-n<i>` with `i` counted across the rack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeGroupConfig {
    pub count: u32,
    pub gpus_per_node: u32,
    /// The GPU model, which is the quota flavor.
    pub model: String,
    pub pool: String,
    pub pool_kind: PoolKind,
}

/// A regular cluster in a few numbers: the shape of most test and benchmark fleets.
#[derive(Debug, Clone, PartialEq)]
pub struct UniformLayout {
    pub cluster: String,
    pub region: String,
    pub zones: u32,
    pub racks_per_zone: u32,
    pub nodes_per_rack: u32,
    pub gpus_per_node: u32,
    pub model: String,
    pub pool: String,
    pub pool_kind: PoolKind,
}

impl ClusterConfig {
    /// Zones `z<i>`, racks `z<i>-r<j>`: short names, because every rack name is repeated in
    /// every capacity digest.
    pub fn uniform(layout: &UniformLayout) -> Self {
        let zones = (0..layout.zones)
            .map(|z| ZoneConfig {
                name: format!("z{z}"),
                racks: (0..layout.racks_per_zone)
                    .map(|r| RackConfig {
                        name: format!("z{z}-r{r}"),
                        node_groups: vec![NodeGroupConfig {
                            count: layout.nodes_per_rack,
                            gpus_per_node: layout.gpus_per_node,
                            model: layout.model.clone(),
                            pool: layout.pool.clone(),
                            pool_kind: layout.pool_kind,
                        }],
                    })
                    .collect(),
            })
            .collect();
        Self {
            cluster: layout.cluster.clone(),
            region: layout.region.clone(),
            zones,
        }
    }

    /// Every problem, each named by its YAML path (`zones[0].racks[1].nodeGroups[0].count`).
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errors = Vec::new();
        check_name(&mut errors, "cluster", &self.cluster);
        check_identifier(&mut errors, "region", &self.region);
        if self.zones.is_empty() {
            errors.push(FieldError::new("zones", "must list at least one zone"));
        }
        let mut zone_names = BTreeSet::new();
        let mut rack_names = BTreeSet::new();
        let mut pool_kinds: BTreeMap<&str, PoolKind> = BTreeMap::new();
        let mut nodes: u64 = 0;
        for (zi, zone) in self.zones.iter().enumerate() {
            let zp = format!("zones[{zi}]");
            check_name(&mut errors, format!("{zp}.name"), &zone.name);
            if !zone_names.insert(zone.name.as_str()) {
                errors.push(FieldError::new(
                    format!("{zp}.name"),
                    format!("duplicate zone {:?}", zone.name),
                ));
            }
            if zone.racks.is_empty() {
                errors.push(FieldError::new(
                    format!("{zp}.racks"),
                    "must list at least one rack",
                ));
            }
            for (ri, rack) in zone.racks.iter().enumerate() {
                let rp = format!("{zp}.racks[{ri}]");
                check_name(&mut errors, format!("{rp}.name"), &rack.name);
                if !rack_names.insert(rack.name.as_str()) {
                    errors.push(FieldError::new(
                        format!("{rp}.name"),
                        format!(
                            "duplicate rack {:?} (rack names are cluster-wide)",
                            rack.name
                        ),
                    ));
                }
                if rack.node_groups.is_empty() {
                    errors.push(FieldError::new(
                        format!("{rp}.nodeGroups"),
                        "must list at least one node group",
                    ));
                }
                for (gi, group) in rack.node_groups.iter().enumerate() {
                    let gp = format!("{rp}.nodeGroups[{gi}]");
                    if group.count == 0 {
                        errors.push(FieldError::new(format!("{gp}.count"), "must be at least 1"));
                    }
                    nodes += u64::from(group.count);
                    check_gpus(
                        &mut errors,
                        format!("{gp}.gpusPerNode"),
                        group.gpus_per_node,
                    );
                    check_identifier(&mut errors, format!("{gp}.model"), &group.model);
                    check_name(&mut errors, format!("{gp}.pool"), &group.pool);
                    match pool_kinds.get(group.pool.as_str()) {
                        Some(kind) if *kind != group.pool_kind => errors.push(FieldError::new(
                            format!("{gp}.poolKind"),
                            format!(
                                "pool {:?} is {} elsewhere in this config",
                                group.pool,
                                pool_kind_str(*kind)
                            ),
                        )),
                        Some(_) => {}
                        None => {
                            pool_kinds.insert(&group.pool, group.pool_kind);
                        }
                    }
                }
            }
        }
        if nodes > MAX_NODES as u64 {
            errors.push(FieldError::new(
                "zones",
                format!("at most {MAX_NODES} nodes in total (got {nodes})"),
            ));
        }
        finish(errors)
    }

    /// Validates, then expands node groups into nodes.
    pub fn into_inventory(self) -> Result<Inventory, InventoryError> {
        self.validate().map_err(InventoryError::Invalid)?;
        let mut pools = BTreeMap::new();
        let mut nodes = Vec::new();
        for zone in &self.zones {
            for rack in &zone.racks {
                let mut i = 0u32;
                for group in &rack.node_groups {
                    pools.insert(group.pool.clone(), group.pool_kind);
                    for _ in 0..group.count {
                        nodes.push(NodeSpec {
                            name: format!("{}-n{i}", rack.name),
                            zone: zone.name.clone(),
                            rack: rack.name.clone(),
                            pool: group.pool.clone(),
                            model: group.model.clone(),
                            gpus: group.gpus_per_node,
                        });
                        i += 1;
                    }
                }
            }
        }
        Ok(Inventory {
            cluster: self.cluster,
            region: self.region,
            pools,
            nodes,
        })
    }
}

/// Which CSV nodes to take and how to lay them out.
///
/// Nodes of the listed models are taken in file order, `offset` of them are skipped and at
/// most `limit` kept. They are then grouped by model (in the order `models` lists them, so
/// racks are homogeneous like real ones), cut into racks of `nodes_per_rack` and zones of
/// `racks_per_zone` racks.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvLayout {
    pub cluster: String,
    pub region: String,
    pub models: Vec<CsvModel>,
    pub offset: usize,
    pub limit: Option<usize>,
    pub nodes_per_rack: u32,
    pub racks_per_zone: u32,
}

/// A GPU model to take from the CSV and the pool its nodes join.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvModel {
    pub model: String,
    pub pool: String,
    pub pool_kind: PoolKind,
}

impl CsvLayout {
    /// Every problem, named by the field of this struct in camelCase.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errors = Vec::new();
        check_name(&mut errors, "cluster", &self.cluster);
        check_identifier(&mut errors, "region", &self.region);
        if self.models.is_empty() {
            errors.push(FieldError::new(
                "models",
                "must list at least one GPU model",
            ));
        }
        let mut seen = BTreeSet::new();
        let mut pool_kinds: BTreeMap<&str, PoolKind> = BTreeMap::new();
        for (i, m) in self.models.iter().enumerate() {
            check_identifier(&mut errors, format!("models[{i}].model"), &m.model);
            if !seen.insert(m.model.as_str()) {
                errors.push(FieldError::new(
                    format!("models[{i}].model"),
                    format!("duplicate model {:?}", m.model),
                ));
            }
            check_name(&mut errors, format!("models[{i}].pool"), &m.pool);
            match pool_kinds.get(m.pool.as_str()) {
                Some(kind) if *kind != m.pool_kind => errors.push(FieldError::new(
                    format!("models[{i}].poolKind"),
                    format!(
                        "pool {:?} is {} for another model",
                        m.pool,
                        pool_kind_str(*kind)
                    ),
                )),
                Some(_) => {}
                None => {
                    pool_kinds.insert(&m.pool, m.pool_kind);
                }
            }
        }
        if self.limit == Some(0) {
            errors.push(FieldError::new("limit", "must be at least 1"));
        }
        if self.limit.is_some_and(|l| l > MAX_NODES) {
            errors.push(FieldError::new(
                "limit",
                format!("must be at most {MAX_NODES}"),
            ));
        }
        if self.nodes_per_rack == 0 {
            errors.push(FieldError::new("nodesPerRack", "must be at least 1"));
        }
        if self.racks_per_zone == 0 {
            errors.push(FieldError::new("racksPerZone", "must be at least 1"));
        }
        finish(errors)
    }
}

/// One node of the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    pub name: String,
    pub zone: String,
    pub rack: String,
    pub pool: String,
    pub model: String,
    pub gpus: u32,
}

/// A validated cluster: node names and rack names are unique, every node's pool has a kind,
/// GPUs per node are within bounds. Only the builders below create one, so a `SimCluster`
/// never has to re-check.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    cluster: String,
    region: String,
    pools: BTreeMap<String, PoolKind>,
    nodes: Vec<NodeSpec>,
}

/// Column names of `node_info_df.csv`.
const CSV_MODEL: &str = "gpu_model";
const CSV_GPUS: &str = "gpu_capacity_num";
const CSV_NODE: &str = "node_name";

impl Inventory {
    pub fn from_yaml(bytes: &[u8]) -> Result<Self, InventoryError> {
        decode_yaml::<ClusterConfig>(bytes)?.into_inventory()
    }

    pub fn from_yaml_file(path: &Path) -> Result<Self, InventoryError> {
        Self::from_yaml(&read(path)?)
    }

    pub fn from_csv_file(path: &Path, layout: &CsvLayout) -> Result<Self, InventoryError> {
        let bytes = read(path)?;
        let text = String::from_utf8(bytes).map_err(|e| InventoryError::Csv {
            line: 0,
            column: String::new(),
            reason: format!("not UTF-8: {e}"),
        })?;
        Self::from_csv_str(&text, layout)
    }

    /// Builds from the Alibaba inventory format (`gpu_model,gpu_capacity_num,cpu_num,
    /// node_name`; column order free, extra columns ignored, RFC 4180 quoting).
    pub fn from_csv_str(text: &str, layout: &CsvLayout) -> Result<Self, InventoryError> {
        layout.validate().map_err(InventoryError::Invalid)?;
        let mut lines = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes())
            .into_records()
            .map(|r| {
                let line = r
                    .as_ref()
                    .ok()
                    .and_then(|r| r.position())
                    .map_or(0, |p| p.line() as usize);
                (line, r)
            })
            .filter(|(_, r)| {
                // A whitespace-only line, trimmed, is one empty field: not a row.
                !r.as_ref()
                    .is_ok_and(|r| r.len() == 1 && r.get(0).is_some_and(str::is_empty))
            });
        let (header_line, header) = lines.next().ok_or_else(|| InventoryError::Csv {
            line: 1,
            column: String::new(),
            reason: "the file is empty".to_owned(),
        })?;
        let header = header.map_err(|e| InventoryError::Csv {
            line: header_line,
            column: String::new(),
            reason: e.to_string(),
        })?;
        let columns: Vec<&str> = header.iter().collect();
        let column = |name: &str| {
            columns
                .iter()
                .position(|c| *c == name)
                .ok_or_else(|| InventoryError::Csv {
                    line: header_line,
                    column: name.to_owned(),
                    reason: "missing from the header".to_owned(),
                })
        };
        let (model_col, gpus_col, node_col) =
            (column(CSV_MODEL)?, column(CSV_GPUS)?, column(CSV_NODE)?);

        let wanted: BTreeMap<&str, usize> = layout
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| (m.model.as_str(), i))
            .collect();
        let limit = layout.limit.unwrap_or(MAX_NODES);
        // (model rank, node name, gpus), in file order.
        let mut selected: Vec<(usize, String, u32)> = Vec::new();
        let mut names = BTreeSet::new();
        let mut matched = 0usize;
        for (line, row) in lines {
            let row = row.map_err(|e| InventoryError::Csv {
                line,
                column: String::new(),
                reason: e.to_string(),
            })?;
            let fields: Vec<&str> = row.iter().collect();
            if fields.len() != columns.len() {
                return Err(InventoryError::Csv {
                    line,
                    column: String::new(),
                    reason: format!(
                        "has {} fields, the header has {}",
                        fields.len(),
                        columns.len()
                    ),
                });
            }
            let Some(&rank) = wanted.get(fields[model_col]) else {
                continue;
            };
            matched += 1;
            if matched <= layout.offset {
                continue;
            }
            if selected.len() >= limit {
                break;
            }
            let csv_err = |column: &str, reason: String| InventoryError::Csv {
                line,
                column: column.to_owned(),
                reason,
            };
            let gpus: u32 = fields[gpus_col].parse().map_err(|e| {
                csv_err(
                    CSV_GPUS,
                    format!("{:?} is not a GPU count: {e}", fields[gpus_col]),
                )
            })?;
            if !(1..=MAX_GPUS_PER_NODE).contains(&gpus) {
                return Err(csv_err(
                    CSV_GPUS,
                    format!("must be between 1 and {MAX_GPUS_PER_NODE} (got {gpus})"),
                ));
            }
            let name = fields[node_col];
            if let Err(e) = validate_name(name) {
                return Err(csv_err(CSV_NODE, format!("{name:?}: {e}")));
            }
            if !names.insert(name.to_owned()) {
                return Err(csv_err(CSV_NODE, format!("duplicate node {name:?}")));
            }
            selected.push((rank, name.to_owned(), gpus));
        }
        if selected.is_empty() {
            return Err(InventoryError::Invalid(ValidationErrors(vec![
                FieldError::new(
                    if matched == 0 { "models" } else { "offset" },
                    format!(
                        "selects no node ({matched} nodes of the listed models, offset {})",
                        layout.offset
                    ),
                ),
            ])));
        }
        // Stable: file order within each model.
        selected.sort_by_key(|(rank, _, _)| *rank);

        let per_rack = layout.nodes_per_rack as usize;
        let per_zone = layout.racks_per_zone as usize;
        let mut nodes = Vec::with_capacity(selected.len());
        let mut rack_index = 0usize;
        let mut in_rack = 0usize;
        let mut last_rank = None;
        for (rank, name, gpus) in selected {
            // A new model starts a new rack, so racks stay homogeneous.
            if in_rack == per_rack || (last_rank.is_some() && last_rank != Some(rank)) {
                rack_index += 1;
                in_rack = 0;
            }
            last_rank = Some(rank);
            in_rack += 1;
            let m = &layout.models[rank];
            let zone = format!("z{}", rack_index / per_zone);
            nodes.push(NodeSpec {
                name,
                rack: format!("{zone}-r{}", rack_index % per_zone),
                zone,
                pool: m.pool.clone(),
                model: m.model.clone(),
                gpus,
            });
        }
        let pools = layout
            .models
            .iter()
            .map(|m| (m.pool.clone(), m.pool_kind))
            .collect();
        Ok(Self {
            cluster: layout.cluster.clone(),
            region: layout.region.clone(),
            pools,
            nodes,
        })
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The same layout under another member's name and region: one layout file can describe
    /// many members (the digest names the cluster, and the federation checks that name).
    pub fn renamed(mut self, cluster: Option<&str>, region: Option<&str>) -> Self {
        if let Some(c) = cluster {
            self.cluster = c.to_owned();
        }
        if let Some(r) = region {
            self.region = r.to_owned();
        }
        self
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    pub fn pools(&self) -> &BTreeMap<String, PoolKind> {
        &self.pools
    }

    pub fn nodes(&self) -> &[NodeSpec] {
        &self.nodes
    }

    pub fn total_gpus(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.gpus)).sum()
    }

    /// GPUs per (pool, model): what the capacity digest's totals must add up to.
    pub fn gpus_by_pool_and_model(&self) -> BTreeMap<(String, String), u64> {
        let mut out = BTreeMap::new();
        for n in &self.nodes {
            *out.entry((n.pool.clone(), n.model.clone())).or_insert(0) += u64::from(n.gpus);
        }
        out
    }
}

fn read(path: &Path) -> Result<Vec<u8>, InventoryError> {
    std::fs::read(path).map_err(|source| InventoryError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn finish(errors: Vec<FieldError>) -> Result<(), ValidationErrors> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ValidationErrors(errors))
    }
}

fn pool_kind_str(kind: PoolKind) -> &'static str {
    match kind {
        PoolKind::Training => "training",
        PoolKind::Inference => "inference",
        PoolKind::Shared => "shared",
    }
}

/// Zone, rack, pool and cluster names become label values and digest domain names.
fn check_name(errors: &mut Vec<FieldError>, field: impl Into<String>, value: &str) {
    if let Err(e) = validate_name(value) {
        errors.push(FieldError::new(field, e.to_string()));
    }
}

/// GPU models and regions keep their vendor's spelling ("A100-SXM4-80GB").
fn check_identifier(errors: &mut Vec<FieldError>, field: impl Into<String>, value: &str) {
    let reason = if value.is_empty() {
        Some("must not be empty".to_owned())
    } else if value.len() > MAX_IDENTIFIER_LEN {
        Some(format!("must be at most {MAX_IDENTIFIER_LEN} characters"))
    } else if !value.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Some(
            "must start with a letter or digit and contain only letters, digits, '-', '_' or '.'"
                .to_owned(),
        )
    } else {
        None
    };
    if let Some(reason) = reason {
        errors.push(FieldError::new(field, reason));
    }
}

fn check_gpus(errors: &mut Vec<FieldError>, field: String, gpus: u32) {
    if !(1..=MAX_GPUS_PER_NODE).contains(&gpus) {
        errors.push(FieldError::new(
            field,
            format!("must be between 1 and {MAX_GPUS_PER_NODE} (got {gpus})"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const SAMPLE: &str = include_str!("../../testdata/sim-cluster.yaml");
    const ALIBABA_CSV: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/traces/alibaba-nodes-2026/node_info_df.csv"
    );

    fn invalid_fields(err: InventoryError) -> ValidationErrors {
        match err {
            InventoryError::Invalid(errors) => errors,
            other => panic!("expected a validation error, got {other}"),
        }
    }

    #[test]
    fn sample_config_builds() {
        let inv = Inventory::from_yaml(SAMPLE.as_bytes()).unwrap();
        assert_eq!(inv.cluster(), "sim-eu-1");
        assert_eq!(inv.pools().len(), 2);
        assert_eq!(inv.pools()["training"], PoolKind::Training);
        assert_eq!(inv.pools()["inference"], PoolKind::Inference);
        let names: BTreeSet<_> = inv.nodes().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names.len(), inv.nodes().len(), "node names are unique");
        let by = inv.gpus_by_pool_and_model();
        assert_eq!(by.values().sum::<u64>(), inv.total_gpus());
        assert!(by.contains_key(&("training".to_owned(), "H100".to_owned())));
        assert!(by.contains_key(&("inference".to_owned(), "L40S".to_owned())));
    }

    #[test]
    fn node_names_count_across_the_groups_of_a_rack() {
        let yaml = "cluster: c\nregion: r\nzones:\n- name: z\n  racks:\n  - name: r1\n    nodeGroups:\n    - {count: 2, gpusPerNode: 8, model: H100, pool: p, poolKind: training}\n    - {count: 1, gpusPerNode: 4, model: L40S, pool: q, poolKind: inference}\n";
        let inv = Inventory::from_yaml(yaml.as_bytes()).unwrap();
        let names: Vec<_> = inv.nodes().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["r1-n0", "r1-n1", "r1-n2"]);
        assert_eq!(inv.nodes()[2].gpus, 4);
    }

    #[test]
    fn validation_names_every_bad_field() {
        let yaml = "cluster: Bad_Name\nregion: r\nzones:\n- name: z\n  racks:\n  - name: r1\n    nodeGroups:\n    - {count: 0, gpusPerNode: 65, model: H100, pool: p, poolKind: training}\n  - name: r1\n    nodeGroups:\n    - {count: 1, gpusPerNode: 8, model: '', pool: p, poolKind: inference}\n- name: z\n  racks: []\n";
        let errors = invalid_fields(Inventory::from_yaml(yaml.as_bytes()).unwrap_err());
        for field in [
            "cluster",
            "zones[0].racks[0].nodeGroups[0].count",
            "zones[0].racks[0].nodeGroups[0].gpusPerNode",
            "zones[0].racks[1].name",
            "zones[0].racks[1].nodeGroups[0].model",
            "zones[0].racks[1].nodeGroups[0].poolKind",
            "zones[1].name",
            "zones[1].racks",
        ] {
            assert!(errors.has_field(field), "{field} missing from: {errors}");
        }
    }

    #[test]
    fn decode_errors_name_the_field() {
        let yaml = "cluster: c\nregion: r\nzones:\n- name: z\n  racks:\n  - name: r1\n    nodeGroups:\n    - {count: -1, gpusPerNode: 8, model: H100, pool: p, poolKind: training}\n";
        match Inventory::from_yaml(yaml.as_bytes()).unwrap_err() {
            InventoryError::Decode(e) => {
                assert_eq!(e.field(), "zones[0].racks[0].nodeGroups[0].count", "{e}")
            }
            other => panic!("expected a decode error, got {other}"),
        }
        match Inventory::from_yaml(b"cluster: c\nregion: r\nzones: []\nextra: 1\n").unwrap_err() {
            InventoryError::Decode(e) => assert!(e.to_string().contains("extra"), "{e}"),
            other => panic!("expected a decode error, got {other}"),
        }
    }

    #[test]
    fn uniform_layout_builds_a_regular_cluster() {
        let inv = ClusterConfig::uniform(&UniformLayout {
            cluster: "u".into(),
            region: "r".into(),
            zones: 2,
            racks_per_zone: 3,
            nodes_per_rack: 4,
            gpus_per_node: 8,
            model: "H100".into(),
            pool: "train".into(),
            pool_kind: PoolKind::Training,
        })
        .into_inventory()
        .unwrap();
        assert_eq!(inv.nodes().len(), 24);
        assert_eq!(inv.total_gpus(), 192);
        assert_eq!(inv.nodes()[23].rack, "z1-r2");
        assert_eq!(inv.nodes()[23].name, "z1-r2-n3");
    }

    fn layout(models: &[(&str, &str, PoolKind)]) -> CsvLayout {
        CsvLayout {
            cluster: "ali".into(),
            region: "cn".into(),
            models: models
                .iter()
                .map(|(m, p, k)| CsvModel {
                    model: (*m).into(),
                    pool: (*p).into(),
                    pool_kind: *k,
                })
                .collect(),
            offset: 0,
            limit: None,
            nodes_per_rack: 2,
            racks_per_zone: 2,
        }
    }

    const CSV: &str = "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,128,0\nH800,8,192,1\nA10,1,128,2\nH800,8,192,3\nH800,8,192,4\nA10,1,128,5\n";

    #[test]
    fn csv_layout_is_deterministic_and_homogeneous() {
        let l = layout(&[
            ("H800", "train", PoolKind::Training),
            ("A10", "infer", PoolKind::Inference),
        ]);
        let inv = Inventory::from_csv_str(CSV, &l).unwrap();
        let got: Vec<_> = inv
            .nodes()
            .iter()
            .map(|n| {
                (
                    n.name.as_str(),
                    n.rack.as_str(),
                    n.zone.as_str(),
                    n.model.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("1", "z0-r0", "z0", "H800"),
                ("3", "z0-r0", "z0", "H800"),
                ("4", "z0-r1", "z0", "H800"),
                // a new model starts a new rack
                ("0", "z1-r0", "z1", "A10"),
                ("2", "z1-r0", "z1", "A10"),
                ("5", "z1-r1", "z1", "A10"),
            ]
        );
        assert_eq!(inv, Inventory::from_csv_str(CSV, &l).unwrap());
    }

    #[test]
    fn csv_offset_and_limit_apply_in_file_order() {
        let mut l = layout(&[("A10", "infer", PoolKind::Inference)]);
        l.offset = 1;
        l.limit = Some(1);
        let inv = Inventory::from_csv_str(CSV, &l).unwrap();
        let names: Vec<_> = inv.nodes().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["2"]);
        l.offset = 3;
        let errors = invalid_fields(Inventory::from_csv_str(CSV, &l).unwrap_err());
        assert!(errors.has_field("offset"), "{errors}");
    }

    #[test]
    fn csv_errors_name_line_and_column() {
        let l = layout(&[("A10", "infer", PoolKind::Inference)]);
        let bad = "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,128,0\nA10,x,128,1\n";
        match Inventory::from_csv_str(bad, &l).unwrap_err() {
            InventoryError::Csv { line, column, .. } => {
                assert_eq!((line, column.as_str()), (3, CSV_GPUS))
            }
            other => panic!("{other}"),
        }
        let dup = "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,128,0\nA10,1,128,0\n";
        assert!(matches!(
            Inventory::from_csv_str(dup, &l).unwrap_err(),
            InventoryError::Csv { line: 3, .. }
        ));
        let missing = "gpu_model,cpu_num,node_name\nA10,128,0\n";
        match Inventory::from_csv_str(missing, &l).unwrap_err() {
            InventoryError::Csv { line, column, .. } => {
                assert_eq!((line, column.as_str()), (1, CSV_GPUS))
            }
            other => panic!("{other}"),
        }
        let mut bad_layout = l.clone();
        bad_layout.nodes_per_rack = 0;
        bad_layout.models.clear();
        let errors = invalid_fields(Inventory::from_csv_str(CSV, &bad_layout).unwrap_err());
        assert!(
            errors.has_field("nodesPerRack") && errors.has_field("models"),
            "{errors}"
        );
    }

    #[test]
    fn csv_quoted_fields_are_one_field() {
        let l = layout(&[("A10", "infer", PoolKind::Inference)]);
        let quoted =
            "gpu_model,gpu_capacity_num,cpu_num,node_name\n\"A10\",1,\"12,8\",\"n-0\"\n  \n";
        let inv = Inventory::from_csv_str(quoted, &l).unwrap();
        let got: Vec<_> = inv
            .nodes()
            .iter()
            .map(|n| (n.name.as_str(), n.gpus))
            .collect();
        assert_eq!(got, [("n-0", 1)]);
    }

    /// Reads the real inventory and checks the slice against an independent count.
    #[test]
    fn alibaba_csv_slice_matches_the_file() {
        let Ok(text) = std::fs::read_to_string(ALIBABA_CSV) else {
            eprintln!("skipped: {ALIBABA_CSV} not found");
            return;
        };
        let mut l = layout(&[("A100-SXM4-80GB", "train", PoolKind::Training)]);
        l.limit = Some(200);
        l.nodes_per_rack = 8;
        l.racks_per_zone = 5;
        let inv = Inventory::from_csv_str(&text, &l).unwrap();
        let expected: Vec<(String, u32)> = text
            .lines()
            .skip(1)
            .filter_map(|line| {
                let f: Vec<&str> = line.split(',').collect();
                (f.first() == Some(&"A100-SXM4-80GB"))
                    .then(|| (f[3].to_owned(), f[1].parse().unwrap()))
            })
            .take(200)
            .collect();
        assert_eq!(expected.len(), 200, "the file has at least 200 A100 nodes");
        let got: Vec<(String, u32)> = inv
            .nodes()
            .iter()
            .map(|n| (n.name.clone(), n.gpus))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(
            inv.total_gpus(),
            expected.iter().map(|(_, g)| u64::from(*g)).sum::<u64>()
        );
        let racks: BTreeSet<_> = inv.nodes().iter().map(|n| n.rack.as_str()).collect();
        let zones: BTreeSet<_> = inv.nodes().iter().map(|n| n.zone.as_str()).collect();
        assert_eq!((racks.len(), zones.len()), (25, 5));

        // The cluster built from it reports the file's GPUs, all free.
        let cluster = crate::sim::SimCluster::new(&inv);
        let digest = crate::sim::capacity_digest(&cluster, chrono::DateTime::UNIX_EPOCH);
        let csv_gpus: u64 = expected.iter().map(|(_, g)| u64::from(*g)).sum();
        assert_eq!(digest.pools.len(), 1);
        assert_eq!(u64::from(digest.pools[0].counts.total), csv_gpus);
        assert_eq!(digest.pools[0].counts.free(), csv_gpus);
        assert_eq!(digest.pools[0].flavor, "A100-SXM4-80GB");
    }
}
