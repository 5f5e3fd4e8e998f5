//! Request limits of the public API: a token bucket per authenticated subject (429 with
//! `Retry-After` when it is empty), and a bound on how long one request may take, so a
//! slow client cannot hold a connection and a handler forever.
//!
//! The bucket is keyed by the subject, not the address: many users behind one proxy do not
//! share a budget, and one user cannot escape it by changing addresses. Anonymous requests
//! (a loopback-only server without authentication) are not limited: the only callers are
//! local. The peer plane and liveness are never limited. Buckets are refilled from the
//! injected clock's monotonic time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use tideway_api::auth::Principal;
use tideway_api::clock::SharedClock;

use super::error::ApiError;

/// More buckets than this and the full, idle ones are dropped (a full bucket is the same as
/// no bucket).
const MAX_BUCKETS: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by subject.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    clock: SharedClock,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// `per_second` requests sustained, `burst` at once; `None` when `per_second` is 0 (off).
    pub fn new(per_second: f64, burst: u32, clock: SharedClock) -> Option<Self> {
        (per_second > 0.0).then(|| Self {
            per_second,
            burst: f64::from(burst.max(1)),
            clock,
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// Takes one token of `subject`'s bucket; `Err` is the seconds until one is there.
    pub fn take(&self, subject: &str) -> Result<(), u64> {
        let now = self.clock.instant();
        let Ok(mut buckets) = self.buckets.lock() else {
            // A poisoned lock only means another request panicked while holding it; refusing
            // every request from then on would be worse than not limiting.
            return Ok(());
        };
        if buckets.len() > MAX_BUCKETS {
            let (rate, burst) = (self.per_second, self.burst);
            buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
        }
        let b = buckets.entry(subject.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.per_second).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - b.tokens) / self.per_second;
            Err(wait.ceil().max(1.0) as u64)
        }
    }
}

/// Paths outside the limits: liveness and the peer plane.
fn exempt(path: &str) -> bool {
    path == "/healthz" || path.starts_with("/raft/") || path.starts_with("/internal/")
}

/// The check: runs after authentication (it keys on the principal); the 429 answer when the
/// subject's bucket is empty (`None`: go on).
pub fn limit(limiter: Option<&RateLimiter>, req: &Request) -> Option<Response> {
    let (Some(limiter), Some(p)) = (limiter, req.extensions().get::<Principal>()) else {
        return None;
    };
    if exempt(req.uri().path()) {
        return None;
    }
    match limiter.take(&p.subject) {
        Ok(()) => None,
        Err(retry_after) => {
            tracing::warn!(
                subject = %p.subject,
                method = %req.method(),
                path = %req.uri().path(),
                "request denied: rate limited"
            );
            Some(
                ApiError::TooManyRequests {
                    subject: p.subject.clone(),
                    retry_after,
                }
                .into_response(),
            )
        }
    }
}

/// Whether a request is bounded by `bound`. A watch (`watch=true`) and an agent's long-poll
/// (`waitSeconds=`) are left to their own bounded waits (at most 60 s).
pub fn is_bounded(bound: Duration, req: &Request) -> bool {
    let watching = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv.starts_with("waitSeconds="))
    });
    !(exempt(req.uri().path()) || watching || bound.is_zero())
}

/// The answer of a request that took longer than `bound`, logged.
pub fn timed_out(method: &Method, path: &str, bound: Duration) -> Response {
    tracing::warn!(%method, %path, "request timed out after {} ms", bound.as_millis());
    ApiError::Timeout(u64::try_from(bound.as_millis()).unwrap_or(u64::MAX)).into_response()
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use tideway_api::clock::ManualClock;

    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_subject_gets_its_burst_then_waits_for_the_refill_and_others_are_not_affected() {
        let clock = Arc::new(ManualClock::new(
            Utc.timestamp_opt(1_800_000_000, 0).single().expect("time"),
        ));
        let l = RateLimiter::new(2.0, 3, clock.clone()).expect("on");
        for _ in 0..3 {
            assert_eq!(l.take("alice"), Ok(()));
        }
        assert_eq!(l.take("alice"), Err(1), "burst spent");
        assert_eq!(l.take("bob"), Ok(()), "buckets are per subject");
        clock.advance(Duration::from_millis(500));
        assert_eq!(
            l.take("alice"),
            Ok(()),
            "one token refilled in 0.5 s at 2/s"
        );
        assert!(l.take("alice").is_err());
        clock.advance(Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(l.take("alice"), Ok(()), "refilled up to the burst only");
        }
        assert!(l.take("alice").is_err());
        assert!(RateLimiter::new(0.0, 10, clock).is_none(), "0 turns it off");
    }
}
