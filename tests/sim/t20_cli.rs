//! `tideway simulate` run the way a user runs it: the binary, the example configs, a trace
//! spec with filters, and the files it leaves behind.

use std::process::Command;

use crate::common::*;

const BIN: &str = env!("CARGO_BIN_EXE_tideway");

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run tideway");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn simulate_writes_every_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let trace = format!("philly:{PHILLY}?vc=6214e9&from=2017-10-09&to=2017-10-10");
    let clusters = example("philly-fifo/clusters.yaml");
    let policy = example("philly-fifo/policy.yaml");
    let (ok, stdout, stderr) = run(&[
        "simulate",
        "--clusters",
        clusters.to_str().expect("utf-8 path"),
        "--policy",
        policy.to_str().expect("utf-8 path"),
        "--trace",
        &trace,
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "simulate failed: {stderr}");
    assert!(
        stdout.contains("1088 submitted, 1088 succeeded"),
        "{stdout}"
    );
    assert!(stdout.contains("JCT mean 17743 s"), "{stdout}");
    // Not a terminal: no progress bar in captured stderr.
    assert!(!stderr.contains('['), "{stderr}");

    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).expect("summary.json"))
            .expect("summary is JSON");
    assert_eq!(summary["overall"]["jobs"]["succeeded"], 1088);
    assert_eq!(summary["badRows"], 0);
    assert!(summary["queues"]["6214e9"]["jct"]["p99"].as_f64().is_some());
    assert!(summary["classes"]["training"]["queueingDelay"]["p95"].is_number());
    assert!(summary["pools"]["philly-6214e9/training"]["utilization"].is_number());
    assert!(summary["run"]["eventsPerSecond"].as_f64().unwrap_or(0.0) > 0.0);
    assert!(summary["overall"]["pendingReasons"]["Queued"]["workloads"].is_number());

    let ts = std::fs::read_to_string(out.join("timeseries.csv")).expect("timeseries.csv");
    let header = ts.lines().next().unwrap_or_default();
    assert_eq!(
        header,
        "time,unix,pending,running,philly-6214e9/training:allocated,philly-6214e9/training:total"
    );
    assert!(ts.lines().count() > 100);
    let jobs = std::fs::read_to_string(out.join("jobs.csv")).expect("jobs.csv");
    assert_eq!(jobs.lines().count(), 1 + 1088);
    for svg in [
        "utilization.svg",
        "queueing-cdf-class.svg",
        "queueing-cdf-queue.svg",
    ] {
        let body = std::fs::read_to_string(out.join(svg)).expect(svg);
        assert!(
            body.starts_with("<svg") && body.contains("<polyline"),
            "{svg}"
        );
    }
}

#[test]
fn a_run_that_rejects_everything_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    // VC 11cb48 has no queue in the cross-check policy: every job is refused.
    let trace = format!("philly:{PHILLY}?vc=11cb48&from=2017-10-09&to=2017-10-10");
    let clusters = example("philly-fifo/clusters.yaml");
    let policy = example("philly-fifo/policy.yaml");
    let (ok, stdout, stderr) = run(&[
        "simulate",
        "--clusters",
        clusters.to_str().expect("utf-8 path"),
        "--policy",
        policy.to_str().expect("utf-8 path"),
        "--trace",
        &trace,
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(!ok, "a run that rejected everything must fail: {stdout}");
    assert!(
        stderr.contains("every workload was rejected") && stderr.contains("queue 11cb48"),
        "{stderr}"
    );
    assert!(out.join("summary.json").exists(), "the summary says why");
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let out = out.to_str().expect("utf-8 path");
    let clusters = example("philly-fifo/clusters.yaml");
    let clusters = clusters.to_str().expect("utf-8 path");
    let policy = example("philly-fifo/policy.yaml");
    let policy = policy.to_str().expect("utf-8 path");
    let cases: [(&[&str], &str); 5] = [
        (
            &["--trace", "csv:whatever.csv"],
            "unknown trace kind \"csv\"",
        ),
        (
            &["--trace", &format!("philly:{PHILLY}?vcs=6214e9")],
            "unknown filter \"vcs\"",
        ),
        (&["--trace", "philly:/no/such/file.csv"], "cannot read"),
        (
            &[
                "--trace",
                &format!("philly:{PHILLY}"),
                "--from",
                "yesterday",
            ],
            "--from \"yesterday\"",
        ),
        (
            &["--trace", &format!("philly:{PHILLY}"), "--seed", "many"],
            "--seed",
        ),
    ];
    for (extra, expected) in cases {
        let mut args = vec![
            "simulate",
            "--clusters",
            clusters,
            "--policy",
            policy,
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        let (ok, _, stderr) = run(&args);
        assert!(!ok, "{extra:?} should fail");
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    let bad_policy = write(
        &dir,
        "policy.yaml",
        "apiVersion: tideway.dev/v1alpha1\nkind: Policy\nmetadata: {name: p}\nspec: {}\nsimulator: {mode: lottery}\n",
    );
    let (ok, _, stderr) = run(&[
        "simulate",
        "--clusters",
        clusters,
        "--policy",
        bad_policy.to_str().expect("utf-8 path"),
        "--trace",
        &format!("philly:{PHILLY}"),
        "--out",
        out,
    ]);
    assert!(!ok);
    assert!(stderr.contains("simulator.mode"), "{stderr}");
}
