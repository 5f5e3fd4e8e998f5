//! How the leader's per-submission and per-cycle costs grow with the live state: a
//! measurement, run by hand (`cargo test -p tideway-federation scale_ -- --ignored
//! --nocapture`), not in CI: its figures depend on the machine. Each probe also asserts what
//! it measured is the real work (the counts it must see).

use chrono::{DateTime, TimeZone, Utc};
use tideway_api::clock::{Clock, RealClock};
use tideway_api::digest::{CapacityDigest, GpuCounts, PoolDigest};
use tideway_api::{
    MemberCluster, MemberClusterSpec, PodSet, PoolKind, Workload, WorkloadClass, WorkloadSpec,
};
use tideway_scheduler::{Decision, schedule};

use super::backlog::Backlog;
use super::cycle::{build_input, capture};
use crate::state::FederationState;
use crate::state::command::Command;

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + s, 0)
        .single()
        .expect("time")
}

fn workload(i: u64) -> Workload {
    let spec = WorkloadSpec::new(
        "default",
        WorkloadClass::Training,
        vec![PodSet::new("worker", 1, 1, "H100")],
    );
    let mut w = Workload::new(format!("w-{i}"), spec);
    w.metadata.uid = Some(format!("uid-{i}"));
    w
}

/// A state with one member and `n` workloads, every `assign_every`-th one assigned to it.
fn state(n: u64, assign_every: u64) -> (FederationState, u64) {
    let mut s = FederationState::default();
    s.apply(
        1,
        Command::RegisterMember {
            member: Box::new(MemberCluster::new(
                "a",
                MemberClusterSpec::new("eu", vec![]),
            )),
            agent_version: None,
            at: t(0),
            flaps: None,
        },
    );
    let mut index = 1;
    for i in 0..n {
        index += 1;
        s.apply(index, submit(i));
        if i % assign_every == 0 {
            index += 1;
            s.apply(
                index,
                Command::Assign {
                    workload: format!("w-{i}").as_str().into(),
                    cluster: "a".into(),
                    pool: None,
                    at: t(1),
                },
            );
        }
    }
    (s, index)
}

/// A member with 39 free 8-GPU H100 nodes (312 GPUs), as `tideway dev`'s fleet roughly is.
fn digest() -> CapacityDigest {
    let mut free_histogram = vec![0; 9];
    free_histogram[8] = 39;
    CapacityDigest {
        cluster: "a".into(),
        generated_at: t(2),
        pools: vec![PoolDigest {
            pool: "p0".into(),
            kind: PoolKind::Training,
            flavor: "H100".into(),
            counts: GpuCounts {
                total: 312,
                allocated: 0,
                unhealthy: 0,
                cordoned: 0,
                free_histogram,
            },
            domains: Vec::new(),
        }],
    }
}

fn submit(i: u64) -> Command {
    Command::SubmitWorkload {
        workload: Box::new(workload(i)),
        idempotency_key: format!("k-{i}"),
        at: t(1),
        digest: None,
    }
}

#[test]
#[ignore = "a measurement: run by hand with --ignored --nocapture"]
fn scale_costs_per_submission_and_per_cycle() {
    for n in [1_000u64, 10_000, 50_000] {
        // Apply of the last 1,000 submissions on top of n - 1,000 live workloads.
        let (mut s, mut index) = state(n - 1000, 2);
        let started = RealClock.instant();
        for i in n - 1000..n {
            index += 1;
            s.apply(index, submit(i));
        }
        let apply = started.elapsed();
        assert_eq!(s.workloads.len() as u64, n);

        // An agent's long-poll wakes once per applied entry and asks for what changed.
        let started = RealClock.instant();
        let mut seen = 0;
        for _ in 0..1000 {
            // The index itself: `assignments_after` also checks it against a scan in tests.
            seen += s.assignments.after("a", index).len();
        }
        let poll = started.elapsed();
        // What each poll cost before the journal: a scan of the cluster's records.
        let started = RealClock.instant();
        for _ in 0..100 {
            seen += s.assignments.scan_after("a", index).len();
        }
        let scan = started.elapsed() * 10;
        assert_eq!(seen, 0, "nothing changed after the last index");
        assert_eq!(s.assignments_after("a", 0).len() as u64, (n - 1000) / 2);

        // The cycle's input over n pending workloads (one runs). Before: the whole input
        // was built under the state lock. After: under the lock only the backlog copy's
        // refresh (here after 100 new submissions, a busy cycle interval) and the capture
        // of members, running work and policy; the rest after the lock is released.
        let (mut s, mut index) = state(n, u64::MAX);
        let started = RealClock.instant();
        let input = build_input(&s, |_| Some(digest()), t(3), 1);
        let build = started.elapsed();
        assert_eq!((input.pending.len() + input.running.len()) as u64, n);
        let mut backlog = Backlog::of(&s);
        for i in n..n + 100 {
            index += 1;
            s.apply(index, submit(i));
        }
        let started = RealClock.instant();
        let copied = backlog.refresh(&s);
        let captured = capture(&s, &backlog, |_| Some(digest()), t(3), 1);
        let held = started.elapsed();
        assert_eq!(copied, 100, "only the new submissions are copied");
        let started = RealClock.instant();
        let input = captured.finish(&backlog);
        let finish = started.elapsed();
        assert_eq!((input.pending.len() + input.running.len()) as u64, n + 100);
        let started = RealClock.instant();
        let out = schedule(&input);
        let cycle = started.elapsed();
        let assigned = out
            .decisions
            .iter()
            .filter(|d| matches!(d, Decision::Assign { .. }))
            .count();
        assert_eq!(
            assigned, 311,
            "a cycle starts as many as the free GPUs allow"
        );
        println!(
            "n={n}: lock held for the input: whole build {build:?}, refresh+capture {held:?} ({:.0}x less); built after the lock {finish:?}",
            build.as_secs_f64() / held.as_secs_f64().max(1e-9)
        );
        println!(
            "n={n}: apply last 1k submits {:?} ({:.1} us each); 1k empty assignment polls {:?} ({:.1} us each; by a scan {:.1} us each); schedule {:?}, {assigned} assigned",
            apply,
            apply.as_secs_f64() * 1e3,
            poll,
            poll.as_secs_f64() * 1e3,
            scan.as_secs_f64() * 1e3,
            cycle
        );
    }
}

/// Prints how long `f` takes, the mean of `reps` runs, and what it answered.
fn timed(what: &str, reps: u32, f: &dyn Fn() -> usize) {
    let started = RealClock.instant();
    let mut n = 0;
    for _ in 0..reps {
        n = f();
    }
    println!("{what}: {:?} per run ({n})", started.elapsed() / reps);
}

/// Assigned records in `s`, on every member.
fn assigned(s: &FederationState) -> usize {
    s.assignments.iter().map(|(_, r)| r.len()).sum()
}

#[test]
#[ignore = "a measurement: run by hand with --ignored --nocapture"]
fn scale_snapshot_parts() {
    let (s, _) = state(50_000, 50);
    assert_eq!(s.workloads.len(), 50_000);
    assert_eq!(assigned(&s), 1_000);
    fn encoded<T: serde::Serialize>(v: &T) -> usize {
        rmp_serde::to_vec_named(v).expect("encode").len()
    }
    timed("clone whole", 1, &|| s.clone().workloads.len());
    timed("encode whole", 1, &|| encoded(&s));
    timed("workloads", 1, &|| encoded(&s.workloads));
    timed("order", 1, &|| encoded(&s.order));
    timed("idempotency", 1, &|| encoded(&s.idempotency));
    timed("idem expiry", 1, &|| encoded(&s.idempotency_expiry));
    timed("uids", 1, &|| encoded(&s.uids));
    timed("assignments", 1, &|| encoded(&s.assignments));
    timed("scheduling", 1, &|| encoded(&s.scheduling));
    timed("audit", 1, &|| encoded(&s.audit));
    timed("usage", 1, &|| encoded(&s.usage));
}

#[test]
#[ignore = "a measurement: run by hand with --ignored --nocapture"]
fn scale_state_copy_parts() {
    let (mut s, mut index) = state(50_000, 33);
    assert_eq!(s.workloads.len(), 50_000);
    assert_eq!(assigned(&s), 1_516);
    // A hundred members, as the scale bench registers, each running a few of the workloads.
    for m in 1..100u64 {
        index += 1;
        s.apply(
            index,
            Command::RegisterMember {
                member: Box::new(MemberCluster::new(
                    format!("m-{m:03}"),
                    MemberClusterSpec::new("eu", vec![]),
                )),
                agent_version: None,
                at: t(0),
                flaps: None,
            },
        );
        for i in 0..5 {
            index += 1;
            s.apply(
                index,
                Command::Assign {
                    workload: format!("w-{}", m * 100 + i * 7 + 1).as_str().into(),
                    cluster: format!("m-{m:03}").as_str().into(),
                    pool: None,
                    at: t(1),
                },
            );
        }
    }
    assert_eq!(s.members.len(), 100);
    timed("whole state", 10, &|| s.clone().workloads.len());
    timed("assignments", 10, &|| s.assignments.clone().iter().count());
    timed("members", 10, &|| s.members.clone().len());
    timed("scheduling", 10, &|| s.scheduling.clone().placements.len());
    timed("policy", 10, &|| usize::from(s.policy.clone() == s.policy));
    timed("usage", 10, &|| usize::from(s.usage.clone() == s.usage));
    timed("tidal", 10, &|| usize::from(s.tidal.clone() == s.tidal));
    timed("workloads", 10, &|| s.workloads.clone().len());
    timed("queues", 10, &|| s.queues.clone().len());
    timed("audit", 10, &|| s.audit.clone().events.len());
    timed("order+idem+uids", 10, &|| {
        s.order.clone().len() + s.idempotency.clone().len() + s.uids.clone().len()
    });
}
