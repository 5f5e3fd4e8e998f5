//! What a state digest walk costs after a scheduling cycle rewrote many pending reasons, on a
//! large backlog: the part of `cluster status` that `tideway bench scale` saw as its tail. A
//! measurement, run by hand on a release build (`cargo test --release -p tideway-federation
//! digest_walk_cost -- --ignored --nocapture`), not in CI: its figures depend on the machine.

use std::collections::BTreeMap;

use tideway_api::PendingReason;
use tideway_api::clock::{Clock, RealClock};

use super::*;
use crate::raft::types::TypeConfig;
use crate::scale_mix::measure::{env_or, submission, t};
use crate::state::command::Command;
use crate::state::scheduling::CycleDecisions;

/// A reason as the cycle writes it for a gang that fits nowhere on a fleet of 100 members
/// (the five clusters with the largest fits, `maxReasonClusters`' default).
fn capacity_reason(needed: u64, round: u32) -> PendingReason {
    PendingReason::InsufficientCapacity {
        flavor: "H100".into(),
        needed,
        largest_fit_per_cluster: (0..5)
            .map(|c| (format!("member-{c:03}"), (c + round) % 8))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[test]
#[ignore = "a measurement: run by hand with --release --ignored --nocapture"]
fn digest_walk_cost() {
    let n: u64 = env_or("DIGEST_COST_WORKLOADS", 200_000);
    let changed: u64 = env_or("DIGEST_COST_CHANGED", 12_000);
    let rounds: u32 = env_or("DIGEST_COST_ROUNDS", 6);
    let log_id = |i| openraft::testing::log_id::<TypeConfig>(1, 1, i);
    let mut d = StateMachineData::default();
    for i in 0..n {
        d.state_mut().apply(i + 1, submission(i));
    }
    assert_eq!(d.state.workloads.len() as u64, n);
    let mut index = n;
    d.last_applied = Some(log_id(index));
    let cache = DigestCache::default();
    let clock = RealClock;
    let started = clock.instant();
    let (first, _) = cache.resolve_timed(cache.source(&d)).expect("digest");
    println!(
        "{n} workloads: first digest {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    // What a snapshot without the workloads' sum costs a restart: every workload hashed.
    let mut copy = d.state.workloads.clone();
    let started = clock.instant();
    copy.restore_sum(None);
    println!(
        "{n} workloads: their sum from scratch {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(copy.digest_sum(), d.state.workloads.digest_sum());
    drop(copy);
    let names: Vec<String> = d.state.workloads.keys().map(|k| k.to_string()).collect();
    let step = (n / changed).max(1) as usize;
    let mut walks = Vec::new();
    for round in 0..rounds {
        // A cycle's reasons: every `step`-th workload, spread over the map as a real
        // backlog's heads are, a handful of distinct reasons among them.
        let mut reasons: Vec<(String, PendingReason)> = names
            .iter()
            .skip(round as usize % step)
            .step_by(step)
            .enumerate()
            .map(|(i, name)| (name.clone(), capacity_reason(1 << (i % 4), round)))
            .collect();
        // In the cycle's order (queue, priority, arrival), which is not the names' order: a
        // fixed shuffle.
        let len = reasons.len();
        for i in (1..len).rev() {
            let j = (i.wrapping_mul(2_654_435_761) ^ round as usize) % (i + 1);
            reasons.swap(i, j);
        }
        let decisions = CycleDecisions {
            reasons,
            ..Default::default()
        };
        index += 1;
        let applying = clock.instant();
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("cycle-apply".into())
                .spawn_scoped(s, || {
                    d.state_mut().apply(
                        index,
                        Command::ApplyCycle {
                            decisions: Box::new(decisions),
                            at: t(n as i64 / 1000 + 1),
                        },
                    )
                })
                .expect("thread")
                .join()
                .expect("apply")
        });
        let applied = applying.elapsed();
        d.last_applied = Some(log_id(index));
        // On a thread of its own, so that a profile can tell the walk from the set-up
        // (`perf report --comm digest-walk`).
        let source = cache.source(&d);
        let started = clock.instant();
        let (digest, timing) = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("digest-walk".into())
                .spawn_scoped(s, || cache.resolve_timed(source))
                .expect("thread")
                .join()
                .expect("walk")
        })
        .expect("digest");
        let wall = started.elapsed();
        let timing = timing.expect("walked");
        assert_ne!(digest, first);
        println!(
            "round {round}: apply {:.2} ms; digest {:.2} ms (walk {:.2} ms, rest {:.2} ms)",
            applied.as_secs_f64() * 1e3,
            wall.as_secs_f64() * 1e3,
            timing.walk.as_secs_f64() * 1e3,
            timing.rest.as_secs_f64() * 1e3
        );
        walks.push(timing.walk);
    }
    assert_eq!(
        cache.resolve(cache.source(&d)).expect("digest"),
        state_digest(&d.state).expect("digest")
    );
    walks.sort();
    println!(
        "walk after {changed} reasons: median {:.2} ms",
        walks[walks.len() / 2].as_secs_f64() * 1e3
    );
}
