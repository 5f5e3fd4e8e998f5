//! What a new federation holds before anyone applies a policy: a `default` queue and a small
//! ladder of priority classes, so that a first submission works out of the box.
//!
//! This is part of the initial state machine, identical on every node, not a log entry: a
//! node that starts from an empty log and one that installs a snapshot agree on it.

use chrono::{DateTime, Utc};
use tideway_api::{
    PendingReason, Preemptibility, PriorityClass, PriorityClassSpec, Queue, QueueSpec,
    WorkloadPhase, WorkloadStatus,
};

pub const DEFAULT_QUEUE: &str = "default";

pub fn default_queue() -> Queue {
    Queue::new(DEFAULT_QUEUE, QueueSpec::new("default"))
}

pub fn default_priority_classes() -> Vec<PriorityClass> {
    [
        (
            "low",
            100,
            Preemptibility::Allowed,
            "Best effort; first to be preempted",
        ),
        (
            "normal",
            1_000,
            Preemptibility::Allowed,
            "The default for batch work",
        ),
        (
            "high",
            10_000,
            Preemptibility::Cautious,
            "Deadline work; preempted only as a last resort",
        ),
        (
            "critical",
            100_000,
            Preemptibility::Forbidden,
            "Production serving; never preempted",
        ),
    ]
    .into_iter()
    .map(|(name, value, pre, desc)| {
        let mut spec = PriorityClassSpec::new(value);
        spec.preemptibility = pre;
        spec.description = Some(desc.to_string());
        PriorityClass::new(name, spec)
    })
    .collect()
}

/// The status of a workload the moment it is accepted.
pub fn submitted_status(at: DateTime<Utc>) -> WorkloadStatus {
    WorkloadStatus {
        phase: WorkloadPhase::Pending,
        pending_reason: Some(PendingReason::Queued.shared()),
        message: None,
        cluster: None,
        attempts: 0,
        submitted_at: Some(at),
        admitted_at: None,
        started_at: None,
        finished_at: None,
        nodes: Vec::new(),
        retry_not_before: None,
        last_checkpoint_at: None,
    }
}
