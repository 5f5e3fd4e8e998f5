//! What a quota schedule's next boundary will do, on the live state: the quotas before and
//! after, and the running workloads the first cycle after it would reclaim.
//!
//! The answer is the leader's own cycle, not a second model of reclaim: a copy of the state
//! gets the transition recorded as the leader's tidal loop would record it, and the core
//! runs once on it at the boundary's instant. Nothing is proposed.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tideway_api::digest::CapacityDigest;
use tideway_api::{QuotaChange, QuotaSetBy, ReclaimPreview, ScheduleNext};
use tideway_scheduler::tidal::{Calendar, WindowState, overrides_now, window_name};
use tideway_scheduler::{Decision, QuotaOverride};

use super::cycle::build_input;
use crate::state::FederationState;

/// A week of boundaries at most: a schedule that keeps its window longer has no next one
/// worth previewing.
const LOOKAHEAD: usize = 64;

fn target_of(o: &QuotaOverride) -> String {
    match o.side {
        Some(side) => format!("pool/{}", side.name()),
        None => format!("queue/{}", o.queue),
    }
}

/// The next boundary of schedule `name` at which its window changes, and what it does;
/// `None` when no such schedule is applied.
pub fn next_boundary(
    state: &FederationState,
    name: &str,
    latest: impl Fn(&str) -> Option<CapacityDigest>,
    now: DateTime<Utc>,
) -> Option<ScheduleNext> {
    let schedule = state.tidal.schedules.get(name)?;
    let spec = &schedule.spec;
    let recorded = state
        .tidal
        .windows
        .get(name)
        .cloned()
        .unwrap_or(WindowState {
            window: None,
            since: now,
        });
    let mut out = ScheduleNext {
        schedule: name.to_owned(),
        time_zone: spec.time_zone.clone(),
        from: recorded.window.clone(),
        to: None,
        at: None,
        at_local: None,
        seconds_left: None,
        grace_seconds: spec.transition.checkpoint_grace_seconds,
        quotas: Vec::new(),
        reclaims: Vec::new(),
        lost_gpu_hours: 0.0,
    };
    // The first change that leaves the recorded window (one the tidal loop has not recorded
    // yet, if the clock is already past it, comes first).
    let cal = Calendar::new(spec).ok()?;
    let mut t = recorded.since.max(now - chrono::Duration::days(1));
    let mut change = None;
    for _ in 0..LOOKAHEAD {
        let Some(c) = cal.next_change(t).ok().flatten() else {
            break;
        };
        if window_name(spec, c.to) != recorded.window {
            change = Some(c);
            break;
        }
        t = c.at;
    }
    let Some(change) = change else {
        return Some(out);
    };
    let at = change.at;
    let to = window_name(spec, change.to);
    out.to = to.clone();
    out.at = Some(at);
    out.at_local = Some(QuotaSetBy::local(at, &spec.time_zone));
    out.seconds_left = Some((at - now).num_seconds());

    // The state as it will be just after the leader records the transition.
    let mut after = state.clone();
    after.tidal.windows.insert(
        name.to_owned(),
        WindowState {
            window: to,
            since: at,
        },
    );
    let queues: Vec<_> = state.queues.values().cloned().collect();
    let clusters = state.cluster_views();
    let before_o = overrides_now(schedule, &recorded, &clusters, &queues, now);
    let after_o = overrides_now(schedule, &after.tidal.windows[name], &clusters, &queues, at);
    let mut quotas: BTreeMap<(String, String), QuotaChange> = BTreeMap::new();
    for (o, is_after) in before_o
        .iter()
        .map(|o| (o, false))
        .chain(after_o.iter().map(|o| (o, true)))
    {
        let key = (target_of(o), o.quota.flavor.clone());
        let e = quotas.entry(key.clone()).or_insert_with(|| QuotaChange {
            target: key.0,
            flavor: key.1,
            before: None,
            after: None,
        });
        let gpus = Some(u64::from(o.quota.guaranteed));
        if is_after {
            e.after = gpus;
        } else {
            e.before = gpus;
        }
    }
    out.quotas = quotas.into_values().collect();

    let input = build_input(&after, &latest, at, 0);
    let output = tideway_scheduler::schedule(&input);
    let running: BTreeMap<&str, &tideway_scheduler::RunningWorkload> = input
        .running
        .iter()
        .map(|r| (tideway_scheduler::input::uid_of(&r.workload), r))
        .collect();
    let pending: BTreeMap<&str, &str> = input
        .pending
        .iter()
        .map(|p| {
            (
                tideway_scheduler::input::uid_of(&p.workload),
                p.workload.metadata.name.as_str(),
            )
        })
        .collect();
    for d in &output.decisions {
        let Decision::Preempt {
            preemptor,
            victims,
            cluster,
            ..
        } = d
        else {
            continue;
        };
        for v in victims {
            let Some(r) = running.get(v.as_str()) else {
                continue;
            };
            let gpus = r.workload.spec.total_gpus();
            let since = r
                .last_checkpoint_at
                .into_iter()
                .chain(r.started_at)
                .max()
                .unwrap_or(at);
            let hours = (at - since).num_seconds().max(0) as f64 / 3600.0;
            let lost = gpus as f64 * hours;
            out.lost_gpu_hours += lost;
            out.reclaims.push(ReclaimPreview {
                workload: r.workload.metadata.name.clone(),
                queue: r.workload.spec.queue.to_string(),
                cluster: cluster.to_string(),
                gpus,
                for_workload: pending
                    .get(preemptor.as_str())
                    .map_or_else(|| preemptor.to_string(), |n| (*n).to_owned()),
                lost_gpu_hours: (lost * 100.0).round() / 100.0,
            });
        }
    }
    out.reclaims.sort_by(|a, b| a.workload.cmp(&b.workload));
    out.lost_gpu_hours = (out.lost_gpu_hours * 100.0).round() / 100.0;
    Some(out)
}
