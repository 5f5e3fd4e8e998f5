//! The workloads `tideway bench scale` submits, one definition for the bench and for the
//! in-process measurements that stand in for it (the restart cost and the digest walk), so
//! that their figures are of the same workloads.

/// A mix of shapes, classes and priorities, so the cycle sees more than one kind of work:
/// rack-bound 8-GPU H100 gangs, two-pod A100 gangs, 4-GPU L40S inference, 1-GPU H100 jobs.
pub fn workload_json(name: &str, i: u64) -> String {
    let (class, prio, pods, gpus, flavor, topology) = match i % 4 {
        0 => (
            "training",
            "normal",
            1,
            8,
            "H100",
            r#","topology":{"required":"rack"}"#,
        ),
        1 => (
            "training",
            "high",
            2,
            8,
            "A100",
            r#","topology":{"required":"rack"}"#,
        ),
        2 => ("inference", "normal", 1, 4, "L40S", ""),
        _ => ("experiment", "low", 1, 1, "H100", ""),
    };
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"default","class":"{class}","priorityClass":"{prio}","podSets":[{{"name":"worker","count":{pods},"gpusPerPod":{gpus},"flavor":"{flavor}"}}],"gang":{{"minCount":{pods}}}{topology},"runtimeEstimateSeconds":7200,"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
}

/// The in-process measurements' shared parts: the bench's submissions as commands, on a clock
/// of their own, and their knobs from the environment.
#[cfg(test)]
pub mod measure {
    use chrono::{DateTime, TimeZone, Utc};
    use tideway_api::Workload;

    use crate::state::command::Command;

    /// `s` seconds into the measurement's clock.
    pub fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    /// The bench's `i`-th workload (`workload_json`), stamped as the API stamps a submission
    /// without an `Idempotency-Key` (its UID is its key), a thousand to the second.
    pub fn submission(i: u64) -> Command {
        let body = super::workload_json(&format!("scale-{i}"), i);
        let mut w: Workload = serde_json::from_str(&body).expect("workload");
        let uid = tideway_api::new_uid();
        w.metadata.uid = Some(uid.clone());
        Command::SubmitWorkload {
            workload: Box::new(w),
            idempotency_key: uid,
            at: t(i as i64 / 1000),
            digest: None,
        }
    }

    /// The number in the environment variable `name`, or `default`.
    pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }
}
