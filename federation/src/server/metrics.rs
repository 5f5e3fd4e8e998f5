//! `GET /metrics`: renders the node's registry (kept in [`crate::metrics`]).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::metrics::{NodeGauges, PoolGauges, QueueFlavorGauges, StateGauges};
use crate::state::FederationState as FedState;
use tideway_api::WorkloadPhase;

pub async fn render(State(st): State<AppState>) -> Response {
    let m = crate::raft::metrics(&st.raft);
    let node = NodeGauges {
        term: m.current_term,
        is_leader: m.current_leader == Some(m.id),
        last_applied: m.last_applied.map(|l| l.index()).unwrap_or(0),
        committed: m.local_committed.map(|l| l.index()).unwrap_or(0),
        log_syncs: st.log_stats.syncs.load(Ordering::Relaxed),
        log_entries: st.log_stats.entries.load(Ordering::Relaxed),
    };
    // Member health comes from the replicated state, so every node reports it.
    if let Ok(members) = st.read(|d| {
        d.state
            .members
            .iter()
            .map(|(n, m)| {
                let phase = m.cluster.status.as_ref().map(|s| s.phase);
                (n.clone(), phase.unwrap_or_default())
            })
            .collect::<Vec<_>>()
    }) {
        st.metrics.set_member_phases(&members);
    }
    // The phase counts walk every workload: on a copy (O(1) under the lock) and on a
    // blocking thread, so that a scrape holds neither apply nor an async worker for a time
    // that grows with the backlog.
    let now = st.clock.now();
    if let Ok(copy) = st.read(|d| d.copy())
        && let Ok(gauges) = tokio::task::spawn_blocking(move || state_gauges(&copy, now)).await
    {
        st.metrics.set_state(&gauges);
    }
    match st.metrics.encode(&node) {
        Ok(out) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        )
            .into_response(),
        Err(_) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "encode failed",
        )
            .into_response(),
    }
}

/// Capacity, fragmentation, phases and rescheduling outcomes from the replicated state.
fn state_gauges(state: &FedState, now: chrono::DateTime<chrono::Utc>) -> StateGauges {
    let view = super::members::capacity_view(state);
    let pools = view
        .clusters
        .iter()
        .flat_map(|c| {
            c.pools.iter().map(|p| PoolGauges {
                cluster: c.cluster.clone(),
                pool: p.pool.clone(),
                flavor: p.flavor.clone(),
                fragmentation: p.fragmentation,
                gpus: [
                    ("total", p.capacity.total),
                    ("allocated", p.capacity.allocated),
                    ("free", p.capacity.free),
                    ("unhealthy", p.capacity.unhealthy),
                    ("cordoned", p.capacity.cordoned),
                    ("borrowed", p.capacity.borrowed),
                ],
            })
        })
        .collect();
    let mut phases: Vec<(String, i64)> = WorkloadPhase::ALL
        .iter()
        .map(|p| (p.as_str().to_string(), 0))
        .collect();
    let (mut ok, mut failed) = (0, 0);
    for w in state.workloads.values() {
        let Some(st) = &w.status else { continue };
        if let Some(slot) = phases.iter_mut().find(|(p, _)| p == st.phase.as_str()) {
            slot.1 += 1;
        }
        // A second attempt: the first placement failed or was evicted.
        if st.attempts > 1 {
            match st.phase {
                WorkloadPhase::Assigned | WorkloadPhase::Running | WorkloadPhase::Succeeded => {
                    ok += 1
                }
                WorkloadPhase::Failed => failed += 1,
                _ => {}
            }
        }
    }
    // The quota in force, as `GET /v1/queues` computes it from the schedules' windows.
    let queue_flavors = crate::dispatcher::queue_view::with_status(state, now)
        .into_iter()
        .flat_map(|q| {
            let name = q.metadata.name.clone();
            q.status
                .map(|s| s.flavors)
                .unwrap_or_default()
                .into_iter()
                .map(move |f| QueueFlavorGauges {
                    queue: name.clone(),
                    used: f.used_gpus,
                    quota: f.quota_gpus.map(|g| {
                        let window = match &f.set_by {
                            Some(by) => by.window.clone().unwrap_or_else(|| "default".into()),
                            None => "-".into(),
                        };
                        (window, g)
                    }),
                    flavor: f.flavor,
                })
        })
        .collect();
    StateGauges {
        pools,
        queue_flavors,
        queues: state.queues.keys().cloned().collect(),
        phases,
        rescheduled_ok: ok,
        rescheduled_failed: failed,
    }
}
