//! tideway-agent: the member-cluster agent.
//!
//! An agent runs next to each member cluster: it registers the cluster with the federation,
//! reports a capacity digest, pulls assignments and creates them in the local cluster
//! idempotently (keyed by workload UID), and reports status back. Backends: `kube` (Volcano
//! and Kueue through the kube crate) and `sim` (an embedded cluster with a local gang
//! scheduler, in [`sim`]). [`agent`] is the loop that drives a [`backend::Backend`].
//! The agent process's own formats live here too: its configuration file ([`agent_file`]),
//! the setup of a sim-backed agent ([`sim_agent`]) and its local HTTP view ([`local_view`]);
//! the `tideway` binary only parses flags and calls them.

pub mod agent;
pub mod agent_file;
pub mod backend;
pub mod kube_backend;
pub mod local_view;
pub mod sim;
pub mod sim_agent;

/// The resource types an agent speaks, re-exported so backends depend on one crate.
pub use tideway_api as api;
