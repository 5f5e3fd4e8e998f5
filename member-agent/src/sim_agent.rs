//! Setting up a `sim`-backed agent: its cluster layout, its identity in the federation, its
//! clock, and where its cluster's state survives the process.
//!
//! `tideway agent --backend sim` and the in-process members of `tideway dev` both build their
//! backend here, so a dev member and a standalone sim agent are the same thing.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use tideway_api::clock::{Clock, ClockError, RealClock, ScaledClock, SharedClock};

use crate::backend::BackendError;
use crate::sim::{Inventory, InventoryError, SimBackend, SimCluster};

/// The layout of a `sim` agent started without one: one small region (`sim-eu`).
pub const DEFAULT_LAYOUT: &[u8] = include_bytes!("../../deploy/dev/sim-eu.yaml");

/// Why a sim agent could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SimSetupError {
    /// The layout file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The layout file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The layout is not a valid cluster layout.
    #[error("the sim cluster layout: {0}")]
    Layout(#[from] InventoryError),
    /// The state directory could not be created or its state loaded.
    #[error("the sim cluster's state: {0}")]
    State(String),
}

/// Where the cluster layout comes from.
#[derive(Debug, Clone)]
pub enum Layout {
    /// A YAML file (`--config`).
    File(PathBuf),
    /// Bytes the caller holds (the embedded members of `tideway dev`).
    Bytes(&'static [u8]),
    /// [`DEFAULT_LAYOUT`].
    Default,
}

/// How to set up a sim agent.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The cluster layout.
    pub layout: Layout,
    /// The member's name; the layout's when absent.
    pub cluster: Option<String>,
    /// Its region; the layout's when absent.
    pub region: Option<String>,
    /// The clock the cluster runs on ([`sim_clock`], or one shared with a dev federation).
    pub clock: SharedClock,
    /// Where the cluster's state survives the agent (kill -9 included); in memory when absent.
    pub data: Option<PathBuf>,
}

/// The clock of a standalone sim agent: the wall clock, or virtual time `time_scale` times
/// faster.
pub fn sim_clock(time_scale: f64) -> Result<SharedClock, ClockError> {
    sim_clock_from(time_scale, None)
}

/// Like [`sim_clock`], with virtual time starting at `start` instead of now: a demo or a
/// test that must see the same hour of the day (a tidal window) whenever it runs.
pub fn sim_clock_from(
    time_scale: f64,
    start: Option<DateTime<Utc>>,
) -> Result<SharedClock, ClockError> {
    Ok(match start {
        None if (time_scale - 1.0).abs() < f64::EPSILON => Arc::new(RealClock),
        None => Arc::new(ScaledClock::new(RealClock.now(), time_scale)?),
        Some(start) => Arc::new(ScaledClock::new(start, time_scale)?),
    })
}

/// A sim backend and the identity its layout (or the options) give it.
#[derive(Debug, Clone)]
pub struct SimAgent {
    /// The backend the agent loop drives.
    pub backend: SimBackend,
    /// The member cluster's name.
    pub cluster: String,
    /// Its region.
    pub region: String,
}

impl SimAgent {
    /// Builds the backend: loads the layout, picks the clock, and loads the cluster from
    /// `data` when it was saved there before.
    pub fn build(o: &SimOptions) -> Result<Self, SimSetupError> {
        let inventory = match &o.layout {
            Layout::File(p) => {
                let bytes = std::fs::read(p).map_err(|source| SimSetupError::Read {
                    path: p.clone(),
                    source,
                })?;
                Inventory::from_yaml(&bytes)?
            }
            Layout::Bytes(b) => Inventory::from_yaml(b)?,
            Layout::Default => Inventory::from_yaml(DEFAULT_LAYOUT)?,
        }
        // A name or region given in the options is the cluster's own, digests included.
        .renamed(o.cluster.as_deref(), o.region.as_deref());
        let cluster = o
            .cluster
            .clone()
            .unwrap_or_else(|| inventory.cluster().to_string());
        let region = o
            .region
            .clone()
            .unwrap_or_else(|| inventory.region().to_string());
        let clock = o.clock.clone();
        let fresh = || SimCluster::new(&inventory);
        let backend = match &o.data {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| SimSetupError::State(format!("{}: {e}", dir.display())))?;
                SimBackend::persisted(&dir.join("sim-cluster.state"), fresh, clock)
                    .map_err(|e: BackendError| SimSetupError::State(e.to_string()))?
            }
            None => SimBackend::new(fresh(), clock),
        };
        Ok(Self {
            backend,
            cluster,
            region,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(layout: Layout) -> SimOptions {
        SimOptions {
            layout,
            cluster: None,
            region: None,
            clock: Arc::new(RealClock),
            data: None,
        }
    }

    #[test]
    fn identity_comes_from_the_layout_unless_given() {
        let a = SimAgent::build(&opts(Layout::Default)).unwrap();
        assert_eq!(
            (a.cluster.as_str(), a.region.as_str()),
            ("sim-eu", "eu-west")
        );
        let mut o = opts(Layout::Bytes(DEFAULT_LAYOUT));
        o.cluster = Some("other".into());
        o.region = Some("r".into());
        let b = SimAgent::build(&o).unwrap();
        assert_eq!((b.cluster.as_str(), b.region.as_str()), ("other", "r"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let digest = rt
            .block_on(crate::backend::Backend::digest(&b.backend))
            .expect("digest");
        assert_eq!(
            digest.cluster.as_str(),
            "other",
            "the digest names the member"
        );
    }

    #[test]
    fn bad_inputs_say_what_is_wrong() {
        let e = SimAgent::build(&opts(Layout::File("/no/such/layout.yaml".into()))).unwrap_err();
        assert!(e.to_string().contains("/no/such/layout.yaml"), "{e}");
        assert!(sim_clock(0.0).is_err());
        assert!(sim_clock(60.0).is_ok());
        let start = DateTime::parse_from_rfc3339("2026-01-05T03:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .expect("a time");
        let c = sim_clock_from(1.0, Some(start)).expect("a clock");
        let drift = c.now() - start;
        assert!(drift >= chrono::TimeDelta::zero() && drift < chrono::TimeDelta::seconds(5));
    }

    #[test]
    fn state_persists_in_the_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(Layout::Default);
        o.data = Some(dir.path().join("agent"));
        SimAgent::build(&o).unwrap();
        assert!(dir.path().join("agent/sim-cluster.state").exists());
    }
}
