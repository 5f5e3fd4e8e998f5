//! Prometheus metrics of a federation node: the registry the leader loops and handlers record
//! into. The server only renders it.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

/// One series per member cluster and phase, 1 for the phase it is in (as kube-state-metrics
/// does for pods): alerts match `phase="NotReady"` without knowing every phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberPhaseLabel {
    pub cluster: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    pub cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

/// A queue's quota in force of a flavor, with the window that sets it (`-` for the queue's
/// own quota, `default` between a schedule's windows).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueQuotaLabel {
    pub queue: String,
    pub flavor: String,
    pub window: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueFlavorLabel {
    pub queue: String,
    pub flavor: String,
}

/// A member's pool: fragmentation and capacity are per pool, and a pool has one flavor.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabel {
    pub cluster: String,
    pub pool: String,
    pub flavor: String,
}

/// As [`PoolLabel`], with which part of the capacity (`total`, `allocated`, `free`,
/// `unhealthy`, `cordoned`, `borrowed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CapacityLabel {
    pub cluster: String,
    pub pool: String,
    pub flavor: String,
    pub state: String,
}

/// A member's heartbeats by what they carried: `full` (a whole digest), `delta` (changes since
/// the acknowledged digest), `unchanged` (a delta with no change), `none` (liveness only), and
/// `resync` for deltas whose base the leader did not hold.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeartbeatLabel {
    pub cluster: String,
    pub digest: String,
}

/// An HTTP route by its matched path template (`/v1/workloads/{id}`, never the raw path:
/// one series per route, not per workload), method and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabel {
    pub method: String,
    pub route: String,
    pub status: u16,
}

pub struct Metrics {
    registry: Registry,
    submissions: Family<ResultLabel, Counter>,
    submit_latency: Histogram,
    term: Gauge<i64, AtomicI64>,
    is_leader: Gauge<i64, AtomicI64>,
    last_applied: Gauge<i64, AtomicI64>,
    log_syncs: Counter<u64, AtomicU64>,
    log_entries: Counter<u64, AtomicU64>,
    cycle_seconds: Histogram,
    assign_latency: Histogram,
    queue_depth: Family<QueueLabel, Gauge<i64, AtomicI64>>,
    preemptions: Family<QueueLabel, Counter>,
    reroutes: Counter<u64, AtomicU64>,
    member_phase: Family<MemberPhaseLabel, Gauge<i64, AtomicI64>>,
    rejected: Family<ReasonLabel, Counter>,
    evictions: Family<ClusterLabel, Counter>,
    fragmentation: Family<PoolLabel, Gauge<f64, AtomicU64>>,
    queue_quota: Family<QueueQuotaLabel, Gauge<i64, AtomicI64>>,
    queue_used: Family<QueueFlavorLabel, Gauge<i64, AtomicI64>>,
    capacity: Family<CapacityLabel, Gauge<i64, AtomicI64>>,
    workloads: Family<PhaseLabel, Gauge<i64, AtomicI64>>,
    reschedule_ratio: Gauge<f64, AtomicU64>,
    commit_index: Gauge<i64, AtomicI64>,
    apply_lag: Gauge<i64, AtomicI64>,
    http: Family<HttpLabel, Histogram, fn() -> Histogram>,
    heartbeats: Family<HeartbeatLabel, Counter>,
    heartbeat_bytes: Family<HeartbeatLabel, Counter>,
    cycle_lock_held: Histogram,
    cycle_copy_by_apply: Histogram,
    apply_lock_held: Histogram,
    apply_lock_wait: Histogram,
    cycle_wall: Histogram,
    digest: Family<DigestPartLabel, Histogram, fn() -> Histogram>,
    leader_gone_campaigns: Counter<u64, AtomicU64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DigestPartLabel {
    pub part: String,
}

fn digest_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, 2.0, 18))
}

fn http_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tideway");
        let submissions = Family::<ResultLabel, Counter>::default();
        registry.register(
            "workload_submissions",
            "Workload submissions by outcome",
            submissions.clone(),
        );
        let submit_latency = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "workload_submit_latency_seconds",
            "Time from request to acknowledged commit",
            submit_latency.clone(),
        );
        let term = Gauge::default();
        registry.register("raft_term", "Current Raft term", term.clone());
        let is_leader = Gauge::default();
        registry.register("raft_is_leader", "1 if this node leads", is_leader.clone());
        let last_applied = Gauge::default();
        registry.register(
            "raft_last_applied_index",
            "Last applied log index",
            last_applied.clone(),
        );
        let log_syncs = Counter::default();
        registry.register(
            "raft_log_syncs",
            "Durable log write transactions (fsyncs)",
            log_syncs.clone(),
        );
        let log_entries = Counter::default();
        registry.register(
            "raft_log_entries",
            "Log entries appended",
            log_entries.clone(),
        );
        let cycle_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "scheduler_cycle_seconds",
            "Time the scheduler core took for one cycle",
            cycle_seconds.clone(),
        );
        let assign_latency = Histogram::new(exponential_buckets(0.05, 2.0, 18));
        registry.register(
            "workload_submit_to_assign_seconds",
            "Time from submission to assignment to a member cluster",
            assign_latency.clone(),
        );
        let queue_depth = Family::<QueueLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "queue_pending_workloads",
            "Pending workloads per queue",
            queue_depth.clone(),
        );
        let preemptions = Family::<QueueLabel, Counter>::default();
        registry.register(
            "preemptions",
            "Workloads sent a preemption notice, by the victim's queue",
            preemptions.clone(),
        );
        let leader_gone_campaigns = Counter::default();
        registry.register(
            "raft_leader_gone_campaigns",
            "Pre-vote rounds this node started at the end of a dead leader's lease, on seeing its watch break",
            leader_gone_campaigns.clone(),
        );
        let reroutes = Counter::default();
        registry.register(
            "reroutes",
            "Workloads assigned again after a failed or evicted attempt",
            reroutes.clone(),
        );
        let member_phase = Family::<MemberPhaseLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "member_phase",
            "1 for the phase each member cluster is in (Ready, NotReady, Draining, Cordoned)",
            member_phase.clone(),
        );
        let rejected = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "workload_submissions_rejected",
            "Workload submissions refused, by the problem type of the answer (invalid, conflict, forbidden, ...)",
            rejected.clone(),
        );
        let evictions = Family::<ClusterLabel, Counter>::default();
        registry.register(
            "node_evictions",
            "Workloads a member cluster reported evicted (node fault, local or our preemption)",
            evictions.clone(),
        );
        let queue_quota = Family::<QueueQuotaLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "queue_quota_gpus",
            "GPUs of a flavor a queue may use now: the quota in force, with the tidal window that sets it",
            queue_quota.clone(),
        );
        let queue_used = Family::<QueueFlavorLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "queue_used_gpus",
            "GPUs of a flavor a queue's admitted, assigned and running workloads hold",
            queue_used.clone(),
        );
        let fragmentation = Family::<PoolLabel, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "fragmentation_ratio",
            "Free GPUs a whole-node gang cannot use, as a share of the free GPUs, per member pool and flavor",
            fragmentation.clone(),
        );
        let capacity = Family::<CapacityLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "member_capacity_gpus",
            "GPUs of each member pool by state (total, allocated, free, unhealthy, cordoned, borrowed)",
            capacity.clone(),
        );
        let workloads = Family::<PhaseLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "workloads",
            "Workloads held in the replicated state, by phase",
            workloads.clone(),
        );
        let reschedule_ratio = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "rescheduling_success_ratio",
            "Of the workloads whose first placement failed or was evicted, the share placed again (assigned, running or succeeded) rather than failed; 1 when there are none",
            reschedule_ratio.clone(),
        );
        let commit_index = Gauge::default();
        registry.register(
            "raft_commit_index",
            "Highest log index this node knows to be committed",
            commit_index.clone(),
        );
        let apply_lag = Gauge::default();
        registry.register(
            "raft_apply_lag",
            "Committed log entries this node has not applied yet",
            apply_lag.clone(),
        );
        let http =
            Family::<HttpLabel, Histogram, fn() -> Histogram>::new_with_constructor(http_histogram);
        registry.register(
            "http_request_duration_seconds",
            "HTTP requests by method, matched route template and status",
            http.clone(),
        );
        let heartbeats = Family::<HeartbeatLabel, Counter>::default();
        registry.register(
            "member_heartbeats",
            "Member heartbeats this node received, by what they carried (full digest, delta, unchanged, none) and resyncs (a delta whose base the leader did not hold)",
            heartbeats.clone(),
        );
        let heartbeat_bytes = Family::<HeartbeatLabel, Counter>::default();
        registry.register(
            "member_heartbeat_bytes",
            "Request body bytes of the member heartbeats this node received, by what they carried",
            heartbeat_bytes.clone(),
        );
        // Apply waits while the cycle reads the state: the bound is a millisecond, so the
        // buckets start at 10 µs.
        let cycle_lock_held = Histogram::new(exponential_buckets(0.000_01, 2.0, 18));
        registry.register(
            "scheduler_cycle_lock_held_seconds",
            "Time one scheduling cycle held the state lock (each hold: input, decisions)",
            cycle_lock_held.clone(),
        );
        // The cycle's copy made by apply after an entry (`raft::copy_slot`): apply's hold
        // grows by this, and the cycle holds nothing.
        let cycle_copy_by_apply = Histogram::new(exponential_buckets(0.000_01, 2.0, 18));
        registry.register(
            "scheduler_cycle_copy_by_apply_seconds",
            "Time apply spent, holding the state's write lock after an entry, on a scheduling cycle's copy of the state",
            cycle_copy_by_apply.clone(),
        );
        // The other way round: readers (status, list, a submission's checks) wait while
        // apply holds the state for one entry.
        let apply_lock_held = Histogram::new(exponential_buckets(0.000_01, 2.0, 18));
        registry.register(
            "state_apply_lock_held_seconds",
            "Time apply held the state's write lock for one log entry (readers wait meanwhile)",
            apply_lock_held.clone(),
        );
        // And apply's own wait for the lock: how long readers (a scheduling cycle's copy taken
        // under its own read lock among them) held it off. The cycle must not hold apply off
        // for more than 1 ms, which a reader's hold only bounds from above. Buckets doubling
        // from 15.625 us, so that 1 ms is a bound: the waits over it are counted exactly.
        let apply_lock_wait = Histogram::new(exponential_buckets(0.000_015_625, 2.0, 18));
        registry.register(
            "state_apply_lock_wait_seconds",
            "Time apply waited for the state's write lock before one log entry (readers held it)",
            apply_lock_wait.clone(),
        );
        let cycle_wall = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "scheduler_cycle_wall_seconds",
            "Time from a cycle's first read of the state to its decisions ready to propose",
            cycle_wall.clone(),
        );
        let digest = Family::<DigestPartLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            digest_histogram,
        );
        registry.register(
            "state_digest_seconds",
            "Time one state digest of cluster status took, by part: walk (the entries changed \
             since the last digest), rest (the part encoded whole) and free (the previous \
             digest's copy)",
            digest.clone(),
        );
        Self {
            leader_gone_campaigns,
            digest,
            heartbeats,
            heartbeat_bytes,
            cycle_lock_held,
            cycle_copy_by_apply,
            apply_lock_held,
            apply_lock_wait,
            cycle_wall,
            rejected,
            evictions,
            fragmentation,
            queue_quota,
            queue_used,
            capacity,
            workloads,
            reschedule_ratio,
            commit_index,
            apply_lag,
            http,
            member_phase,
            registry,
            cycle_seconds,
            assign_latency,
            queue_depth,
            preemptions,
            reroutes,
            submissions,
            submit_latency,
            term,
            is_leader,
            last_applied,
            log_syncs,
            log_entries,
        }
    }
}

impl Metrics {
    pub fn submissions(&self, result: &str) {
        self.submissions
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    pub fn observe_cycle(&self, d: Duration, depth: &std::collections::BTreeMap<String, i64>) {
        self.cycle_seconds.observe(d.as_secs_f64());
        for (q, n) in depth {
            self.queue_depth
                .get_or_create(&QueueLabel { queue: q.clone() })
                .set(*n);
        }
    }

    /// The histogram apply records its holds of the state's write lock in (shared: the state
    /// machine keeps a handle to it).
    pub fn apply_lock_held(&self) -> Histogram {
        self.apply_lock_held.clone()
    }

    /// The histogram apply records its waits for the state's write lock in (shared, as
    /// [`Self::apply_lock_held`]).
    pub fn apply_lock_wait(&self) -> Histogram {
        self.apply_lock_wait.clone()
    }

    /// One hold of the state lock by the scheduling cycle.
    pub fn observe_cycle_lock(&self, d: Duration) {
        self.cycle_lock_held.observe(d.as_secs_f64());
    }

    /// One copy of the state for the scheduling cycle, made by apply.
    pub fn observe_cycle_copy_by_apply(&self, d: Duration) {
        self.cycle_copy_by_apply.observe(d.as_secs_f64());
    }

    /// One state digest of `cluster status`, by part.
    pub fn observe_digest(&self, t: &crate::raft::digest::Timing) {
        for (part, d) in [("walk", t.walk), ("rest", t.rest), ("free", t.free)] {
            self.digest
                .get_or_create(&DigestPartLabel {
                    part: part.to_string(),
                })
                .observe(d.as_secs_f64());
        }
    }

    /// A whole cycle: reading the state, building the input, the core, the decisions.
    pub fn observe_cycle_wall(&self, d: Duration) {
        self.cycle_wall.observe(d.as_secs_f64());
    }

    pub fn observe_assign(&self, d: Duration) {
        self.assign_latency.observe(d.as_secs_f64());
    }

    /// A pre-vote round started because the leader's watch broke (see `raft::leader_watch`).
    pub fn leader_gone_campaign(&self) {
        self.leader_gone_campaigns.inc();
    }

    pub fn reroute(&self) {
        self.reroutes.inc();
    }

    /// Counts preemption notices, one per victim, by the victim's queue.
    pub fn preempted<'a>(&self, victim_queues: impl IntoIterator<Item = &'a str>) {
        for queue in victim_queues {
            self.preemptions
                .get_or_create(&QueueLabel {
                    queue: queue.to_string(),
                })
                .inc();
        }
    }

    /// Counts a refused submission by its problem type.
    pub fn rejected(&self, reason: &str) {
        self.rejected
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts a member's heartbeat of `bytes` by what it carried (see [`HeartbeatLabel`]).
    pub fn heartbeat(&self, cluster: &str, digest: &str, bytes: usize) {
        let label = HeartbeatLabel {
            cluster: cluster.to_string(),
            digest: digest.to_string(),
        };
        self.heartbeats.get_or_create(&label).inc();
        self.heartbeat_bytes
            .get_or_create(&label)
            .inc_by(bytes as u64);
    }

    /// Counts workloads a member reported evicted.
    pub fn evicted(&self, cluster: &str, n: usize) {
        self.evictions
            .get_or_create(&ClusterLabel {
                cluster: cluster.to_string(),
            })
            .inc_by(n as u64);
    }

    /// One HTTP request's latency, by method, matched route and status.
    pub fn observe_http(&self, method: &str, route: &str, status: u16, d: Duration) {
        self.http
            .get_or_create(&HttpLabel {
                method: method.to_string(),
                route: route.to_string(),
                status,
            })
            .observe(d.as_secs_f64());
    }

    /// Sets the gauges read from the replicated state at render time (every node reports
    /// them, followers too).
    pub fn set_state(&self, s: &StateGauges) {
        // Counters of every queue and member exist from the start at 0, so `increase()` sees
        // the first event and the families are served before anything happened.
        for queue in &s.queues {
            self.preemptions
                .get_or_create(&QueueLabel {
                    queue: queue.clone(),
                })
                .inc_by(0);
        }
        for p in &s.pools {
            self.evictions
                .get_or_create(&ClusterLabel {
                    cluster: p.cluster.clone(),
                })
                .inc_by(0);
        }
        for p in &s.pools {
            let pool = PoolLabel {
                cluster: p.cluster.clone(),
                pool: p.pool.clone(),
                flavor: p.flavor.clone(),
            };
            self.fragmentation.get_or_create(&pool).set(p.fragmentation);
            for (state, gpus) in p.gpus {
                self.capacity
                    .get_or_create(&CapacityLabel {
                        cluster: p.cluster.clone(),
                        pool: p.pool.clone(),
                        flavor: p.flavor.clone(),
                        state: state.to_string(),
                    })
                    .set(i64::try_from(gpus).unwrap_or(i64::MAX));
            }
        }
        // Cleared first: when a window ends, its series goes rather than lingering beside the
        // next window's.
        self.queue_quota.clear();
        for q in &s.queue_flavors {
            if let Some((window, quota)) = &q.quota {
                self.queue_quota
                    .get_or_create(&QueueQuotaLabel {
                        queue: q.queue.clone(),
                        flavor: q.flavor.clone(),
                        window: window.clone(),
                    })
                    .set(i64::try_from(*quota).unwrap_or(i64::MAX));
            }
            self.queue_used
                .get_or_create(&QueueFlavorLabel {
                    queue: q.queue.clone(),
                    flavor: q.flavor.clone(),
                })
                .set(i64::try_from(q.used).unwrap_or(i64::MAX));
        }
        for (phase, n) in &s.phases {
            self.workloads
                .get_or_create(&PhaseLabel {
                    phase: phase.clone(),
                })
                .set(*n);
        }
        let tried = s.rescheduled_ok + s.rescheduled_failed;
        self.reschedule_ratio.set(if tried == 0 {
            1.0
        } else {
            s.rescheduled_ok as f64 / tried as f64
        });
    }

    /// Sets every member's phase series from the replicated state.
    pub fn set_member_phases(&self, members: &[(String, tideway_api::MemberPhase)]) {
        use tideway_api::MemberPhase::{Cordoned, Draining, NotReady, Quarantined, Ready};
        for (cluster, current) in members {
            for phase in [Ready, NotReady, Draining, Cordoned, Quarantined] {
                self.member_phase
                    .get_or_create(&MemberPhaseLabel {
                        cluster: cluster.clone(),
                        phase: format!("{phase:?}"),
                    })
                    .set(i64::from(phase == *current));
            }
        }
    }

    pub fn observe_submit(&self, d: Duration) {
        self.submit_latency.observe(d.as_secs_f64());
    }

    /// Encodes the registry in the OpenMetrics text format, with the node's Raft gauges and
    /// log counters brought up to date first.
    pub fn encode(&self, node: &NodeGauges) -> Result<String, std::fmt::Error> {
        self.term.set(node.term as i64);
        self.is_leader.set(i64::from(node.is_leader));
        self.last_applied.set(node.last_applied as i64);
        self.commit_index.set(node.committed as i64);
        self.apply_lag
            .set(node.committed.saturating_sub(node.last_applied) as i64);
        // Counters only go up; catch them up to the store's own counts.
        let s = self.log_syncs.get();
        self.log_syncs.inc_by(node.log_syncs.saturating_sub(s));
        let e = self.log_entries.get();
        self.log_entries.inc_by(node.log_entries.saturating_sub(e));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// What the node reports about itself at render time.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeGauges {
    pub term: u64,
    pub is_leader: bool,
    pub last_applied: u64,
    pub committed: u64,
    pub log_syncs: u64,
    pub log_entries: u64,
}

/// One member pool's capacity, as the metrics see it.
#[derive(Debug, Clone, Default)]
pub struct PoolGauges {
    pub cluster: String,
    pub pool: String,
    pub flavor: String,
    pub fragmentation: f64,
    /// GPUs by state: total, allocated, free, unhealthy, cordoned, borrowed.
    pub gpus: [(&'static str, u64); 6],
}

/// What the replicated state says at render time.
#[derive(Debug, Clone, Default)]
pub struct StateGauges {
    pub pools: Vec<PoolGauges>,
    /// Per queue and flavor: the quota in force with its window, and the GPUs used.
    pub queue_flavors: Vec<QueueFlavorGauges>,
    /// Every queue's name.
    pub queues: Vec<String>,
    /// Workloads per phase (every phase, zeros included, so a series never vanishes).
    pub phases: Vec<(String, i64)>,
    /// Workloads placed again after a failed or evicted attempt, and those that failed.
    pub rescheduled_ok: u64,
    pub rescheduled_failed: u64,
}

/// One queue's use of one flavor and the quota in force, as `GET /v1/queues` shows it.
#[derive(Debug, Clone, Default)]
pub struct QueueFlavorGauges {
    pub queue: String,
    pub flavor: String,
    /// The quota in force and the window that sets it; `None` when the queue has none.
    pub quota: Option<(String, u64)>,
    pub used: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tideway_api::MemberPhase;

    #[test]
    fn member_phases_are_one_series_per_phase_with_the_current_one_set() {
        let m = Metrics::default();
        m.set_member_phases(&[("eu".into(), MemberPhase::NotReady)]);
        m.set_member_phases(&[("eu".into(), MemberPhase::Ready)]);
        let out = m.encode(&NodeGauges::default()).unwrap();
        for line in [
            r#"tideway_member_phase{cluster="eu",phase="Ready"} 1"#,
            r#"tideway_member_phase{cluster="eu",phase="NotReady"} 0"#,
            r#"tideway_member_phase{cluster="eu",phase="Cordoned"} 0"#,
        ] {
            assert!(out.contains(line), "{line} not in {out}");
        }
    }

    #[test]
    fn state_gauges_preemptions_evictions_and_rejections_are_labelled() {
        let m = Metrics::default();
        m.preempted(["batch", "batch", "research"]);
        m.rejected("invalid");
        m.evicted("eu", 2);
        m.set_state(&StateGauges {
            pools: vec![PoolGauges {
                cluster: "eu".into(),
                pool: "training".into(),
                flavor: "H100".into(),
                fragmentation: 0.25,
                gpus: [
                    ("total", 80),
                    ("allocated", 40),
                    ("free", 40),
                    ("unhealthy", 0),
                    ("cordoned", 0),
                    ("borrowed", 8),
                ],
            }],
            queue_flavors: vec![QueueFlavorGauges {
                queue: "research".into(),
                flavor: "H100".into(),
                quota: Some(("day".into(), 25)),
                used: 24,
            }],
            phases: vec![("running".into(), 3)],
            queues: vec!["idle".into()],
            rescheduled_ok: 3,
            rescheduled_failed: 1,
        });
        let out = m
            .encode(&NodeGauges {
                committed: 10,
                last_applied: 7,
                ..NodeGauges::default()
            })
            .unwrap();
        for line in [
            r#"tideway_preemptions_total{queue="batch"} 2"#,
            r#"tideway_preemptions_total{queue="research"} 1"#,
            r#"tideway_preemptions_total{queue="idle"} 0"#,
            r#"tideway_workload_submissions_rejected_total{reason="invalid"} 1"#,
            r#"tideway_node_evictions_total{cluster="eu"} 2"#,
            r#"tideway_fragmentation_ratio{cluster="eu",pool="training",flavor="H100"} 0.25"#,
            r#"tideway_member_capacity_gpus{cluster="eu",pool="training",flavor="H100",state="borrowed"} 8"#,
            r#"tideway_workloads{phase="running"} 3"#,
            r#"tideway_queue_quota_gpus{queue="research",flavor="H100",window="day"} 25"#,
            r#"tideway_queue_used_gpus{queue="research",flavor="H100"} 24"#,
            "tideway_rescheduling_success_ratio 0.75",
            "tideway_raft_commit_index 10",
            "tideway_raft_apply_lag 3",
        ] {
            assert!(out.contains(line), "{line} not in {out}");
        }
    }
}
