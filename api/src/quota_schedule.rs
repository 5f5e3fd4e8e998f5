//! `QuotaSchedule`: tidal quotas, i.e. calendar windows that move GPU quota between pools
//! or queues (inference by day, training by night).
//!
//! Windows are written in local wall-clock time of an IANA time zone, because that is how
//! traffic peaks are described, and evaluated by converting the instant to that zone, so
//! daylight-saving changes move the boundaries with the clock instead of breaking them.

use std::str::FromStr;

use chrono::{DateTime, Datelike, Timelike, Utc, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use thiserror::Error;

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
}

/// Tidal quotas: calendar windows that override queue or pool quotas at set times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuotaScheduleSpec {
    /// IANA name such as "Europe/Berlin"; windows are in this zone's wall-clock time.
    pub time_zone: String,
    /// The first window containing an instant wins; outside every window the queues' own
    /// quotas apply.
    pub windows: Vec<QuotaWindow>,
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

    /// The window in force at `at`, if any.
    pub fn active_window(&self, at: DateTime<Utc>) -> Result<Option<&QuotaWindow>, ScheduleError> {
        let local = at.with_timezone(&self.tz()?);
        let minute = u16::try_from(local.hour() * 60 + local.minute()).unwrap_or(0);
        let day = local.weekday();
        for window in &self.windows {
            if window.contains(day, minute)? {
                return Ok(Some(window));
            }
        }
        Ok(None)
    }
}

/// A recurring local-time window and the quotas that hold during it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuotaWindow {
    /// Shown in status and explanations, e.g. `business-hours`.
    pub name: String,
    /// Days on which the window opens; empty means every day. A window that crosses
    /// midnight belongs to the day it opens on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<DayOfWeek>,
    /// "HH:MM", local time, inclusive.
    pub start: String,
    /// "HH:MM" (or "24:00"), local time, exclusive; earlier than `start` crosses midnight.
    pub end: String,
    /// The quotas in force while the window is active.
    pub quotas: Vec<WindowQuota>,
}

impl QuotaWindow {
    /// Minutes after local midnight.
    pub fn start_minute(&self) -> Result<u16, ScheduleError> {
        parse_time_of_day(&self.start, false)
    }

    /// Minutes after local midnight; 1440 for "24:00".
    pub fn end_minute(&self) -> Result<u16, ScheduleError> {
        parse_time_of_day(&self.end, true)
    }

    /// Whether `end` is earlier than `start`, so the window runs into the next day.
    pub fn crosses_midnight(&self) -> Result<bool, ScheduleError> {
        Ok(self.end_minute()? < self.start_minute()?)
    }

    fn opens_on(&self, day: Weekday) -> bool {
        self.days.is_empty() || self.days.iter().any(|d| Weekday::from(*d) == day)
    }

    /// Whether local `day` at `minute` after midnight falls in the window.
    pub fn contains(&self, day: Weekday, minute: u16) -> Result<bool, ScheduleError> {
        let (start, end) = (self.start_minute()?, self.end_minute()?);
        Ok(if start < end {
            self.opens_on(day) && (start..end).contains(&minute)
        } else if start > end {
            (self.opens_on(day) && minute >= start) || (self.opens_on(day.pred()) && minute < end)
        } else {
            false
        })
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
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Transition {
    /// Before a boundary, stop admitting work into the losing side that cannot finish or
    /// checkpoint within this time.
    pub lead_time_seconds: u64,
    /// After a boundary, over-quota work gets this long to checkpoint before preemption.
    pub checkpoint_grace_seconds: u64,
    /// Which over-quota work is preempted first after a boundary.
    pub reclaim_order: ReclaimOrder,
}

impl Default for Transition {
    fn default() -> Self {
        Self {
            lead_time_seconds: 900,
            checkpoint_grace_seconds: 600,
            reclaim_order: ReclaimOrder::default(),
        }
    }
}

/// Order in which over-quota work is preempted at a boundary; camelCase on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

impl CheckAt for QuotaSchedule {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.header(
            prefix,
            &self.api_version,
            &self.kind,
            <Self as crate::meta::Resource>::KIND,
            &self.metadata,
        );
        self.spec.check_at(&at(prefix, "spec"), c);
    }
}

impl CheckAt for QuotaScheduleSpec {
    fn check_at(&self, p: &str, c: &mut Checker) {
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

        let sp = at(p, "scope");
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
        let start = self.start_minute();
        let end = self.end_minute();
        if let Err(e) = &start {
            c.push(at(p, "start"), e.to_string());
        }
        if let Err(e) = &end {
            c.push(at(p, "end"), e.to_string());
        }
        if let (Ok(s), Ok(e)) = (start, end)
            && s == e
        {
            c.push(at(p, "end"), "must differ from start");
        }
        if self.quotas.is_empty() {
            c.push(at(p, "quotas"), "must contain at least one quota");
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, q) in self.quotas.iter().enumerate() {
            let qp = format!("{}[{i}]", at(p, "quotas"));
            match &q.target {
                QuotaTarget::Pool(n) => c.name(at(&qp, "pool"), n),
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

    #[test]
    fn windows_follow_local_time_across_dst() {
        let s = sample().spec;
        let name = |t: &str| s.active_window(utc(t)).unwrap().map(|w| w.name.as_str());
        // Europe/Berlin is UTC+1 in winter: Monday 08:00 local = 07:00 UTC.
        assert_eq!(name("2025-03-03T07:00:00Z"), Some("day"));
        assert_eq!(name("2025-03-03T06:59:00Z"), Some("night"));
        // UTC+2 in summer: the boundary moved with DST to 06:00 UTC.
        assert_eq!(name("2025-06-02T06:00:00Z"), Some("day"));
        assert_eq!(name("2025-06-02T05:59:00Z"), Some("night"));
        // Night crosses midnight: Friday 23:00 local opens it; Saturday 03:00 is still in it.
        assert_eq!(name("2025-03-07T22:00:00Z"), Some("night"));
        assert_eq!(name("2025-03-08T02:00:00Z"), Some("night"));
        // Day only opens on weekdays: Saturday noon is in no window.
        assert_eq!(name("2025-03-08T11:00:00Z"), None);
        // The night of the DST switch (Sunday 30 March, 02:00 -> 03:00).
        assert_eq!(name("2025-03-30T01:30:00Z"), Some("night"));
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
        s.spec.windows[0].start = "7am".into();
        s.spec.windows[0].days.push(DayOfWeek::Mon);
        s.spec.windows[1].end = "22:00".into();
        s.spec.windows[1].name = "day".into();
        s.spec.windows[1].quotas[0].amount = QuotaAmount::Share(1.5);
        let dup = s.spec.windows[1].quotas[0].clone();
        s.spec.windows[1].quotas.push(dup);
        s.spec.transition.lead_time_seconds = MAX_TRANSITION_SECONDS + 1;
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
                name: "w".into(),
                days: days.clone(),
                start: hhmm(start),
                end: if end == 1440 { "24:00".into() } else { hhmm(end) },
                quotas: vec![],
            };
            let day = Weekday::try_from(day).unwrap();
            prop_assert_eq!(
                w.contains(day, minute).unwrap(),
                in_model(&days, start, end % 1440, day, minute)
            );
        }

        #[test]
        fn a_full_day_window_is_always_active(secs in 0i64..4_000_000_000, tz in prop::sample::select(vec![
            "UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
        ])) {
            let spec = QuotaScheduleSpec {
                time_zone: tz.into(),
                windows: vec![QuotaWindow {
                    name: "all".into(),
                    days: vec![],
                    start: "00:00".into(),
                    end: "24:00".into(),
                    quotas: vec![WindowQuota {
                        target: QuotaTarget::Pool("p".into()),
                        flavor: None,
                        amount: QuotaAmount::Share(1.0),
                    }],
                }],
                transition: Transition::default(),
                scope: ScheduleScope::default(),
            };
            let at = DateTime::from_timestamp(secs, 0).unwrap();
            prop_assert!(spec.active_window(at).unwrap().is_some());
        }
    }
}
