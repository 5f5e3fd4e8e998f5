//! What a new user hits (issue 56): `apply -f` of a multi-document file as one policy
//! version with an outcome per object, `get NAME` as a table row, a workload asking for a
//! flavor no member offers told so at submission (201 with `warnings`, printed by the CLI)
//! and by `explain`, a document sent to the wrong verb naming the right one, and a token made
//! by `tideway token create` accepted by a server started with the file it wrote.

use std::time::{Duration, Instant};

use tideway_api::client::Client;

use crate::common::{DevProcess, cluster_with_token, tideway, tideway_with_config};

const START_AT: &str = "2026-01-05T12:00:00+01:00";

const TWO_DOCS: &str = "\
# A queue and its priority class, in one file.
apiVersion: tideway.dev/v1alpha1
kind: Queue
metadata: {name: team-x}
spec:
  tenant: team-x
  quotas:
  - {flavor: H100, guaranteed: 8}
---
apiVersion: tideway.dev/v1alpha1
kind: PriorityClass
metadata: {name: urgent-x}
spec: {value: 500}
";

fn workload(name: &str, flavor: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"{flavor}"}}]}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_document_apply_get_rows_and_unknown_flavor_warnings() {
    let _serial = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = DevProcess::start(dir.path(), &["--start-at", START_AT], &[]);
    let token = dev.token().await;
    let config = dir.path().join("cli-config");
    let run = |args: &[&str]| tideway_with_config(&config, &dev.addr, args);
    let ok = |args: &[&str]| {
        let (ok, out, err) = run(args);
        assert!(
            ok,
            "tideway {args:?} failed: {out}{err}\n{}",
            dev.log_tail(30)
        );
        (out, err)
    };
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("utf-8").to_owned()
    };

    // The dev fleet's four flavors are known once every member has sent a digest.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (done, out, _) = run(&["capacity", "-o", "json"]);
        let flavors: Vec<String> = serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| {
                v["flavors"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|f| f["flavor"].as_str().map(String::from))
                        .collect()
                })
            })
            .unwrap_or_default();
        if done && flavors == ["A100", "H100", "L4", "L40S"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dev fleet never reported its flavors: {out}\n{}",
            dev.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Two documents: one outcome line each, one new policy version, applied by the admin.
    let versions = |out: &str| -> Vec<serde_json::Value> {
        serde_json::from_str::<serde_json::Value>(out).expect("history json")["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let before = versions(&ok(&["policy", "history", "-o", "json"]).0);
    let two = file("two.yaml", TWO_DOCS);
    let (out, _) = ok(&["apply", "-f", &two]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["queue/team-x created", "priorityclass/urgent-x created"],
        "{out}"
    );
    let after = versions(&ok(&["policy", "history", "-o", "json"]).0);
    assert_eq!(
        after.len(),
        before.len() + 1,
        "one version for both: {after:?}"
    );
    let newest = after.last().expect("a version");
    assert_eq!(newest["appliedBy"], "admin", "{newest}");
    let history = ok(&["policy", "history"]).0;
    let row = history.lines().last().unwrap_or_default();
    assert!(row.contains("admin"), "BY names the applier: {history}");
    // Again: nothing changes, and nothing says it did.
    let (out, _) = ok(&["apply", "-f", &two]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["queue/team-x unchanged", "priorityclass/urgent-x unchanged"],
        "{out}"
    );
    let again = versions(&ok(&["policy", "history", "-o", "json"]).0);
    assert_eq!(again.len(), after.len(), "no version for no change");
    // A webhook's first apply says created, its second unchanged.
    let hook = file(
        "hook.yaml",
        "apiVersion: tideway.dev/v1alpha1\nkind: Webhook\nmetadata: {name: hook-x}\nspec: {url: 'http://127.0.0.1:9/hook', events: [Preempted]}\n",
    );
    assert_eq!(
        ok(&["apply", "-f", &hook]).0.trim(),
        "webhook/hook-x created"
    );
    assert_eq!(
        ok(&["apply", "-f", &hook]).0.trim(),
        "webhook/hook-x unchanged"
    );
    // A Workload among the documents: refused whole, naming the document and the verb.
    let mixed = file(
        "mixed.yaml",
        &format!(
            "{TWO_DOCS}---\napiVersion: tideway.dev/v1alpha1\nkind: Workload\nmetadata: {{name: stray}}\nspec: {{queue: default, class: training, podSets: [{{name: w, count: 1, gpusPerPod: 8, flavor: H100}}]}}\n"
        ),
    );
    let (done, out, err) = run(&["apply", "-f", &mixed]);
    assert!(!done, "{out}");
    assert!(
        err.contains("documents[2].kind") && err.contains("submit"),
        "{err}"
    );
    // Several documents where one belongs: no library's function names.
    let (done, _, err) = run(&["submit", "-f", &two]);
    assert!(
        !done && err.contains("apply -f") && !err.contains("from_str"),
        "{err}"
    );
    // A Queue sent to `submit` says which verb takes it.
    let queue = file(
        "queue.yaml",
        "apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-y}\nspec: {tenant: team-y}\n",
    );
    let (done, _, err) = run(&["submit", "-f", &queue]);
    assert!(!done && err.contains("apply -f"), "{err}");

    // `get NAME` is a table: a header, then the row; the object with -o yaml as before.
    let fits = file("fits.json", &workload("fits", "H100"));
    ok(&["submit", "-f", &fits]);
    let (out, _) = ok(&["get", "fits"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("NAME") && l.contains("PHASE")),
        "{out}"
    );
    assert!(
        lines.get(1).is_some_and(|l| l.starts_with("fits ")),
        "{out}"
    );
    assert!(
        ok(&["get", "fits", "-o", "yaml"])
            .0
            .contains("kind: Workload")
    );
    // `list -o json|yaml` is one list object.
    let list: serde_json::Value =
        serde_json::from_str(&ok(&["list", "-o", "json"]).0).expect("list json");
    assert_eq!(list["kind"], "WorkloadList", "{list}");
    assert!(
        list["items"].as_array().is_some_and(|a| !a.is_empty()),
        "{list}"
    );
    assert!(ok(&["list", "-o", "yaml"]).0.contains("kind: WorkloadList"));

    // A flavor no member offers: accepted (201), with a warning naming the fleet's flavors.
    let http = tideway_api::http::client_builder()
        .build()
        .expect("http client");
    let resp = http
        .post(format!("http://{}/v1/workloads", dev.addr))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(workload("b200-http", "B200"))
        .send()
        .await
        .expect("submit");
    assert_eq!(resp.status().as_u16(), 201);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["metadata"]["name"], "b200-http", "{body}");
    let warning = body["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.contains("B200") && warning.contains("A100, H100, L4, L40S"),
        "{body}"
    );
    // A workload the fleet can run has no `warnings` at all: the answer is as before.
    let resp = http
        .post(format!("http://{}/v1/workloads", dev.addr))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(workload("h100-http", "H100"))
        .send()
        .await
        .expect("submit");
    assert_eq!(resp.status().as_u16(), 201);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert!(body.get("warnings").is_none(), "{body}");
    // The CLI prints it on standard error, as kubectl prints API warnings.
    let b200 = file("b200.json", &workload("b200-cli", "B200"));
    let (out, err) = ok(&["submit", "-f", &b200]);
    assert!(out.contains("workload/b200-cli created"), "{out}");
    assert!(
        err.contains("Warning:") && err.contains("B200") && err.contains("L40S"),
        "{err}"
    );
    // `explain` names the flavors the fleet has.
    let explain: serde_json::Value =
        serde_json::from_str(&ok(&["explain", "b200-cli", "-o", "json"]).0).expect("json");
    let summary = explain["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("B200") && summary.contains("A100, H100, L4, L40S"),
        "{explain}"
    );

    // `member drain --dry-run` lists what it would move and changes nothing; `capacity`
    // says in words what its largest-gang numbers mean.
    let (out, _) = ok(&["member", "drain", "sim-eu", "--dry-run"]);
    assert!(
        out.starts_with("member/sim-eu would be drained (dry run)"),
        "{out}"
    );
    let members = ok(&["members", "-o", "json"]).0;
    assert!(
        !members.contains("Draining"),
        "a dry run drained: {members}"
    );
    let (out, _) = ok(&["capacity"]);
    assert!(
        out.contains("on one node") && out.contains("in one rack"),
        "{out}"
    );

    // `usage` without --from reports the last 24 hours; `cluster snapshot` says what it did.
    ok(&["usage"]);
    let (out, _) = ok(&["cluster", "snapshot"]);
    assert!(out.starts_with("snapshot taken on "), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_token_create_is_accepted_by_a_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.yaml");
    let tokens_s = tokens.to_str().expect("utf-8");
    let create = |subject: &str, group: &str| {
        let (ok, out, err) = tideway(
            "127.0.0.1:1",
            &[
                "token",
                "create",
                "--subject",
                subject,
                "--group",
                group,
                "--file",
                tokens_s,
            ],
        );
        assert!(ok, "{out}{err}");
        let token = out.lines().next().unwrap_or_default().to_owned();
        assert!(token.starts_with("tw_") && token.len() > 40, "{out}");
        assert!(out.contains(&format!("\"subject\":\"{subject}\"")), "{out}");
        token
    };
    let admin = create("ops", "system:admins");
    let reader = create("alice", "queue:default");
    assert_ne!(admin, reader);
    let text = std::fs::read_to_string(&tokens).expect("the file was written");
    assert!(
        text.starts_with("tokens:\n") && !text.contains(&admin),
        "{text}"
    );

    let tc = cluster_with_token(1, &["--auth-tokens", tokens_s], &admin).await;
    let addr = tc.c.addrs()[0].clone();
    let c = Client::with_token(&addr, Some(&admin)).expect("client");
    assert!(c.queues().await.is_ok(), "the admin token is accepted");
    let alice = Client::with_token(&addr, Some(&reader)).expect("client");
    assert!(alice.queues().await.is_ok(), "the second token too");
    let (ok, out, err) = tideway_with_config(
        &dir.path().join("no-config"),
        &addr,
        &["queues", "--token", &admin],
    );
    assert!(ok && out.contains("default"), "{out}{err}");
    let stranger = Client::with_token(&addr, Some("tw_not-a-token")).expect("client");
    match stranger.queues().await {
        Err(tideway_api::client::ClientError::Problem(p)) => assert_eq!(p.status, 401),
        other => panic!("an unknown token must be refused: {other:?}"),
    }
}
