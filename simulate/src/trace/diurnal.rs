//! Inference that follows the day: the Alibaba DLRM trace's replicas (their apps and GPU
//! sizes) given daily lifetimes in a time zone, for tidal scenarios.
//!
//! The trace itself shows almost flat demand (about 3,100 GPUs alive throughout its
//! month), so a day/night schedule has nothing to follow in it. With `day=08:00-22:00`
//! every kept replica instead serves each local day from about 08:00 to about 22:00 (a
//! per-replica offset within ±30 minutes, so demand ramps rather than steps), except a
//! share `always-on` that serves around the clock (the night's base load). `sample` keeps
//! that share of the replicas. Both choices hash the instance name, so they are the same on
//! every run and in every zone; the zone is `tz` (IANA, default UTC).

use chrono::{Days, NaiveTime};
use chrono_tz::Tz;
use tideway_scheduler::tidal::resolve;

use crate::time::{Secs, to_utc};

/// The daily serving hours of the replicas.
#[derive(Debug, Clone, Copy)]
pub struct Diurnal {
    pub tz: Tz,
    pub open: NaiveTime,
    pub close: NaiveTime,
    /// Share of replicas serving around the clock.
    pub always_on: f64,
}

/// Half the spread of replicas' opening and closing times around the day's edges.
const JITTER_SECONDS: i64 = 1800;

impl Diurnal {
    /// Parses `HH:MM-HH:MM` (closing may be before opening: the day crosses midnight).
    pub fn parse(day: &str, tz: &str, always_on: f64) -> Result<Self, String> {
        let (a, b) = day
            .split_once('-')
            .ok_or_else(|| format!("day: {day:?} is not HH:MM-HH:MM"))?;
        let time = |s: &str| {
            NaiveTime::parse_from_str(s.trim(), "%H:%M")
                .map_err(|_| format!("day: {s:?} is not HH:MM"))
        };
        let (open, close) = (time(a)?, time(b)?);
        if open == close {
            return Err("day: opening and closing are the same time".into());
        }
        let tz: Tz = tz
            .parse()
            .map_err(|_| format!("tz: {tz:?} is not an IANA time zone"))?;
        if !(0.0..=1.0).contains(&always_on) {
            return Err("always-on: must be between 0 and 1".into());
        }
        Ok(Self {
            tz,
            open,
            close,
            always_on,
        })
    }

    /// The serving spans of replica `name` within `[start, end)`: the whole window if it is
    /// always on, else one span per local day, each tagged with the day's number.
    pub fn spans(&self, name: &str, start: Secs, end: Secs) -> Vec<(Option<u32>, Secs, Secs)> {
        // Salted: `sample` already chose replicas by the plain hash, so the same hash would
        // make every sampled replica always on (or none).
        let h = hash(&format!("{name}/diurnal"));
        if fraction(h) < self.always_on {
            return vec![(None, start, end)];
        }
        let jitter = |bits: u64| (bits % (2 * JITTER_SECONDS as u64)) as i64 - JITTER_SECONDS;
        let (j_open, j_close) = (jitter(h >> 20), jitter(h >> 40));
        let mut out = Vec::new();
        let first = to_utc(start).with_timezone(&self.tz).date_naive();
        // From the day before, for a day that crosses midnight into the window.
        let Some(mut date) = first.checked_sub_days(Days::new(1)) else {
            return out;
        };
        let mut n = 0u32;
        loop {
            let open = resolve(self.tz, date.and_time(self.open)).timestamp() + j_open;
            if open >= end {
                break;
            }
            let close_date = if self.close > self.open {
                Some(date)
            } else {
                date.succ_opt()
            };
            let Some(close_date) = close_date else { break };
            let close = resolve(self.tz, close_date.and_time(self.close)).timestamp() + j_close;
            let (a, b) = (open.max(start), close.min(end));
            if a < b {
                out.push((Some(n), a, b));
            }
            n += 1;
            let Some(next) = date.succ_opt() else { break };
            date = next;
        }
        out
    }
}

/// FNV-1a, finished with splitmix64's mixer: stable across runs and platforms, unlike the
/// std hasher, and spread evenly even for names that differ only in a few digits
/// (`instance_17`, `instance_18`), which plain FNV leaves clustered.
pub fn hash(s: &str) -> u64 {
    let h = s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let z = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hash as a fraction in [0, 1).
pub fn fraction(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_time;

    #[test]
    fn replicas_serve_the_local_day_across_a_dst_change() {
        let d = Diurnal::parse("08:00-22:00", "Europe/Berlin", 0.0).unwrap();
        // 2030-03-31 is the spring-forward Sunday in Berlin.
        let start = parse_time("2030-03-30T00:00:00Z").unwrap();
        let end = parse_time("2030-04-01T00:00:00Z").unwrap();
        let spans = d.spans("instance_7", start, end);
        assert_eq!(spans.len(), 2, "{spans:?}");
        // 08:00 CET is 07:00 UTC on the 30th, 08:00 CEST 06:00 UTC on the 31st (±30 min).
        let near = |t: Secs, s: &str| (t - parse_time(s).unwrap()).abs() <= JITTER_SECONDS;
        assert!(near(spans[0].1, "2030-03-30T07:00:00Z"));
        assert!(near(spans[0].2, "2030-03-30T21:00:00Z"));
        assert!(near(spans[1].1, "2030-03-31T06:00:00Z"));
        assert!(near(spans[1].2, "2030-03-31T20:00:00Z"));

        let night = Diurnal::parse("22:00-06:00", "UTC", 0.0).unwrap();
        let spans = night.spans("x", start, end);
        // The night that began the day before is cut at the window's start.
        assert_eq!(spans[0].1, start);
        assert_eq!(spans.len(), 3);

        let some = Diurnal::parse("08:00-22:00", "UTC", 0.2).unwrap();
        let kept: Vec<String> = (0..5000)
            .map(|i| format!("instance_{i}"))
            .filter(|n| fraction(hash(n)) < 0.05)
            .collect();
        let on = kept
            .iter()
            .filter(|n| some.spans(n, start, end)[0].0.is_none())
            .count();
        // Independent of the sample: about a fifth of the kept replicas, not all or none.
        assert!(
            on * 10 > kept.len() && on * 10 < kept.len() * 3,
            "{on} of {}",
            kept.len()
        );
        let always = Diurnal::parse("08:00-22:00", "UTC", 1.0).unwrap();
        assert_eq!(always.spans("x", start, end), vec![(None, start, end)]);
        assert!(Diurnal::parse("8-22", "UTC", 0.0).is_err());
        assert!(Diurnal::parse("08:00-22:00", "Mars/Olympus", 0.0).is_err());
    }

    #[test]
    fn sampling_by_hash_keeps_about_the_share_asked_for() {
        let kept = |share: f64| {
            (0..10_000)
                .filter(|i| fraction(hash(&format!("instance_{i}"))) < share)
                .count()
        };
        for (share, want) in [(0.01, 100), (0.1, 1000), (0.5, 5000)] {
            let got = kept(share);
            assert!(got.abs_diff(want) * 5 < want, "{share}: {got} of 10000");
        }
    }
}
