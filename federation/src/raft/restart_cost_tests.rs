//! What a restart costs per workload, in process: replaying the log's submissions, writing
//! the snapshot and loading it again, and the heap the live state holds. A measurement, run
//! by hand on a release build (`cargo test --release -p tideway-federation restart_cost --
//! --ignored --nocapture`), not in CI: its figures depend on the machine. It is the quick
//! loop behind `tideway bench scale`'s restart figures, which take half an hour at a
//! million; each step asserts it did the real work.

use std::sync::Arc;

use tideway_api::Workload;
use tideway_api::clock::{Clock, RealClock};

use super::*;
use crate::memory::rss_kib;
use crate::scale_mix::measure::{env_or, submission};
use crate::state::command::Request;

/// glibc's `struct mallinfo2`: `uordblks` is the bytes the program holds allocated, a
/// precise figure where RSS lags frees and counts the allocator's slack.
#[repr(C)]
struct MallInfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

unsafe extern "C" {
    fn mallinfo2() -> MallInfo2;
}

/// Heap bytes in use (small allocations plus mmapped ones).
fn heap_bytes() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's counters; glibc 2.33 and later.
    let m = unsafe { mallinfo2() };
    m.uordblks + m.hblkhd
}

#[test]
#[ignore = "a measurement: run by hand with --release --ignored --nocapture"]
fn restart_cost_per_workload() {
    let n: u64 = env_or("RESTART_COST_WORKLOADS", 200_000);
    const PER_ENTRY: u64 = 16;
    // The log as a leader writes it: batches of submissions, each entry encoded.
    let entries: Vec<Vec<u8>> = (0..n / PER_ENTRY)
        .map(|e| {
            let req = Request::new(
                (e * PER_ENTRY..(e + 1) * PER_ENTRY)
                    .map(submission)
                    .collect(),
            );
            rmp_serde::to_vec_named(&req).expect("encode")
        })
        .collect();
    let log_bytes: usize = entries.iter().map(Vec::len).sum();

    let rss_before = rss_kib();
    let heap_before = heap_bytes();
    let started = RealClock.instant();
    let mut state = FederationState::default();
    for (e, bytes) in entries.iter().enumerate() {
        let req: Request = rmp_serde::from_slice(bytes).expect("decode");
        for c in req.into_commands() {
            state.apply(e as u64 + 1, c);
        }
    }
    let replay = started.elapsed();
    assert_eq!(state.workloads.len() as u64, n / PER_ENTRY * PER_ENTRY);
    let rss_state = rss_kib().saturating_sub(rss_before);
    let heap_applied = heap_bytes().saturating_sub(heap_before);
    drop(entries);
    {
        // What the indexes beside the workloads hold (order, UIDs, idempotency records and
        // their expiry), together: they share their names, UIDs and keys, so a part alone
        // frees only what no other part holds. The copy shares every node with `state`, so
        // the indexes are rebuilt element by element first, for dropping them to free them.
        let mut s = state.clone();
        s.idempotency = s
            .idempotency
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        s.idempotency_expiry = s.idempotency_expiry.iter().cloned().collect();
        s.uids = s.uids.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        s.order = s.order.iter().map(|(k, v)| (*k, v.clone())).collect();
        let before = heap_bytes();
        s.idempotency = Default::default();
        s.idempotency_expiry = Default::default();
        s.uids = Default::default();
        s.order = Default::default();
        let indexes = before.saturating_sub(heap_bytes());
        drop(s);
        let before = heap_bytes();
        let copies: Vec<Workload> = state.workloads.values().map(|w| (**w).clone()).collect();
        let workload = heap_bytes().saturating_sub(before);
        assert_eq!(copies.len() as u64, n / PER_ENTRY * PER_ENTRY);
        drop(copies);
        // The map's own nodes and keys (its values shared with `state`, so only the nodes
        // and fresh copies of the keys are freed).
        let before = heap_bytes();
        let map: crate::state::workloads::WorkloadMap = state
            .workloads
            .iter()
            .map(|(k, v)| (Arc::<str>::from(&**k), v.clone()))
            .collect();
        let map_bytes = heap_bytes().saturating_sub(before);
        drop(map);
        // The audit trail: one record per submission, up to its cap.
        let before = heap_bytes();
        let trail: Vec<_> = state.audit.events.iter().cloned().collect();
        let audit = heap_bytes().saturating_sub(before);
        assert_eq!(
            trail.len(),
            (n as usize).min(crate::state::audit::MAX_EVENTS)
        );
        drop(trail);
        // What a leader holds beside the state: its scheduling cycle's copy of the backlog.
        let before = heap_bytes();
        let mut backlog = crate::dispatcher::backlog::Backlog::of(&state);
        backlog.settle();
        let backlog_bytes = heap_bytes().saturating_sub(before);
        assert_eq!(backlog.pending.len() as u64, n / PER_ENTRY * PER_ENTRY);
        drop(backlog);
        println!(
            "heap per workload: the indexes {:.0} B, a workload's copy {:.0} B, the map's \
             nodes and keys {:.0} B, the audit trail {:.0} B; a leader's backlog {:.0} B",
            indexes as f64 / n as f64,
            workload as f64 / n as f64,
            map_bytes as f64 / n as f64,
            audit as f64 / n as f64,
            backlog_bytes as f64 / n as f64,
        );
    }

    let started = RealClock.instant();
    let body = SnapshotFormatRef::V1(SnapshotBodyRef {
        last_applied: &None,
        membership: &StoredMembership::default(),
        state: &state,
        workloads_sum: state.workloads.digest_sum(),
    });
    let mut bytes = Vec::new();
    rmp_serde::encode::write_named(&mut bytes, &body).expect("encode");
    let encode = started.elapsed();
    // As a snapshot is written: the collections that grow encoded on worker threads.
    let started = RealClock.instant();
    let mut parallel = Vec::with_capacity(bytes.len());
    crate::parallel_encode::write_named(&mut parallel, &body).expect("encode");
    let encode_parallel = started.elapsed();
    assert!(parallel == bytes, "the same bytes either way");
    drop(parallel);

    let heap_before = heap_bytes();
    let started = RealClock.instant();
    let SnapshotFormat::V1(decoded) = decode_snapshot(&bytes).expect("decode");
    let decode = started.elapsed();
    let heap_loaded = heap_bytes().saturating_sub(heap_before);
    let mut decoded = decoded;
    let started = RealClock.instant();
    decoded.state.share_strings();
    let share = started.elapsed();
    let heap_shared = heap_bytes().saturating_sub(heap_before);
    println!(
        "heap per workload: applied from the log {:.0} B, loaded from a snapshot {:.0} B, \
         its strings shared again {:.0} B (in {:.2} s, {:.1} us each)",
        heap_applied as f64 / n as f64,
        heap_loaded as f64 / n as f64,
        heap_shared as f64 / n as f64,
        share.as_secs_f64(),
        share.as_secs_f64() * 1e6 / n as f64,
    );
    assert!(heap_shared < heap_loaded, "sharing frees the copies");
    assert_eq!(decoded.state.workloads.len(), state.workloads.len());
    assert!(
        decoded.state == state,
        "the snapshot gives back the same state"
    );
    // What giving the freed heap back costs after a large free (as after a snapshot build):
    // the decoded copy and the snapshot's bytes are dropped, then the pages returned.
    let snapshot_len = bytes.len();
    drop(decoded);
    drop(bytes);
    let rss_freed = rss_kib();
    let took = crate::memory::release_free_pages();
    println!(
        "freed pages returned in {:.1} ms: RSS {} -> {} MiB",
        took * 1e3,
        rss_freed / 1024,
        rss_kib() / 1024
    );

    // Each part that grows with the workloads: its bytes and its decode time.
    fn part<T: serde::Serialize + serde::de::DeserializeOwned>(
        name: &str,
        v: &T,
        n: u64,
    ) -> String {
        let bytes = rmp_serde::to_vec_named(v).expect("encode");
        let started = RealClock.instant();
        let back: T = rmp_serde::from_slice(&bytes).expect("decode");
        let took = started.elapsed();
        drop(back);
        format!(
            " {name} {:.0} B {:.1} us",
            bytes.len() as f64 / n as f64,
            took.as_secs_f64() * 1e6 / n as f64
        )
    }
    println!(
        "snapshot per workload, by part:{}{}{}{}{}",
        part("workloads", &state.workloads, n),
        part("idempotency", &state.idempotency, n),
        part("expiry", &state.idempotency_expiry, n),
        part("uids", &state.uids, n),
        part("order", &state.order, n),
    );
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!(
        "{n} submissions, {PER_ENTRY} per entry: log {:.0} B each; replay {:.2} s ({:.1} us each); \
         live state ~{:.0} B of RSS each; snapshot {:.0} B each, encode {:.2} s ({:.1} us; \
         {:.2} s on worker threads), decode {:.2} s ({:.1} us)",
        log_bytes as f64 / n as f64,
        replay.as_secs_f64(),
        per(replay),
        rss_state as f64 * 1024.0 / n as f64,
        snapshot_len as f64 / n as f64,
        encode.as_secs_f64(),
        per(encode),
        encode_parallel.as_secs_f64(),
        decode.as_secs_f64(),
        per(decode),
    );
}
