//! Tidal transitions in the audit trail, read the way an operator reads it: `tideway dev`
//! applies its day/night schedule, its pinned clock crosses 22:00 Berlin time, and
//! `tideway events` shows who applied the schedule and the leader's change of window with
//! the quotas it moved.

use std::time::{Duration, Instant};

/// The records of `kind`; none while the CLI cannot read them yet (dev still starting).
fn events(addr: &str, token: &str, kind: &str) -> Vec<serde_json::Value> {
    crate::common::cli_events(addr, token, kind).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_day_to_night_transition_is_one_audit_record_naming_the_quotas_it_moved() {
    let _guard = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // A Monday, three virtual minutes before the 22:00 boundary; at 5x that is 36 s of
    // real time for dev to start and apply its schedule in the day window.
    let dev = crate::common::DevProcess::start(
        dir.path(),
        &[
            "--time-scale",
            "5",
            "--start-at",
            "2026-01-05T21:57:00+01:00",
        ],
        &[],
    );
    let addr = dev.addr.clone();
    let token = dev.token().await;
    let tail = || dev.log_tail(30);

    let deadline = Instant::now() + Duration::from_secs(90);
    let transitions = loop {
        let t = events(&addr, &token, "TidalTransition");
        if !t.is_empty() {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "no TidalTransition record; policy records: {:?}\ndev log:\n{}",
            events(&addr, &token, "PolicyChanged"),
            tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(transitions.len(), 1, "{transitions:#?}");
    let t = &transitions[0];
    assert_eq!(t["actor"], "system:leader", "{t}");
    let evidence = t["evidence"].as_str().unwrap_or_default();
    assert!(
        evidence
            .starts_with("schedule 'day-night': window day -> night at 2026-01-05T21:00:00+00:00"),
        "{evidence}"
    );
    assert!(
        evidence.contains("pool/inference share 0.7 -> share 0.3")
            && evidence.contains("pool/training share 0.3 -> share 0.7"),
        "{evidence}"
    );

    // The schedule itself was applied by dev's admin, as a policy change, before it.
    let applied = events(&addr, &token, "PolicyChanged");
    let sched = applied
        .iter()
        .find(|e| {
            e["evidence"]
                .as_str()
                .is_some_and(|s| s.contains("quota schedule 'day-night'"))
        })
        .unwrap_or_else(|| panic!("no record of the schedule's apply: {applied:#?}"));
    assert_ne!(sched["actor"], "system:leader", "{sched}");
    assert!(sched["seq"].as_u64() < t["seq"].as_u64(), "{sched} / {t}");
}
