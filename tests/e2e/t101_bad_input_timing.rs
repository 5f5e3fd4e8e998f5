//! Bad input is answered at once, and slow clients are cut off: a watch from a version no
//! node ever answered is a 400 naming `resourceVersion` (not a 503 to retry forever, and
//! never Raft's internal state), `/raft/watch` with a body is a 400 rather than a held
//! request, a request head never finished is closed at the header-read deadline, and one
//! address cannot hold more idle connections than the cap.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;
use tideway_testkit::ProcCluster;

use crate::common::{BIN, serial, workload_json};

const SECRET: &str = "t101-cluster-secret-0123456789abcdef";
const SECRET_HEADER: &str = "x-tideway-cluster-secret";
/// The header-read deadline the nodes run with: short for the test, long enough that a
/// connection still open a moment after it was accepted was not closed by the deadline.
const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
/// The idle connections one address may hold on a listener.
const IDLE_CAP: usize = 24;

/// Reads until the server closes the connection; answers when it did, and what it sent.
fn until_closed(mut s: TcpStream, limit: Duration) -> (Option<Duration>, Vec<u8>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while start.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return (Some(start.elapsed()), got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (Some(start.elapsed()), got),
        }
    }
    (None, got)
}

/// A watch of every workload from `rv`, waiting at most `timeout` s.
async fn watch(http: &reqwest::Client, base: &str, rv: u64, timeout: u64) -> reqwest::Response {
    http.get(format!(
        "{base}/v1/workloads?watch=true&resourceVersion={rv}&timeoutSeconds={timeout}"
    ))
    .timeout(Duration::from_secs(90))
    .send()
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_at_once_and_slow_clients_are_cut_off() {
    let _guard = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let mut c = ProcCluster::new(BIN, dir.path().join("cluster"));
    std::fs::create_dir_all(c.dir()).unwrap();
    c.peer_plane = true;
    c.extra_args = [
        "--cluster-secret-file",
        secret.to_str().unwrap(),
        "--header-read-timeout-ms",
        &HEADER_TIMEOUT.as_millis().to_string(),
        "--max-idle-connections-per-ip",
        &IDLE_CAP.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    c.add_node(1, None).await.unwrap();
    c.wait_for_leader(Duration::from_secs(30)).await.unwrap();
    let via = c.nodes[&1].addr.clone();
    c.add_node(2, Some(&via)).await.unwrap();
    c.add_node(3, Some(&via)).await.unwrap();
    c.wait_for_voters(3, Duration::from_secs(60)).await.unwrap();
    let leader = c.wait_for_leader(Duration::from_secs(30)).await.unwrap();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let http = tideway_api::http::client_builder().build().unwrap();
    let r = http
        .post(format!("{}/v1/workloads", c.url(leader)))
        .header("content-type", "application/json")
        .body(workload_json("t101-job"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap());

    // The version the federation is at, as a list answers it.
    let page: Value = watch(&http, &c.url(leader), 0, 1)
        .await
        .json()
        .await
        .unwrap();
    let now = page["resourceVersion"].as_u64().expect("a version");
    assert!(
        page["items"]
            .as_array()
            .is_some_and(|i| i.iter().any(|e| e["name"] == "t101-job")),
        "{page}"
    );

    // A version far beyond it: 400 naming the field, at once, on the leader and on a
    // follower (which asks the leader), and nothing of Raft's state in the answer.
    for id in [leader, follower] {
        let far = now + 1_000_000;
        let start = Instant::now();
        let r = watch(&http, &c.url(id), far, 30).await;
        let took = start.elapsed();
        let status = r.status().as_u16();
        let retry_after = r.headers().get("retry-after").cloned();
        let body = r.text().await.unwrap();
        println!("node {id}: watch from {far} answered {status} in {took:?}: {body}");
        assert_eq!(status, 400, "node {id}: {body}");
        assert!(
            took < Duration::from_secs(5),
            "node {id} took {took:?} to refuse a far-ahead version"
        );
        assert!(
            retry_after.is_none(),
            "a 400 is not retried: {retry_after:?}"
        );
        let p: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(p["errors"][0]["field"], "query:resourceVersion", "{p}");
        assert!(
            p["detail"].as_str().unwrap().contains(&far.to_string()),
            "{p}"
        );
        for internal in [
            "vote",
            "last_log",
            "latest:",
            "membership",
            "node_id",
            "id=",
        ] {
            assert!(
                !body.contains(internal),
                "node {id}'s answer shows internal state ({internal}): {body}"
            );
        }
    }
    // A version some node answered still watches as before.
    let r = watch(&http, &c.url(follower), now, 1).await;
    assert_eq!(r.status().as_u16(), 200);
    let page: Value = r.json().await.unwrap();
    assert!(page["resourceVersion"].as_u64().unwrap() >= now, "{page}");

    // `/raft/watch` with the secret and a junk body: 400 at once, not held for 8-20 s. The
    // leader is the node that holds a real (bodyless) watch.
    let peer = c.nodes[&leader].peer_listen.clone();
    let start = Instant::now();
    let r = http
        .post(format!("http://{peer}/raft/watch"))
        .header(SECRET_HEADER, SECRET)
        .body(r#"{"junk":[1,2,3]}"#)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let took = start.elapsed();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    println!("/raft/watch with a junk body: {status} in {took:?}: {body}");
    assert_eq!(status, 400, "{body}");
    assert!(took < Duration::from_secs(3), "held for {took:?}");
    assert!(body.contains("no request body"), "{body}");

    // Half-sent request heads, on the API and on the peer plane: closed at the deadline, not
    // before, and answered nothing a client could mistake for a response.
    let api = c.nodes[&follower].addr.clone();
    let peer = c.nodes[&follower].peer_listen.clone();
    let mut slow = Vec::new();
    for addr in [&api, &api, &api, &peer, &peer, &peer] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\nx-slow: ").as_bytes())
            .unwrap();
        slow.push(std::thread::spawn(move || {
            until_closed(s, HEADER_TIMEOUT + Duration::from_secs(20))
        }));
    }
    for (i, t) in slow.into_iter().enumerate() {
        let (closed, got) = t.join().unwrap();
        let got = String::from_utf8_lossy(&got).to_string();
        println!("half-sent head {i}: closed after {closed:?}, answered {got:?}");
        let closed = closed.expect("a half-sent head was never closed");
        assert!(
            closed >= HEADER_TIMEOUT - Duration::from_millis(500),
            "closed after {closed:?}, before the deadline"
        );
        assert!(
            closed < HEADER_TIMEOUT + Duration::from_secs(10),
            "closed only after {closed:?}"
        );
        assert!(!got.contains("200 OK"), "{got}");
    }

    // Idle connections from one address beyond the cap are closed at accept; the ones under
    // it stay until the deadline, and once they are gone the address is served again.
    let conns: Vec<TcpStream> = (0..IDLE_CAP + 16)
        .map(|_| TcpStream::connect(&api).unwrap())
        .collect();
    let checks: Vec<_> = conns
        .into_iter()
        .map(|s| std::thread::spawn(move || until_closed(s, Duration::from_millis(800)).0))
        .collect();
    let closed_early = checks.into_iter().filter_map(|t| t.join().unwrap()).count();
    println!(
        "{} idle connections, cap {IDLE_CAP}: {closed_early} closed at accept",
        IDLE_CAP + 16
    );
    assert!(
        closed_early >= 16,
        "only {closed_early} of {} closed with a cap of {IDLE_CAP}",
        IDLE_CAP + 16
    );
    assert!(
        closed_early <= 16 + 4,
        "{closed_early} closed before the deadline: the cap refused more than its excess"
    );
    // The held ones reach the deadline and close; the address is served again.
    tokio::time::sleep(HEADER_TIMEOUT + Duration::from_secs(1)).await;
    let r = http
        .get(format!("http://{api}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}
