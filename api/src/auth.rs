//! Who a request comes from: the token file's format and the authenticated principal.
//!
//! The token file holds only SHA-256 digests of bearer tokens, so a copy of it (a backup, a
//! config repository) grants nothing.

use serde::{Deserialize, Serialize};

/// `tideway server --auth-tokens FILE`: YAML or JSON.
///
/// ```yaml
/// tokens:
/// - subject: alice
///   groups: [ml-research]
///   sha256: 3b0c...   # hex SHA-256 of the token
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenFile {
    /// One entry per token.
    pub tokens: Vec<TokenEntry>,
}

/// One token's owner, by the token's digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenEntry {
    /// Who the token authenticates (`agent:CLUSTER` for a member agent).
    pub subject: String,
    /// The groups that give the subject its roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Lowercase hex SHA-256 of the token.
    pub sha256: String,
}

/// Why a token file is refused, with the entry at fault.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// Not YAML of the expected shape.
    #[error("not a token file: {0}")]
    Parse(String),
    /// An entry's digest is not SHA-256 in hex.
    #[error("tokens[{index}].sha256: must be 64 hex digits")]
    BadDigest {
        /// The entry.
        index: usize,
    },
    /// An entry names no subject.
    #[error("tokens[{index}].subject: must not be empty")]
    NoSubject {
        /// The entry.
        index: usize,
    },
}

impl TokenFile {
    /// Parses and checks a token file (YAML, of which JSON is a subset).
    pub fn parse(text: &str) -> Result<Self, TokenFileError> {
        let f: TokenFile =
            serde_saphyr::from_str(text).map_err(|e| TokenFileError::Parse(e.to_string()))?;
        for (index, t) in f.tokens.iter().enumerate() {
            if t.subject.trim().is_empty() {
                return Err(TokenFileError::NoSubject { index });
            }
            if t.sha256.len() != 64 || !t.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(TokenFileError::BadDigest { index });
            }
        }
        Ok(f)
    }
}

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    /// The token's subject.
    pub subject: String,
    /// The token's groups.
    #[serde(default)]
    pub groups: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_yaml_and_names_the_bad_entry() {
        let d = "a".repeat(64);
        let f = TokenFile::parse(&format!(
            "tokens:\n- subject: alice\n  groups: [ml]\n  sha256: {d}\n"
        ))
        .expect("valid");
        assert_eq!(f.tokens[0].groups, vec!["ml".to_string()]);
        let e = TokenFile::parse(&format!(
            "tokens:\n- {{subject: a, sha256: {d}}}\n- {{subject: b, sha256: xyz}}\n"
        ))
        .expect_err("bad digest");
        assert_eq!(e.to_string(), "tokens[1].sha256: must be 64 hex digits");
        assert!(TokenFile::parse("tokens: [{subject: a, sha: b}]").is_err());
    }
}
