//! Quota schedules on the virtual clock: the live leader's tidal loop without Raft.
//!
//! The leader records each change of window as a log entry and builds every cycle's quota
//! overrides from the recorded window; here the record is a field, advanced at the same
//! instants by the same function (`tidal::due_changes`), and the overrides come from the
//! same `tidal::overrides_now`, so window-aware admission, side guarantees and reclaim in
//! a simulated cycle are the live ones. The engine wakes at every boundary and at the start
//! of every lead time, so nothing waits for an unrelated event to see a window change.
//!
//! It also keeps the figures a tidal schedule is judged by, per schedule and window: GPU
//! time of each fleet side within the schedule's scope, and the capacity there.

use std::collections::BTreeMap;

use serde::Serialize;
use tideway_api::{Queue, QuotaSchedule, WorkloadClass};
use tideway_scheduler::tidal::{
    Calendar, FleetSide, WindowState, capacity_in_scope, due_changes, overrides_now, window_name,
};
use tideway_scheduler::{ClusterView, QuotaOverride, side_guarantee_at};

use super::metrics::JobRecord;
use super::time::{Secs, to_utc};

/// Name under which time outside every window (the schedule's defaults) is reported.
pub const DEFAULT_WINDOW: &str = "(default)";

/// The schedules of a run, their recorded windows and their accounts.
pub(crate) struct Tides {
    tracks: Vec<Track>,
    /// Checkpoint notices carried out (see `tidal::notice` in the core).
    notices: u64,
}

struct Track {
    schedule: QuotaSchedule,
    recorded: WindowState,
    /// Member clusters (engine ids) the schedule's scope covers.
    in_scope: Vec<bool>,
    /// GPUs in scope (all flavors the scope names, or all).
    capacity: u64,
    /// The next instants the engine must wake at: the boundary and its lead time.
    next_boundary: Option<Secs>,
    lead: Secs,
    transitions: u64,
    windows: BTreeMap<String, WindowAcc>,
}

#[derive(Debug, Default, Clone)]
struct WindowAcc {
    seconds: i64,
    inference_gpu_secs: u128,
    training_gpu_secs: u128,
    capacity_gpu_secs: u128,
    /// Capacity training could have used: what inference left open, capped by the GPUs
    /// training ran plus those its waiting work asked for.
    usable_gpu_secs: u128,
}

impl Tides {
    /// The schedules as of `start`: each opens in the window the calendar has open then, as
    /// `tideway apply` records it. `views` are the members in engine order. Schedules whose
    /// calendar cannot be evaluated are left out with a note (validation makes that rare).
    pub fn new(
        schedules: &[QuotaSchedule],
        views: &[ClusterView],
        start: Secs,
        notes: &mut Vec<String>,
    ) -> Option<Self> {
        let mut tracks = Vec::new();
        for s in schedules {
            let spec = &s.spec;
            let window = match Calendar::new(spec).and_then(|c| c.window_at(to_utc(start))) {
                Ok(w) => window_name(spec, w),
                Err(e) => {
                    notes.push(format!(
                        "quotaSchedule {:?} is not simulated: {e}",
                        s.metadata.name
                    ));
                    continue;
                }
            };
            let scope = &spec.scope;
            let in_scope = views
                .iter()
                .map(|v| {
                    (scope.regions.is_empty() || scope.regions.contains(&v.region))
                        && (scope.clusters.is_empty() || scope.clusters.contains(&v.name))
                })
                .collect();
            let capacity = capacity_in_scope(spec, views).values().sum();
            let mut t = Track {
                schedule: s.clone(),
                recorded: WindowState {
                    window,
                    since: to_utc(start),
                },
                in_scope,
                capacity,
                next_boundary: None,
                lead: Secs::try_from(spec.transition.lead_time_seconds).unwrap_or(0),
                transitions: 0,
                windows: BTreeMap::new(),
            };
            t.plan(start);
            tracks.push(t);
        }
        (!tracks.is_empty()).then_some(Self { tracks, notices: 0 })
    }

    /// The next instant after `now` at which a window changes or a lead time begins.
    pub fn next_instant(&self, now: Secs) -> Option<Secs> {
        self.tracks
            .iter()
            .filter_map(|t| {
                let b = t.next_boundary?;
                let lead = b - t.lead;
                Some(if lead > now { lead } else { b })
            })
            .filter(|&t| t > now)
            .min()
    }

    /// Records the changes due at `now`, oldest first. True when something the scheduler
    /// must look at happened: a change, or the start of a lead time.
    pub fn advance(&mut self, now: Secs) -> bool {
        let mut woke = false;
        for t in &mut self.tracks {
            if t.next_boundary
                .is_some_and(|b| b - t.lead == now && t.lead > 0)
            {
                woke = true;
            }
            if t.next_boundary.is_none_or(|b| b > now) {
                continue;
            }
            for (_, to, at) in due_changes(&t.schedule, &t.recorded, to_utc(now)) {
                t.recorded = WindowState {
                    window: to,
                    since: at,
                };
                t.transitions += 1;
                woke = true;
            }
            t.plan(now);
        }
        woke
    }

    /// `n` more checkpoint notices were carried out.
    pub fn noticed(&mut self, n: usize) {
        self.notices += n as u64;
    }

    /// The quota overrides of every schedule in its recorded window, for a cycle at `now`.
    pub fn overrides(
        &self,
        clusters: &[ClusterView],
        queues: &[Queue],
        now: Secs,
    ) -> Vec<QuotaOverride> {
        self.tracks
            .iter()
            .flat_map(|t| overrides_now(&t.schedule, &t.recorded, clusters, queues, to_utc(now)))
            .collect()
    }

    /// `dt` seconds passed with `alloc[c]` GPUs of each side running on member `c` and
    /// `waiting_training` GPUs asked by training work waiting anywhere. The engine counts
    /// only time up to the last arrival.
    pub fn integrate(&mut self, dt: Secs, alloc: &[[u64; 2]], waiting_training: u64) {
        if dt <= 0 {
            return;
        }
        let dt128 = dt as u128;
        for t in &mut self.tracks {
            let (mut inf, mut tr) = (0u64, 0u64);
            for (c, a) in alloc.iter().enumerate() {
                if t.in_scope.get(c).copied().unwrap_or(false) {
                    inf += a[0];
                    tr += a[1];
                }
            }
            let name = t
                .recorded
                .window
                .clone()
                .unwrap_or_else(|| DEFAULT_WINDOW.to_owned());
            let acc = t.windows.entry(name).or_default();
            acc.seconds += dt;
            acc.inference_gpu_secs += u128::from(inf) * dt128;
            acc.training_gpu_secs += u128::from(tr) * dt128;
            acc.capacity_gpu_secs += u128::from(t.capacity) * dt128;
            let open = t.capacity.saturating_sub(inf);
            let usable = open.min(tr.saturating_add(waiting_training));
            acc.usable_gpu_secs += u128::from(usable) * dt128;
        }
    }

    /// The figures of the run, from the accounts and the job records.
    pub fn finish(&self, records: &[JobRecord], end: Secs) -> TidalSummary {
        // The notice the schedules give: inference served within it counts as served.
        let grace = self
            .tracks
            .iter()
            .map(|t| t.schedule.spec.transition.checkpoint_grace_seconds)
            .max()
            .unwrap_or(0);
        let grace = Secs::try_from(grace).unwrap_or(Secs::MAX);
        let mut unserved = 0u128;
        let mut late = 0u64;
        let mut lost = 0u64;
        let (mut owed_unserved, mut owed_late) = (0u128, 0u64);
        for r in records {
            if FleetSide::of_class(r.class) == FleetSide::Training {
                lost += r.lost_gpu_seconds;
                continue;
            }
            // GPU-seconds waited beyond the grace over `waits`, and whether any wait was.
            let beyond_grace = |waits: &mut dyn Iterator<Item = Secs>| {
                waits
                    .map(|w| (w - grace).max(0))
                    .filter(|&b| b > 0)
                    .fold((0u128, false), |(sum, _), b| {
                        (sum + u128::from(r.gpus) * b as u128, true)
                    })
            };
            // The first wait, and each wait to run again after an eviction (a replica
            // reclaimed while it serves is demand not granted as much as one not started).
            let waited_until = r.start.or(r.end).unwrap_or(end);
            let (gpu_secs, was_late) = beyond_grace(
                &mut std::iter::once(waited_until - r.submit).chain(r.rewaits.iter().copied()),
            );
            unserved += gpu_secs;
            late += u64::from(was_late);
            let (gpu_secs, was_late) = beyond_grace(&mut r.owed_waits.iter().copied());
            owed_unserved += gpu_secs;
            owed_late += u64::from(was_late);
        }
        TidalSummary {
            grace_seconds: grace as u64,
            unserved_inference_gpu_hours: hours(unserved),
            inference_waits_beyond_grace: late,
            owed_unserved_inference_gpu_hours: hours(owed_unserved),
            owed_inference_waits_beyond_grace: owed_late,
            training_work_lost_gpu_hours: lost as f64 / 3600.0,
            checkpoint_notices: self.notices,
            schedules: self.tracks.iter().map(Track::summary).collect(),
        }
    }
}

/// The waiting inference jobs that the schedules owe capacity at `now`: walking `waiting`
/// (job, GPUs, members it may run on; in pending order), each that fits, beside what
/// inference already runs there (`side_alloc[c][0]`), within the inference side's guarantee
/// of a region set covering all its members (the guarantee reclaim works with: the next
/// window's from the start of the hand-over). `regions[c]` is member `c`'s region.
///
/// A wait counts against a schedule's promise only from then on: inference asking for more
/// than its window's quota (a morning ramp before the day window opens) is served from what
/// training leaves idle, and is not what the schedule guarantees.
pub(crate) fn owed_inference<'a>(
    overrides: &[QuotaOverride],
    regions: &[&str],
    side_alloc: &[[u64; 2]],
    waiting: impl Iterator<Item = (u32, u64, Option<&'a [u32]>)>,
    now: Secs,
) -> Vec<u32> {
    // One room per region set: the guarantees of its flavors, less inference running there.
    let mut rooms: Vec<(&[String], u64)> = Vec::new();
    for o in overrides {
        let Some((FleetSide::Inference, g)) = side_guarantee_at(o, to_utc(now)) else {
            continue;
        };
        match rooms.iter_mut().find(|(r, _)| *r == o.regions.as_slice()) {
            Some((_, room)) => *room += g,
            None => rooms.push((o.regions.as_slice(), g)),
        }
    }
    let covers = |set: &[String], c: usize| {
        set.is_empty() || regions.get(c).is_some_and(|r| set.iter().any(|s| s == r))
    };
    for (set, room) in &mut rooms {
        let used: u64 = side_alloc
            .iter()
            .enumerate()
            .filter(|(c, _)| covers(set, *c))
            .map(|(_, a)| a[0])
            .sum();
        *room = room.saturating_sub(used);
    }
    let mut owed = Vec::new();
    for (j, gpus, allowed) in waiting {
        let fits_set = |set: &[String]| match allowed {
            Some(ms) => ms.iter().all(|&c| covers(set, c as usize)),
            None => set.is_empty() || (0..regions.len()).all(|c| covers(set, c)),
        };
        if let Some((_, room)) = rooms.iter_mut().find(|(set, _)| fits_set(set))
            && gpus <= *room
        {
            *room -= gpus;
            owed.push(j);
        }
    }
    owed
}

impl Track {
    /// Caches the next boundary after `now`.
    fn plan(&mut self, now: Secs) {
        let spec = &self.schedule.spec;
        self.next_boundary = Calendar::new(spec)
            .ok()
            .and_then(|c| c.next_change(to_utc(now)).ok().flatten())
            .map(|c| c.at.timestamp())
            .filter(|&b| b > now);
    }

    fn summary(&self) -> ScheduleSummary {
        ScheduleSummary {
            schedule: self.schedule.metadata.name.clone(),
            time_zone: self.schedule.spec.time_zone.clone(),
            capacity_gpus: self.capacity,
            transitions: self.transitions,
            windows: self
                .windows
                .iter()
                .map(|(name, a)| {
                    let open = a.capacity_gpu_secs.saturating_sub(a.inference_gpu_secs);
                    (
                        name.clone(),
                        WindowSummary {
                            hours: a.seconds as f64 / 3600.0,
                            capacity_gpu_hours: hours(a.capacity_gpu_secs),
                            inference_gpu_hours: hours(a.inference_gpu_secs),
                            training_gpu_hours: hours(a.training_gpu_secs),
                            training_share_of_open: ratio(a.training_gpu_secs, open),
                            training_share_of_usable: ratio(a.training_gpu_secs, a.usable_gpu_secs),
                            utilization: ratio(
                                a.inference_gpu_secs + a.training_gpu_secs,
                                a.capacity_gpu_secs,
                            ),
                        },
                    )
                })
                .collect(),
        }
    }
}

fn hours(gpu_secs: u128) -> f64 {
    gpu_secs as f64 / 3600.0
}

fn ratio(a: u128, b: u128) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// The side a workload's GPUs count for (index into the engine's per-member counters).
pub(crate) fn side_index(class: WorkloadClass) -> usize {
    match FleetSide::of_class(class) {
        FleetSide::Inference => 0,
        FleetSide::Training => 1,
    }
}

/// What a run with quota schedules reports (`summary.json` key `tidal`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TidalSummary {
    /// The longest checkpoint grace of the schedules: inference that waited longer than
    /// this counts as not granted.
    pub grace_seconds: u64,
    /// Inference GPU demand not granted within the grace period: per inference workload,
    /// its GPUs times the time it waited beyond the grace, counted per wait: from arrival
    /// to its first start, and from each eviction (a reclaim) to its restart; a wait ends
    /// when it starts, is deleted, or the run ends.
    pub unserved_inference_gpu_hours: f64,
    /// Inference workloads that waited longer than the grace period (first or again).
    pub inference_waits_beyond_grace: u64,
    /// The part of the above the schedules owed: each wait counted from the moment the
    /// workload fit within the inference side's guarantee (the next window's from the start
    /// of the hand-over) beside what inference already ran, beyond the grace. Demand above
    /// the window's quota (a ramp before the day opens, replicas past the evening boundary)
    /// is served from idle training capacity and not owed. Target: 0.
    pub owed_unserved_inference_gpu_hours: f64,
    /// Inference workloads with an owed wait longer than the grace period.
    pub owed_inference_waits_beyond_grace: u64,
    /// Training-side work lost to preemption and reclaim (GPU time since the last
    /// checkpoint).
    pub training_work_lost_gpu_hours: f64,
    /// Checkpoint notices ("checkpoint now, keep running") carried out at hand-overs.
    pub checkpoint_notices: u64,
    pub schedules: Vec<ScheduleSummary>,
}

/// One schedule's accounts, per window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSummary {
    pub schedule: String,
    pub time_zone: String,
    /// GPUs in the schedule's scope.
    pub capacity_gpus: u64,
    /// Changes of window applied during the run.
    pub transitions: u64,
    pub windows: BTreeMap<String, WindowSummary>,
}

/// GPU time in scope while one window was open.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowSummary {
    pub hours: f64,
    pub capacity_gpu_hours: f64,
    pub inference_gpu_hours: f64,
    pub training_gpu_hours: f64,
    /// Training GPU time over the capacity inference left open (capacity minus inference
    /// GPU time): how much of the open capacity training filled, whether or not it had
    /// work for it.
    pub training_share_of_open: Option<f64>,
    /// Training GPU time over the capacity training could have used: at each instant,
    /// what inference left open, capped by the GPUs training ran plus those its waiting
    /// work asked for (a backlog that has run dry cannot fill the night; a scheduler that
    /// leaves waiting work idle on open capacity scores below 1).
    pub training_share_of_usable: Option<f64>,
    /// Both sides' GPU time over the capacity.
    pub utilization: Option<f64>,
}

#[cfg(test)]
mod tests {
    use tideway_api::{
        QuotaAmount, QuotaScheduleSpec, QuotaTarget, QuotaWindow, ScheduleScope, Transition,
        WindowQuota,
    };

    use super::*;
    use crate::time::parse_time;

    fn schedule(lead: u64) -> QuotaSchedule {
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
                time_zone: "Europe/Berlin".into(),
                windows: vec![
                    QuotaWindow::daily("day", "08:00", "22:00", q(8)),
                    QuotaWindow::daily("night", "22:00", "08:00", q(2)),
                ],
                default_quotas: None,
                transition: Transition {
                    lead_time_seconds: lead,
                    ..Transition::default()
                },
                scope: ScheduleScope::default(),
            },
        )
    }

    fn t(s: &str) -> Secs {
        parse_time(s).unwrap()
    }

    #[test]
    fn windows_change_at_their_local_boundaries_once_each() {
        let mut notes = Vec::new();
        // 2030-01-01 05:00 UTC is 06:00 in Berlin: night.
        let start = t("2030-01-01T05:00:00Z");
        let mut tides = Tides::new(&[schedule(600)], &[], start, &mut notes).unwrap();
        assert_eq!(tides.tracks[0].recorded.window.as_deref(), Some("night"));
        // The lead time before 08:00 Berlin (07:00 UTC), then the boundary.
        let lead = tides.next_instant(start).unwrap();
        assert_eq!(lead, t("2030-01-01T06:50:00Z"));
        assert!(tides.advance(lead), "the lead time wakes the scheduler");
        assert_eq!(tides.tracks[0].recorded.window.as_deref(), Some("night"));
        let b = tides.next_instant(lead).unwrap();
        assert_eq!(b, t("2030-01-01T07:00:00Z"));
        assert!(tides.advance(b));
        assert_eq!(tides.tracks[0].recorded.window.as_deref(), Some("day"));
        assert!(!tides.advance(b), "never applied twice");
        assert_eq!(tides.tracks[0].transitions, 1);
        // Skipping ahead a day replays both changes in order.
        assert!(tides.advance(t("2030-01-02T07:30:00Z")));
        assert_eq!(tides.tracks[0].transitions, 3);
        assert_eq!(tides.tracks[0].recorded.window.as_deref(), Some("day"));
        assert_eq!(
            tides.next_instant(t("2030-01-02T07:30:00Z")),
            Some(t("2030-01-02T20:50:00Z"))
        );
    }

    #[test]
    fn accounts_split_by_window_and_side() {
        let mut notes = Vec::new();
        let start = t("2030-01-01T20:00:00Z"); // 21:00 Berlin: day
        let mut tides = Tides::new(&[schedule(0)], &[], start, &mut notes).unwrap();
        tides.tracks[0].capacity = 10;
        tides.tracks[0].in_scope = vec![true, false];
        let alloc = [[2, 6], [5, 5]];
        tides.integrate(3600, &alloc, 0);
        assert!(tides.advance(t("2030-01-01T21:00:00Z")));
        tides.integrate(7200, &[[1, 9], [0, 0]], 5);
        let s = tides.finish(&[], t("2030-01-01T23:00:00Z"));
        let day = &s.schedules[0].windows["day"];
        assert_eq!(day.hours, 1.0);
        assert_eq!(day.inference_gpu_hours, 2.0, "member 1 is out of scope");
        assert_eq!(day.training_share_of_open, Some(6.0 / 8.0));
        assert_eq!(
            day.training_share_of_usable,
            Some(1.0),
            "nothing waited: training ran all it had"
        );
        let night = &s.schedules[0].windows["night"];
        assert_eq!(night.training_gpu_hours, 18.0);
        assert_eq!(night.utilization, Some(1.0));
        // Open 9 of 10, training ran 9 with 5 more waiting: usable 9, all used.
        assert_eq!(night.training_share_of_usable, Some(1.0));
    }

    fn side_override(regions: &[&str], guaranteed: u32) -> QuotaOverride {
        QuotaOverride {
            queue: String::new(),
            side: Some(FleetSide::Inference),
            regions: regions.iter().map(|r| (*r).to_owned()).collect(),
            quota: tideway_api::FlavorQuota::guaranteed("H100", guaranteed),
            window: Some("night".into()),
            until: None,
            handover: None,
        }
    }

    /// Only what fits within the inference side's guarantee beside what inference runs is
    /// owed, taken in pending order, each region set against its own guarantee.
    #[test]
    fn owed_inference_is_what_fits_within_the_side_guarantee() {
        let now = t("2030-01-01T05:00:00Z");
        let fleet = [side_override(&[], 10)];
        let alloc = [[4, 3], [2, 0]];
        let waiting = [(1, 2, None), (2, 3, None), (3, 1, None)];
        let owed = owed_inference(&fleet, &["eu", "us"], &alloc, waiting.into_iter(), now);
        assert_eq!(owed, vec![1, 3], "room 4: 2, then 3 does not fit, then 1");

        // Per region: eu's guarantee covers work pinned to eu only.
        let per_region = [side_override(&["eu"], 5), side_override(&["us"], 1)];
        let eu: &[u32] = &[0];
        let us: &[u32] = &[1];
        let waiting = [(1, 1, Some(eu)), (2, 1, Some(us)), (3, 1, None)];
        let owed = owed_inference(&per_region, &["eu", "us"], &alloc, waiting.into_iter(), now);
        assert_eq!(
            owed,
            vec![1],
            "eu has 1 free; us is full; unpinned work no region's"
        );

        // A queue's override and the training side owe inference nothing.
        let mut training = side_override(&[], 100);
        training.side = Some(FleetSide::Training);
        let mut queue = side_override(&[], 100);
        queue.side = None;
        queue.queue = "inference".into();
        let waiting = [(1, 1, None)];
        assert!(
            owed_inference(
                &[training, queue],
                &["eu"],
                &alloc,
                waiting.into_iter(),
                now
            )
            .is_empty()
        );
    }

    /// Owed waits count beyond the grace like all waits, but only their owed part.
    #[test]
    fn owed_waits_beyond_the_grace_are_reported_apart() {
        let mut notes = Vec::new();
        let start = t("2030-01-01T05:00:00Z");
        let tides = Tides::new(&[schedule(0)], &[], start, &mut notes).unwrap();
        let grace = tides.tracks[0]
            .schedule
            .spec
            .transition
            .checkpoint_grace_seconds as Secs;
        let record = JobRecord {
            uid: "r".into(),
            tenant: "serving".into(),
            queue: "inference".into(),
            class: WorkloadClass::Inference,
            gpus: 2,
            submit: start,
            start: Some(start + grace + 1800),
            end: None,
            cluster: None,
            preemptions: 1,
            gpu_seconds: 0,
            lost_gpu_seconds: 0,
            outcome: crate::metrics::Outcome::Unfinished,
            reject_reason: None,
            reasons_seen: 0,
            rewaits: vec![grace + 60],
            owed_waits: vec![grace + 100, grace - 10],
        };
        let s = tides.finish(&[record], start + 86_400);
        assert_eq!(s.inference_waits_beyond_grace, 1);
        assert!((s.unserved_inference_gpu_hours - 2.0 * (1800.0 + 60.0) / 3600.0).abs() < 1e-9);
        assert_eq!(s.owed_inference_waits_beyond_grace, 1);
        assert!((s.owed_unserved_inference_gpu_hours - 2.0 * 100.0 / 3600.0).abs() < 1e-9);
    }
}
