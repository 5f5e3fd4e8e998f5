//! `tideway-testkit`: the test kit's tools from the command line, for benchmark scripts
//! (`deploy/bench/wan.sh`) that run processes the e2e harness does not start.
//!
//! `tideway-testkit wan-proxy --listen A --to B --delay-ms N [--jitter-ms J] [--rate-kbps R]`
//! forwards every connection to A on to B, each direction delayed by N ms (a round trip
//! through it costs 2N), until killed.

use std::time::Duration;

use anyhow::{Context, bail};
use tideway_testkit::wan::{Link, WanProxy};

const USAGE: &str = "usage: tideway-testkit wan-proxy --listen ADDR --to ADDR --delay-ms N \
                     [--jitter-ms J] [--rate-kbps R]";

/// The proxy's settings from its flags.
fn parse(args: &[String]) -> anyhow::Result<(String, String, Link)> {
    let (mut listen, mut to) = (None, None);
    let mut link = Link::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        let ms = |v: &str| -> anyhow::Result<u64> {
            v.parse()
                .with_context(|| format!("{flag}: `{v}` is not a whole number"))
        };
        match flag.as_str() {
            "--listen" => listen = Some(value.clone()),
            "--to" => to = Some(value.clone()),
            "--delay-ms" => link.delay = Duration::from_millis(ms(value)?),
            "--jitter-ms" => link.jitter = Duration::from_millis(ms(value)?),
            // Kilobits per second, as link speeds are quoted.
            "--rate-kbps" => link.rate_bytes_per_sec = Some(ms(value)?.saturating_mul(125)),
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    let listen = listen.with_context(|| format!("--listen is required\n{USAGE}"))?;
    let to = to.with_context(|| format!("--to is required\n{USAGE}"))?;
    Ok((listen, to, link))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("wan-proxy") => {
            let (listen, to, link) = parse(&args[1..])?;
            let proxy = WanProxy::start(&listen, &to, link)
                .await
                .with_context(|| format!("listening on {listen}"))?;
            eprintln!(
                "wan-proxy {} -> {to}: {:?} each way, jitter {:?}, cap {:?} B/s",
                proxy.addr, link.delay, link.jitter, link.rate_bytes_per_sec
            );
            tokio::signal::ctrl_c().await?;
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_make_the_link_and_bad_ones_say_which() {
        let (l, t, link) = parse(&args(
            "--listen 127.0.0.1:1 --to 127.0.0.1:2 --delay-ms 25 --jitter-ms 3 --rate-kbps 8",
        ))
        .expect("parse");
        assert_eq!((l.as_str(), t.as_str()), ("127.0.0.1:1", "127.0.0.1:2"));
        assert_eq!(link.delay, Duration::from_millis(25));
        assert_eq!(link.jitter, Duration::from_millis(3));
        assert_eq!(link.rate_bytes_per_sec, Some(1000));
        let e = parse(&args("--listen a --to b --delay-ms x")).expect_err("bad");
        assert!(e.to_string().contains("--delay-ms"), "{e}");
        let e = parse(&args("--to b")).expect_err("no listen");
        assert!(e.to_string().contains("--listen"), "{e}");
    }
}
