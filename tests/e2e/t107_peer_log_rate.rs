//! A dead peer is a handful of log lines, not hundreds: the leader of a three-node cluster
//! whose follower was killed logs the first failure, then at most a line per peer every
//! 10 s with a count, and one line when the follower answers again after its restart.

use std::time::Duration;

use crate::common::*;

/// The leader log's WARN lines about node `peer` (at `addr`), whoever logged them: ours
/// (`peer=N`) and openraft's (`target=N`).
fn warn_lines_about<'a>(text: &'a str, peer: u64, addr: &str) -> Vec<&'a str> {
    let (ours, theirs) = (format!("peer={peer} "), format!("target={peer})"));
    text.lines()
        .filter(|l| l.contains(" WARN "))
        .filter(|l| l.contains(&ours) || l.contains(&theirs) || l.contains(addr))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_follower_is_logged_once_per_interval_and_its_return_once() {
    let mut tc = cluster(3, &[]).await;
    let leader =
        tc.c.wait_for_leader(Duration::from_secs(30))
            .await
            .expect("a leader");
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let addr = tc.c.nodes[&follower].addr.clone();
    let log = tc.c.dir().join(format!("node-{leader}.log"));
    let before = std::fs::read_to_string(&log).unwrap_or_default().len();

    tc.c.kill9(follower).expect("kill the follower");
    // The leader heartbeats every 100 ms in test clusters: a line per failure would be 100
    // or more in these 10 s, a line per 10 s is two or three.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let text = std::fs::read_to_string(&log).expect("the leader's log");
    let window = &text[before..];
    let lines = warn_lines_about(window, follower, &addr);
    assert!(
        !lines.is_empty(),
        "the first failure is logged at WARN:\n{window}"
    );
    assert!(
        lines.len() <= 5,
        "{} WARN lines about node {follower} in 10 s:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(
        lines.iter().all(|l| l.len() < 700),
        "lines an operator can read:\n{}",
        lines.join("\n")
    );
    assert!(
        lines[0].contains("raft peer unreachable"),
        "{}",
        lines.join("\n")
    );

    tc.c.restart(follower).await.expect("restart the follower");
    let recovered = format!("peer={follower} ");
    let text = log_within(
        &log,
        &["raft peer reachable again"],
        Duration::from_secs(60),
    )
    .await;
    let back: Vec<&str> = text[before..]
        .lines()
        .filter(|l| l.contains("raft peer reachable again") && l.contains(&recovered))
        .collect();
    assert_eq!(back.len(), 1, "one recovery line:\n{}", &text[before..]);
    assert!(back[0].contains(" INFO "), "{}", back[0]);
    assert!(back[0].contains("failures="), "{}", back[0]);
}
