//! The CLI verbs, run the way a user runs them: the binary against a live cluster.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_submit_get_list_and_cluster_status() {
    let tc = cluster(3, &[]).await;
    let addr = tc.c.addrs()[1].clone();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/api/testdata/workload-llama-ft.yaml"
    );

    let (ok, out, err) = tideway(
        &addr,
        &["submit", "-f", example, "--idempotency-key", "cli-1"],
    );
    assert!(ok, "submit failed: {err}");
    assert!(out.contains("workload/llama-ft-1 created"), "{out}");
    let (ok, out, _) = tideway(
        &addr,
        &["submit", "-f", example, "--idempotency-key", "cli-1"],
    );
    assert!(ok && out.contains("unchanged"), "{out}");

    let (ok, out, err) = tideway(&addr, &["get", "llama-ft-1", "-o", "json"]);
    assert!(ok, "{err}");
    let w: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(w["spec"]["podSets"][0]["gpusPerPod"], 8);
    assert_eq!(w["status"]["phase"], "Pending");

    let (ok, out, _) = tideway(&addr, &["list"]);
    assert!(
        ok && out.lines().any(|l| l.starts_with("llama-ft-1")),
        "{out}"
    );
    let (ok, out, _) = tideway(&addr, &["list", "-o", "wide"]);
    assert!(ok && out.contains("UID"), "{out}");
    let (ok, out, _) = tideway(&addr, &["list", "-o", "yaml"]);
    assert!(ok && out.contains("name: llama-ft-1"), "{out}");

    let (ok, out, err) = tideway(&addr, &["cluster", "status", "-o", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["nodes"].as_array().map(|a| a.len()), Some(3));
    assert!(v["leader"].as_u64().is_some());
    for n in v["nodes"].as_array().unwrap() {
        assert!(n["status"]["lastApplied"].as_u64().unwrap_or(0) > 0, "{n}");
        assert!(n["status"]["stateDigest"].is_string(), "{n}");
    }
    // `?digest=false` answers the same without encoding the state; a bad value names it.
    let c = tideway_api::client::Client::new(&addr).unwrap();
    let full = c.cluster_status().await.unwrap();
    let brief = c.cluster_status_brief().await.unwrap();
    assert!(full.state_digest.is_some(), "{full:?}");
    assert_eq!(brief.state_digest, None, "{brief:?}");
    assert_eq!(brief.id, full.id);
    assert!(brief.last_applied >= full.last_applied, "{brief:?}");
    let bad = reqwest::Client::new()
        .get(format!("http://{addr}/v1/cluster/status?digest=maybe"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let body = bad.text().await.unwrap();
    assert!(body.contains("digest"), "{body}");
    let (ok, out, _) = tideway(&addr, &["cluster", "status"]);
    assert!(
        ok && out.contains("leader:") && out.contains("APPLIED"),
        "{out}"
    );
    // `--no-digest`: every node answers, none with a digest.
    let (ok, out, err) = tideway(&addr, &["cluster", "status", "--no-digest", "-o", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["nodes"].as_array().map(|a| a.len()), Some(3));
    for n in v["nodes"].as_array().unwrap() {
        assert!(n["status"]["lastApplied"].as_u64().unwrap_or(0) > 0, "{n}");
        assert!(
            n["status"].get("stateDigest").is_none_or(|d| d.is_null()),
            "{n}"
        );
    }

    // Remove a follower; the membership shrinks to two voters.
    let leader =
        tc.c.wait_for_leader(std::time::Duration::from_secs(10))
            .await
            .unwrap();
    let victim = tc.c.nodes.keys().copied().find(|id| *id != leader).unwrap();
    let (ok, _, err) = tideway(&addr, &["cluster", "remove", "--id", &victim.to_string()]);
    assert!(ok, "{err}");
    let s = tc.c.status(leader).await.unwrap();
    assert!(!s.voters.contains(&victim) && s.voters.len() == 2, "{s:?}");

    // A bad file: a clear error naming the field, non-zero exit.
    let bad = tc.c.dir().join("bad.yaml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(example)
            .unwrap()
            .replace("gpusPerPod: 8", "gpusPerPod: 0"),
    )
    .unwrap();
    // Through a node that is still a member: the removed one now refuses everything.
    let member = tc.c.nodes[&leader].addr.clone();
    let (ok, _, err) = tideway(&member, &["submit", "-f", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("spec.podSets[0].gpusPerPod"), "{err}");
}
