//! What makes two submissions "the same" for an idempotency key: the digest of the workload
//! as the client wrote it (name, labels, annotations, spec), without what the server stamps
//! (UID, status, versions, times).
//!
//! The node that takes a submission computes it once and the command carries it
//! (`Command::SubmitWorkload::digest`), so every node records the same digest from the same
//! log without hashing the workload again; apply computes it for an entry that lacks it (one
//! written by an earlier release). A retry sent as YAML instead of JSON is still the same
//! submission.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

use tideway_api::{ObjectMeta, Workload};

/// A submission's SHA-256, held as its 32 bytes and written as 64 lowercase hex digits (the
/// form records have always had in snapshots and in the state digest, so both are the same
/// bytes as before). Every submission leaves a record for 24 hours; as a string the digest
/// was 64 bytes on the heap plus a 24-byte header, a tenth of a pending workload's memory.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SubmissionDigest([u8; 32]);

impl SubmissionDigest {
    pub fn to_hex(&self) -> String {
        crate::hex::lower(&self.0)
    }
}

impl std::fmt::Debug for SubmissionDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for SubmissionDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for SubmissionDigest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SubmissionDigest;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a SHA-256 digest as 64 lowercase hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SubmissionDigest, E> {
                // Lowercase only: the encoder writes nothing else, and an uppercase digit
                // would not give the same bytes back.
                crate::hex::parse_lower(v)
                    .map(SubmissionDigest)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_str(V)
    }
}

/// SHA-256 of the workload's client-written content: its JSON without the server's stamps.
///
/// Computed for every submission (once, by the node that takes it), so the JSON is written
/// from a borrowed view straight into the hash: no copy of the workload, no buffer. The bytes
/// hashed are those of the workload with its stamps cleared (a test holds both equal), the
/// form the records of earlier versions were made from.
pub fn submission_digest(w: &Workload) -> SubmissionDigest {
    // Destructured field by field: a field added to the workload or its metadata does not
    // compile here until it is placed in the digest or left out of it on purpose.
    let Workload {
        api_version,
        kind,
        metadata,
        spec,
        status: _,
    } = w;
    let ObjectMeta {
        name,
        labels,
        annotations,
        uid: _,
        creation_timestamp: _,
        resource_version: _,
        generation: _,
    } = metadata;
    let view = DigestView {
        api_version,
        kind,
        metadata: MetaView {
            name,
            labels,
            annotations,
        },
        spec,
    };
    let mut hash = HashWriter::new();
    // Serializing plain data into a hash does not fail; were it to, the digest of what was
    // written so far would only make such submissions compare equal, never corrupt state.
    let _ = serde_json::to_writer(&mut hash, &view);
    let mut out = [0u8; 32];
    out.copy_from_slice(hash.finish().as_ref());
    SubmissionDigest(out)
}

/// The workload as [`submission_digest`] hashes it: `Workload`'s JSON with no status and
/// metadata of name, labels and annotations (serde names and skips as the owned types).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DigestView<'a> {
    api_version: &'a str,
    kind: &'a str,
    metadata: MetaView<'a>,
    spec: &'a tideway_api::WorkloadSpec,
}

#[derive(Serialize)]
struct MetaView<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "no_entries")]
    labels: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "no_entries")]
    annotations: &'a BTreeMap<String, String>,
}

fn no_entries(m: &&BTreeMap<String, String>) -> bool {
    m.is_empty()
}

/// Feeds written bytes to a SHA-256 context, in blocks: serde_json writes a workload as a hundred or so fragments (a
/// quote, a key, a comma), and each `update` of the hash has a fixed cost of its own, which
/// was about a third of the digest's time. The bytes hashed are the same.
struct HashWriter {
    hash: ring::digest::Context,
    buf: [u8; HASH_BLOCK],
    len: usize,
}

/// Four SHA-256 blocks: the hash takes whole blocks without copying them again.
const HASH_BLOCK: usize = 256;

impl HashWriter {
    fn new() -> Self {
        Self {
            hash: ring::digest::Context::new(&ring::digest::SHA256),
            buf: [0; HASH_BLOCK],
            len: 0,
        }
    }

    fn finish(mut self) -> ring::digest::Digest {
        self.hash.update(&self.buf[..self.len]);
        self.hash.finish()
    }
}

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.len + bytes.len() > HASH_BLOCK {
            self.hash.update(&self.buf[..self.len]);
            self.len = 0;
            if bytes.len() >= HASH_BLOCK {
                self.hash.update(bytes);
                return Ok(bytes.len());
            }
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
        assert_eq!(submission_digest(&a).to_hex().len(), 64);
        // The form records written by earlier versions hold (per-byte `{:02x}`): a retry after
        // an upgrade still matches its record.
        let bytes = serde_json::to_vec(&a).expect("encode");
        let earlier: String = ring::digest::digest(&ring::digest::SHA256, &bytes)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(submission_digest(&stamped).to_hex(), earlier);
        // Records hold the bytes and write the same string: snapshots and state digests
        // are the bytes they were.
        let d = submission_digest(&a);
        let packed = rmp_serde::to_vec_named(&d).expect("encode");
        assert_eq!(packed, rmp_serde::to_vec_named(&earlier).expect("encode"));
        let back: SubmissionDigest = rmp_serde::from_slice(&packed).expect("decode");
        assert_eq!(back, d);
        for bad in [
            "abc",
            &earlier.to_uppercase(),
            &format!("{}zz", &earlier[2..]),
        ] {
            let packed = rmp_serde::to_vec_named(bad).expect("encode");
            assert!(
                rmp_serde::from_slice::<SubmissionDigest>(&packed).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_hash_in_blocks_is_the_hash_of_the_bytes() {
        use std::io::Write;
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        // Fragments below, at and above the block, and ones that end exactly on it.
        let sizes = [0, 1, 255, 256, 257, 1000, 3, 256, 0, 17, 511];
        let mut w = HashWriter::new();
        let mut at = 0;
        for n in sizes.iter().cycle() {
            let n = (*n).min(bytes.len() - at);
            assert_eq!(w.write(&bytes[at..at + n]).expect("write"), n);
            at += n;
            if at == bytes.len() {
                break;
            }
        }
        let whole = ring::digest::digest(&ring::digest::SHA256, &bytes);
        assert_eq!(w.finish().as_ref(), whole.as_ref());
        assert_eq!(
            HashWriter::new().finish().as_ref(),
            ring::digest::digest(&ring::digest::SHA256, b"").as_ref()
        );
    }

    /// The digest as earlier versions made it: a copy with the stamps cleared, as JSON.
    fn digest_of_a_cleared_copy(w: &Workload) -> SubmissionDigest {
        let mut w = w.clone();
        w.status = None;
        w.metadata.uid = None;
        w.metadata.resource_version = None;
        w.metadata.generation = None;
        w.metadata.creation_timestamp = None;
        let bytes = serde_json::to_vec(&w).expect("encode");
        let mut out = [0u8; 32];
        out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref());
        SubmissionDigest(out)
    }

    #[test]
    fn the_borrowed_view_hashes_the_bytes_of_a_cleared_copy() {
        let rich: Workload = tideway_api::decode_json(
            br#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload",
            "metadata":{"name":"llama-ft-1","uid":"u-1","labels":{"team":"nlp","tier":"a"},
              "annotations":{"note":"quote \" and \u00e9"},"resourceVersion":9,"generation":2,
              "creationTimestamp":"2026-12-05T10:00:00Z"},
            "spec":{"queue":"default","class":"training","priorityClass":"normal",
              "podSets":[{"name":"worker","count":2,"gpusPerPod":8,"flavor":"H100"},
                         {"name":"ps","count":1,"gpusPerPod":1,"flavor":"H100"}],
              "gang":{"minCount":2},"topology":{"required":"rack"},
              "runtimeEstimateSeconds":7200,"runtimeLimitSeconds":14400,
              "checkpoint":{"intervalSeconds":600},
              "template":{"image":"nvcr.io/x:1","args":["--lr","0.1"],"env":{"A":"b"}}}}"#,
        )
        .expect("a valid workload");
        let mut running = rich.clone();
        running.status = Some(Default::default());
        let mut bare = w(3);
        bare.metadata.labels.clear();
        for x in [&rich, &running, &bare, &w(1)] {
            assert_eq!(submission_digest(x), digest_of_a_cleared_copy(x), "{x:?}");
        }
        assert_eq!(submission_digest(&rich), submission_digest(&running));
        let mut relabelled = rich.clone();
        relabelled.metadata.labels.insert("tier".into(), "b".into());
        assert_ne!(submission_digest(&rich), submission_digest(&relabelled));
    }

    fn at() -> chrono::DateTime<chrono::Utc> {
        use chrono::TimeZone;
        chrono::Utc
            .timestamp_opt(1_800_000_000, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn a_key_replays_its_own_submission_and_refuses_other_content() {
        use crate::state::FederationState;
        use crate::state::command::{Command, CommandResult, Rejection};

        let at = at();
        let mut s = FederationState::default();
        let submit = |s: &mut FederationState, index: u64, mut w: Workload| {
            w.metadata.uid = Some(format!("uid-{index}"));
            s.apply(
                index,
                Command::SubmitWorkload {
                    workload: Box::new(w),
                    idempotency_key: "k".into(),
                    at,
                    digest: None,
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

    #[test]
    fn a_submission_keyed_by_its_uid_holds_one_copy_of_it_and_replays_the_same() {
        use std::sync::Arc;

        use crate::state::FederationState;
        use crate::state::command::{Command, CommandResult};

        let mut s = FederationState::default();
        let mut sub = w(1);
        sub.metadata.uid = Some("0b6c2f3e-6f0e-4d7e-9a55-3f6f1f6f2a11".into());
        let cmd = Command::SubmitWorkload {
            workload: Box::new(sub),
            idempotency_key: "0b6c2f3e-6f0e-4d7e-9a55-3f6f1f6f2a11".into(),
            at: at(),
            digest: None,
        };
        let replay = cmd.clone();
        assert!(matches!(s.apply(1, cmd), CommandResult::Created { .. }));
        let (key, rec) = s.idempotency.iter().next().expect("a record");
        let (uid, _) = s.uids.iter().next().expect("a uid");
        assert!(Arc::ptr_eq(key, uid), "the key is the UID index's string");
        assert!(rec.uid.as_ref().is_some_and(|u| Arc::ptr_eq(u, uid)));
        let (_, expiring) = s.idempotency_expiry.iter().next().expect("an expiry");
        assert!(Arc::ptr_eq(expiring, uid));
        // The server's own retry of the same command is a replay, not a conflict.
        assert!(matches!(s.apply(2, replay), CommandResult::Existing { .. }));
        assert_eq!(s.workloads.len(), 1);
    }

    #[test]
    fn a_carried_digest_is_recorded_and_an_entry_without_one_records_the_same() {
        use crate::state::FederationState;
        use crate::state::command::{Command, CommandResult, Request};

        let submit = |digest: Option<SubmissionDigest>| Command::SubmitWorkload {
            workload: Box::new(w(1)),
            idempotency_key: "k".into(),
            at: at(),
            digest,
        };
        let carried = submit(Some(submission_digest(&w(1))));
        // On the wire and in the log: the field travels when present, and an entry of an
        // earlier release (no field) decodes to none.
        let bytes = rmp_serde::to_vec_named(&Request::new(vec![carried.clone()])).expect("encode");
        let back: Request = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back.commands[0], carried);
        let earlier = rmp_serde::to_vec_named(&Request::new(vec![submit(None)])).expect("encode");
        assert!(
            earlier.len() < bytes.len(),
            "no field when there is no digest"
        );
        let back: Request = rmp_serde::from_slice(&earlier).expect("decode");
        assert_eq!(back.commands[0], submit(None));

        let record = |cmd: Command| {
            let mut s = FederationState::default();
            assert!(matches!(s.apply(1, cmd), CommandResult::Created { .. }));
            let digest = s.idempotency.get("k").and_then(|r| r.digest);
            // Other content under the same key is still refused, whichever way it came.
            let mut other = w(2);
            other.metadata.name = "w".into();
            let again = Command::SubmitWorkload {
                workload: Box::new(other),
                idempotency_key: "k".into(),
                at: at(),
                digest: None,
            };
            assert!(matches!(s.apply(2, again), CommandResult::Rejected { .. }));
            digest
        };
        let with = record(carried);
        assert_eq!(with, Some(submission_digest(&w(1))));
        assert_eq!(record(submit(None)), with);
    }
}
