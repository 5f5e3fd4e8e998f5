//! Node health on real processes: `tideway agent fault` injects a GPU fault into a sim
//! agent's node; the node is cordoned and out of service, its work is evicted and placed
//! again on the healthy node. An ECC warning on that node then gives its work a checkpoint
//! notice; with no healthy node left the work waits, and the capacity view shows why.

use std::time::{Duration, Instant};

use tideway_api::WorkloadStatus;
use tideway_api::client::Client;

use crate::common::*;

const LAYOUT: &str = "cluster: sim-f
region: eu-west
zones:
  - name: z1
    racks:
      - name: r1
        nodeGroups:
          - { count: 2, gpusPerNode: 8, model: H100, pool: training, poolKind: training }
";

const JOB: &str = r#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"job","annotations":{"tideway.dev/sim-runtime-seconds":"360000"}},"spec":{"queue":"default","class":"training","podSets":[{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}],"checkpoint":{"intervalSeconds":600}}}"#;

async fn wait_for(
    c: &Client,
    what: &str,
    check: impl Fn(&WorkloadStatus) -> bool,
) -> WorkloadStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = c
            .get("job", false)
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        if check(&st) {
            return st;
        }
        assert!(Instant::now() < deadline, "not {what}: {st:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Injects `kind` on the node `job` runs on (the first of the two that reports it hit).
fn fault_where_it_runs(agent: &str, kind: &str) -> String {
    for node in ["r1-n0", "r1-n1"] {
        let (ok, out, err) = tideway(
            "127.0.0.1:1",
            &[
                "agent", "fault", "--agent", agent, "--node", node, "--kind", kind,
            ],
        );
        assert!(ok, "{err}");
        if out.contains("1 workloads affected") {
            return node.to_string();
        }
        assert!(out.contains("0 workloads affected"), "{out}");
    }
    panic!("the job runs on no node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_faults_cordon_the_node_and_move_its_work() {
    let mut tc = cluster(3, &["--member-heartbeat-ms", "500"]).await;
    let layout = tc.c.dir().join("sim-f.yaml");
    std::fs::write(&layout, LAYOUT).expect("layout");
    tc.c.add_agent(
        "sim-f",
        "eu-west",
        &layout,
        &["--heartbeat-ms", "500", "--time-scale", "30"],
    )
    .await
    .expect("agent");
    let agent = tc.c.agents["sim-f"].listen.clone();
    let c = Client::new(&tc.c.addrs()[0]).expect("client");
    let deadline = Instant::now() + Duration::from_secs(60);
    while c
        .submit_raw(JOB.as_bytes().to_vec(), false, Some("job"))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "could not submit");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for(&c, "running", |s| format!("{:?}", s.phase) == "Running").await;

    // A GPU fault: evicted now, placed again on the other node.
    let first = fault_where_it_runs(&agent, "gpu");
    let st = wait_for(&c, "running again", |s| {
        format!("{:?}", s.phase) == "Running" && s.attempts == 2
    })
    .await;
    assert_eq!(st.cluster.as_deref(), Some("sim-f"));

    // An ECC warning on the node it now runs on: a checkpoint notice, then evicted; with
    // both nodes out it waits.
    let second = fault_where_it_runs(&agent, "ecc");
    assert_ne!(first, second);
    wait_for(&c, "pending", |s| {
        format!("{:?}", s.phase) == "Pending" && s.attempts == 2
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = c.capacity(false).await.expect("capacity");
        let f = v
            .clusters
            .iter()
            .find(|x| x.cluster == "sim-f")
            .expect("sim-f");
        if f.capacity.cordoned == 8 && f.capacity.unhealthy == 8 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "digest never showed the faults: {:?}",
            f.capacity
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (ok, _, err) = tideway(
        "127.0.0.1:1",
        &[
            "agent", "fault", "--agent", &agent, "--node", "nope", "--kind", "gpu",
        ],
    );
    assert!(!ok && err.contains("nope"), "{err}");
}
