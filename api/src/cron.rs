//! Five-field cron expressions (`minute hour day-of-month month day-of-week`), for quota
//! windows that a days-and-hours range cannot say ("the first Monday of the month", "every
//! six hours").
//!
//! Only matching is done here: which local minutes of a calendar day an expression opens
//! on. Turning local minutes into instants (and daylight-saving changes) is the tidal
//! engine's business. Semantics follow Vixie cron: `*`, lists, ranges, steps, month and day
//! names; day-of-week 0 and 7 are Sunday; when both day fields are restricted, a day matches
//! if either does.

use chrono::{Datelike, NaiveDate};
use thiserror::Error;

/// Why a cron expression does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CronError {
    /// Not five whitespace-separated fields.
    #[error("expected 5 fields (minute hour day-of-month month day-of-week), got {0}")]
    FieldCount(usize),
    /// One field is wrong.
    #[error("{field}: {value:?} is not valid: {reason}")]
    Field {
        /// Which field ("minute", "hour", ...).
        field: &'static str,
        /// The field as written.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// A parsed expression: one bit per allowed value of each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    dom_any: bool,
    dow_any: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// Value of the first name (months count from 1, days from 0).
    names_from: u32,
}

fn parse_value(spec: &FieldSpec, s: &str) -> Option<u32> {
    if let Ok(v) = s.parse::<u32>() {
        return (spec.min..=spec.max).contains(&v).then_some(v);
    }
    let lower = s.to_ascii_lowercase();
    spec.names
        .iter()
        .position(|n| *n == lower)
        .map(|i| i as u32 + spec.names_from)
}

/// The set of values as a bit mask (bit v set when v is allowed), and whether it was `*`.
fn parse_field(spec: &FieldSpec, text: &str) -> Result<(u64, bool), CronError> {
    let bad = |reason| CronError::Field {
        field: spec.name,
        value: text.to_owned(),
        reason,
    };
    let mut mask = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| bad("the step must be a number"))?;
                if step == 0 {
                    return Err(bad("the step must be at least 1"));
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" {
            (spec.min, spec.max)
        } else if let Some((a, b)) = range.split_once('-') {
            let a = parse_value(spec, a).ok_or_else(|| bad("value out of range"))?;
            let b = parse_value(spec, b).ok_or_else(|| bad("value out of range"))?;
            if a > b {
                return Err(bad("a range must go upwards"));
            }
            (a, b)
        } else {
            let v = parse_value(spec, range).ok_or_else(|| bad("value out of range"))?;
            // `5/15` means from 5 to the end in steps of 15, as in Vixie cron.
            (v, if part.contains('/') { spec.max } else { v })
        };
        let mut v = lo;
        while v <= hi {
            mask |= 1 << v;
            v += step;
        }
    }
    Ok((mask, text == "*"))
}

impl std::str::FromStr for Cron {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, CronError> {
        let fields: Vec<&str> = s.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::FieldCount(fields.len()));
        }
        let spec = |name, min, max, names, names_from| FieldSpec {
            name,
            min,
            max,
            names,
            names_from,
        };
        let (minutes, _) = parse_field(&spec("minute", 0, 59, &[], 0), fields[0])?;
        let (hours, _) = parse_field(&spec("hour", 0, 23, &[], 0), fields[1])?;
        let (dom, dom_any) = parse_field(&spec("day-of-month", 1, 31, &[], 0), fields[2])?;
        let (months, _) = parse_field(&spec("month", 1, 12, &MONTHS, 1), fields[3])?;
        let (dow, dow_any) = parse_field(&spec("day-of-week", 0, 7, &DAYS, 0), fields[4])?;
        // 7 is Sunday too.
        let dow = (dow | (dow >> 7)) & 0x7f;
        Ok(Self {
            minutes,
            hours: hours as u32,
            days_of_month: dom as u32,
            months: months as u16,
            days_of_week: dow as u8,
            dom_any,
            dow_any,
        })
    }
}

impl Cron {
    /// Whether the expression fires on some minute of `date`.
    pub fn matches_day(&self, date: NaiveDate) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let dom = self.days_of_month & (1 << date.day()) != 0;
        let dow = self.days_of_week & (1 << date.weekday().num_days_from_sunday()) != 0;
        match (self.dom_any, self.dow_any) {
            (true, true) => true,
            (false, true) => dom,
            (true, false) => dow,
            (false, false) => dom || dow,
        }
    }

    /// Minutes after local midnight at which the expression fires on `date`, in order.
    pub fn minutes_of_day(&self, date: NaiveDate) -> impl Iterator<Item = u16> + '_ {
        let day = self.matches_day(date);
        (0u16..24)
            .filter(move |h| day && self.hours & (1 << h) != 0)
            .flat_map(move |h| {
                (0u16..60)
                    .filter(move |m| self.minutes & (1 << m) != 0)
                    .map(move |m| h * 60 + m)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn weekday_mornings() {
        let c: Cron = "0 8 * * mon-fri".parse().unwrap();
        assert_eq!(
            c.minutes_of_day(day("2025-03-03")).collect::<Vec<_>>(),
            [480]
        );
        assert_eq!(c.minutes_of_day(day("2025-03-08")).count(), 0, "Saturday");
    }

    #[test]
    fn steps_lists_and_sunday_as_seven() {
        let c: Cron = "15,45 */6 * * 7".parse().unwrap();
        let sunday: Vec<u16> = c.minutes_of_day(day("2025-03-09")).collect();
        assert_eq!(sunday, [15, 45, 375, 405, 735, 765, 1095, 1125]);
        let c: Cron = "5/20 0 * * *".parse().unwrap();
        assert_eq!(
            c.minutes_of_day(day("2025-03-09")).collect::<Vec<_>>(),
            [5, 25, 45]
        );
    }

    #[test]
    fn restricted_day_fields_match_either() {
        // The 1st of the month or any Monday.
        let c: Cron = "0 0 1 * mon".parse().unwrap();
        assert!(c.matches_day(day("2025-03-01")), "a Saturday, the 1st");
        assert!(c.matches_day(day("2025-03-03")), "a Monday");
        assert!(!c.matches_day(day("2025-03-04")));
        let c: Cron = "0 0 29 feb *".parse().unwrap();
        assert!(c.matches_day(day("2028-02-29")), "leap day");
        assert!(!c.matches_day(day("2028-03-01")));
    }

    #[test]
    fn bad_expressions_name_the_field() {
        for (expr, field) in [
            ("60 * * * *", "minute"),
            ("* 24 * * *", "hour"),
            ("* * 0 * *", "day-of-month"),
            ("* * * 13 *", "month"),
            ("* * * * 8", "day-of-week"),
            ("*/0 * * * *", "minute"),
            ("5-1 * * * *", "minute"),
        ] {
            match expr.parse::<Cron>() {
                Err(CronError::Field { field: f, .. }) => assert_eq!(f, field, "{expr}"),
                other => panic!("{expr}: {other:?}"),
            }
        }
        assert_eq!("* * *".parse::<Cron>(), Err(CronError::FieldCount(3)));
    }
}
