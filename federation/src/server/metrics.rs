//! Prometheus metrics of a federation node.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::AppState;

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
}

pub async fn render(State(st): State<AppState>) -> Response {
    let m = crate::raft::metrics(&st.raft);
    st.metrics.term.set(m.current_term as i64);
    st.metrics
        .is_leader
        .set(i64::from(m.current_leader == Some(m.id)));
    st.metrics
        .last_applied
        .set(m.last_applied.map(|l| l.index() as i64).unwrap_or(0));
    let syncs = st
        .log_stats
        .syncs
        .load(std::sync::atomic::Ordering::Relaxed);
    let entries = st
        .log_stats
        .entries
        .load(std::sync::atomic::Ordering::Relaxed);
    // Counters only go up; catch them up to the store's own counts.
    let s = st.metrics.log_syncs.get();
    st.metrics.log_syncs.inc_by(syncs.saturating_sub(s));
    let e = st.metrics.log_entries.get();
    st.metrics.log_entries.inc_by(entries.saturating_sub(e));
    if let Ok(members) = st.read(|d| {
        d.state
            .members
            .iter()
            .map(|(n, m)| {
                (
                    n.clone(),
                    m.cluster
                        .status
                        .as_ref()
                        .map(|s| s.phase)
                        .unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>()
    }) {
        st.metrics.set_member_phases(&members);
    }
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &st.metrics.registry).is_err() {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "encode failed",
        )
            .into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
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
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &m.registry).unwrap();
        assert!(
            out.contains(r#"tideway_member_phase{cluster="eu",phase="Ready"} 1"#),
            "{out}"
        );
        assert!(
            out.contains(r#"tideway_member_phase{cluster="eu",phase="NotReady"} 0"#),
            "{out}"
        );
        assert!(
            out.contains(r#"tideway_member_phase{cluster="eu",phase="Cordoned"} 0"#),
            "{out}"
        );
    }
}
