//! The tidal engine: quota schedules evaluated against instants passed in.
//!
//! Pure like the rest of the core: the caller (the live leader on its injected clock, the
//! simulator on its virtual one) asks which window is open at an instant, when the next
//! change comes, and which quota overrides a window means for a cycle. The leader records
//! each change as one Raft entry and feeds the recorded window back here, so the quotas a
//! cycle sees follow the replicated state, not a node's clock.

mod admission;
pub mod calendar;
mod notice;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::{
    FlavorQuota, Queue, QuotaSchedule, QuotaScheduleSpec, QuotaTarget, ReclaimOrder, ScheduleError,
    WorkloadClass,
};

pub use calendar::{Calendar, Change, MAX_CATCH_UP_DAYS, Segment, resolve};

use super::input::{ClusterView, QuotaOverride};

/// The two sides of the fleet a pool quota moves GPUs between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FleetSide {
    /// Inference workloads.
    Inference,
    /// Training, eval and experiment workloads: batch work that can wait for the night.
    Training,
}

impl FleetSide {
    pub fn of_class(class: WorkloadClass) -> Self {
        match class {
            WorkloadClass::Inference => Self::Inference,
            WorkloadClass::Training | WorkloadClass::Eval | WorkloadClass::Experiment => {
                Self::Training
            }
        }
    }

    /// The side a pool target names (validation admits only these two).
    pub fn of_pool(name: &str) -> Option<Self> {
        match name {
            "inference" => Some(Self::Inference),
            "training" => Some(Self::Training),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Inference => "inference",
            Self::Training => "training",
        }
    }
}

/// How the side losing quota at the coming boundary hands it over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    /// The schedule that set the override.
    pub schedule: String,
    /// The next change of window.
    pub boundary: DateTime<Utc>,
    /// The guarantee after the boundary; `None` when the next window does not name it.
    pub next_guaranteed: Option<u32>,
    /// Within this long before the boundary the losing side starts no work that would
    /// outlast it, unless checkpointable.
    pub lead_seconds: u64,
    /// Notice given to work reclaimed for the winning side.
    pub grace_seconds: u64,
    pub reclaim_order: ReclaimOrder,
    /// From this long before the boundary the next window's guarantees govern reclaim
    /// (the hand-over), so the winning side holds its guarantee AT the boundary.
    #[serde(default)]
    pub handover_seconds: u64,
}

impl Handover {
    /// Whether `now` is within the lead time before a boundary that lowers `current`.
    pub fn closing(&self, now: DateTime<Utc>, current: u32) -> bool {
        let lead = chrono::Duration::seconds(i64::try_from(self.lead_seconds).unwrap_or(0));
        self.next_guaranteed.is_some_and(|n| n < current)
            && now < self.boundary
            && now >= self.boundary - lead
    }
}

/// What the replicated state says about one schedule: the window recorded by the last
/// transition, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowState {
    pub window: Option<String>,
    pub since: DateTime<Utc>,
}

/// Capacity per flavor of the Ready member clusters a schedule's scope covers: what shares
/// are shares of.
pub fn capacity_in_scope(
    spec: &QuotaScheduleSpec,
    clusters: &[ClusterView],
) -> BTreeMap<String, u64> {
    let scope = &spec.scope;
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for c in clusters {
        if !c.ready
            || (!scope.regions.is_empty() && !scope.regions.contains(&c.region))
            || (!scope.clusters.is_empty() && !scope.clusters.contains(&c.name))
        {
            continue;
        }
        for p in &c.digest.pools {
            if scope.flavors.is_empty() || scope.flavors.contains(&p.flavor) {
                let live = p
                    .counts
                    .total
                    .saturating_sub(p.counts.unhealthy)
                    .saturating_sub(p.counts.cordoned);
                *out.entry(p.flavor.clone()).or_insert(0) += u64::from(live);
            }
        }
    }
    out
}

/// The quota overrides a schedule in `state`'s window gives a cycle.
///
/// Queue quotas replace the queue's guarantee (its own borrowing and lending limits stay;
/// its `max` is raised to the window's quota if lower). Pool quotas become guarantees of a
/// fleet side within the schedule's regions. Shares resolve against `capacity` (see
/// [`capacity_in_scope`]); a quota without a flavor applies to every flavor in it.
pub fn overrides(
    schedule: &QuotaSchedule,
    state: &WindowState,
    next: Option<&Change>,
    capacity: &BTreeMap<String, u64>,
    queues: &[Queue],
) -> Vec<QuotaOverride> {
    let spec = &schedule.spec;
    let Some(quotas) = spec.quotas_of(state.window.as_deref()) else {
        return Vec::new();
    };
    let next_quotas = next.map(|c| {
        spec.quotas_of(
            c.to.and_then(|i| spec.windows.get(i))
                .map(|w| w.name.as_str()),
        )
    });
    let t = &spec.transition;
    let mut out = Vec::new();
    for q in quotas {
        let flavors: Vec<&String> = match &q.flavor {
            Some(f) => vec![f],
            None => capacity.keys().collect(),
        };
        for flavor in flavors {
            let cap = capacity.get(flavor).copied().unwrap_or(0);
            let gpus = u32::try_from(q.amount.resolve(cap)).unwrap_or(u32::MAX);
            let handover = next.map(|c| Handover {
                schedule: schedule.metadata.name.clone(),
                boundary: c.at,
                next_guaranteed: next_quotas.flatten().and_then(|nq| {
                    nq.iter()
                        .find(|n| {
                            n.target == q.target && n.flavor.as_ref().is_none_or(|f| f == flavor)
                        })
                        .map(|n| u32::try_from(n.amount.resolve(cap)).unwrap_or(u32::MAX))
                }),
                lead_seconds: t.lead_time_seconds,
                grace_seconds: t.checkpoint_grace_seconds,
                reclaim_order: t.reclaim_order,
                handover_seconds: t.handover_lead_seconds.unwrap_or(0),
            });
            let (queue, side, quota) = match &q.target {
                QuotaTarget::Queue(name) => {
                    let own = queues
                        .iter()
                        .find(|x| &x.metadata.name == name)
                        .and_then(|x| x.spec.quotas.iter().find(|f| &f.flavor == flavor));
                    let quota = FlavorQuota {
                        flavor: flavor.clone(),
                        guaranteed: gpus,
                        borrowing_limit: own.and_then(|o| o.borrowing_limit),
                        lending_limit: own.and_then(|o| o.lending_limit),
                        max: own.and_then(|o| o.max).map(|m| m.max(gpus)),
                    };
                    (name.clone(), None, quota)
                }
                QuotaTarget::Pool(name) => {
                    let Some(side) = FleetSide::of_pool(name) else {
                        continue;
                    };
                    (
                        String::new(),
                        Some(side),
                        FlavorQuota::guaranteed(flavor, gpus),
                    )
                }
            };
            out.push(QuotaOverride {
                queue,
                side,
                regions: if side.is_some() {
                    spec.scope.regions.clone()
                } else {
                    Vec::new()
                },
                quota,
                window: state.window.clone(),
                until: next.map(|c| c.at),
                handover,
            });
        }
    }
    out
}

/// A change of recorded window: from, to, and the boundary it belongs to.
pub type DueChange = (Option<String>, Option<String>, DateTime<Utc>);

/// Changes due for `schedule` given its recorded window, oldest first: what the live
/// leader proposes each tick and what the simulator applies at its virtual instants. After
/// a very long absence only the last `MAX_CATCH_UP_DAYS` are replayed.
pub fn due_changes(
    schedule: &QuotaSchedule,
    recorded: &WindowState,
    now: DateTime<Utc>,
) -> Vec<DueChange> {
    let Ok(cal) = Calendar::new(&schedule.spec) else {
        return Vec::new();
    };
    let floor = now - chrono::Duration::days(MAX_CATCH_UP_DAYS);
    let after = recorded.since.max(floor);
    let Ok(changes) = cal.changes_between(after, now) else {
        return Vec::new();
    };
    let spec = &schedule.spec;
    let mut from = recorded.window.clone();
    let mut out = Vec::new();
    for Change { at, to, .. } in changes {
        let to = window_name(spec, to);
        if to != from {
            out.push((from.clone(), to.clone(), at));
            from = to;
        }
    }
    out
}

/// The overrides one schedule in its recorded window gives a cycle at `now`: the next
/// change is the calendar's, but only if it leaves the recorded window (a transition not
/// yet recorded must not announce a hand-over from a window the cycle is not in); shares
/// resolve against the live capacity in the schedule's scope.
pub fn overrides_now(
    schedule: &QuotaSchedule,
    recorded: &WindowState,
    clusters: &[ClusterView],
    queues: &[Queue],
    now: DateTime<Utc>,
) -> Vec<QuotaOverride> {
    let next = Calendar::new(&schedule.spec)
        .ok()
        .and_then(|c| c.next_change(now).ok().flatten())
        .filter(|c| window_name(&schedule.spec, c.from) == recorded.window);
    let capacity = capacity_in_scope(&schedule.spec, clusters);
    overrides(schedule, recorded, next.as_ref(), &capacity, queues)
}

/// One hour of a schedule's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineHour {
    pub start: DateTime<Utc>,
    pub window: Option<String>,
}

/// The window open at the start of each hour from `from`, for `hours` hours.
pub fn timeline(
    spec: &QuotaScheduleSpec,
    from: DateTime<Utc>,
    hours: u32,
) -> Result<Vec<TimelineHour>, ScheduleError> {
    let cal = Calendar::new(spec)?;
    let to = from + chrono::Duration::hours(i64::from(hours));
    let segs = cal.segments(from, to)?;
    Ok((0..hours)
        .map(|h| {
            let t = from + chrono::Duration::hours(i64::from(h));
            let window = segs
                .iter()
                .find(|s| s.start <= t && t < s.end)
                .and_then(|s| s.window)
                .and_then(|i| spec.windows.get(i))
                .map(|w| w.name.clone());
            TimelineHour { start: t, window }
        })
        .collect())
}

/// The window name of an index.
pub fn window_name(spec: &QuotaScheduleSpec, i: Option<usize>) -> Option<String> {
    i.and_then(|i| spec.windows.get(i)).map(|w| w.name.clone())
}
