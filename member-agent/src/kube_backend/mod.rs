//! The `kube` backend: a member cluster driven through the Kubernetes API.
//!
//! Reads Nodes and Pods for the capacity digest, and turns assignments into Volcano Jobs
//! (`batch.volcano.sh/v1alpha1`, gang via `minAvailable`) or Kueue-managed `batch/v1` Jobs
//! (created suspended, admitted by Kueue). Every object carries the workload UID and attempt
//! as labels, which is how the agent finds its objects again after a restart: the API
//! server, not the agent's memory, is the source of truth.
//!
//! One file per concern, as in kube-rs' controller-rs: [`config`], [`labels`], [`digest`]
//! (nodes/pods -> digest, pure), [`manifest`] (assignment -> job, pure), [`status`] (job ->
//! phase, pure), [`watch`] (list/watch/re-list), [`error`] (API errors -> retry or report),
//! and `fixtures` (a tower-test API server verifier for the tests).
//!
//! The module is `kube_backend`, not `kube`, so that `kube::` keeps meaning the crate
//! everywhere in this crate.

pub mod config;
pub mod digest;
pub mod error;
pub mod labels;
pub mod manifest;
pub mod node_health;
pub mod status;
mod watch;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;
use tideway_api::digest::CapacityDigest;

pub use config::{ConfigError, KubeConfig, KueueConfig, NodeLabels, SchedulerMode, VolcanoConfig};
pub use manifest::ManifestError;
pub use status::PREEMPTED_REASON;

use crate::backend::{
    Assignment, Backend, BackendError, LocalPhase, LocalStatus, ReportedCheckpoint,
};
use error::{classify, is_already_exists, is_gone, is_not_found};

/// The wall clock, injected so tests pin time (preemption deadlines, `since`, digests).
pub type Clock = tideway_api::clock::SharedClock;

/// Our field manager on every write, so `kubectl get -o yaml --show-managed-fields` says who
/// set what.
pub const FIELD_MANAGER: &str = "tideway-agent";

/// List page size: large enough for few round trips, small enough that a 5,000-node list
/// does not arrive as one 50 MB response.
pub const PAGE_SIZE: u32 = 500;

/// A member cluster driven through the Kubernetes API. Cheap to clone.
#[derive(Clone)]
pub struct KubeBackend {
    client: Client,
    config: Arc<KubeConfig>,
    jobs: Api<DynamicObject>,
    clock: Clock,
    /// The nodes of each workload attempt, from the last digest's pod list (no extra API
    /// call); running statuses carry them. Never held across an await.
    nodes: Arc<RwLock<NodesByWorkload>>,
}

type NodesByWorkload = BTreeMap<(String, u32), Vec<tideway_api::NodeGpus>>;

impl std::fmt::Debug for KubeBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl KubeBackend {
    /// A backend over `client` (a real one, or a tower-test mock in tests).
    pub fn new(client: Client, config: KubeConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let jobs = Api::namespaced_with(
            client.clone(),
            &config.namespace,
            &manifest::job_resource(config.mode),
        );
        Ok(Self {
            client,
            config: Arc::new(config),
            jobs,
            clock: tideway_api::clock::RealClock::shared(),
            nodes: Arc::default(),
        })
    }

    /// A backend on the cluster the environment points at: the in-cluster service account
    /// when run as a pod, else `$KUBECONFIG` / `~/.kube/config`.
    pub async fn connect(config: KubeConfig) -> Result<Self, BackendError> {
        config
            .validate()
            .map_err(|e| BackendError::Other(e.to_string()))?;
        // kube's rustls client uses the process-wide provider: ring, as everywhere in Tideway.
        tideway_api::http::install_crypto_provider();
        let client = Client::try_default()
            .await
            .map_err(|e| BackendError::Unavailable(format!("kubernetes client: {e}")))?;
        Self::new(client, config).map_err(|e| BackendError::Other(e.to_string()))
    }

    /// Replaces the wall clock.
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    pub fn config(&self) -> &KubeConfig {
        &self.config
    }

    /// Status transitions of every managed job, from a full list, then a watch resumed from
    /// the last resourceVersion, re-listing on `410 Gone`. See [`watch`](self::watch).
    pub fn watch_statuses(&self) -> BoxStream<'static, Result<LocalStatus, BackendError>> {
        watch::watch_statuses(self.jobs.clone(), self.config.mode, self.clock.clone())
    }

    /// Deletes one job; already gone is fine.
    async fn delete_job(&self, name: &str) -> Result<(), BackendError> {
        match self.jobs.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(classify(&format!("delete job {name}"), e)),
        }
    }

    /// Cordons faulty nodes and gives the workloads on them the preemption notice (see
    /// [`node_health`]). Best effort: a failed write is logged and tried again with the next
    /// digest, which must not fail for it (the heartbeat carries it).
    async fn act_on_node_health(&self, actions: &node_health::HealthActions) {
        if self.config.nodes.cordon_faulty {
            let nodes: Api<Node> = Api::all(self.client.clone());
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            for (node, why) in &actions.cordon {
                let patch = json!({
                    "metadata": {"annotations": {node_health::CORDONED_FOR: why}},
                    "spec": {"unschedulable": true},
                });
                match nodes.patch(node, &pp, &Patch::Merge(&patch)).await {
                    Ok(_) => tracing::warn!(%node, reason = %why, "cordoned a faulty node"),
                    Err(e) => tracing::warn!(%node, error = %e, "cordoning a faulty node failed"),
                }
            }
        }
        for (uid, (grace, why)) in &actions.evict {
            if let Err(e) = self.evict_for_fault(uid, *grace, why).await {
                tracing::warn!(%uid, error = %e, "notice for a node fault failed");
            }
        }
    }

    /// The preemption notice for a node fault: every live job of the workload gets the
    /// deadline (never later than one it has), a checkpoint request and the reason; the
    /// status poll deletes it at the deadline and reports it Evicted with that reason. A job
    /// that already has a deadline no later than this one is left alone, so repeated digests
    /// write nothing.
    async fn evict_for_fault(
        &self,
        uid: &str,
        grace: Duration,
        reason: &str,
    ) -> Result<(), BackendError> {
        let now = self.now();
        let wanted = deadline(now, grace);
        for (name, job) in self.live_jobs(uid, now).await? {
            if status::preempt_at(&job).is_some_and(|at| at <= wanted) {
                continue;
            }
            let patch = json!({"metadata": {"annotations": {
                labels::PREEMPT_AT: wanted.to_rfc3339_opts(SecondsFormat::Secs, true),
                labels::CHECKPOINT_REQUESTED: "true",
                labels::EVICT_REASON: reason,
            }}});
            self.annotate_job(&name, &patch).await?;
        }
        Ok(())
    }

    /// Every managed job.
    /// Merge-patches `patch` onto job `name` as our field manager; a job already gone is
    /// nothing to annotate (it reports itself through its status, or not at all).
    async fn annotate_job(
        &self,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), BackendError> {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match self.jobs.patch(name, &pp, &Patch::Merge(patch)).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(classify(&format!("annotate job {name}"), e)),
        }
    }

    /// The workload's jobs that still run or wait, by name: not finished, not being deleted.
    /// Notices and preemptions are for these only.
    async fn live_jobs(
        &self,
        uid: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<(String, DynamicObject)>, BackendError> {
        let jobs = self.list_jobs(&labels::uid_selector(uid)).await?;
        Ok(jobs
            .into_iter()
            .filter(|job| {
                job.metadata.deletion_timestamp.is_none()
                    && status::local_status(self.config.mode, job, now)
                        .is_some_and(|s| !s.phase.is_terminal())
            })
            .filter_map(|job| Some((job.metadata.name.clone()?, job)))
            .collect())
    }

    async fn list_jobs(&self, selector: &str) -> Result<Vec<DynamicObject>, BackendError> {
        let lp = ListParams::default().labels(selector);
        list_all(&self.jobs, lp)
            .await
            .map(|(items, _)| items)
            .map_err(|e| classify("list jobs", e))
    }
}

/// Lists every page (`limit` + `continue`), returning the items and the list's
/// resourceVersion (the version a watch resumes from). A continue token that expired
/// (`410`) restarts the list once from the beginning.
pub(crate) async fn list_all<K>(api: &Api<K>, lp: ListParams) -> kube::Result<(Vec<K>, String)>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut restarted = false;
    'list: loop {
        let mut items = Vec::new();
        let mut lp = lp.clone().limit(PAGE_SIZE);
        lp.continue_token = None;
        loop {
            let page = match api.list(&lp).await {
                Ok(page) => page,
                Err(e) if is_gone(&e) && lp.continue_token.is_some() && !restarted => {
                    restarted = true;
                    continue 'list;
                }
                Err(e) => return Err(e),
            };
            items.extend(page.items);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp.continue_token = Some(token),
                None => {
                    return Ok((items, page.metadata.resource_version.unwrap_or_default()));
                }
            }
        }
    }
}

impl Backend for KubeBackend {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn digest(&self) -> Result<CapacityDigest, BackendError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let pods: Api<Pod> = Api::all(self.client.clone());
        let (nodes, _) = list_all(&nodes, ListParams::default())
            .await
            .map_err(|e| classify("list nodes", e))?;
        let (pods, _) = list_all(
            &pods,
            ListParams::default().fields(digest::ACTIVE_BOUND_PODS),
        )
        .await
        .map_err(|e| classify("list pods", e))?;
        let mut occupied = digest::nodes_by_workload(&pods);
        digest::locate_nodes(&mut occupied, &nodes, &self.config);
        let health = node_health::plan(&self.config, &nodes, &occupied);
        *self.nodes.write().unwrap_or_else(|e| e.into_inner()) = occupied;
        self.act_on_node_health(&health).await;
        Ok(digest::build_digest(
            &self.config,
            &nodes,
            &pods,
            self.now(),
        ))
    }

    /// Looks for the attempt's job by label first, so a replayed assignment (or a restarted
    /// agent) never creates a second copy; a 409 on create means an earlier incarnation
    /// raced us to it, which is the outcome we wanted.
    async fn ensure(&self, assignment: &Assignment) -> Result<(), BackendError> {
        let job = manifest::build_job(&self.config, assignment)
            .map_err(|e| BackendError::Rejected(e.to_string()))?;
        let selector = labels::attempt_selector(assignment.uid(), assignment.attempt);
        let existing = self
            .jobs
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| classify("list jobs", e))?;
        if !existing.items.is_empty() {
            return Ok(());
        }
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let name = job.metadata.name.clone().unwrap_or_default();
        match self.jobs.create(&pp, &job).await {
            Ok(_) => Ok(()),
            Err(e) if is_already_exists(&e) => Ok(()),
            Err(e) => Err(classify(&format!("create job {name}"), e)),
        }
    }

    /// Annotates every live job of the workload with the deadline and a checkpoint request;
    /// the job is deleted once the deadline has passed, by this call or by the next
    /// `statuses`. A second call never extends a deadline, only shortens it.
    async fn preempt(&self, uid: &str, grace: Duration) -> Result<(), BackendError> {
        let now = self.now();
        let wanted = deadline(now, grace);
        for (name, job) in self.live_jobs(uid, now).await? {
            let current = status::preempt_at(&job);
            let at = current.map_or(wanted, |c| c.min(wanted));
            if at <= now {
                self.delete_job(&name).await?;
                continue;
            }
            if current == Some(at) {
                continue;
            }
            let patch = json!({"metadata": {"annotations": {
                labels::PREEMPT_AT: at.to_rfc3339_opts(SecondsFormat::Secs, true),
                labels::CHECKPOINT_REQUESTED: "true",
            }}});
            self.annotate_job(&name, &patch).await?;
        }
        Ok(())
    }

    /// Annotates every live job of the workload with the notice's deadline (merge patch);
    /// a job that carries it already is left alone, so a replayed notice makes no write.
    async fn checkpoint(&self, uid: &str, by: DateTime<Utc>) -> Result<(), BackendError> {
        let now = self.now();
        let value = by.to_rfc3339_opts(SecondsFormat::Secs, true);
        for (name, job) in self.live_jobs(uid, now).await? {
            let current = job
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::CHECKPOINT_BY));
            if current == Some(&value) {
                continue;
            }
            let patch = json!({"metadata": {"annotations": {labels::CHECKPOINT_BY: value}}});
            self.annotate_job(&name, &patch).await?;
        }
        Ok(())
    }

    /// Deletes every attempt of the workload in one `deletecollection`; pods go with them
    /// (background propagation). Nothing there (404) is success.
    async fn remove(&self, uid: &str) -> Result<(), BackendError> {
        let lp = ListParams::default().labels(&labels::uid_selector(uid));
        match self
            .jobs
            .delete_collection(&DeleteParams::background(), &lp)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(classify(&format!("delete jobs of {uid}"), e)),
        }
    }

    /// Lists every managed job. Jobs whose preemption deadline has passed are deleted here,
    /// which makes the deadline durable: it lives on the object, and the agent's periodic
    /// status poll enforces it even across agent restarts.
    async fn statuses(&self) -> Result<Vec<LocalStatus>, BackendError> {
        Ok(self.report().await?.0)
    }

    /// The statuses, and each running job's `tideway.dev/checkpointed-at` annotation (written
    /// by the workload when it checkpoints), from one listing.
    async fn report(&self) -> Result<(Vec<LocalStatus>, Vec<ReportedCheckpoint>), BackendError> {
        let now = self.now();
        let mut out = Vec::new();
        let mut checkpoints = Vec::new();
        for job in self.list_jobs(&labels::managed_selector()).await? {
            let Some(mut s) = status::local_status(self.config.mode, &job, now) else {
                continue;
            };
            let expired = status::preempt_at(&job).is_some_and(|at| at <= now);
            if expired && !s.phase.is_terminal() && job.metadata.deletion_timestamp.is_none() {
                let name = job.metadata.name.as_deref().unwrap_or_default();
                // A failed delete must not blind the agent to every other job: report the
                // job as it is, and the next poll tries again.
                match self.delete_job(name).await {
                    Ok(()) => {
                        let reason = job
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(labels::EVICT_REASON))
                            .cloned()
                            .unwrap_or_else(|| PREEMPTED_REASON.to_owned());
                        s.phase = LocalPhase::Evicted { reason };
                        s.since = now;
                    }
                    Err(e) => tracing::warn!(job = name, error = %e, "preemption delete failed"),
                }
            }
            if s.phase == LocalPhase::Running {
                let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
                if let Some(n) = nodes.get(&(s.uid.clone(), s.attempt)) {
                    s.nodes.clone_from(n);
                }
            }
            if s.phase == LocalPhase::Running
                && let Some(at) = status::checkpointed_at(&job)
            {
                checkpoints.push(ReportedCheckpoint {
                    uid: s.uid.clone(),
                    attempt: s.attempt,
                    at,
                });
            }
            out.push(s);
        }
        Ok((out, checkpoints))
    }
}

/// `now + grace` in whole seconds (the annotation's precision), saturating on absurd grace.
fn deadline(now: DateTime<Utc>, grace: Duration) -> DateTime<Utc> {
    let at = TimeDelta::from_std(grace)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    DateTime::from_timestamp(at.timestamp(), 0).unwrap_or(at)
}
