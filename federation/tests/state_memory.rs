//! The replicated state's memory stays bounded on a federation that runs for months:
//! workloads submitted, run to the end and compacted out after their retention leave nothing
//! behind that grows with their number (idempotency keys expire, the audit trail is cut by
//! its retention, per-workload indexes are dropped with the workload).
//!
//! A counting allocator measures the live heap, so the check is exact and independent of the
//! allocator's habit of keeping freed pages (which makes process RSS a poor test signal).
//! It drives the state the way the leader does: the same commands, the same compaction
//! choices (`compactable`, the set the leader's index names too, and `audit_retention_cut`),
//! in log order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use chrono::{DateTime, Duration, TimeZone, Utc};
use tideway_api::agent::{LocalPhase, LocalStatus};
use tideway_api::{
    MemberCluster, MemberClusterSpec, PodSet, Workload, WorkloadClass, WorkloadSpec,
};
use tideway_federation::state::FederationState;
use tideway_federation::state::command::Command;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts the bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + s, 0).single().unwrap()
}

/// Retention of finished workloads and of audit records, as an operator would set them.
const RETAIN_TERMINAL_S: i64 = 600;
const AUDIT_RETAIN: usize = 20_000;
/// Workloads through the state before the first measure: past every retention and cap (the
/// usage ledger keeps the newest `MAX_CLOSED_RUNS` finished runs for chargeback).
const PLATEAU: u64 = tideway_federation::state::usage::MAX_CLOSED_RUNS as u64 + 20_000;
/// Workloads through the state in all.
const TOTAL: u64 = PLATEAU + 200_000;
/// Simulated seconds between two submissions.
const STEP_S: i64 = 5;

struct Run {
    s: FederationState,
    index: u64,
    n: u64,
}

impl Run {
    fn new() -> Self {
        let mut s = FederationState::default();
        s.apply(
            1,
            Command::RegisterMember {
                member: Box::new(MemberCluster::new(
                    "a",
                    MemberClusterSpec::new("eu", vec![]),
                )),
                agent_version: None,
                at: t(0),
                flaps: None,
            },
        );
        Run { s, index: 1, n: 0 }
    }

    fn apply(&mut self, cmd: Command) {
        self.index += 1;
        self.s.apply(self.index, cmd);
    }

    /// One workload through its whole life: submitted, assigned, running, succeeded; then
    /// whatever is past retention compacted, as the leader's retention loop would.
    fn one(&mut self) {
        let i = self.n;
        self.n += 1;
        let now = t(10 + i as i64 * STEP_S);
        let name = format!("w-{i}");
        let uid = format!("uid-{i}");
        let mut w = Workload::new(
            name.clone(),
            WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("w", 1, 1, "H100")],
            ),
        );
        w.metadata.uid = Some(uid.clone());
        self.apply(Command::SubmitWorkload {
            workload: Box::new(w),
            idempotency_key: format!("key-{i}"),
            at: now,
            digest: None,
        });
        self.apply(Command::Assign {
            workload: name.into(),
            cluster: "a".into(),
            pool: None,
            at: now,
        });
        for phase in [LocalPhase::Running, LocalPhase::Succeeded] {
            self.apply(Command::ReportStatus {
                cluster: "a".into(),
                statuses: vec![LocalStatus {
                    uid: uid.clone(),
                    attempt: 1,
                    phase,
                    since: now,
                    nodes: Vec::new(),
                }],
            });
        }
        if i.is_multiple_of(100) {
            let before = now - Duration::seconds(RETAIN_TERMINAL_S);
            let names = self.s.compactable(before, 1_000);
            if !names.is_empty() {
                self.apply(Command::CompactWorkloads {
                    names,
                    before,
                    at: now,
                });
            }
            if let Some(before_seq) = self.s.audit_retention_cut(Some(AUDIT_RETAIN), None) {
                self.apply(Command::CompactAudit {
                    before_seq,
                    at: now,
                });
            }
        }
    }
}

fn live_heap() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[test]
fn state_memory_is_bounded_over_many_finished_workloads() {
    let mut run = Run::new();
    // Warm up past every retention (workloads, audit records, idempotency keys: a day) and
    // every cap.
    let warm = PLATEAU;
    for _ in 0..warm {
        run.one();
    }
    let at_warm = live_heap();
    let live_warm = run.s.workloads.len();
    // 200,000 more: what stays must not grow with what went through.
    for _ in warm..TOTAL {
        run.one();
    }
    let at_end = live_heap();
    // What each bounded structure holds at the end, for whoever reads a failure.
    eprintln!(
        "order {} uids {} usage.closed {} usage.open {} placements {} assignments {} settling {} preemptors {}",
        run.s.order.len(),
        run.s.uids.len(),
        run.s.usage.closed.len(),
        run.s.usage.open.len(),
        run.s.scheduling.placements.len(),
        run.s
            .assignments
            .iter()
            .map(|(_, a)| a.len())
            .sum::<usize>(),
        run.s.scheduling.settling.len(),
        run.s.scheduling.preemptors.len(),
    );
    let live_end = run.s.workloads.len();
    eprintln!(
        "{} workloads through the state: live heap {} KiB after {warm}, {} KiB after {} \
         ({live_warm} then {live_end} workloads live, {} idempotency keys, {} audit records)",
        run.n,
        at_warm / 1024,
        at_end / 1024,
        run.n,
        run.s.idempotency.len(),
        run.s.audit.events.len(),
    );
    // Only what retention keeps is live: about retention / step workloads.
    let kept = (RETAIN_TERMINAL_S / STEP_S) as usize;
    assert!(
        live_end <= kept + 200,
        "{live_end} workloads live, retention keeps about {kept}"
    );
    assert!(
        run.s.idempotency.len() <= (24 * 3600 / STEP_S) as usize + 200,
        "{} idempotency keys remembered",
        run.s.idempotency.len()
    );
    assert!(
        run.s.audit.events.len() <= AUDIT_RETAIN + 1_000,
        "{} audit records kept",
        run.s.audit.events.len()
    );
    // 200,000 more workloads, the same memory give or take a tenth.
    assert!(
        (at_end as f64) < at_warm as f64 * 1.10,
        "live heap grew from {} KiB to {} KiB",
        at_warm / 1024,
        at_end / 1024
    );
}
