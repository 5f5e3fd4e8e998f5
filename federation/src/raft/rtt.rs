//! Round trips to each peer, measured from the leader's heartbeats, and the deadlines they
//! give the Raft RPCs.
//!
//! Why: openraft hands every heartbeat the heartbeat interval (50 ms) as its time to live.
//! On loopback a round trip is a twentieth of a millisecond, so that never bit; across
//! regions a round trip is 20-200 ms, every heartbeat ran out of time before its answer came,
//! its connection was dropped and opened again (two more round trips), and the followers,
//! hearing from the leader too rarely, deposed it (issue 53: term 8 before any load at a
//! 50 ms round trip). So each call's deadline follows what the network has shown, the way
//! TCP's retransmission timeout does (RFC 6298): a smoothed round trip and its variance,
//! `rto = srtt + 4·rttvar`, clamped to [`RTO_FLOOR`] and [`RTO_CEILING`], doubled after a
//! call that ran out of time so that a network that got slower is learned again rather than
//! timed out forever. openraft's own bound stays the least a call gets, so on loopback
//! nothing changes.
//!
//! Raft's election timeouts are fixed when the node starts, so they cannot follow the
//! network the same way. The table warns instead, once per peer per [`WARN_EVERY`], when the
//! measured round trip makes the configured timeouts unsafe (see [`Timing::unsafe_for`]),
//! naming the round trip and the flags to set.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tideway_api::clock::{Clock, RealClock};
use tideway_api::cluster::PeerRtt;

use super::types::NodeId;

/// The least deadline a measured round trip gives (openraft's own bound is kept if longer).
pub const RTO_FLOOR: Duration = Duration::from_millis(50);
/// The longest: a peer this slow is as good as gone, and a call to it must not hold its
/// client (heartbeats to that peer) for longer.
pub const RTO_CEILING: Duration = Duration::from_secs(5);
/// The deadline before any round trip was measured (RFC 6298's initial RTO).
pub const RTO_INITIAL: Duration = Duration::from_secs(1);
/// How often the unsafe-timeouts warning is repeated for one peer.
pub const WARN_EVERY: Duration = Duration::from_secs(600);
/// Round trips measured before the warning may fire: one slow first call (a connection being
/// opened, a follower still starting) is not the network.
const WARN_AFTER_SAMPLES: u64 = 20;

/// The smoothed round trip to one peer (RFC 6298, section 2).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Estimator {
    /// Smoothed round trip, seconds.
    srtt: f64,
    /// Its mean deviation, seconds.
    rttvar: f64,
    samples: u64,
    /// Consecutive calls that ran out of time since the last answer: each doubles the RTO.
    backoff: u32,
}

impl Estimator {
    /// A call answered after `rtt`.
    pub fn sample(&mut self, rtt: Duration) {
        let r = rtt.as_secs_f64();
        if self.samples == 0 {
            self.srtt = r;
            self.rttvar = r / 2.0;
        } else {
            self.rttvar = 0.75 * self.rttvar + 0.25 * (self.srtt - r).abs();
            self.srtt = 0.875 * self.srtt + 0.125 * r;
        }
        self.samples += 1;
        self.backoff = 0;
    }

    /// A call ran out of time: the next one waits twice as long (up to the ceiling).
    pub fn timed_out(&mut self) {
        self.backoff = (self.backoff + 1).min(8);
    }

    /// The smoothed round trip, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        (self.samples > 0).then(|| Duration::from_secs_f64(self.srtt))
    }

    /// How long a call may take: `srtt + 4·rttvar` (at least a millisecond more than the
    /// round trip), clamped, then doubled per call that ran out of time since the last answer.
    pub fn rto(&self) -> Duration {
        let base = if self.samples == 0 {
            RTO_INITIAL
        } else {
            let var = (4.0 * self.rttvar).max(0.001);
            Duration::from_secs_f64(self.srtt + var)
        };
        let base = base.clamp(RTO_FLOOR, RTO_CEILING);
        (base * 2u32.pow(self.backoff)).min(RTO_CEILING)
    }
}

/// Raft's timing as configured, to judge a measured round trip by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat: Duration,
    pub election_min: Duration,
    pub election_max: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(crate::node::DEFAULT_HEARTBEAT_MS),
            election_min: Duration::from_millis(crate::node::DEFAULT_ELECTION_TIMEOUT_MS.0),
            election_max: Duration::from_millis(crate::node::DEFAULT_ELECTION_TIMEOUT_MS.1),
        }
    }
}

impl Timing {
    /// What a round trip of `rtt` (whose heartbeats are given `deadline`) breaks with these
    /// settings, if anything:
    /// - openraft waits for a heartbeat's answer only for the heartbeat interval, and only
    ///   answered heartbeats confirm the leadership for linearizable reads (ReadIndex) and the
    ///   lease reads of member heartbeats; answers later than that never count;
    /// - a follower that stops hearing from a live leader campaigns once the leader's lease
    ///   (`election_max`) and a random election timeout (at least `election_min`) have passed;
    ///   etcd's guidance is an election timeout of at least ten round trips, so that a few slow
    ///   or lost heartbeats cannot depose a leader. Here that is `min + max >= 10·rtt`.
    pub fn unsafe_for(&self, rtt: Duration, deadline: Duration) -> Option<String> {
        let mut why = Vec::new();
        if deadline > self.heartbeat {
            why.push(format!(
                "heartbeat answers take up to {} ms, past the {} ms heartbeat interval that \
                 Raft waits for them, so reads and member heartbeats cannot confirm the \
                 leadership",
                deadline.as_millis(),
                self.heartbeat.as_millis()
            ));
        }
        if self.election_min + self.election_max < rtt * 10 {
            why.push(format!(
                "election timeouts of {}-{} ms are under ten round trips, so slow heartbeats \
                 can depose a live leader",
                self.election_min.as_millis(),
                self.election_max.as_millis()
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// `(heartbeat, election min, election max)` in ms that suit a round trip of `rtt`: a
    /// heartbeat of two round trips (rounded up to 50 ms), an election timeout of at least
    /// five round trips and three heartbeats (rounded up to 100 ms), its maximum twice that.
    pub fn suggested(rtt: Duration) -> (u64, u64, u64) {
        let rtt_ms = u64::try_from(rtt.as_millis()).unwrap_or(u64::MAX / 20);
        let hb = (rtt_ms * 2).div_ceil(50).max(1) * 50;
        let min = (rtt_ms * 5).max(hb * 3).div_ceil(100).max(2) * 100;
        (hb, min, min * 2)
    }
}

#[derive(Debug, Default)]
struct Peer {
    heartbeat: Estimator,
    warned: Option<Instant>,
}

/// Per peer: the measured round trip, the deadlines it gives, and the warning it may call
/// for. Shared by every Raft client of this node and by `cluster status`.
#[derive(Debug, Clone, Default)]
pub struct RttTable {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    timing: Timing,
    peers: BTreeMap<NodeId, Peer>,
}

impl RttTable {
    pub fn new(timing: Timing) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                timing,
                peers: BTreeMap::new(),
            })),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A heartbeat (an append without entries) to `peer` answered after `rtt`: the round trip
    /// the network and the peer's Raft take, without a log write.
    pub fn heartbeat_answered(&self, peer: NodeId, rtt: Duration) {
        let warn = self.with(|i| {
            let timing = i.timing;
            let p = i.peers.entry(peer).or_default();
            p.heartbeat.sample(rtt);
            let srtt = p.heartbeat.srtt()?;
            let due = p.warned.is_none_or(|w| w.elapsed() >= WARN_EVERY);
            if p.heartbeat.samples < WARN_AFTER_SAMPLES || !due {
                return None;
            }
            let why = timing.unsafe_for(srtt, p.heartbeat.rto())?;
            // Raft's timers run on the machine's monotonic clock, never a scaled one.
            p.warned = Some(RealClock.instant());
            Some((srtt, why))
        });
        if let Some((srtt, why)) = warn {
            let (hb, min, max) = Timing::suggested(srtt);
            tracing::warn!(
                peer,
                rtt_ms = srtt.as_millis() as u64,
                "the round trip to node {peer} is {} ms: {why}. Start every node with \
                 --network wan (round trips up to 150 ms), or --heartbeat-ms {hb} \
                 --election-timeout-min-ms {min} --election-timeout-max-ms {max}",
                srtt.as_millis(),
            );
        }
    }

    /// A call to `peer` ran out of time.
    pub fn timed_out(&self, peer: NodeId) {
        self.with(|i| i.peers.entry(peer).or_default().heartbeat.timed_out());
    }

    /// The deadline of a call to `peer` that openraft bounds by `openraft_ttl`: the longer
    /// of the two.
    pub fn deadline(&self, peer: NodeId, openraft_ttl: Duration) -> Duration {
        let rto = self.with(|i| {
            i.peers
                .get(&peer)
                .map_or(RTO_INITIAL, |p| p.heartbeat.rto())
        });
        rto.max(openraft_ttl)
    }

    /// What `cluster status` shows: each peer this node has measured (a leader: its
    /// followers), by id.
    pub fn report(&self) -> BTreeMap<u64, PeerRtt> {
        self.with(|i| {
            i.peers
                .iter()
                .filter_map(|(id, p)| {
                    let srtt = p.heartbeat.srtt()?;
                    Some((
                        *id,
                        PeerRtt {
                            rtt_ms: ms(srtt),
                            rttvar_ms: ms(Duration::from_secs_f64(p.heartbeat.rttvar)),
                            deadline_ms: ms(p.heartbeat.rto()),
                            samples: p.heartbeat.samples,
                        },
                    ))
                })
                .collect()
        })
    }
}

/// Milliseconds with a tenth's precision, as shown.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_rto_follows_the_round_trip_and_is_clamped() {
        let mut e = Estimator::default();
        assert_eq!(e.rto(), RTO_INITIAL);
        assert_eq!(e.srtt(), None);
        // Loopback: a fraction of a millisecond; the floor holds.
        for _ in 0..50 {
            e.sample(Duration::from_micros(80));
        }
        assert_eq!(e.rto(), RTO_FLOOR);
        // The network grows to 150 ms: the estimate follows within a few dozen samples.
        for _ in 0..60 {
            e.sample(150 * MS);
        }
        let srtt = e.srtt().expect("measured");
        assert!(srtt > 145 * MS && srtt <= 150 * MS, "{srtt:?}");
        let rto = e.rto();
        assert!(rto >= 150 * MS && rto < 200 * MS, "{rto:?}");
        // A steady round trip with spread: srtt + 4·rttvar covers the spread.
        let mut e = Estimator::default();
        for i in 0..200u64 {
            e.sample(Duration::from_millis(50 + (i % 3) * 10));
        }
        assert!(e.rto() >= 70 * MS, "{:?}", e.rto());
        // Far too slow: the ceiling.
        e.sample(Duration::from_secs(60));
        assert_eq!(e.rto(), RTO_CEILING);
    }

    #[test]
    fn a_timeout_doubles_the_rto_until_an_answer() {
        let mut e = Estimator::default();
        for _ in 0..30 {
            e.sample(Duration::from_micros(50));
        }
        assert_eq!(e.rto(), RTO_FLOOR);
        // The round trip grew past the deadline: every call times out, none is measured; the
        // backoff lets one through to be measured.
        e.timed_out();
        assert_eq!(e.rto(), RTO_FLOOR * 2);
        e.timed_out();
        e.timed_out();
        assert_eq!(e.rto(), RTO_FLOOR * 8);
        for _ in 0..20 {
            e.timed_out();
        }
        assert_eq!(e.rto(), RTO_CEILING);
        e.sample(150 * MS);
        assert!(
            e.rto() >= 150 * MS && e.rto() < RTO_CEILING,
            "{:?}",
            e.rto()
        );
    }

    #[test]
    fn default_timeouts_suit_loopback_only_and_the_suggestion_suits_its_round_trip() {
        let t = Timing::default();
        assert_eq!(t.unsafe_for(Duration::from_micros(50), RTO_FLOOR), None);
        // At 50 ms the elections are safe by etcd's rule, but heartbeat answers are late.
        let why = t.unsafe_for(50 * MS, 60 * MS).expect("late heartbeats");
        assert!(
            why.contains("heartbeat interval") && !why.contains("election"),
            "{why}"
        );
        let why = t.unsafe_for(150 * MS, 160 * MS).expect("unsafe");
        assert!(
            why.contains("heartbeat interval") && why.contains("200-400"),
            "{why}"
        );
        // What the warning suggests is itself safe there.
        for rtt_ms in [10, 50, 150, 200] {
            let rtt = rtt_ms * MS;
            let (hb, min, max) = Timing::suggested(rtt);
            let suggested = Timing {
                heartbeat: Duration::from_millis(hb),
                election_min: Duration::from_millis(min),
                election_max: Duration::from_millis(max),
            };
            assert_eq!(
                suggested.unsafe_for(rtt, rtt + 10 * MS),
                None,
                "{rtt_ms} ms"
            );
            assert!(min >= 3 * hb, "{rtt_ms} ms: {hb} {min}");
        }
        assert_eq!(Timing::suggested(150 * MS), (300, 900, 1800));
        assert_eq!(Timing::suggested(50 * MS), (100, 300, 600));
    }

    #[test]
    fn deadlines_keep_openraft_bound_as_a_floor_and_the_report_shows_measured_peers() {
        let table = RttTable::new(Timing::default());
        // Nothing measured: the initial RTO, or openraft's bound if longer.
        assert_eq!(table.deadline(2, 50 * MS), RTO_INITIAL);
        assert_eq!(table.deadline(2, 3 * RTO_INITIAL), 3 * RTO_INITIAL);
        for _ in 0..40 {
            table.heartbeat_answered(2, 50 * MS);
        }
        let d = table.deadline(2, 50 * MS);
        assert!(d >= 50 * MS && d < 100 * MS, "{d:?}");
        // On loopback openraft's heartbeat bound is what a call gets, as before.
        for _ in 0..40 {
            table.heartbeat_answered(3, Duration::from_micros(60));
        }
        assert_eq!(table.deadline(3, 50 * MS), 50 * MS);
        let report = table.report();
        assert_eq!(report.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(report[&2].rtt_ms, 50.0);
        assert_eq!(report[&2].samples, 40);
        assert_eq!(report[&3].rtt_ms, 0.1);
        // A peer only ever timed out is not shown (nothing measured), but its calls back off.
        table.timed_out(4);
        assert!(!table.report().contains_key(&4));
        assert_eq!(table.deadline(4, 50 * MS), 2 * RTO_INITIAL);
    }
}
