//! What can stop a simulation before it starts (or its outputs from being written).
//!
//! Bad trace rows are not errors: they are counted and reported in `summary.json`, because
//! one malformed line in a 100,000-line trace should not cost the whole replay. Everything
//! here is a problem with the run's own inputs (configs, trace specs, files) that a user must
//! fix, so each variant names the file or field at fault.

use std::path::PathBuf;

use tideway_agent::sim::InventoryError;
use tideway_api::{DecodeError, ValidationErrors};

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not parse or does not match the expected shape; names the field.
    #[error("{path}: {source}")]
    Decode {
        path: PathBuf,
        #[source]
        source: DecodeError,
    },
    /// The document parsed but is not valid; every problem with its field.
    #[error("{path}: {errors}")]
    Invalid {
        path: PathBuf,
        errors: ValidationErrors,
    },
    /// A member cluster's layout is not a valid cluster.
    #[error("{path}: cluster {cluster}: {source}")]
    Inventory {
        path: PathBuf,
        cluster: String,
        #[source]
        source: InventoryError,
    },
    /// A field of the clusters or simulator config that serde accepted but makes no sense.
    #[error("{path}: {field}: {reason}")]
    Config {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// `--trace KIND:PATH?filters` is malformed: unknown kind, unknown or bad filter.
    #[error("--trace {spec:?}: {reason}")]
    TraceSpec { spec: String, reason: String },
    /// The trace file as a whole is unusable (missing header columns, not UTF-8).
    #[error("trace {path}: {reason}")]
    Trace { path: PathBuf, reason: String },
    /// A result that does not serialize (a non-finite statistic): written as nothing, it
    /// would look like a run that measured nothing.
    #[error("cannot serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write {what}: {source}")]
    Csv {
        what: &'static str,
        #[source]
        source: csv::Error,
    },
    #[error("cannot draw {what}: {source}")]
    Plot {
        what: &'static str,
        #[source]
        source: crate::svg::PlotError,
    },
    #[error("--{flag} {value:?}: {reason}")]
    Flag {
        flag: &'static str,
        value: String,
        reason: String,
    },
}
