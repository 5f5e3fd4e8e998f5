//! The agent's configuration file for the `kube` backend (`tideway agent --backend kube
//! --config FILE`): where the federation is, the member's region, and the backend's settings.
//!
//! The shipped example is `deploy/kubernetes/agent/agent.yaml`, which kustomize also turns into
//! the agent's ConfigMap, so the file users copy is the file the tests check. Unknown keys are
//! refused at start-up: a typo in a label key must not silently empty the capacity digest.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::kube_backend::KubeConfig;

/// Why the agent file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AgentFileError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid agent file; `field` is its camelCase path.
    #[error("{path}: {field}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The offending field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The `kube` agent's file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeAgentFile {
    /// Federation nodes: one address or a comma-separated list (`http://` is optional).
    #[serde(default)]
    pub federation: Option<String>,
    /// The member's region in the federation.
    #[serde(default)]
    pub region: Option<String>,
    /// The kube backend's settings.
    pub kube: KubeConfig,
}

impl KubeAgentFile {
    /// Reads and decodes the file at `path`.
    pub fn load(path: &Path) -> Result<Self, AgentFileError> {
        let bytes = std::fs::read(path).map_err(|source| AgentFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_yaml(&bytes, path)
    }

    /// Decodes a file's bytes; `path` only names the file in errors.
    pub fn from_yaml(bytes: &[u8], path: &Path) -> Result<Self, AgentFileError> {
        tideway_api::decode_yaml(bytes).map_err(|e| {
            let f = e.to_field_error();
            AgentFileError::Invalid {
                path: path.to_path_buf(),
                field: f.field,
                reason: f.reason,
            }
        })
    }

    /// The `federation` addresses as `HOST:PORT`s (empty when the file names none).
    pub fn federation_addrs(&self) -> Vec<String> {
        self.federation
            .as_deref()
            .map(parse_federation_list)
            .unwrap_or_default()
    }
}

/// Splits a comma-separated list of federation addresses, dropping `http://`, trailing slashes
/// and empty entries.
pub fn parse_federation_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(|s| {
            s.trim()
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_backend::SchedulerMode;

    /// The agent file shipped in deploy/kubernetes (and made into its ConfigMap) must stay a
    /// valid file.
    #[test]
    fn the_shipped_agent_file_is_valid() {
        let bytes = include_bytes!("../../deploy/kubernetes/agent/agent.yaml");
        let f = KubeAgentFile::from_yaml(bytes, Path::new("agent.yaml")).unwrap();
        f.kube.validate().unwrap();
        assert_eq!(f.kube.mode, SchedulerMode::Volcano);
        assert_eq!(f.kube.flavor_selector("L4").len(), 1);
        assert_eq!(
            f.federation_addrs(),
            ["tideway.tideway-system.svc.cluster.local:7400"]
        );
        assert_eq!(f.region.as_deref(), Some("us-west"));
    }

    #[test]
    fn unknown_keys_are_refused_with_the_field_named() {
        let yaml = b"region: eu\nkube:\n  cluster: a\n  mode: volcano\nregoin: x\n";
        let e = KubeAgentFile::from_yaml(yaml, Path::new("f.yaml")).unwrap_err();
        assert!(e.to_string().contains("regoin"), "{e}");
    }

    #[test]
    fn federation_lists_are_normalized() {
        assert_eq!(parse_federation_list(" http://a:1/, b:2,,"), ["a:1", "b:2"]);
    }
}
