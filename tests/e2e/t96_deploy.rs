//! What `deploy/` ships for operators, checked with the tools they would use:
//! - the Prometheus alert rules: `promtool check rules` and `promtool test rules`;
//! - the alert rules and the Grafana dashboard name only metrics a live node exports;
//! - the Helm chart: `helm lint --strict`, `helm template`, and every rendered object
//!   round-tripped through the typed Kubernetes API (k8s-openapi, v1.33) so that a misspelt
//!   or misplaced field is caught; the agent's rendered config parsed by the agent's own type;
//! - the server's start script (chart and plain manifests): credentials from read-only Secret
//!   mounts, only flags `tideway server --help` knows, and the chart's script run for real.
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
        "Secret" => round_trip::<core::v1::Secret>(doc),
        "Namespace" => round_trip::<core::v1::Namespace>(doc),
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
            "federation.zoneAntiAffinity=required",
            "federation.replicas=5",
        ][..],
        &["federation.enabled=false", "agent.enabled=true"][..],
        &["insecure=true", "agent.enabled=true"][..],
        &[
            "federation.auth.existingSecret=mine",
            "federation.clusterSecret.existingSecret=ours",
            "agent.enabled=true",
            "agent.token.existingSecret=theirs",
        ][..],
    ] {
        let docs = render(sets);
        assert!(!docs.is_empty(), "{sets:?} renders nothing");
        for d in &docs {
            schema_check(d);
        }
    }

    // The federation: three replicas, one per node and (where the zones allow) per zone, on
    // volumes, behind a headless peer Service whose port is not the API's, and a budget that
    // keeps quorum.
    let docs = render(&["agent.enabled=true", "federation.peerListen=true"]);
    let sts = find(&docs, "StatefulSet", "tw");
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["spec"]["serviceName"], "tw-peers");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        "data"
    );
    let (required, preferred) = anti_affinity_keys(sts);
    assert_eq!(required, ["kubernetes.io/hostname"]);
    assert_eq!(preferred, ["topology.kubernetes.io/zone"]);
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
    let docs = render(&["federation.peerListen=false"]);
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

/// The topology keys of the federation pods' anti-affinity: (required, preferred).
fn anti_affinity_keys(sts: &Value) -> (Vec<String>, Vec<String>) {
    let anti = &sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    let keys = |terms: &Value, term: &dyn Fn(&Value) -> Value| -> Vec<String> {
        terms
            .as_array()
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| term(t)["topologyKey"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    (
        keys(
            &anti["requiredDuringSchedulingIgnoredDuringExecution"],
            &|t| t.clone(),
        ),
        keys(
            &anti["preferredDuringSchedulingIgnoredDuringExecution"],
            &|t| t["podAffinityTerm"].clone(),
        ),
    )
}

/// How many of `replicas` pods a scheduler can place on `nodes` (name, zone) when no two may
/// share a value of any `required` topology key; preferred terms never leave a pod Pending.
fn placeable(replicas: u64, required: &[String], nodes: &[(&str, &str)]) -> u64 {
    let mut taken: Vec<(&str, &str)> = Vec::new();
    let mut placed = 0;
    for _ in 0..replicas {
        let fits = nodes.iter().find(|(node, zone)| {
            taken.iter().all(|(n, z)| {
                required.iter().all(|k| match k.as_str() {
                    "kubernetes.io/hostname" => n != node,
                    "topology.kubernetes.io/zone" => z != zone,
                    other => panic!("an anti-affinity key this check does not know: {other}"),
                })
            })
        });
        if let Some(&(node, zone)) = fits {
            taken.push((node, zone));
            placed += 1;
        }
    }
    placed
}

#[test]
fn the_charts_defaults_schedule_on_two_zones_and_required_is_one_value_away() {
    let two_zones = [("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b")];
    let three_zones = [("n1", "a"), ("n2", "b"), ("n3", "c")];
    // Defaults: one per node required, the zone spread preferred; all three schedule on a
    // two-zone cluster.
    let docs = render(&[]);
    let sts = find(&docs, "StatefulSet", "tw");
    let (required, preferred) = anti_affinity_keys(sts);
    assert_eq!(required, ["kubernetes.io/hostname"]);
    assert_eq!(preferred, ["topology.kubernetes.io/zone"]);
    assert_eq!(placeable(3, &required, &two_zones), 3);
    // `required`: one per zone, which leaves the third Pending on two zones and places all
    // three on three.
    let docs = render(&["federation.zoneAntiAffinity=required"]);
    let sts = find(&docs, "StatefulSet", "tw");
    let (required, preferred) = anti_affinity_keys(sts);
    assert_eq!(
        required,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );
    assert!(preferred.is_empty(), "{preferred:?}");
    assert_eq!(placeable(3, &required, &two_zones), 2);
    assert_eq!(placeable(3, &required, &three_zones), 3);
    // A misspelt value is refused at render time, naming the value.
    let out = Command::new(helm())
        .args(["template", "tw"])
        .arg(repo().join("deploy/helm/tideway"))
        .args(["--set", "federation.zoneAntiAffinity=require"])
        .output()
        .expect("run helm");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("federation.zoneAntiAffinity"), "{err}");

    // The agent's federation address defaults to this release's own Service.
    let docs = render(&["agent.enabled=true"]);
    let file = find(&docs, "ConfigMap", "tw-agent")["data"]["agent.yaml"]
        .as_str()
        .unwrap();
    let v: Value = serde_saphyr::from_str(file).unwrap();
    assert_eq!(
        v["federation"],
        "http://tw.tideway-system.svc.cluster.local:7400"
    );
    let docs = render(&[
        "agent.enabled=true",
        "agent.config.federation=https://fed.example:7400",
    ]);
    let file = find(&docs, "ConfigMap", "tw-agent")["data"]["agent.yaml"]
        .as_str()
        .unwrap();
    let v: Value = serde_saphyr::from_str(file).unwrap();
    assert_eq!(v["federation"], "https://fed.example:7400");
}

/// Whether `.dockerignore` leaves `path` (relative, `/`-separated) out of the build context.
/// Its patterns are kept to the forms this understands: a path from the root, which excludes
/// what is under it too, and `**/` followed by a name or a `*.ext`, at any depth.
fn docker_ignored(patterns: &[String], path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let name_matches = |pat: &str, name: &str| match pat.strip_prefix('*') {
        Some(ext) => name.ends_with(ext),
        None => pat == name,
    };
    patterns.iter().any(|p| match p.strip_prefix("**/") {
        Some(name) => parts.iter().any(|part| name_matches(name, part)),
        None => path == p || path.starts_with(&format!("{p}/")),
    })
}

#[test]
fn the_image_build_context_leaves_out_build_output_and_tools() {
    let text = std::fs::read_to_string(repo().join(".dockerignore")).expect(".dockerignore");
    let patterns: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/').to_string())
        .collect();
    for p in &patterns {
        assert!(
            !p.starts_with('!') && !p.contains('?') && !p.contains('['),
            "a pattern this test cannot read: {p}"
        );
    }
    // What must stay out: build output, version control, installed packages, node data.
    for out in [
        "target",
        "target/debug/tideway",
        ".git",
        ".git/objects/pack",
        "tests/browser/node_modules/playwright-core/package.json",
        "deploy/helm/tools/node_modules/x",
        "deploy/helm/tools/bin/helm",
        "tmp/tw1/raft-log.redb",
        "node-1/raft-log.redb",
    ] {
        assert!(docker_ignored(&patterns, out), "{out} is sent to the build");
    }
    // What the build reads: the manifests, the sources and every file they include.
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "src/main.rs",
        "api/Cargo.toml",
        "federation/src/lib.rs",
        "docs/api.md",
        "deploy/dev/sim-eu.yaml",
        "deploy/helm/tools/package-lock.json",
        "tests/support/Cargo.toml",
        "api/testdata/policy.yaml",
    ] {
        assert!(
            !docker_ignored(&patterns, needed),
            "{needed} is needed by the build but excluded"
        );
    }
    // The context this leaves, walked: the sources, a few MB, not the gigabytes of target/.
    fn walk(root: &Path, rel: &str, patterns: &[String], total: &mut u64) {
        let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if docker_ignored(patterns, &path) {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(root, &path, patterns, total),
                Ok(t) if t.is_file() => *total += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut total = 0;
    walk(&repo(), "", &patterns, &mut total);
    assert!(total < 64 << 20, "the build context is {} MB", total >> 20);
}

/// The long flags `tideway server --help` lists: a flag renamed in src/cli.rs and not in the
/// manifests (or the reverse) fails the checks below.
fn server_flags() -> BTreeSet<String> {
    let help = run(Command::new(BIN).args(["server", "--help"]));
    let flags = flags_in(&help);
    for f in ["--id", "--listen", "--auth-tokens", "--cluster-secret-file"] {
        assert!(
            flags.contains(f),
            "`tideway server --help` lacks {f}:\n{help}"
        );
    }
    flags
}

/// Every `--flag` written in `text`.
fn flags_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("--") {
        let name: String = rest[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if !name.is_empty() {
            out.insert(format!("--{name}"));
        }
        rest = &rest[i + 2 + name.len()..];
    }
    out
}

/// The federation container's start script (`sh -c`) and the container itself.
fn start_script(docs: &[Value], name: &str) -> (String, Value) {
    let c = find(docs, "StatefulSet", name)["spec"]["template"]["spec"]["containers"][0].clone();
    let script = c["args"][0].as_str().expect("the start script").to_string();
    (script, c)
}

const SECURE: [&str; 3] = ["--auth-tokens", "--token-file", "--cluster-secret-file"];
const INSECURE: [&str; 2] = ["--insecure-allow-anonymous", "--insecure-peer-plane"];

/// Checks that each credential file the script names (`--flag PATH`) is mounted read-only
/// from the key of the expected Secret.
fn assert_mounted_from_secrets(script: &str, sts: &Value, secrets: &[(&str, &str)]) {
    let pod = &sts["spec"]["template"]["spec"];
    let mounts = pod["containers"][0]["volumeMounts"].as_array().unwrap();
    let volumes = pod["volumes"].as_array().expect("volumes");
    for (flag, secret) in SECURE.iter().zip(secrets) {
        let path = script
            .split_whitespace()
            .skip_while(|w| w != flag)
            .nth(1)
            .unwrap_or_else(|| panic!("{flag} has no path in:\n{script}"));
        let (dir, file) = path.rsplit_once('/').unwrap();
        let m = mounts
            .iter()
            .find(|m| m["mountPath"] == dir)
            .unwrap_or_else(|| panic!("{path} ({flag}) is not mounted"));
        assert_eq!(m["readOnly"], true, "{path} is mounted writable");
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .expect("the mount's volume");
        assert_eq!(v["secret"]["secretName"], secret.0, "{flag}");
        let items = v["secret"]["items"].as_array().unwrap();
        assert!(
            items
                .iter()
                .any(|i| i["path"] == file && i["key"] == secret.1),
            "{flag}: {path} is not key {} of {}",
            secret.1,
            secret.0
        );
    }
}

/// The federation must start where it is deployed: `tideway server` refuses a non-loopback
/// address without a token file and a cluster secret (or the explicit insecure flags), so
/// the chart and the plain manifests pass them, from Secrets mounted read-only, with flags
/// the server knows.
#[test]
fn the_manifests_start_the_server_with_credentials_and_known_flags() {
    let known = server_flags();
    let unknown = |script: &str| -> Vec<String> {
        flags_in(script)
            .into_iter()
            .filter(|f| !known.contains(f))
            .collect()
    };

    // The chart, by default: secure, peer plane on its own port.
    let docs = render(&["agent.enabled=true"]);
    let (script, _) = start_script(&docs, "tw");
    assert!(
        unknown(&script).is_empty(),
        "unknown flags {:?} in:\n{script}",
        unknown(&script)
    );
    let flags = flags_in(&script);
    for f in SECURE.iter().chain(&["--peer-listen", "--peer-advertise"]) {
        assert!(flags.contains(*f), "no {f} in:\n{script}");
    }
    for f in INSECURE {
        assert!(!flags.contains(f), "{f} by default:\n{script}");
    }
    let sts = find(&docs, "StatefulSet", "tw");
    assert_mounted_from_secrets(
        &script,
        sts,
        &[
            ("tw-auth", "tokens.yaml"),
            ("tw-auth", "join.token"),
            ("tw-cluster", "cluster.secret"),
        ],
    );
    // The chart makes the cluster secret (48 random characters) unless told to use another.
    let generated = find(&docs, "Secret", "tw-cluster")["data"]["cluster.secret"]
        .as_str()
        .expect("a generated cluster secret")
        .to_string();
    assert_eq!(generated.len(), 64, "48 bytes in base64: {generated}");
    assert_ne!(
        generated,
        find(&render(&[]), "Secret", "tw-cluster")["data"]["cluster.secret"]
            .as_str()
            .unwrap(),
        "not random"
    );
    let agent = &find(&docs, "Deployment", "tw-agent")["spec"]["template"]["spec"];
    let args: Vec<&str> = agent["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let at = args
        .iter()
        .position(|a| *a == "--token-file")
        .expect("agent --token-file");
    assert_eq!(args[at + 1], "/etc/tideway/token/token");
    assert!(
        agent["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "tw-agent-token"),
        "{agent}"
    );

    // Existing Secrets named in values: used, and none generated.
    let docs = render(&[
        "federation.auth.existingSecret=mine",
        "federation.clusterSecret.existingSecret=ours",
    ]);
    let (script, _) = start_script(&docs, "tw");
    assert_mounted_from_secrets(
        &script,
        find(&docs, "StatefulSet", "tw"),
        &[
            ("mine", "tokens.yaml"),
            ("mine", "join.token"),
            ("ours", "cluster.secret"),
        ],
    );
    assert!(
        docs.iter().all(|d| d["kind"] != "Secret"),
        "a Secret made anyway"
    );

    // insecure=true: the two explicit flags, no credentials, no Secrets.
    let docs = render(&["insecure=true", "agent.enabled=true"]);
    let (script, c) = start_script(&docs, "tw");
    assert!(
        unknown(&script).is_empty(),
        "unknown flags {:?} in:\n{script}",
        unknown(&script)
    );
    let flags = flags_in(&script);
    for f in INSECURE {
        assert!(flags.contains(f), "no {f} in:\n{script}");
    }
    for f in SECURE {
        assert!(!flags.contains(f), "{f} with insecure=true:\n{script}");
    }
    assert_eq!(c["volumeMounts"].as_array().unwrap().len(), 1, "{c}");
    assert!(docs.iter().all(|d| d["kind"] != "Secret"));
    let agent = find(&docs, "Deployment", "tw-agent");
    assert!(!agent.to_string().contains("--token-file"), "{agent}");

    // The plain manifests: the same flags, and every object matches the Kubernetes schema.
    let mut plain = Vec::new();
    for dir in ["deploy/kubernetes/federation", "deploy/kubernetes/agent"] {
        let dir = repo().join(dir);
        let k: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap(),
        )
        .unwrap();
        for file in k["resources"].as_array().unwrap() {
            let text = std::fs::read_to_string(dir.join(file.as_str().unwrap())).unwrap();
            for d in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
                if !d.is_null() {
                    schema_check(&d);
                    plain.push(d);
                }
            }
        }
    }
    let (script, _) = start_script(&plain, "tideway");
    assert!(
        unknown(&script).is_empty(),
        "unknown flags {:?} in:\n{script}",
        unknown(&script)
    );
    let flags = flags_in(&script);
    for f in SECURE.iter().chain(&["--peer-listen"]) {
        assert!(flags.contains(*f), "no {f} in deploy/kubernetes:\n{script}");
    }
    assert_mounted_from_secrets(
        &script,
        find(&plain, "StatefulSet", "tideway"),
        &[
            ("tideway-auth", "tokens.yaml"),
            ("tideway-auth", "join.token"),
            ("tideway-cluster", "cluster.secret"),
        ],
    );
    let agent = find(&plain, "Deployment", "tideway-agent");
    assert!(agent.to_string().contains("--token-file"), "{agent}");
}

/// A port no one listens on now.
fn free_port() -> u16 {
    let a = tideway_testkit::free_addr().unwrap();
    a.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// Runs a rendered start script as pod `tw-0` would, with the credential files and the data
/// volume under `dir`.
fn run_script(script: &str, dir: &Path, log: &Path) -> std::process::Child {
    let script = script
        .replace("/etc/tideway/", &format!("{}/", dir.display()))
        .replace("/var/lib/tideway", &dir.join("data").display().to_string());
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::fs::File::create(log).unwrap();
    Command::new("/bin/sh")
        .args(["-c", &script])
        .env("PATH", path)
        .env("POD_NAME", "tw-0")
        .env("POD_NAMESPACE", "tideway-system")
        .env("TIDEWAY_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("sh runs the start script")
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The chart's start script, run as it is (listening on every interface) with its Secrets as
/// files: the node starts, answers `/healthz`, requires the token on the API and the secret
/// on the peer plane. Without the credential flags the same script exits at start, so the
/// check would catch a chart that drops them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_start_script_starts_a_node_that_requires_credentials() {
    let _g = serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (api, peer) = (free_port(), free_port());
    let docs = render(&[
        &format!("federation.ports.api={api}"),
        &format!("federation.ports.peer={peer}"),
    ]);
    let (script, _) = start_script(&docs, "tw");

    let token = "tw_chart_admin_token_0123456789";
    let secret = "a-cluster-secret-of-enough-bytes";
    for d in ["auth", "cluster", "data"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join("auth/tokens.yaml"),
        format!(
            "tokens:\n- subject: admin\n  groups: [system:admins]\n  sha256: {}\n",
            tideway_federation::server::auth::hash_token(token)
        ),
    )
    .unwrap();
    std::fs::write(dir.join("auth/join.token"), format!("{token}\n")).unwrap();
    std::fs::write(dir.join("cluster/cluster.secret"), secret).unwrap();

    // The same script without its credential flags: refused at start.
    let bare: String = script
        .lines()
        .filter(|l| !SECURE.iter().any(|f| l.contains(f)))
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(bare, script);
    let log = dir.join("bare.log");
    let mut child = run_script(&bare, dir, &log);
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "started without credentials:\n{text}");
    assert!(text.contains("refusing to serve"), "{text}");
    std::fs::remove_dir_all(dir.join("data")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();

    let log = dir.join("node.log");
    let mut node = Killed(run_script(&script, dir, &log));
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{api}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            break;
        }
        if let Ok(Some(status)) = node.0.try_wait() {
            panic!(
                "the rendered server exited ({status}):\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no /healthz in 30 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let status = |r: reqwest::Response| r.status().as_u16();
    let url = format!("{base}/v1/cluster/status");
    let anon = status(http.get(&url).send().await.unwrap());
    let authed = status(http.get(&url).bearer_auth(token).send().await.unwrap());
    let peer_url = format!("http://127.0.0.1:{peer}/raft/vote");
    let no_secret = status(http.post(&peer_url).body("{}").send().await.unwrap());
    let with_secret = status(
        http.post(&peer_url)
            .header("x-tideway-cluster-secret", secret)
            .body("{}")
            .send()
            .await
            .unwrap(),
    );
    let tail = || std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(anon, 401, "{}", tail());
    assert_eq!(authed, 200, "{}", tail());
    assert_eq!(no_secret, 403, "{}", tail());
    // Past the secret check (Raft itself then refuses the empty vote).
    assert_ne!(with_secret, 403, "{}", tail());
}
