//! Trace readers: one module per format, all producing [`Job`]s and a [`TraceReport`].
//!
//! A `--trace` argument is `KIND:PATH[?filters]`, e.g.
//! `philly:../shared/traces/philly/philly.csv?vc=6214e9&from=2017-10-09&to=2017-10-10`.
//! Filters are `&`-separated `key=value` pairs; an unknown key is an error (a misspelt
//! filter silently replaying the whole trace would be worse than no answer).
//!
//! Rows that cannot be used are counted per reason, with the first few line numbers as
//! examples, and reported in `summary.json`: a replay that quietly dropped 3% of a trace
//! would compare wrongly with published numbers, and the reader of the summary must be
//! able to tell.

pub mod alibaba_dlrm;
pub mod diurnal;
pub mod jsonl;
pub mod philly;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tideway_api::{Workload, WorkloadClass};

use super::error::SimulateError;
use super::time::{Secs, parse_time};

/// Examples kept per trace; the counts are complete.
const MAX_EXAMPLES: usize = 20;

/// One unit of work from a trace, before it becomes a `Workload`.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Unique across the run; becomes the workload's uid (and name).
    pub uid: String,
    /// The trace's tenant (Philly VC, Alibaba app, the workload's queue), for reports.
    pub tenant: String,
    pub queue: String,
    pub class: WorkloadClass,
    pub submit: Secs,
    /// How long it runs once started; `None` runs until `remove_at` (or forever).
    pub runtime: Option<u64>,
    /// When it is deleted whatever its state (inference instances).
    pub remove_at: Option<Secs>,
    pub shape: Shape,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// A gang of `(count, gpus_per_pod)` pod sets of one flavor (the trace's or the
    /// simulator's default). Kept small: a Workload is built only at arrival.
    Pods {
        pods: Vec<(u32, u32)>,
        flavor: Option<String>,
        /// Spread replicas of one service (inference) against each other.
        replica_of: Option<String>,
    },
    /// A complete workload (the JSON-lines format).
    Workload(Box<Workload>),
}

impl Job {
    pub fn gpus(&self) -> u64 {
        match &self.shape {
            Shape::Pods { pods, .. } => pods
                .iter()
                .map(|(c, g)| u64::from(*c) * u64::from(*g))
                .sum(),
            Shape::Workload(w) => w.spec.total_gpus(),
        }
    }
}

/// What happened to a trace's rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceReport {
    pub spec: String,
    pub kind: String,
    pub path: PathBuf,
    /// Data rows read (header and blank lines excluded).
    pub rows: u64,
    /// Rows that became jobs.
    pub jobs: u64,
    /// Valid rows left out on purpose, per filter (other VC, outside the window, no GPU).
    pub filtered: BTreeMap<String, u64>,
    pub bad_rows: BadRows,
    /// Rows used with an adjustment worth knowing (e.g. fractional GPUs rounded up).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub adjusted: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BadRows {
    pub count: u64,
    pub by_reason: BTreeMap<String, u64>,
    pub examples: Vec<BadRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BadRow {
    /// 1-based, counting the header.
    pub line: u64,
    pub reason: String,
}

impl TraceReport {
    fn new(spec: &TraceSpec) -> Self {
        Self {
            spec: spec.raw.clone(),
            kind: spec.kind.as_str().to_owned(),
            path: spec.path.clone(),
            ..Self::default()
        }
    }

    /// Counts a bad row. `class` groups the counts (e.g. "bad num_gpus"); `detail` is the
    /// example's full sentence.
    pub fn bad(&mut self, line: u64, class: &str, detail: String) {
        self.bad_rows.count += 1;
        *self.bad_rows.by_reason.entry(class.to_owned()).or_insert(0) += 1;
        if self.bad_rows.examples.len() < MAX_EXAMPLES {
            self.bad_rows.examples.push(BadRow {
                line,
                reason: detail,
            });
        }
    }

    pub fn filter(&mut self, why: &str) {
        *self.filtered.entry(why.to_owned()).or_insert(0) += 1;
    }

    pub fn adjust(&mut self, why: &str) {
        *self.adjusted.entry(why.to_owned()).or_insert(0) += 1;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    Philly,
    AlibabaDlrm,
    Jsonl,
}

impl TraceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Philly => "philly",
            Self::AlibabaDlrm => "alibaba-dlrm",
            Self::Jsonl => "jsonl",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "philly" => Some(Self::Philly),
            "alibaba-dlrm" | "alibaba" => Some(Self::AlibabaDlrm),
            "jsonl" | "tideway" => Some(Self::Jsonl),
            _ => None,
        }
    }
}

/// A parsed `--trace` argument.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSpec {
    pub raw: String,
    pub kind: TraceKind,
    pub path: PathBuf,
    pub filters: Vec<(String, String)>,
}

impl TraceSpec {
    pub fn parse(raw: &str) -> Result<Self, SimulateError> {
        let err = |reason: String| SimulateError::TraceSpec {
            spec: raw.to_owned(),
            reason,
        };
        let (kind, rest) = raw
            .split_once(':')
            .ok_or_else(|| err("expected KIND:PATH[?filters]".into()))?;
        let kind = TraceKind::parse(kind).ok_or_else(|| {
            err(format!(
                "unknown trace kind {kind:?} (philly, alibaba-dlrm, jsonl)"
            ))
        })?;
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, q),
            None => (rest, ""),
        };
        if path.is_empty() {
            return Err(err("the path is empty".into()));
        }
        let mut filters = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| err(format!("filter {pair:?} is not key=value")))?;
            if filters.iter().any(|(seen, _)| seen == k) {
                return Err(err(format!("filter {k:?} given twice")));
            }
            filters.push((k.to_owned(), v.to_owned()));
        }
        Ok(Self {
            raw: raw.to_owned(),
            kind,
            path: PathBuf::from(path),
            filters,
        })
    }

    fn error(&self, reason: impl Into<String>) -> SimulateError {
        SimulateError::TraceSpec {
            spec: self.raw.clone(),
            reason: reason.into(),
        }
    }

    /// Checks every filter key is one this format knows.
    fn allow(&self, keys: &[&str]) -> Result<(), SimulateError> {
        for (k, _) in &self.filters {
            if !keys.contains(&k.as_str()) {
                return Err(self.error(format!(
                    "unknown filter {k:?} for {} (known: {})",
                    self.kind.as_str(),
                    keys.join(", ")
                )));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.filters
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn time(&self, key: &str) -> Result<Option<Secs>, SimulateError> {
        self.get(key)
            .map(|v| parse_time(v).map_err(|e| self.error(format!("{key}: {e}"))))
            .transpose()
    }

    fn number<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, SimulateError> {
        self.get(key)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|_| self.error(format!("{key}: {v:?} is not a number")))
            })
            .transpose()
    }

    /// A comma-separated list filter, empty when absent.
    fn list(&self, key: &str) -> Vec<String> {
        self.get(key)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn queue_override(&self) -> Result<Option<String>, SimulateError> {
        self.get("queue")
            .map(|q| {
                tideway_api::validate_name(q)
                    .map(|()| q.to_owned())
                    .map_err(|e| self.error(format!("queue: {e}")))
            })
            .transpose()
    }
}

/// Submission window `[from, to)`: the intersection of the run's `--from/--to` and a
/// trace's own `from`/`to` filters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub from: Option<Secs>,
    pub to: Option<Secs>,
}

impl Window {
    pub fn narrow(self, from: Option<Secs>, to: Option<Secs>) -> Self {
        Self {
            from: match (self.from, from) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
            to: match (self.to, to) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }

    pub fn contains(&self, t: Secs) -> bool {
        self.from.is_none_or(|f| t >= f) && self.to.is_none_or(|e| t < e)
    }
}

/// What every reader needs from the run.
pub struct ReadContext<'a> {
    pub window: Window,
    /// Tenant -> queue (the simulator's `queueMap`).
    pub queue_map: &'a BTreeMap<String, String>,
}

impl ReadContext<'_> {
    /// The queue of a tenant: an explicit `queue=` filter, the map, or the tenant's own name
    /// made into a valid queue name.
    pub fn queue_of(&self, tenant: &str, forced: Option<&String>) -> String {
        if let Some(q) = forced {
            return q.clone();
        }
        if let Some(q) = self.queue_map.get(tenant) {
            return q.clone();
        }
        sanitize(tenant)
    }
}

/// Lower case, `_` and other separators to `-`: trace ids (`app_12`) become names.
pub fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while out.ends_with('-') {
        out.pop();
    }
    while out.starts_with('-') {
        out.remove(0);
    }
    out
}

/// Reads one trace.
pub fn read(
    spec: &TraceSpec,
    ctx: &ReadContext<'_>,
) -> Result<(Vec<Job>, TraceReport), SimulateError> {
    let text = read_text(&spec.path)?;
    match spec.kind {
        TraceKind::Philly => philly::read(spec, &text, ctx),
        TraceKind::AlibabaDlrm => alibaba_dlrm::read(spec, &text, ctx),
        TraceKind::Jsonl => jsonl::read(spec, &text, ctx),
    }
}

fn read_text(path: &Path) -> Result<String, SimulateError> {
    let bytes = std::fs::read(path).map_err(|source| SimulateError::Read {
        path: path.to_owned(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| SimulateError::Trace {
        path: path.to_owned(),
        reason: format!("not UTF-8: {e}"),
    })
}

/// Keeps the first `limit` jobs by submit time (stable: equal submit times keep file order,
/// the order the trace recorded them), counts the rest as filtered, and closes the report.
pub fn finish(
    mut jobs: Vec<Job>,
    limit: Option<usize>,
    mut report: TraceReport,
) -> Result<(Vec<Job>, TraceReport), SimulateError> {
    if let Some(n) = limit
        && jobs.len() > n
    {
        jobs.sort_by_key(|j| j.submit);
        let cut = jobs.len() - n;
        jobs.truncate(n);
        *report.filtered.entry("beyond limit".into()).or_insert(0) += cut as u64;
    }
    report.jobs = jobs.len() as u64;
    Ok((jobs, report))
}

/// A CSV trace's header (column name -> index) and its data rows, read with the `csv`
/// crate: quoted fields (a comma or a newline inside quotes) are one field, and fields are
/// trimmed.
pub struct Header {
    names: Vec<String>,
}

/// A data row: its 1-based line number (counting the header; where the record starts, so a
/// blank line just before it counts as its first) and its fields.
pub type Row = (u64, csv::StringRecord);

impl Header {
    /// The header and the data rows of `text`; `None` for a file without a header. Blank
    /// lines (a trailing newline) are not rows.
    pub fn read(text: &str) -> Option<(Self, impl Iterator<Item = Row> + '_)> {
        let mut records = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes())
            .into_records()
            .filter_map(|r| {
                // The text is UTF-8 and rows may have any length: reading cannot fail.
                let r = r.ok()?;
                let line = r.position().map_or(0, |p| p.line());
                // A whitespace-only line, trimmed: one empty field.
                let blank = r.len() == 1 && r.get(0).is_some_and(str::is_empty);
                (!blank).then_some((line, r))
            });
        let (_, first) = records.next()?;
        let names = first
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let n = if i == 0 {
                    n.trim_start_matches('\u{feff}')
                } else {
                    n
                };
                n.to_owned()
            })
            .collect();
        Some((Self { names }, records))
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// A data row's columns, or None after counting the row as bad when its column count
    /// does not match the header's.
    pub fn split<'r>(
        &self,
        row: &'r csv::StringRecord,
        line: u64,
        report: &mut TraceReport,
    ) -> Option<Vec<&'r str>> {
        if row.len() != self.len() {
            report.bad(
                line,
                "wrong column count",
                format!("{} columns, header has {}", row.len(), self.len()),
            );
            return None;
        }
        Some(row.iter().collect())
    }

    /// Index of each required column, or an error naming the missing ones.
    pub fn require<const N: usize>(
        &self,
        cols: [&str; N],
        path: &Path,
    ) -> Result<[usize; N], SimulateError> {
        let mut out = [0usize; N];
        let mut missing = Vec::new();
        for (i, c) in cols.iter().enumerate() {
            match self.names.iter().position(|n| n == c) {
                Some(p) => out[i] = p,
                None => missing.push(*c),
            }
        }
        if missing.is_empty() {
            Ok(out)
        } else {
            Err(SimulateError::Trace {
                path: path.to_owned(),
                reason: format!(
                    "header lacks column(s) {} (has {})",
                    missing.join(", "),
                    self.names.join(",")
                ),
            })
        }
    }
}

/// Lines with their 1-based line numbers, for line-oriented formats (JSON lines); blank
/// lines (a trailing newline) are not rows.
pub fn data_lines(text: &str) -> impl Iterator<Item = (u64, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_reject_what_they_should() {
        let s = TraceSpec::parse("philly:a/b.csv?vc=6214e9&from=2017-10-09&to=2017-10-10").unwrap();
        assert_eq!(s.kind, TraceKind::Philly);
        assert_eq!(s.path, PathBuf::from("a/b.csv"));
        assert_eq!(s.get("vc"), Some("6214e9"));
        assert_eq!(s.time("from").unwrap(), Some(1_507_507_200));
        assert!(TraceSpec::parse("csv:x").is_err());
        assert!(TraceSpec::parse("philly").is_err());
        assert!(TraceSpec::parse("philly:").is_err());
        assert!(TraceSpec::parse("philly:x?vc").is_err());
        assert!(TraceSpec::parse("philly:x?vc=a&vc=b").is_err());
        let s = TraceSpec::parse("philly:x?vcs=a").unwrap();
        assert!(s.allow(&["vc"]).is_err());
    }

    #[test]
    fn names_from_trace_ids() {
        assert_eq!(sanitize("app_12"), "app-12");
        assert_eq!(sanitize("6214e9"), "6214e9");
        assert_eq!(sanitize("_X_"), "x");
        let w = Window::default()
            .narrow(Some(10), Some(20))
            .narrow(Some(5), Some(15));
        assert_eq!((w.from, w.to), (Some(10), Some(15)));
        assert!(w.contains(10) && !w.contains(15));
    }

    #[test]
    fn quoted_fields_stay_whole() {
        let text = "\u{feff}a, b\n1,\"x, y\"\n2,\"multi\nline\"\n3\n  \n";
        let (h, rows) = Header::read(text).unwrap();
        assert_eq!(h.len(), 2);
        let mut report = TraceReport::default();
        let rows: Vec<_> = rows.collect();
        let lines: Vec<u64> = rows.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [2, 3, 5], "a record's first line");
        assert_eq!(h.split(&rows[0].1, 2, &mut report), Some(vec!["1", "x, y"]));
        assert_eq!(
            h.split(&rows[1].1, 3, &mut report),
            Some(vec!["2", "multi\nline"])
        );
        assert_eq!(h.split(&rows[2].1, 5, &mut report), None);
        assert_eq!(report.bad_rows.count, 1);
        assert!(h.require(["a", "b"], Path::new("t")).is_ok());
        assert!(Header::read("").is_none());
    }
}
