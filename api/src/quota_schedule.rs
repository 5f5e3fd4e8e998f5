//! `QuotaSchedule`: tidal quotas, i.e. calendar windows that move GPU quota between pools
//! or queues (inference by day, training by night).
//!
//! Windows are written in local wall-clock time of an IANA time zone, because that is how
//! traffic peaks are described, and evaluated by converting the instant to that zone, so
//! daylight-saving changes move the boundaries with the clock instead of breaking them.

use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, Utc, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::cron::{Cron, CronError};
use crate::meta::{API_VERSION, ObjectMeta, impl_resource};
use crate::queue::MAX_QUOTA_GPUS;
use crate::validation::{CheckAt, Checker, at, impl_validate};

/// A week: any longer lead time or grace would span several windows.
pub const MAX_TRANSITION_SECONDS: u64 = 7 * 24 * 3600;
const MINUTES_PER_DAY: u16 = 24 * 60;

/// Why a schedule's time zone or time of day cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScheduleError {
    /// The `timeZone` is not in the IANA database.
    #[error("unknown IANA time zone {0:?}")]
    UnknownTimeZone(String),
    /// A `start` or `end` that is not a valid "HH:MM".
    #[error("{value:?} is not a time of day: {reason}")]
    BadTime {
        /// The text as written.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `cron` expression that does not parse.
    #[error("bad cron expression: {0}")]
    BadCron(String),
    /// A cron window's `durationMinutes` out of range.
    #[error("durationMinutes must be between 1 and {MAX_WINDOW_MINUTES} (got {0})")]
    BadDuration(u32),
}

/// Tidal quotas: calendar windows that override queue or pool quotas at set times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuotaSchedule {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `QuotaSchedule`.
    pub kind: String,
    /// Name of the schedule; policy bundles list schedules by it.
    pub metadata: ObjectMeta,
    /// Zone, windows, transition rules and scope.
    pub spec: QuotaScheduleSpec,
    /// Written by the tidal engine; None in a document a user writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<QuotaScheduleStatus>,
}

impl_resource!(QuotaSchedule => "QuotaSchedule");

impl QuotaSchedule {
    /// A schedule at the current API version.
    pub fn new(name: impl Into<String>, spec: QuotaScheduleSpec) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: <Self as crate::meta::Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }
}

/// When each window applies, what quota it sets, and how boundaries are crossed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuotaScheduleSpec {
    /// IANA name such as "Europe/Berlin"; windows are in this zone's wall-clock time.
    pub time_zone: String,
    /// Windows may not overlap; between them `defaultQuotas` applies.
    pub windows: Vec<QuotaWindow>,
    /// Quotas between windows. Unset means the windows must cover all time; an empty list
    /// means the queues' own quotas apply between windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_quotas: Option<Vec<WindowQuota>>,
    /// How boundaries are crossed; defaults if left out (see [`Transition`]).
    #[serde(default)]
    pub transition: Transition,
    /// Which regions, clusters and flavors the schedule governs; everything if left out.
    #[serde(default, skip_serializing_if = "ScheduleScope::is_everything")]
    pub scope: ScheduleScope,
}

impl QuotaScheduleSpec {
    /// The parsed `timeZone`; fails for names not in the IANA database.
    pub fn tz(&self) -> Result<Tz, ScheduleError> {
        Tz::from_str(&self.time_zone)
            .map_err(|_| ScheduleError::UnknownTimeZone(self.time_zone.clone()))
    }

    /// The quotas in force at `at`: the active window's, else `defaultQuotas`.
    pub fn quotas_of(&self, window: Option<&str>) -> Option<&[WindowQuota]> {
        match window {
            Some(name) => self
                .windows
                .iter()
                .find(|w| w.name == name)
                .map(|w| w.quotas.as_slice()),
            None => self.default_quotas.as_deref(),
        }
    }

    /// Checks that the windows tile local time: no two open at once, and no local minute
    /// without a window unless `defaultQuotas` covers it. Checked minute by minute over a
    /// whole leap year of local calendar days, so cron windows (days of the month, months,
    /// leap days) are checked as well as weekly ones. Reports the first problem, naming
    /// the windows at fault.
    fn check_tiling(&self, p: &str, c: &mut Checker) {
        // 2028 is a leap year; windows opening in the week before it may reach into it.
        let (Some(first), Some(year_start)) = (
            NaiveDate::from_ymd_opt(2027, 12, 24),
            NaiveDate::from_ymd_opt(2028, 1, 1),
        ) else {
            return;
        };
        let year_minutes: usize = 366 * usize::from(MINUTES_PER_DAY);
        let offset = (year_start - first).num_days() as usize * usize::from(MINUTES_PER_DAY);
        const FREE: u16 = u16::MAX;
        let mut owner = vec![FREE; year_minutes];
        for (i, w) in self.windows.iter().enumerate() {
            let mut date = first;
            while date.year() < 2029 {
                let Ok(openings) = w.openings(date) else {
                    return;
                };
                let day_start = (date - first).num_days() as usize * usize::from(MINUTES_PER_DAY);
                for (m, len) in openings {
                    let from = day_start + usize::from(m);
                    for abs in from..from + len as usize {
                        let Some(slot) = abs.checked_sub(offset).and_then(|k| owner.get_mut(k))
                        else {
                            continue;
                        };
                        if *slot != FREE && usize::from(*slot) != i {
                            let other = &self.windows[usize::from(*slot)].name;
                            c.push(
                                format!("{}[{i}]", at(p, "windows")),
                                format!(
                                    "window {:?} overlaps window {other:?} at {} local time",
                                    w.name,
                                    describe_minute(year_start, abs - offset)
                                ),
                            );
                            return;
                        }
                        *slot = i as u16;
                    }
                }
                let Some(next) = date.succ_opt() else { return };
                date = next;
            }
        }
        if self.default_quotas.is_some() {
            return;
        }
        if let Some(gap) = owner.iter().position(|o| *o == FREE) {
            let before = (0..year_minutes)
                .map(|k| (gap + year_minutes - 1 - k) % year_minutes)
                .find_map(|k| (owner[k] != FREE).then_some(usize::from(owner[k])));
            let (field, reason) = match before {
                Some(i) => (
                    format!("{}[{i}].end", at(p, "windows")),
                    format!(
                        "no window is open after window {:?} ends, from {} local time; \
                         add a window there or set spec.defaultQuotas",
                        self.windows[i].name,
                        describe_minute(year_start, gap)
                    ),
                ),
                None => (
                    at(p, "windows").to_string(),
                    "no window is ever open; add a window or set spec.defaultQuotas".to_owned(),
                ),
            };
            c.push(field, reason);
        }
    }
}

/// "Sat 2028-01-01 08:00" for the `minute`-th minute after `start`'s midnight.
fn describe_minute(start: NaiveDate, minute: usize) -> String {
    let day = start + chrono::Days::new((minute / usize::from(MINUTES_PER_DAY)) as u64);
    let m = minute % usize::from(MINUTES_PER_DAY);
    format!("{} {} {:02}:{:02}", day.weekday(), day, m / 60, m % 60)
}

/// A recurring local-time window and the quotas that hold during it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuotaWindow {
    /// Shown in status and explanations, e.g. `business-hours`.
    pub name: String,
    /// Days on which the window opens; empty means every day. A window that crosses
    /// midnight belongs to the day it opens on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<DayOfWeek>,
    /// "HH:MM", local time, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// "HH:MM" (or "24:00"), local time, exclusive; earlier than `start` crosses midnight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// Instead of `days`/`start`/`end`: a 5-field cron expression (local time) at which the
    /// window opens, for `durationMinutes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// How long a cron window stays open, in minutes (at most a week).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_minutes: Option<u32>,
    /// The quotas in force while the window is active.
    pub quotas: Vec<WindowQuota>,
}

/// A cron window lasts at most a week, so the engine only ever looks a week back.
pub const MAX_WINDOW_MINUTES: u32 = 7 * 24 * 60;

impl QuotaWindow {
    /// A window open every day (or on `days`) from `start` to `end`.
    pub fn daily(
        name: impl Into<String>,
        start: &str,
        end: &str,
        quotas: Vec<WindowQuota>,
    ) -> Self {
        Self {
            name: name.into(),
            days: Vec::new(),
            start: Some(start.to_owned()),
            end: Some(end.to_owned()),
            cron: None,
            duration_minutes: None,
            quotas,
        }
    }

    /// Minutes after local midnight.
    pub fn start_minute(&self) -> Result<u16, ScheduleError> {
        parse_time_of_day(self.start.as_deref().unwrap_or_default(), false)
    }

    /// Minutes after local midnight; 1440 for "24:00".
    pub fn end_minute(&self) -> Result<u16, ScheduleError> {
        parse_time_of_day(self.end.as_deref().unwrap_or_default(), true)
    }

    /// Whether `end` is earlier than `start`, so the window runs into the next day.
    pub fn crosses_midnight(&self) -> Result<bool, ScheduleError> {
        Ok(self.end_minute()? < self.start_minute()?)
    }

    fn opens_on(&self, day: Weekday) -> bool {
        self.days.is_empty() || self.days.iter().any(|d| Weekday::from(*d) == day)
    }

    /// Whether local `day` at `minute` after midnight falls in a days-and-hours window
    /// (always false for a cron window: use [`QuotaWindow::openings`]).
    pub fn contains(&self, day: Weekday, minute: u16) -> Result<bool, ScheduleError> {
        if self.cron.is_some() {
            return Ok(false);
        }
        let (start, end) = (self.start_minute()?, self.end_minute()?);
        Ok(if start < end {
            self.opens_on(day) && (start..end).contains(&minute)
        } else if start > end {
            (self.opens_on(day) && minute >= start) || (self.opens_on(day.pred()) && minute < end)
        } else {
            false
        })
    }

    /// When the window opens on local `date`: (minute after midnight, length in minutes),
    /// in order. Lengths may run past midnight (up to a week for cron windows).
    pub fn openings(&self, date: NaiveDate) -> Result<Vec<(u16, u32)>, ScheduleError> {
        if let Some(expr) = &self.cron {
            let cron: Cron = expr
                .parse()
                .map_err(|e: CronError| ScheduleError::BadCron(e.to_string()))?;
            let len = self.duration_minutes.unwrap_or(0);
            if len == 0 || len > MAX_WINDOW_MINUTES {
                return Err(ScheduleError::BadDuration(len));
            }
            return Ok(cron.minutes_of_day(date).map(|m| (m, len)).collect());
        }
        let (start, end) = (self.start_minute()?, self.end_minute()?);
        if start == end || !self.opens_on(date.weekday()) {
            return Ok(Vec::new());
        }
        let len = (u32::from(end) + u32::from(MINUTES_PER_DAY) - u32::from(start))
            % u32::from(MINUTES_PER_DAY);
        let len = if len == 0 {
            u32::from(MINUTES_PER_DAY)
        } else {
            len
        };
        Ok(vec![(start, len)])
    }
}

/// Parses "HH:MM"; only the end of a window may be "24:00".
pub fn parse_time_of_day(value: &str, allow_end_of_day: bool) -> Result<u16, ScheduleError> {
    let bad = |reason| ScheduleError::BadTime {
        value: value.to_owned(),
        reason,
    };
    let b = value.as_bytes();
    if b.len() != 5 || b[2] != b':' || ![0, 1, 3, 4].iter().all(|&i| b[i].is_ascii_digit()) {
        return Err(bad("expected HH:MM"));
    }
    let hours = u16::from(b[0] - b'0') * 10 + u16::from(b[1] - b'0');
    let minutes = u16::from(b[3] - b'0') * 10 + u16::from(b[4] - b'0');
    if minutes >= 60 {
        return Err(bad("minutes must be below 60"));
    }
    let total = hours * 60 + minutes;
    match total.cmp(&MINUTES_PER_DAY) {
        std::cmp::Ordering::Less => Ok(total),
        std::cmp::Ordering::Equal if allow_end_of_day => Ok(total),
        std::cmp::Ordering::Equal => Err(bad("24:00 is only allowed as an end time")),
        std::cmp::Ordering::Greater => Err(bad("hours must be below 24")),
    }
}

/// A day of the week; three-letter lower case on the wire (`mon`), full names accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum DayOfWeek {
    /// Monday.
    #[serde(rename = "mon", alias = "monday")]
    Mon,
    /// Tuesday.
    #[serde(rename = "tue", alias = "tuesday")]
    Tue,
    /// Wednesday.
    #[serde(rename = "wed", alias = "wednesday")]
    Wed,
    /// Thursday.
    #[serde(rename = "thu", alias = "thursday")]
    Thu,
    /// Friday.
    #[serde(rename = "fri", alias = "friday")]
    Fri,
    /// Saturday.
    #[serde(rename = "sat", alias = "saturday")]
    Sat,
    /// Sunday.
    #[serde(rename = "sun", alias = "sunday")]
    Sun,
}

impl DayOfWeek {
    /// Monday to Friday, for business-hours windows.
    pub const WEEKDAYS: [DayOfWeek; 5] = [Self::Mon, Self::Tue, Self::Wed, Self::Thu, Self::Fri];
}

impl From<DayOfWeek> for Weekday {
    fn from(d: DayOfWeek) -> Self {
        match d {
            DayOfWeek::Mon => Weekday::Mon,
            DayOfWeek::Tue => Weekday::Tue,
            DayOfWeek::Wed => Weekday::Wed,
            DayOfWeek::Thu => Weekday::Thu,
            DayOfWeek::Fri => Weekday::Fri,
            DayOfWeek::Sat => Weekday::Sat,
            DayOfWeek::Sun => Weekday::Sun,
        }
    }
}

impl From<Weekday> for DayOfWeek {
    fn from(d: Weekday) -> Self {
        match d {
            Weekday::Mon => DayOfWeek::Mon,
            Weekday::Tue => DayOfWeek::Tue,
            Weekday::Wed => DayOfWeek::Wed,
            Weekday::Thu => DayOfWeek::Thu,
            Weekday::Fri => DayOfWeek::Fri,
            Weekday::Sat => DayOfWeek::Sat,
            Weekday::Sun => DayOfWeek::Sun,
        }
    }
}

/// Written `{pool: inference, flavor: H100, gpus: 64}` or `{queue: research, share: 0.5}`.
/// Enums in Rust so a quota always has exactly one target and one amount.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "WindowQuotaRepr", into = "WindowQuotaRepr")]
pub struct WindowQuota {
    /// The pool or queue whose quota the window sets.
    pub target: QuotaTarget,
    /// Unset applies the amount to every flavor in scope, each separately.
    pub flavor: Option<String>,
    /// Absolute GPUs or a share of the capacity in scope.
    pub amount: QuotaAmount,
}

/// What a window quota applies to: exactly one of `pool` or `queue` on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaTarget {
    /// A member-cluster pool name (e.g. "training", "inference").
    Pool(String),
    /// A queue name.
    Queue(String),
}

impl QuotaTarget {
    /// The pool or queue name.
    pub fn name(&self) -> &str {
        match self {
            Self::Pool(n) | Self::Queue(n) => n,
        }
    }
}

/// How much quota a window grants: exactly one of `gpus` or `share` on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QuotaAmount {
    /// A fixed number of GPUs.
    Gpus(u32),
    /// Fraction (0 to 1) of the fleet capacity of the flavor within the schedule's scope.
    Share(f64),
}

impl QuotaAmount {
    /// Resolves to GPUs given the capacity in scope; shares round down so a window never
    /// promises more than exists.
    pub fn resolve(self, capacity: u64) -> u64 {
        match self {
            Self::Gpus(n) => u64::from(n),
            Self::Share(s) => (capacity as f64 * s.clamp(0.0, 1.0)).floor() as u64,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WindowQuotaRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flavor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    share: Option<f64>,
}

// The wire form is the repr's, so the OpenAPI schema is too.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for WindowQuota {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <WindowQuotaRepr as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for WindowQuota {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <WindowQuotaRepr as utoipa::ToSchema>::schemas(schemas)
    }
}

impl TryFrom<WindowQuotaRepr> for WindowQuota {
    type Error = &'static str;
    fn try_from(r: WindowQuotaRepr) -> Result<Self, Self::Error> {
        let target = match (r.pool, r.queue) {
            (Some(p), None) => QuotaTarget::Pool(p),
            (None, Some(q)) => QuotaTarget::Queue(q),
            _ => return Err("exactly one of `pool` or `queue` must be set"),
        };
        let amount = match (r.gpus, r.share) {
            (Some(g), None) => QuotaAmount::Gpus(g),
            (None, Some(s)) => QuotaAmount::Share(s),
            _ => return Err("exactly one of `gpus` or `share` must be set"),
        };
        Ok(Self {
            target,
            flavor: r.flavor,
            amount,
        })
    }
}

impl From<WindowQuota> for WindowQuotaRepr {
    fn from(q: WindowQuota) -> Self {
        let (pool, queue) = match q.target {
            QuotaTarget::Pool(p) => (Some(p), None),
            QuotaTarget::Queue(q) => (None, Some(q)),
        };
        let (gpus, share) = match q.amount {
            QuotaAmount::Gpus(g) => (Some(g), None),
            QuotaAmount::Share(s) => (None, Some(s)),
        };
        Self {
            pool,
            queue,
            flavor: q.flavor,
            gpus,
            share,
        }
    }
}

/// How a boundary is crossed without killing work that could have finished or checkpointed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Transition {
    /// Before a boundary, stop admitting work into the losing side that cannot finish or
    /// checkpoint within this time.
    pub lead_time_seconds: u64,
    /// After a boundary, over-quota work gets this long to checkpoint before preemption.
    pub checkpoint_grace_seconds: u64,
    /// Which over-quota work is preempted first after a boundary.
    pub reclaim_order: ReclaimOrder,
    /// How long before a boundary the hand-over starts: from then on the side whose quota
    /// rises may reclaim what the other side holds beyond its coming quota, and that work
    /// gets a checkpoint notice (checkpoint now, keep running). Set it to the checkpoint
    /// grace (or more) and the winning side's guarantee is usable AT the boundary instead
    /// of a grace period after it. Absent: the hand-over starts at the boundary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handover_lead_seconds: Option<u64>,
}

impl Default for Transition {
    fn default() -> Self {
        Self {
            lead_time_seconds: 900,
            checkpoint_grace_seconds: 600,
            reclaim_order: ReclaimOrder::default(),
            handover_lead_seconds: None,
        }
    }
}

/// Order in which over-quota work is preempted at a boundary; camelCase on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum ReclaimOrder {
    /// Not-yet-started first, then by most recent checkpoint, then the rest.
    #[default]
    LeastWorkLost,
    /// Lowest effective priority first.
    LowestPriority,
    /// Most recently started first.
    NewestFirst,
}

/// What the schedule governs; empty lists mean all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ScheduleScope {
    /// Regions in scope, by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Member clusters in scope, by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// GPU models in scope, e.g. `H100`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flavors: Vec<String>,
}

impl ScheduleScope {
    /// True when every list is empty, i.e. the whole fleet; then `scope` is left off the wire.
    pub fn is_everything(&self) -> bool {
        self.regions.is_empty() && self.clusters.is_empty() && self.flavors.is_empty()
    }
}

/// Written by the tidal engine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct QuotaScheduleStatus {
    /// Name of the window in force now; None between windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_window: Option<String>,
    /// When the last window boundary was crossed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_at: Option<DateTime<Utc>>,
    /// When the next window boundary falls, so operators can see a change coming.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_transition_at: Option<DateTime<Utc>>,
}

/// `GET /v1/schedules/{name}/timeline`: where a schedule stands and the quota it gives, hour
/// by hour, for the dashboard and `tideway schedule show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ScheduleTimeline {
    /// The schedule's name.
    pub schedule: String,
    /// Its IANA time zone.
    pub time_zone: String,
    /// The recorded window (what the scheduler obeys), its last and next transitions.
    pub status: QuotaScheduleStatus,
    /// The window after the next transition (`None`: the default quotas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<String>,
    /// One entry per hour from now.
    pub hours: Vec<TimelineHour>,
    /// The latest recorded transitions of this schedule, oldest first.
    #[serde(default)]
    pub transitions: Vec<ScheduleTransition>,
}

/// One change of window as the replicated state recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ScheduleTransition {
    /// The window left (`None`: the default quotas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The window entered (`None`: the default quotas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The window boundary.
    pub at: DateTime<Utc>,
    /// When the leader applied it (later than `at` after a failover).
    pub applied_at: DateTime<Utc>,
    /// The Raft log index of the entry.
    pub index: u64,
}

/// One hour of a schedule's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TimelineHour {
    /// The hour's first instant.
    pub start: DateTime<Utc>,
    /// The same instant in the schedule's zone, e.g. "Mon 2025-03-03 08:00 CET".
    pub local: String,
    /// `None` between windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// The quotas in force then; empty means the queues' own.
    pub quotas: Vec<TimelineQuota>,
}

/// One quota in force, resolved to GPUs against the live capacity in scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TimelineQuota {
    /// "pool/inference" or "queue/research".
    pub target: String,
    /// The GPU model.
    pub flavor: String,
    /// The quota, in GPUs.
    pub gpus: u64,
}

impl CheckAt for QuotaSchedule {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.header(
            prefix,
            &self.api_version,
            &self.kind,
            <Self as crate::meta::Resource>::KIND,
            &self.metadata,
        );
        self.spec.check_at(&at(prefix, "spec").path(), c);
    }
}

impl CheckAt for QuotaScheduleSpec {
    fn check_at(&self, p: &str, c: &mut Checker) {
        let problems_before = c.count();
        if let Err(e) = self.tz() {
            c.push(at(p, "timeZone"), e.to_string());
        }
        if self.windows.is_empty() {
            c.push(at(p, "windows"), "must contain at least one window");
        }
        for (i, w) in self.windows.iter().enumerate() {
            w.check_at(&format!("{}[{i}]", at(p, "windows")), c);
        }
        c.unique(
            p,
            "windows",
            "name",
            self.windows.iter().map(|w| w.name.as_str()),
        );
        if let Some(d) = &self.default_quotas {
            check_quotas(&at(p, "defaultQuotas").path(), d, c);
        }
        // Overlaps and gaps only mean something once every window reads.
        if c.count() == problems_before {
            self.check_tiling(p, c);
        }

        let t = &self.transition;
        c.range(
            at(p, "transition.leadTimeSeconds"),
            t.lead_time_seconds,
            0,
            MAX_TRANSITION_SECONDS,
        );
        c.range(
            at(p, "transition.checkpointGraceSeconds"),
            t.checkpoint_grace_seconds,
            0,
            MAX_TRANSITION_SECONDS,
        );
        if let Some(h) = t.handover_lead_seconds {
            c.range(
                at(p, "transition.handoverLeadSeconds"),
                h,
                0,
                MAX_TRANSITION_SECONDS,
            );
        }

        let sp = at(p, "scope").path();
        let s = &self.scope;
        for (i, r) in s.regions.iter().enumerate() {
            c.identifier(format!("{}[{i}]", at(&sp, "regions")), r);
        }
        for (i, cl) in s.clusters.iter().enumerate() {
            c.name(format!("{}[{i}]", at(&sp, "clusters")), cl);
        }
        for (i, f) in s.flavors.iter().enumerate() {
            c.identifier(format!("{}[{i}]", at(&sp, "flavors")), f);
        }
        c.unique(&sp, "regions", "", s.regions.iter().map(String::as_str));
        c.unique(&sp, "clusters", "", s.clusters.iter().map(String::as_str));
        c.unique(&sp, "flavors", "", s.flavors.iter().map(String::as_str));
    }
}

impl CheckAt for QuotaWindow {
    fn check_at(&self, p: &str, c: &mut Checker) {
        c.name(at(p, "name"), &self.name);
        let days: Vec<String> = self.days.iter().map(|d| format!("{d:?}")).collect();
        c.unique(p, "days", "", days.iter().map(String::as_str));
        match (&self.cron, &self.start, &self.end) {
            (Some(expr), None, None) => {
                if !self.days.is_empty() {
                    c.push(at(p, "days"), "a cron window names its days in `cron`");
                }
                if let Err(e) = expr.parse::<Cron>() {
                    c.push(at(p, "cron"), e.to_string());
                }
                match self.duration_minutes {
                    None => c.push(at(p, "durationMinutes"), "a cron window needs a duration"),
                    Some(d) => c.range(at(p, "durationMinutes"), d, 1, MAX_WINDOW_MINUTES),
                }
            }
            (Some(_), _, _) => c.push(
                at(p, "cron"),
                "a window is either `cron` with `durationMinutes` or `start` and `end`, not both",
            ),
            (None, start, end) => {
                if self.duration_minutes.is_some() {
                    c.push(
                        at(p, "durationMinutes"),
                        "only a cron window has a duration",
                    );
                }
                let start = start.as_ref().map(|_| self.start_minute());
                let end = end.as_ref().map(|_| self.end_minute());
                match &start {
                    None => c.push(at(p, "start"), "required (or `cron`)"),
                    Some(Err(e)) => c.push(at(p, "start"), e.to_string()),
                    Some(Ok(_)) => {}
                }
                match &end {
                    None => c.push(at(p, "end"), "required (or `cron`)"),
                    Some(Err(e)) => c.push(at(p, "end"), e.to_string()),
                    Some(Ok(_)) => {}
                }
                if let (Some(Ok(s)), Some(Ok(e))) = (start, end)
                    && s == e
                {
                    c.push(at(p, "end"), "must differ from start");
                }
            }
        }
        if self.quotas.is_empty() {
            c.push(at(p, "quotas"), "must contain at least one quota");
        }
        check_quotas(&at(p, "quotas").path(), &self.quotas, c);
    }
}

/// Pool targets name the side of the fleet a workload class uses.
pub const POOL_TARGETS: [&str; 2] = ["inference", "training"];

fn check_quotas(p: &str, quotas: &[WindowQuota], c: &mut Checker) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, q) in quotas.iter().enumerate() {
        let qp = format!("{p}[{i}]");
        match &q.target {
            QuotaTarget::Pool(n) => {
                if !POOL_TARGETS.contains(&n.as_str()) {
                    c.push(
                        at(&qp, "pool"),
                        format!("must be one of {POOL_TARGETS:?} (got {n:?})"),
                    );
                }
            }
            QuotaTarget::Queue(n) => c.name(at(&qp, "queue"), n),
        }
        if let Some(f) = &q.flavor {
            c.identifier(at(&qp, "flavor"), f);
        }
        match q.amount {
            QuotaAmount::Gpus(g) => c.range(at(&qp, "gpus"), g, 0, MAX_QUOTA_GPUS),
            QuotaAmount::Share(s) => {
                if !(0.0..=1.0).contains(&s) {
                    c.push(
                        at(&qp, "share"),
                        format!("must be between 0 and 1 (got {s})"),
                    );
                }
            }
        }
        if !seen.insert((&q.target, &q.flavor)) {
            c.push(
                qp,
                format!(
                    "duplicate quota for {} {:?}{}",
                    match q.target {
                        QuotaTarget::Pool(_) => "pool",
                        QuotaTarget::Queue(_) => "queue",
                    },
                    q.target.name(),
                    q.flavor
                        .as_deref()
                        .map(|f| format!(" and flavor {f:?}"))
                        .unwrap_or_default()
                ),
            );
        }
    }
}

impl_validate!(QuotaSchedule);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{decode_json, decode_yaml};
    use crate::validation::Validate;

    const SAMPLE: &str = include_str!("../testdata/quota-schedule.yaml");

    fn sample() -> QuotaSchedule {
        decode_yaml(SAMPLE.as_bytes()).unwrap()
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn sample_decodes_validates_and_round_trips() {
        let mut s = sample();
        s.validate().unwrap();
        assert_eq!(s.spec.windows.len(), 2);
        assert_eq!(
            s.spec.windows[0].quotas[0],
            WindowQuota {
                target: QuotaTarget::Pool("inference".into()),
                flavor: Some("H100".into()),
                amount: QuotaAmount::Share(0.75),
            }
        );
        s.status = Some(QuotaScheduleStatus {
            active_window: Some("day".into()),
            last_transition_at: Some(utc("2025-03-03T07:00:00Z")),
            next_transition_at: None,
        });
        let json = serde_json::to_vec(&s).unwrap();
        assert_eq!(decode_json::<QuotaSchedule>(&json).unwrap(), s);
        let yaml = serde_saphyr::to_string(&s).unwrap();
        assert_eq!(decode_yaml::<QuotaSchedule>(yaml.as_bytes()).unwrap(), s);
        let mp = rmp_serde::to_vec_named(&s).unwrap();
        assert_eq!(rmp_serde::from_slice::<QuotaSchedule>(&mp).unwrap(), s);
    }

    fn window(name: &str, days: &[DayOfWeek], start: &str, end: &str) -> QuotaWindow {
        QuotaWindow {
            days: days.to_vec(),
            ..QuotaWindow::daily(
                name,
                start,
                end,
                vec![WindowQuota {
                    target: QuotaTarget::Pool("training".into()),
                    flavor: None,
                    amount: QuotaAmount::Gpus(8),
                }],
            )
        }
    }

    fn spec(windows: Vec<QuotaWindow>) -> QuotaSchedule {
        QuotaSchedule::new(
            "s",
            QuotaScheduleSpec {
                time_zone: "Europe/Berlin".into(),
                windows,
                default_quotas: None,
                transition: Transition::default(),
                scope: ScheduleScope::default(),
            },
        )
    }

    #[test]
    fn overlapping_windows_are_refused_naming_both() {
        let s = spec(vec![
            window("day", &[], "08:00", "22:00"),
            window("night", &[], "21:00", "08:00"),
        ]);
        let errs = s.validate().unwrap_err();
        assert!(errs.has_field("spec.windows[1]"), "{errs}");
        let text = errs.to_string();
        assert!(text.contains("\"night\" overlaps window \"day\""), "{text}");
        assert!(text.contains("21:00"), "{text}");
    }

    #[test]
    fn gaps_need_a_default_and_name_the_window_before_them() {
        let mut s = spec(vec![
            window("day", &DayOfWeek::WEEKDAYS, "08:00", "22:00"),
            window("night", &[], "22:00", "08:00"),
        ]);
        let errs = s.validate().unwrap_err();
        assert!(errs.has_field("spec.windows[1].end"), "{errs}");
        let text = errs.to_string();
        assert!(text.contains("window \"night\" ends"), "{text}");
        assert!(text.contains("Sat 2028-01-01 08:00"), "{text}");
        s.spec.default_quotas = Some(Vec::new());
        s.validate().unwrap();
        // Tiling windows need no default.
        spec(vec![
            window("day", &[], "08:00", "22:00"),
            window("night", &[], "22:00", "08:00"),
        ])
        .validate()
        .unwrap();
    }

    #[test]
    fn cron_windows_are_checked_over_a_leap_year() {
        let mut first_of_month = window("billing", &[], "00:00", "00:00");
        first_of_month.start = None;
        first_of_month.end = None;
        first_of_month.cron = Some("0 0 1 * *".into());
        first_of_month.duration_minutes = Some(1440);
        let mut rest = window("normal", &[], "00:00", "24:00");
        let mut s = spec(vec![first_of_month.clone(), rest.clone()]);
        let errs = s.validate().unwrap_err();
        assert!(errs.has_field("spec.windows[1]"), "{errs}");
        // Cron windows that tile a day: four six-hour shifts.
        let mut shift = first_of_month.clone();
        shift.cron = Some("0 */6 * * *".into());
        shift.duration_minutes = Some(360);
        spec(vec![shift]).validate().unwrap();
        // A 29 February window leaves every other day to the default.
        first_of_month.cron = Some("0 0 29 2 *".into());
        s.spec.windows = vec![first_of_month];
        assert!(s.validate().is_err());
        s.spec.default_quotas = Some(Vec::new());
        s.validate().unwrap();
        rest.cron = Some("0 0 * * *".into());
        let errs = spec(vec![rest]).validate().unwrap_err();
        assert!(errs.has_field("spec.windows[0].cron"), "{errs}");
    }

    #[test]
    fn bad_cron_is_refused_at_its_field() {
        let mut w = window("w", &[], "00:00", "00:00");
        w.start = None;
        w.end = None;
        w.cron = Some("0 25 * * *".into());
        let errs = spec(vec![w]).validate().unwrap_err();
        assert!(errs.has_field("spec.windows[0].cron"), "{errs}");
        assert!(errs.has_field("spec.windows[0].durationMinutes"), "{errs}");
    }

    #[test]
    fn openings_cross_midnight() {
        let w = window("night", &[DayOfWeek::Fri], "22:00", "08:00");
        let fri: NaiveDate = "2025-03-07".parse().unwrap();
        assert_eq!(w.openings(fri).unwrap(), [(1320, 600)]);
        assert!(w.openings(fri.succ_opt().unwrap()).unwrap().is_empty());
        let all = window("all", &[], "00:00", "24:00");
        assert_eq!(all.openings(fri).unwrap(), [(0, 1440)]);
    }

    #[test]
    fn times_of_day() {
        assert_eq!(parse_time_of_day("00:00", false), Ok(0));
        assert_eq!(parse_time_of_day("23:59", false), Ok(1439));
        assert_eq!(parse_time_of_day("24:00", true), Ok(1440));
        for bad in [
            "24:00", "7:00", "07:60", "25:00", "07-00", "", "07:00:00", "ab:cd",
        ] {
            assert!(parse_time_of_day(bad, false).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_problem_is_reported() {
        let mut s = sample();
        s.spec.time_zone = "Mars/Olympus".into();
        s.spec.windows[0].start = Some("7am".into());
        s.spec.windows[0].days.push(DayOfWeek::Mon);
        s.spec.windows[1].end = Some("22:00".into());
        s.spec.windows[1].name = "day".into();
        s.spec.windows[1].quotas[0].amount = QuotaAmount::Share(1.5);
        let dup = s.spec.windows[1].quotas[0].clone();
        s.spec.windows[1].quotas.push(dup);
        s.spec.transition.lead_time_seconds = MAX_TRANSITION_SECONDS + 1;
        s.spec.transition.handover_lead_seconds = Some(MAX_TRANSITION_SECONDS + 1);
        let errs = s.validate().unwrap_err();
        for field in [
            "spec.timeZone",
            "spec.windows[0].start",
            "spec.windows[0].days[5]",
            "spec.windows[1].end",
            "spec.windows[1].name",
            "spec.windows[1].quotas[0].share",
            "spec.windows[1].quotas[2]",
            "spec.transition.leadTimeSeconds",
            "spec.transition.handoverLeadSeconds",
        ] {
            assert!(errs.has_field(field), "missing {field} in {errs}");
        }
    }

    #[test]
    fn quota_needs_one_target_and_one_amount() {
        let doc = |quota: &str| {
            format!(
                r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"QuotaSchedule","metadata":{{"name":"s"}},
                "spec":{{"timeZone":"UTC","windows":[{{"name":"w","start":"00:00","end":"24:00","quotas":[{quota}]}}]}}}}"#
            )
        };
        let ok: QuotaSchedule = decode_json(doc(r#"{"queue":"q","gpus":8}"#).as_bytes()).unwrap();
        ok.validate().unwrap();
        for bad in [
            r#"{"pool":"p","queue":"q","gpus":8}"#,
            r#"{"gpus":8}"#,
            r#"{"pool":"p","gpus":8,"share":0.5}"#,
            r#"{"pool":"p"}"#,
        ] {
            let err = decode_json::<QuotaSchedule>(doc(bad).as_bytes()).unwrap_err();
            assert!(
                err.field().starts_with("spec.windows[0].quotas[0]"),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("exactly one"), "{err}");
        }
    }

    #[test]
    fn share_resolves_down() {
        assert_eq!(QuotaAmount::Share(0.75).resolve(10), 7);
        assert_eq!(QuotaAmount::Gpus(3).resolve(10), 3);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    const MINUTES_PER_WEEK: u32 = 7 * 1440;

    fn hhmm(minute: u16) -> String {
        format!("{:02}:{:02}", minute / 60, minute % 60)
    }

    /// Independent model: a window is a set of minutes of the week (Monday 00:00 = 0).
    fn in_model(days: &[DayOfWeek], start: u16, end: u16, day: Weekday, minute: u16) -> bool {
        let all: Vec<DayOfWeek> = if days.is_empty() {
            (0..7)
                .map(|d| Weekday::try_from(d as u8).unwrap().into())
                .collect()
        } else {
            days.to_vec()
        };
        let t = day.num_days_from_monday() * 1440 + u32::from(minute);
        all.iter().any(|d| {
            let open = Weekday::from(*d).num_days_from_monday() * 1440 + u32::from(start);
            let len = (u32::from(end) + 1440 - u32::from(start)) % 1440;
            let len = if len == 0 { 1440 } else { len };
            (t + MINUTES_PER_WEEK - open) % MINUTES_PER_WEEK < len
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn contains_matches_the_minute_of_week_model(
            days in prop::collection::btree_set(0u8..7, 0..4),
            start in 0u16..1440,
            end in 1u16..=1440,
            day in 0u8..7,
            minute in 0u16..1440,
        ) {
            prop_assume!(start != end);
            let days: Vec<DayOfWeek> =
                days.into_iter().map(|d| Weekday::try_from(d).unwrap().into()).collect();
            let w = QuotaWindow {
                days: days.clone(),
                ..QuotaWindow::daily(
                    "w",
                    &hhmm(start),
                    &if end == 1440 { "24:00".to_owned() } else { hhmm(end) },
                    vec![],
                )
            };
            let day = Weekday::try_from(day).unwrap();
            prop_assert_eq!(
                w.contains(day, minute).unwrap(),
                in_model(&days, start, end % 1440, day, minute)
            );
        }
    }
}

/// `GET /v1/schedules/{name}/next`: what the schedule's next boundary will do on the live
/// state, worked out by the same scheduling cycle the leader runs at the boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ScheduleNext {
    /// The schedule.
    pub schedule: String,
    /// Its IANA time zone.
    pub time_zone: String,
    /// The window in force now (`None`: the default quotas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The window the boundary opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The boundary; `None` when no change comes within a week.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// The boundary in the schedule's wall-clock time, e.g. `Tue 08:00 CET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_local: Option<String>,
    /// Seconds from the read to the boundary on the federation's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_left: Option<i64>,
    /// The checkpoint notice reclaimed work gets.
    pub grace_seconds: u64,
    /// Per target and flavor, the quota before and after the boundary.
    pub quotas: Vec<QuotaChange>,
    /// The running workloads that would get a checkpoint notice and be reclaimed.
    pub reclaims: Vec<ReclaimPreview>,
    /// GPU-hours of work since their last checkpoint (or start) the reclaims would lose if
    /// none checkpoints within its notice.
    pub lost_gpu_hours: f64,
}

/// One quota a boundary changes (or keeps).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct QuotaChange {
    /// `pool/inference`, `pool/training` or `queue/NAME`.
    pub target: String,
    /// The GPU model.
    pub flavor: String,
    /// GPUs before the boundary; `None` when the current window does not set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
    /// GPUs after it; `None` when the next window does not set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
}

/// A running workload the boundary would reclaim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReclaimPreview {
    /// The workload's name.
    pub workload: String,
    /// Its queue.
    pub queue: String,
    /// Where it runs.
    pub cluster: String,
    /// GPUs it holds.
    pub gpus: u64,
    /// The pending workload it makes room for.
    pub for_workload: String,
    /// GPU-hours since its last checkpoint (or start) at the boundary.
    pub lost_gpu_hours: f64,
}
