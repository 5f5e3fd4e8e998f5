//! A flapping member on real processes: an agent killed and restarted until its member has
//! come back from NotReady more often than the flap limit allows is quarantined (no new
//! work, `quarantinedUntil`, an audit record); the quarantine ends by itself on time, and a
//! second one, soon after, lasts twice as long and is lifted early by `member uncordon`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::MemberPhase;
use tideway_api::client::Client;

use crate::common::*;

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

/// The member's phase and `quarantinedUntil`, as `members` shows them.
async fn member(c: &Client) -> (MemberPhase, Option<chrono::DateTime<chrono::Utc>>, String) {
    let l = c.members().await.expect("members");
    let m = l
        .items
        .into_iter()
        .find(|m| m.metadata.name == "sim-eu")
        .expect("sim-eu is registered");
    let st = m.status.unwrap_or_default();
    (
        st.phase,
        st.quarantined_until,
        st.message.unwrap_or_default(),
    )
}

async fn wait_phase(c: &Client, want: MemberPhase, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let (phase, _, msg) = member(c).await;
        if phase == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: sim-eu is {phase:?} ({msg}), wanted {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Kills the agent until its member is NotReady and restarts it, twice: Ready after the
/// first return, Quarantined after the second.
async fn flap_twice(tc: &mut TestCluster, c: &Client) {
    for want in [MemberPhase::Ready, MemberPhase::Quarantined] {
        tc.c.kill9_agent("sim-eu").expect("kill");
        wait_phase(c, MemberPhase::NotReady, Duration::from_secs(20), "killed").await;
        tc.c.restart_agent("sim-eu").await.expect("restart");
        wait_phase(c, want, Duration::from_secs(20), "back").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_member_is_quarantined_then_released_on_time_or_by_uncordon() {
    let mut tc = cluster(
        1,
        &[
            "--member-heartbeat-ms",
            "300",
            // NotReady after 3 s of silence: a loaded machine's late heartbeat must not be
            // an extra flap.
            "--member-missed-heartbeats",
            "10",
            "--flap-limit",
            "1",
            "--flap-window-secs",
            "120",
            "--quarantine-secs",
            "8",
            "--quarantine-max-secs",
            "600",
        ],
    )
    .await;
    tc.c.add_agent(
        "sim-eu",
        "eu-west",
        &layout("sim-eu"),
        &["--heartbeat-ms", "300"],
    )
    .await
    .expect("agent");
    let addr = tc.c.addrs()[0].clone();
    let c = Client::new(&addr).expect("client");
    wait_phase(
        &c,
        MemberPhase::Ready,
        Duration::from_secs(30),
        "registered",
    )
    .await;

    // Two returns from NotReady within the window (each restarted agent registers again):
    // more than the limit of one.
    flap_twice(&mut tc, &c).await;
    let (_, until, msg) = member(&c).await;
    let until = until.expect("quarantinedUntil while quarantined");
    assert!(msg.contains("quarantined for 8 s"), "{msg}");
    let (ok, out, err) = tideway(&addr, &["members"]);
    assert!(ok && out.contains("Quarantined"), "{out}{err}");

    // A workload submitted now waits: the only member takes no new work.
    c.submit_raw(workload_json("q-1").into_bytes(), false, Some("q-1"))
        .await
        .expect("submit");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let w = c.get("q-1", false).await.expect("get");
    let st = w.status.unwrap_or_default();
    assert!(
        st.cluster.is_none() && format!("{:?}", st.phase) == "Pending",
        "placed on a quarantined member: {st:?}"
    );

    // It ends by itself, not before its time.
    wait_phase(&c, MemberPhase::Ready, Duration::from_secs(30), "released").await;
    assert!(chrono::Utc::now() >= until, "released before {until}");
    let (_, until_now, msg) = member(&c).await;
    assert_eq!(until_now, None);
    assert!(msg.contains("quarantine over"), "{msg}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = c
            .get("q-1", false)
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        if st.cluster.as_deref() == Some("sim-eu") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never placed after release: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Flapping again soon after: a quarantine twice as long, lifted early by an uncordon.
    flap_twice(&mut tc, &c).await;
    let (phase, _, msg) = member(&c).await;
    assert_eq!(phase, MemberPhase::Quarantined, "{msg}");
    assert!(msg.contains("quarantined for 16 s"), "doubled: {msg}");
    let (ok, _, err) = tideway(&addr, &["member", "uncordon", "sim-eu"]);
    assert!(ok, "{err}");
    let (phase, until, msg) = member(&c).await;
    assert_eq!(phase, MemberPhase::Ready, "{msg}");
    assert_eq!(until, None);

    // The audit trail has the quarantines and the release.
    let ev = c
        .events(&[("limit", "1000".to_string())])
        .await
        .expect("events");
    let quarantined = ev
        .items
        .iter()
        .filter(|e| e.evidence.contains("is Quarantined"))
        .count();
    assert_eq!(quarantined, 2, "{:#?}", ev.items);
    assert!(
        ev.items
            .iter()
            .any(|e| e.evidence.contains("quarantine over")),
        "{:#?}",
        ev.items
    );
}
