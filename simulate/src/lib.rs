//! `tideway simulate`: trace-driven, discrete-event simulation of a federated GPU fleet.
//!
//! The point is to answer "what would Tideway do with this workload on this fleet under this
//! policy?" with the code that runs in production, not a model of it: admission is the
//! federation's scheduler core (`tideway_scheduler::schedule`) or a strict FIFO
//! baseline, and every member cluster is the sim backend's `SimCluster` with its real gang
//! scheduler. There is no Raft and no HTTP in the loop, and the clock is virtual, so months of
//! a production trace replay in seconds, deterministically for a given seed.
//!
//! Layout, in the order a run meets it: [`config`] (the fleet and the policy), [`trace`]
//! (one reader per trace format), [`workload`] (what a trace job becomes), [`engine`] (the
//! event loop, and in private submodules the fleet, the job table, the job lifecycle and the
//! accounting), `fifo` and `sched` (the two admission modes, on the
//! core's own `QuotaBook` and `Gangs`), [`metrics`], [`summary`] and [`output`] (what is
//! measured and written), [`svg`] (plots) and [`progress`].

mod aggregate;
pub mod config;
pub mod engine;
pub mod error;
mod fifo;
pub mod metrics;
pub mod output;
pub mod progress;
mod sched;
pub mod summary;
pub mod svg;
pub mod tidal;
pub mod time;
pub mod trace;
pub mod workload;

use std::path::PathBuf;

pub use config::{FleetConfig, Member, Mode, SimPolicy, SimulatorSettings};
pub use engine::{Engine, Progress, RunInput, RunOutput};
pub use error::SimulateError;
pub use metrics::{JobRecord, Summary};
pub use trace::{Job, TraceReport, TraceSpec};

/// What `tideway simulate` is asked for, before anything is read.
#[derive(Debug, Clone)]
pub struct Options {
    pub clusters: PathBuf,
    pub policy: PathBuf,
    pub traces: Vec<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub seed: u64,
}

/// Reads the configs and traces. Bad trace rows do not fail this; they are in the reports.
pub fn load(opts: &Options) -> Result<RunInput, SimulateError> {
    let flag = |flag: &'static str, value: &Option<String>| {
        value
            .as_deref()
            .map(|v| {
                time::parse_time(v).map_err(|reason| SimulateError::Flag {
                    flag,
                    value: v.to_owned(),
                    reason,
                })
            })
            .transpose()
    };
    let window = trace::Window {
        from: flag("from", &opts.from)?,
        to: flag("to", &opts.to)?,
    };
    if let (Some(f), Some(t)) = (window.from, window.to)
        && t <= f
    {
        return Err(SimulateError::Flag {
            flag: "to",
            value: opts.to.clone().unwrap_or_default(),
            reason: "must be after --from".into(),
        });
    }
    let members = FleetConfig::load(&opts.clusters)?;
    let policy = SimPolicy::load(&opts.policy)?;
    if opts.traces.is_empty() {
        return Err(SimulateError::TraceSpec {
            spec: String::new(),
            reason: "give at least one --trace KIND:PATH".into(),
        });
    }
    let specs = opts
        .traces
        .iter()
        .map(|t| TraceSpec::parse(t))
        .collect::<Result<Vec<_>, _>>()?;
    let ctx = trace::ReadContext {
        window,
        queue_map: &policy.simulator.queue_map,
    };
    let mut jobs = Vec::new();
    let mut reports = Vec::new();
    for spec in &specs {
        let (j, r) = trace::read(spec, &ctx)?;
        jobs.extend(j);
        reports.push(r);
    }
    for c in policy.simulator.queue_clusters.values().flatten() {
        if !members.iter().any(|m| m.name == *c) {
            return Err(SimulateError::Config {
                path: opts.policy.clone(),
                field: "simulator.queueClusters".into(),
                reason: format!("cluster {c:?} is not in {}", opts.clusters.display()),
            });
        }
    }
    Ok(RunInput {
        members,
        policy,
        jobs,
        traces: reports,
        seed: opts.seed,
    })
}

/// Runs a loaded simulation to its last event.
pub fn run(input: RunInput, progress: &mut dyn FnMut(&Progress)) -> RunOutput {
    Engine::new(input).run(progress)
}
