//! Hand-written SVG line charts: enough for utilization over time and delay CDFs, without a
//! plotting crate (and its compile time) for two pictures.

use std::fmt::Write as _;

use super::metrics::{JobRecord, Sample};
use super::time::{Secs, short_duration, to_utc};

const W: f64 = 960.0;
const H: f64 = 480.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

/// Distinguishable colours (Tableau 10 and two more); series beyond repeat with dashes.
const COLORS: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#1f77b4", "#8c564b",
];

pub struct Axis {
    pub min: f64,
    pub max: f64,
    pub ticks: Vec<(f64, String)>,
    pub label: String,
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn thicker and in black (a total).
    pub emphasis: bool,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn line_chart(title: &str, x: &Axis, y: &Axis, series: &[Series]) -> String {
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let sx = |v: f64| {
        let span = (x.max - x.min).max(f64::MIN_POSITIVE);
        LEFT + (v - x.min) / span * pw
    };
    let sy = |v: f64| {
        let span = (y.max - y.min).max(f64::MIN_POSITIVE);
        TOP + ph - (v - y.min) / span * ph
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        LEFT,
        esc(title)
    );
    // Grid and ticks.
    for (v, label) in &x.ticks {
        let px = sx(*v);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 18.0,
            esc(label)
        );
    }
    for (v, label) in &y.ticks {
        let py = sy(*v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            py + 4.0,
            esc(label)
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 15.0,
        esc(&x.label)
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(&y.label)
    );
    // Series and legend.
    let mut legend_y = TOP + 8.0;
    for (i, se) in series.iter().enumerate() {
        let (color, width) = if se.emphasis {
            ("#000000", 2.5)
        } else {
            (COLORS[i % COLORS.len()], 1.5)
        };
        let dash = if !se.emphasis && i >= COLORS.len() {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        if !se.points.is_empty() {
            let mut pts = String::with_capacity(se.points.len() * 14);
            for (px, py) in &se.points {
                let _ = write!(pts, "{:.1},{:.1} ", sx(*px), sy(*py));
            }
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="{width}"{dash} points="{}"/>"#,
                pts.trim_end()
            );
        }
        if legend_y < H - BOTTOM {
            let lx = LEFT + pw + 12.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx:.1}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{color}" stroke-width="{width}"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                lx + 22.0,
                lx + 28.0,
                legend_y + 4.0,
                esc(&se.name)
            );
            legend_y += 17.0;
        }
    }
    s.push_str("</svg>\n");
    s
}

/// Roughly `n` round tick positions over a time span, labelled by date (or time of day for
/// spans under three days).
fn time_ticks(from: Secs, to: Secs, n: i64) -> Vec<(f64, String)> {
    let span = (to - from).max(1);
    let steps = [
        600, 1800, 3600, 7200, 21_600, 43_200, 86_400, 172_800, 604_800, 1_209_600, 2_592_000,
    ];
    let step = steps
        .iter()
        .copied()
        .find(|s| span / s <= n)
        .unwrap_or(2_592_000);
    let fmt = if span < 3 * 86_400 {
        "%m-%d %H:%M"
    } else {
        "%Y-%m-%d"
    };
    let mut t = (from + step - 1).div_euclid(step) * step;
    let mut out = Vec::new();
    while t <= to {
        out.push((t as f64, to_utc(t).format(fmt).to_string()));
        t += step;
    }
    out
}

fn percent_ticks() -> Vec<(f64, String)> {
    (0..=5)
        .map(|i| (i as f64 * 20.0, format!("{}%", i * 20)))
        .collect()
}

/// Allocated over total GPUs per pool (and the whole fleet) over time.
pub fn utilization(pools: &[(String, u64)], samples: &[Sample]) -> String {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return line_chart(
            "GPU utilization (no samples)",
            &Axis {
                min: 0.0,
                max: 1.0,
                ticks: Vec::new(),
                label: "time".into(),
            },
            &Axis {
                min: 0.0,
                max: 100.0,
                ticks: percent_ticks(),
                label: "allocated GPUs".into(),
            },
            &[],
        );
    };
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
        &Axis {
            min: first.at as f64,
            max: last.at.max(first.at + 1) as f64,
            ticks: time_ticks(first.at, last.at, 8),
            label: "virtual time (UTC)".into(),
        },
        &Axis {
            min: 0.0,
            max: 100.0,
            ticks: percent_ticks(),
            label: "allocated GPUs".into(),
        },
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
pub fn delay_cdf(title: &str, groups: &[(String, Vec<Secs>)]) -> String {
    let max = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .max()
        .unwrap_or(1)
        .max(10);
    let decades = (max as f64).log10().ceil().max(1.0);
    let x = Axis {
        min: 0.0,
        max: decades,
        ticks: [
            1.0,
            10.0,
            60.0,
            600.0,
            3600.0,
            36_000.0,
            86_400.0,
            864_000.0,
            8_640_000.0,
        ]
        .into_iter()
        .filter(|v: &f64| v.log10() <= decades)
        .map(|v: f64| (v.log10(), short_duration(v)))
        .collect(),
        label: "queueing delay (log scale; 0 drawn at 1s)".into(),
    };
    let y = Axis {
        min: 0.0,
        max: 1.0,
        ticks: (0..=5)
            .map(|i| (i as f64 * 0.2, format!("{:.1}", i as f64 * 0.2)))
            .collect(),
        label: "fraction of started workloads".into(),
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
        let svg = utilization(&[("a/p".into(), 8), ("b<&>/p".into(), 8)], &samples);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(
            svg.matches("<polyline").count(),
            3,
            "two pools and the fleet"
        );
        assert!(svg.contains("b&lt;&amp;&gt;/p"));
        let cdf = delay_cdf("q", &[("training".into(), vec![0, 10, 100, 100_000])]);
        assert_eq!(cdf.matches("<polyline").count(), 1);
        assert!(cdf.contains(">1s<") && cdf.contains(">1h<"), "{cdf}");
        assert!(utilization(&[], &[]).contains("no samples"));
    }
}
