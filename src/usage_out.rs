//! `tideway usage` output: a table for people, CSV for spreadsheets, JSON for programs.

use tideway_api::usage::{UsageReport, gpu_hours};

/// How `tideway usage` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UsageFormat {
    /// Queue rows, then flavor rows, in GPU-hours.
    #[default]
    Table,
    /// The table with the borrowed share, exact GPU-seconds and each flavor's utilization.
    Wide,
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
        UsageFormat::Table | UsageFormat::Wide => {
            let wide = fmt == UsageFormat::Wide;
            let percent = |part: u64, whole: u64| {
                if whole == 0 {
                    "-".to_string()
                } else {
                    format!("{:.0}%", part as f64 * 100.0 / whole as f64)
                }
            };
            println!(
                "GPU-hours from {} to {} ({})",
                crate::output::timestamp(Some(r.from)),
                crate::output::timestamp(Some(r.accounted_to)),
                r.tz
            );
            let rows = r
                .queues
                .iter()
                .map(|q| {
                    let mut row = vec![
                        opt(&q.day),
                        opt(&q.queue),
                        opt(&q.tenant),
                        opt(&q.flavor),
                        hours(q.guaranteed_gpu_seconds),
                        hours(q.borrowed_gpu_seconds),
                        hours(q.used_gpu_seconds),
                    ];
                    if wide {
                        row.extend([
                            percent(q.borrowed_gpu_seconds, q.used_gpu_seconds),
                            q.used_gpu_seconds.to_string(),
                        ]);
                    }
                    row
                })
                .collect();
            let mut header = vec![
                "DAY",
                "QUEUE",
                "TENANT",
                "FLAVOR",
                "GUARANTEED",
                "BORROWED",
                "USED",
            ];
            if wide {
                header.extend(["BORROWED SHARE", "USED GPU-SECONDS"]);
            }
            println!("{}", crate::output::table(&header, rows, &[4, 5, 6, 7, 8]));
            let rows = r
                .flavors
                .iter()
                .map(|f| {
                    let mut row = vec![
                        opt(&f.day),
                        f.flavor.clone(),
                        hours(f.capacity_gpu_seconds),
                        hours(f.used_gpu_seconds),
                        hours(f.idle_gpu_seconds),
                    ];
                    if wide {
                        row.extend([
                            percent(f.used_gpu_seconds, f.capacity_gpu_seconds),
                            hours(f.over_gpu_seconds),
                        ]);
                    }
                    row
                })
                .collect();
            let mut header = vec!["DAY", "FLAVOR", "CAPACITY", "USED", "IDLE"];
            if wide {
                header.extend(["UTILIZATION", "OVER"]);
            }
            println!();
            println!("{}", crate::output::table(&header, rows, &[2, 3, 4, 5, 6]));
            if let Some(t) = r.retained_since {
                println!(
                    "note: the ledger holds usage since {} only",
                    crate::output::timestamp(Some(t))
                );
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
        OutputFormat::Name => {
            for w in items {
                println!("webhook/{}", w.metadata.name);
            }
        }
        OutputFormat::Table | OutputFormat::Wide => {
            use crate::output::{age, timestamp};
            let wide = fmt == OutputFormat::Wide;
            let now = crate::output::now();
            let rows = items
                .iter()
                .map(|w| {
                    let st = w.status.clone().unwrap_or_default();
                    let events: Vec<&str> = w.spec.events.iter().map(|k| k.as_str()).collect();
                    let mut row = vec![
                        w.metadata.name.clone(),
                        w.spec.url.clone(),
                        events.join(","),
                        opt(&st.last_delivered),
                        age(st.last_delivered_at, now),
                        format!("{}/{}", st.failures, st.total_failures),
                        age(w.metadata.creation_timestamp, now),
                    ];
                    if wide {
                        let secret = w.spec.secret_ref.as_ref().map_or_else(
                            || "-".to_string(),
                            |r| serde_json::to_string(r).unwrap_or_default(),
                        );
                        row.extend([
                            st.next_seq.to_string(),
                            st.skipped.to_string(),
                            timestamp(st.last_delivered_at),
                            secret,
                        ]);
                    }
                    row.push(st.last_error.unwrap_or_else(|| "-".into()));
                    row
                })
                .collect();
            let mut header = vec![
                "NAME",
                "URL",
                "EVENTS",
                "LAST DELIVERED",
                "DELIVERED",
                "FAILURES (NOW/EVER)",
                "AGE",
            ];
            if wide {
                header.extend(["NEXT SEQ", "SKIPPED", "DELIVERED AT", "SECRET"]);
            }
            header.push("LAST ERROR");
            println!("{}", crate::output::table(&header, rows, &[3]));
        }
    }
    Ok(())
}
