//! The wire types of policy versions: history, diff, rollback, dry-run; and the field-level
//! diff itself, so that the server and the CLI show the same differences.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::policy::Policy;
use crate::workload::PendingReason;

/// One entry of `GET /v1/policy/versions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PolicyVersionSummary {
    /// The version number.
    pub version: u64,
    /// The bundle's name.
    pub name: String,
    /// When it was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<DateTime<Utc>>,
    /// Who applied it (`system:leader` for an automatic rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_by: Option<String>,
    /// Set when this version restored an earlier one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<u64>,
    /// Why it was applied, or which trigger rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether its rollout is scoped (only part of the fleet runs it).
    pub scoped: bool,
}

/// `GET /v1/policy/versions`: the retained versions, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PolicyHistory {
    /// The version in force (the candidate while a rollout is scoped).
    pub current: u64,
    /// While a rollout is scoped: the version the rest of the fleet still runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_base: Option<u64>,
    /// Retained versions, oldest first.
    pub items: Vec<PolicyVersionSummary>,
}

/// `POST /v1/policy/rollback`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RollbackRequest {
    /// The version to restore; the one before the current when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<u64>,
    /// A note for the history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `POST /v1/policy/diff`: compare two versions, or a version and a candidate document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DiffRequest {
    /// The old side; the current version when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    /// The new side as a version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<u64>,
    /// The new side as a document (`-f FILE`); exclusive with `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<Policy>,
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiffEntry {
    /// camelCase path; list items with a name are addressed by it: `spec.queues[serving]`.
    pub path: String,
    /// The old value as JSON text; absent when the field was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    /// The new value as JSON text; absent when the field was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
}

/// The answer of `POST /v1/policy/diff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PolicyDiff {
    /// The old side's version.
    pub from: u64,
    /// The new side's version; absent for a candidate document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<u64>,
    /// Changed fields, in document order.
    pub changes: Vec<DiffEntry>,
}

/// Field-level differences between two bundles' specs (metadata and status are not policy).
pub fn diff(old: &Policy, new: &Policy) -> Vec<DiffEntry> {
    let (Ok(a), Ok(b)) = (
        serde_json::to_value(&old.spec),
        serde_json::to_value(&new.spec),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    walk("spec", Some(&a), Some(&b), &mut out);
    out
}

fn text(v: &serde_json::Value) -> String {
    v.to_string()
}

fn name_of(v: &serde_json::Value) -> Option<&str> {
    v.get("metadata")?.get("name")?.as_str()
}

fn walk(
    path: &str,
    a: Option<&serde_json::Value>,
    b: Option<&serde_json::Value>,
    out: &mut Vec<DiffEntry>,
) {
    use serde_json::Value;
    match (a, b) {
        (Some(x), Some(y)) if x == y => {}
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().collect();
            keys.extend(y.keys().filter(|k| !x.contains_key(*k)));
            for k in keys {
                walk(&format!("{path}.{k}"), x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y)))
            if x.iter().chain(y).all(|v| name_of(v).is_some()) =>
        {
            // Named items are matched by name, so a reordered or inserted queue reads as
            // what it is rather than as every later item changed.
            let by_name = |l: &Vec<Value>| -> BTreeMap<String, Value> {
                l.iter()
                    .filter_map(|v| name_of(v).map(|n| (n.to_owned(), v.clone())))
                    .collect()
            };
            let (mx, my) = (by_name(x), by_name(y));
            let mut names: Vec<&String> = mx.keys().collect();
            names.extend(my.keys().filter(|k| !mx.contains_key(*k)));
            for n in names {
                walk(&format!("{path}[{n}]"), mx.get(n), my.get(n), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            for i in 0..x.len().max(y.len()) {
                walk(&format!("{path}[{i}]"), x.get(i), y.get(i), out);
            }
        }
        (None, None) => {}
        (x, y) => out.push(DiffEntry {
            path: path.to_owned(),
            old: x.map(text),
            new: y.map(text),
        }),
    }
}

/// A workload whose fate would change under the candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DryRunWorkload {
    /// The workload's name.
    pub workload: String,
    /// Its queue.
    pub queue: String,
    /// The cluster it would be placed on (newly admitted) or runs on (preempted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Why it would wait (newly pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<PendingReason>,
}

/// The quota and admissions of one queue, now and under the candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct QuotaMove {
    /// The queue.
    pub queue: String,
    /// Guaranteed GPUs (all flavors, tidal windows applied) under the current policy.
    pub guaranteed_now: u64,
    /// The same under the candidate.
    pub guaranteed_candidate: u64,
    /// GPUs this cycle would admit under the current policy.
    pub admitted_gpus_now: u64,
    /// The same under the candidate.
    pub admitted_gpus_candidate: u64,
}

/// The answer of `POST /v1/policy/dry-run`: what the candidate changes now. Nothing is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DryRunReport {
    /// The version the live decisions were computed under.
    pub current_version: u64,
    /// The instant both cycles were evaluated at.
    pub at: DateTime<Utc>,
    /// The applied log index the live state was read at.
    pub applied_index: u64,
    /// Pending workloads the candidate would place now and the current policy would not.
    pub newly_admitted: Vec<DryRunWorkload>,
    /// Workloads the current policy would place now that would wait under the candidate.
    pub newly_pending: Vec<DryRunWorkload>,
    /// Running workloads the candidate would preempt and the current policy would not.
    pub newly_preempted: Vec<DryRunWorkload>,
    /// Per queue, where quota or admissions differ.
    pub quota_moves: Vec<QuotaMove>,
}

impl DryRunReport {
    /// True when the candidate decides exactly what the current policy decides.
    pub fn no_change(&self) -> bool {
        self.newly_admitted.is_empty()
            && self.newly_pending.is_empty()
            && self.newly_preempted.is_empty()
            && self.quota_moves.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode_yaml;

    #[test]
    fn diff_names_fields_by_path_and_named_items_by_name() {
        let old: Policy = decode_yaml(include_str!("../testdata/policy.yaml").as_bytes()).unwrap();
        assert!(diff(&old, &old).is_empty());
        let mut new = old.clone();
        new.spec.queues.swap(0, 1);
        assert!(
            diff(&old, &new).is_empty(),
            "order of named items is not a change"
        );
        new.spec.queues[0].spec.fair_share_weight = 7.0;
        new.spec.scheduler.max_preemptions_per_minute = 3;
        new.spec.queues.pop();
        let name0 = new.spec.queues[0].metadata.name.clone();
        let gone = old
            .spec
            .queues
            .iter()
            .find(|q| q.metadata.name != name0)
            .unwrap()
            .metadata
            .name
            .clone();
        let d = diff(&old, &new);
        let paths: Vec<&str> = d.iter().map(|e| e.path.as_str()).collect();
        assert!(
            paths.contains(&format!("spec.queues[{name0}].spec.fairShareWeight").as_str()),
            "{paths:?}"
        );
        let removed = d
            .iter()
            .find(|e| e.path == format!("spec.queues[{gone}]"))
            .unwrap();
        assert!(removed.old.is_some() && removed.new.is_none());
        let knob = d
            .iter()
            .find(|e| e.path == "spec.scheduler.maxPreemptionsPerMinute")
            .unwrap();
        assert_eq!(knob.old.as_deref(), Some("20"));
        assert_eq!(knob.new.as_deref(), Some("3"));
    }
}
