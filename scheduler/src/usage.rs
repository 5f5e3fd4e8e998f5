//! Chargeback arithmetic: GPU time per queue, tenant, flavor and day, split into
//! guaranteed, borrowed and idle, from runs (who held how many GPUs of which flavor, from
//! when to when), the fleet's capacity over time and each queue's guarantee over time.
//!
//! Pure and exact: times are whole seconds and figures whole GPU-seconds, so the identities
//! of a chargeback report hold to the GPU-second. The period is cut at every instant where
//! anything changes (a run starts or ends, a capacity or guarantee changes, a day begins in
//! the report's time zone); within a slice every figure is constant, so each is a product.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use tideway_api::usage::{FlavorUsageRow, QueueUsageRow, UsageDimension};

/// GPUs of one flavor held by one workload of one queue over `[start, end)`; `end: None`
/// while it still runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub queue: String,
    pub tenant: String,
    pub flavor: String,
    pub gpus: u64,
    pub start: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<DateTime<Utc>>,
}

/// A value that holds from `at` until the next step; before the first step it is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub at: DateTime<Utc>,
    pub gpus: u64,
}

/// The value of a step series at `t`.
pub fn value_at(steps: &[Step], t: DateTime<Utc>) -> u64 {
    let i = steps.partition_point(|s| s.at <= t);
    if i == 0 { 0 } else { steps[i - 1].gpus }
}

/// Everything the arithmetic reads.
#[derive(Debug, Clone, Copy)]
pub struct UsageInput<'a> {
    /// Runs, in any order.
    pub runs: &'a [Run],
    /// Fleet GPUs per flavor over time, each series in time order.
    pub capacity: &'a BTreeMap<String, Vec<Step>>,
    /// Guaranteed GPUs per queue, then flavor, over time, each series in time order.
    pub guaranteed: &'a BTreeMap<String, BTreeMap<String, Vec<Step>>>,
    /// Open runs end here; nothing after it is accounted (the future has no usage yet).
    pub now: DateTime<Utc>,
}

/// GPU-seconds of one (day, queue, tenant, flavor).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueSeconds {
    pub guaranteed: u64,
    pub borrowed: u64,
}

/// GPU-seconds of one (day, flavor).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlavorSeconds {
    pub capacity: u64,
    pub used: u64,
    pub idle: u64,
    pub over: u64,
}

/// (day, queue, tenant, flavor).
pub type QueueKey = (NaiveDate, String, String, String);

/// The finest accounts of a period; [`Accounts::queue_rows`] and [`Accounts::flavor_rows`]
/// group them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounts {
    pub queues: BTreeMap<QueueKey, QueueSeconds>,
    pub flavors: BTreeMap<(NaiveDate, String), FlavorSeconds>,
    /// End of what was accounted: `min(to, now)`.
    pub accounted_to: DateTime<Utc>,
}

/// Accounts `[from, min(to, now))`, days cut at midnight in `tz`.
pub fn account(input: &UsageInput<'_>, from: DateTime<Utc>, to: DateTime<Utc>, tz: Tz) -> Accounts {
    let from = whole(from);
    let end = whole(to.min(input.now));
    let mut out = Accounts {
        accounted_to: end.max(from),
        ..Default::default()
    };
    if end <= from {
        return out;
    }
    // Interned run keys (queue, tenant, flavor) and their +/- events inside the period.
    let mut keys: Vec<(String, String, String)> = Vec::new();
    let mut key_ix: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
    let mut events: Vec<(DateTime<Utc>, usize, i64)> = Vec::new();
    let mut cuts: Vec<DateTime<Utc>> = vec![from, end];
    for r in input.runs {
        let s = whole(r.start).max(from);
        let e = whole(r.end.unwrap_or(input.now)).min(end);
        if s >= e || r.gpus == 0 {
            continue;
        }
        let k = *key_ix
            .entry((r.queue.as_str(), r.tenant.as_str(), r.flavor.as_str()))
            .or_insert_with(|| {
                keys.push((r.queue.clone(), r.tenant.clone(), r.flavor.clone()));
                keys.len() - 1
            });
        let g = i64::try_from(r.gpus).unwrap_or(i64::MAX);
        events.push((s, k, g));
        events.push((e, k, -g));
        cuts.push(s);
        cuts.push(e);
    }
    events.sort();
    let series_cuts = input
        .capacity
        .values()
        .chain(input.guaranteed.values().flat_map(|m| m.values()))
        .flat_map(|steps| steps.iter().map(|s| whole(s.at)));
    cuts.extend(series_cuts.filter(|t| *t > from && *t < end));
    cuts.extend(midnights(from, end, tz));
    cuts.sort();
    cuts.dedup();

    let mut active: Vec<i64> = vec![0; keys.len()];
    let mut next_event = 0;
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        while next_event < events.len() && events[next_event].0 <= a {
            let (_, k, g) = events[next_event];
            active[k] += g;
            next_event += 1;
        }
        let secs = u64::try_from((b - a).num_seconds()).unwrap_or(0);
        let day = a.with_timezone(&tz).date_naive();
        // Per (queue, flavor): used, then the guarantee is filled in tenant order.
        let mut used_by_flavor: BTreeMap<&str, u64> = BTreeMap::new();
        let mut left: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for (k, g) in active.iter().enumerate() {
            let Ok(gpus) = u64::try_from(*g) else {
                continue;
            };
            if gpus == 0 {
                continue;
            }
            let (queue, tenant, flavor) = &keys[k];
            *used_by_flavor.entry(flavor).or_insert(0) += gpus;
            let quota = left
                .entry((queue.as_str(), flavor.as_str()))
                .or_insert_with(|| {
                    input
                        .guaranteed
                        .get(queue)
                        .and_then(|m| m.get(flavor))
                        .map_or(0, |s| value_at(s, a))
                });
            let within = gpus.min(*quota);
            *quota -= within;
            let acc = out
                .queues
                .entry((day, queue.clone(), tenant.clone(), flavor.clone()))
                .or_default();
            acc.guaranteed += within * secs;
            acc.borrowed += (gpus - within) * secs;
        }
        let flavors = input
            .capacity
            .keys()
            .map(String::as_str)
            .chain(used_by_flavor.keys().copied())
            .collect::<std::collections::BTreeSet<&str>>();
        for f in flavors {
            let cap = input.capacity.get(f).map_or(0, |s| value_at(s, a));
            let used = used_by_flavor.get(f).copied().unwrap_or(0);
            if cap == 0 && used == 0 {
                // Before the flavor existed (or after it left): nothing to account.
                continue;
            }
            let acc = out.flavors.entry((day, f.to_string())).or_default();
            acc.capacity += cap * secs;
            acc.used += used * secs;
            acc.idle += cap.saturating_sub(used) * secs;
            acc.over += used.saturating_sub(cap) * secs;
        }
    }
    out
}

impl Accounts {
    /// Queue rows grouped by `by` (the dimensions left out are summed over), in key order.
    pub fn queue_rows(&self, by: &[UsageDimension]) -> Vec<QueueUsageRow> {
        let has = |d| by.contains(&d);
        let mut groups: BTreeMap<QueueGroup, QueueSeconds> = BTreeMap::new();
        for ((day, queue, tenant, flavor), s) in &self.queues {
            let key = (
                has(UsageDimension::Day).then_some(*day),
                has(UsageDimension::Queue).then(|| queue.clone()),
                has(UsageDimension::Tenant).then(|| tenant.clone()),
                has(UsageDimension::Flavor).then(|| flavor.clone()),
            );
            let g = groups.entry(key).or_default();
            g.guaranteed += s.guaranteed;
            g.borrowed += s.borrowed;
        }
        groups
            .into_iter()
            .map(|((day, queue, tenant, flavor), s)| QueueUsageRow {
                day,
                queue,
                tenant,
                flavor,
                guaranteed_gpu_seconds: s.guaranteed,
                borrowed_gpu_seconds: s.borrowed,
                used_gpu_seconds: s.guaranteed + s.borrowed,
            })
            .collect()
    }

    /// Flavor rows, per day when `by_day`, in key order.
    pub fn flavor_rows(&self, by_day: bool) -> Vec<FlavorUsageRow> {
        let mut groups: BTreeMap<(Option<NaiveDate>, String), FlavorSeconds> = BTreeMap::new();
        for ((day, flavor), s) in &self.flavors {
            let g = groups
                .entry((by_day.then_some(*day), flavor.clone()))
                .or_default();
            g.capacity += s.capacity;
            g.used += s.used;
            g.idle += s.idle;
            g.over += s.over;
        }
        groups
            .into_iter()
            .map(|((day, flavor), s)| FlavorUsageRow {
                day,
                flavor,
                capacity_gpu_seconds: s.capacity,
                used_gpu_seconds: s.used,
                idle_gpu_seconds: s.idle,
                over_gpu_seconds: s.over,
            })
            .collect()
    }
}

type QueueGroup = (
    Option<NaiveDate>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// Truncated to the second: figures are whole GPU-seconds.
fn whole(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

/// The instants strictly inside `(from, end)` where a day begins in `tz`. A midnight that
/// a DST change skips begins the day at the first instant that exists.
fn midnights(from: DateTime<Utc>, end: DateTime<Utc>, tz: Tz) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut day = from.with_timezone(&tz).date_naive();
    while let Some(next) = day.succ_opt() {
        day = next;
        let Some(start) = day_start(day, tz) else {
            continue;
        };
        if start >= end {
            break;
        }
        if start > from {
            out.push(start);
        }
    }
    out
}

fn day_start(day: NaiveDate, tz: Tz) -> Option<DateTime<Utc>> {
    (0..24).find_map(|h| {
        tz.with_ymd_and_hms(day.year(), day.month(), day.day(), h, 0, 0)
            .earliest()
            .map(|t| t.with_timezone(&Utc))
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).expect("time")
    }

    fn run(queue: &str, flavor: &str, gpus: u64, start: i64, end: Option<i64>) -> Run {
        Run {
            queue: queue.into(),
            tenant: format!("team-{queue}"),
            flavor: flavor.into(),
            gpus,
            start: t(start),
            end: end.map(t),
        }
    }

    fn steps(points: &[(i64, u64)]) -> Vec<Step> {
        points
            .iter()
            .map(|(at, gpus)| Step {
                at: t(*at),
                gpus: *gpus,
            })
            .collect()
    }

    #[test]
    fn guaranteed_then_borrowed_then_idle_with_a_quota_change_midway() {
        let runs = vec![
            run("a", "H100", 6, 0, Some(100)),
            run("b", "H100", 2, 50, None),
        ];
        let capacity = BTreeMap::from([("H100".to_string(), steps(&[(0, 8)]))]);
        let guaranteed = BTreeMap::from([
            (
                "a".to_string(),
                BTreeMap::from([("H100".to_string(), steps(&[(0, 4), (40, 6)]))]),
            ),
            ("b".to_string(), BTreeMap::new()),
        ]);
        let input = UsageInput {
            runs: &runs,
            capacity: &capacity,
            guaranteed: &guaranteed,
            now: t(150),
        };
        let acc = account(&input, t(0), t(1000), Tz::UTC);
        assert_eq!(acc.accounted_to, t(150), "nothing after now");
        let rows = acc.queue_rows(&[UsageDimension::Queue]);
        // a: 4 of 6 guaranteed for 40 s, all 6 for 60 s.
        assert_eq!(rows[0].queue.as_deref(), Some("a"));
        assert_eq!(rows[0].guaranteed_gpu_seconds, 4 * 40 + 6 * 60);
        assert_eq!(rows[0].borrowed_gpu_seconds, 2 * 40);
        // b has no quota: 2 GPUs from 50 to now (150), all borrowed.
        assert_eq!(rows[1].borrowed_gpu_seconds, 2 * 100);
        assert_eq!(rows[1].guaranteed_gpu_seconds, 0);
        let f = &acc.flavor_rows(false)[0];
        assert_eq!(f.capacity_gpu_seconds, 8 * 150);
        assert_eq!(f.used_gpu_seconds, 6 * 100 + 2 * 100);
        assert_eq!(f.idle_gpu_seconds, 8 * 150 - 800);
        assert_eq!(f.over_gpu_seconds, 0);
    }

    #[test]
    fn days_are_cut_at_midnight_in_the_time_zone_asked_for() {
        // 2027-03-27 22:00 UTC to 2027-03-28 04:00 UTC: Berlin moves to summer time at
        // 01:00 UTC on the 28th, so its midnight is 23:00 UTC on the 27th.
        let from = DateTime::parse_from_rfc3339("2027-03-27T22:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let runs = vec![Run {
            end: None,
            start: from,
            ..run("a", "L40S", 1, 0, None)
        }];
        let capacity = BTreeMap::from([("L40S".to_string(), vec![Step { at: from, gpus: 2 }])]);
        let guaranteed = BTreeMap::new();
        let now = from + chrono::Duration::hours(6);
        let input = UsageInput {
            runs: &runs,
            capacity: &capacity,
            guaranteed: &guaranteed,
            now,
        };
        let berlin: Tz = "Europe/Berlin".parse().expect("tz");
        let rows = account(&input, from, now, berlin).flavor_rows(true);
        let per_day: Vec<(String, u64)> = rows
            .iter()
            .map(|r| (format!("{:?}", r.day), r.used_gpu_seconds))
            .collect();
        assert_eq!(
            per_day,
            vec![
                ("Some(2027-03-27)".to_string(), 3600),
                ("Some(2027-03-28)".to_string(), 5 * 3600)
            ]
        );
        let utc = account(&input, from, now, Tz::UTC).flavor_rows(true);
        assert_eq!(
            utc[0].used_gpu_seconds,
            2 * 3600,
            "UTC midnight is at 00:00"
        );
    }

    #[test]
    fn work_beyond_the_reported_capacity_is_over_not_negative_idle() {
        let runs = vec![run("a", "H100", 10, 0, Some(10))];
        let capacity = BTreeMap::from([("H100".to_string(), steps(&[(0, 8)]))]);
        let input = UsageInput {
            runs: &runs,
            capacity: &capacity,
            guaranteed: &BTreeMap::new(),
            now: t(10),
        };
        let f = &account(&input, t(0), t(10), Tz::UTC).flavor_rows(false)[0];
        assert_eq!(
            (
                f.capacity_gpu_seconds,
                f.used_gpu_seconds,
                f.idle_gpu_seconds,
                f.over_gpu_seconds
            ),
            (80, 100, 0, 20)
        );
    }

    fn arb_runs() -> impl Strategy<Value = Vec<Run>> {
        let one = (
            0usize..3,
            0usize..2,
            1u64..5,
            0i64..20_000,
            prop::option::of(0i64..20_000),
        )
            .prop_map(|(q, f, gpus, start, len)| {
                let queues = ["a", "b", "c"];
                let flavors = ["H100", "A100"];
                run(queues[q], flavors[f], gpus, start, len.map(|l| start + l))
            });
        prop::collection::vec(one, 0..25)
    }

    proptest! {
        /// With capacity at least the work (as the members report it), used + idle is
        /// capacity × time for every flavor, every queue's used is the sum of its runs'
        /// GPU-seconds in the period, and guaranteed + borrowed = used.
        #[test]
        fn the_figures_add_up(
            runs in arb_runs(),
            quotas in prop::collection::vec((0usize..3, 0usize..2, 0i64..20_000, 0u64..8), 0..10),
            from in 0i64..10_000,
            len in 1i64..40_000,
            now in 0i64..50_000,
            tz in prop::sample::select(vec!["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]),
        ) {
            let tz: Tz = tz.parse().expect("tz");
            let cap = 4 * 25 + 1;
            let capacity: BTreeMap<String, Vec<Step>> = ["H100", "A100"]
                .iter()
                .map(|f| (f.to_string(), steps(&[(-1, cap)])))
                .collect();
            let mut guaranteed: BTreeMap<String, BTreeMap<String, Vec<Step>>> = BTreeMap::new();
            let mut sorted = quotas.clone();
            sorted.sort_by_key(|q| q.2);
            for (q, f, at, g) in sorted {
                guaranteed
                    .entry(["a", "b", "c"][q].to_string())
                    .or_default()
                    .entry(["H100", "A100"][f].to_string())
                    .or_default()
                    .push(Step { at: t(at), gpus: g });
            }
            let input = UsageInput { runs: &runs, capacity: &capacity, guaranteed: &guaranteed, now: t(now) };
            let acc = account(&input, t(from), t(from + len), tz);
            let span = u64::try_from((acc.accounted_to - t(from)).num_seconds()).expect("span");
            for f in acc.flavor_rows(false) {
                prop_assert_eq!(f.over_gpu_seconds, 0);
                prop_assert_eq!(f.used_gpu_seconds + f.idle_gpu_seconds, cap * span);
                prop_assert_eq!(f.capacity_gpu_seconds, cap * span);
            }
            let end = t(from + len).min(t(now));
            for row in acc.queue_rows(&[UsageDimension::Queue, UsageDimension::Flavor]) {
                prop_assert_eq!(row.guaranteed_gpu_seconds + row.borrowed_gpu_seconds, row.used_gpu_seconds);
                let expect: u64 = runs
                    .iter()
                    .filter(|r| Some(&r.queue) == row.queue.as_ref() && Some(&r.flavor) == row.flavor.as_ref())
                    .map(|r| {
                        let s = r.start.max(t(from));
                        let e = r.end.unwrap_or(t(now)).min(end);
                        r.gpus * u64::try_from((e - s).num_seconds().max(0)).unwrap_or(0)
                    })
                    .sum();
                prop_assert_eq!(row.used_gpu_seconds, expect);
            }
            // Grouping by day splits the same totals.
            let total = |rows: Vec<QueueUsageRow>| rows.iter().map(|r| r.used_gpu_seconds).sum::<u64>();
            prop_assert_eq!(
                total(acc.queue_rows(&UsageDimension::ALL)),
                total(acc.queue_rows(&[]))
            );
        }
    }
}
