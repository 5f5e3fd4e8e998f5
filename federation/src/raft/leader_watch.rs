//! A follower notices its leader's death when the leader's sockets close, not only when its
//! heartbeats stop.
//!
//! Raft alone replaces a dead leader `election_timeout_max + rand(min, max)` after its last
//! heartbeat (600-800 ms at the defaults): a voter grants no vote while the leader's lease,
//! `election_timeout_max` from the last append it processed, runs, and a follower's election
//! timer fires a random timeout after that. The lease is what keeps a live leader's reads
//! linearizable, so it stays; the random timeout after it only guards against mistaking a
//! slow leader for a dead one. A follower that knows the leader's process is gone can
//! campaign the moment the lease runs out.
//!
//! It learns that from a held request: each voter that follows keeps one `POST /raft/watch`
//! open on the leader, which the leader answers only when its leadership ends (or after
//! [`HOLD`], to be asked again). When the leader's process dies the kernel closes its
//! sockets, and the request fails at once. The follower then waits until the lease it holds
//! for that leader has run out (its last append plus `election_timeout_max`, plus a margin)
//! and starts a pre-vote round (`trigger().elect(true)`): it changes no term unless a quorum
//! would grant the vote, so a mistaken suspicion (a leader that is alive but unreachable for
//! the watch) cannot depose a leader that still reaches a quorum. Followers campaign one
//! after another, a [`WatchConfig::stagger`] apart in the order of their ids, so two of them
//! do not split the vote; the one whose log is behind is refused and the next one wins. Raft's
//! own timers stay the fallback for everything this does not see (a partition, a leader that
//! hangs without dying).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use openraft::async_runtime::watch::WatchReceiver;
use tideway_api::clock::{Clock, RealClock};

use super::network::PeerFilter;
use super::peer_plane::PeerPlane;
use super::peer_report::PeerReports;
use super::types::{NodeId, Raft};

/// The peer-plane route a follower holds open on its leader.
pub const WATCH_PATH: &str = "/raft/watch";

/// How long a leader holds a watch before answering it anyway (the follower asks again).
pub const HOLD: Duration = Duration::from_secs(20);

/// How often the watcher looks whether the leader or the term changed under a watch.
const POLL: Duration = Duration::from_millis(25);

/// When this node last processed an append from a leader: where the lease it holds for that
/// leader started.
#[derive(Debug)]
pub struct Contact {
    base: Instant,
    /// Microseconds after `base`, plus one (0: never).
    last: AtomicU64,
}

impl Default for Contact {
    fn default() -> Self {
        Self {
            // Raft's timers and leases run on the machine's monotonic clock, never a
            // scaled one, so this does too.
            base: RealClock.instant(),
            last: AtomicU64::new(0),
        }
    }
}

impl Contact {
    /// An append was processed just now.
    pub fn heard(&self) {
        let us = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX - 1);
        self.last.store(us + 1, Ordering::Relaxed);
    }

    /// When the last append was processed, if any was.
    pub fn last_heard(&self) -> Option<Instant> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            n => Some(self.base + Duration::from_micros(n - 1)),
        }
    }
}

/// Server side: answer when this node stops leading, or after [`HOLD`]. A node that does not
/// lead answers at once, so the follower looks up the leader again.
pub async fn hold(raft: &Raft) -> StatusCode {
    let now = super::metrics(raft);
    let me = now.id;
    let leads = |m: &openraft::RaftMetrics<super::types::TypeConfig>| m.current_leader == Some(me);
    if !leads(&now) {
        return StatusCode::CONFLICT;
    }
    // Times out (after HOLD) or sees the leadership end: either way the answer is the same.
    let _ = raft
        .wait(Some(HOLD))
        .metrics(|m| !leads(m), "leadership ended")
        .await;
    StatusCode::NO_CONTENT
}

/// How soon after a leader's death a follower campaigns.
#[derive(Debug, Clone, Copy)]
pub struct WatchConfig {
    /// The leader lease: Raft's `election_timeout_max`.
    pub lease: Duration,
    /// Added to the lease, for the other voters' leases, which started when they processed
    /// the same append, a little later or earlier than this node did.
    pub margin: Duration,
    /// Between one follower's campaign and the next's.
    pub stagger: Duration,
}

impl WatchConfig {
    pub fn for_lease(lease: Duration) -> Self {
        Self {
            lease,
            margin: Duration::from_millis(20),
            stagger: Duration::from_millis(100),
        }
    }

    /// When the follower at `rank` (among the voters left, by id) campaigns, the `attempt`th
    /// time, after a last append at `heard`, with `others` voters left besides it.
    pub fn campaign_at(&self, heard: Instant, rank: u32, others: u32, attempt: u32) -> Instant {
        let slot = rank + attempt * (others + 1);
        heard + self.lease + self.margin + self.stagger * slot
    }
}

/// Campaigns per suspected death: in the follower's own slot, then once more a round later
/// (a first pre-vote can be refused by a voter whose lease started a little later).
const ATTEMPTS: u32 = 2;

/// What a follower's watch needs.
pub struct Watcher {
    pub raft: Raft,
    pub http: reqwest::Client,
    pub plane: PeerPlane,
    pub filter: PeerFilter,
    pub contact: Arc<Contact>,
    pub cfg: WatchConfig,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Where a watch that cannot reach the leader is logged (a line per interval, see
    /// `peer_report`), shared with the Raft client's reports of the same peer.
    pub reports: PeerReports,
}

/// The follower's side: keeps a watch open on the leader, and campaigns when it breaks.
pub async fn watch_loop(w: Watcher) {
    let Watcher {
        raft,
        http,
        plane,
        filter,
        contact,
        cfg,
        metrics,
        reports,
    } = w;
    loop {
        let m = super::metrics(&raft);
        let (Some(leader), term, me) = (m.current_leader, m.current_term, m.id) else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        let membership = m.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let peer = membership.get_node(&leader).map(|n| n.peer().to_string());
        // Only a voter that follows watches, and not a leader a test partitioned away.
        let watches = leader != me && voters.contains(&me) && !filter.is_blocked(leader);
        let (Some(peer), true) = (peer, watches) else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let url = plane.url(&peer, WATCH_PATH);
        let request = plane
            .authorize(http.post(&url))
            .timeout(HOLD + Duration::from_secs(5))
            .send();
        let answer = tokio::select! {
            r = request => Some(r),
            () = until_changed(&raft, leader, term) => None,
        };
        match &answer {
            Some(Ok(_)) => reports.answered(leader, &peer),
            Some(Err(e)) if !e.is_timeout() => reports.failed(leader, &peer, "watch", e),
            _ => {}
        }
        match answer {
            None => continue,
            Some(Ok(resp)) if resp.status().is_success() => continue,
            // Not leading any more (the metrics will say so soon), an older node without
            // the route, or a refused secret: do not ask again at once.
            Some(Ok(_)) => tokio::time::sleep(Duration::from_secs(1)).await,
            Some(Err(e)) if e.is_timeout() => continue,
            Some(Err(_)) => {
                // The error itself went to `reports`, logged once per interval.
                tracing::info!(
                    leader,
                    term,
                    "leader's watch broke; campaigning when its lease runs out"
                );
                let others: Vec<NodeId> = voters.into_iter().filter(|v| *v != leader).collect();
                let rank = others.iter().filter(|v| **v < me).count() as u32;
                let others = others.len().saturating_sub(1) as u32;
                campaign(
                    &raft,
                    &contact,
                    &cfg,
                    &metrics,
                    (leader, term),
                    (rank, others),
                )
                .await;
            }
        }
    }
}

/// Campaigns in this follower's slots, as long as nothing was heard from a leader and the
/// leader and term are still those of the broken watch.
async fn campaign(
    raft: &Raft,
    contact: &Contact,
    cfg: &WatchConfig,
    metrics: &crate::metrics::Metrics,
    (leader, term): (NodeId, u64),
    (rank, others): (u32, u32),
) {
    let last = contact.last_heard();
    let heard = last.unwrap_or_else(|| RealClock.instant());
    for attempt in 0..ATTEMPTS {
        let at = cfg.campaign_at(heard, rank, others, attempt);
        tokio::select! {
            () = tokio::time::sleep_until(at.into()) => {}
            () = until_changed(raft, leader, term) => return,
        }
        // An append since (a leader is alive), or a change since the last poll.
        if contact.last_heard() != last || !still(&raft.metrics().borrow_watched(), leader, term) {
            return;
        }
        tracing::info!(
            leader,
            term,
            attempt,
            "leader gone: pre-vote at its lease's end"
        );
        metrics.leader_gone_campaign();
        if raft.trigger().elect(true).await.is_err() {
            return;
        }
    }
    // Raft's own timers take over from here; wait for the outcome rather than watch a dead
    // leader again at once.
    until_changed(raft, leader, term).await;
}

/// Returns once the leader or the term differs from `leader` and `term`.
async fn until_changed(raft: &Raft, leader: NodeId, term: u64) {
    let rx = raft.metrics();
    loop {
        tokio::time::sleep(POLL).await;
        if !still(&rx.borrow_watched(), leader, term) {
            return;
        }
    }
}

/// The metrics still name `leader` at `term`.
fn still(m: &openraft::RaftMetrics<super::types::TypeConfig>, leader: NodeId, term: u64) -> bool {
    m.current_leader == Some(leader) && m.current_term == term
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followers_campaign_one_after_another_after_the_lease() {
        let cfg = WatchConfig::for_lease(Duration::from_millis(400));
        let t = RealClock.instant();
        let ms = |at: Instant| at.duration_since(t).as_millis();
        // Two followers left of three voters: ranks 0 and 1, one other each.
        assert_eq!(ms(cfg.campaign_at(t, 0, 1, 0)), 420);
        assert_eq!(ms(cfg.campaign_at(t, 1, 1, 0)), 520);
        assert_eq!(ms(cfg.campaign_at(t, 0, 1, 1)), 620);
        assert_eq!(ms(cfg.campaign_at(t, 1, 1, 1)), 720);
        // Never before the lease has run out.
        for rank in 0..4 {
            assert!(cfg.campaign_at(t, rank, 3, 0) > t + cfg.lease);
        }
    }

    #[test]
    fn contact_remembers_the_last_append() {
        let c = Contact::default();
        assert_eq!(c.last_heard(), None);
        c.heard();
        let first = c.last_heard().expect("heard");
        std::thread::sleep(Duration::from_millis(2));
        c.heard();
        assert!(c.last_heard().expect("heard") > first);
    }
}
