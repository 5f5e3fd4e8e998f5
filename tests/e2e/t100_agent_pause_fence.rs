//! An agent frozen (SIGSTOP) for longer than its member takes to be declared lost, while its
//! work moves to another member, then resumed (SIGCONT): from the first answer on, its local
//! view never lists as running a workload the federation moved. Requests sent while it is
//! frozen queue in its listener and are the first things it answers, ahead of the 100 ms
//! lease guard's next tick: before the agent checked its lease on every read, those answers
//! listed the moved work as running for about 50 ms (issue 58, item 3).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tideway_api::agent::LocalPhase;
use tideway_api::client::Client;

use crate::common::*;

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

fn small_h100(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"360000"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":2,"flavor":"H100"}}],"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
}

/// The uids the view lists as pending or running.
fn active(v: &tideway_api::agent::LocalView) -> BTreeSet<String> {
    v.workloads
        .iter()
        .filter(|w| matches!(w.phase, LocalPhase::Running | LocalPhase::Pending))
        .map(|w| w.uid.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_agent_never_shows_moved_work_running() {
    // NotReady after 1.5 s of silence, lost 2 s after that: the work moves no sooner than
    // 3.5 s after the last heartbeat; the agent's lease is 1.5 + 1 = 2.5 s.
    let mut tc = cluster(
        1,
        &[
            "--member-heartbeat-ms",
            "500",
            "--member-lost-after-ms",
            "2000",
            "--redispatch-per-second",
            "100",
            "--redispatch-per-member-per-second",
            "100",
        ],
    )
    .await;
    let addr = tc.c.addrs()[0].clone();
    let agent_args = ["--heartbeat-ms", "500"];
    for (name, region) in [("sim-eu", "eu-west"), ("sim-ap", "ap-south")] {
        tc.c.add_agent(name, region, &layout(name), &agent_args)
            .await
            .expect("agent");
    }
    let c = Client::new(&addr).expect("client");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.members().await.map(|l| l.items.len()).unwrap_or(0) < 2 {
        assert!(Instant::now() < deadline, "agents never registered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // All work on sim-eu first.
    let (ok, _, err) = tideway(&addr, &["member", "cordon", "sim-ap"]);
    assert!(ok, "{err}");
    let names: Vec<String> = (0..16).map(|i| format!("pause-{i}")).collect();
    for n in &names {
        c.submit_raw(small_h100(n).into_bytes(), false, Some(n))
            .await
            .expect("submit");
    }
    // (cluster, attempts) of each workload that runs.
    let placement = || {
        let c = &c;
        let names = &names;
        async move {
            let mut out = Vec::new();
            for n in names {
                let st = c
                    .get(n, false)
                    .await
                    .expect("get")
                    .status
                    .unwrap_or_default();
                out.push(
                    (format!("{:?}", st.phase) == "Running")
                        .then(|| st.cluster.map(|cl| (cl, st.attempts)))
                        .flatten(),
                );
            }
            out
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while placement().await != vec![Some(("sim-eu".to_string(), 1)); names.len()] {
        assert!(Instant::now() < deadline, "never ran on sim-eu");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let on_eu = active(&tc.c.agent_local("sim-eu").await.expect("sim-eu's view"));
    assert_eq!(on_eu.len(), names.len(), "all run on sim-eu: {on_eu:?}");
    let (ok, _, err) = tideway(&addr, &["member", "uncordon", "sim-ap"]);
    assert!(ok, "{err}");

    // Freeze sim-eu's agent until the federation has declared it lost and moved all of its
    // work to sim-ap.
    tc.c.signal_agent("sim-eu", "STOP").expect("SIGSTOP");
    let frozen = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    while placement().await != vec![Some(("sim-ap".to_string(), 2)); names.len()] {
        assert!(Instant::now() < deadline, "work never moved to sim-ap");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let moved_after = frozen.elapsed();
    let on_ap = active(&tc.c.agent_local("sim-ap").await.expect("sim-ap's view"));
    assert_eq!(on_ap, on_eu, "sim-ap runs exactly the moved work");

    // Samplers ask sim-eu's view while it is still frozen (their requests wait in its
    // listener) and then every few milliseconds for three seconds after it resumes.
    let listen = tc.c.agents["sim-eu"].listen.clone();
    let moved = Arc::new(on_eu);
    let resumed_at: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    let mut samplers = Vec::new();
    for _ in 0..4 {
        let (listen, moved, resumed_at) = (listen.clone(), moved.clone(), resumed_at.clone());
        samplers.push(tokio::spawn(async move {
            let client = Client::new(&listen).expect("client");
            let (mut answered, mut first) = (0usize, None);
            loop {
                if resumed_at
                    .get()
                    .is_some_and(|t| t.elapsed() > Duration::from_secs(3))
                {
                    return (answered, first);
                }
                if let Ok(v) = client.agent_local_view().await {
                    let at = resumed_at.get().map(|t| t.elapsed());
                    let twice: Vec<String> = active(&v).intersection(&moved).cloned().collect();
                    assert!(
                        twice.is_empty(),
                        "sim-eu lists moved work as running {at:?} after SIGCONT: {twice:?}"
                    );
                    answered += 1;
                    first = first.or(at);
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    tc.c.signal_agent("sim-eu", "CONT").expect("SIGCONT");
    let _ = resumed_at.set(Instant::now());
    let mut answered = 0;
    let mut first: Option<Duration> = None;
    for s in samplers {
        let (n, f) = s.await.expect("a sampler saw moved work running on sim-eu");
        answered += n;
        first = match (first, f) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    eprintln!(
        "pause: work moved {moved_after:?} after SIGSTOP; sim-eu answered {answered} samples \
         after SIGCONT, the first {first:?} after it, none listing moved work as running"
    );
    assert!(
        answered >= 20,
        "too few samples of sim-eu's view: {answered}"
    );

    // Afterwards the federation still places every workload on sim-ap (the resumed agent's
    // reports changed nothing), and sim-eu holds none of them active.
    assert_eq!(
        placement().await,
        vec![Some(("sim-ap".to_string(), 2)); names.len()]
    );
    let still = active(&tc.c.agent_local("sim-eu").await.expect("sim-eu's view"));
    assert!(still.is_empty(), "sim-eu still runs {still:?}");
}
