//! A slice of a Philly day through a running federation and through the simulator: the live
//! history, `tideway simulate` on the same jobs, and `tideway policy dry-run --replay` of what
//! the federation recorded all agree.
//!
//! The slice is the first 16 jobs of Philly VC 6214e9 on 2017-10-09 from 06:00 (one GPU,
//! 45-50 minutes each), in a queue capped at 8 GPUs: two waves, the second waiting for the
//! first. `tideway dev` runs its fleet clock from 05:20 that day at 200x, with members that
//! report every 100 ms; the test submits each job when the federation's clock reaches its
//! trace time.
//!
//! What must match, and how closely:
//! - admissions per queue, and the order of admission (the federation's Assigned records;
//!   the simulator's starts, then submissions): exactly;
//! - per job, the live wait and completion time against the simulator's: within two hand-off
//!   lags. A hand-off (a job submitted or a quota freed, to the next job running) costs the
//!   live federation up to one status report (100 ms), one scheduling cycle (500 ms) and the
//!   agent's pull, about 2 s of real time on a loaded 2-core machine, i.e. 400 simulated
//!   seconds at 200x; a second-wave job sits behind two hand-offs, its predecessor's and its
//!   own. The simulator has no such lag (it decides at each event);
//! - the replay's figures (recorded submissions and run times through the simulator) against
//!   the simulator's own: within twice the largest submission offset plus a second. The
//!   members stamp starts and ends with the fleet clock, so the replayed run times are the
//!   trace's; only the submission instants differ, by the test's pacing error, and a shifted
//!   submission moves a job's wait, and its successor's, by at most that shift.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDateTime, Utc};
use tideway_api::WorkloadPhase;
use tideway_api::audit::AuditKind;
use tideway_api::client::{Client, ListQuery};

use crate::common::*;

const SCALE: f64 = 200.0;
const START_AT: &str = "2017-10-09T05:20:00Z";
const VC: &str = "6214e9";
const QUEUE: &str = "philly-6214e9";
const JOBS: usize = 16;
/// One hand-off's worth of live lag, in simulated seconds (see the module comment).
const HAND_OFF: f64 = 2.0 * SCALE;

const POLICY: &str = r#"apiVersion: tideway.dev/v1alpha1
kind: Policy
metadata: {name: philly-day}
spec:
  queues:
  - apiVersion: tideway.dev/v1alpha1
    kind: Queue
    metadata: {name: default}
    spec: {tenant: default}
  - apiVersion: tideway.dev/v1alpha1
    kind: Queue
    metadata: {name: philly-6214e9}
    spec:
      tenant: philly-6214e9
      classes: [training]
      quotas:
      - {flavor: H100, guaranteed: 8, max: 8}
  scheduler: {fairSharing: false, preemption: false}
"#;

struct Job {
    name: String,
    submit: DateTime<Utc>,
    runtime: i64,
}

fn trace_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/traces/philly/philly.csv"
    ))
}

/// The slice: the first jobs of the VC from 06:00 that day, in file order among equal times.
fn slice(path: &Path) -> Vec<Job> {
    let mut r = csv::Reader::from_path(path).expect("philly.csv");
    let mut rows: Vec<(NaiveDateTime, usize, i64)> = Vec::new();
    for (i, rec) in r.records().enumerate() {
        let rec = rec.expect("row");
        if &rec[4] != VC || &rec[2] != "1" {
            continue;
        }
        let Ok(at) = NaiveDateTime::parse_from_str(&rec[0], "%Y-%m-%d %H:%M:%S") else {
            continue;
        };
        let from = NaiveDateTime::parse_from_str("2017-10-09 06:00:00", "%Y-%m-%d %H:%M:%S")
            .expect("time");
        if at < from || at >= from + chrono::Duration::hours(1) {
            continue;
        }
        let secs = rec[1].parse::<f64>().expect("duration") as i64;
        rows.push((at, i, secs));
    }
    rows.sort();
    rows.into_iter()
        .take(JOBS)
        .enumerate()
        .map(|(i, (at, _, runtime))| Job {
            name: format!("philly-{i:02}"),
            submit: at.and_utc(),
            runtime,
        })
        .collect()
}

fn workload(j: &Job) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "tideway.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {
            "name": j.name,
            "annotations": {"tideway.dev/sim-runtime-seconds": j.runtime.to_string()}
        },
        "spec": {
            "queue": QUEUE,
            "class": "training",
            "podSets": [{"name": "w", "count": 1, "gpusPerPod": 1, "flavor": "H100"}]
        }
    })
}

/// (submit, start, end) in Unix seconds, per job name.
type Times = BTreeMap<String, (f64, f64, f64)>;

/// Names by (start, submission, name): the order of admission.
fn admission_order(t: &Times) -> Vec<String> {
    let mut v: Vec<(&String, &(f64, f64, f64))> = t.iter().collect();
    v.sort_by(|a, b| {
        (a.1.1, a.1.0, a.0)
            .partial_cmp(&(b.1.1, b.1.0, b.0))
            .expect("finite times")
    });
    v.into_iter().map(|(n, _)| n.clone()).collect()
}

fn simulate(dir: &Path, fleet: &Path, jobs: &[Job]) -> (Times, serde_json::Value) {
    let trace = dir.join("slice.jsonl");
    let lines: Vec<String> = jobs
        .iter()
        .map(|j| {
            let mut w = workload(j);
            w["submitAt"] = j.submit.to_rfc3339().into();
            w.to_string()
        })
        .collect();
    std::fs::write(&trace, lines.join("\n") + "\n").expect("trace");
    let policy = dir.join("sim-policy.yaml");
    std::fs::write(&policy, format!("{POLICY}simulator:\n  mode: scheduler\n")).expect("policy");
    let out = dir.join("sim");
    let run = std::process::Command::new(BIN)
        .args(["simulate", "--quiet", "--seed", "0", "--clusters"])
        .arg(fleet)
        .arg("--policy")
        .arg(&policy)
        .arg("--trace")
        .arg(format!("jsonl:{}", trace.display()))
        .arg("--out")
        .arg(&out)
        .output()
        .expect("tideway simulate runs");
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let mut times = Times::new();
    let mut r = csv::Reader::from_path(out.join("jobs.csv")).expect("jobs.csv");
    for rec in r.deserialize::<BTreeMap<String, String>>() {
        let rec = rec.expect("jobs.csv row");
        let n = |k: &str| rec[k].parse::<f64>().unwrap_or(f64::NAN);
        times.insert(rec["uid"].clone(), (n("submit"), n("start"), n("end")));
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).expect("summary"))
            .expect("summary.json");
    (times, summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_philly_slice_replayed_live_agrees_with_the_simulator() {
    let path = trace_path();
    if !path.exists() {
        eprintln!(
            "skipping: the Philly trace is not at {} (the traces live beside the repository)",
            path.display()
        );
        return;
    }
    let jobs = slice(&path);
    assert_eq!(jobs.len(), JOBS, "the slice");
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet = dir.path().join("fleet.yaml");
    let layout = |n: &str| format!("{}/deploy/dev/{n}.yaml", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(
        &fleet,
        format!(
            "clusters:\n- {{name: sim-eu, region: eu-west, layout: {}}}\n- {{name: sim-us, region: us-east, layout: {}}}\n- {{name: sim-ap, region: ap-south, layout: {}}}\n",
            layout("sim-eu"),
            layout("sim-us"),
            layout("sim-ap")
        ),
    )
    .expect("fleet");
    let (sim, summary) = simulate(dir.path(), &fleet, &jobs);
    assert_eq!(sim.len(), JOBS, "{summary}");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");

    let _guard = serial().await;
    let dev = DevProcess::start(
        dir.path(),
        &[
            "--time-scale",
            "200",
            "--start-at",
            START_AT,
            "--member-heartbeat-ms",
            "100",
        ],
        &[],
    );
    let token = dev.token().await;
    let c = Client::with_token(&dev.addr, Some(&token)).expect("client");
    let fleet_gpus = summary["fleetGpus"].as_u64().expect("fleetGpus");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.capacity(false).await.map(|v| v.fleet.total).unwrap_or(0) < fleet_gpus {
        assert!(
            Instant::now() < deadline,
            "the members did not all report\n{}",
            dev.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The rules, and with them an anchor between this machine's clock and the fleet's: the
    // version's audit record is stamped between the request and its answer.
    let sent = Instant::now();
    c.apply_raw(POLICY.as_bytes().to_vec(), true)
        .await
        .expect("policy applied");
    let answered = Instant::now();
    let applied = c
        .events(&[("kind", AuditKind::PolicyChanged.as_str().to_string())])
        .await
        .expect("events")
        .items
        .last()
        .map(|e| e.at)
        .expect("the policy's record");
    let anchor = sent + (answered - sent) / 2;
    let fleet_at = |t: DateTime<Utc>| {
        let ahead = (t - applied).num_milliseconds() as f64 / SCALE;
        anchor + Duration::from_secs_f64(ahead.max(0.0) / 1000.0)
    };
    assert!(
        Instant::now() < fleet_at(jobs[0].submit),
        "dev started too slowly: its clock passed the first submission ({}) before the test could submit\n{}",
        jobs[0].submit,
        dev.log_tail(20)
    );
    for j in &jobs {
        tokio::time::sleep_until(fleet_at(j.submit).into()).await;
        c.submit_raw(workload(j).to_string().into_bytes(), false, Some(&j.name))
            .await
            .expect("submit");
    }

    // Every job runs to its end.
    let deadline = Instant::now() + Duration::from_secs(120);
    let live = loop {
        let items = c
            .list(&ListQuery {
                queue: Some(QUEUE.into()),
                limit: Some(100),
                ..Default::default()
            })
            .await
            .expect("list")
            .items;
        let done = items.iter().filter(|w| {
            w.status
                .as_ref()
                .is_some_and(|s| s.phase == WorkloadPhase::Succeeded)
        });
        if done.count() == JOBS {
            break items;
        }
        assert!(
            Instant::now() < deadline,
            "not all succeeded: {:?}\n{}",
            items
                .iter()
                .map(|w| (&w.metadata.name, w.status.as_ref().map(|s| s.phase)))
                .collect::<Vec<_>>(),
            dev.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let submitted: BTreeMap<String, DateTime<Utc>> = c
        .events(&[("kind", AuditKind::Submitted.as_str().to_string())])
        .await
        .expect("events")
        .items
        .into_iter()
        .filter_map(|e| Some((e.workload?.into(), e.at)))
        .collect();
    let secs = |t: DateTime<Utc>| t.timestamp_millis() as f64 / 1000.0;
    let mut times = Times::new();
    for w in &live {
        let st = w.status.as_ref().expect("status");
        let name = w.metadata.name.clone();
        let sub = submitted.get(&name).copied().expect("a Submitted record");
        let (s, e) = (
            st.started_at.expect("started"),
            st.finished_at.expect("finished"),
        );
        times.insert(name, (secs(sub), secs(s), secs(e)));
    }
    let offset = jobs
        .iter()
        .map(|j| (times[&j.name].0 - secs(j.submit)).abs())
        .fold(0.0, f64::max);
    eprintln!("largest submission offset: {offset:.1} s");

    // Admissions per queue and their order.
    let sim_started = sim.values().filter(|t| t.1.is_finite()).count();
    assert_eq!(
        (times.len(), sim_started),
        (JOBS, JOBS),
        "admitted per queue"
    );
    assert_eq!(
        summary["queues"][QUEUE]["jobs"]["submitted"].as_u64(),
        Some(JOBS as u64),
        "{summary}"
    );
    // The federation's order of admission is its Assigned records' (when the members then
    // start the work depends on when each pulls it); the simulator's is its starts'.
    let assigned: Vec<String> = c
        .events(&[("kind", AuditKind::Assigned.as_str().to_string())])
        .await
        .expect("events")
        .items
        .into_iter()
        .filter_map(|e| e.workload.map(Into::into))
        .collect();
    assert_eq!(assigned, admission_order(&sim), "order of admission");

    // Per job: wait and completion time.
    let mut worst = (0.0f64, 0.0f64);
    for (name, l) in &times {
        let s = sim[name];
        let (lw, sw) = (l.1 - l.0, s.1 - s.0);
        let (lj, sj) = (l.2 - l.0, s.2 - s.0);
        worst = (worst.0.max((lw - sw).abs()), worst.1.max((lj - sj).abs()));
        let tol = 2.0 * HAND_OFF + offset;
        assert!(
            (lw - sw).abs() <= tol && (lj - sj).abs() <= tol,
            "{name}: live wait {lw} s, JCT {lj} s; simulated wait {sw} s, JCT {sj} s (tolerance {tol} s)\nlive {times:?}\nsimulated {sim:?}"
        );
    }
    eprintln!(
        "largest live-simulated difference: wait {:.0} s, JCT {:.0} s",
        worst.0, worst.1
    );
    // The queue cap makes the second wave wait about a run time: the agreement is not 0 = 0.
    let longest = sim.values().map(|t| t.1 - t.0).fold(0.0, f64::max);
    assert!(longest > 2000.0, "the slice must queue: {sim:?}");

    // The replay of the recorded history reproduces the simulator's own figures.
    let (ok, out, err) = tideway_with_config(
        &dir.path().join("cli-config"),
        &dev.addr,
        &[
            "policy",
            "dry-run",
            "-f",
            policy.to_str().expect("path"),
            "--replay",
            "24h",
            "--clusters",
            fleet.to_str().expect("path"),
            "-o",
            "json",
        ],
    );
    assert!(ok, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(r["replayed"], JOBS, "{r}");
    assert_eq!(r["notReplayable"], 0, "{r}");
    let q = r["queues"]
        .as_array()
        .and_then(|qs| qs.iter().find(|q| q["queue"] == QUEUE))
        .unwrap_or_else(|| panic!("{r}"));
    let sq = &summary["queues"][QUEUE];
    assert_eq!(q["jobs"], sq["jobs"]["submitted"], "{r}\n{sq}");
    let tol = 2.0 * offset + 1.0;
    for (replayed, simulated) in [
        ("waitP50Now", &sq["queueingDelay"]["p50"]),
        ("waitP95Now", &sq["queueingDelay"]["p95"]),
    ] {
        let (a, b) = (
            q[replayed].as_f64().expect("replayed"),
            simulated.as_f64().expect("simulated"),
        );
        eprintln!("{replayed}: replay {a} s, simulator {b} s");
        assert!(
            (a - b).abs() <= tol,
            "{replayed}: replay {a} s, simulator {b} s (tolerance {tol} s)\n{r}\n{sq}"
        );
    }
    assert_eq!(q["preemptionsNow"], sq["preemptions"], "{r}\n{sq}");
    // Same policy on both sides of the dry-run: the candidate changes nothing.
    assert_eq!(q["waitP95Now"], q["waitP95Candidate"], "{r}");
}
