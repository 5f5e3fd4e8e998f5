//! The submission-time warning about gangs no member cluster can ever hold: a gang never
//! spans clusters, so one that needs more GPUs of a flavor than any single cluster has would
//! stay pending forever. The server still accepts it (capacity changes as members join);
//! the CLI says so at once instead of leaving the user to find out from `explain`.

use std::collections::BTreeMap;

use tideway_api::Workload;
use tideway_api::capacity::CapacityView;

/// The warning for `w`, if no cluster in `cap` has every flavor it needs in the amount it
/// needs; `None` for a workload without a gang or one that fits somewhere.
pub fn impossible_gang(w: &Workload, cap: &CapacityView) -> Option<String> {
    w.spec.gang.as_ref()?;
    let mut need: BTreeMap<&str, u64> = BTreeMap::new();
    for ps in &w.spec.pod_sets {
        *need.entry(ps.flavor.as_str()).or_default() +=
            u64::from(ps.count) * u64::from(ps.gpus_per_pod);
    }
    let mut largest: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    let mut fits = false;
    for c in &cap.clusters {
        let mut have: BTreeMap<&str, u64> = BTreeMap::new();
        for p in &c.pools {
            *have.entry(p.flavor.as_str()).or_default() += p.capacity.total;
        }
        for (f, n) in &have {
            let l = largest.entry(f).or_insert((0, ""));
            if *n > l.0 {
                *l = (*n, c.cluster.as_str());
            }
        }
        fits |= need
            .iter()
            .all(|(f, n)| have.get(f).is_some_and(|h| h >= n));
    }
    if fits || cap.clusters.is_empty() {
        return None;
    }
    let detail: Vec<String> = need
        .iter()
        .map(|(f, n)| match largest.get(f) {
            Some((m, c)) => format!("{n} {f} GPUs (the largest cluster, {c}, has {m})"),
            None => format!("{n} {f} GPUs (no cluster has {f})"),
        })
        .collect();
    Some(format!(
        "warning: workload/{} is a gang larger than any cluster: it needs {} in one cluster; it will stay pending",
        w.metadata.name,
        detail.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tideway_api::{Gang, PodSet, WorkloadClass, WorkloadSpec};

    fn view() -> CapacityView {
        serde_json::from_value(serde_json::json!({
            "fleet": {"total": 0, "allocated": 0, "free": 0, "unhealthy": 0, "cordoned": 0, "borrowed": 0},
            "regions": [], "flavors": [],
            "clusters": [
                {"cluster": "eu", "region": "eu", "phase": "Ready",
                 "capacity": {"total": 80, "allocated": 0, "free": 80, "unhealthy": 0, "cordoned": 0, "borrowed": 0},
                 "pools": [{"pool": "training", "kind": "training", "flavor": "H100",
                   "capacity": {"total": 80, "allocated": 0, "free": 80, "unhealthy": 0, "cordoned": 0, "borrowed": 0},
                   "fragmentation": 0.0, "largestGang": {"podGpus": 8, "node": 8, "rack": 32, "zone": 48}, "domains": []}]}
            ],
            "fragmentationDefinition": ""
        }))
        .unwrap()
    }

    fn gang(pods: u32, flavor: &str) -> Workload {
        let mut spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("w", pods, 8, flavor)],
        );
        spec.gang = Some(Gang { min_count: pods });
        Workload::new("g", spec)
    }

    #[test]
    fn a_gang_larger_than_every_cluster_is_warned_about() {
        let msg = impossible_gang(&gang(40, "H100"), &view()).unwrap();
        assert!(msg.contains("larger than any cluster"), "{msg}");
        assert!(
            msg.contains("320 H100 GPUs") && msg.contains("eu, has 80"),
            "{msg}"
        );
        let msg = impossible_gang(&gang(1, "B200"), &view()).unwrap();
        assert!(msg.contains("no cluster has B200"), "{msg}");
    }

    #[test]
    fn a_gang_that_fits_somewhere_is_not() {
        assert_eq!(impossible_gang(&gang(10, "H100"), &view()), None);
        let mut w = gang(40, "H100");
        w.spec.gang = None;
        assert_eq!(impossible_gang(&w, &view()), None);
    }
}
