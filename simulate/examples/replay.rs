//! A replay without the CLI, for profiling the simulator and the core on their own:
//! `cargo run -p tideway-simulate --example replay -- CLUSTERS POLICY TRACE FROM TO OUT`.
//! It builds only the simulator's crates, not the federation, and writes the same files as
//! `tideway simulate`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tideway_simulate::{self as simulate, Options, output};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    assert_eq!(
        a.len(),
        6,
        "usage: replay CLUSTERS POLICY TRACE FROM TO OUT"
    );
    let opts = Options {
        clusters: PathBuf::from(&a[0]),
        policy: PathBuf::from(&a[1]),
        traces: vec![a[2].clone()],
        from: Some(a[3].clone()),
        to: Some(a[4].clone()),
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
