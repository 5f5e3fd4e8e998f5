//! The virtual clock's units: whole seconds since the Unix epoch, as `i64`.
//!
//! Traces give times as wall-clock strings without a zone (Philly) or as offsets from an
//! unnamed trace start (Alibaba). Integers keep the event queue cheap to order and compare,
//! and make every run exact: no float drift between the simulator and the reference FIFO
//! computation the tests compare it with. `DateTime<Utc>` appears only at the boundary with
//! the scheduler core and the sim cluster, which take chrono times.

use chrono::{DateTime, NaiveDate, Utc};

/// Seconds since 1970-01-01T00:00:00Z on the virtual clock.
pub type Secs = i64;

/// The virtual time as chrono sees it; out-of-range values clamp to chrono's limits rather
/// than panic (they can only come from absurd input that validation let through).
pub fn to_utc(t: Secs) -> DateTime<Utc> {
    DateTime::from_timestamp(t, 0).unwrap_or(if t < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    })
}

/// RFC 3339 with a `Z`, for summaries and CSV.
pub fn iso(t: Secs) -> String {
    to_utc(t).format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS`, `YYYY-MM-DDTHH:MM:SS` (UTC, optional `Z`) or
/// a full RFC 3339 time with an offset. Trace timestamps without a zone are taken as UTC:
/// only differences matter to a replay, and UTC has no DST gaps to trip over.
pub fn parse_time(s: &str) -> Result<Secs, String> {
    let s = s.trim();
    if let Some(t) = parse_fixed(s) {
        return Ok(t);
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp())
        .map_err(|_| {
            format!("{s:?} is not a time (want YYYY-MM-DD, YYYY-MM-DD HH:MM:SS or RFC 3339)")
        })
}

/// The fixed-width forms, parsed by hand: the Philly trace has 82,247 of them, and this
/// path is an order of magnitude faster than a format-string parser.
fn parse_fixed(s: &str) -> Option<Secs> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(r)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(part.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')))
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(num(0..4)? as i32, num(5..7)?, num(8..10)?)?;
    let (h, m, sec) = if b.len() == 10 {
        (0, 0, 0)
    } else {
        let zulu = b.len() == 20 && b[19] == b'Z';
        if !(b.len() == 19 || zulu)
            || !matches!(b[10], b' ' | b'T')
            || b[13] != b':'
            || b[16] != b':'
        {
            return None;
        }
        (num(11..13)?, num(14..16)?, num(17..19)?)
    };
    let t = date.and_hms_opt(h, m, sec)?;
    Some(t.and_utc().timestamp())
}

/// Human durations for plot axes and the CLI summary: `45s`, `12m`, `3.5h`, `2.1d`.
pub fn short_duration(secs: f64) -> String {
    let s = secs.abs();
    if s < 60.0 {
        format!("{secs:.0}s")
    } else if s < 3600.0 {
        format!("{:.0}m", secs / 60.0)
    } else if s < 86_400.0 {
        let h = secs / 3600.0;
        if h.fract().abs() < 0.05 {
            format!("{h:.0}h")
        } else {
            format!("{h:.1}h")
        }
    } else {
        let d = secs / 86_400.0;
        if d.fract().abs() < 0.05 {
            format!("{d:.0}d")
        } else {
            format!("{d:.1}d")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_traces_and_flags_use() {
        let day = parse_time("2017-10-09").unwrap();
        assert_eq!(iso(day), "2017-10-09T00:00:00Z");
        let t = parse_time("2017-10-09 06:13:03").unwrap();
        assert_eq!(t - day, 6 * 3600 + 13 * 60 + 3);
        assert_eq!(parse_time("2017-10-09T06:13:03").unwrap(), t);
        assert_eq!(parse_time("2017-10-09T06:13:03Z").unwrap(), t);
        assert_eq!(parse_time("2017-10-09T08:13:03+02:00").unwrap(), t);
        for bad in [
            "",
            "2017-13-01",
            "2017-02-30",
            "2017-10-09 25:00:00",
            "2017-10-09 06:13",
            "yesterday",
            "2017-1-9",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(short_duration(30.0), "30s");
        assert_eq!(short_duration(600.0), "10m");
        assert_eq!(short_duration(3600.0), "1h");
        assert_eq!(short_duration(5400.0), "1.5h");
        assert_eq!(short_duration(86_400.0 * 3.0), "3d");
    }
}
