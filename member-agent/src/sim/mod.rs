//! The `sim` backend: an embedded member cluster with a real local gang scheduler.
//!
//! It is the default cluster of `tideway dev`, the demo and the tests, and the cluster model of
//! the trace simulator. The layers, each usable alone:
//! - [`inventory`]: what the cluster is made of (YAML config or the Alibaba node CSV);
//! - [`gang`]: the all-or-nothing, topology-aware gang scheduler, a pure function;
//! - [`cluster`]: [`SimCluster`], nodes and workloads over time, pure and deterministic (time
//!   is always an argument);
//! - [`digest`]: the capacity digest the federation routes on;
//! - the clock (`tideway_api::clock`, re-exported): where `now` comes from (real, scaled,
//!   manual);
//! - [`backend`]: [`SimBackend`], the agent's `Backend` over all of the above.

pub mod backend;
pub mod cluster;
pub mod digest;
pub mod gang;
pub mod inventory;

pub use backend::SimBackend;
pub use cluster::{Ensured, FaultPolicy, PhaseChange, SimCluster, SimError, SimNode, SimWorkload};
pub use digest::capacity_digest;
pub use gang::{GangPlacement, GangRequest, NodeCapacity, PlacementError, PodGroup, place_gang};
pub use inventory::{ClusterConfig, CsvLayout, CsvModel, Inventory, InventoryError, UniformLayout};
/// The clock lives in `tideway-api`, shared with the federation.
pub use tideway_api::clock::{Clock, ManualClock, RealClock, ScaledClock};
