//! An agent cut off from the federation (its only route is a TCP proxy the test cuts) for
//! longer than the wait timeout: its lease runs out and it stops its work, the member goes
//! NotReady, and its work moves to the other member. When the partition heals the agent does
//! not run the moved work again (it replays its assignments and finds them cancelled), the
//! member comes back Ready, and no workload is active on two members at any sampled instant.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tideway_api::MemberPhase;
use tideway_api::agent::LocalPhase;
use tideway_api::client::Client;
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

fn h100(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"360000"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}],"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
}

/// A TCP proxy to one federation node that the test can cut (every open connection is
/// dropped and new ones are closed at once) and heal.
struct Proxy {
    addr: String,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr").to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (c, k) = (cut.clone(), conns.clone());
        tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: the connection closes
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut up) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
                k.lock().unwrap().push(task.abort_handle());
            }
        });
        Self { addr, cut, conns }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Active (pending or running) copies per UID on both members.
async fn sample(tc: &TestCluster) -> BTreeMap<String, Vec<&'static str>> {
    let mut active: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for name in ["sim-eu", "sim-ap"] {
        let Ok(v) = tc.c.agent_local(name).await else {
            continue;
        };
        for w in v.workloads {
            if matches!(w.phase, LocalPhase::Running | LocalPhase::Pending) {
                active.entry(w.uid).or_default().push(name);
            }
        }
    }
    for (uid, on) in &active {
        assert!(on.len() <= 1, "{uid} active on {on:?} at once");
    }
    active
}

async fn member_phase(c: &Client, name: &str) -> Option<MemberPhase> {
    c.members().await.ok().and_then(|l| {
        l.items
            .into_iter()
            .find(|m| m.metadata.name == name)
            .and_then(|m| m.status.map(|s| s.phase))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_agent_stops_its_work_before_it_moves_and_never_runs_it_again() {
    // NotReady after 1.5 s of silence, lost 3 s after that; the agent's lease is 3 s.
    let mut tc = cluster(
        1,
        &[
            "--member-heartbeat-ms",
            "500",
            "--member-lost-after-ms",
            "3000",
        ],
    )
    .await;
    let addr = tc.c.addrs()[0].clone();
    let proxy = Proxy::start(addr.clone()).await;
    let agent_args = ["--heartbeat-ms", "500"];
    tc.c.add_agent_via(
        "sim-eu",
        "eu-west",
        &layout("sim-eu"),
        &agent_args,
        &proxy.addr,
    )
    .await
    .expect("agent sim-eu");
    tc.c.add_agent("sim-ap", "ap-south", &layout("sim-ap"), &agent_args)
        .await
        .expect("agent sim-ap");
    let c = Client::new(&addr).expect("client");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.members().await.map(|l| l.items.len()).unwrap_or(0) < 2 {
        assert!(Instant::now() < deadline, "agents never registered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // All work on sim-eu first.
    let (ok, _, err) = tideway(&addr, &["member", "cordon", "sim-ap"]);
    assert!(ok, "{err}");
    let names: Vec<String> = (0..2).map(|i| format!("p-{i}")).collect();
    for n in &names {
        c.submit_raw(h100(n).into_bytes(), false, Some(n))
            .await
            .expect("submit");
    }
    let where_running = |attempts: u32| {
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
                    (format!("{:?}", st.phase) == "Running" && st.attempts == attempts)
                        .then_some(st.cluster)
                        .flatten(),
                );
            }
            out
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while where_running(1).await != vec![Some("sim-eu".to_string()); 2] {
        assert!(Instant::now() < deadline, "never ran on sim-eu");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let uids: Vec<String> = sample(&tc).await.into_keys().collect();
    assert_eq!(uids.len(), 2, "both run on sim-eu");
    let (ok, _, err) = tideway(&addr, &["member", "uncordon", "sim-ap"]);
    assert!(ok, "{err}");

    // Cut sim-eu's agent off. Its work moves to sim-ap; at no sample is anything twice.
    let cut_at = Instant::now();
    proxy.cut();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut eu_stopped_at = None;
    loop {
        let s = sample(&tc).await;
        if eu_stopped_at.is_none() && !s.values().any(|on| on.contains(&"sim-eu")) {
            eu_stopped_at = Some(cut_at.elapsed());
        }
        if where_running(2).await == vec![Some("sim-ap".to_string()); 2] {
            break;
        }
        assert!(Instant::now() < deadline, "work never moved to sim-ap");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let moved_after = cut_at.elapsed();
    let stopped = eu_stopped_at.expect("sim-eu stopped its work before it moved");
    eprintln!("partition: sim-eu stopped its work after {stopped:?}; moved after {moved_after:?}");
    assert_eq!(
        member_phase(&c, "sim-eu").await,
        Some(MemberPhase::NotReady)
    );
    // The partition lasts a while longer; then it heals.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        sample(&tc).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.heal();

    // sim-eu comes back Ready and never runs the moved work again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while member_phase(&c, "sim-eu").await != Some(MemberPhase::Ready) {
        sample(&tc).await;
        assert!(Instant::now() < deadline, "sim-eu never came back Ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let s = sample(&tc).await;
        for uid in &uids {
            assert_eq!(
                s.get(uid).map(Vec::as_slice),
                Some(&["sim-ap"][..]),
                "{uid} after the partition healed: {s:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let eu = tc.c.agent_local("sim-eu").await.expect("sim-eu local view");
    assert!(
        eu.workloads
            .iter()
            .all(|w| !matches!(w.phase, LocalPhase::Running | LocalPhase::Pending)),
        "{:?}",
        eu.workloads
    );
    assert_eq!(
        where_running(2).await,
        vec![Some("sim-ap".to_string()); 2],
        "still on sim-ap, second attempt"
    );
}
