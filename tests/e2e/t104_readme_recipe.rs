//! The README's three-node recipe, run as written (`--join` and nothing more), gives three
//! voters: a joining node is promoted once it has caught up. `--learner` keeps a fourth node a
//! learner.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tideway_api::client::Client;

use crate::common::*;

/// The processes of the test, killed when it ends however it ends.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn server(dir: &std::path::Path, id: u64, addr: &str, extra: &[&str]) -> Child {
    let log = std::fs::File::create(dir.join(format!("n{id}.log"))).expect("log");
    Command::new(cluster_bin())
        .args([
            "server",
            "--id",
            &id.to_string(),
            "--listen",
            addr,
            "--data",
        ])
        .arg(dir.join(format!("tw{id}")))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn tideway server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_recipe_gives_three_voters_and_learner_stays_one() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let addrs: Vec<String> = (0..4)
        .map(|_| tideway_testkit::free_addr().expect("addr"))
        .collect();
    let mut procs = Procs(Vec::new());
    procs.0.push(server(dir.path(), 1, &addrs[0], &[]));
    let first = Client::new(&addrs[0]).expect("client");
    wait_for("node 1 to lead", Duration::from_secs(30), async || {
        first
            .cluster_status_brief()
            .await
            .ok()
            .filter(|s| s.leader == Some(1))
    })
    .await;
    for (id, addr) in [(2, &addrs[1]), (3, &addrs[2])] {
        procs
            .0
            .push(server(dir.path(), id, addr, &["--join", &addrs[0]]));
    }
    let st = wait_for("three voters", Duration::from_secs(60), async || {
        first
            .cluster_status_brief()
            .await
            .ok()
            .filter(|s| s.voters.len() == 3)
    })
    .await;
    assert_eq!(st.voters, vec![1, 2, 3], "{st:?}");
    assert!(st.learners.is_empty(), "{st:?}");

    // A fourth with --learner catches up and stays a learner.
    procs.0.push(server(
        dir.path(),
        4,
        &addrs[3],
        &["--join", &addrs[1], "--learner"],
    ));
    let fourth = Client::new(&addrs[3]).expect("client");
    let leader_applied = first
        .cluster_status_brief()
        .await
        .expect("status")
        .last_applied;
    wait_for(
        "the learner to catch up",
        Duration::from_secs(60),
        async || {
            fourth
                .cluster_status_brief()
                .await
                .ok()
                .filter(|s| s.last_applied >= leader_applied)
        },
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let st = first.cluster_status_brief().await.expect("status");
        assert_eq!(st.voters, vec![1, 2, 3], "{st:?}");
        assert_eq!(st.learners, vec![4], "{st:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Losing one voter leaves a quorum: the recipe is fault tolerant.
    procs.0[0].kill().expect("kill node 1");
    let second = Client::new(&addrs[1]).expect("client");
    let st = wait_for("a new leader", Duration::from_secs(30), async || {
        second
            .cluster_status_brief()
            .await
            .ok()
            .filter(|s| s.leader.is_some_and(|l| l != 1))
    })
    .await;
    assert!(st.leader == Some(2) || st.leader == Some(3), "{st:?}");
}
