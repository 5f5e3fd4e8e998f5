//! A network partition between real processes: the isolated leader cannot commit, the
//! majority elects a new leader and keeps serving, and after healing the minority converges.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tideway_api::client::{Client, ClientError};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_cannot_commit_majority_serves_and_heals() {
    let tc = cluster(3, &["--fault-injection"]).await;
    let addrs = tc.c.addrs();
    let mut acked = BTreeSet::new();
    for i in 0..20 {
        let name = format!("p-before-{i}");
        assert!(
            submit_until_acked(&addrs, i, &name, Instant::now() + Duration::from_secs(30)).await
        );
        acked.insert(name);
    }
    let old = tc.c.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    tc.c.isolate(old).await.expect("partition");
    let majority: Vec<String> =
        tc.c.nodes
            .iter()
            .filter(|(id, _)| **id != old)
            .map(|(_, n)| n.addr.clone())
            .collect();

    // The minority: a write to the isolated old leader is not acknowledged.
    let minority = Client::new(&tc.c.nodes[&old].addr).unwrap();
    let res = minority
        .submit_raw(
            workload_json("p-minority").into_bytes(),
            false,
            Some("p-minority"),
        )
        .await;
    match res {
        Err(ClientError::Problem(p)) => assert_eq!(p.status, 503, "{p:?}"),
        other => panic!("the minority acknowledged a write: {other:?}"),
    }

    // The majority elects a new leader and keeps serving writes and linearizable reads.
    for i in 0..20 {
        let name = format!("p-during-{i}");
        assert!(
            submit_until_acked(
                &majority,
                i,
                &name,
                Instant::now() + Duration::from_secs(30)
            )
            .await,
            "the majority did not serve {name}"
        );
        acked.insert(name);
    }
    let maj = Client::new(&majority[0]).unwrap();
    maj.get("p-during-0", false)
        .await
        .expect("linearizable read on the majority");

    // Heal: the old leader rejoins and converges; its uncommitted write is gone.
    tc.c.heal().await.expect("heal");
    let all =
        tc.c.wait_converged(Duration::from_secs(60))
            .await
            .expect("converge");
    assert_eq!(all.len(), 3);
    for a in &addrs {
        let n = assert_holds_exactly_once(a, &acked).await;
        assert_eq!(
            n,
            acked.len(),
            "{a} holds a write that was never acknowledged"
        );
    }
    let healed = Client::new(&tc.c.nodes[&old].addr).unwrap();
    assert!(healed.get("p-minority", false).await.is_err());
}
