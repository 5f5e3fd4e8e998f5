//! Tests of the simulator library, numbered so they read in order: the FIFO cross-check
//! against an independent reference, the trace formats, and the scheduler-mode behaviours
//! (preemption, determinism). The CLI as a user runs it is tested from the `tideway`
//! package (`tests/sim/t20_cli.rs`).
//!
//! Traces are read from `../shared/traces/` (next to the repository), never copied in.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on a broken setup

mod common;
mod t10_cross_check;
mod t30_traces;
mod t40_partition_view;
mod t40_scheduler_mode;
mod t40_static_partition;
mod t45_promise;
mod t50_pending_view;
mod t60_estimates;
mod t70_decision_trace;
mod t98_tidal;
