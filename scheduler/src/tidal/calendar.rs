//! Which window of a `QuotaSchedule` is open at an instant, and when that changes.
//!
//! Windows are written in local wall-clock time; instants are UTC. Each opening of a window
//! (a local date, a minute after its midnight and a length) becomes the UTC interval from
//! the resolved local start to the resolved local end. Resolution is one monotone function
//! from local time to instants, applied to every edge alike:
//! - a local time skipped by a spring-forward change resolves to the instant the clock
//!   jumps (a window starting at 02:30 on that day opens at 03:00 new time);
//! - a local time repeated by a fall-back change resolves to its first occurrence.
//!
//! Because the function is monotone, windows that tile local time tile UTC too: no gap and
//! no overlap appear at a daylight-saving change, and a window squeezed to nothing by a
//! skipped hour is simply never open. Consecutive openings of the same window merge, so a
//! transition is always a change of window.

use chrono::{DateTime, Days, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use tideway_api::{QuotaScheduleSpec, ScheduleError};

/// Segments are exact from this many days before the instant asked about.
const EXACT_BACK_DAYS: i64 = 8;
/// Openings are read from this many local days back: a window lasts at most a week, so
/// anything open after `EXACT_BACK_DAYS` opened within this.
const LOOK_BACK_DAYS: u64 = 16;
/// How far ahead the next transition is searched before the schedule is called constant.
const LOOK_AHEAD_DAYS: u64 = 8;
/// Transitions replayed at most this far back (a leader that was away longer resumes from
/// the current window; the ones before are history).
pub const MAX_CATCH_UP_DAYS: i64 = 31;

/// A stretch of time with one window (or the default, `None`) open throughout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Index into the schedule's windows; `None` between windows.
    pub window: Option<usize>,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// One change of window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub at: DateTime<Utc>,
    pub from: Option<usize>,
    pub to: Option<usize>,
}

/// One opening of a window as UTC instants: (open, close, window index).
type Opening = (DateTime<Utc>, DateTime<Utc>, usize);

/// A validated schedule's calendar.
#[derive(Debug, Clone)]
pub struct Calendar<'a> {
    spec: &'a QuotaScheduleSpec,
    tz: Tz,
}

/// The instant local `naive` names in `tz`: first occurrence when repeated, the moment the
/// clock jumps when skipped.
pub fn resolve(tz: Tz, naive: NaiveDateTime) -> DateTime<Utc> {
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(a, b) => a.min(b).with_timezone(&Utc),
        LocalResult::None => {
            // The gap ends at the first local minute that exists; every skipped time maps
            // to that instant. Gaps are at most a few hours.
            let mut n = naive;
            for _ in 0..(26 * 60) {
                n += Duration::minutes(1);
                match tz.from_local_datetime(&n) {
                    LocalResult::Single(t) => return t.with_timezone(&Utc),
                    LocalResult::Ambiguous(a, b) => return a.min(b).with_timezone(&Utc),
                    LocalResult::None => {}
                }
            }
            // No zone has a gap of a day; treat the local time as UTC rather than fail.
            naive.and_utc()
        }
    }
}

impl<'a> Calendar<'a> {
    pub fn new(spec: &'a QuotaScheduleSpec) -> Result<Self, ScheduleError> {
        Ok(Self {
            spec,
            tz: spec.tz()?,
        })
    }

    pub fn tz(&self) -> Tz {
        self.tz
    }

    fn local_date(&self, t: DateTime<Utc>) -> NaiveDate {
        t.with_timezone(&self.tz).date_naive()
    }

    /// Every opening from local date `first` to `last`, as UTC intervals sorted by start.
    fn intervals(&self, first: NaiveDate, last: NaiveDate) -> Result<Vec<Opening>, ScheduleError> {
        let mut out = Vec::new();
        let mut date = first;
        while date <= last {
            let midnight = date.and_time(chrono::NaiveTime::MIN);
            for (i, w) in self.spec.windows.iter().enumerate() {
                for (minute, len) in w.openings(date)? {
                    let open = midnight + Duration::minutes(i64::from(minute));
                    let close = open + Duration::minutes(i64::from(len));
                    let (a, b) = (resolve(self.tz, open), resolve(self.tz, close));
                    if a < b {
                        out.push((a, b, i));
                    }
                }
            }
            let Some(next) = date.succ_opt() else { break };
            date = next;
        }
        out.sort_unstable_by_key(|(a, b, i)| (*a, *b, *i));
        Ok(out)
    }

    /// The tiling of `[from, to)` into segments, exact within that range. The first
    /// segment may start before `from` and the last end after `to` (by up to a week, where
    /// the search stops); a segment that reaches the search edge is cut there.
    pub fn segments(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<Segment>, ScheduleError> {
        let first = self
            .local_date(from)
            .checked_sub_days(Days::new(LOOK_BACK_DAYS))
            .unwrap_or(NaiveDate::MIN);
        let last = self
            .local_date(to)
            .checked_add_days(Days::new(LOOK_AHEAD_DAYS))
            .unwrap_or(NaiveDate::MAX);
        let lo = from - Duration::days(EXACT_BACK_DAYS);
        let hi = resolve(self.tz, last.and_time(chrono::NaiveTime::MIN));
        let mut segs: Vec<Segment> = Vec::new();
        let push = |segs: &mut Vec<Segment>, window, start: DateTime<Utc>, end| {
            let start = start.max(lo);
            if start >= end {
                return;
            }
            match segs.last_mut() {
                Some(s) if s.window == window && s.end == start => s.end = end,
                _ => segs.push(Segment { window, start, end }),
            }
        };
        let mut cursor = lo;
        for (a, b, i) in self.intervals(first, last)? {
            let b = b.min(hi);
            if b <= cursor {
                continue;
            }
            // Validation refused overlaps; should one slip through, the earlier opening keeps
            // its time and the later one starts when it ends.
            let a = a.max(cursor);
            push(&mut segs, None, cursor, a);
            push(&mut segs, Some(i), a, b);
            cursor = b;
        }
        push(&mut segs, None, cursor, hi);
        // Keep the segments that touch [from, to].
        segs.retain(|s| s.end > from && s.start <= to);
        Ok(segs)
    }

    /// The segment open at `t`.
    pub fn segment_at(&self, t: DateTime<Utc>) -> Result<Segment, ScheduleError> {
        let segs = self.segments(t, t)?;
        Ok(segs
            .into_iter()
            .find(|s| s.start <= t && t < s.end)
            .unwrap_or(Segment {
                window: None,
                start: t,
                end: t,
            }))
    }

    /// The window open at `t`.
    pub fn window_at(&self, t: DateTime<Utc>) -> Result<Option<usize>, ScheduleError> {
        Ok(self.segment_at(t)?.window)
    }

    /// The first change strictly after `t`, if one happens within a week.
    pub fn next_change(&self, t: DateTime<Utc>) -> Result<Option<Change>, ScheduleError> {
        let horizon = t + Duration::days(LOOK_AHEAD_DAYS as i64 - 1);
        Ok(self.changes_between(t, horizon)?.into_iter().next())
    }

    /// Every change in `(after, upto]`, in order.
    pub fn changes_between(
        &self,
        after: DateTime<Utc>,
        upto: DateTime<Utc>,
    ) -> Result<Vec<Change>, ScheduleError> {
        let segs = self.segments(after, upto)?;
        Ok(segs
            .windows(2)
            .filter(|p| p[0].end == p[1].start && p[1].start > after && p[1].start <= upto)
            .map(|p| Change {
                at: p[1].start,
                from: p[0].window,
                to: p[1].window,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{
        DayOfWeek, QuotaAmount, QuotaTarget, QuotaWindow, ScheduleScope, Transition, WindowQuota,
    };

    use super::*;

    fn quota() -> Vec<WindowQuota> {
        vec![WindowQuota {
            target: QuotaTarget::Pool("training".into()),
            flavor: None,
            amount: QuotaAmount::Gpus(8),
        }]
    }

    fn spec(tz: &str, windows: Vec<QuotaWindow>) -> QuotaScheduleSpec {
        QuotaScheduleSpec {
            time_zone: tz.into(),
            windows,
            default_quotas: Some(Vec::new()),
            transition: Transition::default(),
            scope: ScheduleScope::default(),
        }
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn name(spec: &QuotaScheduleSpec, t: &str) -> Option<String> {
        let cal = Calendar::new(spec).unwrap();
        cal.window_at(utc(t))
            .unwrap()
            .map(|i| spec.windows[i].name.clone())
    }

    fn day_night(tz: &str) -> QuotaScheduleSpec {
        let mut day = QuotaWindow::daily("day", "08:00", "22:00", quota());
        day.days = DayOfWeek::WEEKDAYS.to_vec();
        spec(
            tz,
            vec![day, QuotaWindow::daily("night", "22:00", "08:00", quota())],
        )
    }

    #[test]
    fn windows_follow_local_time_across_dst() {
        let s = day_night("Europe/Berlin");
        // UTC+1 in winter: Monday 08:00 local = 07:00 UTC.
        assert_eq!(name(&s, "2025-03-03T07:00:00Z").as_deref(), Some("day"));
        assert_eq!(name(&s, "2025-03-03T06:59:59Z").as_deref(), Some("night"));
        // UTC+2 in summer: the boundary moved with the clock to 06:00 UTC.
        assert_eq!(name(&s, "2025-06-02T06:00:00Z").as_deref(), Some("day"));
        assert_eq!(name(&s, "2025-06-02T05:59:00Z").as_deref(), Some("night"));
        // Night crosses midnight; Saturday daytime is between windows.
        assert_eq!(name(&s, "2025-03-08T02:00:00Z").as_deref(), Some("night"));
        assert_eq!(name(&s, "2025-03-08T11:00:00Z"), None);
    }

    #[test]
    fn a_start_skipped_by_spring_forward_opens_when_the_clock_jumps() {
        // Berlin, 30 March 2025: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        let s = spec(
            "Europe/Berlin",
            vec![
                QuotaWindow::daily("early", "00:00", "02:30", quota()),
                QuotaWindow::daily("late", "02:30", "24:00", quota()),
            ],
        );
        let cal = Calendar::new(&s).unwrap();
        let change = cal
            .next_change(utc("2025-03-30T00:30:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(change.at, utc("2025-03-30T01:00:00Z"));
        assert_eq!((change.from, change.to), (Some(0), Some(1)));
        // The day before, the same edge is at 02:30 CET.
        let change = cal
            .next_change(utc("2025-03-29T00:30:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(change.at, utc("2025-03-29T01:30:00Z"));
    }

    #[test]
    fn the_repeated_hour_of_fall_back_reopens_nothing() {
        // Berlin, 26 October 2025: 03:00 CEST falls back to 02:00 CET (01:00 UTC); 02:30
        // happens twice, at 00:30 and 01:30 UTC.
        let s = spec(
            "Europe/Berlin",
            vec![
                QuotaWindow::daily("early", "00:00", "02:30", quota()),
                QuotaWindow::daily("late", "02:30", "24:00", quota()),
            ],
        );
        let cal = Calendar::new(&s).unwrap();
        let changes = cal
            .changes_between(utc("2025-10-25T22:30:00Z"), utc("2025-10-26T12:00:00Z"))
            .unwrap();
        assert_eq!(
            changes,
            [Change {
                at: utc("2025-10-26T00:30:00Z"),
                from: Some(0),
                to: Some(1)
            }]
        );
        assert_eq!(name(&s, "2025-10-26T01:30:00Z").as_deref(), Some("late"));
    }

    #[test]
    fn leap_days_and_cron_windows() {
        let mut leap = QuotaWindow::daily("leap", "00:00", "00:00", quota());
        leap.start = None;
        leap.end = None;
        leap.cron = Some("0 0 29 2 *".into());
        leap.duration_minutes = Some(1440);
        let s = spec("Asia/Shanghai", vec![leap]);
        assert_eq!(name(&s, "2028-02-28T16:00:00Z").as_deref(), Some("leap"));
        assert_eq!(name(&s, "2028-02-29T15:59:00Z").as_deref(), Some("leap"));
        assert_eq!(name(&s, "2028-02-29T16:00:00Z"), None);
        assert_eq!(name(&s, "2027-02-28T17:00:00Z"), None);
    }

    #[test]
    fn lord_howe_moves_by_half_an_hour() {
        // Lord Howe Island: UTC+10:30 in winter, +11 in summer; on 5 October 2025 02:00
        // jumps to 02:30 (15:30 UTC on the 4th).
        let s = spec(
            "Australia/Lord_Howe",
            vec![
                QuotaWindow::daily("a", "00:00", "02:15", quota()),
                QuotaWindow::daily("b", "02:15", "24:00", quota()),
            ],
        );
        let cal = Calendar::new(&s).unwrap();
        let c = cal
            .next_change(utc("2025-10-04T14:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(c.at, utc("2025-10-04T15:30:00Z"), "02:15 was skipped");
        let c = cal
            .next_change(utc("2025-10-03T14:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(c.at, utc("2025-10-03T15:45:00Z"), "02:15 at UTC+10:30");
    }

    #[test]
    fn a_constant_schedule_has_no_next_change() {
        let s = spec(
            "UTC",
            vec![QuotaWindow::daily("all", "00:00", "24:00", quota())],
        );
        let cal = Calendar::new(&s).unwrap();
        assert_eq!(cal.next_change(utc("2025-01-01T00:00:00Z")).unwrap(), None);
        assert_eq!(cal.window_at(utc("2025-01-01T00:00:00Z")).unwrap(), Some(0));
    }
}
