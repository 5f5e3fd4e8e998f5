//! Watching workloads: `GET /v1/workloads?watch=true&resourceVersion=N` (or
//! `/v1/workloads/{id}?watch=true&...`) answers the changes after log index N, waiting up to
//! `timeoutSeconds` for the first one (a long-poll). The answer's `resourceVersion` is where
//! the next call resumes, on any node: nothing between the two calls is missed, so a client
//! that lost its connection goes on from the last version it saw.

use serde::{Deserialize, Serialize};

use crate::workload::Workload;

/// What happened to a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WatchEventType {
    /// Submitted after the watched version (or present, when watching from version 0).
    Added,
    /// Changed after the watched version.
    Modified,
    /// Compacted out of the live state after the watched version.
    Deleted,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WatchEvent {
    /// What happened.
    #[serde(rename = "type")]
    pub kind: WatchEventType,
    /// The workload's name.
    pub name: String,
    /// The log index of the change.
    pub resource_version: u64,
    /// The workload as it is now; absent for `DELETED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Workload>,
}

/// A watch answer: the changes, oldest first, and the version to resume from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WatchPage {
    /// The changes after the requested version, in log order.
    pub items: Vec<WatchEvent>,
    /// Pass as `resourceVersion` to the next call.
    pub resource_version: u64,
}
