//! `tideway policy dry-run --replay DURATION`: the submissions the audit trail recorded over
//! the last DURATION, replayed through the trace simulator under the current policy and
//! under a candidate, compared per queue.
//!
//! The federation does not know node layouts (members report digests, not nodes), so the
//! fleet comes from a simulator fleet file (`--clusters`). Each submission is rebuilt from
//! the workload as the federation stores it, arriving when the trail says it was submitted
//! and running for as long as it really ran (or its `sim-runtime-seconds` annotation, or
//! its runtime estimate). Workloads already compacted out of the live state cannot be
//! rebuilt; the report counts them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use tideway_api::audit::AuditKind;
use tideway_api::client::{Client, ListQuery};
use tideway_api::{Policy, Workload};
use tideway_federation::state::bootstrap;
use tideway_simulate::{Options, Summary};

/// Per queue, under both policies.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueReplay {
    pub queue: String,
    pub jobs: u64,
    pub wait_p50_now: f64,
    pub wait_p50_candidate: f64,
    pub wait_p95_now: f64,
    pub wait_p95_candidate: f64,
    pub preemptions_now: u64,
    pub preemptions_candidate: u64,
}

/// The replay's answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub current_version: u64,
    pub replayed: usize,
    /// Submissions whose workload has left the live state (compacted).
    pub not_replayable: usize,
    pub utilization_now: f64,
    pub utilization_candidate: f64,
    pub preemptions_now: u64,
    pub preemptions_candidate: u64,
    pub queues: Vec<QueueReplay>,
}

/// `30m`, `24h`, `2d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = n
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (e.g. 24h)"))?;
    match unit {
        "s" => Ok(Duration::seconds(n)),
        "m" => Ok(Duration::minutes(n)),
        "h" | "" => Ok(Duration::hours(n)),
        "d" => Ok(Duration::days(n)),
        _ => Err(format!("unknown unit in {s:?}: s, m, h or d")),
    }
}

/// How long a workload ran, or is meant to run, for the simulator.
fn runtime_of(w: &Workload) -> Option<i64> {
    let st = w.status.as_ref();
    if let Some((s, f)) = st.and_then(|s| s.started_at.zip(s.finished_at)) {
        return Some((f - s).num_seconds().max(1));
    }
    w.metadata
        .annotations
        .get(tideway_agent::sim::cluster::RUNTIME_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .or(w.spec.runtime_estimate_seconds.map(|s| s as i64))
}

/// One JSON line of the simulator's `jsonl` trace.
fn trace_line(w: &Workload, at: DateTime<Utc>) -> anyhow::Result<String> {
    let mut w = w.clone();
    w.status = None;
    w.metadata.uid = None;
    w.metadata.resource_version = None;
    w.metadata.generation = None;
    w.metadata.creation_timestamp = None;
    let mut v = serde_json::to_value(&w)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("submitAt".into(), at.to_rfc3339().into());
        if let Some(r) = runtime_of(&w) {
            o.insert("runtimeSeconds".into(), r.into());
        }
    }
    Ok(serde_json::to_string(&v)?)
}

/// A policy document the simulator reads: no server status, and the built-in queue and
/// priority classes where the bundle lists none, as the federation runs it.
fn policy_yaml(p: &Policy) -> anyhow::Result<String> {
    let mut p = p.clone();
    p.status = None;
    if p.spec.priority_classes.is_empty() {
        p.spec.priority_classes = bootstrap::default_priority_classes();
    }
    if p.spec.queues.is_empty() {
        p.spec.queues = vec![bootstrap::default_queue()];
    }
    Ok(serde_saphyr::to_string(&p)?)
}

pub async fn replay(
    client: &Client,
    candidate: &std::path::Path,
    window: Duration,
    clusters: PathBuf,
    seed: u64,
) -> anyhow::Result<ReplayReport> {
    // Every Submitted record, paged; the trail's newest time is "now" (the federation's
    // clock, not this machine's).
    let mut subs = Vec::new();
    let mut after: Option<u64> = None;
    loop {
        let mut params = vec![("kind", AuditKind::Submitted.as_str().to_string())];
        if let Some(a) = after {
            params.push(("after", a.to_string()));
        }
        let page = client.events(&params).await?.items;
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        subs.extend(page);
    }
    let all = client.events(&[]).await?.items;
    let to = all
        .last()
        .map(|e| e.at)
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
    let from = to - window;
    let mut workloads: BTreeMap<String, Workload> = BTreeMap::new();
    let mut q = ListQuery {
        queue: None,
        phase: None,
        limit: Some(500),
        after: None,
        stale: false,
    };
    loop {
        let page = client.list(&q).await?;
        for w in page.items {
            workloads.insert(w.metadata.name.clone(), w);
        }
        match page.continue_ {
            Some(c) => q.after = Some(c),
            None => break,
        }
    }
    let mut lines = Vec::new();
    let mut missing = 0;
    for e in subs.iter().filter(|e| e.at >= from && e.at <= to) {
        match e.workload.as_ref().and_then(|n| workloads.get(n.as_str())) {
            Some(w) => lines.push(trace_line(w, e.at)?),
            None => missing += 1,
        }
    }
    let current = client.policy_version("current").await?;
    let dir = tempfile::tempdir()?;
    let trace = dir.path().join("replay.jsonl");
    std::fs::write(&trace, lines.join("\n") + "\n")?;
    let now_policy = dir.path().join("current.yaml");
    std::fs::write(&now_policy, policy_yaml(&current)?)?;
    let replayed = lines.len();
    // A plain Policy is normalized like the current one; a file with a `simulator`
    // section is the simulator's own format and goes as it is.
    let cand = match std::fs::read(candidate)
        .ok()
        .and_then(|b| tideway_api::decode_yaml::<Policy>(&b).ok())
    {
        Some(p) => {
            let path = dir.path().join("candidate.yaml");
            std::fs::write(&path, policy_yaml(&p)?)?;
            path
        }
        None => candidate.to_owned(),
    };
    let trace_spec = format!("jsonl:{}", trace.display());
    let (a, b) = tokio::task::spawn_blocking(move || -> anyhow::Result<(Summary, Summary)> {
        let run = |policy: PathBuf| -> anyhow::Result<Summary> {
            let input = tideway_simulate::load(&Options {
                clusters: clusters.clone(),
                policy: policy.clone(),
                traces: vec![trace_spec.clone()],
                from: None,
                to: None,
                seed,
            })
            .with_context(|| format!("simulating under {}", policy.display()))?;
            Ok(tideway_simulate::run(input, &mut |_| {}).summary)
        };
        Ok((run(now_policy)?, run(cand)?))
    })
    .await??;
    let mut queues = Vec::new();
    let names: std::collections::BTreeSet<&String> =
        a.queues.keys().chain(b.queues.keys()).collect();
    for name in names {
        let (qa, qb) = (a.queues.get(name), b.queues.get(name));
        let g = |q: Option<&tideway_simulate::metrics::QueueSummary>| {
            q.map(|q| q.group.clone()).unwrap_or_default()
        };
        let (ga, gb) = (g(qa), g(qb));
        queues.push(QueueReplay {
            queue: name.clone(),
            jobs: ga.jobs.submitted.max(gb.jobs.submitted),
            wait_p50_now: ga.queueing_delay.p50,
            wait_p50_candidate: gb.queueing_delay.p50,
            wait_p95_now: ga.queueing_delay.p95,
            wait_p95_candidate: gb.queueing_delay.p95,
            preemptions_now: ga.preemptions,
            preemptions_candidate: gb.preemptions,
        });
    }
    Ok(ReplayReport {
        from,
        to,
        current_version: current.version().unwrap_or(0),
        replayed,
        not_replayable: missing,
        utilization_now: a.utilization,
        utilization_candidate: b.utilization,
        preemptions_now: a.overall.preemptions,
        preemptions_candidate: b.overall.preemptions,
        queues,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_units() {
        assert_eq!(parse_duration("24h"), Ok(Duration::hours(24)));
        assert_eq!(parse_duration("30m"), Ok(Duration::minutes(30)));
        assert_eq!(parse_duration("2d"), Ok(Duration::days(2)));
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("3w").is_err());
    }
}
