//! Keeps the state digest of `cluster status` up to date while someone reads it.
//!
//! A digest walks what changed since the previous one, so its cost is set by the gap between
//! two calls, not by the state: at a million pending workloads a scheduling cycle rewrites up
//! to 2,000 pending reasons, and a call after a few quiet seconds walked tens of thousands of
//! changed workloads (the persistent map's diff visits every leaf a change touched; measured:
//! docs/benchmarks/cluster-status.md). While a reader has asked within [`WARM_FOR`], this
//! loop moves the digest forward every [`WARM_EVERY`] on a blocking thread, so a call finds
//! at most that long of changes left to walk. A node nobody asks pays nothing, and the first
//! digest after a start (a walk of the whole state) is only ever made for a reader.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::digest::{DigestCache, DigestSource};
use super::state_machine::StateMachineData;

/// How often the digest is moved forward while it is read.
pub const WARM_EVERY: Duration = Duration::from_millis(250);

/// How long after a reader's last ask the digest is kept warm: dashboards and scripts poll
/// every few seconds; a single call should not cost a node a walk every 250 ms for long.
pub const WARM_FOR: Duration = Duration::from_secs(120);

/// Moves `cache` forward to the applied state every [`WARM_EVERY`] while it is read.
pub async fn warm_loop(data: Arc<RwLock<StateMachineData>>, cache: Arc<DigestCache>) {
    let mut tick = tokio::time::interval(WARM_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !cache.asked_within(WARM_FOR) {
            continue;
        }
        if !warm_once(&data, &cache).await {
            return;
        }
    }
}

/// One move forward; false when the state can no longer be read (poisoned lock).
async fn warm_once(data: &Arc<RwLock<StateMachineData>>, cache: &Arc<DigestCache>) -> bool {
    let source = match data.read() {
        Ok(d) => cache.source_unasked(&d),
        Err(_) => return false,
    };
    if matches!(source, DigestSource::Cached(_)) {
        return true;
    }
    let cache = cache.clone();
    match tokio::task::spawn_blocking(move || cache.resolve(source)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "warming the state digest"),
        Err(e) => tracing::warn!(error = %e, "warming the state digest"),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::digest::state_digest;
    use crate::raft::types::TypeConfig;

    #[tokio::test]
    async fn the_digest_follows_the_state_once_a_reader_asked() {
        let log_id = |i| openraft::testing::log_id::<TypeConfig>(1, 1, i);
        let data = Arc::new(RwLock::new(StateMachineData {
            last_applied: Some(log_id(1)),
            ..Default::default()
        }));
        let cache = Arc::new(DigestCache::default());
        let warmer = tokio::spawn(warm_loop(data.clone(), cache.clone()));
        let cached = |cache: &DigestCache| {
            let d = data.read().expect("state");
            match cache.source_unasked(&d) {
                DigestSource::Cached(digest) => Some(digest),
                DigestSource::Copy(..) => None,
            }
        };
        // Nobody asked: nothing is digested.
        tokio::time::sleep(WARM_EVERY * 3).await;
        assert_eq!(cached(&cache), None);
        // A reader asks at index 1; the state then moves to index 2.
        let first = {
            let d = data.read().expect("state");
            cache.resolve(cache.source(&d)).expect("digest")
        };
        assert!(cache.asked_within(WARM_FOR));
        {
            let mut d = data.write().expect("state");
            d.state_mut().next_seq += 1;
            d.last_applied = Some(log_id(2));
        }
        // Within a few rounds the cache holds index 2's digest: the next ask walks nothing.
        let mut warm = None;
        for _ in 0..20 {
            tokio::time::sleep(WARM_EVERY).await;
            warm = cached(&cache);
            if warm.is_some() {
                break;
            }
        }
        warmer.abort();
        let warm = warm.expect("the warmer did not move the digest to the applied index");
        assert_ne!(warm, first);
        let d = data.read().expect("state");
        assert_eq!(warm, state_digest(&d.state).expect("digest"));
    }
}
