//! Digest deltas: heartbeats that carry only what changed since the digest the federation
//! acknowledged.
//!
//! A 5,000-node member's digest is a few KiB, sent every 2 s by every member, although
//! between two heartbeats usually one gang starts or ends and a handful of racks change. So
//! the federation's heartbeat answer names the version of the digest it holds for the member
//! ([`DigestVersion`], a hash of its content), and the agent then sends only the pools and
//! domains that differ from that version, naming it as the base. An unchanged heartbeat sends
//! no pool at all, only the base and the time the member took its numbers (which keeps the
//! federation's staleness rules working).
//!
//! The federation applies a delta only to the exact digest it names (same version), and
//! checks that the result has the version the agent computed for its full digest: base plus
//! delta equals the agent's full digest, or nothing is applied. Any doubt (a new leader, a
//! restart, a lost answer) ends in one full digest, never in a mix.

use std::collections::VecDeque;
use std::hash::Hasher;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::agent::{Heartbeat, HeartbeatAck};
use crate::digest::{CapacityDigest, DomainDigest, GpuCounts, PoolDigest, domain_wire};

/// A digest's version: a 64-bit FNV-1a hash, in hex, of the member's name and its pools as
/// JSON (not of `generatedAt`, so a digest that is merely re-taken keeps its version).
///
/// It is a change detector between an agent and the federation that already trust each
/// other, not a security measure: two different digests of one member sharing a version by
/// chance is a 1 in 2^64 event per comparison.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct DigestVersion(pub String);

impl std::fmt::Display for DigestVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// FNV-1a, 64 bits: stable across processes, builds and platforms, unlike `DefaultHasher`.
struct Fnv64(u64);

impl Hasher for Fnv64 {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl std::io::Write for Fnv64 {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Hasher::write(self, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapacityDigest {
    /// This digest's [`DigestVersion`].
    pub fn version(&self) -> DigestVersion {
        let mut h = Fnv64(0xcbf2_9ce4_8422_2325);
        Hasher::write(&mut h, self.cluster.as_bytes());
        Hasher::write(&mut h, &[0]);
        // Writing into a hasher cannot fail, and these types always serialize; were it ever
        // to fail, the version would only differ from the agent's, which costs a full digest.
        let _ = serde_json::to_writer(&mut h, &self.pools);
        DigestVersion(format!("{:016x}", h.finish()))
    }
}

/// A digest together with its version, computed once.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionedDigest {
    /// The digest.
    pub digest: CapacityDigest,
    /// Its version.
    pub version: DigestVersion,
}

impl VersionedDigest {
    /// Versions `digest`.
    pub fn new(digest: CapacityDigest) -> Self {
        let version = digest.version();
        Self { digest, version }
    }
}

/// What changed in a member's digest since the version the federation acknowledged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DigestDelta {
    /// The version this delta applies to: the one the federation's last answer named.
    pub base: DigestVersion,
    /// When the member took these numbers (wall clock), as in a full digest.
    pub generated_at: DateTime<Utc>,
    /// The version of the full digest after the delta; absent when no pool changed (then it
    /// is `base`). The federation checks it before keeping the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<DigestVersion>,
    /// The pools that changed, each with only its changed domains; empty when nothing did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolPatch>,
}

/// One changed pool of a [`DigestDelta`]: its new counts and its changed domains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolPatch {
    /// The pool's name, as in the base.
    pub pool: String,
    /// Its flavor, as in the base.
    pub flavor: String,
    /// Its counts now, over the whole pool.
    pub counts: GpuCounts,
    /// The domains whose counts changed, in the grouped wire form of a full digest; each
    /// replaces the base's domain of the same level, name and zone.
    #[serde(default, with = "domain_wire", skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<DomainDigest>,
}

/// Why a delta was not applied. Nothing of it was: the federation keeps the digest it had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The federation does not hold the base (it restarted, a new leader took over, or it
    /// holds a newer digest): the agent sends a full digest.
    #[error("base {named} is not the digest held for this member ({})", held.as_ref().map_or("none".to_string(), ToString::to_string))]
    BaseUnknown {
        /// The base the delta named.
        named: DigestVersion,
        /// What the federation holds, if anything.
        held: Option<DigestVersion>,
    },
    /// The delta names a pool or domain its base does not have.
    #[error("{what} is not in the base digest")]
    NotInBase {
        /// The pool or domain, as `pool/flavor` or `pool/flavor/level/name`.
        what: String,
        /// The field of the delta that names it, e.g. `digestDelta.pools[0]`.
        field: String,
    },
    /// Base plus delta did not give the version the agent computed.
    #[error("base plus delta has version {got}, the delta says {want}")]
    VersionMismatch {
        /// The delta's `version` (or its base).
        want: DigestVersion,
        /// The version of base plus delta.
        got: DigestVersion,
    },
}

impl DeltaError {
    /// The delta's field the error is about, for problem+json.
    pub fn field(&self) -> &str {
        match self {
            DeltaError::BaseUnknown { .. } => "digestDelta.base",
            DeltaError::NotInBase { field, .. } => field,
            DeltaError::VersionMismatch { .. } => "digestDelta.version",
        }
    }
}

fn same_domain(a: &DomainDigest, b: &DomainDigest) -> bool {
    a.level == b.level && a.name == b.name && a.zone == b.zone
}

fn same_layout(a: &PoolDigest, b: &PoolDigest) -> bool {
    a.pool == b.pool
        && a.flavor == b.flavor
        && a.kind == b.kind
        && a.domains.len() == b.domains.len()
        && a.domains
            .iter()
            .zip(&b.domains)
            .all(|(x, y)| same_domain(x, y))
}

impl DigestDelta {
    /// What changed from `base` to `next`, or None when the layout changed (a pool or
    /// domain added, removed, renamed or reordered: rare, and then a full digest is simpler
    /// and no bigger).
    pub fn between(base: &VersionedDigest, next: &VersionedDigest) -> Option<DigestDelta> {
        let (b, n) = (&base.digest, &next.digest);
        if b.cluster != n.cluster || b.pools.len() != n.pools.len() {
            return None;
        }
        let mut pools = Vec::new();
        for (bp, np) in b.pools.iter().zip(&n.pools) {
            if !same_layout(bp, np) {
                return None;
            }
            if bp == np {
                continue;
            }
            pools.push(PoolPatch {
                pool: np.pool.clone(),
                flavor: np.flavor.clone(),
                counts: np.counts.clone(),
                domains: bp
                    .domains
                    .iter()
                    .zip(&np.domains)
                    .filter(|(x, y)| x.counts != y.counts)
                    .map(|(_, y)| y.clone())
                    .collect(),
            });
        }
        Some(DigestDelta {
            base: base.version.clone(),
            generated_at: n.generated_at,
            version: (!pools.is_empty()).then(|| next.version.clone()),
            pools,
        })
    }

    /// The full digest this delta makes of `held`, if `held` is its base. Pure: `held` is
    /// never changed, so a refused delta leaves nothing half-applied.
    pub fn apply_to(&self, held: &VersionedDigest) -> Result<VersionedDigest, DeltaError> {
        if held.version != self.base {
            return Err(DeltaError::BaseUnknown {
                named: self.base.clone(),
                held: Some(held.version.clone()),
            });
        }
        let mut digest = held.digest.clone();
        digest.generated_at = self.generated_at;
        if self.pools.is_empty() {
            return Ok(VersionedDigest {
                digest,
                version: held.version.clone(),
            });
        }
        for (i, patch) in self.pools.iter().enumerate() {
            let Some(pool) = digest
                .pools
                .iter_mut()
                .find(|p| p.pool == patch.pool && p.flavor == patch.flavor)
            else {
                return Err(DeltaError::NotInBase {
                    what: format!("pool {}/{}", patch.pool, patch.flavor),
                    field: format!("digestDelta.pools[{i}]"),
                });
            };
            pool.counts = patch.counts.clone();
            for d in &patch.domains {
                let Some(slot) = pool.domains.iter_mut().find(|x| same_domain(x, d)) else {
                    return Err(DeltaError::NotInBase {
                        what: format!(
                            "domain {}/{}/{:?}/{}",
                            patch.pool, patch.flavor, d.level, d.name
                        ),
                        field: format!("digestDelta.pools[{i}].domains"),
                    });
                };
                slot.counts = d.counts.clone();
            }
        }
        let want = self.version.clone().unwrap_or_else(|| self.base.clone());
        let next = VersionedDigest::new(digest);
        if next.version != want {
            return Err(DeltaError::VersionMismatch {
                want,
                got: next.version,
            });
        }
        Ok(next)
    }
}

/// The federation's side: what a heartbeat makes of the digest `held` for its member. `Ok(None)`
/// when the heartbeat carries no digest (liveness only: the held one stays), a full digest
/// when it carries one or a delta that applies, and an error, with nothing applied, when its
/// delta does not apply to `held`.
pub fn receive(
    held: Option<&VersionedDigest>,
    hb: &Heartbeat,
) -> Result<Option<VersionedDigest>, DeltaError> {
    if let Some(d) = &hb.digest {
        return Ok(Some(VersionedDigest::new(d.clone())));
    }
    let Some(delta) = &hb.digest_delta else {
        return Ok(None);
    };
    match held {
        Some(h) => delta.apply_to(h).map(Some),
        None => Err(DeltaError::BaseUnknown {
            named: delta.base.clone(),
            held: None,
        }),
    }
}

/// How many digests an agent remembers having sent: enough to cover an answer lost on the
/// way back and a new leader that holds a slightly older replicated digest.
const REMEMBERED: usize = 8;

/// The agent's side of digest deltas: which digests it sent, which one the federation says it
/// holds, and so what the next heartbeat carries.
///
/// Starts (and falls back to) full digests, the form every federation reads; switches to
/// deltas only once a federation's answer names a version, and only against a digest this
/// agent sent and remembers.
#[derive(Debug, Default)]
pub struct DeltaSender {
    /// Recently sent digests, oldest first.
    sent: VecDeque<VersionedDigest>,
    /// The version the federation last said it holds, when it is one of `sent`.
    acked: Option<DigestVersion>,
}

impl DeltaSender {
    /// A sender that has sent nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The heartbeat for `digest`, the member's capacity now: a delta against the
    /// acknowledged digest when there is one and the layout is the same, else the full
    /// digest.
    pub fn heartbeat(&mut self, digest: CapacityDigest) -> Heartbeat {
        let next = VersionedDigest::new(digest);
        let base = self
            .acked
            .as_ref()
            .and_then(|v| self.sent.iter().find(|s| &s.version == v));
        let delta = base.and_then(|b| DigestDelta::between(b, &next));
        let hb = match delta {
            Some(d) => Heartbeat::delta(d),
            None => Heartbeat::full(next.digest.clone()),
        };
        // The newest copy of a version goes last, so the one acknowledged is forgotten last.
        self.sent.retain(|s| s.version != next.version);
        if self.sent.len() == REMEMBERED {
            self.sent.pop_front();
        }
        self.sent.push_back(next);
        hb
    }

    /// Takes in the federation's answer. Returns true when the federation asks for a full
    /// digest now (it does not hold the base the heartbeat named).
    pub fn acknowledged(&mut self, ack: &HeartbeatAck) -> bool {
        self.acked = ack
            .digest_version
            .clone()
            .filter(|v| self.sent.iter().any(|s| &s.version == v));
        if ack.digest_base_unknown {
            self.acked = None;
        }
        ack.digest_base_unknown
    }

    /// A heartbeat failed: what the federation holds is unknown (and the next node may be an
    /// older one that reads only full digests), so the next heartbeat is a full digest.
    pub fn failed(&mut self) {
        self.acked = None;
    }

    /// The version the next heartbeat will be a delta against, if any.
    pub fn acked(&self) -> Option<&DigestVersion> {
        self.acked.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member_cluster::PoolKind;
    use crate::names::ClusterName;
    use crate::workload::TopologyLevel;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0)
            .single()
            .unwrap_or_default()
    }

    fn counts(free: u32) -> GpuCounts {
        let mut hist = vec![0u32; 9];
        hist[free.min(8) as usize] = 1;
        GpuCounts {
            total: 8,
            allocated: 8 - free.min(8),
            unhealthy: 0,
            cordoned: 0,
            free_histogram: hist,
        }
    }

    /// Two pools, each a zone and `racks` racks whose free GPUs are `free[i]`.
    fn digest(free: &[u32], t: i64) -> CapacityDigest {
        let pool = |name: &str, free: &[u32]| {
            let mut all = GpuCounts::default();
            let mut domains = Vec::new();
            for (i, f) in free.iter().enumerate() {
                let c = counts(*f);
                all.add(&c);
                domains.push(DomainDigest {
                    level: TopologyLevel::Rack,
                    name: format!("r{i}"),
                    zone: Some("z0".into()),
                    counts: c,
                });
            }
            domains.insert(
                0,
                DomainDigest {
                    level: TopologyLevel::Zone,
                    name: "z0".into(),
                    zone: None,
                    counts: all.clone(),
                },
            );
            PoolDigest {
                pool: name.into(),
                kind: PoolKind::Training,
                flavor: "H100".into(),
                counts: all,
                domains,
            }
        };
        let half = free.len() / 2;
        CapacityDigest {
            cluster: "m1".into(),
            generated_at: at(t),
            pools: vec![pool("train", &free[..half]), pool("serve", &free[half..])],
        }
    }

    fn ack(version: Option<&VersionedDigest>, base_unknown: bool) -> HeartbeatAck {
        HeartbeatAck {
            member: ClusterName::from("m1".to_string()),
            digest_replicated: false,
            lease_ms: Some(6000),
            digest_version: version.map(|v| v.version.clone()),
            digest_base_unknown: base_unknown,
        }
    }

    #[test]
    fn the_version_ignores_when_the_digest_was_taken() {
        let a = digest(&[1, 2, 3, 4], 0);
        let b = digest(&[1, 2, 3, 4], 9);
        let c = digest(&[1, 2, 3, 5], 0);
        assert_eq!(a.version(), b.version());
        assert_ne!(a.version(), c.version());
        assert_eq!(a.version().0.len(), 16);
    }

    #[test]
    fn a_delta_carries_only_the_changed_pool_and_domains_and_rebuilds_the_digest() {
        let base = VersionedDigest::new(digest(&[1, 2, 3, 4, 5, 6], 0));
        let next = VersionedDigest::new(digest(&[1, 2, 3, 4, 0, 6], 2));
        let delta = DigestDelta::between(&base, &next).unwrap();
        assert_eq!(delta.pools.len(), 1, "only the serving pool changed");
        let names: Vec<_> = delta.pools[0].domains.iter().map(|d| &d.name).collect();
        assert_eq!(
            names,
            ["z0", "r1"],
            "the zone and the one rack that changed"
        );
        let rebuilt = delta.apply_to(&base).unwrap();
        assert_eq!(rebuilt, next);
        // Through JSON, as on the wire.
        let json = serde_json::to_string(&Heartbeat::delta(delta)).unwrap();
        let hb: Heartbeat = serde_json::from_str(&json).unwrap();
        assert_eq!(receive(Some(&base), &hb).unwrap(), Some(next), "{json}");
    }

    #[test]
    fn an_unchanged_digest_sends_no_pool_but_refreshes_its_time() {
        let base = VersionedDigest::new(digest(&[1, 2, 3, 4], 0));
        let next = VersionedDigest::new(digest(&[1, 2, 3, 4], 4));
        let delta = DigestDelta::between(&base, &next).unwrap();
        assert!(delta.pools.is_empty() && delta.version.is_none());
        let json = serde_json::to_string(&delta).unwrap();
        assert!(!json.contains("pools"), "{json}");
        assert_eq!(delta.apply_to(&base).unwrap().digest.generated_at, at(4));
    }

    #[test]
    fn a_layout_change_needs_a_full_digest() {
        let base = VersionedDigest::new(digest(&[1, 2, 3, 4], 0));
        let more_racks = VersionedDigest::new(digest(&[1, 2, 3, 4, 5, 6], 1));
        assert!(DigestDelta::between(&base, &more_racks).is_none());
    }

    #[test]
    fn a_delta_is_never_applied_to_another_base() {
        let base = VersionedDigest::new(digest(&[1, 2, 3, 4], 0));
        let other = VersionedDigest::new(digest(&[4, 3, 2, 1], 0));
        let next = VersionedDigest::new(digest(&[1, 2, 3, 0], 1));
        let delta = DigestDelta::between(&base, &next).unwrap();
        let err = delta.apply_to(&other).unwrap_err();
        assert!(matches!(err, DeltaError::BaseUnknown { .. }), "{err}");
        assert_eq!(err.field(), "digestDelta.base");
        let hb = Heartbeat::delta(delta.clone());
        assert!(matches!(
            receive(None, &hb),
            Err(DeltaError::BaseUnknown { held: None, .. })
        ));
        // A delta whose result is not what the agent announced is refused whole.
        let mut lying = delta.clone();
        lying.pools[0].counts.total += 1;
        assert!(matches!(
            lying.apply_to(&base),
            Err(DeltaError::VersionMismatch { .. })
        ));
        let mut unknown = delta;
        unknown.pools[0].domains[0].name = "nowhere".into();
        let err = unknown.apply_to(&base).unwrap_err();
        assert_eq!(err.field(), "digestDelta.pools[0].domains", "{err}");
    }

    #[test]
    fn an_old_federation_gets_full_digests_for_ever() {
        let mut s = DeltaSender::new();
        for t in 0..3 {
            let hb = s.heartbeat(digest(&[1, 2, 3, t as u32], t));
            assert!(hb.digest.is_some() && hb.digest_delta.is_none());
            let json = serde_json::to_value(&hb).unwrap();
            assert_eq!(
                json.as_object().map(|o| o.len()),
                Some(1),
                "only `digest`, the form an old federation reads: {json}"
            );
            // An old federation's answer has no version.
            let old: HeartbeatAck =
                serde_json::from_str(r#"{"member":"m1","digestReplicated":true}"#).unwrap();
            assert!(!s.acknowledged(&old));
        }
    }

    #[test]
    fn an_old_agent_heartbeat_still_reads() {
        let d = digest(&[1, 2], 0);
        let json = format!(r#"{{"digest":{}}}"#, serde_json::to_string(&d).unwrap());
        let hb: Heartbeat = serde_json::from_str(&json).unwrap();
        assert_eq!(receive(None, &hb).unwrap().map(|v| v.digest), Some(d));
    }

    #[test]
    fn the_sender_switches_to_deltas_and_back_on_doubt() {
        let mut s = DeltaSender::new();
        let first = VersionedDigest::new(digest(&[1, 2, 3, 4], 0));
        assert!(s.heartbeat(first.digest.clone()).digest.is_some());
        s.acknowledged(&ack(Some(&first), false));
        let hb = s.heartbeat(digest(&[1, 2, 3, 0], 1));
        assert_eq!(
            hb.digest_delta.as_ref().map(|d| &d.base),
            Some(&first.version)
        );
        // The answer was lost: the next heartbeat is full.
        s.failed();
        assert!(s.heartbeat(digest(&[1, 2, 3, 0], 2)).digest.is_some());
        // A federation that holds something the agent never sent gets a full digest too.
        let stranger = VersionedDigest::new(digest(&[8, 8, 8, 8], 0));
        s.acknowledged(&ack(Some(&stranger), false));
        assert!(s.heartbeat(digest(&[1, 2, 3, 0], 3)).digest.is_some());
        // And so does one that says it lacks the base.
        s.acknowledged(&ack(Some(&first), false));
        assert!(s.heartbeat(digest(&[1, 2, 3, 1], 4)).digest_delta.is_some());
        assert!(s.acknowledged(&ack(None, true)));
        assert!(s.heartbeat(digest(&[1, 2, 3, 1], 5)).digest.is_some());
    }

    /// One heartbeat round in the property test.
    #[derive(Debug, Clone)]
    struct Round {
        /// Rack to change and its new free GPUs; None: capacity unchanged.
        change: Option<(usize, u32)>,
        /// Whether the member's layout changes (a rack added or removed).
        relayout: bool,
        request_lost: bool,
        answer_lost: bool,
        /// Whether the leader replicates what it holds (coalescing lets most go by).
        replicate: bool,
        /// Whether a new leader takes over after this round, holding only what was replicated.
        new_leader: bool,
    }

    fn rounds() -> impl Strategy<Value = Vec<Round>> {
        proptest::collection::vec(
            (
                proptest::option::of((0usize..16, 0u32..9)),
                proptest::bool::weighted(0.05),
                proptest::bool::weighted(0.15),
                proptest::bool::weighted(0.15),
                proptest::bool::weighted(0.3),
                proptest::bool::weighted(0.1),
            )
                .prop_map(
                    |(change, relayout, request_lost, answer_lost, replicate, new_leader)| Round {
                        change,
                        relayout,
                        request_lost,
                        answer_lost,
                        replicate,
                        new_leader,
                    },
                ),
            1..60,
        )
    }

    /// The federation's side, as the leader keeps it: what it holds in memory, and what was
    /// replicated (all a new leader has).
    #[derive(Default)]
    struct Federation {
        held: Option<VersionedDigest>,
        replicated: Option<VersionedDigest>,
    }

    impl Federation {
        fn heartbeat(&mut self, hb: &Heartbeat) -> HeartbeatAck {
            let (unknown, held) = match receive(self.held.as_ref(), hb) {
                Ok(Some(next)) => (false, Some(next)),
                Ok(None) => (false, self.held.clone()),
                Err(DeltaError::BaseUnknown { .. }) => (true, self.held.clone()),
                Err(e) => panic!("a correct agent sent a delta that does not apply: {e}"),
            };
            self.held = held;
            ack(self.held.as_ref(), unknown)
        }
    }

    proptest! {
        /// Whatever is lost and whoever leads, the federation's digest is one the agent sent
        /// whole (never a mix of two), and after a round trip that went through it is the
        /// agent's digest of that round.
        #[test]
        fn the_federation_holds_a_digest_the_agent_sent_never_a_mix(rs in rounds()) {
            let mut free = vec![4u32; 8];
            let mut agent = DeltaSender::new();
            let mut fed = Federation::default();
            let mut history: Vec<CapacityDigest> = Vec::new();
            for (t, r) in rs.iter().enumerate() {
                if r.relayout {
                    if free.len() > 4 { free.truncate(free.len() - 2) } else { free.extend([8, 8]) }
                }
                if let Some((i, f)) = r.change {
                    let n = free.len();
                    free[i % n] = f;
                }
                let now = digest(&free, t as i64);
                history.push(now.clone());
                let mut hb = agent.heartbeat(now.clone());
                let mut delivered = false;
                // At most one immediate resend, as the agent does on `digestBaseUnknown`.
                for _ in 0..2 {
                    if r.request_lost {
                        agent.failed();
                        break;
                    }
                    let a = fed.heartbeat(&hb);
                    if r.answer_lost {
                        agent.failed();
                        break;
                    }
                    if agent.acknowledged(&a) {
                        hb = agent.heartbeat(now.clone());
                        continue;
                    }
                    delivered = true;
                    break;
                }
                if let Some(h) = &fed.held {
                    prop_assert_eq!(&h.version, &h.digest.version());
                    prop_assert!(
                        history.contains(&h.digest),
                        "round {}: the federation holds a digest the agent never sent", t
                    );
                }
                if delivered {
                    prop_assert_eq!(fed.held.as_ref().map(|h| &h.digest), Some(&now));
                }
                if r.replicate {
                    fed.replicated = fed.held.clone();
                }
                if r.new_leader {
                    fed.held = fed.replicated.clone();
                }
            }
        }
    }
}
