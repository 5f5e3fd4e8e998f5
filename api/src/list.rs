//! Listings: a page of workloads, and the full lists of the smaller kinds (queues, priority
//! classes, member clusters).

use serde::{Deserialize, Serialize};

use crate::member_cluster::MemberCluster;
use crate::meta::{API_VERSION, Resource};
use crate::priority_class::PriorityClass;
use crate::queue::Queue;
use crate::role_binding::RoleBinding;
use crate::workload::Workload;

/// A page of workloads in submission order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkloadList {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `WorkloadList`.
    pub kind: String,
    /// The workloads of this page.
    pub items: Vec<Workload>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_: Option<u64>,
}

/// Every object of one kind, unpaged (`kind` is the item kind followed by `List`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourceList<T> {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// `QueueList`, `PriorityClassList`, `MemberClusterList`.
    pub kind: String,
    /// The objects, in name order.
    pub items: Vec<T>,
}

impl<T: Resource> ResourceList<T> {
    /// The list of `items`, with the kind named after `T`.
    pub fn new(items: Vec<T>) -> Self {
        Self {
            api_version: API_VERSION.to_string(),
            kind: format!("{}List", T::KIND),
            items,
        }
    }
}

/// `GET /v1/queues`.
pub type QueueList = ResourceList<Queue>;
/// `GET /v1/priorityclasses`.
pub type PriorityClassList = ResourceList<PriorityClass>;
/// `GET /v1/members`.
pub type MemberClusterList = ResourceList<MemberCluster>;
/// `GET /v1/rolebindings`.
pub type RoleBindingList = ResourceList<RoleBinding>;

/// What a `POST /v1/apply` of several documents did, one item per document in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AppliedList {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `AppliedList`.
    pub kind: String,
    /// Each document's object and what the apply did to it.
    pub items: Vec<Applied>,
    /// The policy version the documents' queues, priority classes and quota schedules made
    /// together; absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
}

/// One document of a multi-document apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// The document's `kind`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// `created`, `configured` or `unchanged`.
    pub outcome: String,
}

impl AppliedList {
    /// The answer for `items`.
    pub fn new(items: Vec<Applied>, policy_version: Option<u64>) -> Self {
        Self {
            api_version: API_VERSION.to_string(),
            kind: "AppliedList".to_string(),
            items,
            policy_version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_kind_is_named_after_the_item_kind() {
        let l = QueueList::new(Vec::new());
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["kind"], "QueueList");
        assert_eq!(v["apiVersion"], API_VERSION);
        assert_eq!(MemberClusterList::new(vec![]).kind, "MemberClusterList");
    }
}
