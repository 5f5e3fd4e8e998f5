//! Webhook delivery on the leader: each webhook has a worker that reads the audit trail
//! from the webhook's replicated cursor, posts one event at a time, and proposes the
//! cursor's advance after a 2xx. Failures are proposed too (the delivery state everyone
//! reads) and retried with capped exponential backoff, forever: an event is never dropped
//! for a receiver that is down, only delayed. Order is kept: event N+1 waits for N.
//!
//! Every node runs the supervisor; workers act only while their node is leader, and the
//! next leader resumes from the committed cursor, so an event acknowledged but not yet
//! committed is delivered again (receivers dedupe by event id).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use ring::hmac;
use tideway_api::audit::AuditEvent;
use tideway_api::clock::SharedClock;
use tideway_api::webhook::{
    SIGNATURE_HEADER, SecretRef, TIMESTAMP_HEADER, Webhook, WebhookEvent, WebhookSubject,
};
use tokio::task::JoinHandle;

use crate::propose::Proposer;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::command::Command;

/// How the leader delivers.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// How often an idle worker looks for new events.
    pub poll: Duration,
    /// First retry delay; doubles per failure up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// One attempt's deadline.
    pub timeout: Duration,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(200),
            min_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The leader-side context every worker shares.
#[derive(Clone)]
struct Ctx {
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    clock: SharedClock,
    http: reqwest::Client,
    cfg: WebhookConfig,
}

/// Keeps one worker per webhook while this node leads. Runs on every node.
pub async fn webhook_loop(
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    clock: SharedClock,
    cfg: WebhookConfig,
) {
    let http = match tideway_api::http::client_builder()
        .timeout(cfg.timeout)
        .build()
    {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client for webhooks; none will be delivered");
            return;
        }
    };
    let ctx = Ctx {
        raft,
        data,
        proposer,
        clock,
        http,
        cfg,
    };
    let mut workers: BTreeMap<String, JoinHandle<()>> = BTreeMap::new();
    loop {
        tokio::time::sleep(ctx.cfg.poll).await;
        workers.retain(|_, h| !h.is_finished());
        if !ctx.raft.is_leader() {
            continue;
        }
        let names: Vec<String> = match ctx.data.read() {
            Ok(d) => d.state.webhooks.keys().cloned().collect(),
            Err(_) => continue,
        };
        for name in names {
            if let std::collections::btree_map::Entry::Vacant(slot) = workers.entry(name) {
                let ctx = ctx.clone();
                let n = slot.key().clone();
                slot.insert(tokio::spawn(async move { worker(ctx, n).await }));
            }
        }
    }
}

/// What a worker does next.
enum Next {
    Deliver(Box<Webhook>, AuditEvent),
    Skip(u64),
    Idle,
    Gone,
}

fn next(ctx: &Ctx, name: &str) -> Next {
    let Ok(d) = ctx.data.read() else {
        return Next::Idle;
    };
    let Some(hook) = d.state.webhooks.get(name) else {
        return Next::Gone;
    };
    match d.state.next_webhook_event(name) {
        Some(Ok(ev)) => Next::Deliver(Box::new(hook.clone()), ev),
        Some(Err(oldest)) => Next::Skip(oldest),
        None => Next::Idle,
    }
}

/// Delivers webhook `name`'s events in order while this node leads.
async fn worker(ctx: Ctx, name: String) {
    let mut backoff = None;
    while ctx.raft.is_leader() {
        let (hook, ev) = match next(&ctx, &name) {
            Next::Gone => return,
            Next::Idle => {
                tokio::time::sleep(ctx.cfg.poll).await;
                continue;
            }
            Next::Skip(to) => {
                let cmd = Command::WebhookSkipped {
                    name: name.clone(),
                    to,
                    at: ctx.clock.now(),
                };
                if let Err(e) = ctx.proposer.propose(cmd).await {
                    tracing::warn!(error = %e, webhook = %name, "could not skip lost events");
                    tokio::time::sleep(ctx.cfg.poll).await;
                }
                continue;
            }
            Next::Deliver(hook, ev) => (hook, ev),
        };
        let seq = ev.seq;
        let cmd = match post(&ctx, &hook, ev).await {
            Ok(()) => {
                backoff = None;
                Command::WebhookDelivered {
                    name: name.clone(),
                    seq,
                    at: ctx.clock.now(),
                }
            }
            Err(error) => {
                tracing::info!(webhook = %name, seq, %error, "webhook delivery failed");
                let delay = backoff
                    .get_or_insert_with(|| {
                        ExponentialBuilder::default()
                            .with_min_delay(ctx.cfg.min_backoff)
                            .with_max_delay(ctx.cfg.max_backoff)
                            .with_jitter()
                            .without_max_times()
                            .build()
                    })
                    .next()
                    .unwrap_or(ctx.cfg.max_backoff);
                let failed = Command::WebhookFailed {
                    name: name.clone(),
                    seq,
                    error,
                    at: ctx.clock.now(),
                };
                if let Err(e) = ctx.proposer.propose(failed).await {
                    tracing::warn!(error = %e, webhook = %name, "could not record a failure");
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        if let Err(e) = ctx.proposer.propose(cmd).await {
            // Not committed: the event is delivered again, by this leader or the next.
            tracing::warn!(error = %e, webhook = %name, seq, "could not advance the cursor");
            tokio::time::sleep(ctx.cfg.poll).await;
        }
    }
}

/// The secret a webhook's reference names, read on this server now.
pub fn read_secret(r: &SecretRef) -> Result<Vec<u8>, String> {
    match (&r.env, &r.file) {
        (Some(var), _) => std::env::var(var)
            .map(String::into_bytes)
            .map_err(|_| format!("secret: environment variable {var} is not set on this server")),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map(|s| s.trim_end().as_bytes().to_vec())
            .map_err(|e| format!("secret: cannot read {path} on this server: {e}")),
        (None, None) => Err("secret: the reference names neither env nor file".into()),
    }
}

/// `sha256=<hex>` of the HMAC-SHA256 of `body` under `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let tag = hmac::sign(&key, body);
    format!("sha256={}", crate::hex::lower(tag.as_ref()))
}

/// The payload of an audit event for webhook `name`.
pub fn payload(name: &str, ev: AuditEvent) -> WebhookEvent {
    WebhookEvent {
        id: ev.seq,
        index: ev.index,
        webhook: name.to_string(),
        kind: ev.kind,
        time: ev.at,
        subject: WebhookSubject {
            actor: ev.actor.into(),
            // The name the client gave; the queue says whose (`state::tenancy`).
            workload: ev
                .workload
                .map(|w| crate::state::tenancy::plain_name(&w).into()),
            queue: ev.queue.map(Into::into),
            cluster: ev.cluster.map(Into::into),
        },
        details: ev.evidence,
        policy_version: ev.policy_version,
    }
}

/// One attempt: Ok on a 2xx.
async fn post(ctx: &Ctx, hook: &Webhook, ev: AuditEvent) -> Result<(), String> {
    let id = ev.seq;
    let body = serde_json::to_vec(&payload(&hook.metadata.name, ev))
        .map_err(|e| format!("encoding the event: {e}"))?;
    let mut req = ctx
        .http
        .post(&hook.spec.url)
        .header("content-type", "application/json")
        .header("X-Tideway-Event-Id", id.to_string())
        .header(TIMESTAMP_HEADER, ctx.clock.now().timestamp().to_string());
    if let Some(r) = &hook.spec.secret_ref {
        req = req.header(SIGNATURE_HEADER, signature(&read_secret(r)?, &body));
    }
    let resp = req.body(body).send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {}", status.as_u16()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hmac_sha256_of_the_body_in_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_missing_secret_is_an_error_that_names_it_not_an_unsigned_delivery() {
        let e = read_secret(&SecretRef {
            env: Some("TIDEWAY_TEST_NO_SUCH_SECRET_VAR".into()),
            file: None,
        })
        .expect_err("unset");
        assert!(e.contains("TIDEWAY_TEST_NO_SUCH_SECRET_VAR"), "{e}");
    }
}
