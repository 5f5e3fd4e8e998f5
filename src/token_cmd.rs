//! `tideway token create`: a bearer token and its line of the `--auth-tokens` file, so that
//! nobody has to make a digest by hand (and get a trailing newline into it).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use tideway_api::auth::{TokenEntry, TokenFile};
use tideway_federation::server::auth::{generate_token, hash_token};

#[derive(Subcommand, Debug)]
pub enum TokenCmd {
    /// Make a new bearer token: print it once, with the entry for the `--auth-tokens` file
    /// (the file holds only the token's SHA-256, so a copy of it grants nothing).
    Create(CreateArgs),
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// Who the token authenticates (`agent:CLUSTER` for a member cluster's agent).
    #[arg(long)]
    pub subject: String,
    /// A group that gives the subject its roles (`system:admins`, `queue:NAME`, ...);
    /// repeat for several.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// Append the entry to this `--auth-tokens` file (created when missing); the server
    /// reads it when it starts.
    #[arg(long)]
    pub file: Option<PathBuf>,
}

pub fn run(cmd: TokenCmd) -> anyhow::Result<()> {
    match cmd {
        TokenCmd::Create(a) => create(a),
    }
}

fn create(a: CreateArgs) -> anyhow::Result<()> {
    let subject = a.subject.trim();
    if subject.is_empty() {
        anyhow::bail!("--subject: must not be empty");
    }
    let token = generate_token().map_err(|_| anyhow::anyhow!("no randomness for a token"))?;
    let line = entry_line(&TokenEntry {
        subject: subject.to_owned(),
        groups: a.groups,
        sha256: hash_token(&token),
    })?;
    match &a.file {
        Some(path) => {
            append(path, &line)?;
            println!("{token}");
            println!(
                "# The token above is shown once: the server keeps only its digest, now \
                 appended to {} as",
                path.display()
            );
            println!("{line}");
            println!("# A server reads the file when it starts: restart it to accept the token.");
        }
        None => {
            println!("{token}");
            println!(
                "# The token above is shown once: the server keeps only its digest. Add this \
                 line under `tokens:` in the --auth-tokens file:"
            );
            println!("{line}");
        }
    }
    Ok(())
}

/// The entry as one YAML line: a flow mapping in JSON's syntax, so that any subject or group
/// (quotes, colons, `#`) is quoted correctly.
fn entry_line(e: &TokenEntry) -> anyhow::Result<String> {
    Ok(format!("- {}", serde_json::to_string(e)?))
}

/// Appends `line` to the token file at `path` (a new file starts with `tokens:`), refusing
/// to write a file the server would then refuse to read.
fn append(path: &Path, line: &str) -> anyhow::Result<()> {
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let new = appended(&old, line);
    TokenFile::parse(&new).map_err(|e| {
        anyhow::anyhow!(
            "{}: the entry cannot be appended to it ({e}); add this line under `tokens:` \
             yourself:\n{line}",
            path.display()
        )
    })?;
    std::fs::write(path, new).with_context(|| format!("writing {}", path.display()))
}

fn appended(old: &str, line: &str) -> String {
    let mut new = if old.trim().is_empty() {
        "tokens:\n".to_owned()
    } else {
        old.to_owned()
    };
    if !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(line);
    new.push('\n');
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_parses_as_a_token_file_entry_whatever_the_names() {
        let e = TokenEntry {
            subject: "a: b # c".into(),
            groups: vec!["queue:research".into(), "x\"y".into()],
            sha256: hash_token("tw_secret"),
        };
        let line = entry_line(&e).expect("line");
        let file = appended("", &line);
        let parsed = TokenFile::parse(&file).expect("parses");
        assert_eq!(parsed.tokens, vec![e.clone()]);
        // Appended to a file with entries already, without a final newline.
        let two = appended(file.trim_end(), &line);
        assert_eq!(TokenFile::parse(&two).expect("parses").tokens.len(), 2);
    }

    #[test]
    fn a_file_the_entry_cannot_join_is_left_alone() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tokens.yaml");
        let flow = format!("tokens: [{{subject: a, sha256: {}}}]", "a".repeat(64));
        std::fs::write(&path, &flow).expect("write");
        let err = append(&path, "- {\"subject\":\"b\",\"sha256\":\"x\"}").expect_err("refused");
        assert!(err.to_string().contains("add this line"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), flow);
    }
}
