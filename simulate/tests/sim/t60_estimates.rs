//! Run-time estimates in scheduler mode: by default the live leader's online estimator,
//! learned from jobs as they complete (the trace's durations are never shown to the core);
//! `exact` is the oracle and says so; the summary scores what the core planned with.

use crate::common::*;

fn run(estimates: &str) -> tideway_simulate::RunOutput {
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters = write(
        &dir,
        "clusters.yaml",
        "clusters:\n  - name: philly\n    region: philly\n    uniform: { nodes: 16, nodesPerRack: 8, gpusPerNode: 8, model: P100 }\n",
    );
    let base = std::fs::read_to_string(example("philly-shared/policy-fair.yaml"))
        .expect("read the example policy");
    let line = if estimates.is_empty() {
        String::new()
    } else {
        format!("\n  runtimeEstimates: {estimates}")
    };
    let text = base.replace(
        "simulator:\n  mode: scheduler",
        &format!("simulator:\n  mode: scheduler{line}"),
    );
    let p = write(&dir, "policy.yaml", &text);
    let trace = format!("philly:{PHILLY}?from=2017-10-09&to=2017-10-10");
    simulate(clusters, p, std::slice::from_ref(&trace), 1)
}

#[test]
fn online_by_default_oracle_only_when_asked() {
    let online = run("");
    let e = online
        .summary
        .estimates
        .clone()
        .expect("scheduler mode reports estimates");
    assert_eq!(e.source, "online");
    assert!(!e.oracle);
    // Early jobs start before anything completed (no estimate); later ones are estimated
    // from what completed, and learned percentiles are wrong both ways.
    assert!(e.defaulted > 0, "{e:?}");
    assert!(e.estimated > 100, "{e:?}");
    assert!(e.under > 0 && e.over > 0, "{e:?}");
    assert!(e.under + e.over <= e.estimated);
    assert!(e.median_ratio > 0.0);

    let oracle = run("exact");
    let e = oracle.summary.estimates.clone().expect("estimates");
    assert_eq!(e.source, "exact (oracle)");
    assert!(e.oracle);
    assert_eq!((e.under, e.over, e.defaulted), (0, 0, 0), "{e:?}");
    assert_eq!(e.median_ratio, 1.0);

    let none = run("none");
    let e = none.summary.estimates.clone().expect("estimates");
    assert_eq!(e.source, "none");
    assert_eq!(e.estimated, 0, "{e:?}");
    assert!(e.defaulted > 1000, "{e:?}");
    // What the core is told changes what it decides.
    assert_ne!(
        online.records.iter().map(|r| r.start).collect::<Vec<_>>(),
        none.records.iter().map(|r| r.start).collect::<Vec<_>>()
    );
}

/// A queue's time limits, as the live API applies them: its default for work that names
/// none (the member stops it there, and it is not retried), its maximum enforced.
#[test]
fn queue_time_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters = write(
        &dir,
        "clusters.yaml",
        "clusters:\n  - name: c\n    region: r\n    uniform: { nodes: 2, nodesPerRack: 2, gpusPerNode: 8, model: P100 }\n",
    );
    let policy = write(
        &dir,
        "policy.yaml",
        "apiVersion: tideway.dev/v1alpha1
kind: Policy
metadata: { name: limits }
spec:
  queues:
    - apiVersion: tideway.dev/v1alpha1
      kind: Queue
      metadata: { name: a }
      spec: { tenant: a, defaultRuntimeLimitSeconds: 100, maxRuntimeLimitSeconds: 200, quotas: [{ flavor: P100, guaranteed: 16 }] }
simulator:
  mode: scheduler
",
    );
    let job = |name: &str, limit: &str, runtime: u64| {
        format!(
            r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"a","class":"training",{limit}"podSets":[{{"name":"w","count":1,"gpusPerPod":1,"flavor":"P100"}}]}},"submitAt":0,"runtimeSeconds":{runtime}}}"#
        )
    };
    let trace = write(
        &dir,
        "t.jsonl",
        &[
            job("long", "", 500),
            job("short", "", 50),
            job("own", r#""runtimeLimitSeconds":150,"#, 500),
            job("greedy", r#""runtimeLimitSeconds":300,"#, 50),
        ]
        .join("\n"),
    );
    let out = simulate(clusters, policy, &[format!("jsonl:{}", trace.display())], 0);
    let rec = |n: &str| out.records.iter().find(|r| r.uid == n).expect(n);
    use tideway_simulate::metrics::Outcome;
    assert_eq!(rec("long").outcome, Outcome::TimedOut);
    assert_eq!(
        rec("long").end,
        Some(100),
        "stopped at the queue's default limit"
    );
    assert_eq!(rec("short").outcome, Outcome::Succeeded);
    assert_eq!(
        rec("own").end,
        Some(150),
        "its own limit, within the maximum"
    );
    assert_eq!(rec("greedy").outcome, Outcome::Rejected);
    let why = rec("greedy").reject_reason.clone().unwrap_or_default();
    assert!(
        why.contains("spec.runtimeLimitSeconds") && why.contains("200"),
        "{why}"
    );
    assert_eq!(out.summary.overall.jobs.timed_out, 2);
}
