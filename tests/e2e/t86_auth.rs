//! Authentication with real processes: a federation started with `--auth-tokens` answers 401
//! problem+json to a request without a valid bearer token and writes nothing; the CLI
//! (`TIDEWAY_TOKEN`), a joining node (`--token-file`) and an agent (`--token-file`) get in
//! with theirs; and a server refuses to listen beyond loopback without authentication.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::client::Client;

use crate::common::*;

const ADMIN: &str = "tw_admin_e2e_token";
const AGENT: &str = "tw_agent_e2e_token";
const ALICE: &str = "tw_alice_e2e_token";
const CAROL: &str = "tw_carol_e2e_token";

fn testdata(name: &str) -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/api/testdata/").to_string() + name
}

/// A training or inference workload for `queue` with `priority_class`, claiming to be
/// mallory's.
fn claimed(name: &str, queue: &str, class: &str, priority_class: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"{queue}","class":"{class}","priorityClass":"{priority_class}","user":"mallory","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
    .into_bytes()
}

fn sha256(s: &str) -> String {
    tideway_federation::server::auth::hash_token(s)
}

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

/// Runs the CLI with an explicit environment: no configuration file, the given token.
fn cli(addr: &str, token: Option<&str>, args: &[&str], home: &std::path::Path) -> (bool, String) {
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(args)
        .env("TIDEWAY_ADDR", addr)
        .env("TIDEWAY_CONFIG", home.join("no-config"))
        .env_remove("TIDEWAY_TOKEN");
    if let Some(t) = token {
        cmd.env("TIDEWAY_TOKEN", t);
    }
    let out = cmd.output().expect("run tideway");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_required_and_refusals_write_nothing() {
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n- {{subject: admin, groups: [system:admins], sha256: {}}}\n- {{subject: 'agent:sim-eu', sha256: {}}}\n- {{subject: alice, groups: ['queue:research', 'queue:default'], sha256: {}}}\n- {{subject: carol, groups: ['queue:research'], sha256: {}}}\n",
            sha256(ADMIN),
            sha256(AGENT),
            sha256(ALICE),
            sha256(CAROL)
        ),
    )
    .unwrap();
    let admin_file = files.path().join("admin.token");
    std::fs::write(&admin_file, format!("{ADMIN}\n")).unwrap();
    let agent_file = files.path().join("agent.token");
    std::fs::write(&agent_file, AGENT).unwrap();
    let (tokens_s, admin_s, agent_s) = (
        tokens.to_str().unwrap(),
        admin_file.to_str().unwrap(),
        agent_file.to_str().unwrap(),
    );

    // Two nodes: the second joins through the first with its token file.
    let mut tc = cluster_with_token(
        2,
        &[
            "--auth-tokens",
            tokens_s,
            "--token-file",
            admin_s,
            "--member-heartbeat-ms",
            "300",
        ],
        ADMIN,
    )
    .await;
    let addr = tc.c.addrs()[0].clone();
    let admin = Client::with_token(&addr, Some(ADMIN)).unwrap();
    let status = admin.cluster_status().await.unwrap();
    assert_eq!(
        status.voters.len(),
        2,
        "the second node joined with its token"
    );

    // No token, a wrong token: 401 problem+json naming the header; nothing is written.
    let before = settled_applied(&admin).await;
    let http = reqwest::Client::new();
    for token in [None, Some("tw_wrong")] {
        let mut req = http
            .post(format!("http://{addr}/v1/workloads"))
            .header("content-type", "application/json")
            .body(workload_json("sneaky"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{token:?}");
        assert!(resp.headers().contains_key("www-authenticate"));
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["errors"][0]["field"], "header:Authorization", "{body}");
    }
    let e = Client::new(&addr)
        .unwrap()
        .get("sneaky", false)
        .await
        .expect_err("401");
    assert!(e.to_string().contains("401"), "{e}");
    assert_eq!(
        admin.cluster_status().await.unwrap().last_applied,
        before,
        "a refusal wrote"
    );
    assert!(admin.get("sneaky", false).await.unwrap_err().is_not_found());
    // Liveness stays open for probes.
    let r = http
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    // The CLI the way a user runs it: with TIDEWAY_TOKEN it submits; without, it is told why.
    let manifest = files.path().join("w.json");
    std::fs::write(&manifest, workload_json("by-cli")).unwrap();
    let m = manifest.to_str().unwrap();
    let (ok, out) = cli(&addr, None, &["submit", "-f", m], files.path());
    assert!(!ok && out.contains("401"), "{out}");
    let (ok, out) = cli(&addr, Some(ADMIN), &["submit", "-f", m], files.path());
    assert!(ok, "{out}");
    assert!(out.contains("workload/by-cli created"), "{out}");

    // The workload's user is the authenticated subject, not the body's claim; the queue's
    // classes and the priority class's allowedUsers/allowedQueues hold at submission.
    for doc in ["queue.yaml", "priority-class.yaml"] {
        let (ok, out) = cli(
            &addr,
            Some(ADMIN),
            &["apply", "-f", &testdata(doc)],
            files.path(),
        );
        assert!(ok, "{out}");
    }
    let (w, _) = admin
        .submit_raw(
            claimed("mine", "default", "training", "normal"),
            false,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        w.spec.user.as_deref(),
        Some("admin"),
        "the body's user is not trusted"
    );
    let alice = Client::with_token(&addr, Some(ALICE)).unwrap();
    let carol = Client::with_token(&addr, Some(CAROL)).unwrap();
    let before = settled_applied(&admin).await;
    let refused = [
        (
            &alice,
            claimed("inf", "research", "inference", "normal"),
            "spec.class",
        ),
        (
            &carol,
            claimed("vip", "research", "training", "production"),
            "spec.priorityClass",
        ),
        (
            &alice,
            claimed("vip", "default", "training", "production"),
            "spec.priorityClass",
        ),
    ];
    for (client, body, field) in refused {
        let e = client
            .submit_raw(body, false, None)
            .await
            .expect_err("refused");
        let text = e.to_string();
        assert!(text.contains("400") && text.contains(field), "{text}");
    }
    assert_eq!(
        admin.cluster_status().await.unwrap().last_applied,
        before,
        "a refusal wrote"
    );
    let (w, created) = alice
        .submit_raw(
            claimed("vip", "research", "training", "production"),
            false,
            None,
        )
        .await
        .unwrap();
    assert!(created);
    assert_eq!(w.spec.user.as_deref(), Some("alice"));

    // Roles: 403 for what a credential does not open, and nothing written.
    let before = settled_applied(&admin).await;
    let e = carol
        .submit_raw(
            claimed("elsewhere", "default", "training", "normal"),
            false,
            None,
        )
        .await
        .expect_err("queue outside carol's scope");
    assert!(e.to_string().contains("403"), "{e}");
    let (ok, out) = cli(
        &addr,
        Some(CAROL),
        &["apply", "-f", &testdata("queue.yaml")],
        files.path(),
    );
    assert!(
        !ok && out.contains("403"),
        "a submitter applied policy: {out}"
    );
    let e = carol
        .cluster_join(&tideway_api::cluster::JoinRequest {
            id: 9,
            addr: "127.0.0.1:1".into(),
            peer_addr: None,
            promote: true,
        })
        .await
        .expect_err("a submitter joined a node");
    assert!(e.to_string().contains("403"), "{e}");
    let (ok, out) = cli(&addr, Some(CAROL), &["cancel", "vip"], files.path());
    assert!(
        !ok && out.contains("403"),
        "carol cancelled alice's workload: {out}"
    );
    let agent = Client::with_token(&addr, Some(AGENT)).unwrap();
    let e = agent
        .report_status(
            "sim-us",
            &tideway_api::agent::StatusReport {
                statuses: vec![],
                checkpoints: vec![],
            },
        )
        .await
        .expect_err("an agent reported for another cluster");
    assert!(e.to_string().contains("403"), "{e}");
    let rogue = tideway_api::agent::RegisterRequest {
        member: tideway_api::MemberCluster::new(
            "rogue",
            tideway_api::MemberClusterSpec::new("eu-west", vec![]),
        ),
        agent_version: None,
    };
    let e = agent
        .register_member(&rogue)
        .await
        .expect_err("an agent registered another cluster");
    assert!(e.to_string().contains("403"), "{e}");
    let e = agent
        .get("vip", false)
        .await
        .expect_err("an agent read tenant data");
    assert!(e.to_string().contains("403"), "{e}");
    assert_eq!(
        admin.cluster_status().await.unwrap().last_applied,
        before,
        "a 403 wrote"
    );
    let (ok, out) = cli(&addr, Some(ALICE), &["cancel", "vip"], files.path());
    assert!(ok, "alice cancels her own: {out}");
    // The audit shows who did it: the authenticated subjects, not the body's claim.
    let ev = admin.events(&[("workload", "vip".into())]).await.unwrap();
    let who: Vec<(String, String)> = ev
        .items
        .iter()
        .map(|e| (e.kind.as_str().to_string(), e.actor.to_string()))
        .collect();
    assert_eq!(
        who,
        vec![
            ("Submitted".to_string(), "alice".to_string()),
            ("Cancelled".to_string(), "alice".to_string())
        ]
    );
    let policy = admin
        .events(&[("kind", "policychanged".into())])
        .await
        .unwrap();
    assert!(policy.items.len() >= 2 && policy.items.iter().all(|e| e.actor == "admin"));

    // An agent with its token file registers and heartbeats.
    tc.c.add_agent(
        "sim-eu",
        "eu-west",
        &layout("sim-eu"),
        &["--heartbeat-ms", "300", "--token-file", agent_s],
    )
    .await
    .expect("agent");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let members = admin.members().await.unwrap();
        if members.items.iter().any(|m| m.metadata.name == "sim-eu") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not register: {members:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // No authentication beyond loopback unless explicitly allowed.
    let data = files.path().join("open");
    let out = std::process::Command::new(BIN)
        .args(["server", "--id", "1", "--listen", "0.0.0.0:0", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--auth-tokens") && err.contains("--insecure-allow-anonymous"),
        "{err}"
    );
}
