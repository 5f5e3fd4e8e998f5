//! `tideway dev --demo`: a workload stream sampled from public traces (Philly training jobs,
//! Alibaba DLRM inference instances), submitted to the dev federation at a steady pace, so
//! that every view of the dashboard and the CLI moves without anyone submitting.
//!
//! The traces are read where they are (`$TRACES`, else `../shared/traces` from the working
//! directory or the source tree); they are never copied. Without them the stream is a small
//! built-in synthetic one with the same mix, so `--demo` works on any machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tideway_api::client::Client;
use tideway_api::{Workload, WorkloadClass};
use tideway_simulate::trace::{self, ReadContext, TraceSpec, Window};
use tideway_simulate::{Job, SimulatorSettings};

/// The simulated member clusters run a workload for this long (simulated seconds), so a
/// trace's week-long job does not hold the small dev fleet for the whole demo.
const RUNTIME_BOUNDS: (u64, u64) = (120, 4 * 3600);
/// Inference instances without a deletion time in the trace's window live this long.
const DEFAULT_LIFETIME: u64 = 3600;
/// Gangs larger than this are left out: the dev clusters hold 48 to 96 GPUs of a model.
const MAX_GPUS: u64 = 32;
/// Training and inference flavors of the dev fleet, used in turn.
const TRAINING_FLAVORS: [&str; 2] = ["H100", "A100"];
const INFERENCE_FLAVORS: [&str; 2] = ["L40S", "L4"];
/// The queue every demo workload goes to (the one `tideway dev` bootstraps).
const QUEUE: &str = "default";

/// Where the stream came from, for the banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Traces(PathBuf),
    Synthetic,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Traces(p) => write!(f, "sampled from the traces in {}", p.display()),
            Self::Synthetic => f.write_str("built-in synthetic stream (no traces found)"),
        }
    }
}

/// The traces directory: `$TRACES` when set (and only it: pointing it at an empty directory
/// asks for the synthetic stream), else `../shared/traces` from the working directory, else
/// next to the source tree this binary was built from.
pub fn traces_dir() -> Option<PathBuf> {
    let has_traces = |d: &PathBuf| d.join(PHILLY).is_file() || d.join(ALIBABA).is_file();
    if let Some(d) = std::env::var_os("TRACES") {
        return Some(PathBuf::from(d)).filter(has_traces);
    }
    [
        PathBuf::from("../shared/traces"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces"),
    ]
    .into_iter()
    .find(has_traces)
}

const PHILLY: &str = "philly/philly.csv";
const ALIBABA: &str = "alibaba-dlrm-2025/disaggregated_DLRM_trace.csv";

/// The demo's workloads in submission order, and where they came from.
pub fn stream(dir: Option<&Path>) -> (Vec<Workload>, Source) {
    if let Some(d) = dir {
        let d = &d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
        match from_traces(d) {
            Ok(w) if !w.is_empty() => return (w, Source::Traces(d.to_path_buf())),
            Ok(_) => tracing::warn!(dir = %d.display(), "the traces gave no demo workloads"),
            Err(e) => tracing::warn!(error = %e, "could not read the traces for the demo"),
        }
    }
    (synthetic(120), Source::Synthetic)
}

/// A day of Philly (one October Monday) and the first Alibaba inference instances,
/// interleaved two training jobs to one inference replica.
fn from_traces(dir: &Path) -> Result<Vec<Workload>, tideway_simulate::SimulateError> {
    let queue_map = Default::default();
    let ctx = ReadContext {
        window: Window::default(),
        queue_map: &queue_map,
    };
    let mut training = Vec::new();
    if dir.join(PHILLY).is_file() {
        let spec = TraceSpec::parse(&format!(
            "philly:{}?from=2017-10-09&to=2017-10-10&queue={QUEUE}&limit=400",
            dir.join(PHILLY).display()
        ))?;
        training = trace::read(&spec, &ctx)?.0;
    }
    let mut inference = Vec::new();
    if dir.join(ALIBABA).is_file() {
        let spec = TraceSpec::parse(&format!(
            "alibaba-dlrm:{}?queue={QUEUE}&limit=200",
            dir.join(ALIBABA).display()
        ))?;
        inference = trace::read(&spec, &ctx)?.0;
    }
    Ok(interleave(training, inference))
}

/// Orders each side by submission time and takes two training jobs for each inference one
/// (while both last), each built as the workload a user would submit.
fn interleave(mut training: Vec<Job>, mut inference: Vec<Job>) -> Vec<Workload> {
    let keep = |j: &Job| (1..=MAX_GPUS).contains(&j.gpus());
    training.retain(keep);
    inference.retain(keep);
    training.sort_by_key(|j| j.submit);
    inference.sort_by_key(|j| j.submit);
    let settings = SimulatorSettings::default();
    let mut out = Vec::with_capacity(training.len() + inference.len());
    let (mut t, mut i) = (training.into_iter(), inference.into_iter());
    let mut n = 0usize;
    loop {
        let next = if n % 3 == 2 {
            i.next().or_else(|| t.next())
        } else {
            t.next().or_else(|| i.next())
        };
        let Some(job) = next else { break };
        out.push(demo_workload(&job, n, &settings));
        n += 1;
    }
    out
}

/// The workload of one trace job: a dev flavor of its class, a bounded simulated run time.
fn demo_workload(job: &Job, n: usize, settings: &SimulatorSettings) -> Workload {
    let flavors = match job.class {
        WorkloadClass::Inference => INFERENCE_FLAVORS,
        _ => TRAINING_FLAVORS,
    };
    let flavor = flavors[n % flavors.len()];
    let mut w = tideway_simulate::workload::build_workload(job, flavor, settings);
    for ps in &mut w.spec.pod_sets {
        ps.flavor = flavor.to_string().into();
    }
    if w.spec.placement.as_ref().is_some_and(|p| p.spread) {
        // One replica of a service, spread against its siblings: a gang never spans
        // clusters, so the server refuses the two together.
        w.spec.gang = None;
    }
    w.metadata.uid = None;
    w.metadata.name = format!("demo-{}", job.uid);
    let runtime = job
        .runtime
        .or_else(|| {
            job.remove_at
                .map(|r| u64::try_from(r.saturating_sub(job.submit)).unwrap_or(0))
        })
        .unwrap_or(DEFAULT_LIFETIME)
        .clamp(RUNTIME_BOUNDS.0, RUNTIME_BOUNDS.1);
    w.metadata.annotations.insert(
        tideway_agent::sim::cluster::RUNTIME_ANNOTATION.to_string(),
        runtime.to_string(),
    );
    w.spec.runtime_estimate_seconds = Some(runtime);
    w
}

/// A deterministic stream with the traces' mix (mostly one-GPU jobs, a few gangs, a third
/// inference), for machines without the traces.
pub fn synthetic(n: usize) -> Vec<Workload> {
    // A linear congruential generator: the same stream on every machine, no clock, no OS
    // randomness.
    let mut state: u64 = 0x5EED_7DE5;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    let settings = SimulatorSettings::default();
    (0..n)
        .map(|k| {
            let inference = k % 3 == 2;
            let r = next();
            let gpus = match r % 10 {
                0..=5 => 1,
                6 => 2,
                7 => 4,
                8 => 8,
                _ => 16,
            };
            let runtime = 120 + next() % (3 * 3600);
            let job = Job {
                uid: format!("synthetic-{k}"),
                tenant: "synthetic".into(),
                queue: QUEUE.into(),
                class: if inference {
                    WorkloadClass::Inference
                } else {
                    WorkloadClass::Training
                },
                submit: k as i64,
                runtime: (!inference).then_some(runtime),
                remove_at: inference.then_some(k as i64 + runtime as i64),
                shape: tideway_simulate::trace::Shape::Pods {
                    pods: if inference {
                        vec![(1, gpus.min(4))]
                    } else {
                        tideway_simulate::trace::philly::gang(gpus, 8)
                    },
                    flavor: None,
                    replica_of: None,
                },
            };
            demo_workload(&job, k, &settings)
        })
        .collect()
}

/// Submits the stream, one workload every `every`, round after round (names carry the
/// round from the second on), until `stop` turns true. A refused submission is logged and
/// skipped: the demo shows the federation, it does not test it.
pub async fn feed(
    client: Client,
    workloads: Vec<Workload>,
    every: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if workloads.is_empty() {
        return;
    }
    let mut round = 1u32;
    loop {
        for w in &workloads {
            let mut w = w.clone();
            if round > 1 {
                w.metadata.name = format!("{}-r{round}", w.metadata.name);
            }
            let name = w.metadata.name.clone();
            match client.submit(&w, Some(&name)).await {
                Ok((_, true)) => tracing::debug!(workload = %name, "demo submitted"),
                Ok((_, false)) => {}
                Err(e) => tracing::debug!(workload = %name, error = %e, "demo submission refused"),
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
        round = round.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_stream_is_deterministic_mixed_and_valid() {
        let a = synthetic(30);
        assert_eq!(a, synthetic(30));
        let inference = a
            .iter()
            .filter(|w| w.spec.class == WorkloadClass::Inference)
            .count();
        assert_eq!(inference, 10);
        for w in &a {
            use tideway_api::Validate;
            assert!(w.validate().is_ok(), "{w:?}: {:?}", w.validate());
            assert!(w.metadata.name.starts_with("demo-synthetic-"));
            assert!(w.spec.total_gpus() >= 1 && w.spec.total_gpus() <= MAX_GPUS);
            let rt: u64 = w.metadata.annotations[tideway_agent::sim::cluster::RUNTIME_ANNOTATION]
                .parse()
                .unwrap();
            assert!((RUNTIME_BOUNDS.0..=RUNTIME_BOUNDS.1).contains(&rt));
            let flavors = if w.spec.class == WorkloadClass::Inference {
                INFERENCE_FLAVORS
            } else {
                TRAINING_FLAVORS
            };
            assert!(
                w.spec
                    .pod_sets
                    .iter()
                    .all(|p| flavors.contains(&p.flavor.as_str()))
            );
        }
    }

    #[test]
    fn traces_are_sampled_two_training_to_one_inference() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces");
        if !dir.join(PHILLY).is_file() || !dir.join(ALIBABA).is_file() {
            eprintln!("skipped: no traces at {}", dir.display());
            return;
        }
        let (w, source) = stream(Some(&dir));
        assert_eq!(source, Source::Traces(dir.canonicalize().unwrap()));
        assert!(w.len() > 100, "{} workloads", w.len());
        let classes: Vec<_> = w.iter().take(9).map(|w| w.spec.class).collect();
        assert_eq!(
            classes
                .iter()
                .filter(|c| **c == WorkloadClass::Inference)
                .count(),
            3,
            "{classes:?}"
        );
        assert!(
            w.iter()
                .any(|w| w.metadata.name.starts_with("demo-philly-"))
        );
        for w in &w {
            use tideway_api::Validate;
            // What the server would refuse (e.g. spread with a gang) would never move a view.
            assert!(w.validate().is_ok(), "{w:?}: {:?}", w.validate());
        }
    }

    #[test]
    fn without_traces_the_stream_is_synthetic() {
        let (w, source) = stream(Some(Path::new("/nonexistent/traces")));
        assert_eq!(source, Source::Synthetic);
        assert!(!w.is_empty());
    }
}
