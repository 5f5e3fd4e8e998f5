//! How the CLI prints resources: tables for people, JSON and YAML for programs.
//!
//! Every printer takes the typed answer of the API; JSON and YAML are those types serialized,
//! so `-o json` has exactly the wire's field names.

use comfy_table::{CellAlignment, Table, presets};
use serde::Serialize;
use tideway_api::capacity::{CapacitySummary, CapacityView};
use tideway_api::cluster::{ClusterReport, NodeReport};
use tideway_api::explain::ExplainResponse;
use tideway_api::list::{MemberClusterList, QueueList};
use tideway_api::{FlavorQuota, Workload};

use crate::cli::OutputFormat;

pub fn print_one<T: Serialize>(v: &T, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(v)?),
        _ => print!("{}", serde_saphyr::to_string(v)?),
    }
    Ok(())
}

/// A borderless table like `kubectl get` prints: columns two spaces apart, the first at the
/// start of the line (scripts `grep ^name`), `right` columns (numbers) aligned right.
pub(crate) fn table(header: &[&str], rows: Vec<Vec<String>>, right: &[usize]) -> String {
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(header.to_vec());
    t.add_rows(rows);
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, 2));
        if right.contains(&i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t.trim_fmt()
}

fn phase_of(w: &Workload) -> String {
    w.status
        .as_ref()
        .map(|s| s.phase.to_string())
        .unwrap_or_else(|| "-".into())
}

pub fn print_workloads(items: &[Workload], fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(items)?),
        OutputFormat::Yaml => print!("{}", serde_saphyr::to_string(&items)?),
        OutputFormat::Table => {
            let rows = items
                .iter()
                .map(|w| {
                    vec![
                        w.metadata.name.clone(),
                        w.spec.queue.clone(),
                        w.spec.class.to_string(),
                        w.spec.total_gpus().to_string(),
                        phase_of(w),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(&["NAME", "QUEUE", "CLASS", "GPUS", "PHASE"], rows, &[3])
            );
        }
        OutputFormat::Wide => {
            let rows = items
                .iter()
                .map(|w| {
                    let st = w.status.as_ref();
                    vec![
                        w.metadata.name.clone(),
                        w.spec.queue.clone(),
                        w.spec.class.to_string(),
                        w.spec.priority_class.clone(),
                        w.spec.total_gpus().to_string(),
                        phase_of(w),
                        st.and_then(|s| s.cluster.clone())
                            .unwrap_or_else(|| "-".into()),
                        w.metadata.uid.clone().unwrap_or_default(),
                        st.and_then(|s| s.submitted_at)
                            .map(|t| t.to_rfc3339())
                            .unwrap_or_default(),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(
                    &[
                        "NAME",
                        "QUEUE",
                        "CLASS",
                        "PRIORITY",
                        "GPUS",
                        "PHASE",
                        "CLUSTER",
                        "UID",
                        "SUBMITTED",
                    ],
                    rows,
                    &[4],
                )
            );
        }
    }
    Ok(())
}

fn or_dash(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

pub fn print_cluster(report: &ClusterReport, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(report, fmt);
    }
    println!(
        "leader: {}   term: {}",
        report
            .leader
            .map(|l| l.to_string())
            .unwrap_or_else(|| "none".into()),
        report.term
    );
    let rows = report
        .nodes
        .iter()
        .map(|n: &NodeReport| {
            let role = if report.voters.contains(&n.id) {
                "voter"
            } else {
                "learner"
            };
            let mut row = vec![n.id.to_string(), n.addr.clone(), role.to_string()];
            match &n.status {
                Some(s) => row.extend([
                    s.state.clone(),
                    or_dash(s.last_log_index),
                    or_dash(s.last_applied),
                    or_dash(s.snapshot),
                    s.state_digest.clone(),
                ]),
                None => row.push(format!(
                    "unreachable: {}",
                    n.error.as_deref().unwrap_or("no answer")
                )),
            }
            row
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "ID", "ADDR", "ROLE", "STATE", "LAST LOG", "APPLIED", "SNAPSHOT", "DIGEST"
            ],
            rows,
            &[4, 5, 6],
        )
    );
    Ok(())
}

fn cap_row(label: String, c: &CapacitySummary, extra: String) -> Vec<String> {
    vec![
        label,
        c.total.to_string(),
        c.allocated.to_string(),
        c.free.to_string(),
        c.unhealthy.to_string(),
        c.cordoned.to_string(),
        extra,
    ]
}

pub fn print_capacity(v: &CapacityView, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    let mut rows = vec![cap_row("fleet".into(), &v.fleet, String::new())];
    for r in &v.regions {
        rows.push(cap_row(
            format!("region/{}", r.region),
            &r.capacity,
            String::new(),
        ));
    }
    for f in &v.flavors {
        rows.push(cap_row(
            format!("flavor/{}", f.flavor),
            &f.capacity,
            String::new(),
        ));
    }
    for c in &v.clusters {
        rows.push(cap_row(
            format!("cluster/{}", c.cluster),
            &c.capacity,
            format!("{:?} in {}", c.phase, c.region),
        ));
        for p in &c.pools {
            let g = &p.largest_gang;
            rows.push(cap_row(
                format!("  pool/{}/{}", p.pool, p.flavor),
                &p.capacity,
                format!(
                    "frag {:.0}%  largest gang of {}-GPU pods: node {} rack {} zone {}",
                    p.fragmentation * 100.0,
                    g.pod_gpus,
                    g.node,
                    g.rack,
                    g.zone
                ),
            ));
            if fmt == OutputFormat::Wide {
                for d in &p.domains {
                    rows.push(cap_row(
                        format!("    {}/{}", d.level.as_str(), d.name),
                        &d.capacity,
                        String::new(),
                    ));
                }
            }
        }
    }
    println!(
        "{}",
        table(
            &[
                "SCOPE",
                "TOTAL",
                "ALLOCATED",
                "FREE",
                "UNHEALTHY",
                "CORDONED",
                "DETAIL"
            ],
            rows,
            &[1, 2, 3, 4, 5],
        )
    );
    println!("fragmentation: {}", v.fragmentation_definition);
    Ok(())
}

pub fn print_members(v: &MemberClusterList, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    let rows = v
        .items
        .iter()
        .map(|m| {
            let st = m.status.as_ref();
            vec![
                m.metadata.name.clone(),
                m.spec.region.clone(),
                st.map(|s| format!("{:?}", s.phase))
                    .unwrap_or_else(|| "-".into()),
                st.and_then(|s| s.last_heartbeat)
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_else(|| "-".into()),
                st.and_then(|s| s.message.clone()).unwrap_or_default(),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["NAME", "REGION", "PHASE", "LAST HEARTBEAT", "MESSAGE"],
            rows,
            &[]
        )
    );
    Ok(())
}

pub fn print_explain(v: &ExplainResponse, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    println!("workload:  {} ({})", v.workload, v.uid);
    println!("phase:     {}", v.phase);
    if let Some(c) = &v.cluster {
        println!("cluster:   {c}");
    }
    println!("summary:   {}", v.summary);
    if let Some(r) = &v.pending_reason {
        println!("reason:    {}  {}", r.code(), serde_json::to_string(r)?);
    }
    if let Some(d) = &v.decision {
        println!(
            "decision:  {d} (cycle at {})",
            v.cycle_at
                .map(|t| t.to_rfc3339())
                .unwrap_or_else(|| "?".into())
        );
    }
    if let Some(ex) = &v.explanation {
        println!("unblock:   {}", ex.hint);
        if !ex.clusters.is_empty() {
            println!("clusters:");
            for c in &ex.clusters {
                println!("  {:<20} {}", c.cluster, serde_json::to_string(&c.verdict)?);
            }
        }
    }
    Ok(())
}

fn quota_text(f: &FlavorQuota) -> String {
    let opt = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    format!(
        "{} {}/{}/{}",
        f.flavor,
        f.guaranteed,
        opt(f.borrowing_limit),
        opt(f.max)
    )
}

pub fn print_role_bindings(
    v: &tideway_api::list::RoleBindingList,
    fmt: OutputFormat,
) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    let list = |xs: &[String]| {
        if xs.is_empty() {
            "-".to_string()
        } else {
            xs.join(",")
        }
    };
    let rows = v
        .items
        .iter()
        .map(|b| {
            vec![
                b.metadata.name.clone(),
                b.spec.role.as_str().to_string(),
                list(&b.spec.subjects),
                list(&b.spec.groups),
                list(&b.spec.queues),
            ]
        })
        .collect();
    println!(
        "{}",
        table(&["NAME", "ROLE", "SUBJECTS", "GROUPS", "QUEUES"], rows, &[])
    );
    Ok(())
}

pub fn print_queues(v: &QueueList, fmt: OutputFormat) -> anyhow::Result<()> {
    if matches!(fmt, OutputFormat::Json | OutputFormat::Yaml) {
        return print_one(v, fmt);
    }
    let rows = v
        .items
        .iter()
        .map(|q| {
            let quotas: Vec<String> = q.spec.quotas.iter().map(quota_text).collect();
            vec![
                q.metadata.name.clone(),
                q.spec.tenant.clone(),
                q.spec.cohort.clone().unwrap_or_else(|| "-".into()),
                q.spec.fair_share_weight.to_string(),
                if quotas.is_empty() {
                    "unlimited".to_string()
                } else {
                    quotas.join(", ")
                },
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "NAME",
                "TENANT",
                "COHORT",
                "WEIGHT",
                "QUOTAS (flavor guaranteed/borrow/max)"
            ],
            rows,
            &[3],
        )
    );
    Ok(())
}

/// `tideway schedule show`: where the schedule stands, then one row per hour.
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
    let rows = v
        .hours
        .iter()
        .map(|h| {
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
            vec![h.local.clone(), or_default(&h.window), quotas]
        })
        .collect();
    print!("{}", table(&["LOCAL HOUR", "WINDOW", "QUOTAS"], rows, &[]));
    Ok(())
}

/// Audit records: a table, or JSON lines (one record a line, for export).
pub fn print_events(
    items: &[tideway_api::audit::AuditEvent],
    fmt: OutputFormat,
) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json => {
            for e in items {
                println!("{}", serde_json::to_string(e)?);
            }
        }
        OutputFormat::Yaml => print!("{}", serde_saphyr::to_string(&items)?),
        OutputFormat::Table | OutputFormat::Wide => {
            let rows = items
                .iter()
                .map(|e| {
                    vec![
                        e.seq.to_string(),
                        e.at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
                        e.kind.as_str().to_string(),
                        e.actor.clone(),
                        e.workload.clone().unwrap_or_else(|| "-".into()),
                        e.cluster.clone().unwrap_or_else(|| "-".into()),
                        e.policy_version.to_string(),
                        e.evidence.clone(),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(
                    &[
                        "SEQ", "AT", "KIND", "ACTOR", "WORKLOAD", "CLUSTER", "POLICY", "EVIDENCE"
                    ],
                    rows,
                    &[0, 6],
                )
            );
        }
    }
    Ok(())
}

/// `tideway policy history`.
pub fn print_policy_history(
    h: &tideway_api::PolicyHistory,
    fmt: OutputFormat,
) -> anyhow::Result<()> {
    if !matches!(fmt, OutputFormat::Table | OutputFormat::Wide) {
        return print_one(h, fmt);
    }
    let rows = h
        .items
        .iter()
        .map(|v| {
            let mark = if v.version == h.current { "*" } else { "" };
            vec![
                format!("{}{mark}", v.version),
                v.name.clone(),
                v.applied_at
                    .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                    .unwrap_or_else(|| "-".into()),
                v.applied_by.clone().unwrap_or_else(|| "-".into()),
                v.rolled_back_to
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "-".into()),
                if v.scoped { "scoped" } else { "fleet" }.to_string(),
                v.message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "VERSION", "NAME", "APPLIED", "BY", "RESTORES", "SCOPE", "MESSAGE"
            ],
            rows,
            &[0],
        )
    );
    Ok(())
}

/// `tideway policy diff`.
pub fn print_policy_diff(d: &tideway_api::PolicyDiff, fmt: OutputFormat) -> anyhow::Result<()> {
    if !matches!(fmt, OutputFormat::Table | OutputFormat::Wide) {
        return print_one(d, fmt);
    }
    let to =
        d.to.map(|v| format!("version {v}"))
            .unwrap_or_else(|| "the candidate".into());
    println!("version {} -> {to}: {} changes", d.from, d.changes.len());
    let rows = d
        .changes
        .iter()
        .map(|c| {
            vec![
                c.path.clone(),
                c.old.clone().unwrap_or_else(|| "-".into()),
                c.new.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    println!("{}", table(&["PATH", "OLD", "NEW"], rows, &[]));
    Ok(())
}

/// `tideway policy dry-run`.
pub fn print_dry_run(r: &tideway_api::DryRunReport, fmt: OutputFormat) -> anyhow::Result<()> {
    if !matches!(fmt, OutputFormat::Table | OutputFormat::Wide) {
        return print_one(r, fmt);
    }
    println!(
        "dry-run against version {} at log index {} ({}): nothing applied",
        r.current_version, r.applied_index, r.at
    );
    if r.no_change() {
        println!("no change: the candidate decides exactly what the current policy decides");
        return Ok(());
    }
    let mut rows = Vec::new();
    for (what, list) in [
        ("admitted", &r.newly_admitted),
        ("pending", &r.newly_pending),
        ("preempted", &r.newly_preempted),
    ] {
        for w in list {
            rows.push(vec![
                what.to_string(),
                w.workload.clone(),
                w.queue.clone(),
                w.cluster.clone().unwrap_or_else(|| "-".into()),
                w.reason
                    .as_ref()
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    println!(
        "{}",
        table(
            &["NEWLY", "WORKLOAD", "QUEUE", "CLUSTER", "REASON"],
            rows,
            &[]
        )
    );
    let rows = r
        .quota_moves
        .iter()
        .map(|m| {
            vec![
                m.queue.clone(),
                format!("{} -> {}", m.guaranteed_now, m.guaranteed_candidate),
                format!("{} -> {}", m.admitted_gpus_now, m.admitted_gpus_candidate),
            ]
        })
        .collect();
    println!(
        "{}",
        table(&["QUEUE", "GUARANTEED GPUS", "ADMITTED GPUS"], rows, &[])
    );
    Ok(())
}

/// `tideway policy dry-run --replay`.
pub fn print_replay(
    r: &crate::policy_replay::ReplayReport,
    fmt: OutputFormat,
) -> anyhow::Result<()> {
    if !matches!(fmt, OutputFormat::Table | OutputFormat::Wide) {
        return print_one(r, fmt);
    }
    println!(
        "replay of {} submissions from {} to {} (not replayable, compacted: {}): version {} vs the candidate",
        r.replayed, r.from, r.to, r.not_replayable, r.current_version
    );
    println!(
        "utilization {:.3} -> {:.3}, preemptions {} -> {}",
        r.utilization_now, r.utilization_candidate, r.preemptions_now, r.preemptions_candidate
    );
    let rows = r
        .queues
        .iter()
        .map(|q| {
            vec![
                q.queue.clone(),
                q.jobs.to_string(),
                format!("{:.0} -> {:.0}", q.wait_p50_now, q.wait_p50_candidate),
                format!("{:.0} -> {:.0}", q.wait_p95_now, q.wait_p95_candidate),
                format!("{} -> {}", q.preemptions_now, q.preemptions_candidate),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["QUEUE", "JOBS", "WAIT P50 S", "WAIT P95 S", "PREEMPTIONS"],
            rows,
            &[1],
        )
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_start_rows_at_the_line_start_and_align_numbers() {
        let out = table(
            &["NAME", "GPUS"],
            vec![
                vec!["a-long-name".into(), "8".into()],
                vec!["b".into(), "128".into()],
            ],
            &[1],
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with("NAME"), "{out}");
        assert!(lines[1].starts_with("a-long-name"), "{out}");
        assert!(lines[1].ends_with("  8"), "{out}");
        assert!(lines[2].starts_with("b "), "{out}");
        assert!(lines[2].ends_with("128"), "{out}");
    }
}
