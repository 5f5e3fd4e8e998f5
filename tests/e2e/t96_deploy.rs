//! What `deploy/` ships for operators, checked with the tools they would use:
//! - the Prometheus alert rules: `promtool check rules` and `promtool test rules`;
//! - the alert rules and the Grafana dashboard name only metrics a live node exports;
//! - the Helm chart: `helm lint --strict`, `helm template`, and every rendered object
//!   round-tripped through the typed Kubernetes API (k8s-openapi, v1.33) so that a misspelt
//!   or misplaced field is caught; the agent's rendered config parsed by the agent's own type.
//!
//! promtool (Debian's `prometheus`) and helm (extracted by `scripts/setup.sh`) must be
//! installed: missing, the tests fail and say to run `scripts/setup.sh`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tool(name: &str, path: &Path) -> PathBuf {
    assert!(
        path.exists(),
        "{name} is not installed at {}: run scripts/setup.sh",
        path.display()
    );
    path.to_path_buf()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run tool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn promtool_checks_and_unit_tests_the_alert_rules() {
    let promtool = tool("promtool", Path::new("/usr/bin/promtool"));
    let dir = repo().join("deploy/prometheus");
    let out =
        run(Command::new(&promtool)
            .current_dir(&dir)
            .args(["check", "rules", "alerts.yaml"]));
    assert!(out.contains("SUCCESS: 6 rules found"), "{out}");
    let out =
        run(Command::new(&promtool)
            .current_dir(&dir)
            .args(["test", "rules", "alerts_test.yaml"]));
    assert!(out.contains("SUCCESS"), "{out}");
}

/// `tideway_*` metric names in a PromQL expression, without histogram and counter suffixes.
fn metric_names(expr: &str, into: &mut BTreeSet<String>) {
    let mut rest = expr;
    while let Some(i) = rest.find("tideway_") {
        let name: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[i + name.len()..];
        let base = ["_bucket", "_count", "_sum", "_total"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name);
        into.insert(base.to_string());
    }
}

fn grafana_dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join("deploy/grafana/tideway.json")).unwrap();
    serde_json::from_str(&text).expect("deploy/grafana/tideway.json is not valid JSON")
}

#[test]
fn grafana_dashboard_is_well_formed() {
    let d = grafana_dashboard();
    assert_eq!(d["uid"], "tideway-federation");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let panels = d["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for p in panels {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        for k in ["h", "w", "x", "y"] {
            assert!(
                p["gridPos"][k].as_u64().is_some(),
                "panel {id}: gridPos.{k}"
            );
        }
        assert!(p["gridPos"]["x"].as_u64().unwrap() + p["gridPos"]["w"].as_u64().unwrap() <= 24);
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {id} has no query");
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert!(expr.contains("tideway_"), "panel {id}: {expr}");
            assert_eq!(t["datasource"]["uid"], "${datasource}", "panel {id}");
            queries += 1;
        }
    }
    assert!(queries >= 12, "{queries} queries");
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "job"]);
}

/// The alerts and the dashboard are only as good as their metric names: each must be one a
/// live node serves at `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_and_dashboard_use_metrics_that_exist() {
    let mut used = BTreeSet::new();
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yaml")).unwrap(),
    )
    .unwrap();
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            metric_names(r["expr"].as_str().unwrap(), &mut used);
        }
    }
    let d = grafana_dashboard();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            metric_names(t["expr"].as_str().unwrap(), &mut used);
        }
    }
    assert!(used.len() >= 10, "{used:?}");

    // A labelled family is served once it has a series: give the node a member, a
    // submission and a scheduling cycle.
    let mut tc = cluster(1, &[]).await;
    let layout = repo().join("deploy/dev/sim-eu.yaml");
    tc.c.add_agent("sim-eu", "eu-west", &layout, &["--heartbeat-ms", "500"])
        .await
        .expect("agent");
    let addr = tc.c.addrs()[0].clone();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    assert!(
        submit_until_acked(std::slice::from_ref(&addr), 0, "metrics-1", deadline).await,
        "submission not acknowledged"
    );
    let mut missing = Vec::new();
    while std::time::Instant::now() < deadline {
        let text = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let exported: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect();
        missing = used.difference(&exported).cloned().collect();
        if missing.is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    panic!("named in deploy/ but not served at /metrics: {missing:?}");
}

fn helm() -> PathBuf {
    tool("helm", &repo().join("deploy/helm/tools/bin/helm"))
}

fn render(sets: &[&str]) -> Vec<Value> {
    let chart = repo().join("deploy/helm/tideway");
    let mut cmd = Command::new(helm());
    cmd.args(["template", "tw"])
        .arg(&chart)
        .args(["--namespace", "tideway-system"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = run(&mut cmd);
    serde_saphyr::from_multiple::<Value>(&out)
        .expect("rendered YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Where `back` (the typed round trip) differs from `orig` (the rendered object), ignoring the
/// `apiVersion` and `kind` that k8s-openapi writes on embedded objects (volume claim templates).
fn first_difference(back: &Value, orig: &Value, path: &str) -> Option<String> {
    match (back, orig) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, ov) in o {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    None => return Some(format!("{p}: not in the schema (dropped)")),
                    Some(bv) => {
                        if let Some(d) = first_difference(bv, ov, &p) {
                            return Some(d);
                        }
                    }
                }
            }
            b.keys()
                .find(|k| !o.contains_key(*k) && *k != "apiVersion" && *k != "kind")
                .map(|k| format!("{path}.{k}: added by the round trip"))
        }
        (Value::Array(b), Value::Array(o)) if b.len() == o.len() => b
            .iter()
            .zip(o)
            .enumerate()
            .find_map(|(i, (bv, ov))| first_difference(bv, ov, &format!("{path}[{i}]"))),
        _ if back == orig => None,
        _ => Some(format!("{path}: {orig} became {back}")),
    }
}

/// Deserializes into the typed object and back: a field the type does not have is dropped, so
/// any difference is a field Kubernetes would reject or ignore.
fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value) {
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{} {}: {e}", doc["kind"], doc["metadata"]["name"]));
    let back = serde_json::to_value(&typed).unwrap();
    if let Some(d) = first_difference(&back, doc, "") {
        panic!(
            "{} {} does not match the Kubernetes schema: {d}",
            doc["kind"], doc["metadata"]["name"]
        );
    }
}

#[test]
fn the_schema_check_catches_a_misplaced_field() {
    let mut doc: Value = serde_json::json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"clusterIP": "None", "ports": [{"name": "api", "port": 7400}]}
    });
    round_trip::<k8s_openapi::api::core::v1::Service>(&doc);
    doc["spec"]["ports"][0]["containerPort"] = 7400.into();
    let r = std::panic::catch_unwind(|| round_trip::<k8s_openapi::api::core::v1::Service>(&doc));
    let msg = r.expect_err("accepted a Service port with containerPort");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains(".spec.ports[0].containerPort"), "{msg}");
}

fn schema_check(doc: &Value) {
    use k8s_openapi::api::{apps, core, policy, rbac};
    match doc["kind"].as_str().unwrap_or("") {
        "StatefulSet" => round_trip::<apps::v1::StatefulSet>(doc),
        "Deployment" => round_trip::<apps::v1::Deployment>(doc),
        "Service" => round_trip::<core::v1::Service>(doc),
        "ConfigMap" => round_trip::<core::v1::ConfigMap>(doc),
        "ServiceAccount" => round_trip::<core::v1::ServiceAccount>(doc),
        "PodDisruptionBudget" => round_trip::<policy::v1::PodDisruptionBudget>(doc),
        "ClusterRole" => round_trip::<rbac::v1::ClusterRole>(doc),
        "ClusterRoleBinding" => round_trip::<rbac::v1::ClusterRoleBinding>(doc),
        "Role" => round_trip::<rbac::v1::Role>(doc),
        "RoleBinding" => round_trip::<rbac::v1::RoleBinding>(doc),
        other => panic!("the chart renders a {other} that this test cannot check"),
    }
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn helm_chart_lints_renders_and_matches_the_kubernetes_schema() {
    let chart = repo().join("deploy/helm/tideway");
    run(Command::new(helm()).args(["lint", "--strict"]).arg(&chart));
    run(Command::new(helm())
        .args(["lint", "--strict", "--set", "agent.enabled=true"])
        .arg(&chart));

    for sets in [
        &[][..],
        &["agent.enabled=true", "federation.peerListen=true"][..],
        &[
            "federation.zoneAntiAffinity=preferred",
            "federation.replicas=5",
        ][..],
        &["federation.enabled=false", "agent.enabled=true"][..],
    ] {
        let docs = render(sets);
        assert!(!docs.is_empty(), "{sets:?} renders nothing");
        for d in &docs {
            schema_check(d);
        }
    }

    // The federation: three replicas, one per node and zone, on volumes, behind a headless
    // peer Service whose port is not the API's, and a budget that keeps quorum.
    let docs = render(&["agent.enabled=true", "federation.peerListen=true"]);
    let sts = find(&docs, "StatefulSet", "tw");
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["spec"]["serviceName"], "tw-peers");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        "data"
    );
    let anti = &sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    let keys: Vec<&str> = anti
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["topologyKey"].as_str())
        .collect();
    assert_eq!(
        keys,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );
    let pod = &sts["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    let ports: Vec<(&str, u64)> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [("api", 7400), ("peer", 7401)]);
    let script = c["args"][0].as_str().unwrap();
    assert!(script.contains("--peer-listen 0.0.0.0:7401"), "{script}");
    assert!(script.contains("--listen 0.0.0.0:7400"), "{script}");
    assert!(script.contains("${domain}:7401\""), "{script}");
    let peers = find(&docs, "Service", "tw-peers");
    assert_eq!(peers["spec"]["clusterIP"], "None");
    assert_eq!(peers["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(
        find(&docs, "PodDisruptionBudget", "tw")["spec"]["maxUnavailable"],
        1
    );

    // The agent: may read Nodes, manage its Volcano and batch Jobs, read PodGroups and Kueue.
    let cr = find(&docs, "ClusterRole", "tw-agent-capacity");
    assert!(
        cr["rules"][0]["resources"]
            .as_array()
            .unwrap()
            .contains(&"nodes".into())
    );
    let role = find(&docs, "Role", "tw-agent-jobs");
    let groups: BTreeSet<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["apiGroups"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|g| g.as_str())
        })
        .collect();
    for g in [
        "batch",
        "batch.volcano.sh",
        "scheduling.volcano.sh",
        "kueue.x-k8s.io",
    ] {
        assert!(groups.contains(g), "the agent's Role lacks {g}");
    }
    let dep = find(&docs, "Deployment", "tw-agent");
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"],
        "tw-agent"
    );
    // The rendered agent file is one the agent accepts: its own type, unknown keys refused.
    let file = find(&docs, "ConfigMap", "tw-agent")["data"]["agent.yaml"]
        .as_str()
        .unwrap();
    let v: Value = serde_saphyr::from_str(file).unwrap();
    let kube: tideway_agent::kube_backend::config::KubeConfig =
        serde_json::from_value(v["kube"].clone()).expect("the agent's kube config");
    kube.validate().expect("a valid kube config");
    assert!(v["federation"].as_str().unwrap().starts_with("http://"));

    // Without peerListen, peers reach each other on the API port.
    let docs = render(&[]);
    let script =
        find(&docs, "StatefulSet", "tw")["spec"]["template"]["spec"]["containers"][0]["args"][0]
            .as_str()
            .unwrap()
            .to_string();
    assert!(!script.contains("--peer-listen"), "{script}");
    assert!(script.contains("${domain}:7400\""), "{script}");
    assert!(
        docs.iter().all(|d| d["kind"] != "Deployment"),
        "agent off by default"
    );
}
