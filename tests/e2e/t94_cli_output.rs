//! kubectl output habits on every verb that prints a table, against `tideway dev`: an AGE
//! column where objects have a creation time, `-o wide` with more columns than the table,
//! `-o name` as `kind/name` lines, and timestamps to the second (no nanoseconds).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{DevProcess, tideway_with_config};

/// Pinned calendar time: midday in the dev schedule's zone, whatever the wall clock says.
const START_AT: &str = "2026-01-05T12:00:00+01:00";

fn workload(name: &str, pods: u32) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":{pods},"gpusPerPod":8,"flavor":"H100"}}],"gang":{{"minCount":{pods}}}}}}}"#
    )
}

/// The columns of the first table header in `out`: a line whose cells are two or more spaces
/// apart, the first and most of them in upper case (`NAME  QUOTAS (flavor ...)  AGE`).
fn header(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .find(|cells| {
            let upper = |c: &String| {
                c.chars().any(|ch| ch.is_ascii_uppercase())
                    && !c.chars().any(|ch| ch.is_ascii_lowercase())
            };
            cells.len() >= 2
                && upper(&cells[0])
                && 2 * cells.iter().filter(|c| upper(c)).count() > cells.len()
        })
        .unwrap_or_default()
}

/// Whether `out` has a time with more than millisecond digits (`12:00:00.123456`).
fn has_sub_millisecond_time(out: &str) -> bool {
    let b = out.as_bytes();
    (0..b.len().saturating_sub(12)).any(|i| {
        let digits = |r: std::ops::Range<usize>| r.into_iter().all(|j| b[i + j].is_ascii_digit());
        digits(0..2)
            && b[i + 2] == b':'
            && digits(3..5)
            && b[i + 5] == b':'
            && digits(6..8)
            && b[i + 8] == b'.'
            && digits(9..13)
    })
}

struct Cli<'a> {
    config: &'a Path,
    addr: &'a str,
    dev: &'a DevProcess,
}

impl Cli<'_> {
    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = tideway_with_config(self.config, self.addr, args);
        assert!(
            ok,
            "tideway {args:?} failed: {out}{err}\ndev log:\n{}",
            self.dev.log_tail(30)
        );
        assert!(
            !has_sub_millisecond_time(&out),
            "tideway {args:?} prints sub-millisecond timestamps:\n{out}"
        );
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_table_has_a_wider_wide_and_objects_list_as_kind_slash_name() {
    let _serial = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = DevProcess::start(dir.path(), &["--start-at", START_AT], &[]);
    let _token = dev.token().await;
    let config = dir.path().join("cli-config");
    let cli = Cli {
        config: &config,
        addr: &dev.addr,
        dev: &dev,
    };

    // One workload that fits and one gang larger than any cluster (it stays pending, with
    // a verdict per cluster).
    let small = dir.path().join("small.json");
    std::fs::write(&small, workload("fits", 1)).expect("write");
    let big = dir.path().join("big.json");
    std::fs::write(&big, workload("too-big", 64)).expect("write");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out, err) = tideway_with_config(
            &config,
            &dev.addr,
            &["submit", "-f", small.to_str().expect("utf-8")],
        );
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dev never accepted a submission: {out}{err}\n{}",
            dev.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    cli.ok(&["submit", "-f", big.to_str().expect("utf-8")]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cli
        .ok(&["explain", "too-big"])
        .lines()
        .any(|l| l.starts_with("CLUSTER"))
    {
        assert!(
            Instant::now() < deadline,
            "too-big never got a per-cluster explanation:\n{}",
            cli.ok(&["explain", "too-big", "-o", "json"])
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // (verb, whether its objects have a creation time and so an AGE column)
    let verbs: &[(&[&str], bool)] = &[
        (&["list"], true),
        (&["get", "fits"], true),
        (&["members"], true),
        (&["queues"], true),
        (&["rolebindings"], true),
        (&["webhooks"], true),
        (&["policy", "history"], true),
        (&["events"], true),
        (&["explain", "too-big"], false),
        (&["capacity"], false),
        (&["schedule", "show", "day-night", "--hours", "3"], false),
        (&["usage", "--from", "2026-01-05"], false),
        (&["cluster", "status"], false),
    ];
    for (verb, has_age) in verbs {
        let with = |o: &str| {
            let mut a = verb.to_vec();
            a.extend(["-o", o]);
            cli.ok(&a)
        };
        let (table, wide) = (with("table"), with("wide"));
        let (t, w) = (header(&table), header(&wide));
        assert!(!t.is_empty(), "{verb:?}: no table header in\n{table}");
        assert!(
            w.len() > t.len(),
            "{verb:?}: -o wide has {} columns, the table {}:\n{table}\n---\n{wide}",
            w.len(),
            t.len()
        );
        for c in &t {
            assert!(w.contains(c), "{verb:?}: wide lost column {c}: {w:?}");
        }
        if *has_age {
            assert!(t.iter().any(|c| c == "AGE"), "{verb:?}: no AGE in {t:?}");
        }
    }

    // AGE reads like kubectl's: a number and one unit.
    let list = cli.ok(&["list"]);
    let row = list
        .lines()
        .find(|l| l.starts_with("fits "))
        .unwrap_or_else(|| panic!("no row for fits:\n{list}"));
    let age = row.split_whitespace().last().unwrap_or("");
    assert!(
        age.len() >= 2
            && age[..age.len() - 1].chars().all(|c| c.is_ascii_digit())
            && "smhdy".contains(&age[age.len() - 1..]),
        "AGE {age:?} in {row:?}"
    );
    // Wide timestamps are to the second.
    let wide = cli.ok(&["get", "fits", "-o", "wide"]);
    let submitted = wide
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("");
    assert!(
        submitted.len() == 20 && submitted.ends_with('Z') && submitted.as_bytes()[10] == b'T',
        "SUBMITTED {submitted:?} in\n{wide}"
    );

    // -o name: kind/name, one a line, nothing else.
    let names = |args: &[&str], kind: &str, must: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["-o", "name"]);
        let out = cli.ok(&a);
        for l in out.lines() {
            let (k, n) = l
                .split_once('/')
                .unwrap_or_else(|| panic!("{args:?} -o name: {l:?}"));
            assert!(
                k == kind && !n.is_empty() && !n.contains(' '),
                "{args:?}: {l:?}"
            );
        }
        for m in must {
            assert!(
                out.lines().any(|l| l == format!("{kind}/{m}")),
                "{args:?} -o name lacks {kind}/{m}:\n{out}"
            );
        }
    };
    names(&["list"], "workload", &["fits", "too-big"]);
    names(&["get", "fits"], "workload", &["fits"]);
    names(&["queues"], "queue", &["default"]);
    names(
        &["members"],
        "membercluster",
        &["sim-eu", "sim-us", "sim-ap"],
    );
    names(&["rolebindings"], "rolebinding", &[]);
    names(&["webhooks"], "webhook", &[]);
    names(&["policy", "history"], "policyversion", &["1"]);
    // A verb that prints no resources says so instead of printing nothing.
    let (ok, _, err) = tideway_with_config(&config, &dev.addr, &["events", "-o", "name"]);
    assert!(!ok && err.contains("-o name"), "{err}");
}
