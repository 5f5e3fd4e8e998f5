//! The static partition of the contended table (`deploy/simulate/contended/`): every VC
//! gets its guarantee's share of the 68 nodes as its own cluster and never more, so its
//! queueing there is what it would see without sharing. Checked on a busy Philly day
//! against the shared fleet, where the same VCs do borrow beyond their guarantee.

use std::collections::BTreeMap;

use crate::common::*;

/// A replay window with bursts above several VCs' guarantees.
const DAY: &str = "from=2017-10-16&to=2017-10-17";

/// The queue guarantees (GPUs) of a contended policy file, by queue name.
fn guarantees(policy: &str) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(example(&format!("contended/{policy}"))).unwrap();
    let mut out = BTreeMap::new();
    let mut queue = None;
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("metadata: { name: \"") {
            queue = rest.split('"').next().map(str::to_owned);
        }
        if let (Some(q), Some(g)) = (&queue, line.split("guaranteed: ").nth(1)) {
            let gpus = g
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .unwrap();
            out.insert(q.clone(), gpus);
            queue = None;
        }
    }
    out
}

/// The most GPUs each queue held at once.
fn peak_per_queue(out: &tideway_simulate::RunOutput) -> BTreeMap<String, u64> {
    let mut events: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for r in &out.records {
        if let (Some(s), Some(e)) = (r.start, r.end) {
            let g = i64::try_from(r.gpus).unwrap();
            let list = events.entry(r.queue.as_str()).or_default();
            list.push((s, g));
            list.push((e, -g));
        }
    }
    events
        .into_iter()
        .map(|(q, mut ev)| {
            // Ends before starts at the same instant: a job handing over its GPUs.
            ev.sort_unstable();
            let (mut now, mut peak) = (0i64, 0i64);
            for (_, d) in ev {
                now += d;
                peak = peak.max(now);
            }
            (q.to_owned(), u64::try_from(peak).unwrap())
        })
        .collect()
}

#[test]
fn the_static_partition_gives_each_vc_its_share_and_never_more() {
    let shares = guarantees("policy-partition.yaml");
    assert_eq!(shares.len(), 11, "one queue per VC: {shares:?}");
    assert_eq!(
        shares.values().sum::<u64>(),
        544,
        "the partition covers the fleet"
    );
    assert_eq!(
        shares,
        guarantees("policy-fair.yaml"),
        "each VC's partition is its guarantee on the shared fleet"
    );
    let trace = format!("philly:{PHILLY}?{DAY}");
    let part = simulate(
        example("contended/clusters-partition.yaml"),
        example("contended/policy-partition.yaml"),
        std::slice::from_ref(&trace),
        0,
    );
    assert!(part.records.len() > 500, "{} jobs", part.records.len());
    for r in part.records.iter().filter(|r| r.start.is_some()) {
        assert_eq!(
            r.cluster.as_deref(),
            Some(format!("vc-{}", r.queue).as_str()),
            "{} of queue {} ran outside its partition",
            r.uid,
            r.queue
        );
    }
    let peaks = peak_per_queue(&part);
    for (q, peak) in &peaks {
        assert!(
            peak <= &shares[q],
            "queue {q} held {peak} GPUs at once, its share is {}",
            shares[q]
        );
    }

    // The check can fail: sharing the same 68 nodes, some VC goes beyond its guarantee.
    let shared = simulate(
        example("contended/clusters.yaml"),
        example("contended/policy-fair.yaml"),
        &[trace],
        0,
    );
    let borrowed: Vec<_> = peak_per_queue(&shared)
        .into_iter()
        .filter(|(q, peak)| *peak > shares[q])
        .collect();
    assert!(
        !borrowed.is_empty(),
        "no VC borrowed on the shared fleet that day (peaks within shares), so the partition \
         check shows nothing; partition peaks {peaks:?}"
    );
}
