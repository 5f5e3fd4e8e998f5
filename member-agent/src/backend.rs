//! What an agent needs from a member cluster, whatever runs it (Kubernetes or the simulator).
//!
//! Every call is idempotent and keyed by workload UID: an agent restarted at any point
//! re-lists, re-applies its assignments, and never creates a workload twice.

use std::time::Duration;

use chrono::{DateTime, Utc};

use tideway_api::digest::CapacityDigest;

pub use tideway_api::agent::{Assignment, LocalPhase, LocalStatus, ReportedCheckpoint};

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The cluster API could not be reached or answered 5xx: retry later.
    #[error("member cluster unavailable: {0}")]
    Unavailable(String),
    /// The cluster refused the object for good (invalid template, forbidden): report it.
    #[error("rejected by the member cluster: {0}")]
    Rejected(String),
    #[error("{0}")]
    Other(String),
}

/// A member cluster as the agent drives it. Implementations may write `async fn`; the
/// futures must be `Send` because the agent runs them on a multi-threaded runtime.
pub trait Backend: Send + Sync + 'static {
    /// A fresh capacity digest of the cluster.
    fn digest(&self) -> impl Future<Output = Result<CapacityDigest, BackendError>> + Send;

    /// Creates the workload if no object with its UID and attempt exists; otherwise does
    /// nothing. Never creates a second copy.
    fn ensure(
        &self,
        assignment: &Assignment,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Asks the workload to checkpoint and stop within `grace`, then stops it.
    fn preempt(
        &self,
        uid: &str,
        grace: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// A hand-over notice: the workload should checkpoint by `by` and keep running.
    /// Idempotent per (workload, deadline); a workload not running here is fine.
    fn checkpoint(
        &self,
        uid: &str,
        by: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Deletes the workload's objects (cancelled upstream). Absent is fine.
    fn remove(&self, uid: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The status of every workload this agent manages in the cluster.
    fn statuses(&self) -> impl Future<Output = Result<Vec<LocalStatus>, BackendError>> + Send;

    /// The statuses, and the newest checkpoint of every running attempt that reported one,
    /// read in one pass over the cluster. A backend that cannot see checkpoints reports none:
    /// the federation then measures work lost from the start (or the submitter's statement).
    fn report(
        &self,
    ) -> impl Future<Output = Result<(Vec<LocalStatus>, Vec<ReportedCheckpoint>), BackendError>> + Send
    {
        async { Ok((self.statuses().await?, Vec::new())) }
    }

    /// The cluster's clock: what the `since` of its statuses is measured on (a scaled clock
    /// under `tideway dev --speed`).
    fn now(&self) -> DateTime<Utc>;
}
