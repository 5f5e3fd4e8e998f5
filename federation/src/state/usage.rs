//! The usage ledger: what chargeback reads, kept in the replicated state.
//!
//! The audit trail is bounded and workloads are compacted after retention, so usage cannot
//! be recomputed from them later. Apply keeps, instead, a compact ledger of exactly what
//! the arithmetic in `tideway_scheduler::usage` needs: the runs (a workload's GPUs of one
//! flavor from its start to its end), the fleet's capacity per flavor as a step series,
//! and each queue's guarantee per flavor as a step series (the queue's own quota, or the
//! window's quota of a tidal schedule). Each is appended only when something changes, so
//! a digest that repeats the same totals adds nothing. The ledger is part of the state, so
//! it is in every snapshot and survives restarts.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use tideway_api::WorkloadPhase;
use tideway_api::usage::{UsageDimension, UsageReport};
use tideway_scheduler::ClusterView;
use tideway_scheduler::tidal::{capacity_in_scope, overrides};
use tideway_scheduler::usage::{Run, Step, UsageInput, account};

use super::FederationState;
use super::command::Command;

/// Finished runs kept, oldest dropped first.
pub const MAX_CLOSED_RUNS: usize = 200_000;
/// Steps kept per series, oldest dropped first (the value before the oldest is then 0).
pub const MAX_STEPS: usize = 20_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageLedger {
    /// Runs that ended, in the order they ended. (This and `open` are persistent, as the
    /// workloads are: a copy of the state under its lock is O(1) in them.)
    pub closed: imbl::Vector<Run>,
    /// Runs of running workloads, by workload UID (one per flavor of the workload).
    pub open: imbl::OrdMap<String, Vec<Run>>,
    /// Fleet GPUs per flavor: every registered member's reported total. (Persistent too:
    /// a series holds up to `MAX_STEPS` steps, and every copy of the state under its lock,
    /// the scheduling cycle's among them, would otherwise copy them all.)
    pub capacity: BTreeMap<String, Steps>,
    /// Guaranteed GPUs per queue, then flavor.
    pub guaranteed: BTreeMap<String, BTreeMap<String, Steps>>,
    /// Set once runs or steps were dropped: the report is complete only after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained_since: Option<DateTime<Utc>>,
}

/// What a command may change of the ledger, taken before apply consumes it.
#[derive(Debug, Default)]
pub(super) struct Touch {
    /// Workloads (by name or UID) whose running state may have changed, with the time the
    /// change happened if the command says it (a member's report), else the entry's time.
    workloads: Vec<(String, Option<DateTime<Utc>>)>,
    capacity: bool,
    quotas: bool,
}

impl Touch {
    pub(super) fn of(cmd: &Command) -> Touch {
        let mut t = Touch::default();
        match cmd {
            Command::As { command, .. } => return Touch::of(command),
            Command::ReportStatus { statuses, .. } => {
                t.workloads = statuses
                    .iter()
                    .map(|s| (s.uid.clone(), Some(s.since)))
                    .collect();
            }
            Command::CancelWorkload { id, .. } => t.workloads = vec![(id.clone(), None)],
            Command::RecoverWorkloads { uids, .. } => {
                t.workloads = uids.iter().map(|u| (u.clone(), None)).collect();
            }
            Command::RegisterMember { .. }
            | Command::MemberDigest { .. }
            | Command::MemberHealth { .. }
            | Command::RemoveMember { .. }
            | Command::ReadmitMember { .. }
            | Command::EndQuarantine { .. }
            | Command::SetMemberIntent { .. } => {
                t.capacity = true;
                // Shares of capacity in tidal windows move with it.
                t.quotas = true;
            }
            Command::PutQueue { .. }
            | Command::PutPolicy { .. }
            | Command::PutPolicyObjects { .. }
            | Command::PutQuotaSchedule { .. }
            | Command::TidalTransition { .. } => t.quotas = true,
            _ => {}
        }
        t
    }
}

/// A step series, in time order (encoded as a sequence, as a `Vec` is).
pub type Steps = imbl::Vector<Step>;

/// Appends `gpus` at `at` unless the series already says so.
fn push_step(steps: &mut Steps, at: DateTime<Utc>, gpus: u64) -> bool {
    if steps.last().map_or(0, |s| s.gpus) == gpus {
        return false;
    }
    match steps.back_mut() {
        // Two changes at one instant: the later one holds.
        Some(last) if last.at >= at => last.gpus = gpus,
        _ => steps.push_back(Step { at, gpus }),
    }
    let dropped = steps.len().saturating_sub(MAX_STEPS);
    for _ in 0..dropped {
        steps.pop_front();
    }
    dropped > 0
}

/// The series as the accounting takes them (a copy: a report is rare, a state copy is not).
fn series(m: &BTreeMap<String, Steps>) -> BTreeMap<String, Vec<Step>> {
    m.iter()
        .map(|(k, v)| (k.clone(), v.iter().cloned().collect()))
        .collect()
}

impl FederationState {
    /// The scheduler's view of the members, for shares of live capacity.
    pub fn cluster_views(&self) -> Vec<ClusterView> {
        self.members
            .iter()
            .filter_map(|(name, rec)| {
                Some(ClusterView {
                    name: name.clone(),
                    region: rec.cluster.spec.region.clone(),
                    ready: rec.accepts_work(),
                    digest: rec.digest.clone()?,
                    declared_levels: Some(rec.cluster.spec.topology_levels.clone()),
                })
            })
            .collect()
    }

    /// Brings the ledger up to date with what the command just applied changed.
    pub(super) fn observe_usage(&mut self, touch: Touch) {
        let now = self.clock.unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
        for (id, when) in touch.workloads {
            self.observe_run(&id, when.unwrap_or(now));
        }
        let mut dropped = false;
        if touch.capacity {
            let mut totals: BTreeMap<String, u64> = BTreeMap::new();
            for rec in self.members.values() {
                for p in rec.digest.iter().flat_map(|d| &d.pools) {
                    *totals.entry(p.flavor.clone()).or_insert(0) += u64::from(p.counts.total);
                }
            }
            for (flavor, steps) in &mut self.usage.capacity {
                if !totals.contains_key(flavor) {
                    dropped |= push_step(steps, now, 0);
                }
            }
            for (flavor, gpus) in totals {
                let steps = self.usage.capacity.entry(flavor).or_default();
                dropped |= push_step(steps, now, gpus);
            }
        }
        if touch.quotas {
            let g = self.guarantees();
            for (queue, flavors) in &mut self.usage.guaranteed {
                for (flavor, steps) in flavors.iter_mut() {
                    if !g.get(queue).is_some_and(|m| m.contains_key(flavor)) {
                        dropped |= push_step(steps, now, 0);
                    }
                }
            }
            for (queue, flavors) in g {
                let entry = self.usage.guaranteed.entry(queue).or_default();
                for (flavor, gpus) in flavors {
                    dropped |= push_step(entry.entry(flavor).or_default(), now, gpus);
                }
            }
        }
        if dropped {
            self.usage.retained_since = Some(now);
        }
    }

    /// Opens the runs of a workload that now runs, closes those of one that stopped.
    fn observe_run(&mut self, id: &str, at: DateTime<Utc>) {
        let Some(w) = self.workload(id) else {
            return;
        };
        let Some(uid) = w.metadata.uid.clone() else {
            return;
        };
        let status = w.status.clone().unwrap_or_default();
        let running = status.phase == WorkloadPhase::Running;
        let open = self.usage.open.contains_key(&uid);
        if running && !open {
            let tenant = self
                .queues
                .get(w.spec.queue.as_str())
                .map(|q| q.spec.tenant.clone())
                .unwrap_or_default();
            let start = status.started_at.unwrap_or(at);
            let runs = w
                .spec
                .gpus_by_flavor()
                .into_iter()
                .map(|(flavor, gpus)| Run {
                    queue: w.spec.queue.to_string(),
                    tenant: tenant.clone(),
                    flavor: flavor.to_string(),
                    gpus,
                    start,
                    end: None,
                })
                .collect();
            self.usage.open.insert(uid, runs);
        } else if !running && let Some(runs) = self.usage.open.remove(&uid) {
            let end = status.finished_at.unwrap_or(at);
            for mut r in runs {
                r.end = Some(end.max(r.start));
                self.usage.closed.push_back(r);
            }
            while self.usage.closed.len() > MAX_CLOSED_RUNS {
                if let Some(r) = self.usage.closed.pop_front() {
                    self.usage.retained_since = r.end;
                }
            }
        }
    }

    /// Each queue's guaranteed GPUs per flavor now: its own quota, replaced by the quota of
    /// a tidal schedule's recorded window where one names the queue (what the scheduler's
    /// quota book uses).
    fn guarantees(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        let mut out: BTreeMap<String, BTreeMap<String, u64>> = self
            .queues
            .iter()
            .map(|(name, q)| {
                let own = q
                    .spec
                    .quotas
                    .iter()
                    .map(|f| (f.flavor.clone(), u64::from(f.guaranteed)))
                    .collect();
                (name.clone(), own)
            })
            .collect();
        if self.tidal.schedules.is_empty() {
            return out;
        }
        let views = self.cluster_views();
        let queues: Vec<tideway_api::Queue> = self.queues.values().cloned().collect();
        for (name, schedule) in &self.tidal.schedules {
            let Some(window) = self.tidal.windows.get(name) else {
                continue;
            };
            let capacity = capacity_in_scope(&schedule.spec, &views);
            for o in overrides(schedule, window, None, &capacity, &queues) {
                if o.queue.is_empty() {
                    continue;
                }
                out.entry(o.queue)
                    .or_default()
                    .insert(o.quota.flavor, u64::from(o.quota.guaranteed));
            }
        }
        out
    }

    /// The usage report of `[from, to)`, days cut in `tz`, queue rows grouped by `by`.
    pub fn usage_report(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        tz: Tz,
        by: &[UsageDimension],
    ) -> UsageReport {
        let now = self.clock.unwrap_or(from);
        let runs: Vec<Run> = self
            .usage
            .closed
            .iter()
            .chain(self.usage.open.values().flatten())
            .cloned()
            .collect();
        let capacity = series(&self.usage.capacity);
        let guaranteed: BTreeMap<String, BTreeMap<String, Vec<Step>>> = self
            .usage
            .guaranteed
            .iter()
            .map(|(q, m)| (q.clone(), series(m)))
            .collect();
        let input = UsageInput {
            runs: &runs,
            capacity: &capacity,
            guaranteed: &guaranteed,
            now,
        };
        let acc = account(&input, from, to, tz);
        UsageReport {
            from,
            to,
            accounted_to: acc.accounted_to,
            tz: tz.name().to_string(),
            group_by: by.to_vec(),
            queues: acc.queue_rows(by),
            flavors: acc.flavor_rows(by.contains(&UsageDimension::Day)),
            retained_since: self.usage.retained_since,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::agent::{LocalPhase, LocalStatus};
    use tideway_api::digest::{CapacityDigest, GpuCounts, PoolDigest};
    use tideway_api::{
        FlavorQuota, MemberCluster, MemberClusterSpec, PodSet, PoolKind, Queue, QueueSpec,
        Workload, WorkloadClass, WorkloadSpec,
    };

    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    struct Scenario {
        s: FederationState,
        index: u64,
    }

    impl Scenario {
        fn apply(&mut self, cmd: Command) {
            self.index += 1;
            let res = self.s.apply(self.index, cmd);
            assert!(
                !matches!(res, super::super::command::CommandResult::Rejected { .. }),
                "{res:?}"
            );
        }

        fn member(&mut self, name: &str, pools: &[(&str, u32)], at: i64) {
            self.apply(Command::RegisterMember {
                member: Box::new(MemberCluster::new(
                    name,
                    MemberClusterSpec::new("eu", vec![]),
                )),
                agent_version: None,
                at: t(at),
                flaps: None,
            });
            self.digest(name, pools, at);
        }

        fn digest(&mut self, name: &str, pools: &[(&str, u32)], at: i64) {
            let pools = pools
                .iter()
                .map(|(flavor, total)| PoolDigest {
                    pool: format!("p-{flavor}"),
                    kind: PoolKind::Shared,
                    flavor: flavor.to_string(),
                    counts: GpuCounts {
                        total: *total,
                        free_histogram: vec![0, 0, 0, 0, 0, 0, 0, 0, total / 8],
                        ..Default::default()
                    },
                    domains: vec![],
                })
                .collect();
            self.apply(Command::MemberDigest {
                name: name.into(),
                digest: Box::new(CapacityDigest {
                    cluster: name.into(),
                    generated_at: t(at),
                    pools,
                }),
                at: t(at),
            });
        }

        fn queue(&mut self, name: &str, tenant: &str, quotas: &[(&str, u32)], at: i64) {
            let mut spec = QueueSpec::new(tenant);
            spec.quotas = quotas
                .iter()
                .map(|(f, g)| FlavorQuota::guaranteed(*f, *g))
                .collect();
            self.apply(Command::PutQueue {
                queue: Box::new(Queue::new(name, spec)),
                at: t(at),
            });
        }

        /// Submits, assigns to `cluster` and reports it running at `start`.
        fn start(&mut self, name: &str, queue: &str, gpus: (u32, &str), cluster: &str, start: i64) {
            let mut w = Workload::new(
                name,
                WorkloadSpec::new(
                    queue,
                    WorkloadClass::Training,
                    vec![PodSet::new("w", 1, gpus.0, gpus.1)],
                ),
            );
            w.metadata.uid = Some(format!("uid-{name}"));
            self.apply(Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: name.into(),
                at: t(start - 1),
                digest: None,
            });
            self.apply(Command::Assign {
                workload: name.into(),
                cluster: cluster.into(),
                pool: None,
                at: t(start - 1),
            });
            self.report(name, cluster, LocalPhase::Running, start);
        }

        fn report(&mut self, name: &str, cluster: &str, phase: LocalPhase, at: i64) {
            self.apply(Command::ReportStatus {
                cluster: cluster.into(),
                statuses: vec![LocalStatus {
                    uid: format!("uid-{name}"),
                    attempt: 1,
                    phase,
                    since: t(at),
                    nodes: vec![],
                }],
            });
        }
    }

    /// A day in a small fleet: two members (one grows), three queues of two tenants, work
    /// that finishes, is evicted, is cancelled and still runs. Every figure is checked
    /// against a hand count, and the identities hold for every queue and every flavor.
    #[test]
    fn the_usage_of_a_scenario_adds_up_for_every_queue_and_flavor() {
        let mut sc = Scenario {
            s: FederationState::default(),
            index: 0,
        };
        sc.member("a", &[("H100", 8)], 0);
        sc.member("b", &[("L40S", 4)], 0);
        sc.queue("research", "ml", &[("H100", 4)], 0);
        sc.queue("serving", "web", &[("L40S", 2)], 0);
        sc.queue("scratch", "ml", &[], 0);
        // research: 6 H100 from 100 to 500 (4 guaranteed, 2 borrowed).
        sc.start("train", "research", (6, "H100"), "a", 100);
        // serving: 2 L40S from 200, still running at the end (1000).
        sc.start("web", "serving", (2, "L40S"), "b", 200);
        // scratch: 2 H100 from 300, evicted at 400.
        sc.start("tmp", "scratch", (2, "H100"), "a", 300);
        sc.report(
            "tmp",
            "a",
            LocalPhase::Evicted {
                reason: "node fault".into(),
            },
            400,
        );
        sc.report("train", "a", LocalPhase::Succeeded, 500);
        // b grows to 4 L40S + 8 H100 at 600; research's quota is raised to 8 at 600.
        sc.digest("b", &[("L40S", 4), ("H100", 8)], 600);
        sc.queue("research", "ml", &[("H100", 8)], 600);
        // research: 8 H100 on b from 700, cancelled at 900.
        sc.start("big", "research", (8, "H100"), "b", 700);
        sc.apply(Command::CancelWorkload {
            id: "big".into(),
            at: t(900),
        });
        // The clock reaches 1000 with a repeated digest (which adds no step).
        sc.digest("a", &[("H100", 8)], 1000);
        assert_eq!(
            sc.s.usage.capacity["H100"].len(),
            2,
            "a repeated total adds nothing"
        );

        let report = |s: &FederationState| {
            s.usage_report(
                t(0),
                t(5000),
                Tz::UTC,
                &[
                    UsageDimension::Queue,
                    UsageDimension::Tenant,
                    UsageDimension::Flavor,
                ],
            )
        };
        let r = report(&sc.s);
        assert_eq!(r.accounted_to, t(1000));
        let q = |queue: &str, flavor: &str| {
            r.queues
                .iter()
                .find(|x| x.queue.as_deref() == Some(queue) && x.flavor.as_deref() == Some(flavor))
                .map(|x| {
                    (
                        x.guaranteed_gpu_seconds,
                        x.borrowed_gpu_seconds,
                        x.tenant.clone(),
                    )
                })
        };
        assert_eq!(
            q("research", "H100"),
            Some((4 * 400 + 8 * 200, 2 * 400, Some("ml".into())))
        );
        assert_eq!(q("serving", "L40S"), Some((2 * 800, 0, Some("web".into()))));
        assert_eq!(q("scratch", "H100"), Some((0, 2 * 100, Some("ml".into()))));
        let f = |flavor: &str| {
            r.flavors
                .iter()
                .find(|x| x.flavor == flavor)
                .cloned()
                .expect("flavor row")
        };
        assert_eq!(f("H100").capacity_gpu_seconds, 8 * 1000 + 8 * 400);
        assert_eq!(f("H100").used_gpu_seconds, 6 * 400 + 2 * 100 + 8 * 200);
        assert_eq!(f("L40S").capacity_gpu_seconds, 4 * 1000);
        // The identities, for every queue and every flavor.
        for row in &r.queues {
            assert_eq!(
                row.guaranteed_gpu_seconds + row.borrowed_gpu_seconds,
                row.used_gpu_seconds,
                "{row:?}"
            );
        }
        for row in &r.flavors {
            assert_eq!(row.over_gpu_seconds, 0, "{row:?}");
            assert_eq!(
                row.used_gpu_seconds + row.idle_gpu_seconds,
                row.capacity_gpu_seconds,
                "{row:?}"
            );
            let by_queues: u64 = r
                .queues
                .iter()
                .filter(|q| q.flavor.as_deref() == Some(row.flavor.as_str()))
                .map(|q| q.used_gpu_seconds)
                .sum();
            assert_eq!(by_queues, row.used_gpu_seconds, "{row:?}");
        }

        // The ledger is state: a snapshot's encoding carries it, and the report after a
        // restore is the same.
        let bytes = rmp_serde::to_vec_named(&sc.s).expect("encode");
        let back: FederationState = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(report(&back), r);
    }
}
