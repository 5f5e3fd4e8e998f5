//! The `sim` backend: an embedded member cluster with a real local gang scheduler.
//!
//! It is the default cluster of `tideway dev`, the demo and the tests, and the cluster model of
//! the trace simulator. The layers, each usable alone:
//! - [`gang`]: the all-or-nothing, topology-aware gang scheduler, a pure function;
//! - [`clock`]: where `now` comes from (real, scaled, manual).

pub mod clock;
pub mod gang;

pub use clock::{Clock, ManualClock, RealClock, ScaledClock};
pub use gang::{GangPlacement, GangRequest, NodeCapacity, PlacementError, PodGroup, place_gang};
