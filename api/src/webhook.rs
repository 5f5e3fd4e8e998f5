//! `Webhook`: where the federation posts notifications of audit events (preemption
//! notices, tidal transitions, policy changes, rollbacks), signed with a shared secret.
//!
//! The secret never enters the replicated log: the resource names where each server finds
//! it (an environment variable or a file), so an operator rotates it without a log entry
//! and a log or snapshot copied off a node carries no credential.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::audit::AuditKind;
use crate::meta::{API_VERSION, ObjectMeta, impl_resource};
use crate::validation::{CheckAt, Checker, at, impl_validate};

/// The header carrying `sha256=<hex HMAC-SHA256 of the body under the secret>`.
pub const SIGNATURE_HEADER: &str = "X-Tideway-Signature";
/// The header carrying the Unix time (seconds) of the attempt; the signed body carries the
/// event's own time and id, by which a receiver refuses replays.
pub const TIMESTAMP_HEADER: &str = "X-Tideway-Timestamp";
/// URLs longer than this are refused.
pub const MAX_URL_LEN: usize = 2048;

/// A notification endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Webhook {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `Webhook`.
    pub kind: String,
    /// The webhook's name.
    pub metadata: ObjectMeta,
    /// Where and what to deliver.
    pub spec: WebhookSpec,
    /// Delivery state, kept by the federation; None in a document a user writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WebhookStatus>,
}

impl_resource!(Webhook => "Webhook");

impl Webhook {
    /// A webhook at the current API version.
    pub fn new(name: impl Into<String>, spec: WebhookSpec) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: <Self as crate::meta::Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }
}

/// Where and what to deliver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookSpec {
    /// `http://` or `https://` endpoint that receives a POST per event.
    pub url: String,
    /// The audit kinds delivered, e.g. Preempted, TidalTransition, PolicyChanged,
    /// PolicyRolledBack.
    pub events: Vec<AuditKind>,
    /// Where each server reads the signing secret; unsigned deliveries without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// Where a server finds a secret: exactly one of `env` and `file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretRef {
    /// An environment variable of the server process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A file on the server (trailing whitespace is trimmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// How delivery goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WebhookStatus {
    /// The next audit sequence number to deliver: everything before it that matches was
    /// acknowledged with a 2xx (or was before the webhook existed).
    pub next_seq: u64,
    /// The last acknowledged event's sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivered: Option<u64>,
    /// When it was acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivered_at: Option<DateTime<Utc>>,
    /// Failed attempts since the last success.
    pub failures: u64,
    /// Failed attempts ever.
    pub total_failures: u64,
    /// What the last failed attempt got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Events that left the bounded audit trail before they could be delivered.
    #[serde(default)]
    pub skipped: u64,
}

/// `GET /v1/webhooks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WebhookList {
    /// By name.
    pub items: Vec<Webhook>,
}

/// What a webhook receives: one audit event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WebhookEvent {
    /// The audit sequence number: unique and stable across leaders, so receivers dedupe
    /// redeliveries (delivery is at least once) by it.
    pub id: u64,
    /// The log index of the change.
    pub index: u64,
    /// The webhook delivering it.
    pub webhook: String,
    /// What happened.
    pub kind: AuditKind,
    /// When, as the log entry says.
    pub time: DateTime<Utc>,
    /// What it concerns.
    pub subject: WebhookSubject,
    /// The audit record's evidence.
    pub details: String,
    /// The policy version in force.
    pub policy_version: u64,
}

/// What an event concerns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WebhookSubject {
    /// Who did it.
    pub actor: String,
    /// The workload, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// The queue, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The member cluster, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

impl CheckAt for Webhook {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.header(
            prefix,
            &self.api_version,
            &self.kind,
            <Self as crate::meta::Resource>::KIND,
            &self.metadata,
        );
        let p = at(prefix, "spec").path();
        let s = &self.spec;
        let url = s.url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            c.push(at(&p, "url"), "must be an http:// or https:// URL");
        } else if url.len() > MAX_URL_LEN || url.chars().any(char::is_whitespace) {
            c.push(
                at(&p, "url"),
                format!("must be at most {MAX_URL_LEN} characters, without spaces"),
            );
        }
        if s.events.is_empty() {
            c.push(at(&p, "events"), "name at least one audit kind");
        }
        if let Some(r) = &s.secret_ref {
            match (&r.env, &r.file) {
                (Some(_), Some(_)) | (None, None) => {
                    c.push(at(&p, "secretRef"), "set exactly one of env and file")
                }
                (Some(e), None) if e.is_empty() => c.push(at(&p, "secretRef.env"), "is empty"),
                (None, Some(f)) if f.is_empty() => c.push(at(&p, "secretRef.file"), "is empty"),
                _ => {}
            }
        }
    }
}

impl_validate!(Webhook);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode_yaml;
    use crate::validation::Validate;

    #[test]
    fn a_webhook_decodes_from_yaml_and_bad_fields_are_named() {
        let doc = "apiVersion: tideway.dev/v1alpha1\nkind: Webhook\nmetadata: {name: ops}\n\
                   spec:\n  url: http://127.0.0.1:9/hook\n  events: [Preempted, PolicyChanged]\n\
                   \x20 secretRef: {env: HOOK_SECRET}\n";
        let w: Webhook = decode_yaml(doc.as_bytes()).expect("decodes");
        w.validate().expect("valid");
        assert_eq!(
            w.spec.events,
            vec![AuditKind::Preempted, AuditKind::PolicyChanged]
        );
        let mut bad = w.clone();
        bad.spec.url = "ftp://x".into();
        bad.spec.events.clear();
        bad.spec.secret_ref = Some(SecretRef {
            env: Some("A".into()),
            file: Some("/b".into()),
        });
        let errs = bad.validate().expect_err("invalid");
        for f in ["spec.url", "spec.events", "spec.secretRef"] {
            assert!(errs.has_field(f), "{f}: {errs:?}");
        }
    }
}
