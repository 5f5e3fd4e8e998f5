//! The simulator's plots, drawn with `plotters` (SVG backend only): utilization over time and
//! queueing-delay CDFs.

use plotters::prelude::*;

use super::metrics::{JobRecord, Sample};
use super::time::{Secs, short_duration, to_utc};

const SIZE: (u32, u32) = (960, 480);

/// Distinguishable colours (Tableau 10 and two more); series beyond repeat them.
const COLORS: [RGBColor; 12] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// A plot that could not be drawn (a drawing error of the backend), with why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PlotError(String);

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for PlotError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        Self(e.to_string())
    }
}

pub struct Axis<'a> {
    pub min: f64,
    pub max: f64,
    pub label: &'a str,
    pub format: &'a dyn Fn(&f64) -> String,
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn thicker and in black (a total).
    pub emphasis: bool,
}

pub fn line_chart(
    title: &str,
    x: &Axis<'_>,
    y: &Axis<'_>,
    series: &[Series],
) -> Result<String, PlotError> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(
                x.min..x.max.max(x.min + 1e-9),
                y.min..y.max.max(y.min + 1e-9),
            )?;
        chart
            .configure_mesh()
            .x_desc(x.label)
            .y_desc(y.label)
            .x_labels(8)
            .y_labels(6)
            .x_label_formatter(x.format)
            .y_label_formatter(y.format)
            .draw()?;
        for (i, se) in series.iter().enumerate() {
            let style = if se.emphasis {
                BLACK.stroke_width(2)
            } else {
                COLORS[i % COLORS.len()].stroke_width(1)
            };
            chart
                .draw_series(LineSeries::new(se.points.iter().copied(), style))?
                .label(se.name.as_str())
                .legend(move |(lx, ly)| PathElement::new(vec![(lx, ly), (lx + 20, ly)], style));
        }
        if !series.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(buf)
}

/// Dates on the time axis, or times of day for spans under three days.
fn time_format(span: Secs) -> &'static str {
    if span < 3 * 86_400 {
        "%m-%d %H:%M"
    } else {
        "%Y-%m-%d"
    }
}

fn percent(v: &f64) -> String {
    format!("{v:.0}%")
}

/// Allocated over total GPUs per pool (and the whole fleet) over time.
pub fn utilization(pools: &[(String, u64)], samples: &[Sample]) -> Result<String, PlotError> {
    let (first, last) = match (samples.first(), samples.last()) {
        (Some(f), Some(l)) => (f.at, l.at.max(f.at + 1)),
        _ => (0, 1),
    };
    let fmt = time_format(last - first);
    let time = move |v: &f64| to_utc(*v as Secs).format(fmt).to_string();
    let x = Axis {
        min: first as f64,
        max: last as f64,
        label: "virtual time (UTC)",
        format: &time,
    };
    let y = Axis {
        min: 0.0,
        max: 100.0,
        label: "allocated GPUs",
        format: &percent,
    };
    if samples.is_empty() {
        return line_chart("GPU utilization (no samples)", &x, &y, &[]);
    }
    let mut series: Vec<Series> = pools
        .iter()
        .enumerate()
        .map(|(i, (name, total))| Series {
            name: format!("{name} ({total})"),
            points: samples
                .iter()
                .map(|s| {
                    let a = s.allocated.get(i).copied().unwrap_or(0);
                    (s.at as f64, pct(a, *total))
                })
                .collect(),
            emphasis: false,
        })
        .collect();
    if pools.len() > 1 {
        let fleet: u64 = pools.iter().map(|(_, t)| t).sum();
        series.push(Series {
            name: format!("fleet ({fleet})"),
            points: samples
                .iter()
                .map(|s| (s.at as f64, pct(s.allocated.iter().sum(), fleet)))
                .collect(),
            emphasis: true,
        });
    }
    line_chart(
        "GPU utilization per pool (allocated / total GPUs)",
        &x,
        &y,
        &series,
    )
}

fn pct(a: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        a as f64 * 100.0 / total as f64
    }
}

/// CDF of queueing delay (submit to first start) per group, on a log time axis; delays
/// under a second are drawn at one second.
pub fn delay_cdf(title: &str, groups: &[(String, Vec<Secs>)]) -> Result<String, PlotError> {
    let max = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .max()
        .unwrap_or(1)
        .max(10);
    let decades = (max as f64).log10().ceil().max(1.0);
    let duration = |v: &f64| short_duration(10f64.powf(*v).round());
    let fraction = |v: &f64| format!("{v:.1}");
    let x = Axis {
        min: 0.0,
        max: decades,
        label: "queueing delay (log scale; 0 drawn at 1s)",
        format: &duration,
    };
    let y = Axis {
        min: 0.0,
        max: 1.0,
        label: "fraction of started workloads",
        format: &fraction,
    };
    let series: Vec<Series> = groups
        .iter()
        .map(|(name, delays)| {
            let mut v = delays.clone();
            v.sort_unstable();
            let n = v.len();
            // At most ~400 points per line: the CDF at evenly spaced ranks, plus the last.
            let step = (n / 400).max(1);
            let mut points = Vec::new();
            if n > 0 {
                points.push((0.0, 0.0));
            }
            let mut i = 0;
            while i < n {
                let xv = (v[i].max(1) as f64).log10();
                points.push((xv, (i + 1) as f64 / n as f64));
                i += step;
            }
            if n > 0 {
                points.push(((v[n - 1].max(1) as f64).log10(), 1.0));
            }
            Series {
                name: format!("{name} (n={n})"),
                points,
                emphasis: false,
            }
        })
        .collect();
    line_chart(title, &x, &y, &series)
}

/// Delays per group key, of workloads that started.
pub fn delays_by<'a>(
    records: &'a [JobRecord],
    key: impl Fn(&'a JobRecord) -> String,
) -> Vec<(String, Vec<Secs>)> {
    let mut groups: std::collections::BTreeMap<String, Vec<Secs>> = Default::default();
    for r in records {
        if let Some(q) = r.queueing() {
            groups.entry(key(r)).or_default().push(q);
        }
    }
    groups.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed() {
        let samples = vec![
            Sample {
                at: 0,
                allocated: vec![4, 0],
                pending: 1,
                running: 1,
            },
            Sample {
                at: 3600,
                allocated: vec![8, 2],
                pending: 0,
                running: 2,
            },
        ];
        let svg = utilization(&[("a/p".into(), 8), ("b<&>/p".into(), 8)], &samples).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // A line and a legend mark per series: two pools in their colours, the fleet in
        // thick black.
        for stroke in [
            r##"stroke="#4E79A7" stroke-width="1""##,
            r##"stroke="#F28E2B" stroke-width="1""##,
            r##"stroke="#000000" stroke-width="2""##,
        ] {
            assert_eq!(svg.matches(stroke).count(), 2, "{stroke}");
        }
        assert!(svg.contains("b&lt;&amp;&gt;/p (8)"), "names are escaped");
        assert!(svg.contains("fleet (16)"));
        let cdf = delay_cdf("q", &[("training".into(), vec![0, 10, 100, 100_000])]).unwrap();
        assert_eq!(cdf.matches(r##"stroke="#4E79A7""##).count(), 2);
        assert!(
            cdf.contains("training (n=4)") && cdf.contains("\n1s\n"),
            "{cdf}"
        );
        assert!(utilization(&[], &[]).unwrap().contains("no samples"));
    }
}
