//! Alibaba's GPU-disaggregated DLRM inference trace (cluster-trace-gpu-v2025).
//!
//! Each instance with `gpu_request > 0` becomes one inference replica of its app: a workload
//! of class `inference` created at `creation_time` and deleted at `deletion_time` (it has no
//! run time of its own: it serves until deleted). Times are seconds from the trace start,
//! which the `epoch` filter places on the virtual clock (default 2025-01-01T00:00:00Z). An
//! empty `creation_time` means the instance existed before the trace began and an empty
//! `deletion_time` that it outlived it; both are clamped to the window, which is the trace's
//! own extent unless `from`/`to` narrow it.
//!
//! The queue is per app (`app_12` -> queue `app-12`) unless `queueMap`/`queue=` map it.
//! Replicas of one app carry the spread label so the scheduler spreads them.
//!
//! Filters: `app=a,b`, `from`/`to` (a time, or seconds from the trace start), `epoch`,
//! `queue`, `flavor`, `limit`, `sample` (keep this share of the replicas, chosen by a hash
//! of their name), and for demand that follows the day `day=HH:MM-HH:MM`, `tz` and
//! `always-on` (see [`super::diurnal`]).

use tideway_api::WorkloadClass;

use super::diurnal::{Diurnal, fraction, hash};
use super::{Header, Job, ReadContext, Shape, TraceReport, TraceSpec};
use crate::error::SimulateError;
use crate::time::Secs;

const KEYS: [&str; 11] = [
    "app",
    "from",
    "to",
    "epoch",
    "queue",
    "flavor",
    "limit",
    "sample",
    "day",
    "tz",
    "always-on",
];

/// Where trace second 0 sits on the virtual clock unless `epoch=` says otherwise.
pub const DEFAULT_EPOCH: Secs = 1_735_689_600; // 2025-01-01T00:00:00Z

struct Row {
    line: u64,
    sn: String,
    app: String,
    gpus: u32,
    created: Option<Secs>,
    deleted: Option<Secs>,
}

pub fn read(
    spec: &TraceSpec,
    text: &str,
    ctx: &ReadContext<'_>,
) -> Result<(Vec<Job>, TraceReport), SimulateError> {
    spec.allow(&KEYS)?;
    let epoch = spec.time("epoch")?.unwrap_or(DEFAULT_EPOCH);
    let offset_or_time = |key: &str| -> Result<Option<Secs>, SimulateError> {
        match spec.get(key) {
            None => Ok(None),
            Some(v) => match v.parse::<f64>() {
                Ok(s) if (-1e11..1e11).contains(&s) => {
                    Ok(Some(epoch.saturating_add(s.round() as Secs)))
                }
                Ok(_) => Err(spec.error(format!("{key}: {v} seconds is out of range"))),
                Err(_) => spec.time(key),
            },
        }
    };
    let from = offset_or_time("from")?;
    let to = offset_or_time("to")?;
    let apps = spec.list("app");
    let forced_queue = spec.queue_override()?;
    let flavor = spec.get("flavor").map(str::to_owned);
    let limit: Option<usize> = spec.number("limit")?;
    let sample: f64 = spec.number("sample")?.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample) {
        return Err(spec.error("sample: must be between 0 and 1"));
    }
    let diurnal = match spec.get("day") {
        Some(day) => Some(
            Diurnal::parse(
                day,
                spec.get("tz").unwrap_or("UTC"),
                spec.number("always-on")?.unwrap_or(0.0),
            )
            .map_err(|e| spec.error(e))?,
        ),
        None if spec.get("tz").is_some() || spec.get("always-on").is_some() => {
            return Err(spec.error("tz and always-on need day=HH:MM-HH:MM"));
        }
        None => None,
    };

    let mut report = TraceReport::new(spec);
    let Some((header, lines)) = Header::read(text) else {
        return Err(SimulateError::Trace {
            path: spec.path.clone(),
            reason: "empty file (no header)".into(),
        });
    };
    let [c_sn, c_app, c_gpu, c_created, c_deleted] = header.require(
        [
            "instance_sn",
            "app_name",
            "gpu_request",
            "creation_time",
            "deletion_time",
        ],
        &spec.path,
    )?;

    // First pass: parse, and find the trace's extent for clamping open ends.
    let mut rows = Vec::new();
    let (mut first, mut last): (Option<Secs>, Option<Secs>) = (None, None);
    for (line, row) in lines {
        report.rows += 1;
        let Some(cols) = header.split(&row, line, &mut report) else {
            continue;
        };
        let time = |c: usize| -> Result<Option<Secs>, String> {
            let v = cols[c];
            if v.is_empty() {
                return Ok(None);
            }
            match v.parse::<f64>() {
                Ok(s) if (0.0..1e12).contains(&s) => {
                    Ok(Some(epoch.saturating_add(s.round() as Secs)))
                }
                _ => Err(format!("{v:?} is not a time in seconds")),
            }
        };
        let (created, deleted) = match (time(c_created), time(c_deleted)) {
            (Ok(c), Ok(d)) => (c, d),
            (Err(e), _) => {
                report.bad(line, "bad creation_time", format!("creation_time {e}"));
                continue;
            }
            (_, Err(e)) => {
                report.bad(line, "bad deletion_time", format!("deletion_time {e}"));
                continue;
            }
        };
        for t in [created, deleted].into_iter().flatten() {
            first = Some(first.map_or(t, |f: Secs| f.min(t)));
            last = Some(last.map_or(t, |l: Secs| l.max(t)));
        }
        if let (Some(c), Some(d)) = (created, deleted)
            && d < c
        {
            report.bad(
                line,
                "deleted before created",
                format!("deletion_time is {} s before creation_time", c - d),
            );
            continue;
        }
        let gpu = cols[c_gpu];
        let gpus = match gpu.parse::<f64>() {
            Ok(g) if (0.0..=64.0).contains(&g) => g,
            _ => {
                report.bad(
                    line,
                    "bad gpu_request",
                    format!("gpu_request {gpu:?} is not a number of GPUs in 0..=64"),
                );
                continue;
            }
        };
        if gpus == 0.0 {
            report.filter("no GPU (CPU-only instance)");
            continue;
        }
        if gpus.fract() != 0.0 {
            report.adjust("fractional gpu_request rounded up");
        }
        let app = cols[c_app];
        if app.is_empty() || cols[c_sn].is_empty() {
            report.bad(
                line,
                "empty app_name or instance_sn",
                "empty app_name or instance_sn".into(),
            );
            continue;
        }
        rows.push(Row {
            line,
            sn: cols[c_sn].to_owned(),
            app: app.to_owned(),
            gpus: gpus.ceil() as u32,
            created,
            deleted,
        });
    }

    // The window: the trace's extent, narrowed by the run and the filters.
    let window = ctx.window.narrow(from, to);
    let start = window.from.or(first).unwrap_or(epoch);
    let end = window.to.or(last).unwrap_or(start);
    let mut jobs = Vec::new();
    for r in rows {
        if !apps.is_empty() && !apps.contains(&r.app) {
            report.filter("other app");
            continue;
        }
        if sample < 1.0 && fraction(hash(&r.sn)) >= sample {
            report.filter("not sampled");
            continue;
        }
        let queue = ctx.queue_of(&r.app, forced_queue.as_ref());
        let shape = Shape::Pods {
            pods: vec![(1, r.gpus)],
            flavor: flavor.clone(),
            replica_of: Some(super::sanitize(&r.app)),
        };
        if let Some(d) = &diurnal {
            // The queue is in the uid: the same replicas may serve several zones.
            for (day, from, to) in d.spans(&r.sn, start, end) {
                jobs.push(Job {
                    uid: match day {
                        Some(n) => format!("dlrm-{queue}-{}-d{n}", super::sanitize(&r.sn)),
                        None => format!("dlrm-{queue}-{}", super::sanitize(&r.sn)),
                    },
                    tenant: r.app.clone(),
                    queue: queue.clone(),
                    class: WorkloadClass::Inference,
                    submit: from,
                    runtime: None,
                    remove_at: Some(to),
                    shape: shape.clone(),
                });
            }
            continue;
        }
        let created = r.created.map_or(start, |c| c.max(start));
        let deleted = r.deleted.map_or(end, |d| d.min(end));
        if created >= end || deleted <= start || deleted <= created {
            report.filter("outside window");
            continue;
        }
        jobs.push(Job {
            uid: format!("dlrm-{}-{}", super::sanitize(&r.sn), r.line),
            tenant: r.app.clone(),
            queue,
            class: WorkloadClass::Inference,
            submit: created,
            runtime: None,
            remove_at: Some(deleted),
            shape,
        });
    }
    super::finish(jobs, limit, report)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::trace::Window;

    const HEADER: &str = "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time";

    fn row(sn: &str, app: &str, gpu: &str, c: &str, d: &str) -> String {
        format!("{sn},HN,{app},12,12,{gpu},{gpu},25,25,120.0,120.0,640.0,800.0,8,{c},{c},{d}")
    }

    #[test]
    fn replicas_clamped_to_the_window() {
        let text = [
            HEADER.to_owned(),
            row("instance_0", "app_0", "1", "", ""),
            row("instance_1", "app_0", "1", "100", "400"),
            row("instance_2", "app_1", "0", "100", "400"),
            row("instance_3", "app_1", "x", "100", "400"),
            row("instance_4", "app_1", "2", "500", "300"),
            row("instance_5", "app_1", "1", "1000", ""),
        ]
        .join("\n");
        let map = BTreeMap::new();
        let ctx = ReadContext {
            window: Window::default(),
            queue_map: &map,
        };
        let spec = TraceSpec::parse("alibaba-dlrm:x.csv?epoch=1970-01-01").unwrap();
        let (jobs, r) = read(&spec, &text, &ctx).unwrap();
        assert_eq!(r.rows, 6);
        assert_eq!(r.bad_rows.count, 2, "{:?}", r.bad_rows);
        assert_eq!(r.filtered.get("no GPU (CPU-only instance)"), Some(&1));
        // instance_5 starts at the trace's end: nothing left to run.
        assert_eq!(r.filtered.get("outside window"), Some(&1));
        assert_eq!(jobs.len(), 2);
        // The trace spans 100..1000: open ends clamp to it.
        assert_eq!((jobs[0].submit, jobs[0].remove_at), (100, Some(1000)));
        assert_eq!((jobs[1].submit, jobs[1].remove_at), (100, Some(400)));
        assert_eq!(jobs[0].queue, "app-0");
        assert_eq!(jobs[0].class, WorkloadClass::Inference);

        let spec = TraceSpec::parse("alibaba-dlrm:x.csv?epoch=1970-01-01&from=200&to=300").unwrap();
        let (jobs, _) = read(&spec, &text, &ctx).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[1].submit, jobs[1].remove_at), (200, Some(300)));
    }

    #[test]
    fn replicas_following_the_day() {
        let text = [
            HEADER.to_owned(),
            row("instance_0", "app_0", "1", "", ""),
            row("instance_1", "app_0", "2", "100", "400"),
        ]
        .join("\n");
        let map = BTreeMap::new();
        let ctx = ReadContext {
            window: Window::default(),
            queue_map: &map,
        };
        let spec = TraceSpec::parse(
            "alibaba-dlrm:x.csv?epoch=2030-01-01&from=0&to=172800&day=08:00-22:00&tz=Asia/Shanghai&queue=dlrm",
        )
        .unwrap();
        let (jobs, _) = read(&spec, &text, &ctx).unwrap();
        // Two replicas, each serving two local days (and the trace's own lifetimes ignored).
        assert_eq!(jobs.len(), 4, "{jobs:?}");
        let day0 = crate::time::parse_time("2030-01-01T00:00:00Z").unwrap(); // 08:00 Shanghai
        for j in &jobs {
            let open = (j.submit - day0).rem_euclid(86_400);
            assert!(open <= 1800 || open >= 86_400 - 1800, "{j:?}");
            assert!((j.remove_at.unwrap() - j.submit - 14 * 3600).abs() <= 3600);
        }
        assert_eq!(
            jobs.iter()
                .map(|j| &j.uid)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            4
        );

        let none = TraceSpec::parse("alibaba-dlrm:x.csv?epoch=2030-01-01&sample=0").unwrap();
        let (jobs, r) = read(&none, &text, &ctx).unwrap();
        assert!(jobs.is_empty());
        assert_eq!(r.filtered.get("not sampled"), Some(&2));
        let bad = TraceSpec::parse("alibaba-dlrm:x.csv?tz=UTC").unwrap();
        assert!(read(&bad, &text, &ctx).is_err());
    }
}
