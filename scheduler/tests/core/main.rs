//! The scheduler core's scenario and property tests, through its public API only: what the
//! leader, the simulator and policy dry-run can see is what these tests can see.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches may panic on a broken setup

mod defragment;
mod gang_reclaim;
mod properties;
mod reclaim;
mod rollout;
mod scenarios;
mod testkit;
mod tidal;
