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
    preemptions: Counter<u64, AtomicU64>,
    reroutes: Counter<u64, AtomicU64>,
    member_phase: Family<MemberPhaseLabel, Gauge<i64, AtomicI64>>,
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
        let preemptions = Counter::default();
        registry.register(
            "preemptions",
            "Workloads sent a preemption notice",
            preemptions.clone(),
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
        Self {
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

    pub fn observe_assign(&self, d: Duration) {
        self.assign_latency.observe(d.as_secs_f64());
    }

    pub fn reroute(&self) {
        self.reroutes.inc();
    }

    pub fn preempted(&self, n: usize) {
        self.preemptions.inc_by(n as u64);
    }

    /// Sets every member's phase series from the replicated state.
    pub fn set_member_phases(&self, members: &[(String, tideway_api::MemberPhase)]) {
        use tideway_api::MemberPhase::{Cordoned, Draining, NotReady, Ready};
        for (cluster, current) in members {
            for phase in [Ready, NotReady, Draining, Cordoned] {
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
    pub log_syncs: u64,
    pub log_entries: u64,
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
}
