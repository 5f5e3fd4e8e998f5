//! How the CLI prints resources: tables for people, JSON and YAML for programs.
//!
//! Every printer takes the typed answer of the API; JSON and YAML are those types serialized,
//! so `-o json` has exactly the wire's field names.

use chrono::{DateTime, Utc};
use comfy_table::{CellAlignment, Table, presets};
use serde::Serialize;
use tideway_api::capacity::{CapacitySummary, CapacityView};
use tideway_api::clock::{Clock, RealClock};
use tideway_api::cluster::{ClusterReport, NodeReport};
use tideway_api::explain::ExplainResponse;
use tideway_api::list::{MemberClusterList, QueueList};
use tideway_api::{FlavorQuota, Workload};

use crate::cli::OutputFormat;

pub fn print_one<T: Serialize>(v: &T, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(v)?),
        OutputFormat::Name => println!("{}", name_of(v)?),
        _ => print!("{}", serde_saphyr::to_string(v)?),
    }
    Ok(())
}

/// `kind/name` of a resource document, as `kubectl get -o name` prints it: the kind in
/// lower case, so the line can be pasted back into a command.
pub(crate) fn name_of<T: Serialize>(v: &T) -> anyhow::Result<String> {
    let v = serde_json::to_value(v)?;
    match (v["kind"].as_str(), v["metadata"]["name"].as_str()) {
        (Some(kind), Some(name)) => Ok(format!("{}/{name}", kind.to_lowercase())),
        _ => anyhow::bail!("-o name prints kind/name of resources; this output has none"),
    }
}

/// Prints `kind/name` lines.
fn print_names<'a>(kind: &str, names: impl IntoIterator<Item = &'a str>) {
    for n in names {
        println!("{kind}/{n}");
    }
}

/// The error of `-o name` on a verb that prints no resources.
fn no_names(what: &str) -> anyhow::Error {
    anyhow::anyhow!("-o name lists resources as kind/name; {what} prints none (use -o json)")
}

/// The server clock the CLI's client reads, once a client exists.
static SERVER_TIME: std::sync::OnceLock<tideway_api::client::ServerTime> =
    std::sync::OnceLock::new();

/// Measure ages against the node `client` talks to (see [`now`]).
pub(crate) fn use_server_time(client: &tideway_api::client::Client) {
    let _ = SERVER_TIME.set(client.server_time());
}

/// The time ages are measured against: the node's calendar time as its last answer stamped
/// it (a dev fleet's clock runs faster than the wall clock), else this machine's clock.
pub(crate) fn now() -> DateTime<Utc> {
    SERVER_TIME
        .get()
        .and_then(|t| t.last())
        .unwrap_or_else(|| RealClock.now())
}

/// A duration the way `kubectl get` shows an AGE: one unit, the largest that keeps two
/// significant digits (`45s`, `5m`, `3h`, `2d`, `3y`). Negative (clock skew) reads `0s`.
pub(crate) fn human_duration(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 2 * 365 * 86400 => format!("{}d", s / 86400),
        s => format!("{}y", s / (365 * 86400)),
    }
}

/// The AGE column: how long ago `t` was, or `-` when unknown.
pub(crate) fn age(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    t.map_or_else(|| "-".into(), |t| human_duration(now - t))
}

/// A timestamp for a table: RFC 3339 to the second, in UTC (no nanoseconds).
pub(crate) fn timestamp(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".into(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
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
    let now = now();
    // A workload's age counts from its submission, which is when it was first stored.
    let created = |w: &Workload| {
        w.metadata
            .creation_timestamp
            .or_else(|| w.status.as_ref().and_then(|s| s.submitted_at))
    };
    match fmt {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(items)?),
        OutputFormat::Yaml => print!("{}", serde_saphyr::to_string(&items)?),
        OutputFormat::Name => {
            print_names("workload", items.iter().map(|w| w.metadata.name.as_str()))
        }
        OutputFormat::Table => {
            let rows = items
                .iter()
                .map(|w| {
                    vec![
                        w.metadata.name.clone(),
                        w.spec.queue.to_string(),
                        w.spec.class.to_string(),
                        w.spec.total_gpus().to_string(),
                        phase_of(w),
                        age(created(w), now),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(
                    &["NAME", "QUEUE", "CLASS", "GPUS", "PHASE", "AGE"],
                    rows,
                    &[3]
                )
            );
        }
        OutputFormat::Wide => {
            let rows = items
                .iter()
                .map(|w| {
                    let st = w.status.as_ref();
                    vec![
                        w.metadata.name.clone(),
                        w.spec.queue.to_string(),
                        w.spec.class.to_string(),
                        w.spec.priority_class.to_string(),
                        w.spec.total_gpus().to_string(),
                        phase_of(w),
                        age(created(w), now),
                        st.and_then(|s| s.cluster.clone())
                            .unwrap_or_else(|| "-".into()),
                        reason_column(st),
                        w.metadata.uid.clone().unwrap_or_default(),
                        timestamp(st.and_then(|s| s.submitted_at)),
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
                        "AGE",
                        "CLUSTER",
                        "REASON",
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

/// The wide list's REASON: the code, or the whole sentence when a tidal window's quota holds
/// the workload back (the server's `status.message` then starts with `OverWindowQuota:`),
/// since the code alone would not say which window or until when.
fn reason_column(st: Option<&tideway_api::WorkloadStatus>) -> String {
    let Some(s) = st else { return "-".into() };
    if let Some(m) = s
        .message
        .as_deref()
        .filter(|m| m.starts_with("OverWindowQuota:"))
    {
        return m.to_string();
    }
    s.pending_reason
        .as_ref()
        .map_or_else(|| "-".into(), |r| r.code().to_string())
}

/// `tideway list`: as [`print_workloads`], but `-o json|yaml` print one list object
/// (`kind: WorkloadList`, `items`), as `kubectl get -o yaml` does and `queues -o yaml` here.
pub fn print_workload_list(items: Vec<Workload>, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => {
            let list = tideway_api::list::WorkloadList {
                api_version: tideway_api::API_VERSION.to_string(),
                kind: "WorkloadList".to_string(),
                items,
                continue_: None,
            };
            print_one(&list, fmt)
        }
        _ => print_workloads(&items, fmt),
    }
}

fn or_dash(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

pub fn print_cluster(report: &ClusterReport, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(report, fmt),
        OutputFormat::Name => return Err(no_names("cluster status")),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    // Round trips are measured by the leader (its heartbeats), so each node's is the leader's
    // figure for it.
    let rtt = report
        .nodes
        .iter()
        .find(|n| Some(n.id) == report.leader)
        .and_then(|n| n.status.as_ref())
        .map(|s| s.peer_rtt.clone())
        .unwrap_or_default();
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
                Some(s) => {
                    row.extend([
                        s.state.clone(),
                        or_dash(s.last_log_index),
                        or_dash(s.last_applied),
                        or_dash(s.snapshot),
                        s.state_digest.clone().unwrap_or_else(|| "-".to_owned()),
                        rtt.get(&n.id)
                            .map(|r| format!("{:.1} ms", r.rtt_ms))
                            .unwrap_or_else(|| "-".to_owned()),
                    ]);
                    if wide {
                        row.extend([
                            s.term.to_string(),
                            or_dash(s.leader),
                            or_dash(s.committed),
                            or_dash(s.purged),
                            s.workloads.to_string(),
                        ]);
                    }
                }
                None => row.push(format!(
                    "unreachable: {}",
                    n.error.as_deref().unwrap_or("no answer")
                )),
            }
            row
        })
        .collect();
    let mut header = vec![
        "ID", "ADDR", "ROLE", "STATE", "LAST LOG", "APPLIED", "SNAPSHOT", "DIGEST", "RTT",
    ];
    if wide {
        header.extend(["TERM", "LEADER", "COMMITTED", "PURGED", "WORKLOADS"]);
    }
    println!("{}", table(&header, rows, &[4, 5, 6]));
    Ok(())
}

fn cap_row(label: String, c: &CapacitySummary, extra: String, wide: bool) -> Vec<String> {
    let mut row = vec![
        label,
        c.total.to_string(),
        c.allocated.to_string(),
        c.free.to_string(),
        c.unhealthy.to_string(),
        c.cordoned.to_string(),
    ];
    if wide {
        row.push(c.borrowed.to_string());
    }
    row.push(extra);
    row
}

pub fn print_capacity(v: &CapacityView, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(v, fmt),
        OutputFormat::Name => {
            print_names(
                "membercluster",
                v.clusters.iter().map(|c| c.cluster.as_str()),
            );
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    let now = now();
    let mut rows = vec![cap_row("fleet".into(), &v.fleet, String::new(), wide)];
    for r in &v.regions {
        rows.push(cap_row(
            format!("region/{}", r.region),
            &r.capacity,
            String::new(),
            wide,
        ));
    }
    for f in &v.flavors {
        rows.push(cap_row(
            format!("flavor/{}", f.flavor),
            &f.capacity,
            String::new(),
            wide,
        ));
    }
    for c in &v.clusters {
        let mut detail = format!("{:?} in {}", c.phase, c.region);
        if wide {
            detail.push_str(&format!(
                ", digest {} old, heartbeat {} ago",
                age(c.digest_at, now),
                age(c.last_heartbeat, now)
            ));
        }
        rows.push(cap_row(
            format!("cluster/{}", c.cluster),
            &c.capacity,
            detail,
            wide,
        ));
        for p in &c.pools {
            let g = &p.largest_gang;
            rows.push(cap_row(
                format!("  pool/{}/{}", p.pool, p.flavor),
                &p.capacity,
                format!(
                    "frag {:.0}%  free now for {}-GPU pods: {} on one node, {} in one rack, \
                     {} in one zone",
                    p.fragmentation * 100.0,
                    g.pod_gpus,
                    g.node,
                    g.rack,
                    g.zone
                ),
                wide,
            ));
            if wide {
                for d in &p.domains {
                    rows.push(cap_row(
                        format!("    {}/{}", d.level.as_str(), d.name),
                        &d.capacity,
                        String::new(),
                        wide,
                    ));
                }
            }
        }
    }
    let mut header = vec![
        "SCOPE",
        "TOTAL",
        "ALLOCATED",
        "FREE",
        "UNHEALTHY",
        "CORDONED",
    ];
    let mut right = vec![1, 2, 3, 4, 5];
    if wide {
        header.push("BORROWED");
        right.push(6);
    }
    header.push("DETAIL");
    println!("{}", table(&header, rows, &right));
    println!("fragmentation: {}", v.fragmentation_definition);
    println!(
        "free now for N-GPU pods: how many pods of the pool's typical size fit at once on its \
         best node, in its best rack and in its best zone: the largest gang that could start \
         there now with that topology requirement"
    );
    Ok(())
}

pub fn print_members(v: &MemberClusterList, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(v, fmt),
        OutputFormat::Name => {
            print_names(
                "membercluster",
                v.items.iter().map(|m| m.metadata.name.as_str()),
            );
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    let now = now();
    let rows = v
        .items
        .iter()
        .map(|m| {
            let st = m.status.as_ref();
            let mut row = vec![
                m.metadata.name.clone(),
                m.spec.region.clone(),
                st.map(|s| format!("{:?}", s.phase))
                    .unwrap_or_else(|| "-".into()),
                age(st.and_then(|s| s.last_heartbeat), now),
                age(m.metadata.creation_timestamp, now),
            ];
            if wide {
                let pools: Vec<String> = m
                    .spec
                    .pools
                    .iter()
                    .map(|p| format!("{}:{:?}", p.name, p.kind).to_lowercase())
                    .collect();
                row.extend([
                    m.spec.zone.clone().unwrap_or_else(|| "-".into()),
                    pools.join(","),
                    m.spec.gpu_models.join(","),
                    st.and_then(|s| s.agent_version.clone())
                        .unwrap_or_else(|| "-".into()),
                    timestamp(st.and_then(|s| s.last_heartbeat)),
                ]);
            }
            row.push(st.and_then(|s| s.message.clone()).unwrap_or_default());
            row
        })
        .collect();
    let mut header = vec!["NAME", "REGION", "PHASE", "HEARTBEAT", "AGE"];
    if wide {
        header.extend(["ZONE", "POOLS", "GPU MODELS", "AGENT", "LAST HEARTBEAT"]);
    }
    header.push("MESSAGE");
    println!("{}", table(&header, rows, &[]));
    Ok(())
}

/// `tideway explain`; `-o wide` adds each cluster's region, health and free GPUs from
/// `capacity` (the caller fetches it only for wide output).
pub fn print_explain(
    v: &ExplainResponse,
    fmt: OutputFormat,
    capacity: Option<&CapacityView>,
) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(v, fmt),
        OutputFormat::Name => {
            println!("workload/{}", v.workload);
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    println!("workload:  {} ({})", v.workload, v.uid);
    println!("phase:     {}", v.phase);
    if let Some(c) = &v.cluster {
        println!("cluster:   {c}");
    }
    println!("summary:   {}", v.summary);
    if let Some(r) = &v.pending_reason {
        println!("reason:    {}: {r}", r.code());
    }
    if let Some(d) = &v.decision {
        println!("decision:  {d} (cycle at {})", timestamp(v.cycle_at));
    }
    if wide && let Some(m) = &v.message {
        println!("message:   {m}");
    }
    if let Some(ex) = &v.explanation {
        println!("unblock:   {}", ex.hint);
        if !ex.clusters.is_empty() {
            println!();
            let rows = ex
                .clusters
                .iter()
                .map(|c| {
                    let detail = serde_json::to_value(&c.verdict).unwrap_or_default();
                    let kind = detail["type"].as_str().unwrap_or("-").to_string();
                    // The verdict's own fields (flavor, GPUs needed and free...).
                    let fields: Vec<String> = detail
                        .as_object()
                        .into_iter()
                        .flatten()
                        .filter(|(k, _)| k.as_str() != "type")
                        .map(|(k, v)| match v.as_str() {
                            Some(s) => format!("{k}={s}"),
                            None => format!("{k}={v}"),
                        })
                        .collect();
                    let mut row = vec![c.cluster.clone(), kind];
                    if wide {
                        let cap = capacity
                            .and_then(|cap| cap.clusters.iter().find(|k| k.cluster == c.cluster));
                        row.extend(match cap {
                            Some(k) => [
                                k.region.clone(),
                                format!("{:?}", k.phase),
                                k.capacity.free.to_string(),
                            ],
                            None => ["-".into(), "-".into(), "-".into()],
                        });
                    }
                    row.push(if fields.is_empty() {
                        "-".into()
                    } else {
                        fields.join(" ")
                    });
                    row
                })
                .collect();
            let header: &[&str] = if wide {
                &[
                    "CLUSTER",
                    "VERDICT",
                    "REGION",
                    "HEALTH",
                    "FREE GPUS",
                    "DETAIL",
                ]
            } else {
                &["CLUSTER", "VERDICT", "DETAIL"]
            };
            println!("{}", table(header, rows, if wide { &[4] } else { &[] }));
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
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(v, fmt),
        OutputFormat::Name => {
            print_names(
                "rolebinding",
                v.items.iter().map(|b| b.metadata.name.as_str()),
            );
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    let now = now();
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
            let mut row = vec![
                b.metadata.name.clone(),
                b.spec.role.as_str().to_string(),
                list(&b.spec.subjects),
                list(&b.spec.groups),
                list(&b.spec.queues),
                age(b.metadata.creation_timestamp, now),
            ];
            if wide {
                row.extend([
                    timestamp(b.metadata.creation_timestamp),
                    or_dash(b.metadata.resource_version),
                    b.metadata.uid.clone().unwrap_or_else(|| "-".into()),
                ]);
            }
            row
        })
        .collect();
    let mut header = vec!["NAME", "ROLE", "SUBJECTS", "GROUPS", "QUEUES", "AGE"];
    if wide {
        header.extend(["CREATED", "RESOURCE VERSION", "UID"]);
    }
    println!("{}", table(&header, rows, &[]));
    Ok(())
}

pub fn print_queues(v: &QueueList, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(v, fmt),
        OutputFormat::Name => {
            print_names("queue", v.items.iter().map(|q| q.metadata.name.as_str()));
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    let now = now();
    let per_flavor = |m: &std::collections::BTreeMap<String, u64>| {
        if m.is_empty() {
            "-".to_string()
        } else {
            m.iter()
                .map(|(f, n)| format!("{f} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let rows = v
        .items
        .iter()
        .map(|q| {
            let quotas: Vec<String> = q.spec.quotas.iter().map(quota_text).collect();
            let mut row = vec![
                q.metadata.name.clone(),
                q.spec.tenant.clone(),
                q.spec.cohort.clone().unwrap_or_else(|| "-".into()),
                q.spec.fair_share_weight.to_string(),
                if quotas.is_empty() {
                    "unlimited".to_string()
                } else {
                    quotas.join(", ")
                },
                age(q.metadata.creation_timestamp, now),
            ];
            if wide {
                let st = q.status.clone().unwrap_or_default();
                let classes: Vec<String> = q.spec.classes.iter().map(|c| c.to_string()).collect();
                row.extend([
                    if classes.is_empty() {
                        "any".to_string()
                    } else {
                        classes.join(",")
                    },
                    st.pending_workloads.to_string(),
                    st.active_workloads.to_string(),
                    per_flavor(&st.used_gpus),
                    per_flavor(&st.borrowed_gpus),
                    format!(
                        "{:?}/{:?}",
                        q.spec.preemption.within_queue, q.spec.preemption.reclaim_within_cohort
                    ),
                ]);
            }
            row
        })
        .collect();
    let mut header = vec![
        "NAME",
        "TENANT",
        "COHORT",
        "WEIGHT",
        "QUOTAS (flavor guaranteed/borrow/max)",
        "AGE",
    ];
    if wide {
        header.extend([
            "CLASSES",
            "PENDING",
            "ACTIVE",
            "USED GPUS",
            "BORROWED GPUS",
            "PREEMPTION (queue/cohort)",
        ]);
    }
    println!(
        "{}",
        table(&header, rows, if wide { &[3, 7, 8] } else { &[3] })
    );
    if wide {
        println!();
        println!("{}", queue_flavor_table(v));
    }
    Ok(())
}

/// `queues -o wide`'s second table: per queue and flavor, the work, the GPUs and the quota
/// in force now with the window that sets it; a schedule's pool quotas as the fleet side's
/// use against its quota.
fn queue_flavor_table(v: &QueueList) -> String {
    let set_by = |s: &tideway_api::QuotaSetBy| {
        let window = s.window.as_deref().unwrap_or("(default)");
        match s.until {
            Some(u) => format!("window {window} of {} until {}", s.schedule, until(s, u)),
            None => format!("window {window} of {}", s.schedule),
        }
    };
    let mut rows = Vec::new();
    for q in &v.items {
        let Some(st) = &q.status else { continue };
        for f in &st.flavors {
            let sides: Vec<String> = f
                .sides
                .iter()
                .map(|s| {
                    format!(
                        "{} {} (side {}/{})",
                        s.side, s.used_gpus, s.side_used_gpus, s.quota_gpus
                    )
                })
                .collect();
            let source = match (&f.set_by, f.sides.first()) {
                (Some(s), _) => set_by(s),
                (None, Some(side)) => format!("queue's own; sides: {}", set_by(&side.set_by)),
                (None, None) => "queue's own".to_string(),
            };
            rows.push(vec![
                q.metadata.name.clone(),
                f.flavor.clone(),
                f.pending_workloads.to_string(),
                f.active_workloads.to_string(),
                f.used_gpus.to_string(),
                f.borrowed_gpus.to_string(),
                f.lent_gpus.to_string(),
                f.quota_gpus
                    .map_or_else(|| "unlimited".to_string(), |g| g.to_string()),
                if sides.is_empty() {
                    "-".to_string()
                } else {
                    sides.join(", ")
                },
                source,
            ]);
        }
    }
    table(
        &[
            "QUEUE",
            "FLAVOR",
            "PENDING",
            "ACTIVE",
            "USED",
            "BORROWED",
            "LENT",
            "QUOTA NOW",
            "BY SIDE (used, side used/quota)",
            "SET BY",
        ],
        rows,
        &[2, 3, 4, 5, 6, 7],
    )
}

/// When a quota changes, in the schedule's zone with how far off it is on the federation's
/// clock: "Tue 22:00 CET (in 3h12m)".
pub(crate) fn until(s: &tideway_api::QuotaSetBy, at: chrono::DateTime<chrono::Utc>) -> String {
    let local = s
        .until_local
        .clone()
        .unwrap_or_else(|| tideway_api::QuotaSetBy::local(at, &s.time_zone));
    match s.seconds_left {
        Some(left) if left >= 0 => format!(
            "{local} (in {})",
            human_duration(chrono::Duration::seconds(left))
        ),
        _ => local,
    }
}

/// `tideway schedule show`: where the schedule stands, then one row per hour.
pub fn print_schedule(v: &tideway_api::ScheduleTimeline, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(v, fmt),
        OutputFormat::Name => {
            println!("quotaschedule/{}", v.schedule);
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    let now = now();
    let or_default = |w: &Option<String>| w.clone().unwrap_or_else(|| "(default)".to_owned());
    println!("schedule:        {} ({})", v.schedule, v.time_zone);
    println!("current window:  {}", or_default(&v.status.active_window));
    if let Some(at) = v.status.last_transition_at {
        println!(
            "since:           {} ({} ago)",
            timestamp(Some(at)),
            age(Some(at), now)
        );
    }
    match v.status.next_transition_at {
        Some(at) => println!(
            "next transition: {} (in {}) -> {}",
            timestamp(Some(at)),
            human_duration(at - now),
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
            let mut row = vec![h.local.clone(), or_default(&h.window)];
            if wide {
                row.push(timestamp(Some(h.start)));
            }
            row.push(quotas);
            row
        })
        .collect();
    let header: &[&str] = if wide {
        &["LOCAL HOUR", "WINDOW", "UTC START", "QUOTAS"]
    } else {
        &["LOCAL HOUR", "WINDOW", "QUOTAS"]
    };
    println!("{}", table(header, rows, &[]));
    Ok(())
}

/// Audit records: a table, or JSON lines (one record a line, for export).
pub fn print_events(
    items: &[tideway_api::audit::AuditEvent],
    fmt: OutputFormat,
) -> anyhow::Result<()> {
    let now = now();
    let dash = |v: &Option<tideway_api::CompactString>| v.as_deref().unwrap_or("-").to_string();
    match fmt {
        OutputFormat::Json => {
            for e in items {
                println!("{}", serde_json::to_string(e)?);
            }
        }
        OutputFormat::Yaml => print!("{}", serde_saphyr::to_string(&items)?),
        OutputFormat::Name => return Err(no_names("events")),
        OutputFormat::Table => {
            let rows = items
                .iter()
                .map(|e| {
                    vec![
                        e.seq.to_string(),
                        age(Some(e.at), now),
                        e.kind.as_str().to_string(),
                        e.actor.to_string(),
                        dash(&e.workload),
                        dash(&e.cluster),
                        e.policy_version.to_string(),
                        e.evidence.clone(),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(
                    &[
                        "SEQ", "AGE", "KIND", "ACTOR", "WORKLOAD", "CLUSTER", "POLICY", "EVIDENCE"
                    ],
                    rows,
                    &[0, 6],
                )
            );
        }
        OutputFormat::Wide => {
            let rows = items
                .iter()
                .map(|e| {
                    vec![
                        e.seq.to_string(),
                        age(Some(e.at), now),
                        e.at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
                        e.index.to_string(),
                        e.kind.as_str().to_string(),
                        e.actor.to_string(),
                        dash(&e.workload),
                        dash(&e.queue),
                        dash(&e.cluster),
                        e.policy_version.to_string(),
                        e.evidence.clone(),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(
                    &[
                        "SEQ", "AGE", "AT", "INDEX", "KIND", "ACTOR", "WORKLOAD", "QUEUE",
                        "CLUSTER", "POLICY", "EVIDENCE"
                    ],
                    rows,
                    &[0, 3, 9],
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
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(h, fmt),
        OutputFormat::Name => {
            // A version is read back with `tideway policy get N`.
            for v in &h.items {
                println!("policyversion/{}", v.version);
            }
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    let now = now();
    let rows = h
        .items
        .iter()
        .map(|v| {
            let mark = if v.version == h.current { "*" } else { "" };
            let mut row = vec![
                format!("{}{mark}", v.version),
                v.name.clone(),
                age(v.applied_at, now),
                v.applied_by.clone().unwrap_or_else(|| "-".into()),
                v.rolled_back_to
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "-".into()),
                if v.scoped { "scoped" } else { "fleet" }.to_string(),
            ];
            if wide {
                row.push(timestamp(v.applied_at));
                row.push(if Some(v.version) == h.rollout_base {
                    "rollout base".into()
                } else {
                    "-".into()
                });
            }
            row.push(v.message.clone().unwrap_or_default());
            row
        })
        .collect();
    let mut header = vec!["VERSION", "NAME", "AGE", "BY", "RESTORES", "SCOPE"];
    if wide {
        header.extend(["APPLIED", "ROLE"]);
    }
    header.push("MESSAGE");
    println!("{}", table(&header, rows, &[0]));
    Ok(())
}

/// `tideway policy diff`.
pub fn print_policy_diff(d: &tideway_api::PolicyDiff, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(d, fmt),
        OutputFormat::Name => return Err(no_names("policy diff")),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    let to =
        d.to.map(|v| format!("version {v}"))
            .unwrap_or_else(|| "the candidate".into());
    println!("version {} -> {to}: {} changes", d.from, d.changes.len());
    let rows = d
        .changes
        .iter()
        .map(|c| {
            let mut row = vec![c.path.clone()];
            if wide {
                // What kind of change, and which part of the bundle it is in.
                let change = match (&c.old, &c.new) {
                    (None, Some(_)) => "added",
                    (Some(_), None) => "removed",
                    _ => "changed",
                };
                let section = c.path.split(['.', '[']).next().unwrap_or("-");
                row.extend([change.to_string(), section.to_string()]);
            }
            row.extend([
                c.old.clone().unwrap_or_else(|| "-".into()),
                c.new.clone().unwrap_or_else(|| "-".into()),
            ]);
            row
        })
        .collect();
    let header: &[&str] = if wide {
        &["PATH", "CHANGE", "SECTION", "OLD", "NEW"]
    } else {
        &["PATH", "OLD", "NEW"]
    };
    println!("{}", table(header, rows, &[]));
    Ok(())
}

/// `tideway policy dry-run`.
pub fn print_dry_run(r: &tideway_api::DryRunReport, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(r, fmt),
        OutputFormat::Name => return Err(no_names("policy dry-run")),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
    println!(
        "dry-run against version {} at log index {} ({}): nothing applied",
        r.current_version,
        r.applied_index,
        timestamp(Some(r.at))
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
            let mut row = vec![
                what.to_string(),
                w.workload.clone(),
                w.queue.clone(),
                w.cluster.clone().unwrap_or_else(|| "-".into()),
                w.reason
                    .as_ref()
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "-".into()),
            ];
            if wide {
                row.push(
                    w.reason
                        .as_ref()
                        .map_or_else(|| "-".into(), |p| p.code().to_string()),
                );
            }
            rows.push(row);
        }
    }
    let header: &[&str] = if wide {
        &["NEWLY", "WORKLOAD", "QUEUE", "CLUSTER", "REASON", "CODE"]
    } else {
        &["NEWLY", "WORKLOAD", "QUEUE", "CLUSTER", "REASON"]
    };
    println!("{}", table(header, rows, &[]));
    let rows = r
        .quota_moves
        .iter()
        .map(|m| {
            let mut row = vec![
                m.queue.clone(),
                format!("{} -> {}", m.guaranteed_now, m.guaranteed_candidate),
                format!("{} -> {}", m.admitted_gpus_now, m.admitted_gpus_candidate),
            ];
            if wide {
                let delta = |a: u64, b: u64| format!("{:+}", b as i64 - a as i64);
                row.extend([
                    delta(m.guaranteed_now, m.guaranteed_candidate),
                    delta(m.admitted_gpus_now, m.admitted_gpus_candidate),
                ]);
            }
            row
        })
        .collect();
    let header: &[&str] = if wide {
        &[
            "QUEUE",
            "GUARANTEED GPUS",
            "ADMITTED GPUS",
            "GUARANTEED DELTA",
            "ADMITTED DELTA",
        ]
    } else {
        &["QUEUE", "GUARANTEED GPUS", "ADMITTED GPUS"]
    };
    println!("{}", table(header, rows, &[]));
    Ok(())
}

/// `tideway policy dry-run --replay`.
pub fn print_replay(
    r: &crate::policy_replay::ReplayReport,
    fmt: OutputFormat,
) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(r, fmt),
        OutputFormat::Name => return Err(no_names("policy dry-run --replay")),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let wide = fmt == OutputFormat::Wide;
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
            let mut row = vec![
                q.queue.clone(),
                q.jobs.to_string(),
                format!("{:.0} -> {:.0}", q.wait_p50_now, q.wait_p50_candidate),
                format!("{:.0} -> {:.0}", q.wait_p95_now, q.wait_p95_candidate),
                format!("{} -> {}", q.preemptions_now, q.preemptions_candidate),
            ];
            if wide {
                row.extend([
                    format!("{:+.0}", q.wait_p50_candidate - q.wait_p50_now),
                    format!("{:+.0}", q.wait_p95_candidate - q.wait_p95_now),
                ]);
            }
            row
        })
        .collect();
    let header: &[&str] = if wide {
        &[
            "QUEUE",
            "JOBS",
            "WAIT P50 S",
            "WAIT P95 S",
            "PREEMPTIONS",
            "P50 DELTA S",
            "P95 DELTA S",
        ]
    } else {
        &["QUEUE", "JOBS", "WAIT P50 S", "WAIT P95 S", "PREEMPTIONS"]
    };
    println!("{}", table(header, rows, &[1]));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let d = chrono::Duration::seconds;
        assert_eq!(human_duration(d(-5)), "0s");
        assert_eq!(human_duration(d(45)), "45s");
        assert_eq!(human_duration(d(5 * 60 + 10)), "5m");
        assert_eq!(human_duration(d(3 * 3600 + 59)), "3h");
        assert_eq!(human_duration(d(2 * 86400 + 7)), "2d");
        assert_eq!(human_duration(d(3 * 365 * 86400)), "3y");
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-30T10:00:00.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(timestamp(Some(t)), "2026-11-30T10:00:00Z");
        assert_eq!(age(Some(t), t + d(90)), "90s");
        assert_eq!(age(None, t), "-");
    }

    #[test]
    fn name_of_is_the_lower_case_kind_and_the_name() {
        let q = serde_json::json!({"kind": "RoleBinding", "metadata": {"name": "ml"}});
        assert_eq!(name_of(&q).unwrap(), "rolebinding/ml");
        assert!(name_of(&serde_json::json!({"items": []})).is_err());
    }

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
