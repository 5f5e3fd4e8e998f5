//! The capacity digest: what a member cluster tells the federation about its GPUs, compact
//! enough to send every few seconds from a 5,000-node cluster.
//!
//! Instead of a node list, each (pool, flavor) and each topology domain inside it carries a
//! histogram of free GPUs per node: `free_histogram[k]` is the number of schedulable nodes
//! with exactly `k` free GPUs. That is enough to answer "does a gang of P pods of G GPUs fit
//! in one node / rack / zone?" exactly, for gangs whose pods each land on one node, which is
//! the only shape GPU gangs take.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::member_cluster::PoolKind;
use crate::workload::TopologyLevel;

/// One member's capacity report, sent with its heartbeat and replacing the previous one whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CapacityDigest {
    /// Member cluster that sent it.
    pub cluster: String,
    /// When the member took it (wall clock); the federation uses it to tell stale numbers.
    pub generated_at: DateTime<Utc>,
    /// One entry per (pool, flavor).
    pub pools: Vec<PoolDigest>,
}

/// GPU counts of one set of nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GpuCounts {
    /// GPUs on these nodes, schedulable or not.
    pub total: u32,
    // Zero counters are left out on the wire: a 5,000-node member has hundreds of domains,
    // and most of them have nothing unhealthy or cordoned.
    /// GPUs held by running pods.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub allocated: u32,
    /// On nodes that are unhealthy (e.g. ECC errors): not schedulable.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unhealthy: u32,
    /// On nodes that are cordoned or draining: not schedulable.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cordoned: u32,
    /// `free_histogram[k]` = schedulable nodes with exactly `k` free GPUs.
    pub free_histogram: Vec<u32>,
}

/// Free GPUs in a free histogram (`hist[k]` = nodes with exactly `k` free).
pub fn free_in(hist: &[u32]) -> u64 {
    hist.iter()
        .enumerate()
        .map(|(k, n)| k as u64 * u64::from(*n))
        .sum()
}

/// Pods of `gpus_per_pod` a free histogram holds, one pod never spanning nodes.
pub fn pods_that_fit_in(hist: &[u32], gpus_per_pod: u32) -> u64 {
    if gpus_per_pod == 0 {
        return u64::MAX;
    }
    let g = gpus_per_pod as usize;
    hist.iter()
        .enumerate()
        .skip(g)
        .map(|(k, n)| (k / g) as u64 * u64::from(*n))
        .sum()
}

/// The most free GPUs on any one node of a free histogram.
pub fn largest_free_in(hist: &[u32]) -> u32 {
    hist.iter().rposition(|n| *n > 0).unwrap_or(0) as u32
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl GpuCounts {
    /// Free GPUs on schedulable nodes.
    pub fn free(&self) -> u64 {
        free_in(&self.free_histogram)
    }

    /// How many pods of `gpus_per_pod` fit, one pod never spanning nodes.
    pub fn pods_that_fit(&self, gpus_per_pod: u32) -> u64 {
        pods_that_fit_in(&self.free_histogram, gpus_per_pod)
    }

    /// The most free GPUs on any one node.
    pub fn largest_node_free(&self) -> u32 {
        largest_free_in(&self.free_histogram)
    }

    /// Takes `pods` pods of `gpus_per_pod` out of the free histogram, best fit first (the
    /// fullest node that still fits each pod), as a gang scheduler would. All or nothing:
    /// returns false and changes nothing when they do not all fit.
    pub fn take(&mut self, pods: u64, gpus_per_pod: u32) -> bool {
        if self.pods_that_fit(gpus_per_pod) < pods {
            return false;
        }
        let g = gpus_per_pod as usize;
        for _ in 0..pods {
            let Some(k) = (g..self.free_histogram.len()).find(|k| self.free_histogram[*k] > 0)
            else {
                return false;
            };
            self.free_histogram[k] -= 1;
            self.free_histogram[k - g] += 1;
            self.allocated += gpus_per_pod;
        }
        true
    }

    /// Adds another set of nodes' counts, merging histograms bucket by bucket.
    pub fn add(&mut self, other: &GpuCounts) {
        self.total += other.total;
        self.allocated += other.allocated;
        self.unhealthy += other.unhealthy;
        self.cordoned += other.cordoned;
        if self.free_histogram.len() < other.free_histogram.len() {
            self.free_histogram.resize(other.free_histogram.len(), 0);
        }
        for (k, n) in other.free_histogram.iter().enumerate() {
            self.free_histogram[k] += n;
        }
    }
}

/// Capacity of one (pool, flavor) of a member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolDigest {
    /// Pool name, unique within its cluster.
    pub pool: String,
    /// What the pool is for, from the member's configuration.
    pub kind: PoolKind,
    /// GPU model, the quota flavor.
    pub flavor: String,
    /// Counts over the whole pool.
    pub counts: GpuCounts,
    /// Zones and racks of this pool, each with its own counts. On the wire they travel in
    /// the compact grouped form of [`domain_wire`] (the one-object-per-domain form is still
    /// accepted), which keeps a 5,000-node member's digest under 32 KiB.
    #[serde(with = "domain_wire")]
    pub domains: Vec<DomainDigest>,
}

/// Capacity of one topology domain (zone or rack) of a pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DomainDigest {
    /// Zone or rack (never node: node fit comes from the histogram itself).
    pub level: TopologyLevel,
    /// Domain name, unique within its level in the pool.
    pub name: String,
    /// For a rack: the zone that holds it, so the federation can nest racks in zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Counts over the domain's nodes.
    pub counts: GpuCounts,
}

/// The wire form of a pool's domains.
///
/// Each domain as its own object repeats every key name, its level and its zone: 625 racks
/// of a 5,000-node member made a 56 KiB digest, sent every few seconds by every member. Here
/// domains of one level and zone share one group, each domain is a row of plain numbers, and
/// consecutive domains with identical counts (idle or full racks, the common case) share one
/// row that lists all their names:
///
/// ```json
/// {"level":"rack","zone":"z0","rows":[[[64],[0,0,0,0,0,0,0,0,8],["z0-r0","z0-r1"]],
///                                      [[64,34],[1,0,2,1,0,1,3],["z0-r2"]]]}
/// ```
///
/// A row's first array is `[total, allocated, unhealthy, cordoned]` without trailing zeros.
/// Decoding yields the domains in the order they were encoded, so a digest round-trips
/// exactly. The older form (one [`DomainDigest`] object per domain) is still read, and both
/// may be mixed in one list.
pub mod domain_wire {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{DomainDigest, GpuCounts};
    use crate::workload::TopologyLevel;

    /// Domains of one level (and, for racks, one zone), in order.
    #[derive(Debug, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Group {
        level: TopologyLevel,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        zone: Option<String>,
        rows: Vec<Row>,
    }

    /// Counts (`[total, allocated, unhealthy, cordoned]`, trailing zeros left out), the free
    /// histogram, and the names of the consecutive domains that have exactly these counts.
    type Row = (Vec<u32>, Vec<u32>, Vec<String>);

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Item {
        Group(Group),
        Domain(DomainDigest),
    }

    fn counts_row(c: &GpuCounts) -> Vec<u32> {
        let mut v = vec![c.total, c.allocated, c.unhealthy, c.cordoned];
        while v.len() > 1 && v.last() == Some(&0) {
            v.pop();
        }
        v
    }

    fn counts_from(v: &[u32], hist: Vec<u32>) -> Result<GpuCounts, String> {
        if v.is_empty() || v.len() > 4 {
            return Err(format!(
                "a row's counts are [total, allocated, unhealthy, cordoned]: got {} numbers",
                v.len()
            ));
        }
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        Ok(GpuCounts {
            total: at(0),
            allocated: at(1),
            unhealthy: at(2),
            cordoned: at(3),
            free_histogram: hist,
        })
    }

    /// Groups `domains` as described in the module doc, keeping their order.
    fn groups(domains: &[DomainDigest]) -> Vec<Group> {
        let mut out: Vec<Group> = Vec::new();
        let mut last: Option<&DomainDigest> = None;
        for d in domains {
            let same_group = last.is_some_and(|l| l.level == d.level && l.zone == d.zone);
            if !same_group {
                out.push(Group {
                    level: d.level,
                    zone: d.zone.clone(),
                    rows: Vec::new(),
                });
            }
            let same_row = same_group && last.is_some_and(|l| l.counts == d.counts);
            if let Some(g) = out.last_mut() {
                match g.rows.last_mut() {
                    Some(row) if same_row => row.2.push(d.name.clone()),
                    _ => g.rows.push((
                        counts_row(&d.counts),
                        d.counts.free_histogram.clone(),
                        vec![d.name.clone()],
                    )),
                }
            }
            last = Some(d);
        }
        out
    }

    /// Writes `domains` in the grouped form.
    pub fn serialize<S: Serializer>(domains: &[DomainDigest], s: S) -> Result<S::Ok, S::Error> {
        groups(domains).serialize(s)
    }

    /// Reads either form, or a mix of both, back into one domain per name.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<DomainDigest>, D::Error> {
        let items = Vec::<Item>::deserialize(d)?;
        let mut out = Vec::new();
        for item in items {
            match item {
                Item::Domain(dom) => out.push(dom),
                Item::Group(g) => {
                    for (counts, hist, names) in g.rows {
                        if names.is_empty() {
                            return Err(D::Error::custom("a row must name at least one domain"));
                        }
                        let counts = counts_from(&counts, hist).map_err(D::Error::custom)?;
                        for name in names {
                            out.push(DomainDigest {
                                level: g.level,
                                name,
                                zone: g.zone.clone(),
                                counts: counts.clone(),
                            });
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

impl PoolDigest {
    /// Pods of `gpus_per_pod` that fit in the best single domain of `level`.
    pub fn largest_fit(&self, level: TopologyLevel, gpus_per_pod: u32) -> u64 {
        match level {
            TopologyLevel::Node => {
                if gpus_per_pod == 0 {
                    return u64::MAX;
                }
                u64::from(self.counts.largest_node_free() / gpus_per_pod)
            }
            _ => self
                .domains
                .iter()
                .filter(|d| d.level == level)
                .map(|d| d.counts.pods_that_fit(gpus_per_pod))
                .max()
                .unwrap_or(0),
        }
    }

    /// Whether a gang of `pods` pods of `gpus_per_pod` fits in one domain of `level`, or
    /// anywhere in the pool when `level` is None.
    pub fn fits(&self, pods: u64, gpus_per_pod: u32, level: Option<TopologyLevel>) -> bool {
        match level {
            None => self.counts.pods_that_fit(gpus_per_pod) >= pods,
            Some(l) => self.largest_fit(l, gpus_per_pod) >= pods,
        }
    }

    /// The share of free GPUs that cannot host a pod of `gpus_per_pod` (stranded capacity).
    /// 0.0 when nothing is free.
    pub fn fragmentation(&self, gpus_per_pod: u32) -> f64 {
        let free = self.counts.free();
        if free == 0 {
            return 0.0;
        }
        let usable = self.counts.pods_that_fit(gpus_per_pod) * u64::from(gpus_per_pod);
        1.0 - (usable as f64 / free as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(hist: &[u32]) -> GpuCounts {
        GpuCounts {
            total: 8 * hist.iter().sum::<u32>(),
            allocated: 0,
            unhealthy: 0,
            cordoned: 0,
            free_histogram: hist.to_vec(),
        }
    }

    fn pool() -> PoolDigest {
        // rack a: two nodes with 8 free, one with 3; rack b: four nodes with 4 free.
        let a = counts(&[0, 0, 0, 1, 0, 0, 0, 0, 2]);
        let b = counts(&[0, 0, 0, 0, 4, 0, 0, 0, 0]);
        let mut all = a.clone();
        all.add(&b);
        PoolDigest {
            pool: "train".into(),
            kind: PoolKind::Training,
            flavor: "H100".into(),
            counts: all.clone(),
            domains: vec![
                DomainDigest {
                    level: TopologyLevel::Rack,
                    name: "a".into(),
                    zone: None,
                    counts: a,
                },
                DomainDigest {
                    level: TopologyLevel::Rack,
                    name: "b".into(),
                    zone: None,
                    counts: b,
                },
                DomainDigest {
                    level: TopologyLevel::Zone,
                    name: "z".into(),
                    zone: None,
                    counts: all,
                },
            ],
        }
    }

    #[test]
    fn fits_by_level() {
        let p = pool();
        assert_eq!(p.counts.free(), 35);
        // 8-GPU pods: two in rack a, none in rack b.
        assert_eq!(p.largest_fit(TopologyLevel::Rack, 8), 2);
        assert!(p.fits(2, 8, Some(TopologyLevel::Rack)));
        assert!(!p.fits(3, 8, Some(TopologyLevel::Zone)));
        // 4-GPU pods: rack a holds 4 (2 per 8-GPU node), rack b holds 4, the zone 8.
        assert_eq!(p.largest_fit(TopologyLevel::Rack, 4), 4);
        assert_eq!(p.largest_fit(TopologyLevel::Zone, 4), 8);
        assert!(p.fits(2, 4, Some(TopologyLevel::Node)));
        assert!(!p.fits(3, 4, Some(TopologyLevel::Node)));
    }

    #[test]
    fn take_is_best_fit_and_all_or_nothing() {
        let mut c = counts(&[0, 0, 0, 1, 0, 0, 0, 0, 2]);
        // A 3-GPU pod goes to the 3-free node, not an 8-free one.
        assert!(c.take(1, 3));
        assert_eq!(c.free_histogram, vec![1, 0, 0, 0, 0, 0, 0, 0, 2]);
        // Three 8-GPU pods do not fit: nothing changes.
        assert!(!c.take(3, 8));
        assert_eq!(c.free_histogram, vec![1, 0, 0, 0, 0, 0, 0, 0, 2]);
        assert!(c.take(2, 8));
        assert_eq!(c.free(), 0);
        assert_eq!(c.allocated, 19);
    }

    /// Racks with varied, partly identical counts, in a zone order the encoder must keep.
    fn varied_pool() -> PoolDigest {
        let mut domains = Vec::new();
        for z in 0..3u32 {
            let mut c = counts(&[0, 0, 0, 0, 0, 0, 0, 0, 4]);
            c.allocated = z;
            domains.push(DomainDigest {
                level: TopologyLevel::Zone,
                name: format!("z{z}"),
                zone: None,
                counts: c,
            });
        }
        for r in 0..40u32 {
            // Runs of identical racks (r / 4) with some unhealthy and cordoned ones.
            let k = (r / 4) as usize % 9;
            let mut hist = vec![0u32; 9];
            hist[k] = 4;
            let mut c = counts(&hist);
            c.allocated = 32 - 4 * k as u32;
            c.unhealthy = if r % 13 == 0 { 8 } else { 0 };
            c.cordoned = if r % 17 == 5 { 8 } else { 0 };
            domains.push(DomainDigest {
                level: TopologyLevel::Rack,
                name: format!("z{}-r{r}", r % 3),
                zone: Some(format!("z{}", r % 3)),
                counts: c,
            });
        }
        PoolDigest {
            pool: "train".into(),
            kind: PoolKind::Training,
            flavor: "H100".into(),
            counts: counts(&[0, 0, 0, 0, 0, 0, 0, 0, 12]),
            domains,
        }
    }

    #[test]
    fn grouped_domains_round_trip_in_order() {
        let p = varied_pool();
        let json = serde_json::to_string(&p).unwrap();
        let back: PoolDigest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p, "{json}");
        let msgpack = rmp_serde::to_vec_named(&p).unwrap();
        let back: PoolDigest = rmp_serde::from_slice(&msgpack).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn identical_consecutive_racks_share_a_row() {
        let mut p = pool();
        let b = p.domains[1].clone();
        p.domains.insert(
            2,
            DomainDigest {
                name: "c".into(),
                ..b
            },
        );
        let v = serde_json::to_value(&p).unwrap();
        let groups = v["domains"].as_array().unwrap();
        // racks a, b, c (zone None) then the zone: two groups; b and c share one row.
        assert_eq!(groups.len(), 2, "{v}");
        let rows = groups[0]["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{v}");
        assert_eq!(rows[1][2], serde_json::json!(["b", "c"]));
        assert_eq!(
            rows[1][0],
            serde_json::json!([32]),
            "zero counters left out"
        );
        let back: PoolDigest = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn the_one_object_per_domain_form_is_still_read() {
        let p = pool();
        let mut v = serde_json::to_value(&p).unwrap();
        let legacy: Vec<serde_json::Value> = p
            .domains
            .iter()
            .map(|d| {
                serde_json::json!({
                    "level": d.level, "name": d.name,
                    "counts": {"total": d.counts.total, "freeHistogram": d.counts.free_histogram},
                })
            })
            .collect();
        v["domains"] = serde_json::Value::Array(legacy);
        let back: PoolDigest = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }

    /// The worst case for grouping: 625 racks of 8 nodes (a 5,000-node member), no two
    /// consecutive racks alike, every histogram at its full 9 buckets.
    #[test]
    fn a_5000_node_pool_without_identical_racks_fits_32_kib() {
        let mut domains = Vec::new();
        for z in 0..5u32 {
            domains.push(DomainDigest {
                level: TopologyLevel::Zone,
                name: format!("z{z}"),
                zone: None,
                counts: counts(&[100, 100, 100, 100, 100, 100, 100, 100, 200]),
            });
        }
        for r in 0..625u32 {
            let mut hist = vec![1u32; 9];
            hist[(r % 8) as usize] = 0;
            hist[8] = 1 + r % 2;
            let mut c = counts(&hist);
            c.total = 64;
            c.allocated = 64 - free_in(&hist) as u32 % 64;
            c.unhealthy = r % 3;
            domains.push(DomainDigest {
                level: TopologyLevel::Rack,
                name: format!("z{}-r{r}", r % 5),
                zone: Some(format!("z{}", r % 5)),
                counts: c,
            });
        }
        domains[5..].sort_by(|a, b| a.zone.cmp(&b.zone));
        let p = PoolDigest {
            pool: "train".into(),
            kind: PoolKind::Training,
            flavor: "H100".into(),
            counts: counts(&[0, 0, 0, 0, 0, 0, 0, 0, 5000]),
            domains,
        };
        let json = serde_json::to_vec(&p).unwrap();
        let legacy: usize = p
            .domains
            .iter()
            .map(|d| serde_json::to_vec(d).unwrap().len() + 1)
            .sum();
        assert!(json.len() <= 32 * 1024, "{} bytes", json.len());
        assert!(json.len() * 2 < legacy, "{} vs {legacy} bytes", json.len());
        let back: PoolDigest = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, p);
        eprintln!(
            "625 distinct racks: {} bytes grouped, {legacy} one object each",
            json.len()
        );
    }

    #[test]
    fn bad_rows_are_refused() {
        let mut v = serde_json::to_value(pool()).unwrap();
        v["domains"] =
            serde_json::json!([{"level": "rack", "rows": [[[1, 2, 3, 4, 5], [1], ["a"]]]}]);
        assert!(serde_json::from_value::<PoolDigest>(v.clone()).is_err());
        v["domains"] = serde_json::json!([{"level": "rack", "rows": [[[8], [1], []]]}]);
        assert!(serde_json::from_value::<PoolDigest>(v).is_err());
    }

    #[test]
    fn fragmentation_counts_stranded_gpus() {
        let p = pool();
        // For 8-GPU pods only 16 of 35 free GPUs are usable.
        let f = p.fragmentation(8);
        assert!((f - (1.0 - 16.0 / 35.0)).abs() < 1e-9, "{f}");
        assert_eq!(p.fragmentation(1), 0.0);
    }
}
