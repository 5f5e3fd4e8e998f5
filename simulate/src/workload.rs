//! What a trace job becomes at arrival: a `Workload` as a user would submit it, with the
//! simulator's settings applied (default flavor, estimates, checkpoints, spread, pinning).

use tideway_api::{Checkpoint, Gang, Placement, PodSet, Workload, WorkloadSpec};

use super::config::{Estimates, SimulatorSettings};
use super::trace::{Job, Shape};

/// The workload a trace job becomes at arrival.
pub fn build_workload(job: &Job, default_flavor: &str, settings: &SimulatorSettings) -> Workload {
    let mut w = match &job.shape {
        Shape::Pods {
            pods,
            flavor,
            replica_of,
        } => {
            let flavor = flavor.as_deref().unwrap_or(default_flavor);
            let pod_sets: Vec<PodSet> = pods
                .iter()
                .enumerate()
                .map(|(i, (count, gpus))| {
                    let name = if i == 0 {
                        "worker".to_owned()
                    } else {
                        format!("worker-{i}")
                    };
                    PodSet::new(name, *count, *gpus, flavor)
                })
                .collect();
            let pods_total: u32 = pods.iter().map(|(c, _)| *c).sum();
            let mut spec = WorkloadSpec::new(job.queue.clone(), job.class, pod_sets);
            spec.gang = Some(Gang {
                min_count: pods_total.max(1),
            });
            if settings.runtime_estimates == Estimates::Exact {
                spec.runtime_estimate_seconds = job.runtime;
            }
            if let Some(every) = settings.checkpoint_interval_seconds {
                spec.checkpoint = Some(Checkpoint {
                    interval_seconds: every,
                    last_checkpoint_at: None,
                });
            }
            let mut w = Workload::new(job.uid.clone(), spec);
            if let Some(r) = replica_of {
                w.metadata
                    .labels
                    .insert(settings.tuning.spread_label.clone(), r.clone());
                w.spec.placement = Some(Box::new(Placement {
                    spread: true,
                    ..Placement::default()
                }));
            }
            w
        }
        Shape::Workload(w) => {
            let mut w = (**w).clone();
            w.spec.queue = job.queue.clone().into();
            w
        }
    };
    w.metadata.uid = Some(job.uid.clone());
    if let Some(clusters) = settings.queue_clusters.get(&job.queue) {
        let p = w.spec.placement.get_or_insert_with(Box::default);
        p.clusters = clusters.clone();
    }
    w
}
