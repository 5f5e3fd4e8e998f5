//! The files a run leaves in `--out`:
//! - `summary.json`: everything in [`Summary`](super::metrics::Summary);
//! - `timeseries.csv`: `time,unix,pending,running`, then `<pool>:allocated,<pool>:total`
//!   per pool;
//! - `jobs.csv`: one row per workload (submit, first start, end, outcome, ...), so any
//!   statistic can be recomputed or checked outside the simulator;
//! - `utilization.svg`, `queueing-cdf-class.svg`, `queueing-cdf-queue.svg`.

use std::fmt::Write as _;
use std::path::Path;

use super::engine::RunOutput;
use super::error::SimulateError;
use super::metrics::REASONS;
use super::svg;
use super::time::iso;

pub const FILES: [&str; 6] = [
    "summary.json",
    "timeseries.csv",
    "jobs.csv",
    "utilization.svg",
    "queueing-cdf-class.svg",
    "queueing-cdf-queue.svg",
];

pub fn write_all(out: &RunOutput, dir: &Path) -> Result<(), SimulateError> {
    std::fs::create_dir_all(dir).map_err(|source| SimulateError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let write = |name: &str, body: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, body).map_err(|source| SimulateError::Write { path, source })
    };
    let mut summary = serde_json::to_vec_pretty(&out.summary).unwrap_or_default();
    summary.push(b'\n');
    write("summary.json", &summary)?;
    write("timeseries.csv", timeseries(out).as_bytes())?;
    write("jobs.csv", jobs(out).as_bytes())?;
    write(
        "utilization.svg",
        svg::utilization(&out.pools, &out.samples).as_bytes(),
    )?;
    write(
        "queueing-cdf-class.svg",
        svg::delay_cdf(
            "Queueing delay CDF per workload class",
            &svg::delays_by(&out.records, |r| r.class.as_str().to_owned()),
        )
        .as_bytes(),
    )?;
    write(
        "queueing-cdf-queue.svg",
        svg::delay_cdf(
            "Queueing delay CDF per queue",
            &svg::delays_by(&out.records, |r| r.queue.clone()),
        )
        .as_bytes(),
    )?;
    Ok(())
}

pub fn timeseries(out: &RunOutput) -> String {
    let mut s = String::from("time,unix,pending,running");
    for (label, _) in &out.pools {
        let _ = write!(
            s,
            ",{}:allocated,{}:total",
            csv_field(label),
            csv_field(label)
        );
    }
    s.push('\n');
    for row in &out.samples {
        let _ = write!(
            s,
            "{},{},{},{}",
            iso(row.at),
            row.at,
            row.pending,
            row.running
        );
        for (i, (_, total)) in out.pools.iter().enumerate() {
            let _ = write!(s, ",{},{}", row.allocated.get(i).unwrap_or(&0), total);
        }
        s.push('\n');
    }
    s
}

pub fn jobs(out: &RunOutput) -> String {
    let mut s = String::from(
        "uid,tenant,queue,class,gpus,submit,start,end,queueing_seconds,jct_seconds,cluster,outcome,preemptions,gpu_seconds,lost_gpu_seconds,pending_reasons,reject_reason\n",
    );
    let opt = |v: Option<i64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in &out.records {
        let reasons: Vec<&str> = REASONS
            .iter()
            .enumerate()
            .filter(|(i, _)| r.reasons_seen & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect();
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&r.uid),
            csv_field(&r.tenant),
            csv_field(&r.queue),
            r.class,
            r.gpus,
            r.submit,
            opt(r.start),
            opt(r.end),
            opt(r.queueing()),
            opt(r.jct()),
            csv_field(r.cluster.as_deref().unwrap_or("")),
            r.outcome.as_str(),
            r.preemptions,
            r.gpu_seconds,
            r.lost_gpu_seconds,
            reasons.join(";"),
            csv_field(r.reject_reason.as_deref().unwrap_or("")),
        );
    }
    s
}

/// Quotes a field that contains a separator, a quote or a newline (RFC 4180).
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_owned()
    }
}
