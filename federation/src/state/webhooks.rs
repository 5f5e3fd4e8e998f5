//! Webhooks and their delivery cursors, in the replicated state.
//!
//! The leader delivers by reading the audit trail from each webhook's cursor; after a 2xx
//! it proposes the cursor's advance, so a new leader resumes where the acknowledged
//! deliveries end. An event can be delivered twice (the leader died between the 2xx and
//! the commit of the advance), never lost: at least once, deduplicated by the receiver on
//! the event id. Apply moves a cursor only forward, so a stale leader's late advance is
//! harmless.

use chrono::{DateTime, Utc};
use tideway_api::webhook::{Webhook, WebhookStatus};

use super::FederationState;
use super::command::{CommandResult, Rejection, StoredObject};

/// Stored errors are cut to this many bytes.
const MAX_ERROR_LEN: usize = 512;

impl FederationState {
    /// Creates or replaces a webhook. A new one starts at the end of the audit trail (it
    /// is told what happens from now on); a replaced one keeps its cursor and counters.
    pub(super) fn put_webhook(
        &mut self,
        mut w: Webhook,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        w.metadata.resource_version = Some(index);
        let name = w.metadata.name.clone();
        let previous = self.webhooks.get(&name);
        w.metadata.creation_timestamp = previous
            .and_then(|p| p.metadata.creation_timestamp)
            .or(Some(at));
        w.status = Some(
            previous
                .and_then(|p| p.status.clone())
                .unwrap_or_else(|| WebhookStatus {
                    next_seq: self.audit.next_seq,
                    ..Default::default()
                }),
        );
        self.webhooks.insert(name, w.clone());
        CommandResult::Created {
            object: StoredObject::Webhook(Box::new(w)),
        }
    }

    /// Removes a webhook; answers it as it was.
    pub(super) fn delete_webhook(&mut self, name: &str) -> CommandResult {
        match self.webhooks.remove(name) {
            Some(w) => CommandResult::Created {
                object: StoredObject::Webhook(Box::new(w)),
            },
            None => not_found(name),
        }
    }

    /// Event `seq` was acknowledged: the cursor moves past it (never back).
    pub(super) fn webhook_delivered(
        &mut self,
        name: &str,
        seq: u64,
        at: DateTime<Utc>,
    ) -> CommandResult {
        let Some(st) = self.webhook_status(name) else {
            return not_found(name);
        };
        if seq < st.next_seq {
            return CommandResult::Updated { count: 0 };
        }
        st.next_seq = seq + 1;
        st.last_delivered = Some(seq);
        st.last_delivered_at = Some(at);
        st.failures = 0;
        CommandResult::Updated { count: 1 }
    }

    /// An attempt at event `seq` failed with `error`.
    pub(super) fn webhook_failed(&mut self, name: &str, seq: u64, error: &str) -> CommandResult {
        let Some(st) = self.webhook_status(name) else {
            return not_found(name);
        };
        if seq < st.next_seq {
            // Delivered meanwhile (by another leader): the failure is old news.
            return CommandResult::Updated { count: 0 };
        }
        st.failures += 1;
        st.total_failures += 1;
        let mut e = error.to_string();
        if e.len() > MAX_ERROR_LEN {
            let mut cut = MAX_ERROR_LEN;
            while !e.is_char_boundary(cut) {
                cut -= 1;
            }
            e.truncate(cut);
        }
        st.last_error = Some(format!("event {seq}: {e}"));
        CommandResult::Updated { count: 1 }
    }

    /// Events `[next_seq, to)` left the bounded trail undelivered: the cursor skips them.
    pub(super) fn webhook_skipped(&mut self, name: &str, to: u64) -> CommandResult {
        let Some(st) = self.webhook_status(name) else {
            return not_found(name);
        };
        if to <= st.next_seq {
            return CommandResult::Updated { count: 0 };
        }
        st.skipped += to - st.next_seq;
        st.next_seq = to;
        CommandResult::Updated { count: 1 }
    }

    fn webhook_status(&mut self, name: &str) -> Option<&mut WebhookStatus> {
        self.webhooks
            .get_mut(name)
            .map(|w| w.status.get_or_insert_with(Default::default))
    }

    /// The next event webhook `name` should deliver: the first record at or after its
    /// cursor of a kind it asked for. `Err(seq)`: the cursor is behind the oldest record the
    /// trail still holds, which is `seq`.
    pub fn next_webhook_event(
        &self,
        name: &str,
    ) -> Option<Result<tideway_api::audit::AuditEvent, u64>> {
        let w = self.webhooks.get(name)?;
        let next = w.status.as_ref().map_or(0, |s| s.next_seq);
        let events = &self.audit.events;
        let oldest = events.front().map_or(self.audit.next_seq, |e| e.seq);
        if next < oldest {
            return Some(Err(oldest));
        }
        // Sequence numbers are consecutive in the trail: index straight to the cursor.
        let start = usize::try_from(next - oldest).ok()?;
        events
            .skip(start.min(events.len()))
            .iter()
            .find(|e| w.spec.events.contains(&e.kind))
            .cloned()
            .map(Ok)
    }
}

fn not_found(name: &str) -> CommandResult {
    CommandResult::Rejected {
        rejection: Rejection::NotFound {
            what: format!("webhook '{name}'"),
        },
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::audit::AuditKind;
    use tideway_api::webhook::WebhookSpec;
    use tideway_api::{PriorityClass, PriorityClassSpec, Queue, QueueSpec};

    use super::*;
    use crate::state::command::Command;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn the_cursor_starts_at_creation_moves_only_forward_and_keeps_the_kinds_asked_for() {
        let mut s = FederationState::default();
        let put_queue = |s: &mut FederationState, i: u64, name: &str| {
            s.apply(
                i,
                Command::PutQueue {
                    queue: Box::new(Queue::new(name, QueueSpec::new("ml"))),
                    at: t(i as i64),
                },
            );
        };
        put_queue(&mut s, 1, "before");
        let hook = Webhook::new(
            "ops",
            WebhookSpec {
                url: "http://127.0.0.1:9/".into(),
                events: vec![AuditKind::PolicyChanged],
                secret_ref: None,
            },
        );
        s.apply(
            2,
            Command::PutWebhook {
                webhook: Box::new(hook.clone()),
                at: t(2),
            },
        );
        assert!(
            s.next_webhook_event("ops").is_none(),
            "nothing before creation"
        );
        s.apply(
            3,
            Command::PutPriorityClass {
                priority_class: Box::new(PriorityClass::new("pc", PriorityClassSpec::new(5))),
                at: t(3),
            },
        );
        put_queue(&mut s, 4, "after");
        let first = s.next_webhook_event("ops").expect("some").expect("held");
        assert_eq!((first.kind, first.index), (AuditKind::PolicyChanged, 3));
        s.apply(
            5,
            Command::WebhookFailed {
                name: "ops".into(),
                seq: first.seq,
                error: "HTTP 500".into(),
                at: t(5),
            },
        );
        s.apply(
            6,
            Command::WebhookDelivered {
                name: "ops".into(),
                seq: first.seq,
                at: t(6),
            },
        );
        let second = s.next_webhook_event("ops").expect("some").expect("held");
        assert_eq!(second.index, 4);
        // A stale leader's late report of the first changes nothing.
        let res = s.apply(
            7,
            Command::WebhookDelivered {
                name: "ops".into(),
                seq: first.seq,
                at: t(7),
            },
        );
        assert_eq!(res, CommandResult::Updated { count: 0 });
        let st = s.webhooks["ops"].status.clone().expect("status");
        assert_eq!(
            (st.failures, st.total_failures, st.last_delivered),
            (0, 1, Some(first.seq))
        );
        assert_eq!(
            st.last_error.as_deref(),
            Some(format!("event {}: HTTP 500", first.seq).as_str())
        );
        // Re-applying the webhook keeps its cursor.
        s.apply(
            8,
            Command::PutWebhook {
                webhook: Box::new(hook),
                at: t(8),
            },
        );
        assert_eq!(
            s.next_webhook_event("ops")
                .expect("some")
                .expect("held")
                .index,
            4
        );
    }
}
