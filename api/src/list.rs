//! Paged listings.

use serde::{Deserialize, Serialize};

use crate::workload::Workload;

/// A page of workloads in submission order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadList {
    pub api_version: String,
    pub kind: String,
    pub items: Vec<Workload>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_: Option<u64>,
}
