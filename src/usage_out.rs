//! `tideway usage` output: a table for people, CSV for spreadsheets, JSON for programs.

use tideway_api::usage::{UsageReport, gpu_hours};

/// How `tideway usage` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UsageFormat {
    /// Queue rows, then flavor rows, in GPU-hours.
    #[default]
    Table,
    /// One CSV table: queue rows and flavor rows, with a `section` column, in GPU-hours.
    Csv,
    /// The report as the API answers it (exact GPU-seconds).
    Json,
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_string(), T::to_string)
}

fn hours(s: u64) -> String {
    format!("{:.2}", gpu_hours(s))
}

pub fn print_usage(r: &UsageReport, fmt: UsageFormat) -> anyhow::Result<()> {
    match fmt {
        UsageFormat::Json => println!("{}", serde_json::to_string_pretty(r)?),
        UsageFormat::Csv => {
            let mut w = csv::Writer::from_writer(std::io::stdout());
            w.write_record([
                "section",
                "day",
                "queue",
                "tenant",
                "flavor",
                "guaranteed_gpu_hours",
                "borrowed_gpu_hours",
                "used_gpu_hours",
                "idle_gpu_hours",
                "capacity_gpu_hours",
            ])?;
            for q in &r.queues {
                w.write_record([
                    "queue".to_string(),
                    opt(&q.day),
                    opt(&q.queue),
                    opt(&q.tenant),
                    opt(&q.flavor),
                    hours(q.guaranteed_gpu_seconds),
                    hours(q.borrowed_gpu_seconds),
                    hours(q.used_gpu_seconds),
                    String::new(),
                    String::new(),
                ])?;
            }
            for f in &r.flavors {
                w.write_record([
                    "flavor".to_string(),
                    opt(&f.day),
                    String::new(),
                    String::new(),
                    f.flavor.clone(),
                    String::new(),
                    String::new(),
                    hours(f.used_gpu_seconds),
                    hours(f.idle_gpu_seconds),
                    hours(f.capacity_gpu_seconds),
                ])?;
            }
            w.flush()?;
        }
        UsageFormat::Table => {
            println!(
                "GPU-hours from {} to {} ({})",
                r.from.to_rfc3339(),
                r.accounted_to.to_rfc3339(),
                r.tz
            );
            let rows = r
                .queues
                .iter()
                .map(|q| {
                    vec![
                        opt(&q.day),
                        opt(&q.queue),
                        opt(&q.tenant),
                        opt(&q.flavor),
                        hours(q.guaranteed_gpu_seconds),
                        hours(q.borrowed_gpu_seconds),
                        hours(q.used_gpu_seconds),
                    ]
                })
                .collect();
            println!(
                "{}",
                crate::output::table(
                    &[
                        "DAY",
                        "QUEUE",
                        "TENANT",
                        "FLAVOR",
                        "GUARANTEED",
                        "BORROWED",
                        "USED"
                    ],
                    rows,
                    &[4, 5, 6],
                )
            );
            let rows = r
                .flavors
                .iter()
                .map(|f| {
                    vec![
                        opt(&f.day),
                        f.flavor.clone(),
                        hours(f.capacity_gpu_seconds),
                        hours(f.used_gpu_seconds),
                        hours(f.idle_gpu_seconds),
                    ]
                })
                .collect();
            println!();
            println!(
                "{}",
                crate::output::table(
                    &["DAY", "FLAVOR", "CAPACITY", "USED", "IDLE"],
                    rows,
                    &[2, 3, 4]
                )
            );
            if let Some(t) = r.retained_since {
                println!("note: the ledger holds usage since {} only", t.to_rfc3339());
            }
        }
    }
    Ok(())
}

/// `tideway webhooks`.
pub fn print_webhooks(
    items: &[tideway_api::webhook::Webhook],
    fmt: crate::cli::OutputFormat,
) -> anyhow::Result<()> {
    use crate::cli::OutputFormat;
    match fmt {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(items)?),
        OutputFormat::Yaml => print!("{}", serde_saphyr::to_string(&items)?),
        OutputFormat::Table | OutputFormat::Wide => {
            let rows = items
                .iter()
                .map(|w| {
                    let st = w.status.clone().unwrap_or_default();
                    let events: Vec<&str> = w.spec.events.iter().map(|k| k.as_str()).collect();
                    vec![
                        w.metadata.name.clone(),
                        w.spec.url.clone(),
                        events.join(","),
                        opt(&st.last_delivered),
                        st.last_delivered_at
                            .map_or_else(|| "-".into(), |t| t.to_rfc3339()),
                        format!("{}/{}", st.failures, st.total_failures),
                        st.last_error.unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            println!(
                "{}",
                crate::output::table(
                    &[
                        "NAME",
                        "URL",
                        "EVENTS",
                        "LAST DELIVERED",
                        "AT",
                        "FAILURES (NOW/EVER)",
                        "LAST ERROR"
                    ],
                    rows,
                    &[3],
                )
            );
        }
    }
    Ok(())
}
