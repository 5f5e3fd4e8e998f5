//! The capacity digest of a simulated cluster: what the federation routes on.
//!
//! One [`PoolDigest`] per (pool, GPU model), each with its zones and racks as domains. GPUs of
//! unhealthy nodes count as `unhealthy`, of cordoned (healthy) nodes as `cordoned`; only the
//! remaining, schedulable nodes enter the free histogram, exactly the nodes the local gang
//! scheduler may use. That is what makes the federation's "fits" answer and the member's
//! placement agree.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tideway_api::TopologyLevel;
use tideway_api::digest::{CapacityDigest, DomainDigest, GpuCounts, PoolDigest};

use super::cluster::{SimCluster, SimNode};

/// Counts of one pool and flavor, and of each of its zones and racks.
#[derive(Default)]
struct PoolAccumulator<'a> {
    counts: GpuCounts,
    zones: BTreeMap<&'a str, GpuCounts>,
    racks: BTreeMap<&'a str, GpuCounts>,
    rack_zone: BTreeMap<&'a str, &'a str>,
}

/// The digest of `cluster` as of `now`; deterministic (pools, zones and racks by name).
pub fn capacity_digest(cluster: &SimCluster, now: DateTime<Utc>) -> CapacityDigest {
    let mut pools: BTreeMap<(&str, &str), PoolAccumulator<'_>> = BTreeMap::new();
    for node in cluster.nodes() {
        let acc = pools.entry((&node.pool, &node.model)).or_default();
        add_node(&mut acc.counts, node);
        add_node(acc.zones.entry(&node.zone).or_default(), node);
        add_node(acc.racks.entry(&node.rack).or_default(), node);
        acc.rack_zone.insert(&node.rack, &node.zone);
    }
    let pools = pools
        .into_iter()
        .filter_map(|((pool, flavor), acc)| {
            // Every node's pool has a kind: the inventory guarantees it.
            let kind = *cluster.pools().get(pool)?;
            let rack_zone = acc.rack_zone;
            let domains = acc
                .zones
                .into_iter()
                .map(|(name, counts)| (TopologyLevel::Zone, name, counts))
                .chain(
                    acc.racks
                        .into_iter()
                        .map(|(name, counts)| (TopologyLevel::Rack, name, counts)),
                )
                .map(|(level, name, counts)| DomainDigest {
                    level,
                    name: name.to_owned(),
                    zone: (level == TopologyLevel::Rack)
                        .then(|| rack_zone.get(name).map(|z| z.to_string()))
                        .flatten(),
                    counts,
                })
                .collect();
            Some(PoolDigest {
                pool: pool.to_owned(),
                kind,
                flavor: flavor.to_owned(),
                counts: acc.counts,
                domains,
            })
        })
        .collect();
    CapacityDigest {
        cluster: cluster.name().to_owned(),
        generated_at: now,
        pools,
    }
}

/// The histogram is only as long as the largest free count it holds, so it stays short.
fn add_node(counts: &mut GpuCounts, node: &SimNode) {
    counts.total += node.gpus;
    counts.allocated += node.allocated;
    if !node.healthy {
        counts.unhealthy += node.gpus;
    } else if node.cordoned {
        counts.cordoned += node.gpus;
    } else {
        let free = node.free() as usize;
        if counts.free_histogram.len() <= free {
            counts.free_histogram.resize(free + 1, 0);
        }
        counts.free_histogram[free] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::cluster::FaultPolicy;
    use crate::sim::cluster::tests::{assignment, small, t};
    use crate::sim::inventory::{ClusterConfig, Inventory, UniformLayout};
    use tideway_api::agent::HeartbeatAck;
    use tideway_api::digest_delta::{DeltaSender, VersionedDigest};
    use tideway_api::{ClusterName, PoolKind};

    /// The design's target for one digest, sent every few seconds per member.
    const DIGEST_TARGET_BYTES: usize = 32 * 1024;

    fn sums(d: &CapacityDigest) -> BTreeMap<(String, String), u64> {
        d.pools
            .iter()
            .map(|p| {
                (
                    (p.pool.clone(), p.flavor.clone()),
                    u64::from(p.counts.total),
                )
            })
            .collect()
    }

    #[test]
    fn totals_equal_the_inventory() {
        let inv = Inventory::from_yaml(include_bytes!("../../testdata/sim-cluster.yaml")).unwrap();
        let c = SimCluster::new(&inv);
        let d = capacity_digest(&c, t(0));
        assert_eq!(sums(&d), inv.gpus_by_pool_and_model());
        for p in &d.pools {
            assert_eq!(p.kind, inv.pools()[&p.pool]);
            // zones and racks each partition the pool
            for level in [TopologyLevel::Zone, TopologyLevel::Rack] {
                let mut sum = GpuCounts::default();
                for dom in p.domains.iter().filter(|d| d.level == level) {
                    sum.add(&dom.counts);
                }
                assert_eq!(sum, p.counts, "{} {level}", p.pool);
            }
            assert_eq!(p.counts.free(), u64::from(p.counts.total));
        }
        let training = d.pools.iter().find(|p| p.pool == "training").unwrap();
        let racks: Vec<_> = training
            .domains
            .iter()
            .filter(|d| d.level == TopologyLevel::Rack)
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(racks, ["a-r1", "a-r2", "b-r1"]);
    }

    #[test]
    fn allocation_and_faults_show_up() {
        let mut c = small(); // 8 nodes x 8 H100, racks of 2
        c.ensure(&assignment("a", 3, 4, None), t(0)).unwrap();
        c.ensure(&assignment("b", 2, 8, None), t(0)).unwrap();
        c.tick(t(0));
        let d = capacity_digest(&c, t(1));
        let p = &d.pools[0];
        assert_eq!((p.counts.total, p.counts.allocated), (64, 28));
        assert_eq!(p.counts.free(), 36);
        assert_eq!(p.counts.free_histogram.iter().sum::<u32>(), 8);

        let b_node = *c.workload("b", 1).unwrap().placement.keys().next().unwrap();
        let name = c.nodes()[b_node].name.clone();
        c.inject_ecc(&name, t(2), FaultPolicy::Evict).unwrap();
        let last = c.nodes().len() - 1;
        let cordoned = c.nodes()[last].name.clone();
        c.cordon(&cordoned).unwrap();
        let d = capacity_digest(&c, t(3));
        let p = &d.pools[0];
        assert_eq!(p.counts.unhealthy, 8, "the ECC node's GPUs are unhealthy");
        assert_eq!(
            p.counts.allocated, 12,
            "the evicted gang freed both its nodes"
        );
        assert_eq!(p.counts.cordoned, 8);
        assert_eq!(
            p.counts.free_histogram.iter().sum::<u32>(),
            6,
            "schedulable nodes"
        );
        assert_eq!(p.counts.free(), 36);
        // every GPU is free, allocated, unhealthy or cordoned: nothing else holds them here
        assert_eq!(36 + 12 + 8 + 8, p.counts.total);
    }

    /// A 5,000-node member: 5 zones x 125 racks x 8 nodes x 8 GPUs, half the GPUs busy in a
    /// realistic spread so the histograms are not trivially short.
    #[test]
    fn digest_of_a_5000_node_member() {
        let inv = ClusterConfig::uniform(&UniformLayout {
            cluster: "big".into(),
            region: "r".into(),
            zones: 5,
            racks_per_zone: 125,
            nodes_per_rack: 8,
            gpus_per_node: 8,
            model: "H100".into(),
            pool: "train".into(),
            pool_kind: PoolKind::Training,
        })
        .into_inventory()
        .unwrap();
        assert_eq!(inv.nodes().len(), 5000);
        let mut c = SimCluster::new(&inv);
        for i in 0..2500u32 {
            c.ensure(&assignment(&format!("w{i}"), 1, 1 + i % 8, None), t(0))
                .unwrap();
        }
        c.tick(t(0));
        c.check_invariants().unwrap();
        let d = capacity_digest(&c, t(1));
        assert_eq!(sums(&d), inv.gpus_by_pool_and_model());
        assert_eq!(d.pools[0].domains.len(), 5 + 625);
        let json = serde_json::to_vec(&d).unwrap();
        eprintln!(
            "capacity digest of a 5,000-node member (625 racks, 5 zones): {} bytes of JSON ({:.1} KiB); target {} KiB",
            json.len(),
            json.len() as f64 / 1024.0,
            DIGEST_TARGET_BYTES / 1024
        );
        assert!(json.len() <= DIGEST_TARGET_BYTES, "{} bytes", json.len());
        let back: CapacityDigest = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, d, "the compact form round-trips");
        let rows: usize =
            serde_json::from_slice::<serde_json::Value>(&json).unwrap()["pools"][0]["domains"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["rows"].as_array().map_or(1, Vec::len))
                .sum();
        assert!(rows <= 630, "one row per domain at most: {rows}");

        // Heartbeats on the wire once the federation acknowledged that digest: one more pod
        // of 1 GPU starts (one node changes), then nothing changes.
        let ack = |v: &VersionedDigest| HeartbeatAck {
            member: ClusterName::from("big".to_string()),
            digest_replicated: true,
            lease_ms: Some(6000),
            digest_version: Some(v.version.clone()),
            digest_base_unknown: false,
        };
        let mut sender = DeltaSender::new();
        let full = serde_json::to_vec(&sender.heartbeat(d.clone())).unwrap();
        let base = VersionedDigest::new(d.clone());
        sender.acknowledged(&ack(&base));
        c.ensure(&assignment("one-more", 1, 1, None), t(1)).unwrap();
        c.tick(t(1));
        let d2 = capacity_digest(&c, t(2));
        let one_node = sender.heartbeat(d2.clone());
        let delta = one_node.digest_delta.clone().expect("a delta");
        assert_eq!(delta.pools.len(), 1);
        assert_eq!(
            delta.pools[0].domains.len(),
            2,
            "the node's rack and zone: {delta:?}"
        );
        let next = delta.apply_to(&base).unwrap();
        assert_eq!(next.digest, d2, "base + delta = full");
        sender.acknowledged(&ack(&next));
        let one_node = serde_json::to_vec(&one_node).unwrap();
        let unchanged = serde_json::to_vec(&sender.heartbeat(capacity_digest(&c, t(3)))).unwrap();
        eprintln!(
            "heartbeat of a 5,000-node member: full digest {} bytes, one node changed {} bytes, unchanged {} bytes",
            full.len(),
            one_node.len(),
            unchanged.len()
        );
        assert!(one_node.len() * 10 < full.len(), "{} bytes", one_node.len());
        assert!(unchanged.len() < 200, "{} bytes", unchanged.len());
    }
}
