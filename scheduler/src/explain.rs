//! Explanations: why a workload waits, cluster by cluster, and what would unblock it.
//!
//! The types are defined in `tideway-api` (the server returns them as they are, in
//! `ExplainResponse`); the core builds them. Re-exported here so the core's callers keep one
//! import path.

pub use tideway_api::explain::{ClusterVerdict, Explanation, Unblock, Verdict};
