//! How the CLI prints resources: tables for people, JSON and YAML for programs.

use serde::Serialize;
use tideway_api::Workload;
use tideway_api::capacity::{CapacitySummary, CapacityView};
use tideway_api::cluster::NodeStatus;

use crate::cli::OutputFormat;

pub fn print_one<T: Serialize>(v: &T, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(v)?),
        _ => print!("{}", serde_saphyr::to_string(v)?),
    }
    Ok(())
}

fn phase_of(w: &Workload) -> String {
    w.status
        .as_ref()
        .map(|s| format!("{:?}", s.phase))
        .unwrap_or_else(|| "-".into())
}

pub fn print_workloads(items: &[Workload], fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(items)?),
        OutputFormat::Yaml => print!("{}", serde_saphyr::to_string(&items)?),
        OutputFormat::Table => {
            println!(
                "{:<40} {:<16} {:<11} {:>5} {:<10}",
                "NAME", "QUEUE", "CLASS", "GPUS", "PHASE"
            );
            for w in items {
                println!(
                    "{:<40} {:<16} {:<11} {:>5} {:<10}",
                    w.metadata.name,
                    w.spec.queue,
                    format!("{:?}", w.spec.class).to_lowercase(),
                    w.spec.total_gpus(),
                    phase_of(w)
                );
            }
        }
        OutputFormat::Wide => {
            println!(
                "{:<40} {:<16} {:<11} {:<10} {:>5} {:<10} {:<10} {:<36} {:<25}",
                "NAME",
                "QUEUE",
                "CLASS",
                "PRIORITY",
                "GPUS",
                "PHASE",
                "CLUSTER",
                "UID",
                "SUBMITTED"
            );
            for w in items {
                let st = w.status.as_ref();
                println!(
                    "{:<40} {:<16} {:<11} {:<10} {:>5} {:<10} {:<10} {:<36} {:<25}",
                    w.metadata.name,
                    w.spec.queue,
                    format!("{:?}", w.spec.class).to_lowercase(),
                    w.spec.priority_class,
                    w.spec.total_gpus(),
                    phase_of(w),
                    st.and_then(|s| s.cluster.clone())
                        .unwrap_or_else(|| "-".into()),
                    w.metadata.uid.clone().unwrap_or_default(),
                    st.and_then(|s| s.submitted_at)
                        .map(|t| t.to_rfc3339())
                        .unwrap_or_default(),
                );
            }
        }
    }
    Ok(())
}

pub fn print_cluster(
    here: &NodeStatus,
    nodes: &[(u64, String, Result<NodeStatus, String>)],
    fmt: OutputFormat,
) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        let v = serde_json::json!({
            "leader": here.leader,
            "term": here.term,
            "voters": here.voters,
            "learners": here.learners,
            "nodes": nodes.iter().map(|(id, addr, st)| match st {
                Ok(s) => serde_json::json!({"id": id, "addr": addr, "reachable": true, "status": s}),
                Err(e) => serde_json::json!({"id": id, "addr": addr, "reachable": false, "error": e}),
            }).collect::<Vec<_>>(),
        });
        return print_one(&v, fmt);
    }
    println!(
        "leader: {}   term: {}",
        here.leader
            .map(|l| l.to_string())
            .unwrap_or_else(|| "none".into()),
        here.term
    );
    println!(
        "{:<4} {:<22} {:<9} {:<10} {:>10} {:>10} {:>10} {:<18}",
        "ID", "ADDR", "ROLE", "STATE", "LAST LOG", "APPLIED", "SNAPSHOT", "DIGEST"
    );
    for (id, addr, st) in nodes {
        let role = if here.voters.contains(id) {
            "voter"
        } else {
            "learner"
        };
        match st {
            Ok(s) => println!(
                "{:<4} {:<22} {:<9} {:<10} {:>10} {:>10} {:>10} {:<18}",
                id,
                addr,
                role,
                s.state,
                s.last_log_index
                    .map(|v| v.to_string())
                    .unwrap_or("-".into()),
                s.last_applied.map(|v| v.to_string()).unwrap_or("-".into()),
                s.snapshot.map(|v| v.to_string()).unwrap_or("-".into()),
                s.state_digest
            ),
            Err(e) => println!("{id:<4} {addr:<22} {role:<9} unreachable: {e}"),
        }
    }
    Ok(())
}

fn cap_row(label: &str, c: &CapacitySummary, extra: &str) {
    println!(
        "{:<34} {:>7} {:>9} {:>7} {:>9} {:>8} {}",
        label, c.total, c.allocated, c.free, c.unhealthy, c.cordoned, extra
    );
}

pub fn print_capacity(v: &CapacityView, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    println!(
        "{:<34} {:>7} {:>9} {:>7} {:>9} {:>8} DETAIL",
        "SCOPE", "TOTAL", "ALLOCATED", "FREE", "UNHEALTHY", "CORDONED"
    );
    cap_row("fleet", &v.fleet, "");
    for r in &v.regions {
        cap_row(&format!("region/{}", r.region), &r.capacity, "");
    }
    for f in &v.flavors {
        cap_row(&format!("flavor/{}", f.flavor), &f.capacity, "");
    }
    for c in &v.clusters {
        cap_row(
            &format!("cluster/{}", c.cluster),
            &c.capacity,
            &format!("{:?} in {}", c.phase, c.region),
        );
        for p in &c.pools {
            let g = &p.largest_gang;
            cap_row(
                &format!("  pool/{}/{}", p.pool, p.flavor),
                &p.capacity,
                &format!(
                    "frag {:.0}%  largest gang of {}-GPU pods: node {} rack {} zone {}",
                    p.fragmentation * 100.0,
                    g.pod_gpus,
                    g.node,
                    g.rack,
                    g.zone
                ),
            );
            if fmt == OutputFormat::Wide {
                for d in &p.domains {
                    cap_row(
                        &format!("    {}/{}", d.level.as_str(), d.name),
                        &d.capacity,
                        "",
                    );
                }
            }
        }
    }
    println!("fragmentation: {}", v.fragmentation_definition);
    Ok(())
}

pub fn print_members(v: &serde_json::Value, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    println!(
        "{:<24} {:<14} {:<10} {:<28} MESSAGE",
        "NAME", "REGION", "PHASE", "LAST HEARTBEAT"
    );
    for m in v["items"].as_array().into_iter().flatten() {
        println!(
            "{:<24} {:<14} {:<10} {:<28} {}",
            m["metadata"]["name"].as_str().unwrap_or("-"),
            m["spec"]["region"].as_str().unwrap_or("-"),
            m["status"]["phase"].as_str().unwrap_or("-"),
            m["status"]["lastHeartbeat"].as_str().unwrap_or("-"),
            m["status"]["message"].as_str().unwrap_or(""),
        );
    }
    Ok(())
}

pub fn print_explain(v: &serde_json::Value, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    println!(
        "workload:  {} ({})",
        v["workload"].as_str().unwrap_or("?"),
        v["uid"].as_str().unwrap_or("")
    );
    println!("phase:     {}", v["phase"].as_str().unwrap_or("?"));
    if let Some(c) = v["cluster"].as_str() {
        println!("cluster:   {c}");
    }
    println!("summary:   {}", v["summary"].as_str().unwrap_or(""));
    if let Some(r) = v["pendingReason"].get("type").and_then(|t| t.as_str()) {
        println!("reason:    {r}  {}", v["pendingReason"]);
    }
    if let Some(d) = v["decision"].as_str() {
        println!(
            "decision:  {d} (cycle at {})",
            v["cycleAt"].as_str().unwrap_or("?")
        );
    }
    if let Some(ex) = v["explanation"].as_object() {
        if let Some(h) = ex.get("hint").and_then(|h| h.as_str()) {
            println!("unblock:   {h}");
        }
        if let Some(cs) = ex.get("clusters").and_then(|c| c.as_array()) {
            println!("clusters:");
            for c in cs {
                println!(
                    "  {:<20} {}",
                    c["cluster"].as_str().unwrap_or("?"),
                    c["verdict"]
                );
            }
        }
    }
    Ok(())
}

pub fn print_queues(v: &serde_json::Value, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    println!(
        "{:<20} {:<14} {:<14} {:>7} QUOTAS (flavor guaranteed/borrow/max)",
        "NAME", "TENANT", "COHORT", "WEIGHT"
    );
    for q in v["items"].as_array().into_iter().flatten() {
        let quotas: Vec<String> = q["spec"]["quotas"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                format!(
                    "{} {}/{}/{}",
                    f["flavor"].as_str().unwrap_or("?"),
                    f["guaranteed"],
                    f.get("borrowingLimit")
                        .map(|v| v.to_string())
                        .unwrap_or("-".into()),
                    f.get("max").map(|v| v.to_string()).unwrap_or("-".into())
                )
            })
            .collect();
        println!(
            "{:<20} {:<14} {:<14} {:>7} {}",
            q["metadata"]["name"].as_str().unwrap_or("?"),
            q["spec"]["tenant"].as_str().unwrap_or("-"),
            q["spec"]["cohort"].as_str().unwrap_or("-"),
            q["spec"]["fairShareWeight"],
            if quotas.is_empty() {
                "unlimited".to_string()
            } else {
                quotas.join(", ")
            }
        );
    }
    Ok(())
}

/// `tideway schedule show`: where the schedule stands, then one line per hour.
pub fn print_schedule(v: &tideway_api::ScheduleTimeline, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    let or_default = |w: &Option<String>| w.clone().unwrap_or_else(|| "(default)".to_owned());
    println!("schedule:        {} ({})", v.schedule, v.time_zone);
    println!("current window:  {}", or_default(&v.status.active_window));
    if let Some(at) = v.status.last_transition_at {
        println!("since:           {}", at.to_rfc3339());
    }
    match v.status.next_transition_at {
        Some(at) => println!(
            "next transition: {} -> {}",
            at.to_rfc3339(),
            or_default(&v.next_window)
        ),
        None => println!("next transition: none within a week"),
    }
    println!();
    println!("{:<28} {:<14} QUOTAS", "LOCAL HOUR", "WINDOW");
    for h in &v.hours {
        let quotas: Vec<String> = h
            .quotas
            .iter()
            .map(|q| format!("{} {}={}", q.target, q.flavor, q.gpus))
            .collect();
        let quotas = if quotas.is_empty() {
            "queues' own quotas".to_owned()
        } else {
            quotas.join("  ")
        };
        println!("{:<28} {:<14} {}", h.local, or_default(&h.window), quotas);
    }
    Ok(())
}
