//! [`SimBackend`]: the agent's [`Backend`] over an embedded [`SimCluster`].
//!
//! Every call first advances the cluster to the clock's now (`tick`), so the agent sees
//! completions and scheduling exactly as it would in a live cluster between two polls. The
//! cluster sits behind a `std::sync::Mutex`, locked only inside these synchronous bodies and
//! never across an await, so no async lock is needed; the `Arc` lets a test or the trace
//! simulator share the cluster with the backend (to inject faults, read nodes).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tideway_api::agent::NodeFaultKind;
use tideway_api::digest::CapacityDigest;

use crate::backend::{Assignment, Backend, BackendError, LocalStatus, ReportedCheckpoint};

use super::cluster::{SimCluster, SimError};
use super::digest::capacity_digest;
use tideway_api::clock::Clock;

#[derive(Debug, Clone)]
pub struct SimBackend {
    cluster: Arc<Mutex<SimCluster>>,
    clock: Arc<dyn Clock>,
    /// Where the cluster is kept between agent runs, if anywhere.
    state_file: Option<PathBuf>,
}

impl SimBackend {
    pub fn new(cluster: SimCluster, clock: Arc<dyn Clock>) -> Self {
        Self::shared(Arc::new(Mutex::new(cluster)), clock)
    }

    /// A backend over a cluster someone else also holds.
    pub fn shared(cluster: Arc<Mutex<SimCluster>>, clock: Arc<dyn Clock>) -> Self {
        Self {
            cluster,
            clock,
            state_file: None,
        }
    }

    /// A backend whose cluster lives in `path`, so it survives the agent (kill -9
    /// included), as a real cluster would: loaded from the file when it exists, else made by
    /// `fresh`, and saved atomically after every call.
    pub fn persisted(
        path: &Path,
        fresh: impl FnOnce() -> SimCluster,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, BackendError> {
        let cluster = match std::fs::read(path) {
            Ok(bytes) => rmp_serde::from_slice(&bytes)
                .map_err(|e| BackendError::Other(format!("reading {}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fresh(),
            Err(e) => {
                return Err(BackendError::Other(format!(
                    "reading {}: {e}",
                    path.display()
                )));
            }
        };
        let b = Self {
            cluster: Arc::new(Mutex::new(cluster)),
            clock,
            state_file: Some(path.to_path_buf()),
        };
        b.with_cluster(|_, _| ())?;
        Ok(b)
    }

    fn save(&self, cluster: &SimCluster) -> Result<(), BackendError> {
        let Some(path) = &self.state_file else {
            return Ok(());
        };
        let io = |e: std::io::Error| BackendError::Other(format!("saving {}: {e}", path.display()));
        let bytes = rmp_serde::to_vec_named(cluster)
            .map_err(|e| BackendError::Other(format!("encoding the cluster: {e}")))?;
        let tmp = path.with_extension("tmp");
        {
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(&bytes).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)
    }

    pub fn cluster(&self) -> &Arc<Mutex<SimCluster>> {
        &self.cluster
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Locks, ticks to now, runs `f`. A poisoned lock means a panic mid-update, so the state
    /// cannot be trusted: report the cluster unavailable rather than act on it.
    fn with_cluster<R>(
        &self,
        f: impl FnOnce(&mut SimCluster, DateTime<Utc>) -> R,
    ) -> Result<R, BackendError> {
        let now = self.clock.now();
        let mut cluster = self.cluster.lock().map_err(|_| {
            BackendError::Unavailable("simulated cluster state is poisoned".to_owned())
        })?;
        cluster.tick(now);
        let out = f(&mut cluster, now);
        self.save(&cluster)?;
        Ok(out)
    }
}

/// How long a workload on a node with an ECC warning has to checkpoint before it is moved.
pub const NODE_FAULT_GRACE: Duration = Duration::from_secs(60);

impl SimBackend {
    /// Injects a node fault (see [`SimCluster::node_fault`]); answers the UIDs affected. The
    /// next digest shows the node cordoned (and unhealthy for a GPU fault or NotReady); the
    /// agent reports the evictions, and the federation requeues that work elsewhere.
    pub fn node_fault(&self, node: &str, kind: NodeFaultKind) -> Result<Vec<String>, BackendError> {
        self.with_cluster(|c, now| {
            let out = c
                .node_fault(node, kind, NODE_FAULT_GRACE, now)
                .map(|(u, _)| u);
            c.tick(now);
            out
        })?
        .map_err(rejected)
    }
}

/// Input the cluster refuses for good is a rejection; nothing in the sim is transient.
fn rejected(e: SimError) -> BackendError {
    BackendError::Rejected(e.to_string())
}

impl Backend for SimBackend {
    async fn digest(&self) -> Result<CapacityDigest, BackendError> {
        self.with_cluster(|c, now| capacity_digest(c, now))
    }

    async fn ensure(&self, assignment: &Assignment) -> Result<(), BackendError> {
        self.with_cluster(|c, now| {
            c.ensure(assignment, now)?;
            // Schedule at once, as a live cluster's scheduler would react to the new object.
            c.tick(now);
            Ok(())
        })?
        .map_err(rejected)
    }

    async fn preempt(&self, uid: &str, grace: Duration) -> Result<(), BackendError> {
        self.with_cluster(|c, now| {
            c.preempt(uid, grace, now);
        })
    }

    async fn checkpoint(&self, uid: &str, by: DateTime<Utc>) -> Result<(), BackendError> {
        self.with_cluster(|c, now| {
            c.checkpoint(uid, by, now);
        })
    }

    async fn remove(&self, uid: &str) -> Result<(), BackendError> {
        self.with_cluster(|c, now| {
            c.remove(uid);
            // Freed GPUs go to pending work right away.
            c.tick(now);
        })
    }

    async fn statuses(&self) -> Result<Vec<LocalStatus>, BackendError> {
        self.with_cluster(|c, _| c.statuses())
    }

    async fn report(&self) -> Result<(Vec<LocalStatus>, Vec<ReportedCheckpoint>), BackendError> {
        self.with_cluster(|c, _| (c.statuses(), c.reported_checkpoints()))
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LocalPhase;
    use crate::sim::cluster::FaultPolicy;
    use crate::sim::cluster::tests::{assignment, small, t};
    use chrono::TimeDelta;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use tideway_api::clock::ManualClock;

    /// The sim backend never awaits anything, so one poll finishes every call: a tiny
    /// executor instead of a runtime dependency.
    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    fn assert_send<T: Send>(_: &T) {}

    fn backend() -> (SimBackend, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(t(0)));
        (SimBackend::new(small(), clock.clone()), clock)
    }

    fn phase_of(b: &SimBackend, uid: &str) -> Option<LocalPhase> {
        block_on(b.statuses())
            .unwrap()
            .into_iter()
            .find(|s| s.uid == uid)
            .map(|s| s.phase)
    }

    /// The cluster outlives the agent: a restarted agent that replays its assignments finds
    /// them present and creates nothing twice, and running work keeps its progress.
    #[test]
    fn persisted_cluster_survives_an_agent_restart_without_duplicates() {
        let dir = std::env::temp_dir().join(format!("tw-sim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sim.state");
        let _ = std::fs::remove_file(&path);
        let clock = Arc::new(ManualClock::new(t(0)));
        let a = assignment("a", 1, 1, None);
        {
            let b = SimBackend::persisted(&path, small, clock.clone()).unwrap();
            block_on(b.ensure(&a)).unwrap();
            assert_eq!(phase_of(&b, "a"), Some(LocalPhase::Running));
            // Dropped without any shutdown, like kill -9.
        }
        clock.advance(Duration::from_secs(5));
        let b = SimBackend::persisted(&path, small, clock.clone()).unwrap();
        assert_eq!(phase_of(&b, "a"), Some(LocalPhase::Running));
        block_on(b.ensure(&a)).unwrap();
        assert_eq!(b.cluster().lock().unwrap().creations(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn futures_are_send_so_the_agent_can_spawn_them() {
        let (b, _) = backend();
        let a = assignment("a", 1, 1, None);
        let f = b.ensure(&a);
        assert_send(&f);
        let g = b.digest();
        assert_send(&g);
        let h = b.statuses();
        assert_send(&h);
    }

    #[test]
    fn lifecycle_through_the_backend() {
        let (b, clock) = backend();
        let a = assignment("a", 2, 8, Some(60));
        block_on(b.ensure(&a)).unwrap();
        block_on(b.ensure(&a)).unwrap();
        assert_eq!(
            block_on(b.statuses()).unwrap().len(),
            1,
            "ensure is idempotent"
        );
        assert_eq!(phase_of(&b, "a"), Some(LocalPhase::Running));
        assert_eq!(block_on(b.digest()).unwrap().pools[0].counts.allocated, 16);

        clock.advance(Duration::from_secs(61));
        let statuses = block_on(b.statuses()).unwrap();
        assert_eq!(statuses[0].phase, LocalPhase::Succeeded);
        assert_eq!(statuses[0].since, t(60));
        assert_eq!(block_on(b.digest()).unwrap().pools[0].counts.allocated, 0);

        let long = assignment("long", 1, 8, None);
        block_on(b.ensure(&long)).unwrap();
        block_on(b.preempt("long", Duration::from_secs(30))).unwrap();
        clock.advance(Duration::from_secs(29));
        assert_eq!(phase_of(&b, "long"), Some(LocalPhase::Running));
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            phase_of(&b, "long"),
            Some(LocalPhase::Evicted {
                reason: "preempted".into()
            })
        );
        block_on(b.remove("long")).unwrap();
        block_on(b.remove("long")).unwrap();
        assert_eq!(phase_of(&b, "long"), None);
    }

    /// A hand-over notice: the running workload checkpoints at once (the work a stop would
    /// lose drops to zero), keeps running, and a replay of the same notice changes nothing.
    #[test]
    fn a_checkpoint_notice_checkpoints_once_and_keeps_running() {
        let (b, clock) = backend();
        block_on(b.ensure(&assignment("long", 1, 8, None))).unwrap();
        clock.advance(Duration::from_secs(100));
        let lost = |b: &SimBackend| {
            let c = b.cluster().lock().unwrap();
            c.workload("long", 1).unwrap().work_since_checkpoint(t(100))
        };
        assert_eq!(lost(&b), TimeDelta::seconds(100));
        block_on(b.checkpoint("long", t(600))).unwrap();
        assert_eq!(lost(&b), TimeDelta::zero());
        assert_eq!(phase_of(&b, "long"), Some(LocalPhase::Running));
        let cps = b.cluster().lock().unwrap().checkpoints();
        assert_eq!(cps.len(), 1);
        assert_eq!((cps[0].at, cps[0].deadline), (t(100), t(600)));

        clock.advance(Duration::from_secs(50));
        block_on(b.checkpoint("long", t(600))).unwrap();
        let cps = b.cluster().lock().unwrap().checkpoints();
        assert_eq!(cps[0].at, t(100), "one checkpoint per notice");
        block_on(b.checkpoint("nope", t(600))).unwrap();
    }

    #[test]
    fn removal_starts_waiting_work_at_once() {
        let (b, _) = backend();
        block_on(b.ensure(&assignment("all", 8, 8, None))).unwrap();
        block_on(b.ensure(&assignment("next", 1, 8, None))).unwrap();
        assert_eq!(phase_of(&b, "next"), Some(LocalPhase::Pending));
        block_on(b.remove("all")).unwrap();
        assert_eq!(phase_of(&b, "next"), Some(LocalPhase::Running));
    }

    #[test]
    fn faults_injected_on_the_shared_cluster_are_reported() {
        let (b, _) = backend();
        block_on(b.ensure(&assignment("g", 3, 8, None))).unwrap();
        {
            let mut c = b.cluster().lock().unwrap();
            let node = *c.workload("g", 1).unwrap().placement.keys().next().unwrap();
            let name = c.nodes()[node].name.clone();
            c.inject_ecc(&name, t(1), FaultPolicy::Fail).unwrap();
        }
        assert!(matches!(phase_of(&b, "g"), Some(LocalPhase::Failed { .. })));
        let d = block_on(b.digest()).unwrap();
        assert_eq!(
            (d.pools[0].counts.unhealthy, d.pools[0].counts.allocated),
            (8, 0)
        );
    }

    #[test]
    fn bad_assignments_are_rejected() {
        let (b, _) = backend();
        let mut a = assignment("a", 1, 8, None);
        a.pool = Some("nope".into());
        assert!(matches!(
            block_on(b.ensure(&a)),
            Err(BackendError::Rejected(_))
        ));
    }
}
