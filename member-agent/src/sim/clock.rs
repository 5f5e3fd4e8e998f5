//! Where the simulated cluster's "now" comes from.
//!
//! `SimCluster` itself never reads a clock: every call that depends on time takes `now`. The
//! backend asks a [`Clock`] for it, so the same cluster runs in real time (`tideway dev`),
//! faster than real time (demos that show a day of tidal windows in minutes) or on time
//! advanced by hand (tests and the trace simulator, which jump from event to event).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClockError {
    #[error("speed-up factor must be finite and positive (got {0})")]
    InvalidFactor(f64),
}

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Virtual time that starts at `start` and runs `factor` times faster than its base clock
/// (the wall clock unless given another, which makes it testable).
#[derive(Debug, Clone)]
pub struct ScaledClock {
    base: Arc<dyn Clock>,
    base_start: DateTime<Utc>,
    start: DateTime<Utc>,
    factor: f64,
}

impl ScaledClock {
    /// Virtual `start` is now; from here on virtual time runs `factor` times as fast as real.
    pub fn new(start: DateTime<Utc>, factor: f64) -> Result<Self, ClockError> {
        Self::over(Arc::new(RealClock), start, factor)
    }

    /// Like [`ScaledClock::new`], scaling `base` instead of the wall clock.
    pub fn over(
        base: Arc<dyn Clock>,
        start: DateTime<Utc>,
        factor: f64,
    ) -> Result<Self, ClockError> {
        if !factor.is_finite() || factor <= 0.0 {
            return Err(ClockError::InvalidFactor(factor));
        }
        Ok(Self {
            base_start: base.now(),
            base,
            start,
            factor,
        })
    }

    pub fn factor(&self) -> f64 {
        self.factor
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = self.base.now() - self.base_start;
        // Microseconds cover ±292,000 years, far beyond any run; float precision loss is
        // sub-microsecond for runs of days.
        let micros = elapsed.num_microseconds().unwrap_or(i64::MAX) as f64 * self.factor;
        // `as` saturates, so a huge product cannot wrap.
        let scaled = TimeDelta::microseconds(micros as i64);
        self.start
            .checked_add_signed(scaled)
            .unwrap_or(if scaled < TimeDelta::zero() {
                DateTime::<Utc>::MIN_UTC
            } else {
                DateTime::<Utc>::MAX_UTC
            })
    }
}

/// Time that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    pub fn set(&self, now: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = now;
    }

    /// Moves time forward by `by`, saturating at the end of representable time; returns the
    /// new now.
    pub fn advance(&self, by: Duration) -> DateTime<Utc> {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now = TimeDelta::from_std(by)
            .ok()
            .and_then(|d| now.checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        *now
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        // A plain copy cannot leave the value half-written, so a poisoned lock is still valid.
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(t0());
        assert_eq!(c.now(), t0());
        assert_eq!(
            c.advance(Duration::from_secs(90)),
            t0() + TimeDelta::seconds(90)
        );
        assert_eq!(c.now(), t0() + TimeDelta::seconds(90));
        c.set(t0());
        assert_eq!(c.now(), t0());
        assert_eq!(c.advance(Duration::MAX), DateTime::<Utc>::MAX_UTC);
    }

    #[test]
    fn scaled_clock_runs_k_times_faster_than_its_base() {
        let base = Arc::new(ManualClock::new(t0()));
        let start = t0() + TimeDelta::days(10);
        let c = ScaledClock::over(base.clone(), start, 60.0).unwrap();
        assert_eq!(c.now(), start);
        base.advance(Duration::from_secs(60));
        assert_eq!(c.now(), start + TimeDelta::hours(1));
        base.advance(Duration::from_millis(500));
        assert_eq!(
            c.now(),
            start + TimeDelta::hours(1) + TimeDelta::seconds(30)
        );
    }

    #[test]
    fn scaled_clock_rejects_bad_factors() {
        for f in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(ScaledClock::new(t0(), f).is_err(), "{f}");
        }
        let real = ScaledClock::new(t0(), 1000.0).unwrap();
        assert!(real.now() >= t0());
    }

    #[test]
    fn real_clock_is_close_to_chrono() {
        let before = Utc::now();
        let now = RealClock.now();
        assert!(now >= before && now <= Utc::now());
    }
}
