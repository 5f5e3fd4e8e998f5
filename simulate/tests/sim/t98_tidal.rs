//! Tidal quota schedules in the simulator, on a small fixed input: two days of Philly
//! training and day-following Alibaba inference on 128 GPUs, under the day/night schedule
//! of `deploy/simulate/tidal/` and its static 50/50 and 70/30 baselines.
//!
//! The claims are directional (the docs give the figures of the full week): the schedule
//! serves inference by day where a static even split cannot, keeps the night's training
//! share a static 70/30 split gets, and at night training fills at least 90% of the
//! capacity it could use (open, and asked for by its running and waiting work).

use std::path::PathBuf;

use tideway_simulate::tidal::{TidalSummary, WindowSummary};

use super::common::{DLRM, PHILLY, simulate, write};

const CLUSTERS: &str = r#"
clusters:
  - name: a
    region: eu-west
    uniform: { nodes: 8, nodesPerRack: 8, gpusPerNode: 8, model: H100, pool: gpu, poolKind: shared }
  - name: b
    region: eu-west
    uniform: { nodes: 8, nodesPerRack: 8, gpusPerNode: 8, model: H100, pool: gpu, poolKind: shared }
"#;

fn run(dir: &tempfile::TempDir, policy: &str) -> TidalSummary {
    let clusters = write(dir, "clusters.yaml", CLUSTERS);
    let policy = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/simulate/tidal")
        .join(format!("policy-{policy}.yaml"));
    let traces = [
        format!(
            "philly:{PHILLY}?vc=6214e9,6c71a0,ee9e8c,0e4a51,7f04ca,2869ce&from=2017-10-02&to=2017-10-04&queue=training&flavor=H100"
        ),
        format!(
            "alibaba-dlrm:{DLRM}?epoch=2017-10-02&from=0&to=172800&sample=0.011&day=08:00-22:00&tz=Europe/Berlin&always-on=0.2&queue=inference&flavor=H100"
        ),
    ];
    let out = simulate(clusters, policy, &traces, 7);
    out.summary
        .tidal
        .expect("a policy with schedules reports tidal figures")
}

fn window<'a>(t: &'a TidalSummary, name: &str) -> &'a WindowSummary {
    t.schedules[0]
        .windows
        .get(name)
        .unwrap_or_else(|| panic!("no {name} window in {t:#?}"))
}

#[test]
fn tidal_serves_daytime_inference_without_giving_up_night_training() {
    let dir = tempfile::tempdir().unwrap();
    let tidal = run(&dir, "tidal");
    let even = run(&dir, "static-50-50");
    let inference_heavy = run(&dir, "static-70-30");

    // Two days starting at 02:00 Berlin time: day, night, day, night at least.
    assert!(tidal.schedules[0].transitions >= 4, "{tidal:#?}");
    assert!(window(&tidal, "day").hours > 20.0 && window(&tidal, "night").hours > 15.0);

    // By day inference needs about two thirds of the fleet: 70% serves it, 50% cannot.
    assert!(
        tidal.unserved_inference_gpu_hours * 10.0 < even.unserved_inference_gpu_hours,
        "tidal {tidal:#?}\n50/50 {even:#?}"
    );
    assert!(
        tidal.unserved_inference_gpu_hours < 0.05 * window(&tidal, "day").inference_gpu_hours,
        "{tidal:#?}"
    );

    // At night training keeps using what inference leaves open, at least as much as under
    // a static split that guarantees inference 70% around the clock.
    let night = |t: &TidalSummary| window(t, "night").training_share_of_open.unwrap_or(0.0);
    assert!(
        night(&tidal) + 0.02 >= night(&inference_heavy),
        "tidal {:.3} vs 70/30 {:.3}",
        night(&tidal),
        night(&inference_heavy)
    );

    // Of the night capacity training could use (open, and asked for by its running and
    // waiting work), it uses at least 90%.
    let usable = window(&tidal, "night")
        .training_share_of_usable
        .unwrap_or(0.0);
    assert!(
        usable >= 0.9,
        "night share of usable {usable:.3}: {tidal:#?}"
    );

    // What the even split buys instead: more training by day, at inference's expense.
    assert!(
        window(&even, "day").training_gpu_hours > window(&tidal, "day").training_gpu_hours,
        "tidal {tidal:#?}\n50/50 {even:#?}"
    );
}
