//! A TCP proxy that makes loopback look like a wide-area link: each direction of each
//! connection is delayed by a one-way delay (plus optional jitter) and may be held to a
//! bandwidth cap, so that tests and benchmarks can put Tideway's peer plane or its agents
//! "in another region" without leaving 127.0.0.1.
//!
//! Why a proxy of our own rather than `tc netem`: netem needs root and a network namespace,
//! neither of which a CI runner or a shared development machine gives; a proxy in the test
//! process (or the `tideway-testkit wan-proxy` command) needs neither.
//!
//! How a chunk is timed: the reader stamps each chunk it reads with its arrival time, and the
//! chunk is written out at `arrival + delay + jitter` (after the time the capped link needs to
//! carry it), never earlier than the chunk before it, so the byte order is kept. Delays are
//! not added one chunk after another: a stream of chunks arriving 1 ms apart leaves 1 ms
//! apart, `delay` later. A new connection's first bytes toward the server also wait for the
//! handshake a real link would cost (one round trip), since the proxy accepts at once on
//! loopback.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One direction of a link: what each chunk crossing it suffers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Link {
    /// One-way delay: a round trip through the proxy costs twice this.
    pub delay: Duration,
    /// Each chunk is delayed by up to this much more, uniformly (order is still kept).
    pub jitter: Duration,
    /// Bytes per second each direction carries (shared by all the proxy's connections);
    /// `None` for no cap.
    pub rate_bytes_per_sec: Option<u64>,
}

impl Link {
    /// A link whose round trip is `rtt` (each direction delayed by half of it).
    pub fn with_rtt(rtt: Duration) -> Self {
        Self {
            delay: rtt / 2,
            ..Self::default()
        }
    }
}

/// How many bytes a reader takes at once: small enough under a rate cap for the cap to be
/// smooth (about 10 ms of the link's capacity), otherwise a socket buffer's worth.
fn chunk_size(link: &Link) -> usize {
    const MAX: usize = 64 * 1024;
    match link.rate_bytes_per_sec {
        Some(r) => usize::try_from(r / 100).unwrap_or(MAX).clamp(512, MAX),
        None => MAX,
    }
}

/// A running proxy: listens on [`WanProxy::addr`] and forwards every connection to its
/// upstream through the link. Stopped (its listener and every connection) when dropped.
pub struct WanProxy {
    pub addr: String,
    accept: JoinHandle<()>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl WanProxy {
    /// Listens on `listen` (e.g. `127.0.0.1:0`) and forwards to `upstream`.
    pub async fn start(listen: &str, upstream: &str, link: Link) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?.to_string();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        // The link's capacity is shared by all connections, one clock per direction.
        let busy = (Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None)));
        let upstream = upstream.to_string();
        let kept = conns.clone();
        let accept = tokio::spawn(async move {
            let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(std::process::id());
            while let Ok((down, _)) = listener.accept().await {
                seed = seed.wrapping_add(0x2545_f491_4f6c_dd1d);
                let task = tokio::spawn(relay(down, upstream.clone(), link, busy.clone(), seed));
                if let Ok(mut c) = kept.lock() {
                    c.retain(|t| !t.is_finished());
                    c.push(task);
                }
            }
        });
        Ok(Self {
            addr,
            accept,
            conns,
        })
    }

    /// Starts a proxy on a free loopback port.
    pub async fn to(upstream: &str, link: Link) -> std::io::Result<Self> {
        Self::start("127.0.0.1:0", upstream, link).await
    }
}

impl Drop for WanProxy {
    fn drop(&mut self) {
        self.accept.abort();
        if let Ok(c) = self.conns.lock() {
            for t in c.iter() {
                t.abort();
            }
        }
    }
}

/// When the shared link is next free to start sending, per direction.
type Busy = Arc<Mutex<Option<Instant>>>;

/// Serves one accepted connection: connects upstream and relays both ways, each direction
/// delayed on its own. A failed upstream connect closes the accepted connection.
async fn relay(down: TcpStream, upstream: String, link: Link, busy: (Busy, Busy), seed: u64) {
    let accepted = Instant::now();
    let Ok(up) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = down.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let (down_r, down_w) = down.into_split();
    let (up_r, up_w) = up.into_split();
    // The client's first bytes could leave only after the handshake's round trip.
    let handshake = accepted + link.delay * 2;
    tokio::join!(
        direction(down_r, up_w, link, busy.0, handshake, seed),
        direction(
            up_r,
            down_w,
            link,
            busy.1,
            accepted,
            seed.rotate_left(17) ^ 1
        ),
    );
}

enum Chunk {
    Data(Vec<u8>),
    /// The reader saw the end (or an error): shut the writer's side down.
    End,
}

/// One direction: a reader that stamps each chunk with the time it is due, and a writer that
/// writes it then. The queue between them is bounded, so a slow receiver still pushes back.
async fn direction(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    link: Link,
    busy: Busy,
    not_before: Instant,
    mut seed: u64,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Chunk)>(1024);
    let size = chunk_size(&link);
    let reader = async move {
        let mut last_due = not_before;
        let mut buf = vec![0u8; size];
        loop {
            let n = from.read(&mut buf).await.unwrap_or(0);
            let arrival = Instant::now().max(not_before);
            if n == 0 {
                let due = (arrival + link.delay).max(last_due);
                let _ = tx.send((due, Chunk::End)).await;
                return;
            }
            let sent = match link.rate_bytes_per_sec {
                Some(rate) if rate > 0 => {
                    let carry = Duration::from_secs_f64(n as f64 / rate as f64);
                    let Ok(mut free) = busy.lock() else { return };
                    let start = free.map_or(arrival, |f| f.max(arrival));
                    *free = Some(start + carry);
                    start + carry
                }
                _ => arrival,
            };
            let due = (sent + link.delay + jitter(&mut seed, link.jitter)).max(last_due);
            last_due = due;
            if tx
                .send((due, Chunk::Data(buf[..n].to_vec())))
                .await
                .is_err()
            {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            match chunk {
                Chunk::Data(b) => {
                    if to.write_all(&b).await.is_err() {
                        return;
                    }
                }
                Chunk::End => {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(reader, writer);
}

/// A uniform delay in `[0, max]` from a xorshift generator (no need for a real one here).
fn jitter(seed: &mut u64, max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let frac = (*seed >> 11) as f64 / (1u64 << 53) as f64;
    max.mul_f64(frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that echoes every byte back.
    async fn echo_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_round_trip_costs_at_least_twice_the_delay_and_order_is_kept() {
        let upstream = echo_server().await;
        let delay = Duration::from_millis(40);
        let proxy = WanProxy::to(
            &upstream,
            Link {
                delay,
                jitter: Duration::from_millis(15),
                rate_bytes_per_sec: None,
            },
        )
        .await
        .expect("proxy");
        let mut s = TcpStream::connect(&proxy.addr).await.expect("connect");
        s.set_nodelay(true).expect("nodelay");
        // Past the handshake's extra round trip: each round trip now costs 2×delay.
        let mut one = [0u8; 1];
        s.write_all(b"x").await.expect("write");
        s.read_exact(&mut one).await.expect("read");
        for i in 0..5u8 {
            let t = Instant::now();
            s.write_all(&[i]).await.expect("write");
            s.read_exact(&mut one).await.expect("read");
            assert_eq!(one[0], i);
            assert!(
                t.elapsed() >= delay * 2,
                "round trip took {:?}",
                t.elapsed()
            );
        }
        // Many small writes with jitter on: the bytes come back complete and in order.
        let sent: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = s.into_split();
        let writer = tokio::spawn(async move {
            for c in sent.chunks(100) {
                w.write_all(c).await.expect("write");
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            w.shutdown().await.expect("shutdown");
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.expect("read to end");
        writer.await.expect("writer");
        let want: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes reordered or changed");
    }

    #[tokio::test]
    async fn chunks_in_flight_are_delayed_together_not_one_after_another() {
        let upstream = echo_server().await;
        let delay = Duration::from_millis(50);
        let proxy = WanProxy::to(&upstream, Link::with_rtt(delay * 2))
            .await
            .expect("proxy");
        let mut s = TcpStream::connect(&proxy.addr).await.expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let mut one = [0u8; 1];
        s.write_all(b"x").await.expect("write");
        s.read_exact(&mut one).await.expect("read");
        // Twenty one-byte writes 2 ms apart: if each waited for the one before it, the last
        // would be back after 20 round trips (2 s); delayed from its arrival it is back after
        // about one round trip plus the 40 ms of sending.
        let t = Instant::now();
        let (mut r, mut w) = s.into_split();
        tokio::spawn(async move {
            for i in 0..20u8 {
                w.write_all(&[i]).await.expect("write");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let mut got = [0u8; 20];
        r.read_exact(&mut got).await.expect("read");
        let took = t.elapsed();
        assert_eq!(got.to_vec(), (0..20u8).collect::<Vec<_>>());
        assert!(took >= delay * 2, "{took:?}");
        assert!(took < Duration::from_millis(900), "{took:?}");
    }

    #[tokio::test]
    async fn the_bandwidth_cap_is_respected_roughly() {
        let upstream = echo_server().await;
        let rate = 200_000u64; // bytes per second each way
        let proxy = WanProxy::to(
            &upstream,
            Link {
                delay: Duration::from_millis(1),
                jitter: Duration::ZERO,
                rate_bytes_per_sec: Some(rate),
            },
        )
        .await
        .expect("proxy");
        let s = TcpStream::connect(&proxy.addr).await.expect("connect");
        let (mut r, mut w) = s.into_split();
        let n = 100_000usize; // half a second of the link each way
        let t = Instant::now();
        tokio::spawn(async move {
            w.write_all(&vec![7u8; n]).await.expect("write");
        });
        let mut got = vec![0u8; n];
        r.read_exact(&mut got).await.expect("read");
        let took = t.elapsed();
        // Uncapped this takes a millisecond or two; capped, at least n/rate (0.5 s); the
        // upper bound is loose for a loaded machine.
        assert!(took >= Duration::from_millis(450), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert!(got.iter().all(|b| *b == 7));
    }

    #[tokio::test]
    async fn an_upstream_that_closes_closes_the_client_side_after_the_delay() {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let upstream = l.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            if let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        });
        let delay = Duration::from_millis(30);
        let proxy = WanProxy::to(&upstream, Link::with_rtt(delay * 2))
            .await
            .expect("proxy");
        let mut s = TcpStream::connect(&proxy.addr).await.expect("connect");
        let t = Instant::now();
        let mut buf = Vec::new();
        let n = s.read_to_end(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0);
        assert!(t.elapsed() >= delay, "{:?}", t.elapsed());
    }
}
