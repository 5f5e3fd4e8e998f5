//! The trace formats: bad rows counted and reported (never silently dropped), inference
//! replicas living from creation to deletion, and Tideway's own JSON-lines format.

use crate::common::*;

const ONE_CLUSTER: &str = "clusters:\n  - name: c\n    region: r\n    uniform: { nodes: 2, nodesPerRack: 2, gpusPerNode: 8, model: P100 }\n";

fn fifo_policy(queues: &[(&str, u32)], extra: &str) -> String {
    let mut s = String::from(
        "apiVersion: tideway.dev/v1alpha1\nkind: Policy\nmetadata: { name: t }\nspec:\n  queues:\n",
    );
    for (q, gpus) in queues {
        s.push_str(&format!(
            "    - apiVersion: tideway.dev/v1alpha1\n      kind: Queue\n      metadata: {{ name: {q} }}\n      spec: {{ tenant: {q}, quotas: [{{ flavor: P100, guaranteed: {gpus} }}] }}\n"
        ));
    }
    s.push_str("  scheduler: { fairSharing: false, preemption: false }\n");
    s.push_str(extra);
    s
}

#[test]
fn philly_bad_rows_are_counted_and_the_rest_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = write(
        &dir,
        "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n\
         2017-10-09 00:00:00,100.0,1,100.0,a\n\
         2017-10-09 00:00:00,oops,1,100.0,a\n\
         2017-10-09 00:00:10,100.0,16,1600.0,a\n\
         2017-10-09 00:00:20,100.0,32,3200.0,a\n\
         not a time,100.0,1,100.0,a\n\
         2017-10-09 00:00:30,100.0,1,100.0,zz\n\
         2017-10-09 00:00:40,50.0,12,600.0,a\n",
    );
    let clusters = write(&dir, "clusters.yaml", ONE_CLUSTER);
    let policy = write(
        &dir,
        "policy.yaml",
        &fifo_policy(&[("a", 16)], "simulator: { mode: fifo }\n"),
    );
    let out = simulate(clusters, policy, &[format!("philly:{}", csv.display())], 0);
    let s = &out.summary;
    let t = &s.traces[0];
    assert_eq!(t.rows, 7);
    assert_eq!(t.bad_rows.count, 2);
    assert_eq!(t.bad_rows.by_reason.get("bad duration"), Some(&1));
    assert_eq!(t.bad_rows.by_reason.get("bad timestamp"), Some(&1));
    assert_eq!(
        t.bad_rows
            .examples
            .iter()
            .map(|e| e.line)
            .collect::<Vec<_>>(),
        [3, 6]
    );
    assert_eq!(s.bad_rows, 2);
    // 32 GPUs never fit a 16-GPU cluster; VC zz has no queue: both refused, and said so.
    assert_eq!(s.overall.jobs.rejected, 2);
    assert_eq!(s.rejected_by_reason.values().sum::<u64>(), 2);
    assert!(
        s.rejected_by_reason
            .keys()
            .any(|k| k.contains("queue zz is not defined")),
        "{:?}",
        s.rejected_by_reason
    );
    assert_eq!(s.overall.jobs.succeeded, 3);
    // 16 GPUs = two whole nodes, so it waits for the 1-GPU job; the 12-GPU gang (8 + 4)
    // waits behind it.
    let start = |uid: &str| {
        out.records
            .iter()
            .find(|r| r.uid == uid)
            .and_then(|r| r.start)
    };
    let t0 = start("philly-2").expect("started");
    assert_eq!(start("philly-4"), Some(t0 + 100));
    assert_eq!(start("philly-8"), Some(t0 + 200));
}

#[test]
fn inference_replicas_live_from_creation_to_deletion() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters = write(
        &dir,
        "clusters.yaml",
        "clusters:\n  - name: inf\n    region: r\n    uniform: { nodes: 64, gpusPerNode: 8, model: GPU, pool: serving, poolKind: inference }\n",
    );
    let policy = write(
        &dir,
        "policy.yaml",
        "apiVersion: tideway.dev/v1alpha1\nkind: Policy\nmetadata: { name: dlrm }\nspec:\n  queues:\n    - apiVersion: tideway.dev/v1alpha1\n      kind: Queue\n      metadata: { name: dlrm }\n      spec: { tenant: dlrm, classes: [inference], quotas: [{ flavor: GPU, guaranteed: 512 }] }\n  scheduler: { fairSharing: false, preemption: false }\nsimulator: { mode: scheduler }\n",
    );
    // The first day of the trace, every app into one queue.
    let out = simulate(
        clusters,
        policy,
        &[format!("alibaba-dlrm:{DLRM}?from=0&to=86400&queue=dlrm")],
        0,
    );
    let s = &out.summary;
    let t = &s.traces[0];
    assert_eq!(t.rows, 23_871);
    assert_eq!(t.bad_rows.count, 0);
    assert!(t.filtered["no GPU (CPU-only instance)"] > 10_000);
    assert!(t.jobs > 1000, "{t:?}");
    assert_eq!(s.classes.keys().collect::<Vec<_>>(), ["inference"]);
    let end = tideway_simulate::time::parse_time("2025-01-02").expect("time");
    for r in &out.records {
        assert_eq!(r.outcome.as_str(), "removed", "{r:?}");
        let e = r.end.expect("removed at its deletion time");
        assert!(e <= end, "{r:?}");
        assert!(r.submit >= end - 86_400);
    }
    assert_eq!(s.overall.jobs.removed, t.jobs);
    // Replicas that lived the whole window show its full length as their lifetime.
    assert_eq!(s.overall.jct.max, 86_400.0);
}

#[test]
fn jsonl_workloads_with_submit_and_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = |name: &str, pods: u32, gpus: u32, at: &str, runtime: u64| {
        format!(
            r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"a","class":"training","podSets":[{{"name":"w","count":{pods},"gpusPerPod":{gpus},"flavor":"P100"}}],"topology":{{"required":"rack"}}}},"submitAt":"{at}","runtimeSeconds":{runtime}}}"#
        )
    };
    let trace = write(
        &dir,
        "trace.jsonl",
        &[
            line("first", 1, 8, "2030-01-01T00:00:00Z", 60),
            line("second", 2, 8, "2030-01-01T00:00:10Z", 60),
            "{\"not\": \"a workload\"}".to_owned(),
            line("third", 1, 4, "2030-01-01T00:01:30Z", 30),
        ]
        .join("\n"),
    );
    let clusters = write(&dir, "clusters.yaml", ONE_CLUSTER);
    let policy = write(
        &dir,
        "policy.yaml",
        &fifo_policy(&[("a", 16)], "simulator: { mode: fifo }\n"),
    );
    let out = simulate(clusters, policy, &[format!("jsonl:{}", trace.display())], 0);
    assert_eq!(out.summary.bad_rows, 1);
    let rec = |n: &str| out.records.iter().find(|r| r.uid == n).expect(n);
    let t0 = rec("first").submit;
    assert_eq!(rec("first").start, Some(t0));
    // Both nodes are one rack: the pair waits for the first job to end.
    assert_eq!(rec("second").start, Some(t0 + 60));
    assert_eq!(rec("third").start, Some(t0 + 120));
    assert_eq!(rec("third").end, Some(t0 + 150));
}
