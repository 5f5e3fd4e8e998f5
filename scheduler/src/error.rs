//! Inconsistencies in a scheduler input. `schedule` itself never fails; these are for callers
//! that replay recorded frames or accept dry-run inputs from users and want to say why one
//! cannot have come from a healthy leader.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InputError {
    #[error("cluster {0:?} appears more than once")]
    DuplicateCluster(String),
    #[error("cluster {cluster:?} carries the digest of {digest:?}")]
    DigestMismatch { cluster: String, digest: String },
    #[error("workload {0:?} appears more than once among pending and running workloads")]
    DuplicateWorkload(String),
    #[error("submission sequence number {0} is used by more than one pending workload")]
    DuplicateSeq(u64),
    #[error("workload {workload:?} refers to unknown cluster {cluster:?}")]
    UnknownCluster { workload: String, cluster: String },
}
