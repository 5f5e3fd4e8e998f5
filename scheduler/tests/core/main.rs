//! The scheduler core's scenario and property tests, through its public API only: what the
//! leader, the simulator and policy dry-run can see is what these tests can see.

mod properties;
mod scenarios;
mod testkit;
