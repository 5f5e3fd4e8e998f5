//! A progress bar on stderr, only when stderr is a terminal (never in logs or CI output),
//! drawn by `indicatif` (which limits redraws itself).

use std::io::IsTerminal;

use indicatif::{ProgressDrawTarget, ProgressStyle};

use super::engine::Progress;
use super::time::iso;

const TEMPLATE: &str = "[{bar:30}] {percent:>3}% {msg}";

pub struct ProgressBar {
    bar: Option<indicatif::ProgressBar>,
}

impl ProgressBar {
    /// Draws only if stderr is a terminal.
    pub fn stderr() -> Self {
        if !std::io::stderr().is_terminal() {
            return Self::disabled();
        }
        let style = ProgressStyle::with_template(TEMPLATE)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#>.");
        let bar = indicatif::ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr())
            .with_style(style);
        Self { bar: Some(bar) }
    }

    pub fn disabled() -> Self {
        Self { bar: None }
    }

    /// Arrivals drive the bar; the drain after the last arrival shows as 100%.
    pub fn update(&mut self, p: &Progress) {
        let Some(bar) = &self.bar else { return };
        let span = (p.last_arrival - p.first).max(1);
        bar.set_length(span as u64);
        bar.set_position((p.now - p.first).clamp(0, span) as u64);
        bar.set_message(format!(
            "{} | {}/{} jobs arrived | {} running, {} pending | {} events",
            iso(p.now),
            p.arrived,
            p.jobs,
            p.running,
            p.pending,
            p.events
        ));
    }

    /// Leaves the finished bar on its own line, so later output starts on the next.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
    }
}
