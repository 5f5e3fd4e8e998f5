//! A tiny fleet with real nodes for the scheduler's tests: it produces the digests the
//! scheduler reads, and applies its decisions by placing pods on actual nodes. A decision
//! that double-books capacity, splits a gang or breaks its topology fails there, so the
//! tests check the scheduler against the world, not against its own model.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use tideway_api::digest::{CapacityDigest, DomainDigest, GpuCounts, PoolDigest};
use tideway_api::{
    Aging, Checkpoint, FlavorQuota, Gang, PodSet, PoolKind, Preemptibility, PriorityClass,
    PriorityClassSpec, Queue, QueueSpec, SchedulerSettings, TopologyLevel, TopologyRequirement,
    Workload, WorkloadClass, WorkloadSpec,
};

use tideway_scheduler::decision::Decision;
use tideway_scheduler::input::{
    ClusterView, PendingWorkload, PreemptionBudget, Reservation, RunningWorkload, SchedulerInput,
    SchedulerTuning, uid_of,
};
use tideway_scheduler::{SchedulerOutput, schedule};

pub fn t0() -> DateTime<Utc> {
    "2030-01-01T00:00:00Z".parse().expect("valid")
}

#[derive(Debug, Clone)]
pub struct Node {
    pub cap: u32,
    pub used: u32,
}

#[derive(Debug, Clone)]
pub struct Rack {
    pub name: String,
    pub zone: String,
    pub nodes: Vec<Node>,
}

#[derive(Debug, Clone)]
pub struct SimPool {
    pub name: String,
    pub kind: PoolKind,
    pub flavor: String,
    pub racks: Vec<Rack>,
}

#[derive(Debug, Clone)]
pub struct SimCluster {
    pub name: String,
    pub region: String,
    pub ready: bool,
    pub pools: Vec<SimPool>,
    /// The topology levels the member declares; `None` declares nothing.
    pub declared_levels: Option<Vec<TopologyLevel>>,
}

/// Where a running workload's pods really are: (pool, rack, node, gpus).
#[derive(Debug, Clone)]
pub struct Running {
    pub rw: RunningWorkload,
    pub cluster: usize,
    pub slots: Vec<(usize, usize, usize, u32)>,
    pub ends_at: Option<DateTime<Utc>>,
    pub evict_at: Option<DateTime<Utc>>,
}

pub struct Fleet {
    pub now: DateTime<Utc>,
    pub clusters: Vec<SimCluster>,
    pub queues: Vec<Queue>,
    pub classes: Vec<PriorityClass>,
    pub settings: SchedulerSettings,
    pub tuning: SchedulerTuning,
    pub budget: PreemptionBudget,
    pub pending: Vec<PendingWorkload>,
    pub running: Vec<Running>,
    pub reservations: Vec<Reservation>,
    /// Preemptors not started yet, carried like the simulator carries them.
    pub preemptors: Vec<Reservation>,
    pub overrides: Vec<tideway_scheduler::input::QuotaOverride>,
    pub seq: u64,
    pub seed: u64,
    /// uid -> cluster of every assignment ever made.
    pub assigned: BTreeMap<String, String>,
    pub finished: Vec<String>,
    /// True run times by uid, for workloads whose estimate is not the truth (or is missing);
    /// others run for their `runtimeEstimateSeconds`, or forever without one.
    pub true_runtime: BTreeMap<String, i64>,
    /// Members do not report the nodes of running work (the scheduler then models freed
    /// GPUs pod by pod).
    pub hide_nodes: bool,
    /// First submission and completion of every workload, for completion times.
    pub submitted_at: BTreeMap<String, DateTime<Utc>>,
    pub completed_at: BTreeMap<String, DateTime<Utc>>,
}

/// A cluster with one pool of `flavor`: `racks` racks of `nodes` nodes of `gpus` GPUs, racks
/// named `zone/rack` with two zones when there is more than one rack.
pub fn cluster(
    name: &str,
    region: &str,
    flavor: &str,
    racks: usize,
    nodes: usize,
    gpus: u32,
) -> SimCluster {
    SimCluster {
        name: name.into(),
        region: region.into(),
        ready: true,
        declared_levels: None,
        pools: vec![pool(
            "train",
            PoolKind::Training,
            flavor,
            racks,
            nodes,
            gpus,
        )],
    }
}

pub fn pool(
    name: &str,
    kind: PoolKind,
    flavor: &str,
    racks: usize,
    nodes: usize,
    gpus: u32,
) -> SimPool {
    SimPool {
        name: name.into(),
        kind,
        flavor: flavor.into(),
        racks: (0..racks)
            .map(|r| {
                let zone = format!("z{}", r % 2);
                Rack {
                    name: format!("{zone}/r{r}"),
                    zone,
                    nodes: vec![Node { cap: gpus, used: 0 }; nodes],
                }
            })
            .collect(),
    }
}

pub fn queue(name: &str, cohort: Option<&str>, quotas: &[(&str, u32)]) -> Queue {
    let mut spec = QueueSpec::new("team");
    spec.cohort = cohort.map(str::to_owned);
    spec.quotas = quotas
        .iter()
        .map(|(f, g)| FlavorQuota::guaranteed(*f, *g))
        .collect();
    Queue::new(name, spec)
}

pub fn class(
    name: &str,
    value: i32,
    p: Preemptibility,
    aging: Option<(u32, u32)>,
) -> PriorityClass {
    let mut spec = PriorityClassSpec::new(value);
    spec.preemptibility = p;
    spec.aging = aging.map(|(rate_per_hour, cap)| Aging { rate_per_hour, cap });
    PriorityClass::new(name, spec)
}

/// A workload of `pods` pods of `gpus` GPUs of `flavor`, gang of all pods.
pub fn workload(
    uid: &str,
    queue: &str,
    prio: &str,
    flavor: &str,
    pods: u32,
    gpus: u32,
) -> Workload {
    let mut spec = WorkloadSpec::new(
        queue,
        WorkloadClass::Training,
        vec![PodSet::new("w", pods, gpus, flavor)],
    );
    spec.priority_class = prio.into();
    spec.gang = Some(Gang { min_count: pods });
    let mut w = Workload::new(uid, spec);
    w.metadata.uid = Some(uid.into());
    w
}

pub fn with_topology(mut w: Workload, level: TopologyLevel) -> Workload {
    w.spec.topology = Some(TopologyRequirement::Required(level));
    w
}

pub fn with_runtime(mut w: Workload, secs: u64) -> Workload {
    w.spec.runtime_estimate_seconds = Some(secs);
    w
}

pub fn with_checkpoint(mut w: Workload) -> Workload {
    w.spec.checkpoint = Some(Checkpoint {
        interval_seconds: 600,
        last_checkpoint_at: None,
    });
    w
}

fn counts(nodes: &[&Node]) -> GpuCounts {
    let max = nodes.iter().map(|n| n.cap).max().unwrap_or(0) as usize;
    let mut hist = vec![0u32; max + 1];
    let mut c = GpuCounts::default();
    for n in nodes {
        c.total += n.cap;
        c.allocated += n.used;
        hist[(n.cap - n.used) as usize] += 1;
    }
    c.free_histogram = hist;
    c
}

impl SimCluster {
    pub fn digest(&self) -> CapacityDigest {
        let pools = self
            .pools
            .iter()
            .map(|p| {
                let all: Vec<&Node> = p.racks.iter().flat_map(|r| r.nodes.iter()).collect();
                let mut domains: Vec<DomainDigest> = p
                    .racks
                    .iter()
                    .map(|r| DomainDigest {
                        level: TopologyLevel::Rack,
                        name: r.name.clone(),
                        zone: None,
                        counts: counts(&r.nodes.iter().collect::<Vec<_>>()),
                    })
                    .collect();
                let mut zones: Vec<&str> = p.racks.iter().map(|r| r.zone.as_str()).collect();
                zones.sort_unstable();
                zones.dedup();
                for z in zones {
                    let nodes: Vec<&Node> = p
                        .racks
                        .iter()
                        .filter(|r| r.zone == z)
                        .flat_map(|r| r.nodes.iter())
                        .collect();
                    domains.push(DomainDigest {
                        level: TopologyLevel::Zone,
                        name: z.into(),
                        zone: None,
                        counts: counts(&nodes),
                    });
                }
                PoolDigest {
                    pool: p.name.clone(),
                    kind: p.kind,
                    flavor: p.flavor.clone(),
                    counts: counts(&all),
                    domains,
                }
            })
            .collect();
        CapacityDigest {
            cluster: self.name.clone(),
            generated_at: t0(),
            pools,
        }
    }
}

impl Fleet {
    pub fn new(clusters: Vec<SimCluster>, queues: Vec<Queue>, classes: Vec<PriorityClass>) -> Self {
        Self {
            now: t0(),
            clusters,
            queues,
            classes,
            settings: SchedulerSettings::default(),
            // Reservations on (they are off by default): most scenarios here are about them,
            // and the property tests switch them off to compare.
            tuning: SchedulerTuning {
                max_reservations: 16,
                ..SchedulerTuning::default()
            },
            budget: PreemptionBudget::per_minute(100),
            pending: Vec::new(),
            running: Vec::new(),
            reservations: Vec::new(),
            preemptors: Vec::new(),
            overrides: Vec::new(),
            seq: 0,
            seed: 7,
            assigned: BTreeMap::new(),
            finished: Vec::new(),
            true_runtime: BTreeMap::new(),
            hide_nodes: false,
            submitted_at: BTreeMap::new(),
            completed_at: BTreeMap::new(),
        }
    }

    pub fn submit(&mut self, w: Workload) {
        self.submitted_at
            .entry(uid_of(&w).to_owned())
            .or_insert(self.now);
        self.seq += 1;
        self.pending.push(PendingWorkload {
            workload: w,
            submitted_at: self.now,
            seq: self.seq,
        });
    }

    pub fn input(&self) -> SchedulerInput {
        SchedulerInput {
            now: self.now,
            seed: self.seed,
            settings: SchedulerSettings {
                tuning: self.tuning.clone(),
                ..self.settings.clone()
            },
            queues: self.queues.clone(),
            priority_classes: self.classes.clone(),
            clusters: self
                .clusters
                .iter()
                .map(|c| ClusterView {
                    name: c.name.clone(),
                    region: c.region.clone(),
                    ready: c.ready,
                    digest: c.digest(),
                    declared_levels: c.declared_levels.clone(),
                })
                .collect(),
            pending: self.pending.clone(),
            running: self.running.iter().map(|r| self.reported(r)).collect(),
            reservations: self.reservations.clone(),
            preemption_budget: self.budget,
            quota_overrides: self.overrides.clone(),
            rollout: None,
            preemptors: self.preemptors.clone(),
            unshown_pending: Default::default(),
        }
    }

    /// A running workload as its member reports it: with the nodes its pods occupy, unless
    /// `hide_nodes` (a member that does not say).
    fn reported(&self, r: &Running) -> RunningWorkload {
        let mut rw = r.rw.clone();
        if self.hide_nodes {
            return rw;
        }
        let mut nodes: BTreeMap<String, u32> = BTreeMap::new();
        for (pi, ri, ni, g) in &r.slots {
            *nodes
                .entry(format!(
                    "{}-p{pi}-r{ri}-n{ni}",
                    self.clusters[r.cluster].name
                ))
                .or_insert(0) += g;
        }
        let status = rw.workload.status.get_or_insert_with(Default::default);
        status.nodes = nodes
            .into_iter()
            .map(|(node, gpus)| tideway_api::NodeGpus {
                node,
                gpus,
                zone: None,
                rack: None,
            })
            .collect();
        rw
    }

    /// Puts a workload straight onto `cluster` as running since `started` (None: admitted
    /// but not started), placing its pods on real nodes.
    pub fn start_on(&mut self, w: Workload, cluster: &str, started: Option<DateTime<Utc>>) {
        let ci = self.cluster_index(cluster);
        let pool = self.clusters[ci].pools[0].name.clone();
        let placement = tideway_scheduler::input::PoolPlacement {
            flavor: w.spec.pod_sets[0].flavor.to_string(),
            pool,
            domain: None,
            pods: vec![tideway_scheduler::input::PodCount {
                gpus_per_pod: w.spec.pod_sets[0].gpus_per_pod,
                count: w.spec.pod_sets[0].count,
            }],
        };
        let slots = self
            .place(ci, &placement, w.spec.topology)
            .unwrap_or_else(|e| panic!("start_on {}: {e}", uid_of(&w)));
        let ends_at = self
            .runtime_of(&w)
            .map(|s| started.unwrap_or(self.now) + Duration::seconds(s));
        self.running.push(Running {
            rw: RunningWorkload {
                cluster: cluster.into(),
                pool: placement.pool.clone(),
                placements: vec![placement],
                started_at: started,
                admitted_at: started.unwrap_or(self.now),
                last_checkpoint_at: None,
                preemptible_after: None,
                accounted_in_digest: true,
                preempting_for: None,
                workload: w,
            },
            cluster: ci,
            slots,
            ends_at,
            evict_at: None,
        });
    }

    pub fn cluster_index(&self, name: &str) -> usize {
        self.clusters
            .iter()
            .position(|c| c.name == name)
            .unwrap_or_else(|| panic!("no cluster {name}"))
    }

    /// Places pods on real nodes inside the placement's domain, best fit, honouring a
    /// required single-node topology. Errors mean the scheduler booked what is not there.
    fn place(
        &mut self,
        ci: usize,
        p: &tideway_scheduler::input::PoolPlacement,
        topology: Option<TopologyRequirement>,
    ) -> Result<Vec<(usize, usize, usize, u32)>, String> {
        let c = &mut self.clusters[ci];
        let pi = c
            .pools
            .iter()
            .position(|x| x.name == p.pool && x.flavor == p.flavor)
            .ok_or_else(|| format!("no pool {} of {}", p.pool, p.flavor))?;
        let pool = &mut c.pools[pi];
        let in_domain = |r: &Rack| match &p.domain {
            None => true,
            Some(d) => match d.level {
                TopologyLevel::Rack => r.name == d.name,
                TopologyLevel::Zone => r.zone == d.name,
                TopologyLevel::Node => true,
            },
        };
        let mut slots = Vec::new();
        let single_node =
            topology.is_some_and(|t| t.is_required() && t.level() == TopologyLevel::Node);
        let mut pods: Vec<u32> = p
            .pods
            .iter()
            .flat_map(|pc| std::iter::repeat_n(pc.gpus_per_pod, pc.count as usize))
            .collect();
        pods.sort_unstable_by(|a, b| b.cmp(a));
        if single_node {
            let total: u32 = pods.iter().sum();
            let mut best: Option<(u32, usize, usize)> = None;
            for (ri, r) in pool.racks.iter().enumerate().filter(|(_, r)| in_domain(r)) {
                for (ni, n) in r.nodes.iter().enumerate() {
                    let free = n.cap - n.used;
                    if free >= total && best.is_none_or(|(f, _, _)| free < f) {
                        best = Some((free, ri, ni));
                    }
                }
            }
            let (_, ri, ni) = best.ok_or("no single node holds the gang")?;
            pool.racks[ri].nodes[ni].used += total;
            return Ok(vec![(pi, ri, ni, total)]);
        }
        for g in pods {
            let mut best: Option<(u32, usize, usize)> = None;
            for (ri, r) in pool.racks.iter().enumerate().filter(|(_, r)| in_domain(r)) {
                for (ni, n) in r.nodes.iter().enumerate() {
                    let free = n.cap - n.used;
                    if free >= g && best.is_none_or(|(f, _, _)| free < f) {
                        best = Some((free, ri, ni));
                    }
                }
            }
            let (_, ri, ni) = best.ok_or_else(|| {
                format!(
                    "double booking: no node with {g} free GPUs in {:?}",
                    p.domain
                )
            })?;
            pool.racks[ri].nodes[ni].used += g;
            slots.push((pi, ri, ni, g));
        }
        Ok(slots)
    }

    fn free_slots(&mut self, r: &Running) {
        for (pi, ri, ni, g) in &r.slots {
            let n = &mut self.clusters[r.cluster].pools[*pi].racks[*ri].nodes[*ni];
            n.used -= g;
        }
    }

    /// Runs one cycle and applies its decisions; panics on any decision the real fleet
    /// cannot honour.
    pub fn cycle(&mut self) -> SchedulerOutput {
        let input = self.input();
        let out = schedule(&input);
        self.apply(&out);
        out
    }

    pub fn apply(&mut self, out: &SchedulerOutput) {
        self.reservations.clear();
        let mut assigned = Vec::new();
        for d in &out.decisions {
            match d {
                Decision::Assign {
                    uid,
                    cluster,
                    placements,
                    ..
                } => {
                    let pi = self
                        .pending
                        .iter()
                        .position(|p| uid_of(&p.workload) == uid)
                        .expect("assigned workload is pending");
                    let w = self.pending[pi].workload.clone();
                    let ci = self.cluster_index(cluster.as_str());
                    let mut slots = Vec::new();
                    for p in placements {
                        slots.extend(
                            self.place(ci, p, w.spec.topology)
                                .unwrap_or_else(|e| panic!("{uid} on {cluster}: {e}")),
                        );
                    }
                    let ends_at = self.runtime_of(&w).map(|s| self.now + Duration::seconds(s));
                    self.assigned.insert(uid.to_string(), cluster.to_string());
                    self.running.push(Running {
                        rw: RunningWorkload {
                            cluster: cluster.to_string(),
                            pool: placements[0].pool.clone(),
                            placements: placements.clone(),
                            started_at: Some(self.now),
                            admitted_at: self.now,
                            last_checkpoint_at: None,
                            preemptible_after: None,
                            accounted_in_digest: true,
                            preempting_for: None,
                            workload: w,
                        },
                        cluster: ci,
                        slots,
                        ends_at,
                        evict_at: None,
                    });
                    self.preemptors.retain(|p| p.uid != uid.as_str());
                    assigned.push(uid.to_string());
                }
                Decision::Preempt {
                    preemptor,
                    victims,
                    cluster,
                    grace_seconds,
                    ..
                } => {
                    // Like the simulator: the preemptor keeps what its victims free.
                    self.preemptors.retain(|p| p.uid != preemptor.as_str());
                    self.preemptors.push(Reservation {
                        uid: preemptor.to_string(),
                        cluster: cluster.to_string(),
                        expected_start: self.now + Duration::seconds(*grace_seconds as i64),
                        created_at: self.now,
                    });
                    for v in victims {
                        let r = self
                            .running
                            .iter_mut()
                            .find(|r| *uid_of(&r.rw.workload) == *v)
                            .expect("victim runs");
                        assert!(r.rw.preempting_for.is_none(), "{v} preempted twice");
                        r.rw.preempting_for = Some(preemptor.to_string());
                        r.evict_at = Some(self.now + Duration::seconds(*grace_seconds as i64));
                    }
                }
                Decision::Reserve {
                    uid,
                    cluster,
                    expected_start,
                    ..
                } => self.reservations.push(Reservation {
                    uid: uid.to_string(),
                    cluster: cluster.to_string(),
                    expected_start: *expected_start,
                    created_at: self.now,
                }),
                Decision::Pending { .. } => {}
            }
        }
        self.pending
            .retain(|p| !assigned.iter().any(|u| u == uid_of(&p.workload)));
    }

    /// Advances the clock: work past its runtime finishes, victims past their grace leave
    /// (back to pending, like the leader requeues them).
    pub fn advance(&mut self, secs: i64) {
        self.now += Duration::seconds(secs);
        let now = self.now;
        let (done, keep): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| {
                r.ends_at.is_some_and(|e| e <= now) || r.evict_at.is_some_and(|e| e <= now)
            });
        self.running = keep;
        for r in done {
            self.free_slots(&r);
            if r.evict_at.is_some_and(|e| e <= now) && r.ends_at.is_none_or(|e| e > now) {
                self.seq += 1;
                self.pending.push(PendingWorkload {
                    workload: r.rw.workload.clone(),
                    submitted_at: now,
                    seq: self.seq,
                });
            } else {
                let uid = uid_of(&r.rw.workload).to_owned();
                self.completed_at.insert(uid.clone(), now);
                self.finished.push(uid);
            }
        }
    }

    /// How long `w` really runs: its true run time if one was given, else its estimate.
    pub fn runtime_of(&self, w: &Workload) -> Option<i64> {
        self.true_runtime.get(uid_of(w)).copied().or_else(|| {
            w.spec
                .runtime_estimate_seconds
                .and_then(|s| i64::try_from(s).ok())
        })
    }

    pub fn decision<'o>(out: &'o SchedulerOutput, uid: &str) -> &'o Decision {
        out.decisions
            .iter()
            .find(|d| d.uid() == uid)
            .unwrap_or_else(|| panic!("no decision for {uid}"))
    }
}
