//! The CLI's configuration file: named contexts of server address and token, like a
//! kubeconfig, at `$TIDEWAY_CONFIG`, else `$XDG_CONFIG_HOME/tideway/config`, else
//! `~/.config/tideway/config`.
//!
//! ```yaml
//! currentContext: dev
//! contexts:
//! - {name: dev, server: 127.0.0.1:7400, token: tw_...}
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CliConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    #[serde(default)]
    pub contexts: Vec<CliContext>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CliContext {
    pub name: String,
    pub server: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Where the configuration lives.
pub fn path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TIDEWAY_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("tideway").join("config"))
}

impl CliConfig {
    /// The configuration at `path`; empty when there is none.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_saphyr::from_str(&text)
                .with_context(|| format!("reading the CLI configuration {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// The current context, if one is set and exists.
    pub fn current(&self) -> Option<&CliContext> {
        let name = self.current_context.as_ref()?;
        self.contexts.iter().find(|c| &c.name == name)
    }

    /// Sets (adds or replaces) a context and makes it current.
    pub fn set_current(&mut self, ctx: CliContext) {
        self.current_context = Some(ctx.name.clone());
        self.contexts.retain(|c| c.name != ctx.name);
        self.contexts.push(ctx);
    }

    /// Writes the configuration, readable by its owner only: it holds tokens.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let text = serde_saphyr::to_string(self)?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        }
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

/// The address and token a client verb uses: `--addr`/`TIDEWAY_ADDR` and
/// `--token`/`TIDEWAY_TOKEN` win; otherwise the current context's (its token only for its own
/// server); otherwise `default_addr` and no token.
pub fn resolve(
    addr: Option<&str>,
    token: Option<&str>,
    cfg: &CliConfig,
    default_addr: &str,
) -> (String, Option<String>) {
    let ctx = cfg.current();
    let addr = addr
        .map(str::to_string)
        .or_else(|| ctx.map(|c| c.server.clone()))
        .unwrap_or_else(|| default_addr.to_string());
    let token = token.map(str::to_string).or_else(|| {
        ctx.filter(|c| same_server(&c.server, &addr))
            .and_then(|c| c.token.clone())
    });
    (addr, token)
}

fn same_server(a: &str, b: &str) -> bool {
    let strip = |s: &str| {
        s.trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string()
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_then_the_context_and_its_token_only_for_its_server() {
        let mut cfg = CliConfig::default();
        cfg.set_current(CliContext {
            name: "dev".into(),
            server: "127.0.0.1:7400".into(),
            token: Some("t1".into()),
        });
        assert_eq!(
            resolve(None, None, &cfg, "d:1"),
            ("127.0.0.1:7400".into(), Some("t1".into()))
        );
        assert_eq!(
            resolve(Some("http://127.0.0.1:7400/"), None, &cfg, "d:1").1,
            Some("t1".into())
        );
        assert_eq!(resolve(Some("other:1"), None, &cfg, "d:1").1, None);
        assert_eq!(
            resolve(Some("other:1"), Some("t2"), &cfg, "d:1"),
            ("other:1".into(), Some("t2".into()))
        );
        assert_eq!(
            resolve(None, None, &CliConfig::default(), "d:1"),
            ("d:1".into(), None)
        );
    }

    #[test]
    fn saves_and_loads_with_owner_only_permissions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("tideway/config");
        assert_eq!(
            CliConfig::load(&p).expect("absent is empty"),
            CliConfig::default()
        );
        let mut cfg = CliConfig::default();
        cfg.set_current(CliContext {
            name: "dev".into(),
            server: "127.0.0.1:7400".into(),
            token: Some("t".into()),
        });
        cfg.save(&p).expect("save");
        assert_eq!(CliConfig::load(&p).expect("load"), cfg);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
