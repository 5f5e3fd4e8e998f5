//! What makes two submissions "the same" for an idempotency key: the digest of the workload
//! as the client wrote it (name, labels, annotations, spec), without what the server stamps
//! (UID, status, versions, times).
//!
//! Apply computes it from the workload the command carries, so every node gets the same
//! digest from the same log without the command carrying a new field; a retry sent as YAML
//! instead of JSON is still the same submission.

use tideway_api::Workload;

/// SHA-256 of the workload's client-written content, as lowercase hex.
pub fn submission_digest(w: &Workload) -> String {
    let mut w = w.clone();
    w.status = None;
    w.metadata.uid = None;
    w.metadata.resource_version = None;
    w.metadata.generation = None;
    w.metadata.creation_timestamp = None;
    // Serializing a plain data type into a Vec does not fail; an empty digest input would
    // only make every such submission compare equal, never corrupt state.
    let bytes = serde_json::to_vec(&w).unwrap_or_default();
    crate::hex::lower(ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref())
}

#[cfg(test)]
mod tests {
    use tideway_api::{PodSet, WorkloadClass, WorkloadSpec};

    use super::*;

    fn w(count: u32) -> Workload {
        Workload::new(
            "w",
            WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("p", count, 8, "H100")],
            ),
        )
    }

    #[test]
    fn server_stamps_do_not_change_the_digest_but_the_spec_does() {
        let a = w(1);
        let mut stamped = a.clone();
        stamped.metadata.uid = Some("u".into());
        stamped.metadata.resource_version = Some(7);
        stamped.status = Some(Default::default());
        assert_eq!(submission_digest(&a), submission_digest(&stamped));
        assert_ne!(submission_digest(&a), submission_digest(&w(2)));
        assert_eq!(submission_digest(&a).len(), 64);
        // The form records written by earlier versions hold (per-byte `{:02x}`): a retry after
        // an upgrade still matches its record.
        let bytes = serde_json::to_vec(&a).expect("encode");
        let earlier: String = ring::digest::digest(&ring::digest::SHA256, &bytes)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(submission_digest(&stamped), earlier);
    }

    #[test]
    fn a_key_replays_its_own_submission_and_refuses_other_content() {
        use chrono::TimeZone;

        use crate::state::FederationState;
        use crate::state::command::{Command, CommandResult, Rejection};

        let at = chrono::Utc
            .timestamp_opt(1_800_000_000, 0)
            .single()
            .expect("time");
        let mut s = FederationState::default();
        let submit = |s: &mut FederationState, index: u64, mut w: Workload| {
            w.metadata.uid = Some(format!("uid-{index}"));
            s.apply(
                index,
                Command::SubmitWorkload {
                    workload: Box::new(w),
                    idempotency_key: "k".into(),
                    at,
                },
            )
        };
        assert!(matches!(
            submit(&mut s, 1, w(1)),
            CommandResult::Created { .. }
        ));
        let replay = submit(&mut s, 2, w(1));
        let CommandResult::Existing { .. } = replay else {
            panic!("same content replays: {replay:?}");
        };
        assert_eq!(
            submit(&mut s, 3, w(2)),
            CommandResult::Rejected {
                rejection: Rejection::IdempotencyKeyReused {
                    key: "k".into(),
                    workload: "w".into()
                }
            }
        );
        assert_eq!(
            s.workloads["w"].spec.pod_sets[0].count, 1,
            "nothing changed"
        );
    }
}
