//! The leader's tidal loop: quota schedules evaluated against the clock, each change of
//! window proposed as one log entry.
//!
//! The loop never decides from memory: every tick it reads the recorded window of each
//! schedule from the replicated state and proposes the changes between the recorded
//! boundary and now, oldest first. A new leader therefore resumes where the log says the
//! schedule is; a change proposed twice is refused by apply (see `state::tidal`), and one
//! that fell into a failover is replayed, not skipped.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tideway_api::clock::SharedClock;
use tideway_api::{
    Queue, QuotaScheduleStatus, ScheduleTimeline, ScheduleTransition,
    TimelineHour as TimelineHourView, TimelineQuota,
};
pub use tideway_scheduler::tidal::due_changes;
use tideway_scheduler::tidal::{
    Calendar, WindowState, capacity_in_scope, overrides, overrides_now, timeline, window_name,
};
use tideway_scheduler::{ClusterView, QuotaOverride};

use crate::propose::Proposer;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::FederationState;
use crate::state::command::Command;

/// How often the leader looks for due transitions: boundaries are whole minutes, so a
/// transition is applied within this of its instant.
pub const TIDAL_TICK: Duration = Duration::from_millis(500);

/// Proposes due transitions every tick while this node leads.
pub async fn tidal_loop(
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    clock: SharedClock,
) {
    loop {
        tokio::time::sleep(TIDAL_TICK).await;
        if !raft.is_leader() {
            continue;
        }
        let now = clock.now();
        let due: Vec<(String, Vec<_>)> = {
            let Ok(d) = data.read() else { continue };
            let tidal = &d.state.tidal;
            tidal
                .schedules
                .iter()
                .filter_map(|(name, s)| {
                    let rec = tidal.windows.get(name)?;
                    let due = due_changes(s, rec, now);
                    (!due.is_empty()).then(|| (name.clone(), due))
                })
                .collect()
        };
        for (schedule, changes) in due {
            for (from, to, boundary) in changes {
                tracing::info!(%schedule, ?from, ?to, %boundary, "tidal transition");
                let cmd = Command::TidalTransition {
                    schedule: schedule.clone(),
                    from,
                    to,
                    boundary,
                    at: now,
                };
                if let Err(e) = proposer.propose(cmd).await {
                    tracing::warn!(error = %e, %schedule, "could not commit a tidal transition");
                    break;
                }
            }
        }
    }
}

/// The quota overrides of every applied schedule in its recorded window, for one cycle.
pub fn quota_overrides(
    state: &FederationState,
    clusters: &[ClusterView],
    queues: &[Queue],
    now: DateTime<Utc>,
) -> Vec<QuotaOverride> {
    let mut out = Vec::new();
    for (name, schedule) in &state.tidal.schedules {
        let Some(rec) = state.tidal.windows.get(name) else {
            continue;
        };
        out.extend(overrides_now(schedule, rec, clusters, queues, now));
    }
    out
}

/// The scheduler's view of the members, for shares of live capacity.
pub fn cluster_views(state: &FederationState) -> Vec<ClusterView> {
    state.cluster_views()
}

/// Where schedule `name` stands and `hours` hours of its quotas from `now`; `None` when
/// no such schedule is applied. Hours use the calendar; the current window is the
/// recorded one.
pub fn timeline_view(
    state: &FederationState,
    name: &str,
    now: DateTime<Utc>,
    hours: u32,
) -> Option<ScheduleTimeline> {
    let schedule = state.tidal.schedules.get(name)?;
    let spec = &schedule.spec;
    let rec = state
        .tidal
        .windows
        .get(name)
        .cloned()
        .unwrap_or(WindowState {
            window: None,
            since: now,
        });
    let cal = Calendar::new(spec).ok()?;
    let tz = cal.tz();
    let next = cal.next_change(now).ok().flatten();
    let clusters = cluster_views(state);
    let capacity = capacity_in_scope(spec, &clusters);
    let queues: Vec<Queue> = state.queues.values().cloned().collect();
    let quotas_in = |window: Option<String>| -> Vec<TimelineQuota> {
        let ws = WindowState { window, since: now };
        overrides(schedule, &ws, None, &capacity, &queues)
            .into_iter()
            .map(|o| TimelineQuota {
                target: match o.side {
                    Some(side) => format!("pool/{}", side.name()),
                    None => format!("queue/{}", o.queue),
                },
                flavor: o.quota.flavor,
                gpus: u64::from(o.quota.guaranteed),
            })
            .collect()
    };
    let hours = timeline(spec, now, hours)
        .ok()?
        .into_iter()
        .map(|h| TimelineHourView {
            start: h.start,
            local: h
                .start
                .with_timezone(&tz)
                .format("%a %Y-%m-%d %H:%M %Z")
                .to_string(),
            quotas: quotas_in(h.window.clone()),
            window: h.window,
        })
        .collect();
    Some(ScheduleTimeline {
        schedule: name.to_owned(),
        time_zone: spec.time_zone.clone(),
        status: QuotaScheduleStatus {
            active_window: rec.window.clone(),
            last_transition_at: Some(rec.since),
            next_transition_at: next.as_ref().map(|c| c.at),
        },
        next_window: next.and_then(|c| window_name(spec, c.to)),
        hours,
        transitions: state
            .tidal
            .history
            .iter()
            .filter(|t| t.schedule == name)
            .map(|t| ScheduleTransition {
                from: t.from.clone(),
                to: t.to.clone(),
                at: t.at,
                applied_at: t.applied_at,
                index: t.index,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use tideway_api::{
        QuotaAmount, QuotaSchedule, QuotaScheduleSpec, QuotaTarget, QuotaWindow, ScheduleScope,
        Transition, WindowQuota,
    };

    use super::*;

    fn schedule() -> QuotaSchedule {
        let q = |g| {
            vec![WindowQuota {
                target: QuotaTarget::Pool("inference".into()),
                flavor: Some("H100".into()),
                amount: QuotaAmount::Gpus(g),
            }]
        };
        QuotaSchedule::new(
            "tide",
            QuotaScheduleSpec {
                time_zone: "UTC".into(),
                windows: vec![
                    QuotaWindow::daily("day", "08:00", "20:00", q(8)),
                    QuotaWindow::daily("night", "20:00", "08:00", q(2)),
                ],
                default_quotas: None,
                transition: Transition::default(),
                scope: ScheduleScope::default(),
            },
        )
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_leader_away_for_a_day_replays_every_change_in_order() {
        let s = schedule();
        let rec = WindowState {
            window: Some("day".into()),
            since: utc("2030-01-01T08:00:00Z"),
        };
        let due = due_changes(&s, &rec, utc("2030-01-02T21:00:00Z"));
        let at: Vec<String> = due.iter().map(|d| d.2.to_rfc3339()).collect();
        assert_eq!(
            at,
            [
                "2030-01-01T20:00:00+00:00",
                "2030-01-02T08:00:00+00:00",
                "2030-01-02T20:00:00+00:00"
            ]
        );
        assert_eq!(due[0].0.as_deref(), Some("day"));
        assert_eq!(due[2].1.as_deref(), Some("night"));
        // Nothing is due while the record is current.
        let rec = WindowState {
            window: Some("night".into()),
            since: utc("2030-01-02T20:00:00Z"),
        };
        assert!(due_changes(&s, &rec, utc("2030-01-02T21:00:00Z")).is_empty());
    }

    #[test]
    fn overrides_follow_the_recorded_window_not_the_clock() {
        let mut st = FederationState::default();
        st.tidal.schedules.insert("tide".into(), schedule());
        st.tidal.windows.insert(
            "tide".into(),
            WindowState {
                window: Some("day".into()),
                since: utc("2030-01-01T08:00:00Z"),
            },
        );
        // The clock is past 20:00 but the transition is not committed yet.
        let o = quota_overrides(&st, &[], &[], utc("2030-01-01T20:00:01Z"));
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].quota.guaranteed, 8);
        assert_eq!(o[0].window.as_deref(), Some("day"));
        let o = quota_overrides(&st, &[], &[], utc("2030-01-01T19:00:00Z"));
        let h = o[0].handover.as_ref().unwrap();
        assert_eq!(h.boundary, utc("2030-01-01T20:00:00Z"));
        assert_eq!(h.next_guaranteed, Some(2));
    }
}
