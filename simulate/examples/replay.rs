//! A replay without the CLI, for profiling the simulator and the core on their own:
//! `cargo run -p tideway-simulate --example replay -- CLUSTERS POLICY TRACE FROM TO OUT [TRACE...]`
//! (`-` for FROM or TO leaves that end open; further traces are merged as `--trace` does).
//! It builds only the simulator's crates, not the federation, and writes the same files as
//! `tideway simulate`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tideway_simulate::{self as simulate, Options, output};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    assert!(
        a.len() >= 6,
        "usage: replay CLUSTERS POLICY TRACE FROM TO OUT [TRACE...]"
    );
    let bound = |s: &String| (s != "-").then(|| s.clone());
    let mut traces = vec![a[2].clone()];
    traces.extend(a[6..].iter().cloned());
    let opts = Options {
        clusters: PathBuf::from(&a[0]),
        policy: PathBuf::from(&a[1]),
        traces,
        from: bound(&a[3]),
        to: bound(&a[4]),
        seed: 0,
    };
    let input = simulate::load(&opts).expect("load");
    let out = simulate::run(input, &mut |_| {});
    output::write_all(&out, std::path::Path::new(&a[5])).expect("write");
    let r = &out.summary.run;
    println!(
        "{} events in {:.2} s wall, {} scheduler cycles ({:.2} s)",
        r.events, r.wall_seconds, r.scheduler_cycles, r.scheduler_wall_seconds
    );
}
