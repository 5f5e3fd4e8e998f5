//! One full scheduling cycle over a large fleet: 100 member clusters (mixed flavors, 80,000
//! GPUs), 50 queues in 5 cohorts, ~8,000 running workloads, and 10k / 100k / 1M pending
//! workloads. The target is 100k pending in at most one second on a 2-core machine.
//!
//! Also prints the memory a pending workload takes in the scheduler input (MessagePack size,
//! as replicated, and a heap estimate), whose target is at most 2 KiB.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches may panic on a broken setup

use std::collections::BTreeMap;
use std::hint::black_box;

use chrono::{DateTime, Duration, Utc};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tideway_api::digest::{CapacityDigest, DomainDigest, GpuCounts, PoolDigest};
use tideway_api::{
    Aging, FlavorQuota, Gang, Placement, PodSet, PoolKind, Preemptibility, PriorityClass,
    PriorityClassSpec, Queue, QueueSpec, SchedulerSettings, TopologyLevel, TopologyRequirement,
    Workload, WorkloadClass, WorkloadSpec,
};
use tideway_scheduler::{
    ClusterView, PendingWorkload, PodCount, PoolPlacement, PreemptionBudget, RunningWorkload,
    SchedulerInput, schedule,
};

const FLAVORS: [&str; 4] = ["H100", "A100", "L40S", "MI300"];
const REGIONS: [&str; 4] = ["us-east", "us-west", "eu-west", "ap-south"];
const CLUSTERS: usize = 100;
const RACKS: usize = 5;
const NODES_PER_RACK: usize = 20;
const GPUS_PER_NODE: u32 = 8;

/// splitmix64: a fixed, dependency-free generator so every run benches the same fleet.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn t0() -> DateTime<Utc> {
    "2030-01-01T00:00:00Z".parse().expect("valid")
}

fn counts(free: &[u32]) -> GpuCounts {
    let mut hist = vec![0u32; GPUS_PER_NODE as usize + 1];
    for f in free {
        hist[*f as usize] += 1;
    }
    let total = GPUS_PER_NODE * free.len() as u32;
    GpuCounts {
        total,
        allocated: total - free.iter().sum::<u32>(),
        unhealthy: 0,
        cordoned: 0,
        free_histogram: hist,
    }
}

fn cluster(i: usize, rng: &mut Rng) -> (ClusterView, Vec<(String, String)>) {
    let flavor = FLAVORS[i % FLAVORS.len()];
    let kind = match i % 10 {
        0..=6 => PoolKind::Training,
        7 | 8 => PoolKind::Inference,
        _ => PoolKind::Shared,
    };
    let mut domains = Vec::new();
    let mut all = Vec::new();
    let mut racks = Vec::new();
    let mut zones: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for r in 0..RACKS {
        let zone = format!("z{}", r % 2);
        let name = format!("{zone}/r{r}");
        let free: Vec<u32> = (0..NODES_PER_RACK)
            .map(|_| match rng.below(100) {
                0..=59 => 0,
                60..=74 => GPUS_PER_NODE,
                _ => 1 + rng.below(u64::from(GPUS_PER_NODE - 1)) as u32,
            })
            .collect();
        domains.push(DomainDigest {
            level: TopologyLevel::Rack,
            name: name.clone(),
            zone: None,
            counts: counts(&free),
        });
        zones.entry(zone).or_default().extend(&free);
        all.extend(&free);
        racks.push(name);
    }
    for (z, free) in zones {
        domains.push(DomainDigest {
            level: TopologyLevel::Zone,
            name: z,
            zone: None,
            counts: counts(&free),
        });
    }
    let name = format!("c{i:03}");
    let pool = "gpu".to_owned();
    let view = ClusterView {
        name: name.clone(),
        region: REGIONS[i % REGIONS.len()].to_owned(),
        ready: i % 50 != 49,
        digest: CapacityDigest {
            cluster: name.clone(),
            generated_at: t0(),
            pools: vec![PoolDigest {
                pool: pool.clone(),
                kind,
                flavor: flavor.to_owned(),
                counts: counts(&all),
                domains,
            }],
        },
        declared_levels: None,
    };
    (view, racks.into_iter().map(|r| (name.clone(), r)).collect())
}

fn queues() -> Vec<Queue> {
    // 80,000 GPUs, 20,000 per flavor, split over 50 queues.
    (0..50)
        .map(|i| {
            let mut spec = QueueSpec::new(format!("team-{}", i / 10));
            spec.cohort = Some(format!("cohort-{}", i % 5));
            spec.fair_share_weight = 1.0 + (i % 3) as f64;
            spec.per_user_active_limit = Some(500);
            spec.quotas = FLAVORS
                .iter()
                .map(|f| FlavorQuota {
                    flavor: (*f).to_owned(),
                    guaranteed: 400,
                    borrowing_limit: Some(800),
                    lending_limit: None,
                    max: None,
                })
                .collect();
            Queue::new(format!("q{i:02}"), spec)
        })
        .collect()
}

fn classes() -> Vec<PriorityClass> {
    let mk = |name: &str, value: i32, p: Preemptibility, aging: Option<Aging>| {
        let mut spec = PriorityClassSpec::new(value);
        spec.preemptibility = p;
        spec.aging = aging;
        PriorityClass::new(name, spec)
    };
    vec![
        mk(
            "low",
            10,
            Preemptibility::Allowed,
            Some(Aging {
                rate_per_hour: 5,
                cap: 50,
            }),
        ),
        mk("normal", 100, Preemptibility::Allowed, None),
        mk("high", 1000, Preemptibility::Cautious, None),
        mk("critical", 10_000, Preemptibility::Forbidden, None),
    ]
}

fn workload(uid: String, rng: &mut Rng) -> Workload {
    let flavor = FLAVORS[rng.below(4) as usize];
    let (pods, gpus, topology) = match rng.below(100) {
        0..=59 => (1, 1, None),
        60..=79 => (1, [2, 4][rng.below(2) as usize], None),
        80..=94 => (1, 8, None),
        _ => (
            [2, 4, 8, 16][rng.below(4) as usize],
            8,
            Some(TopologyRequirement::Required(TopologyLevel::Rack)),
        ),
    };
    let class = if rng.below(10) < 2 {
        WorkloadClass::Inference
    } else {
        WorkloadClass::Training
    };
    let mut spec = WorkloadSpec::new(
        format!("q{:02}", rng.below(50)),
        class,
        vec![PodSet::new("worker", pods, gpus, flavor)],
    );
    spec.priority_class =
        ["low", "normal", "normal", "normal", "high"][rng.below(5) as usize].into();
    spec.user = Some(format!("user{}@example.com", rng.below(2000)).into());
    spec.gang = Some(Gang { min_count: pods });
    spec.topology = topology;
    spec.runtime_estimate_seconds = Some(600 + rng.below(6 * 3600));
    if rng.below(10) == 0 {
        spec.placement = Some(Box::new(Placement {
            regions: vec![REGIONS[rng.below(4) as usize].to_owned()],
            clusters: Vec::new(),
            spread: false,
        }));
    }
    let mut w = Workload::new(uid.clone(), spec);
    w.metadata.uid = Some(uid);
    w
}

fn input(pending: usize) -> SchedulerInput {
    let mut rng = Rng(42);
    let mut clusters = Vec::with_capacity(CLUSTERS);
    let mut racks = Vec::new();
    for i in 0..CLUSTERS {
        let (c, r) = cluster(i, &mut rng);
        clusters.push(c);
        racks.extend(r);
    }
    let now = t0() + Duration::hours(6);
    // About 80 running workloads per cluster, as victims and reservation estimates.
    let running: Vec<RunningWorkload> = (0..CLUSTERS * 80)
        .map(|i| {
            let (cluster, rack) = racks[rng.below(racks.len() as u64) as usize].clone();
            let ci: usize = cluster[1..].parse().expect("cluster index");
            let mut w = workload(format!("run-{i:06}"), &mut rng);
            w.spec.pod_sets[0].flavor = FLAVORS[ci % FLAVORS.len()].to_owned().into();
            let ps = &w.spec.pod_sets[0];
            let placement = PoolPlacement {
                flavor: ps.flavor.to_string(),
                pool: "gpu".into(),
                domain: Some(tideway_scheduler::DomainRef {
                    level: TopologyLevel::Rack,
                    name: rack,
                }),
                pods: vec![PodCount {
                    gpus_per_pod: ps.gpus_per_pod,
                    count: ps.count,
                }],
            };
            let started = now - Duration::seconds(rng.below(5 * 3600) as i64);
            RunningWorkload {
                workload: w,
                cluster,
                pool: "gpu".into(),
                placements: vec![placement],
                started_at: (i % 20 != 0).then_some(started),
                admitted_at: started,
                last_checkpoint_at: None,
                preemptible_after: None,
                accounted_in_digest: true,
                preempting_for: None,
            }
        })
        .collect();
    let pending = (0..pending)
        .map(|i| PendingWorkload {
            workload: workload(format!("wl-{i:07}"), &mut rng),
            submitted_at: now - Duration::seconds(rng.below(4 * 3600) as i64),
            seq: i as u64 + 1,
        })
        .collect();
    SchedulerInput {
        now,
        seed: 1,
        settings: SchedulerSettings::default(),
        queues: queues(),
        priority_classes: classes(),
        clusters,
        pending,
        running,
        reservations: Vec::new(),
        preemption_budget: PreemptionBudget::per_minute(10),
        quota_overrides: Vec::new(),
        rollout: None,
        preemptors: Vec::new(),
        unshown_pending: Default::default(),
    }
}

/// Rough heap footprint of a pending workload: the struct plus every owned string and
/// vector it points to.
fn heap_estimate(p: &PendingWorkload) -> usize {
    let w = &p.workload;
    let s = |x: &String| x.capacity();
    // A short string (up to 24 bytes) is held inline and owns no heap.
    let c = |x: &tideway_api::CompactString| {
        if x.is_heap_allocated() {
            x.capacity()
        } else {
            0
        }
    };
    let mut n = std::mem::size_of::<PendingWorkload>();
    n += c(&w.api_version) + c(&w.kind) + s(&w.metadata.name);
    n += w.metadata.uid.as_ref().map_or(0, s);
    n += c(&w.spec.queue) + c(&w.spec.priority_class);
    n += w.spec.user.as_ref().map_or(0, c);
    n += w.spec.pod_sets.capacity() * std::mem::size_of::<PodSet>();
    n += w
        .spec
        .pod_sets
        .iter()
        .map(|p| c(&p.name) + c(&p.flavor))
        .sum::<usize>();
    if let Some(pl) = &w.spec.placement {
        n += std::mem::size_of::<tideway_api::workload::Placement>();
        n += pl.regions.iter().map(String::capacity).sum::<usize>()
            + pl.regions.capacity() * std::mem::size_of::<String>();
    }
    n
}

fn memory_report(input: &SchedulerInput) {
    let n = input.pending.len();
    let msgpack: usize = input
        .pending
        .iter()
        .map(|p| rmp_serde::to_vec_named(p).expect("encodes").len())
        .sum();
    let heap: usize = input.pending.iter().map(heap_estimate).sum();
    println!(
        "memory per pending workload: {} B MessagePack, ~{} B heap (target <= 2048)",
        msgpack / n,
        heap / n
    );
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule_cycle");
    // `SCHED_BENCH_MAX=100000` skips the 1M point (building its input alone takes a while).
    let max: usize = std::env::var("SCHED_BENCH_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    for n in [10_000usize, 100_000, 1_000_000] {
        if n > max {
            continue;
        }
        let input = input(n);
        if n == 100_000 {
            memory_report(&input);
        }
        let out = schedule(&input);
        println!(
            "{n} pending: {} assigned, {} preemptions, {} reserved, {} shapes, {} fit evaluations, pending {:?}",
            out.stats.assigned,
            out.stats.preemptions,
            out.stats.reserved,
            out.stats.shapes,
            out.stats.fit_evaluations,
            out.stats.pending_by_reason
        );
        group.sample_size(10);
        group.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, i| {
            b.iter(|| black_box(schedule(black_box(i))))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
