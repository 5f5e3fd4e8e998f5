//! What the federation state machine is asked to do, and what it answers.
//!
//! Commands carry every input that apply needs, including the time and the UID chosen by the
//! proposing node, so that applying the same log on every node gives the same state.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::agent::LocalStatus;
use tideway_api::digest::CapacityDigest;
use tideway_api::{
    ClusterName, FieldError, MemberCluster, MemberPhase, Policy, PriorityClass, Queue,
    QuotaSchedule, RoleBinding, Workload, WorkloadName, WorkloadPhase,
};

/// One Raft entry's payload: a batch of commands, so that many concurrent submissions share one
/// log entry, one replication message and one fsync. On disk and on the wire it travels in a
/// [`LogFormat`] envelope.
///
/// The commands are shared: the log keeps the entries it appended in memory for replication
/// and apply to read back (`raft::log_tail`), and every read is a copy of the entry.
/// `LogFormatRef` below must stay the borrowed twin of [`LogFormat`]: a test compares their bytes.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(from = "LogFormat")]
pub struct Request {
    pub commands: std::sync::Arc<Vec<Command>>,
}

impl Request {
    pub fn new(commands: Vec<Command>) -> Self {
        Self {
            commands: std::sync::Arc::new(commands),
        }
    }

    /// The commands, to apply: moved out when this is the only copy, cloned otherwise.
    pub fn into_commands(self) -> Vec<Command> {
        std::sync::Arc::unwrap_or_clone(self.commands)
    }
}

/// Encoded as a [`LogFormat`] (the same bytes), from a borrow: `serde(into)` would clone the
/// whole batch for every encoding (the log, and each follower's append).
impl Serialize for Request {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LogFormatRef::V1 {
            commands: &self.commands,
        }
        .serialize(s)
    }
}

/// [`LogFormat`], borrowed, for encoding.
#[derive(Serialize)]
enum LogFormatRef<'a> {
    #[serde(rename = "v1")]
    V1 { commands: &'a [Command] },
}

/// The versioned form of a log entry's payload. A node meeting a version it does not know
/// fails to decode with "unknown variant `vN`" before reading any of it; a change of what a
/// command carries is a new variant with explicit upgrade code, never a silent reinterpretation.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum LogFormat {
    #[serde(rename = "v1")]
    V1 { commands: Vec<Command> },
}

impl From<LogFormat> for Request {
    fn from(f: LogFormat) -> Self {
        match f {
            LogFormat::V1 { commands } => Request::new(commands),
        }
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Request({} commands)", self.commands.len())
    }
}

/// Declares [`Command`] and `Wire`, its externally tagged twin that only decodes, from one
/// list of variants, so that the two cannot drift apart (see `command_decode`).
macro_rules! commands {
    (
        $(#[$meta:meta])*
        pub enum Command {
            $(
                $(#[$vattr:meta])*
                $variant:ident {
                    $( $(#[$fattr:meta])* $field:ident : $ty:ty ),* $(,)?
                }
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Serialize, PartialEq)]
        #[serde(tag = "op", rename_all = "camelCase")]
        pub enum Command {
            $( $(#[$vattr])* $variant { $( $(#[$fattr])* $field: $ty ),* } ),*
        }

        /// What follows a command's tag, decoded by the variant the tag names.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        enum Wire {
            $( $(#[$vattr])* $variant { $( $(#[$fattr])* $field: $ty ),* } ),*
        }

        impl From<Wire> for Command {
            fn from(w: Wire) -> Self {
                match w {
                    $( Wire::$variant { $($field),* } => Command::$variant { $($field),* } ),*
                }
            }
        }

        /// serde's own decoder of the tagged form, which buffers the map first: what
        /// commands were decoded with before `command_decode`, kept to compare against.
        #[cfg(test)]
        #[derive(Deserialize)]
        #[serde(tag = "op", rename_all = "camelCase")]
        enum Buffered {
            $( $variant { $( $(#[$fattr])* $field: $ty ),* } ),*
        }

        #[cfg(test)]
        impl From<Buffered> for Command {
            fn from(w: Buffered) -> Self {
                match w {
                    $( Buffered::$variant { $($field),* } => Command::$variant { $($field),* } ),*
                }
            }
        }
    };
}

commands! {
pub enum Command {
    /// Accept a workload. `workload` is already validated, named, and stamped with a UID.
    SubmitWorkload {
        workload: Box<Workload>,
        idempotency_key: String,
        at: DateTime<Utc>,
        /// The submission's idempotency digest (`state::idempotency`), taken once by the node
        /// that took the submission, so that the nodes applying it need not hash the workload
        /// again. Absent in entries of earlier releases, and where a test leaves it out: apply
        /// then takes it itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<super::idempotency::SubmissionDigest>,
    },
    /// Create or replace a queue.
    PutQueue {
        queue: Box<Queue>,
        at: DateTime<Utc>,
    },
    /// A member cluster's agent registered (or re-registered after a restart).
    RegisterMember {
        member: Box<MemberCluster>,
        agent_version: Option<String>,
        at: DateTime<Utc>,
        /// The leader's flap policy: a registration that brings a NotReady member back (its
        /// agent restarted) counts as a return (absent in older entries: it does not).
        #[serde(default)]
        flaps: Option<super::members::FlapPolicy>,
    },
    /// The leader saw a member's heartbeats stop, or start again.
    MemberHealth {
        name: String,
        phase: MemberPhase,
        message: Option<String>,
        at: DateTime<Utc>,
        /// On a return from NotReady: the leader's flap policy, which may quarantine the
        /// member (absent in older entries: no quarantine).
        #[serde(default)]
        flaps: Option<super::members::FlapPolicy>,
    },
    /// A coalesced capacity digest of a member.
    MemberDigest {
        name: String,
        digest: Box<CapacityDigest>,
        at: DateTime<Utc>,
    },
    /// Place a pending workload (by name) on a member cluster.
    Assign {
        workload: WorkloadName,
        cluster: ClusterName,
        pool: Option<String>,
        at: DateTime<Utc>,
    },
    /// One scheduling cycle's decisions.
    ApplyCycle {
        decisions: Box<super::scheduling::CycleDecisions>,
        at: DateTime<Utc>,
    },
    /// Status transitions reported by a member's agent.
    ReportStatus {
        cluster: ClusterName,
        statuses: Vec<LocalStatus>,
    },
    /// Create or replace a priority class.
    PutPriorityClass {
        priority_class: Box<PriorityClass>,
        at: DateTime<Utc>,
    },
    /// An operator cordons, drains or uncordons a member.
    SetMemberIntent {
        name: String,
        intent: super::members::MemberIntent,
        at: DateTime<Utc>,
    },
    /// The leader moves work off a lost member: fence the old attempts, requeue the work.
    RecoverWorkloads {
        cluster: String,
        uids: Vec<String>,
        at: DateTime<Utc>,
        /// The member's liveness epoch the leader saw it lost in; the move applies only if
        /// the member has not come back since.
        #[serde(default)]
        epoch: Option<u64>,
    },
    /// An operator removes a member that holds no active work.
    RemoveMember { name: String, at: DateTime<Utc> },
    /// Create or replace a quota schedule; apply records the window open at `at`.
    PutQuotaSchedule {
        schedule: Box<QuotaSchedule>,
        at: DateTime<Utc>,
    },
    /// Create or replace several queues, priority classes and quota schedules as one policy
    /// version: the policy objects of a multi-document apply.
    PutPolicyObjects {
        queues: Vec<Queue>,
        priority_classes: Vec<PriorityClass>,
        quota_schedules: Vec<QuotaSchedule>,
        at: DateTime<Utc>,
    },
    /// Apply a whole policy bundle (queues, priority classes, quota schedules, settings).
    PutPolicy {
        policy: Box<Policy>,
        at: DateTime<Utc>,
    },
    /// A quota schedule's window changed at `boundary` (proposed by the leader at `at`).
    TidalTransition {
        schedule: String,
        from: Option<String>,
        to: Option<String>,
        boundary: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// A command on behalf of an authenticated subject, for the audit trail.
    As {
        actor: String,
        command: Box<Command>,
    },
    /// Cancel a pending or running workload, by name or UID.
    CancelWorkload { id: String, at: DateTime<Utc> },
    /// Create or replace a webhook (its cursor and counters stay).
    PutWebhook {
        webhook: Box<tideway_api::webhook::Webhook>,
        at: DateTime<Utc>,
    },
    /// Delete a webhook; its deliveries stop.
    DeleteWebhook { name: String, at: DateTime<Utc> },
    /// The leader got a 2xx for audit event `seq` from webhook `name`.
    WebhookDelivered {
        name: String,
        seq: u64,
        at: DateTime<Utc>,
    },
    /// An attempt to deliver audit event `seq` to webhook `name` failed.
    WebhookFailed {
        name: String,
        seq: u64,
        error: String,
        at: DateTime<Utc>,
    },
    /// Events before `to` left the bounded audit trail before webhook `name` got them.
    WebhookSkipped {
        name: String,
        to: u64,
        at: DateTime<Utc>,
    },
    /// Restore policy version `to` (default: the rollout's base, or the version before the
    /// current) as the next version. `only_candidate`: only while that version is being
    /// rolled out (a trigger's rollback, proposed by the leader).
    RollbackPolicy {
        to: Option<u64>,
        only_candidate: Option<u64>,
        applied_by: Option<String>,
        /// Why: the operator's note, or the trigger and its measured value.
        message: Option<String>,
        at: DateTime<Utc>,
    },
    /// Apply the scoped candidate to the whole fleet, as the next version.
    WidenPolicy {
        applied_by: Option<String>,
        message: Option<String>,
        at: DateTime<Utc>,
    },
    /// Remove these terminal workloads, if they finished before `before` (chosen by the
    /// leader from its retention setting; apply checks each again).
    CompactWorkloads {
        names: Vec<String>,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// Create or replace a role binding.
    PutRoleBinding {
        binding: Box<RoleBinding>,
        at: DateTime<Utc>,
    },
    /// Delete a role binding by name.
    DeleteRoleBinding { name: String, at: DateTime<Utc> },
    /// Drop the audit records numbered below `before_seq` (chosen by the leader from its
    /// audit retention setting).
    CompactAudit { before_seq: u64, at: DateTime<Utc> },
    /// An operator lets a removed member's agent register it again.
    ReadmitMember { name: String, at: DateTime<Utc> },
    /// Hand-over notices from the leader's cycle: each running workload should checkpoint by
    /// its deadline and keep running (recorded on its assignment; see `state::checkpoints`).
    RequestCheckpoints {
        notices: Vec<super::checkpoints::CheckpointRequest>,
        at: DateTime<Utc>,
    },
    /// The leader ends a member's quarantine for flapping, its time being up at `at`.
    EndQuarantine { name: String, at: DateTime<Utc> },
    /// Checkpoints a member's agent reported for running work (`StatusReport.checkpoints`).
    ReportCheckpoints {
        cluster: ClusterName,
        checkpoints: Vec<tideway_api::agent::ReportedCheckpoint>,
    },
}
}

/// Decoded tag first, without serde's buffering of the whole map (see `command_decode`).
impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(super::command_decode::TaggedVisitor::<Wire>(
            std::marker::PhantomData,
        ))
        .map(Command::from)
    }
}

impl Command {
    /// `cmd` on behalf of `actor`, when there is one (an authenticated request).
    pub fn by(actor: Option<&str>, cmd: Command) -> Command {
        match actor {
            Some(a) => Command::As {
                actor: a.to_string(),
                command: Box::new(cmd),
            },
            None => cmd,
        }
    }
}

/// The answer of the state machine to a whole [`Request`], one result per command, in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Response {
    pub results: Vec<CommandResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum CommandResult {
    /// The command took effect; the object as stored.
    Created { object: StoredObject },
    /// The idempotency key was seen before: the object it created, unchanged.
    Existing { object: StoredObject },
    /// The command changed this many objects.
    Updated { count: u32 },
    /// The command was refused; nothing changed.
    Rejected { rejection: Rejection },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Rejection {
    /// The command names something that does not exist (an unknown queue).
    Invalid { errors: Vec<FieldError> },
    /// The name is taken by another object created with another idempotency key.
    Conflict { name: String },
    /// The command names an object that does not exist.
    NotFound { what: String },
    /// The idempotency key created `workload` from other content.
    IdempotencyKeyReused { key: String, workload: String },
    /// The workload already finished; it cannot be changed any more.
    Terminal { name: String, phase: WorkloadPhase },
    /// The object is in a state that does not allow the change now.
    Busy { reason: String },
}

/// An object as the state machine stored it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum StoredObject {
    /// Shared with the state's map: a submission's answer is the stored workload, not a copy.
    Workload(Arc<Workload>),
    Queue(Box<Queue>),
    PriorityClass(Box<PriorityClass>),
    MemberCluster(Box<MemberCluster>),
    QuotaSchedule(Box<QuotaSchedule>),
    Webhook(Box<tideway_api::webhook::Webhook>),
    Policy(Box<Policy>),
    RoleBinding(Box<RoleBinding>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_entries_carry_their_format_and_refuse_an_unknown_one() {
        let req = Request::new(vec![Command::ReportStatus {
            cluster: "c1".into(),
            statuses: vec![],
        }]);
        let bytes = rmp_serde::to_vec_named(&req).expect("encode");
        // The borrowed encoding is the owned envelope's, byte for byte.
        let owned = LogFormat::V1 {
            commands: (*req.commands).clone(),
        };
        assert_eq!(bytes, rmp_serde::to_vec_named(&owned).expect("encode"));
        assert_eq!(
            serde_json::to_string(&req).expect("json"),
            serde_json::to_string(&owned).expect("json")
        );
        let v: rmp_serde::decode::Error =
            rmp_serde::from_slice::<Request>(&rename_version(&bytes)).expect_err("v2 refused");
        assert!(v.to_string().contains("unknown variant `v2`"), "{v}");
        let back: Request = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back, req);
    }

    /// The same bytes with the envelope's version tag changed from v1 to v2.
    fn rename_version(bytes: &[u8]) -> Vec<u8> {
        let v1 = [0xa2, b'v', b'1'];
        let at = bytes
            .windows(3)
            .position(|w| w == v1)
            .expect("the envelope names its version");
        let mut out = bytes.to_vec();
        out[at + 2] = b'2';
        out
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).expect("a time")
    }

    /// Commands of many kinds, some with their optional fields set and some without.
    fn samples() -> Vec<Command> {
        use tideway_api::{PodSet, WorkloadClass, WorkloadSpec};
        let mut w = Workload::new(
            "llama-ft-1",
            WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("worker", 2, 8, "H100")],
            ),
        );
        w.metadata.labels.insert("team".into(), "nlp".into());
        w.metadata.uid = Some("u-1".into());
        let submit = Command::SubmitWorkload {
            digest: Some(super::super::idempotency::submission_digest(&w)),
            workload: Box::new(w.clone()),
            idempotency_key: "k-1".into(),
            at: at(1),
        };
        vec![
            submit.clone(),
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: "k-2".into(),
                at: at(2),
                digest: None,
            },
            Command::As {
                actor: "alice".into(),
                command: Box::new(submit),
            },
            Command::As {
                actor: "ops".into(),
                command: Box::new(Command::As {
                    actor: "nested".into(),
                    command: Box::new(Command::CancelWorkload {
                        id: "llama-ft-1".into(),
                        at: at(3),
                    }),
                }),
            },
            Command::ReportStatus {
                cluster: "c1".into(),
                statuses: vec![],
            },
            Command::MemberHealth {
                name: "c1".into(),
                phase: tideway_api::MemberPhase::NotReady,
                message: Some("heartbeats stopped".into()),
                at: at(4),
                flaps: None,
            },
            Command::SetMemberIntent {
                name: "c1".into(),
                intent: super::super::members::MemberIntent::Draining,
                at: at(5),
            },
            Command::RecoverWorkloads {
                cluster: "c1".into(),
                uids: vec!["u-1".into(), "u-2".into()],
                at: at(6),
                epoch: Some(3),
            },
            Command::TidalTransition {
                schedule: "day-night".into(),
                from: Some("day".into()),
                to: None,
                boundary: at(7),
                at: at(8),
            },
            Command::RollbackPolicy {
                to: None,
                only_candidate: Some(4),
                applied_by: None,
                message: Some("p99 over its bound".into()),
                at: at(9),
            },
            Command::CompactWorkloads {
                names: vec!["a".into(), "b".into()],
                before: at(10),
                at: at(11),
            },
            Command::WebhookFailed {
                name: "hook".into(),
                seq: 17,
                error: "503".into(),
                at: at(12),
            },
            Command::CompactAudit {
                before_seq: 99,
                at: at(13),
            },
            Command::EndQuarantine {
                name: "c2".into(),
                at: at(14),
            },
        ]
    }

    #[test]
    fn commands_decode_tag_first_as_serdes_buffering_decoder_did() {
        for cmd in samples() {
            let bytes = rmp_serde::to_vec_named(&cmd).expect("encode");
            let back: Command = rmp_serde::from_slice(&bytes).expect("decode");
            assert_eq!(back, cmd);
            let buffered: Buffered = rmp_serde::from_slice(&bytes).expect("buffered decode");
            assert_eq!(Command::from(buffered), cmd);
            let json = serde_json::to_vec(&cmd).expect("json");
            let back: Command = serde_json::from_slice(&json).expect("decode json");
            assert_eq!(back, cmd);
        }
        // A whole entry, as the log and the append RPCs carry it.
        let req = Request::new(samples());
        let bytes = rmp_serde::to_vec_named(&req).expect("encode");
        let back: Request = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back, req);
    }

    #[test]
    fn a_command_missing_a_default_field_decodes_and_a_bad_one_is_refused_by_name() {
        // Entries written before `epoch` and `flaps` existed.
        let old: Command = serde_json::from_str(
            r#"{"op":"recoverWorkloads","cluster":"c1","uids":["u-1"],"at":"2027-01-15T08:00:00Z"}"#,
        )
        .expect("an entry of an earlier release");
        assert!(matches!(old, Command::RecoverWorkloads { epoch: None, .. }));
        let refused = |text: &str| {
            serde_json::from_str::<Command>(text)
                .expect_err(text)
                .to_string()
        };
        let e = refused(r#"{"op":"removeMember","at":"2027-01-15T08:00:00Z"}"#);
        assert!(e.contains("missing field `name`"), "{e}");
        let e = refused(r#"{"op":"launchRockets","at":"2027-01-15T08:00:00Z"}"#);
        assert!(e.contains("unknown variant `launchRockets`"), "{e}");
        let e = refused(r#"{"name":"c1","op":"removeMember","at":"2027-01-15T08:00:00Z"}"#);
        assert!(e.contains("first field must be `op`"), "{e}");
        let e = refused(r#"{}"#);
        assert!(e.contains("missing field `op`"), "{e}");
        let e = refused(r#"["removeMember","c1"]"#);
        assert!(e.contains("a map whose first key is `op`"), "{e}");
        let e = refused(r#"{"op":"compactAudit","before_seq":"many","at":"2027-01-15T08:00:00Z"}"#);
        assert!(e.contains("invalid type"), "{e}");
        // The same refusals from MessagePack, as the log holds it.
        let mut bytes = rmp_serde::to_vec_named(&Command::EndQuarantine {
            name: "c2".into(),
            at: at(1),
        })
        .expect("encode");
        let tag = bytes
            .windows(3)
            .position(|w| w == [0xa2, b'o', b'p'])
            .expect("the tag");
        bytes[tag + 1] = b'x';
        let e = rmp_serde::from_slice::<Command>(&bytes).expect_err("no tag");
        assert!(e.to_string().contains("first field must be `op`"), "{e}");
    }
}
