//! The CLI's exit codes, so a script can tell "not there" from "not allowed" from "try
//! again" without parsing messages:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | any other error (bad input, conflict, a refused document) |
//! | 2 | wrong usage (clap's own code for an unknown flag or a missing argument) |
//! | 3 | not found (no such workload, member or queue) |
//! | 4 | forbidden or unauthenticated (HTTP 401 or 403) |
//! | 5 | unavailable (no node reachable, no leader, HTTP 503) |

use tideway_api::client::ClientError;

pub const NOT_FOUND: i32 = 3;
pub const FORBIDDEN: i32 = 4;
pub const UNAVAILABLE: i32 = 5;
pub const OTHER: i32 = 1;

/// A name the CLI looked up and did not find (e.g. `--queue` of an unknown queue).
#[derive(Debug, thiserror::Error)]
#[error("{kind} '{name}' not found{hint}")]
pub struct NotFound {
    pub kind: &'static str,
    pub name: String,
    /// What exists instead, if useful (", known: a, b").
    pub hint: String,
}

/// The exit code of an error: the first client error or [`NotFound`] in its chain decides.
pub fn of(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if cause.downcast_ref::<NotFound>().is_some() {
            return NOT_FOUND;
        }
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            return match c {
                ClientError::Transport { .. } => UNAVAILABLE,
                ClientError::Problem(p) => match p.status {
                    404 => NOT_FOUND,
                    401 | 403 => FORBIDDEN,
                    503 => UNAVAILABLE,
                    _ => OTHER,
                },
                ClientError::Unexpected { status: 503, .. } => UNAVAILABLE,
                _ => OTHER,
            };
        }
    }
    OTHER
}

#[cfg(test)]
mod tests {
    use super::*;
    use tideway_api::Problem;

    fn problem(status: u16) -> anyhow::Error {
        let p: Problem = serde_json::from_value(serde_json::json!({
            "type": "https://tideway.dev/problems/x",
            "title": "x",
            "status": status,
        }))
        .unwrap();
        ClientError::Problem(Box::new(p)).into()
    }

    #[test]
    fn statuses_map_to_distinct_codes() {
        assert_eq!(of(&problem(404)), NOT_FOUND);
        assert_eq!(of(&problem(403)), FORBIDDEN);
        assert_eq!(of(&problem(401)), FORBIDDEN);
        assert_eq!(of(&problem(503)), UNAVAILABLE);
        assert_eq!(of(&problem(400)), OTHER);
        assert_eq!(of(&anyhow::anyhow!("plain")), OTHER);
        let nf: anyhow::Error = NotFound {
            kind: "queue",
            name: "q".into(),
            hint: String::new(),
        }
        .into();
        assert_eq!(of(&nf.context("listing")), NOT_FOUND);
    }
}
