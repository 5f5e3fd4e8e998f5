//! Tests of `tideway simulate` as a user runs it: the binary, its flags, its files and its
//! errors. The simulator library's own tests (the cross-check, trace formats, scheduler
//! mode) live with it in `simulate/tests/`.
//!
//! Traces are read from `../shared/traces/` (next to the repository), never copied in.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches may panic on a broken setup

mod common;
mod t20_cli;
mod t30_same_decisions;
