//! Properties of the tidal engine over a simulated year, in zones with one-hour DST (Berlin,
//! New York), none (Shanghai) and a 30-minute one (Lord Howe Island):
//! - effective quotas are defined at every instant;
//! - every change happens exactly at a window edge (or at the instant a DST jump skipped
//!   the edge), and the window really changes there;
//! - a leader that applies changes by catching up from its last recorded one, woken at
//!   arbitrary instants (long failovers included), applies each change once, never twice
//!   and never skipping one.

use chrono::{DateTime, Duration, Offset, TimeZone, Timelike, Utc};
use proptest::prelude::*;
use tideway_api::{
    DayOfWeek, QuotaAmount, QuotaScheduleSpec, QuotaTarget, QuotaWindow, ScheduleScope, Transition,
    WindowQuota,
};
use tideway_scheduler::tidal::{Calendar, Change};

const ZONES: [&str; 4] = [
    "Europe/Berlin",
    "America/New_York",
    "Asia/Shanghai",
    "Australia/Lord_Howe",
];

fn quotas(gpus: u32) -> Vec<WindowQuota> {
    vec![WindowQuota {
        target: QuotaTarget::Pool("inference".into()),
        flavor: None,
        amount: QuotaAmount::Gpus(gpus),
    }]
}

/// Edges at 02:15 and 02:30 fall into every zone's DST gap or repeated hour; the weekday
/// day window leaves weekend daytime to the default.
fn schedule(tz: &str) -> QuotaScheduleSpec {
    let mut day = QuotaWindow::daily("day", "08:00", "22:00", quotas(48));
    day.days = DayOfWeek::WEEKDAYS.to_vec();
    QuotaScheduleSpec {
        time_zone: tz.into(),
        windows: vec![
            day,
            QuotaWindow::daily("night", "22:00", "02:15", quotas(8)),
            QuotaWindow::daily("small-hours", "02:15", "02:30", quotas(4)),
            QuotaWindow::daily("dawn", "02:30", "08:00", quotas(16)),
        ],
        default_quotas: Some(quotas(32)),
        transition: Transition::default(),
        scope: ScheduleScope::default(),
    }
}

const EDGES: [u32; 4] = [8 * 60, 22 * 60, 2 * 60 + 15, 2 * 60 + 30];

fn year_start() -> DateTime<Utc> {
    "2025-01-01T00:00:00Z".parse().unwrap()
}

fn year_changes(spec: &QuotaScheduleSpec) -> Vec<Change> {
    let cal = Calendar::new(spec).unwrap();
    let from = year_start();
    cal.changes_between(from, from + Duration::days(366))
        .unwrap()
}

#[test]
fn every_change_is_at_a_window_edge_and_changes_the_window() {
    for tz in ZONES {
        let spec = schedule(tz);
        let cal = Calendar::new(&spec).unwrap();
        let zone = cal.tz();
        let changes = year_changes(&spec);
        // Two to four changes a day.
        assert!(changes.len() > 2 * 365, "{tz}: {}", changes.len());
        let mut jumps = 0;
        for c in &changes {
            assert_ne!(c.from, c.to, "{tz} {c:?}");
            let before = c.at - Duration::seconds(1);
            assert_eq!(cal.window_at(before).unwrap(), c.from, "{tz} {c:?}");
            assert_eq!(cal.window_at(c.at).unwrap(), c.to, "{tz} {c:?}");
            let local = c.at.with_timezone(&zone);
            let minute = local.hour() * 60 + local.minute();
            let offset = |t: DateTime<Utc>| zone.offset_from_utc_datetime(&t.naive_utc()).fix();
            if !EDGES.contains(&minute) {
                // Only a DST jump that skipped the edge may move it.
                assert_ne!(offset(before), offset(c.at), "{tz}: {c:?} at {local}");
                jumps += 1;
            }
            assert_eq!(local.second(), 0);
        }
        // The spring-forward gap swallows 02:15-02:30 once a year (not in Shanghai);
        // Berlin and New York skip the 02:30 edge too, to the minute the clock jumps to.
        let small_hours = changes.iter().filter(|c| c.to == Some(2)).count();
        // 366 days of openings in the range.
        let expected = if tz == "Asia/Shanghai" { 366 } else { 365 };
        assert_eq!(small_hours, expected, "{tz}");
        if matches!(tz, "Europe/Berlin" | "America/New_York") {
            assert!(jumps > 0, "{tz}: the DST gap should have moved an edge");
        }
        // Strictly increasing: nothing happens twice.
        assert!(changes.windows(2).all(|p| p[0].at < p[1].at), "{tz}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn quotas_are_always_defined(zone in prop::sample::select(ZONES.to_vec()), secs in 0i64..366 * 86_400) {
        let spec = schedule(zone);
        let cal = Calendar::new(&spec).unwrap();
        let t = year_start() + Duration::seconds(secs);
        let window = cal.window_at(t).unwrap();
        let name = window.map(|i| spec.windows[i].name.as_str());
        prop_assert!(spec.quotas_of(name).is_some_and(|q| !q.is_empty()));
        // The segment holding t agrees, and the next change is after t.
        let seg = cal.segment_at(t).unwrap();
        prop_assert!(seg.start <= t && t < seg.end);
        prop_assert_eq!(seg.window, window);
        if let Some(next) = cal.next_change(t).unwrap() {
            prop_assert!(next.at > t);
            prop_assert_eq!(next.from, window);
        }
    }

    /// The leader's loop, woken at random instants: it reads the recorded window and its
    /// time, applies the changes since then in order, and records the last.
    #[test]
    fn catching_up_applies_each_change_once(
        zone in prop::sample::select(ZONES.to_vec()),
        steps in prop::collection::vec(1i64..3 * 86_400, 50..400),
    ) {
        let spec = schedule(zone);
        let cal = Calendar::new(&spec).unwrap();
        let start = year_start();
        let mut recorded = (cal.window_at(start).unwrap(), start);
        let mut applied: Vec<Change> = Vec::new();
        let mut now = start;
        for step in steps {
            now += Duration::seconds(step);
            // A replayed wake-up at the same instant must change nothing.
            for _ in 0..2 {
                for c in cal.changes_between(recorded.1, now).unwrap() {
                    prop_assert_eq!(c.from, recorded.0, "applied on the recorded window");
                    recorded = (c.to, c.at);
                    applied.push(c);
                }
            }
        }
        let all: Vec<Change> = cal.changes_between(start, now).unwrap();
        prop_assert_eq!(applied, all);
        prop_assert_eq!(recorded.0, cal.window_at(now).unwrap());
    }
}
