//! A tidal quota schedule live on real processes: a day/night boundary a few seconds ahead,
//! the federation leader killed with SIGKILL just before it. The new leader applies the
//! transition exactly once; training that borrowed the inference side's GPUs at night gets
//! its checkpoint notice and is reclaimed after the grace; the queued inference replica
//! starts within the grace plus a few scheduling cycles.

use std::time::{Duration, Instant};

use chrono::{DateTime, Timelike, Utc};
use tideway_api::client::Client;
use tideway_api::{ScheduleTimeline, WorkloadPhase};

use crate::common::*;

const GRACE_SECONDS: u64 = 4;

/// One rack of four 8-GPU H100 nodes in a shared pool: both sides can use every GPU.
const LAYOUT: &str = "cluster: sim-tide
region: eu-west
zones:
  - name: eu-west-1a
    racks:
      - name: r1
        nodeGroups:
          - { count: 4, gpusPerNode: 8, model: H100, pool: shared, poolKind: shared }
";

fn hhmm(minute: u32) -> String {
    format!("{:02}:{:02}", (minute / 60) % 24, minute % 60)
}

/// Night until `boundary` (a whole minute), day for twelve hours from it.
fn schedule(boundary: DateTime<Utc>) -> String {
    let b = boundary.hour() * 60 + boundary.minute();
    let half = (b + 720) % 1440;
    format!(
        "apiVersion: tideway.dev/v1alpha1
kind: QuotaSchedule
metadata: {{name: tide}}
spec:
  timeZone: UTC
  windows:
  - name: day
    start: \"{day}\"
    end: \"{half}\"
    quotas:
    - {{pool: inference, flavor: H100, gpus: 24}}
    - {{pool: training, flavor: H100, gpus: 8}}
  - name: night
    start: \"{half}\"
    end: \"{day}\"
    quotas:
    - {{pool: inference, flavor: H100, gpus: 8}}
    - {{pool: training, flavor: H100, gpus: 24}}
  transition:
    leadTimeSeconds: 0
    checkpointGraceSeconds: {GRACE_SECONDS}
",
        day = hhmm(b),
        half = hhmm(half),
    )
}

fn workload(name: &str, class: &str, pods: u32) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"3600"}}}},"spec":{{"queue":"default","class":"{class}","podSets":[{{"name":"w","count":{pods},"gpusPerPod":8,"flavor":"H100"}}],"gang":{{"minCount":{pods}}},"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
}

async fn phase(c: &Client, name: &str) -> Option<WorkloadPhase> {
    c.get(name, true)
        .await
        .ok()
        .and_then(|w| w.status)
        .map(|s| s.phase)
}

async fn wait_phase(clients: &[Client], name: &str, want: WorkloadPhase, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        for c in clients {
            if phase(c, name).await == Some(want) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{name} never became {want:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn timeline(clients: &[Client]) -> ScheduleTimeline {
    for _ in 0..50 {
        for c in clients {
            if let Ok(t) = c.schedule_timeline("tide", 2).await {
                return t;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("no node answered the timeline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boundary_across_a_leader_kill_is_applied_once_and_hands_over() {
    let mut tc = cluster(3, &[]).await;
    let layout = tc.c.dir().join("sim-tide.yaml");
    std::fs::write(&layout, LAYOUT).unwrap();
    tc.c.add_agent("sim-tide", "eu-west", &layout, &["--heartbeat-ms", "500"])
        .await
        .expect("agent");
    let addrs = tc.c.addrs();
    let clients: Vec<Client> = addrs.iter().map(|a| Client::new(a).unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while clients[0]
        .capacity(false)
        .await
        .map(|v| v.fleet.total)
        .unwrap_or(0)
        < 32
    {
        assert!(Instant::now() < deadline, "no capacity reported");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The boundary: the next whole minute at least 25 s away.
    let now = Utc::now();
    let mut boundary = now
        .with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .unwrap()
        + chrono::Duration::minutes(1);
    if (boundary - now).num_seconds() < 25 {
        boundary += chrono::Duration::minutes(1);
    }
    let file = tc.c.dir().join("tide.yaml");
    std::fs::write(&file, schedule(boundary)).unwrap();
    let (ok, out, err) = tideway(&addrs[0], &["apply", "-f", file.to_str().unwrap()]);
    assert!(
        ok && out.contains("quotaschedule/tide created"),
        "{out}{err}"
    );
    let t = timeline(&clients).await;
    assert_eq!(t.status.active_window.as_deref(), Some("night"));
    assert_eq!(t.status.next_transition_at, Some(boundary));
    let (ok, out, _) = tideway(&addrs[1], &["schedule", "show", "tide", "--hours", "3"]);
    assert!(ok && out.contains("current window:  night"), "{out}");
    assert!(out.contains("pool/inference H100=8"), "{out}");

    // Night: training fills all 32 GPUs, 8 of them borrowed from the inference side.
    for i in 0..4 {
        let n = format!("train-{i}");
        clients[0]
            .submit_raw(workload(&n, "training", 1).into_bytes(), false, Some(&n))
            .await
            .expect("submit");
    }
    for i in 0..4 {
        wait_phase(
            &clients,
            &format!("train-{i}"),
            WorkloadPhase::Running,
            Duration::from_secs(20),
        )
        .await;
    }
    // An inference replica of 16 GPUs: beyond the night's 8, so it waits.
    clients[0]
        .submit_raw(
            workload("serve", "inference", 2).into_bytes(),
            false,
            Some("serve"),
        )
        .await
        .expect("submit");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        phase(&clients[0], "serve").await,
        Some(WorkloadPhase::Pending)
    );

    // Kill the leader two seconds before the boundary.
    let until = (boundary - Utc::now() - chrono::Duration::seconds(2))
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(until).await;
    let leader = tc.c.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    tc.c.kill9(leader).unwrap();
    let survivors: Vec<Client> = (1..=3u64)
        .filter(|id| *id != leader)
        .map(|id| Client::new(&addrs[id as usize - 1]).unwrap())
        .collect();

    // The new leader applies the transition once, at the boundary's instant.
    let deadline = Instant::now() + Duration::from_secs(30);
    let t = loop {
        let t = timeline(&survivors).await;
        if t.status.active_window.as_deref() == Some("day") {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the transition was never applied"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let applied = Utc::now();
    let to_day: Vec<_> = t
        .transitions
        .iter()
        .filter(|x| x.to.as_deref() == Some("day"))
        .collect();
    assert_eq!(to_day.len(), 1, "{:?}", t.transitions);
    assert_eq!(to_day[0].at, boundary);
    assert_eq!(t.status.last_transition_at, Some(boundary));
    eprintln!(
        "transition at {boundary} applied by the new leader at {}",
        to_day[0].applied_at
    );

    // Two training workloads get their checkpoint notice and leave after the grace; the
    // inference replica then starts. Bound: grace, plus failover, agent heartbeats and a
    // few cycles on a shared 2-core machine.
    wait_phase(
        &survivors,
        "serve",
        WorkloadPhase::Running,
        Duration::from_secs(GRACE_SECONDS + 20),
    )
    .await;
    let took = (Utc::now() - applied).to_std().unwrap_or_default();
    eprintln!("inference running {took:?} after the transition (grace {GRACE_SECONDS} s)");
    let mut reclaimed = 0;
    let mut running = 0;
    for i in 0..4 {
        let w = survivors[0].get(&format!("train-{i}"), true).await.unwrap();
        let st = w.status.unwrap_or_default();
        if st.phase == WorkloadPhase::Running {
            running += 1;
        }
        if st.phase == WorkloadPhase::Pending {
            reclaimed += 1;
        }
    }
    assert_eq!(reclaimed, 2, "two training workloads make room for 16 GPUs");
    assert_eq!(
        running, 2,
        "training keeps its day guarantee of 8 and no more"
    );

    // The killed node comes back and holds the same history: still one transition.
    tc.c.restart(leader).await.unwrap();
    tc.c.wait_converged(Duration::from_secs(20)).await.unwrap();
    let back = Client::new(&addrs[leader as usize - 1]).unwrap();
    let t = back.schedule_timeline("tide", 1).await.unwrap();
    assert_eq!(
        t.transitions
            .iter()
            .filter(|x| x.to.as_deref() == Some("day"))
            .count(),
        1
    );
}
