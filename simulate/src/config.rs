//! The two config files of a run: the fleet (`clusters.yaml`) and the policy (`policy.yaml`,
//! a `Policy` bundle plus a `simulator` section).
//!
//! The policy file is a real `Policy` document with one extra top-level key, so the same
//! queues and scheduler settings can be applied to a live federation with `tideway policy
//! apply` after the extra key is dropped: what was simulated is what runs. Both files are
//! decoded strictly (unknown fields are errors that name the field): a typo in a config must
//! not silently turn into a default and a misleading result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tideway_agent::sim::{
    ClusterConfig, CsvLayout, CsvModel, Inventory, UniformLayout, inventory::ZoneConfig,
};
use tideway_api::{ObjectMeta, Policy, PolicySpec, PoolKind, Validate, decode_yaml};
use tideway_scheduler::SchedulerTuning;

use super::error::SimulateError;

/// `clusters.yaml`: the member clusters of the simulated fleet.
///
/// ```yaml
/// clusters:
///   - name: philly
///     region: us-east
///     uniform: { nodes: 352, gpusPerNode: 8, model: P100 }
///   - name: lab
///     region: eu-west
///     layout: lab-cluster.yaml        # a sim-backend cluster YAML, relative to this file
///   - name: edge
///     region: ap-south
///     zones: [ ... ]                  # the same layout inline
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FleetConfig {
    pub clusters: Vec<MemberConfig>,
}

/// One member cluster: exactly one of `uniform`, `layout`, `zones` or `nodesCsv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MemberConfig {
    pub name: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uniform: Option<UniformConfig>,
    /// Path of a sim-backend cluster YAML (`cluster`, `region`, `zones`); its name and
    /// region are replaced by this entry's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<PathBuf>,
    /// The sim-backend layout inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<ZoneConfig>>,
    /// Nodes taken from the Alibaba node inventory CSV.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_csv: Option<NodesCsvConfig>,
}

/// A regular cluster. `nodes` is the short form: `zones` zones of racks of `nodesPerRack`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UniformConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    #[serde(default = "one")]
    pub zones: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub racks_per_zone: Option<u32>,
    #[serde(default = "eight")]
    pub nodes_per_rack: u32,
    #[serde(default = "eight")]
    pub gpus_per_node: u32,
    pub model: String,
    #[serde(default = "training")]
    pub pool: String,
    #[serde(default = "training_kind")]
    pub pool_kind: PoolKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodesCsvConfig {
    /// Relative to the clusters file.
    pub path: PathBuf,
    pub models: Vec<CsvModelConfig>,
    #[serde(default)]
    pub offset: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default = "eight")]
    pub nodes_per_rack: u32,
    #[serde(default = "eight")]
    pub racks_per_zone: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CsvModelConfig {
    pub model: String,
    pub pool: String,
    pub pool_kind: PoolKind,
}

fn one() -> u32 {
    1
}
fn eight() -> u32 {
    8
}
fn training() -> String {
    "training".to_owned()
}
fn training_kind() -> PoolKind {
    PoolKind::Training
}

/// A member cluster ready to simulate.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub region: String,
    pub inventory: Inventory,
}

impl FleetConfig {
    pub fn load(path: &Path) -> Result<Vec<Member>, SimulateError> {
        let bytes = read(path)?;
        let cfg: FleetConfig = decode_yaml(&bytes).map_err(|source| SimulateError::Decode {
            path: path.to_owned(),
            source,
        })?;
        cfg.members(path.parent().unwrap_or(Path::new(".")), path)
    }

    /// Builds every member; `base` resolves relative layout paths.
    pub fn members(&self, base: &Path, path: &Path) -> Result<Vec<Member>, SimulateError> {
        let bad = |field: String, reason: String| SimulateError::Config {
            path: path.to_owned(),
            field,
            reason,
        };
        if self.clusters.is_empty() {
            return Err(bad(
                "clusters".into(),
                "must list at least one cluster".into(),
            ));
        }
        let mut out: Vec<Member> = Vec::with_capacity(self.clusters.len());
        for (i, m) in self.clusters.iter().enumerate() {
            let field = format!("clusters[{i}]");
            if out.iter().any(|o| o.name == m.name) {
                return Err(bad(
                    format!("{field}.name"),
                    format!("duplicate cluster {:?}", m.name),
                ));
            }
            let given = [
                m.uniform.is_some(),
                m.layout.is_some(),
                m.zones.is_some(),
                m.nodes_csv.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if given != 1 {
                return Err(bad(
                    field,
                    "give exactly one of `uniform`, `layout`, `zones` or `nodesCsv`".into(),
                ));
            }
            let inv_err = |source| SimulateError::Inventory {
                path: path.to_owned(),
                cluster: m.name.clone(),
                source,
            };
            let inventory = if let Some(u) = &m.uniform {
                let layout = u
                    .layout(&m.name, &m.region)
                    .map_err(|reason| bad(format!("{field}.uniform"), reason))?;
                ClusterConfig::uniform(&layout)
                    .into_inventory()
                    .map_err(inv_err)?
            } else if let Some(file) = &m.layout {
                let file = base.join(file);
                let bytes = read(&file)?;
                let mut cfg: ClusterConfig =
                    decode_yaml(&bytes).map_err(|source| SimulateError::Decode {
                        path: file.clone(),
                        source,
                    })?;
                cfg.cluster = m.name.clone();
                cfg.region = m.region.clone();
                cfg.into_inventory().map_err(inv_err)?
            } else if let Some(zones) = &m.zones {
                ClusterConfig {
                    cluster: m.name.clone(),
                    region: m.region.clone(),
                    zones: zones.clone(),
                }
                .into_inventory()
                .map_err(inv_err)?
            } else if let Some(csv) = &m.nodes_csv {
                let layout = CsvLayout {
                    cluster: m.name.clone(),
                    region: m.region.clone(),
                    models: csv
                        .models
                        .iter()
                        .map(|c| CsvModel {
                            model: c.model.clone(),
                            pool: c.pool.clone(),
                            pool_kind: c.pool_kind,
                        })
                        .collect(),
                    offset: csv.offset,
                    limit: csv.limit,
                    nodes_per_rack: csv.nodes_per_rack,
                    racks_per_zone: csv.racks_per_zone,
                };
                Inventory::from_csv_file(&base.join(&csv.path), &layout).map_err(inv_err)?
            } else {
                unreachable_layout(&field, path)?
            };
            out.push(Member {
                name: m.name.clone(),
                region: m.region.clone(),
                inventory,
            });
        }
        Ok(out)
    }
}

/// Counted above: exactly one layout is present. Kept as an error rather than a panic so a
/// future variant that forgets a branch fails loudly but safely.
fn unreachable_layout(field: &str, path: &Path) -> Result<Inventory, SimulateError> {
    Err(SimulateError::Config {
        path: path.to_owned(),
        field: field.to_owned(),
        reason: "no layout given".into(),
    })
}

impl UniformConfig {
    fn layout(&self, cluster: &str, region: &str) -> Result<UniformLayout, String> {
        if self.zones == 0 || self.nodes_per_rack == 0 {
            return Err("zones and nodesPerRack must be at least 1".into());
        }
        let racks_per_zone = match (self.nodes, self.racks_per_zone) {
            (Some(_), Some(_)) => {
                return Err("give either `nodes` or `racksPerZone`, not both".into());
            }
            (None, Some(r)) => r,
            (None, None) => return Err("give `nodes` or `racksPerZone`".into()),
            (Some(n), None) => {
                let per_zone = self.zones * self.nodes_per_rack;
                if n == 0 || n % per_zone != 0 {
                    return Err(format!(
                        "nodes ({n}) must be a positive multiple of zones x nodesPerRack ({per_zone})"
                    ));
                }
                n / per_zone
            }
        };
        Ok(UniformLayout {
            cluster: cluster.to_owned(),
            region: region.to_owned(),
            zones: self.zones,
            racks_per_zone,
            nodes_per_rack: self.nodes_per_rack,
            gpus_per_node: self.gpus_per_node,
            model: self.model.clone(),
            pool: self.pool.clone(),
            pool_kind: self.pool_kind,
        })
    }
}

/// How pending work is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Strict FIFO per queue with head-of-line blocking, queue quotas as hard ceilings, the
    /// first cluster that fits: the baseline every published trace study compares with.
    #[default]
    Fifo,
    /// Tideway's scheduler core: priorities, fair share, borrowing, backfill without
    /// head-of-line blocking, reservations for big gangs, preemption.
    Scheduler,
}

/// What the scheduler is told about run times. The sim cluster always runs a job for its
/// trace duration; this only changes what the scheduler may plan with (reservations and
/// backfill use estimates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Estimates {
    /// The live leader's online estimator, learned from the jobs completed so far in the
    /// run (the trace's durations are never read before a job ends).
    #[default]
    Online,
    /// No estimates at all: the core plans with its conservative default.
    None,
    /// The true duration (an oracle, as SJF/SRTF in the Helios study assume).
    Exact,
}

/// How running work is shown to the scheduler core each cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RunningView {
    /// `exact` when preemption or per-user limits need individual workloads, else
    /// `aggregate`.
    #[default]
    Auto,
    /// Every running workload, individually.
    Exact,
    /// One entry per queue, cluster, pool, priority class, pod size and expected-end
    /// bucket: quota, fair share and reservations come out the same (reservations up to the
    /// bucket width), at a per-cycle cost that does not grow with the running count.
    Aggregate,
}

/// Which pending work a scheduler-mode cycle shows the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PendingView {
    /// Every pending workload whose decision could be other than "pending" (it could fit
    /// the free capacity, could get a reservation, holds one, or preemption is on), plus
    /// enough others that the core counts who waits per flavor as it would with all: the
    /// same decisions as `all` (checked by a test), at a cost that follows the free
    /// capacity rather than the backlog.
    #[default]
    Fit,
    /// Every pending workload, as the live leader passes them: slow on long backlogs, for
    /// checking `fit`.
    All,
}

/// The `simulator` section of `policy.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct SimulatorSettings {
    pub mode: Mode,
    /// GPU model of trace jobs that name none (Philly, Alibaba); defaults to the fleet's only
    /// model.
    pub flavor: Option<String>,
    /// Trace tenant (Philly VC, Alibaba app) -> queue. Unmapped tenants use a queue of the
    /// tenant's own name (lower-cased, `_` -> `-`).
    pub queue_map: BTreeMap<String, String>,
    /// Queue -> member clusters its workloads may run on (`placement.clusters`). Pinning
    /// each VC's queue to its own cluster reproduces the per-VC setup of published studies.
    pub queue_clusters: BTreeMap<String, Vec<String>>,
    pub runtime_estimates: Estimates,
    /// Workloads from traces checkpoint every this many seconds (so a preemption loses at
    /// most this much work); none when unset.
    pub checkpoint_interval_seconds: Option<u64>,
    /// No longer used: the pending view is chosen by `pendingView` (see `sched`), which
    /// shows the core every workload whose decision could differ from "pending". Accepted
    /// so that files written for earlier versions still load; a warning says it is ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_window: Option<usize>,
    /// Scheduler mode: at most this many pending workloads of one queue that could start
    /// are shown per cycle; when a cycle assigned work and left such work out, it runs again
    /// at the same instant (Slurm's `bf_max_job_test` plays the same role).
    pub lookahead: usize,
    /// Scheduler mode: which pending work each cycle shows the core.
    pub pending_view: PendingView,
    pub running_view: RunningView,
    /// Time between `timeseries.csv` rows; by default about 2,000 rows over the run.
    pub sample_seconds: Option<u64>,
    /// The scheduler core's knobs. Written here by files from before the policy carried
    /// them (`spec.scheduler.tuning`), and still accepted: loading copies them into the
    /// policy, and otherwise copies the policy's here, so both always hold the same values.
    pub tuning: SchedulerTuning,
}

impl Default for SimulatorSettings {
    fn default() -> Self {
        Self {
            mode: Mode::default(),
            flavor: None,
            queue_map: BTreeMap::new(),
            queue_clusters: BTreeMap::new(),
            runtime_estimates: Estimates::default(),
            checkpoint_interval_seconds: None,
            head_window: None,
            lookahead: 2000,
            pending_view: PendingView::default(),
            running_view: RunningView::default(),
            sample_seconds: None,
            tuning: SchedulerTuning::default(),
        }
    }
}

/// `policy.yaml`: a `Policy` with a `simulator` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyFile {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: PolicySpec,
    #[serde(default)]
    simulator: SimulatorSettings,
}

/// A validated policy and the simulator's settings.
#[derive(Debug, Clone)]
pub struct SimPolicy {
    pub policy: Policy,
    pub simulator: SimulatorSettings,
}

impl SimPolicy {
    pub fn load(path: &Path) -> Result<Self, SimulateError> {
        let bytes = read(path)?;
        Self::from_yaml(&bytes, path)
    }

    pub fn from_yaml(bytes: &[u8], path: &Path) -> Result<Self, SimulateError> {
        let file: PolicyFile = decode_yaml(bytes).map_err(|source| SimulateError::Decode {
            path: path.to_owned(),
            source,
        })?;
        let mut file = file;
        // One set of knobs: the policy's, or the simulator section's (the older spelling).
        // Both given and different would leave a reader guessing which one ran.
        let in_policy = &file.spec.scheduler.tuning;
        let in_sim = &file.simulator.tuning;
        if !in_sim.is_default() {
            if !in_policy.is_default() && in_policy != in_sim {
                return Err(SimulateError::Config {
                    path: path.to_owned(),
                    field: "simulator.tuning".to_owned(),
                    reason: "differs from spec.scheduler.tuning: set the knobs in one place \
                             (spec.scheduler.tuning, which the live leader reads too)"
                        .to_owned(),
                });
            }
            file.spec.scheduler.tuning = in_sim.clone();
        } else {
            file.simulator.tuning = in_policy.clone();
        }
        let mut policy = Policy::new(file.metadata.name.clone(), file.spec);
        policy.api_version = file.api_version;
        policy.kind = file.kind;
        policy.metadata = file.metadata;
        policy.validate().map_err(|errors| SimulateError::Invalid {
            path: path.to_owned(),
            errors,
        })?;
        let s = &file.simulator;
        let bad = |field: &str, reason: &str| SimulateError::Config {
            path: path.to_owned(),
            field: format!("simulator.{field}"),
            reason: reason.to_owned(),
        };
        if s.lookahead == 0 {
            return Err(bad("lookahead", "must be at least 1"));
        }
        if s.sample_seconds == Some(0) {
            return Err(bad("sampleSeconds", "must be at least 1"));
        }
        if s.checkpoint_interval_seconds == Some(0) {
            return Err(bad("checkpointIntervalSeconds", "must be at least 1"));
        }
        for (tenant, queue) in &s.queue_map {
            if policy.spec.queue(queue).is_none() {
                return Err(bad(
                    &format!("queueMap.{tenant}"),
                    &format!("queue {queue:?} is not defined in this policy"),
                ));
            }
        }
        for queue in s.queue_clusters.keys() {
            if policy.spec.queue(queue).is_none() {
                return Err(bad(
                    &format!("queueClusters.{queue}"),
                    &format!("queue {queue:?} is not defined in this policy"),
                ));
            }
        }
        Ok(Self {
            policy,
            simulator: file.simulator,
        })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, SimulateError> {
    std::fs::read(path).map_err(|source| SimulateError::Read {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_short_form_and_errors() {
        let yaml = br#"
clusters:
  - name: a
    region: r
    uniform: { nodes: 16, gpusPerNode: 8, model: P100 }
  - name: b
    region: r
    zones:
      - name: z
        racks:
          - name: r1
            nodeGroups: [{ count: 2, gpusPerNode: 4, model: T4, pool: infer, poolKind: inference }]
"#;
        let cfg: FleetConfig = decode_yaml(yaml).unwrap();
        let m = cfg.members(Path::new("."), Path::new("c.yaml")).unwrap();
        assert_eq!(m[0].inventory.nodes().len(), 16);
        assert_eq!(m[1].inventory.nodes().len(), 2);

        let bad: FleetConfig = decode_yaml(
            b"clusters: [{name: a, region: r, uniform: {nodes: 12, nodesPerRack: 8, model: P100}}]",
        )
        .unwrap();
        let e = bad
            .members(Path::new("."), Path::new("c.yaml"))
            .unwrap_err();
        assert!(e.to_string().contains("clusters[0].uniform"), "{e}");

        let both: FleetConfig = decode_yaml(
            b"clusters: [{name: a, region: r, uniform: {nodes: 8, model: P100}, layout: x.yaml}]",
        )
        .unwrap();
        assert!(
            both.members(Path::new("."), Path::new("c.yaml"))
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
        assert!(decode_yaml::<FleetConfig>(b"clusters: [{name: a, regoin: r}]").is_err());
    }

    #[test]
    fn nodes_from_the_alibaba_inventory() {
        let yaml = br#"
clusters:
  - name: ali
    region: cn
    nodesCsv:
      path: ../shared/traces/alibaba-nodes-2026/node_info_df.csv
      models: [{ model: A10, pool: serving, poolKind: inference }]
      limit: 100
"#;
        let cfg: FleetConfig = decode_yaml(yaml).unwrap();
        // The crate sits one level below the repository, whose sibling is `shared/`.
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let m = cfg.members(&base, Path::new("c.yaml")).unwrap();
        assert_eq!(m[0].inventory.nodes().len(), 100);
        assert!(m[0].inventory.nodes().iter().all(|n| n.model == "A10"));
    }

    #[test]
    fn policy_with_simulator_section() {
        let yaml = br#"
apiVersion: tideway.dev/v1alpha1
kind: Policy
metadata: { name: p }
spec:
  queues:
    - apiVersion: tideway.dev/v1alpha1
      kind: Queue
      metadata: { name: vc1 }
      spec: { tenant: vc1, quotas: [{ flavor: P100, guaranteed: 64, borrowingLimit: 0 }] }
simulator:
  mode: scheduler
  queueMap: { "6214e9": vc1 }
  tuning: { reservationAfterSeconds: 60 }
"#;
        let p = SimPolicy::from_yaml(yaml, Path::new("p.yaml")).unwrap();
        assert_eq!(p.simulator.mode, Mode::Scheduler);
        assert_eq!(p.simulator.tuning.reservation_after_seconds, 60);
        assert_eq!(p.simulator.lookahead, 2000, "defaulted");

        let typo = String::from_utf8_lossy(yaml).replace("queueMap", "queueMpa");
        let e = SimPolicy::from_yaml(typo.as_bytes(), Path::new("p.yaml")).unwrap_err();
        assert!(e.to_string().contains("queueMpa"), "{e}");

        // A misspelled tuning knob is an error naming it, not a silent default.
        let knob = String::from_utf8_lossy(yaml)
            .replace("reservationAfterSeconds: 60", "maxReservation: 0");
        let e = SimPolicy::from_yaml(knob.as_bytes(), Path::new("p.yaml")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("simulator.tuning"), "{msg}");
        assert!(msg.contains("maxReservation"), "{msg}");
        assert!(
            msg.contains("maxReservations"),
            "expected fields listed: {msg}"
        );
        let weights = String::from_utf8_lossy(yaml).replace(
            "reservationAfterSeconds: 60",
            "weights: { binpack: 1, spred: 2 }",
        );
        let e = SimPolicy::from_yaml(weights.as_bytes(), Path::new("p.yaml")).unwrap_err();
        assert!(e.to_string().contains("spred"), "{e}");
        // Files written for earlier versions still load.
        let old = String::from_utf8_lossy(yaml)
            .replace("mode: scheduler", "mode: scheduler\n  headWindow: 4");
        assert_eq!(
            SimPolicy::from_yaml(old.as_bytes(), Path::new("p.yaml"))
                .unwrap()
                .simulator
                .head_window,
            Some(4)
        );

        let dangling = String::from_utf8_lossy(yaml).replace("\"6214e9\": vc1", "\"6214e9\": nope");
        let e = SimPolicy::from_yaml(dangling.as_bytes(), Path::new("p.yaml")).unwrap_err();
        assert!(e.to_string().contains("simulator.queueMap"), "{e}");
    }

    /// The knobs are the policy's (`spec.scheduler.tuning`, which the live leader reads);
    /// the simulator section's older spelling is copied into the policy it runs, and a file
    /// that sets both differently is refused rather than guessed at.
    #[test]
    fn tuning_in_the_policy_or_the_simulator_section_runs_the_same() {
        let base = r#"apiVersion: tideway.dev/v1alpha1
kind: Policy
metadata: { name: p }
spec:
  queues:
    - apiVersion: tideway.dev/v1alpha1
      kind: Queue
      metadata: { name: vc1 }
      spec: { tenant: vc1 }
  scheduler:
    preemption: true
POLICY
simulator:
  mode: scheduler
SIM
"#;
        let load = |policy: &str, sim: &str| {
            let y = base.replace("POLICY", policy).replace("SIM", sim);
            SimPolicy::from_yaml(y.as_bytes(), Path::new("p.yaml"))
        };
        let in_policy = load("    tuning: { reclaimMinGpus: 12 }", "").unwrap();
        let in_sim = load("", "  tuning: { reclaimMinGpus: 12 }").unwrap();
        for p in [&in_policy, &in_sim] {
            assert_eq!(p.policy.spec.scheduler.tuning.reclaim_min_gpus, Some(12));
            assert_eq!(p.simulator.tuning, p.policy.spec.scheduler.tuning);
        }
        assert_eq!(in_policy.policy.spec, in_sim.policy.spec);
        // The same values in both places are one setting.
        load(
            "    tuning: { reclaimMinGpus: 12 }",
            "  tuning: { reclaimMinGpus: 12 }",
        )
        .unwrap();
        let e = load(
            "    tuning: { reclaimMinGpus: 12 }",
            "  tuning: { reclaimMinGpus: 16 }",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("simulator.tuning"), "{e}");
        assert!(e.contains("spec.scheduler.tuning"), "{e}");
        // Out of range in the older spelling is caught by the policy's checks.
        let e = load("", "  tuning: { reservationIdleFactor: -1 }")
            .unwrap_err()
            .to_string();
        assert!(e.contains("reservationIdleFactor"), "{e}");
    }
}
