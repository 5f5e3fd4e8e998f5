//! Tideway's own trace format: JSON lines, one `Workload` per line, with when it arrives and
//! how long it runs either as extra top-level fields or as annotations:
//!
//! ```json
//! {"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"ft-1"},
//!  "spec":{"queue":"research","class":"training","podSets":[...]},
//!  "submitAt":"2030-01-01T08:00:00Z","runtimeSeconds":3600}
//! ```
//!
//! - `submitAt` (or annotation `tideway.dev/submit-at`): RFC 3339 / `YYYY-MM-DD HH:MM:SS`, or
//!   seconds since the Unix epoch;
//! - `runtimeSeconds` (or annotation `tideway.dev/sim-runtime-seconds`, the sim backend's own
//!   run-time override); without either the workload runs for its `runtimeEstimateSeconds`,
//!   and without that until `removeAt` or forever;
//! - `removeAt` (optional): when it is deleted whatever its state.
//!
//! Every workload is validated like a submission; invalid ones are bad rows. Filters:
//! `from`/`to`, `queue`, `limit`.

use serde_json::{Map, Value};
use tideway_agent::sim::cluster::RUNTIME_ANNOTATION;
use tideway_api::{Validate, Workload, decode_json};

use super::{Job, ReadContext, Shape, TraceReport, TraceSpec, data_lines};
use crate::error::SimulateError;
use crate::time::{Secs, parse_time};

pub const SUBMIT_AT_ANNOTATION: &str = "tideway.dev/submit-at";

const KEYS: [&str; 4] = ["from", "to", "queue", "limit"];

pub fn read(
    spec: &TraceSpec,
    text: &str,
    ctx: &ReadContext<'_>,
) -> Result<(Vec<Job>, TraceReport), SimulateError> {
    spec.allow(&KEYS)?;
    let window = ctx.window.narrow(spec.time("from")?, spec.time("to")?);
    let forced_queue = spec.queue_override()?;
    let limit: Option<usize> = spec.number("limit")?;
    let mut report = TraceReport::new(spec);
    let mut jobs = Vec::new();
    for (line, row) in data_lines(text) {
        report.rows += 1;
        match parse_line(row) {
            Ok((mut w, submit, runtime, remove_at)) => {
                if !window.contains(submit) {
                    report.filter("outside window");
                    continue;
                }
                if let Some(q) = &forced_queue {
                    w.spec.queue = q.clone().into();
                }
                let uid = w
                    .metadata
                    .uid
                    .clone()
                    .unwrap_or_else(|| w.metadata.name.clone());
                jobs.push(Job {
                    uid,
                    tenant: w.spec.queue.to_string(),
                    queue: w.spec.queue.to_string(),
                    class: w.spec.class,
                    submit,
                    runtime,
                    remove_at,
                    shape: Shape::Workload(Box::new(w)),
                });
            }
            Err((class, detail)) => report.bad(line, class, detail),
        }
    }
    super::finish(jobs, limit, report)
}

type Parsed = (Workload, Secs, Option<u64>, Option<Secs>);

fn parse_line(row: &str) -> Result<Parsed, (&'static str, String)> {
    let mut obj: Map<String, Value> =
        serde_json::from_str(row).map_err(|e| ("not a JSON object", e.to_string()))?;
    let submit_field = obj.remove("submitAt");
    let runtime_field = obj.remove("runtimeSeconds");
    let remove_field = obj.remove("removeAt");
    let bytes = serde_json::to_vec(&obj).map_err(|e| ("not a workload", e.to_string()))?;
    let w: Workload = decode_json(&bytes).map_err(|e| ("not a workload", e.to_string()))?;
    w.validate()
        .map_err(|e| ("invalid workload", e.to_string()))?;

    let annotation = |k: &str| {
        w.metadata
            .annotations
            .get(k)
            .map(|v| Value::String(v.clone()))
    };
    let submit = submit_field
        .or_else(|| annotation(SUBMIT_AT_ANNOTATION))
        .ok_or((
            "no submit time",
            "no submitAt field or annotation".to_owned(),
        ))?;
    let submit = time_value(&submit).map_err(|e| ("bad submitAt", e))?;
    let remove_at = remove_field
        .map(|v| time_value(&v).map_err(|e| ("bad removeAt", e)))
        .transpose()?;
    let runtime = match runtime_field.or_else(|| annotation(RUNTIME_ANNOTATION)) {
        Some(v) => Some(seconds_value(&v).map_err(|e| ("bad runtimeSeconds", e))?),
        None => w.spec.runtime_estimate_seconds,
    };
    if let Some(r) = remove_at
        && r < submit
    {
        return Err((
            "removed before submitted",
            "removeAt is before submitAt".to_owned(),
        ));
    }
    Ok((w, submit, runtime, remove_at))
}

/// Seconds since the epoch a trace time may be: years 0 to 5000 or so. Beyond, arithmetic
/// on the virtual clock (spans, sample counts) would be meaningless, and could overflow.
const MAX_ABS_TIME: Secs = 100_000_000_000;

fn time_value(v: &Value) -> Result<Secs, String> {
    let t = match v {
        // Annotations are strings, so seconds may come quoted.
        Value::String(s) => s.trim().parse::<Secs>().or_else(|_| parse_time(s))?,
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| format!("{n} is not whole seconds since the epoch"))?,
        other => return Err(format!("{other} is not a time")),
    };
    if t.abs() > MAX_ABS_TIME {
        return Err(format!("{t} is too far from 1970 to be a trace time"));
    }
    Ok(t)
}

fn seconds_value(v: &Value) -> Result<u64, String> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match n {
        Some(s) if (0.0..1e12).contains(&s) => Ok(s.round() as u64),
        _ => Err(format!("{v} is not a non-negative number of seconds")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::trace::Window;

    #[test]
    fn fields_or_annotations_and_bad_lines() {
        let good = r#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"a"},"spec":{"queue":"q","class":"training","podSets":[{"name":"w","count":2,"gpusPerPod":8,"flavor":"H100"}]},"submitAt":"2030-01-01T00:00:00Z","runtimeSeconds":60}"#;
        let annotated = r#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"b","annotations":{"tideway.dev/submit-at":"1893456000","tideway.dev/sim-runtime-seconds":"30"}},"spec":{"queue":"q","class":"eval","podSets":[{"name":"w","count":1,"gpusPerPod":1,"flavor":"H100"}]}}"#;
        let no_time = r#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"c"},"spec":{"queue":"q","class":"eval","podSets":[{"name":"w","count":1,"gpusPerPod":1,"flavor":"H100"}]}}"#;
        let invalid = r#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"D"},"spec":{"queue":"q","class":"eval","podSets":[]},"submitAt":0}"#;
        let text = [good, annotated, no_time, invalid, "[1,2]", "{"].join("\n");
        let map = BTreeMap::new();
        let ctx = ReadContext {
            window: Window::default(),
            queue_map: &map,
        };
        let (jobs, r) = read(&TraceSpec::parse("jsonl:x").unwrap(), &text, &ctx).unwrap();
        assert_eq!(r.rows, 6);
        assert_eq!(r.bad_rows.count, 4, "{:?}", r.bad_rows);
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].runtime, Some(60));
        assert_eq!(jobs[0].gpus(), 16);
        assert_eq!(jobs[1].submit, 1_893_456_000);
        assert_eq!(jobs[1].runtime, Some(30));
    }
}
