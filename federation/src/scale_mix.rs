//! The workloads `tideway bench scale` submits, one definition for the bench and for the
//! in-process measurements that stand in for it (`raft::state_machine`'s restart cost), so
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
