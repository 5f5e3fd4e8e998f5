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
/// Training and inference flavors of the dev fleet, used in turn. Both sides use H100, so
/// they meet in the fleet's shared H100 racks, where the day/night schedule moves GPUs.
const TRAINING_FLAVORS: [&str; 2] = ["H100", "A100"];
const INFERENCE_FLAVORS: [&str; 3] = ["H100", "L40S", "L4"];
/// The night's training before the demo's first boundary: eleven eight-GPU runs, 88 of the
/// dev fleet's 128 H100s, just within the training side's night quota (70%: 89), so that
/// nothing reclaims them at night.
const NIGHT_TRAINING_RUNS: usize = 11;
/// The morning's inference: eight eight-GPU replicas (64 H100s). Five start on the 40 H100s
/// the night leaves free; three wait for the morning, when the inference side's quota rises
/// to 70% (89) and the training side's falls to 30% (38), and then reclaim three of the
/// night's training runs at the boundary.
const MORNING_REPLICAS: usize = 8;
/// How long before the dev schedule's morning boundary `--demo` starts the fleet clock
/// (fleet time): long enough for the night's training to start and pass the minimum
/// runtime before preemption, short enough that the boundary comes within a wall minute.
pub const DEMO_LEAD_MINUTES: i64 = 10;
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
    // Inference is every third workload of the stream, so it takes its turn by thirds.
    let flavor = match job.class {
        WorkloadClass::Inference => INFERENCE_FLAVORS[(n / 3) % INFERENCE_FLAVORS.len()],
        _ => TRAINING_FLAVORS[n % TRAINING_FLAVORS.len()],
    };
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

/// The demo's opening act on the shared H100s, submitted at once before the stream: the
/// night's checkpointable training runs, then the morning's inference replicas (see
/// [`NIGHT_TRAINING_RUNS`] and [`MORNING_REPLICAS`] for why these counts show a reclaim at
/// the boundary and none before it).
pub fn opening_act() -> Vec<Workload> {
    let one = |name: String, class: &str, checkpoint: bool| {
        let mut spec = serde_json::json!({
            "queue": QUEUE,
            "class": class,
            "podSets": [{"name": "worker", "count": 1, "gpusPerPod": 8, "flavor": "H100"}],
            "runtimeEstimateSeconds": RUNTIME_BOUNDS.1,
        });
        if checkpoint {
            spec["checkpoint"] = serde_json::json!({"intervalSeconds": 600});
        }
        let doc = serde_json::json!({
            "apiVersion": tideway_api::API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "annotations": {
                    (tideway_agent::sim::cluster::RUNTIME_ANNOTATION): RUNTIME_BOUNDS.1.to_string(),
                },
            },
            "spec": spec,
        });
        serde_json::from_value::<Workload>(doc).ok()
    };
    let training = (0..NIGHT_TRAINING_RUNS)
        .filter_map(|k| one(format!("demo-night-train-{k}"), "training", true));
    let inference = (0..MORNING_REPLICAS)
        .filter_map(|k| one(format!("demo-morning-serve-{k}"), "inference", false));
    training.chain(inference).collect()
}

/// Where `--demo` starts the fleet clock when not told: [`DEMO_LEAD_MINUTES`] before the
/// next boundary of `schedule` that opens `window` after `now`, so a user sees a transition
/// and its reclaim within a wall minute or two. `None` if the schedule never opens it.
pub fn start_before_boundary(
    schedule: &tideway_api::QuotaSchedule,
    window: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let spec = &schedule.spec;
    let cal = tideway_scheduler::tidal::Calendar::new(spec).ok()?;
    let mut t = now;
    // Two changes a day for a week at most.
    for _ in 0..32 {
        let c = cal.next_change(t).ok()??;
        if tideway_scheduler::tidal::window_name(spec, c.to).as_deref() == Some(window) {
            return Some(c.at - chrono::Duration::minutes(DEMO_LEAD_MINUTES));
        }
        t = c.at;
    }
    None
}

/// The banner's line on the fleet clock: how fast it runs and what that means for the
/// times the views show.
pub fn clock_line(scale: f64, start: Option<chrono::DateTime<chrono::Utc>>) -> String {
    let from = start.map_or_else(
        || "now".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
    );
    format!(
        "fleet time runs {scale}x the wall clock from {from} (one wall second is {} fleet \
         seconds; AGE, HEARTBEAT and schedule windows count fleet time)",
        scale
    )
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
    // The opening act first, at once: it must be running before the boundary.
    for w in opening_act() {
        let name = w.metadata.name.clone();
        if let Err(e) = client.submit(&w, Some(&name)).await {
            tracing::debug!(workload = %name, error = %e, "demo submission refused");
        }
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
            let flavors: &[&str] = if w.spec.class == WorkloadClass::Inference {
                &INFERENCE_FLAVORS
            } else {
                &TRAINING_FLAVORS
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
    fn the_demo_starts_ten_fleet_minutes_before_the_morning_boundary() {
        let schedule: tideway_api::QuotaSchedule =
            tideway_api::decode_yaml(include_bytes!("../deploy/dev/day-night.yaml")).unwrap();
        // Noon in Berlin (UTC+1 in January): the next 08:00 is tomorrow's, 07:00 UTC.
        let now = "2026-01-05T11:00:00Z".parse().unwrap();
        let start = start_before_boundary(&schedule, "day", now).unwrap();
        assert_eq!(start.to_rfc3339(), "2026-01-06T06:50:00+00:00");
        assert!(start_before_boundary(&schedule, "dusk", now).is_none());
    }

    #[test]
    fn the_opening_act_stays_within_the_night_and_overflows_the_morning() {
        use tideway_api::Validate;
        let w = opening_act();
        assert_eq!(w.len(), NIGHT_TRAINING_RUNS + MORNING_REPLICAS);
        let gpus = |class| -> u64 {
            w.iter()
                .filter(|w| w.spec.class == class)
                .map(|w| w.spec.total_gpus())
                .sum()
        };
        // The dev fleet: 128 H100s, 70/30 by night and 30/70 by day.
        let (training, inference) = (
            gpus(WorkloadClass::Training),
            gpus(WorkloadClass::Inference),
        );
        assert!(training <= 89 && training > 38, "{training}");
        assert!(inference > 128 - training && inference <= 89, "{inference}");
        for w in &w {
            assert!(w.validate().is_ok(), "{w:?}: {:?}", w.validate());
            assert!(w.metadata.name.starts_with("demo-"));
            if w.spec.class == WorkloadClass::Training {
                assert!(w.spec.checkpoint.is_some(), "reclaimable with a notice");
            }
        }
    }

    #[test]
    fn without_traces_the_stream_is_synthetic() {
        let (w, source) = stream(Some(Path::new("/nonexistent/traces")));
        assert_eq!(source, Source::Synthetic);
        assert!(!w.is_empty());
    }
}
