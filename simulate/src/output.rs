//! The files a run leaves in `--out`:
//! - `summary.json`: everything in [`Summary`](super::metrics::Summary);
//! - `timeseries.csv`: `time,unix,pending,running`, then `<pool>:allocated,<pool>:total`
//!   per pool;
//! - `jobs.csv`: one row per workload (submit, first start, end, outcome, ...), so any
//!   statistic can be recomputed or checked outside the simulator;
//! - `utilization.svg`, `queueing-cdf-class.svg`, `queueing-cdf-queue.svg`.

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
    let mut summary =
        serde_json::to_vec_pretty(&out.summary).map_err(|source| SimulateError::Serialize {
            what: "summary.json",
            source,
        })?;
    summary.push(b'\n');
    write("summary.json", &summary)?;
    write("timeseries.csv", &timeseries(out)?)?;
    write("jobs.csv", &jobs(out)?)?;
    let plot = |what: &'static str| move |source| SimulateError::Plot { what, source };
    let utilization =
        svg::utilization(&out.pools, &out.samples).map_err(plot("utilization.svg"))?;
    write("utilization.svg", utilization.as_bytes())?;
    let by_class = svg::delay_cdf(
        "Queueing delay CDF per workload class",
        &svg::delays_by(&out.records, |r| r.class.as_str().to_owned()),
    )
    .map_err(plot("queueing-cdf-class.svg"))?;
    write("queueing-cdf-class.svg", by_class.as_bytes())?;
    let by_queue = svg::delay_cdf(
        "Queueing delay CDF per queue",
        &svg::delays_by(&out.records, |r| r.queue.clone()),
    )
    .map_err(plot("queueing-cdf-queue.svg"))?;
    write("queueing-cdf-queue.svg", by_queue.as_bytes())?;
    Ok(())
}

/// `time,unix,pending,running`, then `<pool>:allocated,<pool>:total` per pool.
pub fn timeseries(out: &RunOutput) -> Result<Vec<u8>, SimulateError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = vec![
        "time".to_owned(),
        "unix".to_owned(),
        "pending".to_owned(),
        "running".to_owned(),
    ];
    for (label, _) in &out.pools {
        header.push(format!("{label}:allocated"));
        header.push(format!("{label}:total"));
    }
    let csv_err = |source| SimulateError::Csv {
        what: "timeseries.csv",
        source,
    };
    w.write_record(&header).map_err(csv_err)?;
    for row in &out.samples {
        let mut fields = vec![
            iso(row.at),
            row.at.to_string(),
            row.pending.to_string(),
            row.running.to_string(),
        ];
        for (i, (_, total)) in out.pools.iter().enumerate() {
            fields.push(row.allocated.get(i).unwrap_or(&0).to_string());
            fields.push(total.to_string());
        }
        w.write_record(&fields).map_err(csv_err)?;
    }
    finish(w, "timeseries.csv")
}

/// One row per workload; the columns are `JOBS_HEADER`.
pub fn jobs(out: &RunOutput) -> Result<Vec<u8>, SimulateError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let csv_err = |source| SimulateError::Csv {
        what: "jobs.csv",
        source,
    };
    w.write_record(JOBS_HEADER).map_err(csv_err)?;
    let opt = |v: Option<i64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in &out.records {
        let reasons: Vec<&str> = REASONS
            .iter()
            .enumerate()
            .filter(|(i, _)| r.reasons_seen & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect();
        w.write_record([
            r.uid.clone(),
            r.tenant.clone(),
            r.queue.clone(),
            r.class.to_string(),
            r.gpus.to_string(),
            r.submit.to_string(),
            opt(r.start),
            opt(r.end),
            opt(r.queueing()),
            opt(r.jct()),
            r.cluster.clone().unwrap_or_default(),
            r.outcome.as_str().to_owned(),
            r.preemptions.to_string(),
            r.gpu_seconds.to_string(),
            r.lost_gpu_seconds.to_string(),
            reasons.join(";"),
            r.reject_reason.clone().unwrap_or_default(),
        ])
        .map_err(csv_err)?;
    }
    finish(w, "jobs.csv")
}

const JOBS_HEADER: [&str; 17] = [
    "uid",
    "tenant",
    "queue",
    "class",
    "gpus",
    "submit",
    "start",
    "end",
    "queueing_seconds",
    "jct_seconds",
    "cluster",
    "outcome",
    "preemptions",
    "gpu_seconds",
    "lost_gpu_seconds",
    "pending_reasons",
    "reject_reason",
];

fn finish(w: csv::Writer<Vec<u8>>, what: &'static str) -> Result<Vec<u8>, SimulateError> {
    w.into_inner().map_err(|e| SimulateError::Csv {
        what,
        source: e.into_error().into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{JobRecord, Outcome, Sample, Summary};
    use tideway_api::WorkloadClass;

    #[test]
    fn fields_with_separators_are_quoted() {
        let out = RunOutput {
            summary: Summary::default(),
            pools: vec![("a,b/p".into(), 8)],
            samples: vec![Sample {
                at: 0,
                allocated: vec![4],
                pending: 1,
                running: 2,
            }],
            records: vec![JobRecord {
                uid: "j\"1".into(),
                tenant: "t".into(),
                queue: "q".into(),
                class: WorkloadClass::Training,
                gpus: 1,
                submit: 0,
                start: Some(5),
                end: None,
                cluster: None,
                preemptions: 0,
                gpu_seconds: 0,
                lost_gpu_seconds: 0,
                outcome: Outcome::Rejected,
                reject_reason: Some("queue a, b".into()),
                reasons_seen: 0b11,
                rewaits: Vec::new(),
                owed_waits: Vec::new(),
            }],
        };
        let ts = String::from_utf8(timeseries(&out).unwrap()).unwrap();
        assert_eq!(
            ts,
            "time,unix,pending,running,\"a,b/p:allocated\",\"a,b/p:total\"\n1970-01-01T00:00:00Z,0,1,2,4,8\n"
        );
        let jobs = String::from_utf8(jobs(&out).unwrap()).unwrap();
        let row = jobs.lines().nth(1).unwrap();
        assert_eq!(
            row,
            "\"j\"\"1\",t,q,training,1,0,5,,5,,,rejected,0,0,0,Queued;QuotaExhausted,\"queue a, b\""
        );
    }
}
