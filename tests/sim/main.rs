//! Tests of `tideway simulate`, numbered so they read in order: the FIFO cross-check
//! against an independent reference, the CLI as a user runs it, the trace formats, and the
//! scheduler-mode behaviours (preemption, determinism).
//!
//! Traces are read from `../shared/traces/` (next to the repository), never copied in.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches may panic on a broken setup

mod common;
mod t10_cross_check;
mod t20_cli;
mod t30_traces;
mod t40_scheduler_mode;
