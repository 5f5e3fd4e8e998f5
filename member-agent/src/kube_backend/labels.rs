//! The labels and annotations Tideway puts on member-cluster objects, and the job names.
//!
//! Identity lives in labels, not in names: the agent finds its objects by
//! `tideway.dev/workload-uid` (+ `tideway.dev/attempt`), so a restarted agent, or one whose
//! naming rule changed, still recognises what an earlier incarnation created.

use std::collections::BTreeMap;

/// The federation's UID of the workload: the idempotency key.
pub const WORKLOAD_UID: &str = "tideway.dev/workload-uid";
/// Dispatch attempt: a retry is a new object, a replay of the same attempt is not.
pub const ATTEMPT: &str = "tideway.dev/attempt";
/// The workload's name, for people reading `kubectl get`.
pub const WORKLOAD: &str = "tideway.dev/workload";
/// Lets `kubectl get -l app.kubernetes.io/managed-by=tideway` find everything we made.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "tideway";
/// Kueue's queue label on a Job.
pub const KUEUE_QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";
/// Kueue partial admission: the fewest pods the Job may start with (the gang minimum).
pub const KUEUE_MIN_PARALLELISM: &str = "kueue.x-k8s.io/job-min-parallelism";

/// When the agent will delete a preempted job (RFC 3339); the deadline survives agent
/// restarts because it lives on the object, not in the agent's memory.
pub const PREEMPT_AT: &str = "tideway.dev/preempt-at";
/// Tells the workload (e.g. via a downward-API volume) to write a checkpoint now.
pub const CHECKPOINT_REQUESTED: &str = "tideway.dev/checkpoint-requested";
/// A hand-over notice (RFC 3339): checkpoint by then and keep running. Unlike a preemption
/// nothing is deleted; the workload watches the annotation (e.g. a downward-API volume).
pub const CHECKPOINT_BY: &str = "tideway.dev/checkpoint-by";
/// Written by the workload (RFC 3339) each time it checkpoints; the agent reports it so
/// preemption knows the work a stop would lose.
pub const CHECKPOINTED_AT: &str = "tideway.dev/checkpointed-at";
/// Why the agent evicts a job at its `preempt-at` deadline when it is not a preemption (a
/// node fault): the reason its Evicted status carries.
pub const EVICT_REASON: &str = "tideway.dev/evict-reason";

/// Every Kubernetes name we create is a DNS-1123 label.
pub const MAX_NAME_LEN: usize = 63;
/// Enough UID characters that two workloads with the same name never share a job name.
const UID_CHARS: usize = 8;

/// Selects every object this agent manages (any workload, any attempt).
pub fn managed_selector() -> String {
    WORKLOAD_UID.to_owned()
}

/// Selects every attempt of one workload.
pub fn uid_selector(uid: &str) -> String {
    format!("{WORKLOAD_UID}={uid}")
}

/// Selects one attempt of one workload: the idempotency key of `ensure`.
pub fn attempt_selector(uid: &str, attempt: u32) -> String {
    format!("{WORKLOAD_UID}={uid},{ATTEMPT}={attempt}")
}

/// The labels of a job for one attempt of a workload.
pub fn job_labels(uid: &str, attempt: u32, workload_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (WORKLOAD_UID.to_owned(), uid.to_owned()),
        (ATTEMPT.to_owned(), attempt.to_string()),
        (WORKLOAD.to_owned(), label_value(workload_name)),
        (MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
    ])
}

/// A valid label value from any string: invalid characters become '-', at most 63
/// characters, alphanumeric at both ends (possibly empty, which Kubernetes accepts).
pub fn label_value(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(MAX_NAME_LEN)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Lower-case alphanumerics and '-' only, at most 63, no '-' at either end; may be empty.
fn dns_chars(s: &str, max: usize) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(max)
        .collect();
    mapped.trim_matches('-').to_owned()
}

/// A DNS-1123 label from a pod set name (task and container names must be one).
pub fn job_name_part(s: &str) -> String {
    let part = dns_chars(s, MAX_NAME_LEN);
    if part.is_empty() {
        "main".to_owned()
    } else {
        part
    }
}

/// The job name of one attempt: `<workload>-<uid prefix>-<attempt>`, a DNS-1123 label of at
/// most 63 characters.
///
/// The UID prefix is there because the federation may reuse a name after the earlier workload
/// is gone: without it, a 409 on create could be the *old* workload's job, and treating it as
/// ours would lose the new one.
pub fn job_name(workload_name: &str, uid: &str, attempt: u32) -> String {
    let uid_part: String = uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .take(UID_CHARS)
        .collect();
    let suffix = if uid_part.is_empty() {
        format!("-{attempt}")
    } else {
        format!("-{uid_part}-{attempt}")
    };
    let base = dns_chars(workload_name, MAX_NAME_LEN.saturating_sub(suffix.len()));
    let base = if base.is_empty() { "tideway" } else { &base };
    format!("{base}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tideway_api::meta::{validate_label_value, validate_name};

    const UID: &str = "3f2a9c1e-77b0-4a51-9d1c-0b6f1e2d3c4b";

    #[test]
    fn job_name_is_name_uid_prefix_attempt() {
        assert_eq!(job_name("llama-ft", UID, 1), "llama-ft-3f2a9c1e-1");
    }

    #[test]
    fn job_names_are_dns_labels_whatever_the_input() {
        let long = "a".repeat(63);
        for (name, uid, attempt) in [
            (long.as_str(), UID, u32::MAX),
            ("Llama_FT.v2", UID, 3),
            ("---", "", 1),
            ("", "ZZ", 7),
            ("x-", UID, 10),
        ] {
            let n = job_name(name, uid, attempt);
            assert!(n.len() <= MAX_NAME_LEN, "{n}");
            validate_name(&n).unwrap_or_else(|e| panic!("{n}: {e}"));
        }
        assert!(job_name(&long, UID, 1).ends_with("-3f2a9c1e-1"));
    }

    #[test]
    fn label_values_are_valid() {
        for s in ["llama", "-x-", "a b", &"z".repeat(80), "é"] {
            let v = label_value(s);
            validate_label_value(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
        }
    }

    #[test]
    fn selectors() {
        assert_eq!(
            attempt_selector(UID, 2),
            format!("tideway.dev/workload-uid={UID},tideway.dev/attempt=2")
        );
        assert_eq!(uid_selector("u"), "tideway.dev/workload-uid=u");
        assert_eq!(managed_selector(), "tideway.dev/workload-uid");
    }
}
