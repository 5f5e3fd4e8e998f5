//! One scheduling cycle: build the in-cycle state, walk the pending workloads in order, and
//! decide each one in the arbitration order of the design:
//!
//! admission cap → well-formed and in a known queue → per-user limit → quota (guaranteed,
//! borrowing, tidal window) → a cluster that fits the whole gang (routing) → waiting for its
//! own preemption → preemption in one cluster → reservation → pending with a reason.
//!
//! The per-step logic lives in `routing`, `preemption` and `reservation` as `impl Cycle`
//! blocks; this file owns the state they share and the walk itself.
//!
//! A workload is placed whole on one member cluster: all pods of all its pod sets, each
//! flavor in one pool, and with a required topology each flavor's pods in one domain of that
//! level. Pods above `gang.minCount` (elastic pods) are placed like the rest, so what the
//! member receives always fits; quota is charged for every pod for the same reason.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use tideway_api::{
    PendingReason, Preemptibility, PreemptionPolicy, TopologyLevel, TopologyRequirement, Workload,
    WorkloadClass,
};

use super::capacity::{FitChoice, GroupNeed, PoolState};
use super::decision::{Decision, SchedulerOutput, SchedulerStats, VictimTier};
use super::explain::{Explanation, Unblock};
use super::fair_share::dominant_share;
use super::hash::{DetMap, tie_break};
use super::input::{PodCount, PoolPlacement, SchedulerInput, SchedulerTuning, uid_of};
use super::ordering::{HeadKey, Order, PriorityBook, Rank};
use super::quota::{QuotaBlock, QuotaBook};
use super::reclaim::SideBook;
use super::tidal::FleetSide;

pub const KIND_TRAINING: u8 = 1;
pub const KIND_INFERENCE: u8 = 2;
pub const KIND_SHARED: u8 = 4;

pub fn kind_bit(k: tideway_api::PoolKind) -> u8 {
    match k {
        tideway_api::PoolKind::Training => KIND_TRAINING,
        tideway_api::PoolKind::Inference => KIND_INFERENCE,
        tideway_api::PoolKind::Shared => KIND_SHARED,
    }
}

/// A member cluster's in-cycle state.
pub struct ClusterState {
    pub name: String,
    pub region: String,
    pub ready: bool,
    pub pools: Vec<PoolState>,
    /// The levels the member declares, if it declares any (see [`ClusterView`]).
    pub declared_levels: Option<Vec<TopologyLevel>>,
    /// Bumped whenever capacity is taken; cached fit answers carry the version they saw.
    pub version: u64,
    /// Seeded tie-break key of this cluster for this cycle.
    pub tie: u64,
}

impl ClusterState {
    /// Whether the member declares `level` (a member that declares nothing is judged by its
    /// digest alone; node level needs no label).
    pub fn declares(&self, level: TopologyLevel) -> bool {
        level == TopologyLevel::Node
            || self
                .declared_levels
                .as_ref()
                .is_none_or(|levels| levels.contains(&level))
    }
}

/// Where a workload's groups fit in one cluster, and how well.
#[derive(Debug, Clone)]
pub struct ClusterFit {
    /// Per need of the shape: the pool index and the place in it.
    pub choices: Vec<(usize, FitChoice)>,
    /// Share of the chosen pools left free afterwards (bin packing; lower is fuller).
    pub pack: f64,
    /// Share of the chosen domains' free GPUs left stranded afterwards (lower is tighter).
    pub frag: f64,
}

/// Everything pending workloads of one shape have in common within a cycle.
pub struct Shape {
    /// Per flavor: the flavor id and the gang of that flavor.
    pub needs: Vec<(usize, GroupNeed)>,
    /// GPUs per flavor id, for quota.
    pub request: Vec<(usize, u64)>,
    pub kinds: u8,
    pub topology: Option<TopologyRequirement>,
    pub regions: Vec<String>,
    pub clusters: Vec<String>,
    /// Set while its queue is in a rollout scoped to clusters: the only clusters it goes to.
    pub rollout_clusters: Vec<String>,
    /// Ready clusters passing the static filters (placement, flavor, topology level).
    pub candidates: Vec<usize>,
    /// Clusters filtered statically, with why.
    pub statics: Vec<(usize, super::explain::Verdict)>,
    /// Set when no cluster passes the static filters.
    pub static_block: Option<(PendingReason, Arc<Explanation>)>,
    /// Per candidate: (cluster version seen, answer).
    pub cache: Vec<(u64, Option<ClusterFit>)>,
    /// Set once it fits in no candidate: capacity only shrinks within a cycle, so it stays.
    pub dead: Option<(PendingReason, Arc<Explanation>)>,
    /// The last "only held clusters would take it" answer: (holds epoch, holds, answer).
    pub held_only: Option<(u64, Vec<usize>, PendingReason, Arc<Explanation>)>,
    pub reserve_failed: bool,
    /// Preemption plans that failed: (queue, base priority, reclaiming).
    pub preempt_failed: Vec<(usize, i32, bool)>,
}

impl Shape {
    pub fn flavors(&self) -> impl Iterator<Item = usize> + '_ {
        self.needs.iter().map(|(f, _)| *f)
    }
}

/// A running (or admitted) workload, as preemption and reservations need it.
pub struct RunInfo<'a> {
    pub uid: String,
    pub queue: Option<usize>,
    pub base: i32,
    pub preemptibility: Preemptibility,
    pub gpus: Vec<(usize, u64)>,
    /// (pool index in its cluster, domain index in the pool, pods) for returning capacity.
    pub pods: Vec<(usize, Option<usize>, PodCount)>,
    /// The nodes it occupies, as its member reported them: (pool index, domain index, node
    /// id, GPUs). Empty when unknown; see `nodes`.
    pub nodes: Vec<(usize, Option<usize>, &'a str, u32)>,
    /// Its cluster's index, when the cluster is known.
    pub cluster: Option<usize>,
    pub tier: VictimTier,
    pub work_lost_seconds: u64,
    pub admitted_at: DateTime<Utc>,
    pub expected_end: DateTime<Utc>,
    pub checkpointable: bool,
    pub preemptible_now: bool,
    pub terminating: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    Reservation,
    /// Capacity a preemptor waits for while its victims are given their grace.
    Preemption,
}

/// Capacity of some flavors on one cluster held for one pending workload: others may only
/// use it if they have a higher priority or end before `expected_start` (backfill).
pub struct Hold {
    pub kind: HoldKind,
    pub cluster: usize,
    pub flavors: Vec<usize>,
    pub holder: u32,
    pub holder_uid: String,
    pub holder_effective: i64,
    pub expected_start: DateTime<Utc>,
    pub active: bool,
    /// Reservations: running work expected to end by `expected_start`, whose capacity the
    /// holder counts on; whatever else is free is extra and may be backfilled.
    pub returning: Vec<u32>,
    /// Shapes already found to leave the holder no room (capacity only shrinks in a cycle).
    pub no_room: Vec<u32>,
    /// The holder's base class value: a preemptor's hold yields only to higher classes.
    pub holder_base: i32,
}

pub struct Cycle<'a> {
    pub input: &'a SchedulerInput,
    pub tuning: &'a SchedulerTuning,
    pub now: DateTime<Utc>,
    pub clusters: Vec<ClusterState>,
    pub book: QuotaBook,
    pub prio: PriorityBook,
    pub shapes: Vec<Shape>,
    pub shape_of: Vec<u32>,
    pub ranks: Vec<Rank>,
    pub queue_of: Vec<Option<usize>>,
    pub running: Vec<RunInfo<'a>>,
    pub on_cluster: Vec<Vec<u32>>,
    /// Per (cluster, node id): GPUs the running work reports there; see `nodes`.
    pub node_used: DetMap<(usize, &'a str), u32>,
    /// Per cluster: whether every running workload on it reported its nodes, so that a
    /// node's free GPUs can be told from the GPUs used there.
    pub nodes_known: Vec<bool>,
    /// Set while defragmentation plans: returned GPUs join the holes of their node.
    pub join_holes: bool,
    /// Per fleet side: whether some of its pending work waits within its guarantee; taken
    /// at the first defragmentation of the cycle.
    pub owed_sides: Option<[bool; 2]>,
    pub holds: Vec<Hold>,
    pub holds_on: Vec<Vec<usize>>,
    pub own_hold: DetMap<u32, usize>,
    /// Bumped whenever a hold is added or released; keys cached "held" explanations.
    pub holds_epoch: u64,
    pub waiting_victims: DetMap<&'a str, Vec<String>>,
    pub user_active: DetMap<(usize, &'a str), u32>,
    pub spread_cluster: DetMap<(&'a str, usize), u32>,
    pub spread_region: DetMap<(&'a str, &'a str), u32>,
    pub spread_total: DetMap<&'a str, u32>,
    pub budget_left: u32,
    /// Fleet sides' guarantees from tidal pool quotas (see `reclaim`).
    pub sides: SideBook,
    pub attempts: u32,
    pub admitted: u32,
    pub stats: SchedulerStats,
    pub decisions: Vec<Decision>,
    /// Pending workloads per flavor id, counted on first use by `reservation`.
    pub pending_on_flavor: Vec<u32>,
    /// The default reclaim rule's running sums (see `promise`).
    pub promise: super::promise::PromiseBook,
    /// The reason and explanation of each quota block met so far: they depend only on the
    /// queue and the block, and a backlog over its quota meets the same block once per
    /// workload (formatting each explanation's hint anew was a tenth of a cycle).
    quota_reasons: DetMap<(usize, QuotaBlock), (PendingReason, Arc<Explanation>)>,
}

/// The pool kinds a workload class may use.
pub fn kinds_for(class: WorkloadClass, affinity: bool) -> u8 {
    if !affinity {
        return KIND_TRAINING | KIND_INFERENCE | KIND_SHARED;
    }
    match class {
        WorkloadClass::Training => KIND_TRAINING | KIND_SHARED,
        WorkloadClass::Inference => KIND_INFERENCE | KIND_SHARED,
        WorkloadClass::Eval | WorkloadClass::Experiment => {
            KIND_TRAINING | KIND_INFERENCE | KIND_SHARED
        }
    }
}

/// What makes two pending workloads interchangeable for placement.
#[derive(PartialEq, Eq, Hash)]
pub struct ShapeKey<'a> {
    /// `(flavor, gpus per pod, pods)`, by flavor, largest pods first.
    pub groups: Vec<(&'a str, u32, u32)>,
    topology: Option<TopologyRequirement>,
    regions: Vec<&'a str>,
    clusters: Vec<&'a str>,
    /// The pool kinds the workload's class may use (`kind_bit`s).
    pub kinds: u8,
    /// Whether its queue's new work is confined to a scoped rollout's clusters.
    pub confined: bool,
}

pub fn shape_key<'a>(w: &'a Workload, affinity: bool) -> ShapeKey<'a> {
    let mut groups: Vec<(&str, u32, u32)> = w
        .spec
        .pod_sets
        .iter()
        .map(|p| (p.flavor.as_str(), p.gpus_per_pod, p.count))
        .collect();
    // Same flavor and pod size merge; then by flavor, largest pods first.
    groups.sort_unstable_by(|a, b| a.0.cmp(b.0).then(b.1.cmp(&a.1)));
    groups.dedup_by(|b, a| {
        if a.0 == b.0 && a.1 == b.1 {
            a.2 = a.2.saturating_add(b.2);
            true
        } else {
            false
        }
    });
    let (mut regions, mut clusters) = match &w.spec.placement {
        Some(p) => (
            p.regions.iter().map(String::as_str).collect(),
            p.clusters.iter().map(String::as_str).collect(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    regions.sort_unstable();
    regions.dedup();
    clusters.sort_unstable();
    clusters.dedup();
    ShapeKey {
        groups,
        topology: w.spec.topology,
        regions,
        clusters,
        kinds: kinds_for(w.spec.class, affinity),
        confined: false,
    }
}

/// A workload's gangs, one per flavor, from its shape key's groups: the unit the capacity
/// model fits. A gang with no GPUs is not something this scheduler places, so it is left out.
pub fn gang_needs<'a>(
    groups: &[(&'a str, u32, u32)],
    level: Option<TopologyLevel>,
    required: bool,
) -> Vec<(&'a str, GroupNeed)> {
    let mut needs: Vec<(&str, GroupNeed)> = Vec::new();
    for &(flavor, g, count) in groups {
        let pc = PodCount {
            gpus_per_pod: g,
            count,
        };
        let gpus = u64::from(g) * u64::from(count);
        match needs.last_mut() {
            Some((lf, need)) if *lf == flavor => {
                need.pods.push(pc);
                need.gpus = need.gpus.saturating_add(gpus);
            }
            _ => needs.push((
                flavor,
                GroupNeed {
                    pods: vec![pc],
                    gpus,
                    level,
                    required,
                },
            )),
        }
    }
    needs.retain(|(_, n)| n.gpus > 0);
    needs
}

/// GPUs per flavor, saturating: `WorkloadSpec::gpus_by_flavor` trusts validated input, the
/// scheduler must not.
fn gpus_by_flavor(w: &Workload) -> Vec<(&str, u64)> {
    let mut out: Vec<(&str, u64)> = Vec::new();
    for p in &w.spec.pod_sets {
        let n = u64::from(p.count) * u64::from(p.gpus_per_pod);
        match out.iter_mut().find(|(f, _)| *f == p.flavor) {
            Some((_, total)) => *total = total.saturating_add(n),
            None => out.push((p.flavor.as_str(), n)),
        }
    }
    out
}

/// Seconds from `a` to `b`, zero when `b` is earlier.
pub fn secs_between(a: DateTime<Utc>, b: DateTime<Utc>) -> u64 {
    u64::try_from((b - a).num_seconds()).unwrap_or(0)
}

/// `t + secs`, saturating at the far future instead of overflowing.
pub fn plus_secs(t: DateTime<Utc>, secs: u64) -> DateTime<Utc> {
    i64::try_from(secs)
        .ok()
        .and_then(Duration::try_seconds)
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl<'a> Cycle<'a> {
    pub fn new(input: &'a SchedulerInput) -> Self {
        let tuning = &input.settings.tuning;
        let now = input.now;

        let clusters: Vec<ClusterState> = input
            .clusters
            .iter()
            .map(|c| ClusterState {
                name: c.name.clone(),
                region: c.region.clone(),
                ready: c.ready,
                pools: c.digest.pools.iter().map(PoolState::from_digest).collect(),
                declared_levels: c.declared_levels.clone(),
                version: 0,
                tie: tie_break(input.seed, &c.name),
            })
            .collect();
        let cluster_ids: DetMap<&str, usize> = input
            .clusters
            .iter()
            .enumerate()
            .rev()
            .map(|(i, c)| (c.name.as_str(), i))
            .collect();

        // Every flavor anyone names, sorted so ids do not depend on input order.
        let mut flavors: Vec<&str> = Vec::new();
        for q in &input.queues {
            flavors.extend(q.spec.quotas.iter().map(|f| f.flavor.as_str()));
        }
        flavors.extend(
            input
                .quota_overrides
                .iter()
                .map(|o| o.quota.flavor.as_str()),
        );
        for c in &input.clusters {
            flavors.extend(c.digest.pools.iter().map(|p| p.flavor.as_str()));
        }
        for p in &input.pending {
            flavors.extend(p.workload.spec.pod_sets.iter().map(|s| s.flavor.as_str()));
        }
        for r in &input.running {
            flavors.extend(r.workload.spec.pod_sets.iter().map(|s| s.flavor.as_str()));
        }
        flavors.sort_unstable();
        flavors.dedup();
        let mut book = QuotaBook::new(
            &input.queues,
            &input.quota_overrides,
            flavors.iter().map(|f| (*f).to_owned()).collect(),
        );
        for c in &clusters {
            for p in &c.pools {
                if let Some(f) = book.flavor_id(&p.flavor) {
                    book.capacity[f] += p.total;
                }
            }
        }
        let prio = PriorityBook::new(
            &input.priority_classes,
            &input.settings.default_priority_class,
        );
        let sides = SideBook::new(&input.quota_overrides, &book);

        let mut cycle = Self {
            input,
            tuning,
            now,
            clusters,
            book,
            prio,
            shapes: Vec::new(),
            shape_of: Vec::with_capacity(input.pending.len()),
            ranks: Vec::with_capacity(input.pending.len()),
            queue_of: Vec::with_capacity(input.pending.len()),
            running: Vec::with_capacity(input.running.len()),
            on_cluster: vec![Vec::new(); input.clusters.len()],
            node_used: DetMap::default(),
            nodes_known: vec![true; input.clusters.len()],
            join_holes: false,
            owed_sides: None,
            holds: Vec::new(),
            holds_on: vec![Vec::new(); input.clusters.len()],
            own_hold: DetMap::default(),
            holds_epoch: 0,
            waiting_victims: DetMap::default(),
            user_active: DetMap::default(),
            spread_cluster: DetMap::default(),
            spread_region: DetMap::default(),
            spread_total: DetMap::default(),
            budget_left: input.preemption_budget.remaining(),
            sides,
            attempts: 0,
            admitted: 0,
            stats: SchedulerStats::default(),
            decisions: Vec::with_capacity(input.pending.len()),
            pending_on_flavor: Vec::new(),
            promise: Default::default(),
            quota_reasons: DetMap::default(),
        };
        cycle.load_running(&cluster_ids);
        cycle.load_node_use();
        cycle.load_pending();
        cycle.load_holds(&cluster_ids);
        cycle
    }

    fn load_running(&mut self, cluster_ids: &DetMap<&str, usize>) {
        let input = self.input;
        for r in &input.running {
            let w = &r.workload;
            let uid = uid_of(w);
            let cluster = cluster_ids.get(r.cluster.as_str()).copied();
            let queue = self.book.queue_id(&w.spec.queue);
            let class = self.prio.class(&w.spec.priority_class);
            let mut gpus: Vec<(usize, u64)> = Vec::new();
            for (flavor, n) in gpus_by_flavor(w) {
                if let Some(f) = self.book.flavor_id(flavor) {
                    gpus.push((f, n));
                    if let Some(q) = queue {
                        self.book.charge(q, f, n);
                    }
                }
            }
            if let (Some(q), Some(user)) = (queue, w.spec.user.as_deref()) {
                *self.user_active.entry((q, user)).or_insert(0) += 1;
            }
            let mut pods = Vec::new();
            if let Some(ci) = cluster {
                pods = self.locate_pods(ci, r);
                if !r.accounted_in_digest {
                    for p in &r.placements {
                        let counts: Vec<PodCount> = p.pods.clone();
                        if let Some(pi) = self.clusters[ci]
                            .pools
                            .iter()
                            .position(|x| x.name == p.pool && x.flavor == p.flavor)
                        {
                            self.clusters[ci].pools[pi]
                                .take_unaccounted(p.domain.as_ref(), &counts);
                        }
                    }
                    if r.placements.is_empty() {
                        for (pi, _, pc) in &pods {
                            self.clusters[ci].pools[*pi].take_unaccounted(None, &[*pc]);
                        }
                    }
                }
                let key = self.spread_key(w);
                let region = input.clusters[ci].region.as_str();
                *self.spread_cluster.entry((key, ci)).or_insert(0) += 1;
                *self.spread_region.entry((key, region)).or_insert(0) += 1;
                *self.spread_total.entry(key).or_insert(0) += 1;
            }
            let started = r.started_at;
            let checkpointable = w.spec.checkpoint.is_some();
            let last_ckpt = r.last_checkpoint_at.or_else(|| {
                w.spec
                    .checkpoint
                    .as_ref()
                    .and_then(|c| c.last_checkpoint_at)
            });
            let (tier, work_lost_seconds) = match started {
                None => (VictimTier::NotStarted, 0),
                Some(s) if checkpointable => {
                    let from = last_ckpt.map_or(s, |c| c.max(s));
                    (VictimTier::Checkpointable, secs_between(from, self.now))
                }
                Some(s) => (VictimTier::Running, secs_between(s, self.now)),
            };
            let expected_end = self.expected_end(r);
            if let Some(for_uid) = &r.preempting_for {
                self.waiting_victims
                    .entry(for_uid.as_str())
                    .or_default()
                    .push(uid.to_owned());
            }
            if let Some(ci) = cluster {
                self.on_cluster[ci].push(self.running.len() as u32);
            }
            let side = FleetSide::of_class(w.spec.class);
            // A victim being evicted no longer counts for its side: its preemptor does
            // (`load_preemptor_holds`), so two reclaims never count the same GPUs twice.
            if let Some(ci) = cluster
                && r.preempting_for.is_none()
            {
                self.sides.charge(side, &input.clusters[ci].region, &gpus);
            }
            self.sides.runs.push((side, cluster));
            self.running.push(RunInfo {
                uid: uid.to_owned(),
                queue,
                base: class.value,
                preemptibility: class.preemptibility,
                gpus,
                nodes: super::nodes::located(&pods, r),
                pods,
                cluster,
                tier,
                work_lost_seconds,
                admitted_at: r.admitted_at,
                expected_end,
                checkpointable,
                preemptible_now: r.preemptible_after.is_none_or(|t| t <= self.now),
                terminating: r.preempting_for.is_some(),
            });
        }
    }

    /// Which pool (and domain) of its cluster each of a running workload's pods is in.
    fn locate_pods(
        &self,
        ci: usize,
        r: &super::input::RunningWorkload,
    ) -> Vec<(usize, Option<usize>, PodCount)> {
        let pools = &self.clusters[ci].pools;
        let mut out = Vec::new();
        if r.placements.is_empty() {
            for ps in &r.workload.spec.pod_sets {
                let pi = pools
                    .iter()
                    .position(|p| p.name == r.pool && p.flavor == ps.flavor)
                    .or_else(|| pools.iter().position(|p| p.flavor == ps.flavor));
                if let Some(pi) = pi {
                    out.push((
                        pi,
                        None,
                        PodCount {
                            gpus_per_pod: ps.gpus_per_pod,
                            count: ps.count,
                        },
                    ));
                }
            }
        } else {
            for pl in &r.placements {
                if let Some(pi) = pools
                    .iter()
                    .position(|p| p.name == pl.pool && p.flavor == pl.flavor)
                {
                    let d = pl.domain.as_ref().and_then(|d| pools[pi].find_domain(d));
                    out.extend(pl.pods.iter().map(|pc| (pi, d, *pc)));
                }
            }
        }
        out
    }

    pub fn spread_key(&self, w: &'a Workload) -> &'a str {
        w.metadata
            .labels
            .get(&self.tuning.spread_label)
            .map_or(w.spec.queue.as_str(), String::as_str)
    }

    fn load_pending(&mut self) {
        let input = self.input;
        let mut ids: DetMap<ShapeKey<'a>, u32> = DetMap::default();
        for p in &input.pending {
            let w = &p.workload;
            let class = self.prio.class(&w.spec.priority_class);
            let waited = secs_between(p.submitted_at, self.now);
            let expected = self.expected_gpu_seconds(w);
            self.ranks.push(Rank {
                effective: class.effective_priority(waited),
                expected,
                seq: p.seq,
            });
            self.queue_of.push(self.book.queue_id(&w.spec.queue));
            let mut key = shape_key(w, self.tuning.pool_affinity);
            key.confined = self.rollout_clusters(w).is_some();
            let next = ids.len() as u32;
            let id = *ids.entry(key).or_insert(next);
            if id == next {
                self.shapes.push(self.build_shape(w));
            }
            self.shape_of.push(id);
        }
        self.stats.shapes = self.shapes.len() as u64;
    }

    /// The clusters a scoped rollout confines `w`'s placement to, if it does.
    fn rollout_clusters(&self, w: &Workload) -> Option<&'a [String]> {
        self.input
            .rollout
            .as_ref()
            .and_then(|r| r.clusters_for(&w.spec.queue))
    }

    fn build_shape(&self, w: &Workload) -> Shape {
        let key = shape_key(w, self.tuning.pool_affinity);
        let (level, required) = match w.spec.topology {
            Some(t) => (Some(t.level()), t.is_required()),
            None => (None, false),
        };
        let needs: Vec<(usize, GroupNeed)> = gang_needs(&key.groups, level, required)
            .into_iter()
            .filter_map(|(flavor, need)| Some((self.book.flavor_id(flavor)?, need)))
            .collect();
        let request = needs.iter().map(|(f, n)| (*f, n.gpus)).collect();
        let mut shape = Shape {
            needs,
            request,
            kinds: key.kinds,
            topology: w.spec.topology,
            regions: key.regions.iter().map(|s| (*s).to_owned()).collect(),
            clusters: key.clusters.iter().map(|s| (*s).to_owned()).collect(),
            rollout_clusters: self
                .rollout_clusters(w)
                .map(<[String]>::to_vec)
                .unwrap_or_default(),
            candidates: Vec::new(),
            statics: Vec::new(),
            static_block: None,
            cache: Vec::new(),
            dead: None,
            held_only: None,
            reserve_failed: false,
            preempt_failed: Vec::new(),
        };
        self.filter_statically(&mut shape);
        shape
    }

    fn load_holds(&mut self, cluster_ids: &DetMap<&str, usize>) {
        let input = self.input;
        // No holds to carry: no need to index the backlog by uid.
        if input.reservations.is_empty()
            && input.preemptors.is_empty()
            && input.running.iter().all(|r| r.preempting_for.is_none())
        {
            return;
        }
        let by_uid: DetMap<&str, u32> = input
            .pending
            .iter()
            .enumerate()
            .rev()
            .map(|(i, p)| (uid_of(&p.workload), i as u32))
            .collect();
        for r in &input.reservations {
            let (Some(&idx), Some(&ci)) = (
                by_uid.get(r.uid.as_str()),
                cluster_ids.get(r.cluster.as_str()),
            ) else {
                continue;
            };
            let s = self.shape_of[idx as usize] as usize;
            if self.own_hold.contains_key(&idx) || !self.shapes[s].candidates.contains(&ci) {
                continue;
            }
            if let Some(start) = self.keep_reservation(idx, ci, r.expected_start) {
                self.add_hold(HoldKind::Reservation, idx, ci, start);
            }
        }
        self.load_preemptor_holds(cluster_ids, &by_uid);
    }

    pub fn add_hold(&mut self, kind: HoldKind, idx: u32, ci: usize, expected_start: DateTime<Utc>) {
        let s = self.shape_of[idx as usize] as usize;
        let h = self.holds.len();
        let returning = match kind {
            HoldKind::Reservation => self.returning_by(ci, s, expected_start),
            HoldKind::Preemption => Vec::new(),
        };
        self.holds.push(Hold {
            kind,
            cluster: ci,
            flavors: self.shapes[s].flavors().collect(),
            holder: idx,
            holder_uid: uid_of(&self.input.pending[idx as usize].workload).to_owned(),
            holder_effective: self.ranks[idx as usize].effective,
            expected_start,
            active: true,
            returning,
            no_room: Vec::new(),
            holder_base: self
                .prio
                .class(
                    &self.input.pending[idx as usize]
                        .workload
                        .spec
                        .priority_class,
                )
                .value,
        });
        self.holds_on[ci].push(h);
        self.own_hold.insert(idx, h);
        self.holds_epoch += 1;
    }

    pub fn release_hold(&mut self, idx: u32) {
        if let Some(h) = self.own_hold.remove(&idx) {
            self.holds[h].active = false;
            self.holds_epoch += 1;
        }
    }

    /// Walks the pending workloads in order and decides each.
    pub fn run(&mut self) {
        let nq = self.book.queues.len();
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); nq + 1];
        for (i, q) in self.queue_of.iter().enumerate() {
            lists[q.unwrap_or(nq)].push(i as u32);
        }
        let mut order = Order::new(lists, &self.ranks, |l, idx| self.head_key(l, idx));
        while let Some((l, idx)) = order.pop() {
            self.decide(idx);
            if l < nq {
                self.count_decided(l, idx);
            }
            order.advance(l, &self.ranks, |l, idx| self.head_key(l, idx));
        }
    }

    /// List `l`'s order key with pending `idx` at its head (see `ordering`).
    fn head_key(&self, l: usize, idx: u32) -> HeadKey {
        let fair = self.input.settings.fair_sharing;
        HeadKey {
            borrows: self.side_borrows(idx),
            share: if fair && l < self.book.queues.len() {
                dominant_share(&self.book, l)
            } else {
                0.0
            },
        }
    }

    pub fn pending(
        &mut self,
        idx: u32,
        reason: PendingReason,
        explanation: impl Into<Arc<Explanation>>,
    ) {
        let uid = uid_of(&self.input.pending[idx as usize].workload).to_owned();
        self.decisions.push(Decision::Pending {
            uid: uid.into(),
            reason,
            explanation: explanation.into(),
        });
    }

    fn decide(&mut self, idx: u32) {
        let input = self.input;
        let p = &input.pending[idx as usize];
        let w = &p.workload;
        let s = self.shape_of[idx as usize] as usize;

        if let Some(cap) = self.tuning.max_assignments_per_cycle
            && self.admitted >= cap
        {
            return self.pending(
                idx,
                PendingReason::Queued,
                Explanation::new(Unblock::NextCycle),
            );
        }
        if let Some(until) = w
            .status
            .as_ref()
            .and_then(|st| st.retry_not_before)
            .filter(|t| *t > self.now)
        {
            let attempts = w.status.as_ref().map_or(0, |st| st.attempts);
            return self.pending(
                idx,
                PendingReason::BackingOff { until, attempts },
                Explanation::new(Unblock::RetryBackoffEnds { at: until }),
            );
        }
        if self.shapes[s].needs.is_empty() {
            let problem = "it requests no GPUs (no pod set with a count and GPUs per pod)";
            return self.pending(
                idx,
                PendingReason::NoMatchingCluster {
                    constraint: "at least one pod set requesting GPUs".to_owned(),
                    clusters_filtered: Vec::new(),
                },
                Explanation::new(Unblock::FixWorkload {
                    problem: problem.to_owned(),
                }),
            );
        }
        let first_flavor = |c: &Self| c.book.flavors[c.shapes[s].needs[0].0].clone();
        let Some(q) = self.queue_of[idx as usize] else {
            let flavor = first_flavor(self);
            return self.no_queue(
                idx,
                &flavor,
                format!("queue {:?} is not defined", w.spec.queue),
            );
        };
        let info = &self.book.queues[q];
        if !info.classes.is_empty() && !info.classes.contains(&w.spec.class) {
            let problem = format!(
                "queue {} does not serve {} workloads",
                info.name, w.spec.class
            );
            let flavor = first_flavor(self);
            return self.no_queue(idx, &flavor, problem);
        }
        if let (Some(limit), Some(user)) = (info.per_user_limit, w.spec.user.as_deref()) {
            let active = self.user_active.get(&(q, user)).copied().unwrap_or(0);
            if active >= limit {
                return self.pending(
                    idx,
                    PendingReason::Queued,
                    Explanation::new(Unblock::UserWorkloadFinishes {
                        user: user.to_owned(),
                        limit,
                    }),
                );
            }
        }
        if let Err(block) = self.book.check(q, &self.shapes[s].request) {
            if let Some(victims) = self.waiting_victims.get(uid_of(w)).cloned() {
                return self.pending(
                    idx,
                    PendingReason::WaitingForPreemption {
                        victims: victims.clone(),
                    },
                    Explanation::new(Unblock::PreemptionCompletes { victims }),
                );
            }
            if matches!(block, QuotaBlock::Exhausted { .. }) && self.try_quota_preempt(idx, q) {
                return;
            }
            let (reason, explanation) = self.quota_reason(q, block);
            return self.pending(idx, reason, explanation);
        }
        if let Some(unblock) = self.window_closing(idx) {
            let reason = match &unblock {
                Unblock::WindowClosing {
                    boundary,
                    estimate_seconds,
                } => PendingReason::WindowClosing {
                    boundary: *boundary,
                    estimate_seconds: *estimate_seconds,
                },
                _ => PendingReason::Queued,
            };
            return self.pending(idx, reason, Explanation::new(unblock));
        }
        if let Some((reason, explanation)) = &self.shapes[s].static_block {
            let (reason, explanation) = (reason.clone(), explanation.clone());
            return self.pending(idx, reason, explanation);
        }
        let restricted = match self.route(idx) {
            Ok((ci, fit)) => return self.assign(idx, q, ci, fit),
            Err(restricted) => restricted,
        };
        let uid = uid_of(w);
        if let Some(victims) = self.waiting_victims.get(uid).cloned() {
            return self.pending(
                idx,
                PendingReason::WaitingForPreemption {
                    victims: victims.clone(),
                },
                Explanation::new(Unblock::PreemptionCompletes { victims }),
            );
        }
        if self.try_reclaim(idx, q) || self.try_preempt(idx, q) || self.try_defragment(idx, q) {
            return;
        }
        let (reason, explanation) = self.capacity_reason(idx, &restricted);
        if self.try_reserve(idx, &reason, &explanation) {
            return;
        }
        self.pending(idx, reason, explanation)
    }

    /// Why quota holds a workload of queue `q` back, shared by every workload it holds back
    /// the same way in this cycle.
    fn quota_reason(&mut self, q: usize, block: QuotaBlock) -> (PendingReason, Arc<Explanation>) {
        if let Some((reason, explanation)) = self.quota_reasons.get(&(q, block.clone())) {
            return (reason.clone(), explanation.clone());
        }
        let reason = self.book.reason(q, &block);
        let unblock = match block {
            QuotaBlock::Exhausted { flavor, short, .. } => Unblock::QuotaFreed {
                queue: self.book.queues[q].name.clone(),
                flavor: self.book.flavors[flavor].clone(),
                gpus: short,
            },
            QuotaBlock::WindowClosed { until } => Unblock::WindowOpens { at: until },
        };
        let explanation = Arc::new(Explanation::new(unblock));
        self.quota_reasons
            .insert((q, block), (reason.clone(), explanation.clone()));
        (reason, explanation)
    }

    fn no_queue(&mut self, idx: u32, flavor: &str, problem: String) {
        let w = &self.input.pending[idx as usize].workload;
        self.pending(
            idx,
            PendingReason::QuotaExhausted {
                queue: w.spec.queue.to_string(),
                flavor: flavor.to_owned(),
                used: 0,
                limit: 0,
            },
            Explanation::new(Unblock::FixWorkload { problem }),
        )
    }

    /// Takes quota and counts the workload as active (assignment or preemption).
    pub fn admit(&mut self, idx: u32, q: usize) {
        let s = self.shape_of[idx as usize] as usize;
        for i in 0..self.shapes[s].request.len() {
            let (f, n) = self.shapes[s].request[i];
            self.book.charge(q, f, n);
        }
        let w = &self.input.pending[idx as usize].workload;
        if let Some(user) = w.spec.user.as_deref() {
            *self.user_active.entry((q, user)).or_insert(0) += 1;
        }
        self.admitted += 1;
    }

    fn assign(&mut self, idx: u32, q: usize, ci: usize, fit: ClusterFit) {
        let input = self.input;
        let w = &input.pending[idx as usize].workload;
        let s = self.shape_of[idx as usize] as usize;
        let mut placements = Vec::with_capacity(fit.choices.len());
        for (n, (pi, choice)) in fit.choices.iter().enumerate() {
            let (f, need) = &self.shapes[s].needs[n];
            let pool = &mut self.clusters[ci].pools[*pi];
            let Some(domain) = pool.take(need, *choice) else {
                // Only an inconsistent digest gets here; what was taken stays taken.
                self.clusters[ci].version += 1;
                let (reason, explanation) = self.capacity_reason(idx, &[]);
                return self.pending(idx, reason, explanation);
            };
            placements.push(PoolPlacement {
                flavor: self.book.flavors[*f].clone(),
                pool: pool.name.clone(),
                domain,
                pods: need.pods.clone(),
            });
        }
        self.clusters[ci].version += 1;
        self.admit(idx, q);
        self.charge_side_once(idx, ci);
        self.release_hold(idx);
        let key = self.spread_key(w);
        let region = input.clusters[ci].region.as_str();
        *self.spread_cluster.entry((key, ci)).or_insert(0) += 1;
        *self.spread_region.entry((key, region)).or_insert(0) += 1;
        *self.spread_total.entry(key).or_insert(0) += 1;
        self.decisions.push(Decision::Assign {
            uid: uid_of(w).into(),
            cluster: self.clusters[ci].name.as_str().into(),
            pool: placements
                .first()
                .map(|p| p.pool.clone())
                .unwrap_or_default(),
            placements,
        });
    }

    pub fn finish(mut self) -> SchedulerOutput {
        let mut stats = std::mem::take(&mut self.stats);
        stats.pending = self.input.pending.len() as u64;
        for d in &self.decisions {
            match d {
                Decision::Assign { .. } => stats.assigned += 1,
                Decision::Preempt { victims, .. } => {
                    stats.preemptions += 1;
                    stats.victims += victims.len() as u64;
                }
                Decision::Reserve { reason, .. } => {
                    stats.reserved += 1;
                    count_reason(&mut stats.pending_by_reason, reason.code());
                }
                Decision::Pending { reason, .. } => {
                    count_reason(&mut stats.pending_by_reason, reason.code());
                }
            }
        }
        let checkpoints = self.checkpoint_notices();
        SchedulerOutput {
            decisions: self.decisions,
            stats,
            checkpoints,
        }
    }
}

/// Counts one more workload pending for `code`, allocating the key only the first time.
fn count_reason(counts: &mut std::collections::BTreeMap<String, u64>, code: &str) {
    match counts.get_mut(code) {
        Some(n) => *n += 1,
        None => {
            counts.insert(code.to_owned(), 1);
        }
    }
}

/// Whether a class may preempt at all.
pub fn may_preempt(policy: PreemptionPolicy) -> bool {
    policy == PreemptionPolicy::PreemptLowerPriority
}
