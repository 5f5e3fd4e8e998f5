//! The one place Tideway reads the time.
//!
//! Everything that stamps a record or waits out a timeout asks an injected [`Clock`]: the
//! federation's handlers and leader loops, liveness, and both agent backends. Tests and the
//! simulator move time by hand ([`ManualClock`]); `tideway dev` runs its whole fleet, the
//! federation included, on one [`ScaledClock`], so every time on the wire is on the same
//! clock. A lint (`clippy.toml`, `disallowed-methods`) keeps `Utc::now`, `Instant::now` and
//! `SystemTime::now` inside this module.
#![allow(clippy::disallowed_methods)]

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};

/// Why a clock could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClockError {
    /// A `ScaledClock` factor that is zero, negative, NaN or infinite.
    #[error("speed-up factor must be finite and positive (got {0})")]
    InvalidFactor(f64),
}

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Calendar time: what records are stamped with and what crosses the wire.
    fn now(&self) -> DateTime<Utc>;
    /// Monotonic time, for timeouts and durations measured on this machine.
    fn instant(&self) -> Instant;
}

/// A clock shared by the parts of a process.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl RealClock {
    /// The wall clock, shareable.
    pub fn shared() -> SharedClock {
        Arc::new(RealClock)
    }
}

impl Clock for RealClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }
}

/// Virtual calendar time that starts at `start` and runs `factor` times faster than its base
/// clock (the wall clock unless given another, which makes it testable). Only calendar time is
/// scaled: [`Clock::instant`] is the base's, so protocol timers (heartbeats, request
/// timeouts) keep their real lengths.
#[derive(Debug, Clone)]
pub struct ScaledClock {
    base: SharedClock,
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
    pub fn over(base: SharedClock, start: DateTime<Utc>, factor: f64) -> Result<Self, ClockError> {
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

    /// How many virtual seconds pass per real second.
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

    fn instant(&self) -> Instant {
        self.base.instant()
    }
}

/// Time that moves only when told to; its monotonic time moves with it.
#[derive(Debug)]
pub struct ManualClock {
    start: DateTime<Utc>,
    origin: Instant,
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// Time stands at `start` until set or advanced.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            start,
            origin: Instant::now(),
            now: Mutex::new(start),
        }
    }

    /// Jumps to `now`, backwards too; monotonic time never goes back before the start.
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

    fn instant(&self) -> Instant {
        // Time set back before the start stays at the start: instants never go backwards
        // past it.
        let since = (self.now() - self.start).to_std().unwrap_or_default();
        self.origin.checked_add(since).unwrap_or(self.origin)
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
        let i0 = c.instant();
        assert_eq!(c.now(), t0());
        assert_eq!(
            c.advance(Duration::from_secs(90)),
            t0() + TimeDelta::seconds(90)
        );
        assert_eq!(c.now(), t0() + TimeDelta::seconds(90));
        assert_eq!(c.instant() - i0, Duration::from_secs(90));
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
        let i0 = c.instant();
        base.advance(Duration::from_secs(60));
        assert_eq!(c.now(), start + TimeDelta::hours(1));
        // Timers keep real lengths.
        assert_eq!(c.instant() - i0, Duration::from_secs(60));
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
