//! The peer plane apart from the API, over TLS, behind the cluster secret; joining nodes as
//! learners that only an admin promotes, and only once they have caught up.

use std::path::Path;
use std::time::{Duration, Instant};

use tideway_api::client::Client;
use tideway_testkit::ProcCluster;

use crate::common::{BIN, serial, workload_json};

const ADMIN: &str = "tw_admin_t83_token";
const CAROL: &str = "tw_carol_t83_token";
const SECRET: &str = "t83-cluster-secret-0123456789";
const SECRET_HEADER: &str = "x-tideway-cluster-secret";

/// A CA and a server certificate for 127.0.0.1 signed by it, as PEM files in `dir`.
fn make_certs(dir: &Path) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let write = |name: &str, body: String| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    (
        write("ca.pem", ca.pem()),
        write("node.pem", cert.pem()),
        write("node.key", key.serialize_pem()),
    )
}

fn node_log(c: &ProcCluster, id: u64) -> String {
    let log = std::fs::read_to_string(c.dir().join(format!("node-{id}.log"))).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_peer_plane_secret_and_admin_promotion() {
    let _guard = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    let (ca, cert, key) = make_certs(&files);
    tideway_api::http::trust_ca_file(Path::new(&ca)).unwrap();
    let secret = files.join("secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let wrong_secret = files.join("wrong-secret");
    std::fs::write(&wrong_secret, "not-the-cluster-secret-at-all\n").unwrap();
    let tokens = files.join("tokens.yaml");
    let h = tideway_federation::server::auth::hash_token;
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n- {{subject: admin, groups: [system:admins], sha256: {}}}\n- {{subject: carol, groups: ['queue:default'], sha256: {}}}\n",
            h(ADMIN),
            h(CAROL)
        ),
    )
    .unwrap();
    let admin_file = files.join("admin.token");
    std::fs::write(&admin_file, ADMIN).unwrap();

    let mut c = ProcCluster::new(BIN, dir.path().join("cluster"));
    std::fs::create_dir_all(c.dir()).unwrap();
    c.scheme = "https";
    c.peer_plane = true;
    c.learners_only = true;
    c.token = Some(ADMIN.to_string());
    let args = |secret: &Path| -> Vec<String> {
        [
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--ca-cert",
            &ca,
            "--cluster-secret-file",
            secret.to_str().unwrap(),
            "--auth-tokens",
            tokens.to_str().unwrap(),
            "--token-file",
            admin_file.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    c.extra_args = args(&secret);
    c.add_node(1, None).await.unwrap();
    c.wait_for_leader(Duration::from_secs(30)).await.unwrap();
    let via = c.nodes[&1].addr.clone();
    c.add_node(2, Some(&via)).await.unwrap();
    c.add_node(3, Some(&via)).await.unwrap();
    let admin = c.client(1).unwrap();

    // Joined nodes are learners until an admin promotes them.
    wait_until(
        "nodes 2 and 3 as learners",
        Duration::from_secs(60),
        || async {
            admin
                .cluster_status()
                .await
                .is_ok_and(|s| s.learners.contains(&2) && s.learners.contains(&3))
        },
    )
    .await;
    let s = admin.cluster_status().await.unwrap();
    assert_eq!(s.voters, [1], "joining made a voter: {s:?}");

    // A submitter cannot promote; an admin can, with the CLI, over TLS.
    let carol = Client::with_token(&c.url(1), Some(CAROL)).unwrap();
    let e = carol.cluster_promote(2).await.expect_err("carol promoted");
    assert!(e.to_string().contains("403"), "{e}");
    let out = std::process::Command::new(BIN)
        .args([
            "--ca-cert",
            &ca,
            "cluster",
            "promote",
            "2",
            "--addr",
            &c.url(1),
        ])
        .env("TIDEWAY_TOKEN", ADMIN)
        .env("TIDEWAY_CONFIG", files.join("no-config"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster promote: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        node_log(&c, 1)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("node 2 is a voter"));
    // Through a follower, which forwards to the leader over the peer plane.
    c.client(2).unwrap().cluster_promote(3).await.unwrap();
    c.wait_for_voters(3, Duration::from_secs(30)).await.unwrap();

    // The API works over TLS, and plaintext is not served.
    admin
        .submit_raw(
            workload_json("over-tls").into_bytes(),
            false,
            Some("over-tls"),
        )
        .await
        .unwrap();
    let http = tideway_api::http::client_builder().build().unwrap();
    assert!(
        http.get(format!("http://{via}/healthz"))
            .send()
            .await
            .is_err()
            || http
                .get(format!("http://{via}/healthz"))
                .send()
                .await
                .is_ok_and(|r| !r.status().is_success()),
        "the API answered plaintext"
    );

    // The public port does not serve the peer plane: 404 problem+json, even with the secret.
    for route in [
        "/raft/append",
        "/raft/vote",
        "/internal/propose",
        "/internal/join",
    ] {
        let r = http
            .post(format!("{}{route}", c.url(1)))
            .header(SECRET_HEADER, SECRET)
            .body(vec![0x80])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404, "{route}");
        assert_eq!(
            r.headers()["content-type"],
            "application/problem+json",
            "{route}"
        );
    }

    // On the peer port, a wrong or missing secret cannot append entries: 403 problem+json
    // before Raft sees the request, and the follower's log does not move.
    let leader = c.wait_for_leader(Duration::from_secs(30)).await.unwrap();
    let follower = *c.nodes.keys().find(|id| **id != leader).unwrap();
    c.wait_converged(Duration::from_secs(30)).await.unwrap();
    let before = c.status(follower).await.unwrap().last_log_index;
    let peer = format!("https://{}", c.nodes[&follower].peer_listen);
    for secret in [Some("wrong-secret-wrong-secret"), None] {
        let mut r = http.post(format!("{peer}/raft/append")).body(vec![0x80]);
        if let Some(s) = secret {
            r = r.header(SECRET_HEADER, s);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 403, "{secret:?}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    assert_eq!(c.status(follower).await.unwrap().last_log_index, before);
    // The right secret gets past the door (and the undecodable body is refused by Raft's
    // transport itself).
    let r = http
        .post(format!("{peer}/raft/append"))
        .header(SECRET_HEADER, SECRET)
        .body(vec![0x80])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);

    // A node without the secret cannot join, even with an admin token.
    c.extra_args = args(&wrong_secret);
    c.add_node(4, Some(&via)).await.unwrap();
    let log_has_refusal = || {
        let log = std::fs::read_to_string(c.dir().join("node-4.log")).unwrap_or_default();
        log.contains("403") && log.contains("cluster secret")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !log_has_refusal() {
        assert!(Instant::now() < deadline, "node 4: {}", node_log(&c, 4));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = admin.cluster_status().await.unwrap();
    assert!(!s.members.contains_key(&4), "node 4 got in: {s:?}");
    c.kill9(4).unwrap();

    // A node that cannot be reached joins as a learner at most, never as a voter: promoting
    // it is refused with problem+json, and the cluster still survives one failure.
    let r = http
        .post(format!("{}/v1/cluster/join", c.url(1)))
        .bearer_auth(ADMIN)
        .header(SECRET_HEADER, SECRET)
        .json(&serde_json::json!({"id": 9, "addr": "127.0.0.1:1", "peerAddr": "127.0.0.1:1"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let r = http
        .post(format!("{}/v1/cluster/promote", c.url(1)))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({"id": 9}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 409);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body = r.text().await.unwrap();
    assert!(body.contains("has not caught up"), "{body}");
    let s = admin.cluster_status().await.unwrap();
    assert_eq!(s.voters.len(), 3, "{s:?}");
    assert!(s.learners.contains(&9), "{s:?}");

    let leader = c.wait_for_leader(Duration::from_secs(30)).await.unwrap();
    let victim = *c
        .nodes
        .keys()
        .find(|id| **id != leader && **id <= 3)
        .unwrap();
    c.kill9(victim).unwrap();
    let alive = *c
        .nodes
        .keys()
        .find(|id| **id != victim && **id <= 3)
        .unwrap();
    let client = c.client(alive).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client
            .submit_raw(
                workload_json("after-failure").into_bytes(),
                false,
                Some("after-failure"),
            )
            .await
        {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no quorum after one failure: {e}\n{}",
                    node_log(&c, alive)
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
