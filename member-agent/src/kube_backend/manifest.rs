//! Assignment -> the job object the local gang scheduler admits.
//!
//! Both kinds are built as `DynamicObject`s: Volcano has no Rust types we would want to
//! depend on, and building the batch Job the same way keeps one code path for create, list,
//! patch and delete. The workload's `template` is the user's pod template and is passed
//! through, with one exception: the pool and GPU-model node selector entries are added when
//! the template does not set those keys, because the federation accounted the gang's
//! capacity in that pool and flavor, and pods landing elsewhere would make its digest lie.

use std::collections::BTreeMap;

use kube::core::{ApiResource, DynamicObject};
use serde_json::{Map, Value, json};
use tideway_api::workload::PodSet;

use super::config::{GPU_RESOURCE, KubeConfig, SchedulerMode};
use super::labels;
use crate::backend::Assignment;

/// Why an assignment cannot become a job; reported to the federation as a rejection since
/// retrying the same assignment cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the workload has no UID, so it cannot be created idempotently")]
    MissingUid,
    #[error("the workload has no pod sets")]
    NoPodSets,
    #[error("a Kueue batch/v1 Job runs one pod set, this workload has {0}")]
    KueueOnePodSet(usize),
    #[error("gang minimum {min} exceeds the workload's {pods} pods")]
    GangTooLarge { min: u64, pods: u64 },
    #[error("spec.template must be a pod template object (metadata, spec)")]
    TemplateNotObject,
}

/// `batch.volcano.sh/v1alpha1` Job.
pub fn volcano_job_resource() -> ApiResource {
    ApiResource {
        group: "batch.volcano.sh".to_owned(),
        version: "v1alpha1".to_owned(),
        api_version: "batch.volcano.sh/v1alpha1".to_owned(),
        kind: "Job".to_owned(),
        plural: "jobs".to_owned(),
    }
}

/// `batch/v1` Job.
pub fn batch_job_resource() -> ApiResource {
    ApiResource {
        group: "batch".to_owned(),
        version: "v1".to_owned(),
        api_version: "batch/v1".to_owned(),
        kind: "Job".to_owned(),
        plural: "jobs".to_owned(),
    }
}

/// The job kind of a mode.
pub fn job_resource(mode: SchedulerMode) -> ApiResource {
    match mode {
        SchedulerMode::Volcano => volcano_job_resource(),
        SchedulerMode::Kueue => batch_job_resource(),
    }
}

/// The job for `assignment` in the configured mode.
pub fn build_job(config: &KubeConfig, a: &Assignment) -> Result<DynamicObject, ManifestError> {
    match config.mode {
        SchedulerMode::Volcano => volcano_job(config, a),
        SchedulerMode::Kueue => kueue_job(config, a),
    }
}

/// A Volcano Job: one task per pod set, the gang minimum as `minAvailable`.
pub fn volcano_job(config: &KubeConfig, a: &Assignment) -> Result<DynamicObject, ManifestError> {
    let (name, meta_labels, min) = common(a)?;
    let spec = &a.workload.spec;
    let tasks = spec
        .pod_sets
        .iter()
        .map(|ps| {
            Ok(json!({
                "name": labels::job_name_part(&ps.name),
                "replicas": ps.count,
                "template": pod_template(config, a, ps)?,
            }))
        })
        .collect::<Result<Vec<_>, ManifestError>>()?;
    let queue = config.volcano.queue.as_deref().unwrap_or(&spec.queue);
    let mut job = DynamicObject::new(&name, &volcano_job_resource())
        .within(&config.namespace)
        .data(json!({
            "spec": {
                "schedulerName": "volcano",
                "minAvailable": min,
                "queue": queue,
                "tasks": tasks,
            }
        }));
    job.metadata.labels = Some(meta_labels);
    Ok(job)
}

/// A suspended batch Job that Kueue admits from the configured LocalQueue.
///
/// `backoffLimit: 0`: a failed pod fails the attempt, and the federation's retry (a new
/// attempt, possibly elsewhere) replaces local restarts, so retries are counted once.
pub fn kueue_job(config: &KubeConfig, a: &Assignment) -> Result<DynamicObject, ManifestError> {
    let (name, mut meta_labels, min) = common(a)?;
    let spec = &a.workload.spec;
    let [ps] = spec.pod_sets.as_slice() else {
        return Err(ManifestError::KueueOnePodSet(spec.pod_sets.len()));
    };
    meta_labels.insert(
        labels::KUEUE_QUEUE_NAME.to_owned(),
        config.kueue.local_queue.clone(),
    );
    let mut job = DynamicObject::new(&name, &batch_job_resource())
        .within(&config.namespace)
        .data(json!({
            "spec": {
                "suspend": true,
                "parallelism": ps.count,
                "completions": ps.count,
                "backoffLimit": 0,
                "template": pod_template(config, a, ps)?,
            }
        }));
    job.metadata.labels = Some(meta_labels);
    if min < u64::from(ps.count) {
        job.metadata.annotations = Some(BTreeMap::from([(
            labels::KUEUE_MIN_PARALLELISM.to_owned(),
            min.to_string(),
        )]));
    }
    Ok(job)
}

/// Name, labels and gang minimum, checked.
fn common(a: &Assignment) -> Result<(String, BTreeMap<String, String>, u64), ManifestError> {
    let uid = a.uid();
    if uid.is_empty() {
        return Err(ManifestError::MissingUid);
    }
    let spec = &a.workload.spec;
    if spec.pod_sets.is_empty() {
        return Err(ManifestError::NoPodSets);
    }
    let name = &a.workload.metadata.name;
    let (pods, min) = (spec.total_pods(), spec.gang_min_pods());
    if min > pods {
        return Err(ManifestError::GangTooLarge { min, pods });
    }
    Ok((
        labels::job_name(name, uid, a.attempt),
        labels::job_labels(uid, a.attempt, name),
        min,
    ))
}

/// The node selector that keeps pods in the pool and flavor the federation chose.
fn node_selector(config: &KubeConfig, a: &Assignment, ps: &PodSet) -> Map<String, Value> {
    let mut sel: Map<String, Value> = config
        .flavor_selector(&ps.flavor)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    if let Some(pool) = &a.pool {
        sel.insert(config.nodes.pool.clone(), Value::String(pool.clone()));
    }
    sel
}

/// The workload's template with our node selector merged in, or a placeholder pod holding
/// `gpus_per_pod` GPUs.
fn pod_template(config: &KubeConfig, a: &Assignment, ps: &PodSet) -> Result<Value, ManifestError> {
    let selector = node_selector(config, a, ps);
    if let Some(template) = &a.workload.spec.template {
        let mut template = template.clone();
        let Some(obj) = template.as_object_mut() else {
            return Err(ManifestError::TemplateNotObject);
        };
        let spec = obj
            .entry("spec")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(spec) = spec.as_object_mut() else {
            return Err(ManifestError::TemplateNotObject);
        };
        let ns = spec
            .entry("nodeSelector")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(ns) = ns.as_object_mut() else {
            return Err(ManifestError::TemplateNotObject);
        };
        for (k, v) in selector {
            ns.entry(k).or_insert(v);
        }
        if let Some(limit) = a.workload.spec.runtime_limit_seconds {
            spec.insert("activeDeadlineSeconds".to_owned(), json!(limit));
        }
        return Ok(*template);
    }

    let mut resources = Map::new();
    if ps.gpus_per_pod > 0 {
        resources.insert(
            "limits".to_owned(),
            json!({ GPU_RESOURCE: ps.gpus_per_pod.to_string() }),
        );
    }
    let mut requests = Map::new();
    if let Some(cpu) = &ps.cpu {
        requests.insert("cpu".to_owned(), Value::String(cpu.clone()));
    }
    if let Some(memory) = &ps.memory {
        requests.insert("memory".to_owned(), Value::String(memory.clone()));
    }
    if !requests.is_empty() {
        resources.insert("requests".to_owned(), Value::Object(requests));
    }
    let mut spec = json!({
        "restartPolicy": "Never",
        "nodeSelector": selector,
        "containers": [{
            "name": labels::job_name_part(&ps.name),
            "image": config.default_image,
            "resources": resources,
        }],
    });
    // The workload's time limit: the kubelet stops each pod once it has run this long,
    // which fails the attempt like Slurm's TIMEOUT.
    if let Some(limit) = a.workload.spec.runtime_limit_seconds {
        spec["activeDeadlineSeconds"] = json!(limit);
    }
    if ps.gpus_per_pod > 0 {
        // GPU node groups are commonly tainted so that CPU pods stay off them; not every
        // cluster runs the admission plugin that adds this toleration automatically.
        spec["tolerations"] = json!([
            {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
        ]);
    }
    Ok(json!({
        "metadata": {
            "labels": {
                labels::WORKLOAD_UID: a.uid(),
                labels::ATTEMPT: a.attempt.to_string(),
            }
        },
        "spec": spec,
    }))
}
