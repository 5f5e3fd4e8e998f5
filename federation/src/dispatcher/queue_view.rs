//! What a queue holds and may use now, computed when read: `GET /v1/queues`, `tideway
//! queues -o wide`, the dashboard's queue panel and the queue metrics.
//!
//! Nothing here is stored: the counts follow from the workloads in the replicated state,
//! and the quota in force from the schedules' recorded windows through the same
//! [`overrides_now`] the leader's cycle obeys, so the view shows the quota that governs,
//! not the queue's static spec.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tideway_api::{
    Queue, QueueFlavorStatus, QueueStatus, QuotaSetBy, SideQuotaStatus, WorkloadPhase,
};
use tideway_scheduler::QuotaOverride;
use tideway_scheduler::tidal::{FleetSide, overrides_now};

use crate::state::FederationState;

/// One schedule's override, with the schedule it comes from.
struct Governing {
    schedule: String,
    time_zone: String,
    o: QuotaOverride,
}

impl Governing {
    fn set_by(&self, now: DateTime<Utc>) -> QuotaSetBy {
        QuotaSetBy {
            seconds_left: self.o.until.map(|u| (u - now).num_seconds()),
            schedule: self.schedule.clone(),
            window: self.o.window.clone(),
            until: self.o.until,
            until_local: self.o.until.map(|u| QuotaSetBy::local(u, &self.time_zone)),
            time_zone: self.time_zone.clone(),
        }
    }
}

/// Every applied schedule's overrides in its recorded window at `now`.
fn governing(state: &FederationState, queues: &[Queue], now: DateTime<Utc>) -> Vec<Governing> {
    let clusters = state.cluster_views();
    let mut out = Vec::new();
    for (name, schedule) in &state.tidal.schedules {
        let Some(rec) = state.tidal.windows.get(name) else {
            continue;
        };
        for o in overrides_now(schedule, rec, &clusters, queues, now) {
            out.push(Governing {
                schedule: name.clone(),
                time_zone: schedule.spec.time_zone.clone(),
                o,
            });
        }
    }
    out
}

#[derive(Default)]
struct Tally {
    pending: u32,
    active: u32,
    used: u64,
    /// Used by side, per region the work runs in.
    by_side: BTreeMap<(FleetSide, String), u64>,
}

/// The queues of `state` with their status as of `now`.
pub fn with_status(state: &FederationState, now: DateTime<Utc>) -> Vec<Queue> {
    let queues: Vec<Queue> = state.queues.values().cloned().collect();
    let gov = governing(state, &queues, now);
    let region_of: BTreeMap<&str, &str> = state
        .members
        .iter()
        .map(|(n, m)| (n.as_str(), m.cluster.spec.region.as_str()))
        .collect();
    // (queue, flavor) → tally; queue → (pending, active) workloads.
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    let mut totals: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for w in state.workloads.values() {
        let Some(st) = &w.status else { continue };
        let active = matches!(
            st.phase,
            WorkloadPhase::Admitted | WorkloadPhase::Assigned | WorkloadPhase::Running
        );
        let pending = st.phase == WorkloadPhase::Pending;
        if !active && !pending {
            continue;
        }
        let queue = w.spec.queue.to_string();
        let t = totals.entry(queue.clone()).or_default();
        if active {
            t.1 += 1;
        } else {
            t.0 += 1;
        }
        let side = FleetSide::of_class(w.spec.class);
        let region = st
            .cluster
            .as_deref()
            .and_then(|c| region_of.get(c))
            .copied()
            .unwrap_or_default();
        for (flavor, gpus) in w.spec.gpus_by_flavor() {
            let t = tallies
                .entry((queue.clone(), flavor.to_string()))
                .or_default();
            if active {
                t.active += 1;
                t.used += gpus;
                *t.by_side.entry((side, region.to_string())).or_default() += gpus;
            } else {
                t.pending += 1;
            }
        }
    }
    // What each side uses per flavor, across queues, within each side override's regions.
    let side_used = |side: FleetSide, flavor: &str, regions: &[String]| -> u64 {
        tallies
            .iter()
            .filter(|((_, f), _)| f == flavor)
            .flat_map(|(_, t)| t.by_side.iter())
            .filter(|((s, r), _)| *s == side && (regions.is_empty() || regions.contains(r)))
            .map(|(_, n)| *n)
            .sum()
    };
    let mut rows: BTreeMap<String, Vec<QueueFlavorStatus>> = BTreeMap::new();
    for q in &queues {
        let name = &q.metadata.name;
        let mut flavors: Vec<String> = q.spec.quotas.iter().map(|f| f.flavor.clone()).collect();
        flavors.extend(
            tallies
                .keys()
                .filter(|(qn, _)| qn == name)
                .map(|(_, f)| f.clone()),
        );
        flavors.extend(
            gov.iter()
                .filter(|g| g.o.queue == *name)
                .map(|g| g.o.quota.flavor.clone()),
        );
        flavors.sort();
        flavors.dedup();
        let mut out = Vec::new();
        for flavor in flavors {
            let t = tallies.get(&(name.clone(), flavor.clone()));
            let own = q.spec.quotas.iter().find(|f| f.flavor == flavor);
            let scheduled = gov
                .iter()
                .find(|g| g.o.queue == *name && g.o.quota.flavor == flavor);
            let quota = match scheduled {
                Some(g) => Some(u64::from(g.o.quota.guaranteed)),
                None => own.map(|f| u64::from(f.guaranteed)),
            };
            let used = t.map_or(0, |t| t.used);
            let sides = gov
                .iter()
                .filter(|g| g.o.quota.flavor == flavor)
                .filter_map(|g| {
                    let side = g.o.side?;
                    let covered = |r: &String| g.o.regions.is_empty() || g.o.regions.contains(r);
                    Some(SideQuotaStatus {
                        side: side.name().to_string(),
                        used_gpus: t.map_or(0, |t| {
                            t.by_side
                                .iter()
                                .filter(|((s, r), _)| *s == side && covered(r))
                                .map(|(_, n)| *n)
                                .sum()
                        }),
                        side_used_gpus: side_used(side, &flavor, &g.o.regions),
                        quota_gpus: u64::from(g.o.quota.guaranteed),
                        set_by: g.set_by(now),
                    })
                })
                .collect();
            out.push(QueueFlavorStatus {
                pending_workloads: t.map_or(0, |t| t.pending),
                active_workloads: t.map_or(0, |t| t.active),
                used_gpus: used,
                borrowed_gpus: quota.map_or(0, |g| used.saturating_sub(g)),
                lent_gpus: 0,
                quota_gpus: quota,
                set_by: scheduled.map(|g| g.set_by(now)),
                sides,
                flavor,
            });
        }
        rows.insert(name.clone(), out);
    }
    // Lent: unused guarantee while cohort peers borrow the flavor, at most what they borrow.
    let cohort_of: BTreeMap<&str, Option<&str>> = queues
        .iter()
        .map(|q| (q.metadata.name.as_str(), q.spec.cohort.as_deref()))
        .collect();
    let mut lent: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (name, fs) in &rows {
        let Some(Some(cohort)) = cohort_of.get(name.as_str()) else {
            continue;
        };
        for f in fs {
            let Some(quota) = f.quota_gpus else { continue };
            let peers_borrow: u64 = rows
                .iter()
                .filter(|(n, _)| *n != name && cohort_of.get(n.as_str()) == Some(&Some(cohort)))
                .flat_map(|(_, fs)| fs.iter())
                .filter(|p| p.flavor == f.flavor)
                .map(|p| p.borrowed_gpus)
                .sum();
            lent.insert(
                (name.clone(), f.flavor.clone()),
                quota.saturating_sub(f.used_gpus).min(peers_borrow),
            );
        }
    }
    queues
        .into_iter()
        .map(|mut q| {
            let name = q.metadata.name.clone();
            let mut flavors = rows.remove(&name).unwrap_or_default();
            for f in &mut flavors {
                f.lent_gpus = lent
                    .get(&(name.clone(), f.flavor.clone()))
                    .copied()
                    .unwrap_or(0);
            }
            let (pending, active) = totals.get(&name).copied().unwrap_or_default();
            q.status = Some(QueueStatus {
                pending_workloads: pending,
                active_workloads: active,
                used_gpus: flavors
                    .iter()
                    .filter(|f| f.used_gpus > 0)
                    .map(|f| (f.flavor.clone(), f.used_gpus))
                    .collect(),
                borrowed_gpus: flavors
                    .iter()
                    .filter(|f| f.borrowed_gpus > 0)
                    .map(|f| (f.flavor.clone(), f.borrowed_gpus))
                    .collect(),
                flavors,
            });
            q
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use tideway_api::{FlavorQuota, QueueSpec, Workload, WorkloadStatus};

    use super::*;

    fn workload(name: &str, queue: &str, gpus: u32, phase: WorkloadPhase) -> Workload {
        let doc = serde_json::json!({
            "apiVersion": tideway_api::API_VERSION,
            "kind": "Workload",
            "metadata": {"name": name},
            "spec": {"queue": queue, "class": "training",
                     "podSets": [{"name": "w", "count": 1, "gpusPerPod": gpus, "flavor": "H100"}]},
        });
        let mut w: Workload = serde_json::from_value(doc).unwrap();
        w.status = Some(WorkloadStatus {
            phase,
            ..Default::default()
        });
        w
    }

    fn queue(name: &str, cohort: &str, guaranteed: u32) -> Queue {
        let mut spec = QueueSpec::new("t");
        spec.cohort = Some(cohort.into());
        spec.quotas = vec![FlavorQuota::guaranteed("H100", guaranteed)];
        Queue::new(name, spec)
    }

    #[test]
    fn running_work_is_counted_and_borrowing_and_lending_follow_the_guarantee() {
        let mut st = FederationState::default();
        st.queues.insert("a".into(), queue("a", "c", 8));
        st.queues.insert("b".into(), queue("b", "c", 16));
        for (n, q, g, p) in [
            ("a1", "a", 8, WorkloadPhase::Running),
            ("a2", "a", 4, WorkloadPhase::Assigned),
            ("a3", "a", 8, WorkloadPhase::Pending),
            ("b1", "b", 2, WorkloadPhase::Running),
            ("b2", "b", 2, WorkloadPhase::Succeeded),
        ] {
            st.workloads.insert(n, workload(n, q, g, p));
        }
        let qs = with_status(&st, "2025-01-06T12:00:00Z".parse().unwrap());
        let a = qs[0].status.clone().unwrap();
        assert_eq!((a.pending_workloads, a.active_workloads), (1, 2));
        assert_eq!(a.used_gpus["H100"], 12);
        let f = &a.flavors[0];
        assert_eq!((f.used_gpus, f.borrowed_gpus, f.lent_gpus), (12, 4, 0));
        assert_eq!(f.quota_gpus, Some(8));
        assert!(f.set_by.is_none(), "the queue's own quota");
        let b = qs[1].status.clone().unwrap();
        assert_eq!(b.active_workloads, 1, "a finished workload is not active");
        let f = &b.flavors[0];
        assert_eq!((f.used_gpus, f.borrowed_gpus, f.lent_gpus), (2, 0, 4));
    }
}
