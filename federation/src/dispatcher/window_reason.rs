//! The sentence a pending workload's reason becomes when a tidal window's quota is what holds
//! it back: which schedule and window, the quota in force and when it changes.
//!
//! The scheduler core records a structured, date-free reason (`QuotaExhausted`, or
//! `InsufficientCapacity` when the queue could only run by borrowing beyond the window's
//! quota); the schedule, the zone and the time left are the edge's to add, on read, from the
//! same queue view `GET /v1/queues` shows, so the core stays pure and every reader agrees.

use chrono::{DateTime, Utc};
use tideway_api::{PendingReason, Queue, QuotaSetBy, Workload, WorkloadPhase};

/// The code the sentence starts with; clients may match on it.
pub const CODE: &str = "OverWindowQuota";

/// `OverWindowQuota: queue research may use 25 H100 in window day of schedule day-night until
/// 22:00 Europe/Berlin (in 3h12m)` when `w` waits and one of its flavors would take its queue
/// (or its side of the fleet) past a quota a schedule sets now; `None` otherwise. `queues`
/// are the queues with their status as of the read ([`super::queue_view::with_status`]).
pub fn sentence(queues: &[Queue], w: &Workload) -> Option<String> {
    let st = w.status.as_ref()?;
    if st.phase != WorkloadPhase::Pending {
        return None;
    }
    if !matches!(
        st.pending_reason.as_deref()?,
        PendingReason::QuotaExhausted { .. }
            | PendingReason::InsufficientCapacity { .. }
            | PendingReason::Fragmentation { .. }
    ) {
        return None;
    }
    let q = queues
        .iter()
        .find(|q| q.metadata.name == w.spec.queue.as_str())?;
    let status = q.status.as_ref()?;
    for (flavor, gpus) in w.spec.gpus_by_flavor() {
        let Some(f) = status.flavors.iter().find(|f| f.flavor == flavor) else {
            continue;
        };
        if let (Some(quota), Some(by)) = (f.quota_gpus, &f.set_by)
            && f.used_gpus + gpus > quota
        {
            return Some(format!(
                "{CODE}: queue {} may use {quota} {flavor} {}",
                q.metadata.name,
                in_window(by)
            ));
        }
        if let Some(s) = f
            .sides
            .iter()
            .find(|s| s.side_used_gpus + gpus > s.quota_gpus)
        {
            return Some(format!(
                "{CODE}: the {} pool may use {} {flavor} {}",
                s.side,
                s.quota_gpus,
                in_window(&s.set_by)
            ));
        }
    }
    None
}

/// `in window day of schedule day-night until 22:00 Europe/Berlin (in 3h12m)`.
fn in_window(by: &QuotaSetBy) -> String {
    let window = match &by.window {
        Some(w) => format!("in window {w} of schedule {}", by.schedule),
        None => format!("between the windows of schedule {}", by.schedule),
    };
    match (by.until, by.seconds_left) {
        (Some(until), Some(left)) => format!(
            "{window} until {} {} (in {})",
            local_hm(until, &by.time_zone),
            by.time_zone,
            span(left)
        ),
        _ => window,
    }
}

/// `at` as `HH:MM` in the IANA zone (UTC for an unknown one); a boundary more than a day
/// away carries its weekday.
fn local_hm(at: DateTime<Utc>, zone: &str) -> String {
    match zone.parse::<chrono_tz::Tz>() {
        Ok(tz) => at.with_timezone(&tz).format("%H:%M").to_string(),
        Err(_) => at.format("%H:%M").to_string(),
    }
}

/// Seconds as `3h12m`, `12m`, `45s` or `2d4h`.
pub fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, h, _) => format!("{d}d{h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tideway_api::{FlavorQuota, QueueFlavorStatus, QueueSpec, QueueStatus, WorkloadStatus};

    fn set_by() -> QuotaSetBy {
        let until: DateTime<Utc> = "2025-01-06T21:00:00Z".parse().unwrap();
        QuotaSetBy {
            schedule: "day-night".into(),
            window: Some("day".into()),
            until: Some(until),
            time_zone: "Europe/Berlin".into(),
            until_local: None,
            seconds_left: Some(3 * 3600 + 12 * 60),
        }
    }

    fn queue(used: u64, by: Option<QuotaSetBy>) -> Queue {
        let mut spec = QueueSpec::new("t");
        spec.quotas = vec![FlavorQuota::guaranteed("H100", 40)];
        let mut q = Queue::new("research", spec);
        q.status = Some(QueueStatus {
            flavors: vec![QueueFlavorStatus {
                flavor: "H100".into(),
                used_gpus: used,
                quota_gpus: Some(25),
                set_by: by,
                ..Default::default()
            }],
            ..Default::default()
        });
        q
    }

    fn pending(reason: PendingReason) -> Workload {
        let mut w: Workload = serde_json::from_value(serde_json::json!({
            "apiVersion": tideway_api::API_VERSION, "kind": "Workload",
            "metadata": {"name": "train"},
            "spec": {"queue": "research", "class": "training",
                     "podSets": [{"name": "w", "count": 1, "gpusPerPod": 8, "flavor": "H100"}]},
        }))
        .unwrap();
        w.status = Some(WorkloadStatus {
            phase: WorkloadPhase::Pending,
            pending_reason: Some(Arc::new(reason)),
            ..Default::default()
        });
        w
    }

    fn capacity() -> PendingReason {
        PendingReason::InsufficientCapacity {
            flavor: "H100".into(),
            needed: 8,
            largest_fit_per_cluster: Default::default(),
        }
    }

    #[test]
    fn a_workload_past_the_window_quota_names_the_window_and_its_end() {
        let s = sentence(&[queue(24, Some(set_by()))], &pending(capacity())).unwrap();
        assert_eq!(
            s,
            "OverWindowQuota: queue research may use 25 H100 in window day of schedule \
             day-night until 22:00 Europe/Berlin (in 3h12m)"
        );
    }

    #[test]
    fn within_the_quota_or_without_a_schedule_there_is_no_window_sentence() {
        assert_eq!(
            sentence(&[queue(8, Some(set_by()))], &pending(capacity())),
            None
        );
        assert_eq!(sentence(&[queue(24, None)], &pending(capacity())), None);
        assert_eq!(
            sentence(
                &[queue(24, Some(set_by()))],
                &pending(PendingReason::RateLimited)
            ),
            None
        );
    }

    #[test]
    fn spans_read_as_hours_and_minutes() {
        assert_eq!(span(3 * 3600 + 12 * 60 + 5), "3h12m");
        assert_eq!(span(59), "59s");
        assert_eq!(span(600), "10m");
        assert_eq!(span(2 * 86_400 + 4 * 3600), "2d4h");
    }
}
