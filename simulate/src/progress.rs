//! A progress bar on stderr, only when stderr is a terminal (never in logs or CI output):
//! hand-rolled with `std::io::IsTerminal`, redrawn at most ten times a second.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use tideway_api::clock::{Clock, RealClock};

use super::engine::Progress;
use super::time::iso;

const WIDTH: usize = 30;
const EVERY: Duration = Duration::from_millis(100);

pub struct ProgressBar {
    enabled: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl ProgressBar {
    /// Draws only if stderr is a terminal.
    pub fn stderr() -> Self {
        Self {
            enabled: std::io::stderr().is_terminal(),
            last: None,
            drawn: false,
        }
    }

    pub fn disabled() -> Self {
        Self {
            enabled: false,
            last: None,
            drawn: false,
        }
    }

    pub fn update(&mut self, p: &Progress) {
        if !self.enabled || self.last.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        self.last = Some(RealClock.instant());
        // Arrivals drive the first part; the drain after the last arrival shows as 100%.
        let span = (p.last_arrival - p.first).max(1) as f64;
        let done = ((p.now - p.first) as f64 / span).clamp(0.0, 1.0);
        let filled = (done * WIDTH as f64).round() as usize;
        let line = format!(
            "\r[{}{}] {:>3.0}% {} | {}/{} jobs arrived | {} running, {} pending | {} events",
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            done * 100.0,
            iso(p.now),
            p.arrived,
            p.jobs,
            p.running,
            p.pending,
            p.events
        );
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{line}\x1b[K");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Ends the bar's line so later output starts on its own.
    pub fn finish(&mut self) {
        if self.drawn {
            let _ = writeln!(std::io::stderr());
            self.drawn = false;
        }
    }
}
