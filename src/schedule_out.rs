//! `tideway schedule next` and `schedule list`: what the next boundary will do, and where
//! every schedule stands. Kept apart from `output` so the tidal views read in one place.

use tideway_api::{ScheduleNext, ScheduleTimeline};

use crate::cli::OutputFormat;
use crate::output::{human_duration, print_one, table, timestamp};

fn or_default(w: &Option<String>) -> String {
    w.clone().unwrap_or_else(|| "(default)".to_owned())
}

fn gpus(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |g| g.to_string())
}

/// The boundary, the quotas it moves, and the workloads it reclaims.
pub fn print_next(v: &ScheduleNext, fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(v, fmt),
        OutputFormat::Name => {
            for r in &v.reclaims {
                println!("workload/{}", r.workload);
            }
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    println!("schedule:  {} ({})", v.schedule, v.time_zone);
    let Some(at) = v.at else {
        println!(
            "boundary:  none within a week; window {} stays",
            or_default(&v.from)
        );
        return Ok(());
    };
    let when = match v.seconds_left {
        Some(s) if s >= 0 => format!("in {}", human_duration(chrono::Duration::seconds(s))),
        Some(s) => format!(
            "{} ago, not yet recorded",
            human_duration(chrono::Duration::seconds(-s))
        ),
        None => String::new(),
    };
    println!(
        "boundary:  {} -> {} at {} ({}, {when})",
        or_default(&v.from),
        or_default(&v.to),
        v.at_local.clone().unwrap_or_default(),
        timestamp(Some(at)),
    );
    println!();
    let rows = v
        .quotas
        .iter()
        .filter(|q| q.before.is_some() || q.after.is_some())
        .map(|q| {
            vec![
                q.target.clone(),
                q.flavor.clone(),
                gpus(q.before),
                gpus(q.after),
            ]
        })
        .collect();
    println!(
        "{}",
        table(&["TARGET", "FLAVOR", "BEFORE", "AFTER"], rows, &[2, 3])
    );
    println!();
    if v.reclaims.is_empty() {
        println!("reclaims:  none on the live state");
        return Ok(());
    }
    println!(
        "reclaims:  {} workloads get a {} s checkpoint notice; {:.2} GPU-hours lost if none \
         checkpoints",
        v.reclaims.len(),
        v.grace_seconds,
        v.lost_gpu_hours
    );
    let rows = v
        .reclaims
        .iter()
        .map(|r| {
            vec![
                r.workload.clone(),
                r.queue.clone(),
                r.cluster.clone(),
                r.gpus.to_string(),
                format!("{:.2}", r.lost_gpu_hours),
                r.for_workload.clone(),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["WORKLOAD", "QUEUE", "CLUSTER", "GPUS", "LOST GPU-H", "FOR"],
            rows,
            &[3, 4]
        )
    );
    Ok(())
}

/// One row per applied schedule.
pub fn print_list(v: &[ScheduleTimeline], fmt: OutputFormat) -> anyhow::Result<()> {
    match fmt {
        OutputFormat::Json | OutputFormat::Yaml => return print_one(&v, fmt),
        OutputFormat::Name => {
            for s in v {
                println!("quotaschedule/{}", s.schedule);
            }
            return Ok(());
        }
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let rows = v
        .iter()
        .map(|s| {
            vec![
                s.schedule.clone(),
                s.time_zone.clone(),
                or_default(&s.status.active_window),
                s.status
                    .next_transition_at
                    .map_or_else(|| "-".to_owned(), |t| timestamp(Some(t))),
                or_default(&s.next_window),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["NAME", "ZONE", "WINDOW", "NEXT TRANSITION", "NEXT WINDOW"],
            rows,
            &[]
        )
    );
    Ok(())
}
