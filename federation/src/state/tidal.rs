//! Quota schedules and their transitions, in the replicated state.
//!
//! The leader's tidal loop evaluates schedules against its clock, but what the scheduler
//! obeys is what is recorded here: the window each schedule is in and since when. Each
//! change of window is one log entry naming the schedule, the windows it goes from and to,
//! and the boundary instant. Apply accepts a transition only from the recorded window and
//! only forward in time, so a transition proposed twice (a leader that crashed after
//! proposing, its successor proposing again) is applied once, and a successor that finds
//! the record behind the clock replays the missed transitions in order instead of
//! skipping them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::{FieldError, QuotaSchedule, SchedulerSettings};
use tideway_scheduler::tidal::{Calendar, WindowState, window_name};

use super::FederationState;
use super::command::{CommandResult, Rejection};

/// Transitions kept for `schedule show` and the tests; older ones are in the log.
pub const TRANSITION_HISTORY: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TidalState {
    /// Applied quota schedules by name.
    pub schedules: BTreeMap<String, QuotaSchedule>,
    /// The window each schedule is in, as the last transition recorded it.
    pub windows: BTreeMap<String, WindowState>,
    /// Recent transitions, oldest first.
    pub history: Vec<TransitionRecord>,
    /// Scheduler settings of the last applied policy; `None` until one is applied.
    pub settings: Option<SchedulerSettings>,
    /// The policy version in force.
    pub policy_version: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransitionRecord {
    pub schedule: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// The window boundary.
    pub at: DateTime<Utc>,
    /// Log index of the entry that applied it.
    pub index: u64,
    /// When the leader proposed it (later than `at` after a failover).
    pub applied_at: DateTime<Utc>,
}

impl TidalState {
    /// The settings the scheduler runs with.
    pub fn settings(&self) -> SchedulerSettings {
        self.settings.clone().unwrap_or_default()
    }
}

impl FederationState {
    /// A schedule applied alone: checked against the queues, then the next policy version.
    pub(super) fn put_quota_schedule(
        &mut self,
        schedule: QuotaSchedule,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        if let Some(rejection) = self.check_schedule(&schedule) {
            return CommandResult::Rejected { rejection };
        }
        self.put_policy_object(
            super::policy::PolicyObject::QuotaSchedule(Box::new(schedule)),
            at,
            index,
        )
    }

    /// Stores a schedule and records the window open at `at`: apply evaluates the calendar
    /// itself (it is pure), so every node records the same window.
    pub(super) fn install_quota_schedule(
        &mut self,
        mut schedule: QuotaSchedule,
        at: DateTime<Utc>,
        index: u64,
    ) {
        schedule.metadata.resource_version = Some(index);
        schedule.metadata.creation_timestamp.get_or_insert(at);
        let name = schedule.metadata.name.clone();
        let window = Calendar::new(&schedule.spec)
            .and_then(|c| c.window_at(at))
            .ok()
            .flatten();
        let window = window_name(&schedule.spec, window);
        let keep = self
            .tidal
            .windows
            .get(&name)
            .is_some_and(|w| w.window == window);
        if !keep {
            let from = self.tidal.windows.get(&name).and_then(|w| w.window.clone());
            self.tidal.windows.insert(
                name.clone(),
                WindowState {
                    window: window.clone(),
                    since: at,
                },
            );
            self.record_transition(&name, from, window, at, at, index);
        }
        self.tidal.schedules.insert(name, schedule);
    }

    fn check_schedule(&self, schedule: &QuotaSchedule) -> Option<Rejection> {
        let errors: Vec<FieldError> = schedule
            .spec
            .windows
            .iter()
            .enumerate()
            .flat_map(|(i, w)| w.quotas.iter().enumerate().map(move |(j, q)| (i, j, q)))
            .filter_map(|(i, j, q)| match &q.target {
                tideway_api::QuotaTarget::Queue(n) if !self.queues.contains_key(n) => {
                    Some(FieldError::new(
                        format!("spec.windows[{i}].quotas[{j}].queue"),
                        format!("queue '{n}' does not exist"),
                    ))
                }
                _ => None,
            })
            .collect();
        (!errors.is_empty()).then_some(Rejection::Invalid { errors })
    }

    /// One change of window. Accepted only from the recorded window and forward in time;
    /// anything else was applied already (or concerns a schedule since replaced) and
    /// changes nothing.
    pub(super) fn tidal_transition(
        &mut self,
        schedule: &str,
        from: Option<String>,
        to: Option<String>,
        boundary: DateTime<Utc>,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        let Some(current) = self.tidal.windows.get(schedule) else {
            return CommandResult::Updated { count: 0 };
        };
        if current.window != from || boundary <= current.since {
            return CommandResult::Updated { count: 0 };
        }
        self.tidal.windows.insert(
            schedule.to_owned(),
            WindowState {
                window: to.clone(),
                since: boundary,
            },
        );
        self.record_transition(schedule, from, to, boundary, at, index);
        CommandResult::Updated { count: 1 }
    }

    fn record_transition(
        &mut self,
        schedule: &str,
        from: Option<String>,
        to: Option<String>,
        boundary: DateTime<Utc>,
        at: DateTime<Utc>,
        index: u64,
    ) {
        self.tidal.history.push(TransitionRecord {
            schedule: schedule.to_owned(),
            from,
            to,
            at: boundary,
            index,
            applied_at: at,
        });
        let excess = self.tidal.history.len().saturating_sub(TRANSITION_HISTORY);
        self.tidal.history.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{
        QuotaAmount, QuotaScheduleSpec, QuotaTarget, QuotaWindow, ScheduleScope, Transition,
        WindowQuota,
    };

    use super::*;
    use tideway_api::Policy;

    fn schedule() -> QuotaSchedule {
        let q = |g| {
            vec![WindowQuota {
                target: QuotaTarget::Pool("inference".into()),
                flavor: None,
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
    fn a_transition_is_applied_once_and_only_from_the_recorded_window() {
        let mut st = FederationState::default();
        st.put_quota_schedule(schedule(), utc("2030-01-01T12:00:00Z"), 1);
        assert_eq!(st.tidal.windows["tide"].window.as_deref(), Some("day"));
        let boundary = utc("2030-01-01T20:00:00Z");
        let apply = |st: &mut FederationState, index| {
            st.tidal_transition(
                "tide",
                Some("day".into()),
                Some("night".into()),
                boundary,
                boundary,
                index,
            )
        };
        assert_eq!(apply(&mut st, 2), CommandResult::Updated { count: 1 });
        // Proposed again by a new leader: nothing changes.
        assert_eq!(apply(&mut st, 3), CommandResult::Updated { count: 0 });
        assert_eq!(st.tidal.windows["tide"].since, boundary);
        assert_eq!(
            st.tidal
                .history
                .iter()
                .filter(|t| t.to.as_deref() == Some("night"))
                .count(),
            1
        );
        // Backwards in time: refused.
        let r = st.tidal_transition(
            "tide",
            Some("night".into()),
            Some("day".into()),
            utc("2030-01-01T08:00:00Z"),
            boundary,
            4,
        );
        assert_eq!(r, CommandResult::Updated { count: 0 });
    }

    #[test]
    fn a_policy_brings_settings_and_replaces_schedules() {
        let mut st = FederationState::default();
        st.put_quota_schedule(schedule(), utc("2030-01-01T12:00:00Z"), 1);
        let mut spec = tideway_api::PolicySpec::default();
        spec.scheduler.max_preemptions_per_minute = 3;
        st.put_policy(Policy::new("p", spec), utc("2030-01-01T13:00:00Z"), 2);
        assert!(st.tidal.schedules.is_empty());
        assert!(st.tidal.windows.is_empty());
        assert_eq!(st.tidal.settings().max_preemptions_per_minute, 3);
        assert_eq!(
            st.tidal.policy_version,
            Some(2),
            "the schedule was version 1"
        );
    }

    #[test]
    fn a_schedule_naming_an_unknown_queue_is_refused() {
        let mut st = FederationState::default();
        let mut s = schedule();
        s.spec.windows[0].quotas[0].target = QuotaTarget::Queue("ghost".into());
        let r = st.put_quota_schedule(s, utc("2030-01-01T12:00:00Z"), 1);
        assert!(matches!(r, CommandResult::Rejected { .. }), "{r:?}");
        assert!(st.tidal.schedules.is_empty());
    }
}
