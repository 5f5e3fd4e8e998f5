//! The Microsoft Philly job table (`timestamp,duration,num_gpus,gpu_time,cluster`).
//!
//! - `timestamp` is the submit time, a zone-less wall time taken as UTC;
//! - `duration` (seconds, written as a float) is the run time once started;
//! - `num_gpus` becomes a gang: up to a node (8 GPUs by default) it is one pod of that many
//!   GPUs; beyond, whole-node pods of 8 plus one pod of the remainder (12 GPUs = 8 + 4), so
//!   the GPU count, and with it the trace's `gpu_time`, stays exact;
//! - `cluster` is the virtual cluster (VC), the tenant: its queue is named after it unless
//!   the simulator's `queueMap` (or a `queue=` filter) says otherwise.
//!
//! Filters: `vc=a,b` (only these VCs), `from`/`to` (submit window), `queue` (every job to
//! one queue), `flavor` (GPU model of the pods), `node-gpus` (GPUs per node for the gang
//! split, default 8), `limit` (keep the first N jobs by submit time).

use tideway_api::WorkloadClass;
use tideway_api::workload::MAX_POD_COUNT;

use super::{Header, Job, ReadContext, Shape, TraceReport, TraceSpec};
use crate::error::SimulateError;
use crate::time::parse_time;

const KEYS: [&str; 7] = ["vc", "from", "to", "queue", "flavor", "node-gpus", "limit"];

pub fn read(
    spec: &TraceSpec,
    text: &str,
    ctx: &ReadContext<'_>,
) -> Result<(Vec<Job>, TraceReport), SimulateError> {
    spec.allow(&KEYS)?;
    let vcs = spec.list("vc");
    let window = ctx.window.narrow(spec.time("from")?, spec.time("to")?);
    let forced_queue = spec.queue_override()?;
    let flavor = spec.get("flavor").map(str::to_owned);
    let node_gpus: u32 = spec.number("node-gpus")?.unwrap_or(8);
    if node_gpus == 0 || node_gpus > tideway_api::workload::MAX_GPUS_PER_POD {
        return Err(spec.error("node-gpus: must be between 1 and 64"));
    }
    let limit: Option<usize> = spec.number("limit")?;

    let mut report = TraceReport::new(spec);
    let Some((header, lines)) = Header::read(text) else {
        return Err(SimulateError::Trace {
            path: spec.path.clone(),
            reason: "empty file (no header)".into(),
        });
    };
    let [c_ts, c_dur, c_gpus, c_vc] =
        header.require(["timestamp", "duration", "num_gpus", "cluster"], &spec.path)?;

    let mut jobs = Vec::new();
    for (line, row) in lines {
        report.rows += 1;
        let Some(cols) = header.split(&row, line, &mut report) else {
            continue;
        };
        let vc = cols[c_vc];
        if vc.is_empty() {
            report.bad(line, "empty cluster", "empty cluster (VC) column".into());
            continue;
        }
        let submit = match parse_time(cols[c_ts]) {
            Ok(t) => t,
            Err(e) => {
                report.bad(line, "bad timestamp", e);
                continue;
            }
        };
        let duration = match cols[c_dur].parse::<f64>() {
            Ok(d) if (0.0..1e12).contains(&d) => d.round() as u64,
            _ => {
                report.bad(
                    line,
                    "bad duration",
                    format!("duration {:?} is not a non-negative number", cols[c_dur]),
                );
                continue;
            }
        };
        let gpus = match cols[c_gpus].parse::<f64>() {
            Ok(g) if g.fract() == 0.0 && g >= 1.0 && g <= f64::from(MAX_POD_COUNT) => g as u32,
            _ => {
                report.bad(
                    line,
                    "bad num_gpus",
                    format!(
                        "num_gpus {:?} is not a whole number of GPUs >= 1",
                        cols[c_gpus]
                    ),
                );
                continue;
            }
        };
        if !vcs.is_empty() && !vcs.iter().any(|v| v == vc) {
            report.filter("other VC");
            continue;
        }
        if !window.contains(submit) {
            report.filter("outside window");
            continue;
        }
        jobs.push(Job {
            uid: format!("philly-{line}"),
            tenant: vc.to_owned(),
            queue: ctx.queue_of(vc, forced_queue.as_ref()),
            class: WorkloadClass::Training,
            submit,
            runtime: Some(duration),
            remove_at: None,
            shape: Shape::Pods {
                pods: gang(gpus, node_gpus),
                flavor: flavor.clone(),
                replica_of: None,
            },
        });
    }
    super::finish(jobs, limit, report)
}

/// Whole nodes beyond one node, plus a remainder pod: the shape Philly's scheduler gave
/// multi-node jobs, with the GPU count unchanged.
pub fn gang(gpus: u32, node_gpus: u32) -> Vec<(u32, u32)> {
    if gpus <= node_gpus {
        return vec![(1, gpus)];
    }
    let mut pods = vec![(gpus / node_gpus, node_gpus)];
    if !gpus.is_multiple_of(node_gpus) {
        pods.push((1, gpus % node_gpus));
    }
    pods
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::trace::Window;

    #[test]
    fn gangs_of_whole_nodes() {
        assert_eq!(gang(1, 8), vec![(1, 1)]);
        assert_eq!(gang(8, 8), vec![(1, 8)]);
        assert_eq!(gang(16, 8), vec![(2, 8)]);
        assert_eq!(gang(12, 8), vec![(1, 8), (1, 4)]);
        assert_eq!(gang(128, 8), vec![(16, 8)]);
    }

    #[test]
    fn bad_rows_are_counted_with_their_lines() {
        let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
            2017-10-09 07:01:55,66.0,1,66.0,11cb48\n\
            2017-10-09 07:01:55,66.0,0,66.0,11cb48\n\
            2017-10-09 7:01,66.0,1,66.0,11cb48\n\
            2017-10-09 07:01:55,-1,1,66.0,11cb48\n\
            2017-10-09 07:01:55,66.0,1,66.0\n\
            2017-10-09 07:01:55,66.0,1,66.0,\n\
            2017-10-10 07:01:55,66.0,16,66.0,6214e9\n\
            2017-10-09 07:01:55,66.0,2,66.0,6214e9\n\n";
        let map = BTreeMap::from([("6214e9".to_owned(), "vc-a".to_owned())]);
        let ctx = ReadContext {
            window: Window::default(),
            queue_map: &map,
        };
        let spec = TraceSpec::parse("philly:x.csv?to=2017-10-10").unwrap();
        let (jobs, r) = read(&spec, text, &ctx).unwrap();
        assert_eq!(r.rows, 8);
        assert_eq!(r.bad_rows.count, 5);
        assert_eq!(
            r.bad_rows
                .examples
                .iter()
                .map(|e| e.line)
                .collect::<Vec<_>>(),
            [3, 4, 5, 6, 7]
        );
        assert_eq!(r.filtered.get("outside window"), Some(&1));
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].queue, "11cb48");
        assert_eq!(jobs[1].queue, "vc-a");
        assert_eq!(jobs[1].gpus(), 2);
        assert_eq!(r.jobs, 2);

        let bad = TraceSpec::parse("philly:x.csv?vcs=1").unwrap();
        assert!(read(&bad, text, &ctx).is_err());
        let no_col = "timestamp,duration,gpus,cluster\n";
        assert!(read(&TraceSpec::parse("philly:x").unwrap(), no_col, &ctx).is_err());
    }
}
