//! The node's accept loop, for the public API and the peer plane, plain or TLS.
//!
//! `axum::serve` sets no timer on hyper, so a client that opens a connection and never
//! finishes its request head holds the connection (and its task) for as long as it likes:
//! fifty such connections stayed open for a minute. This loop serves each connection with
//! hyper's HTTP/1 builder and a header-read deadline, and caps the connections one remote
//! address may hold that are not serving a request (still sending their head, or idle
//! between requests), so that a single host cannot fill the node's file descriptors with
//! slow connections while real clients, peers and agents keep theirs.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tower::ServiceExt;

/// How long a client may take to send a request's head (and how long a keep-alive
/// connection may sit idle between requests): long enough for any real client on a slow
/// link, short enough that slow connections do not pile up.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;

/// How many connections one remote IP address may hold that are not serving a request. A
/// node's peers, agents and clients each keep a handful; a load balancer or NAT in front of
/// many clients may need more (raise it, or 0 for no cap).
pub const DEFAULT_MAX_IDLE_CONNECTIONS_PER_IP: usize = 256;

/// The bounds every connection of a listener is served with.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// The header-read deadline; `None` for none.
    pub header_read_timeout: Option<Duration>,
    /// Connections per remote IP not serving a request; 0 for no cap.
    pub max_idle_per_ip: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Some(Duration::from_millis(DEFAULT_HEADER_READ_TIMEOUT_MS)),
            max_idle_per_ip: DEFAULT_MAX_IDLE_CONNECTIONS_PER_IP,
        }
    }
}

/// Per remote IP, the connections that are not serving a request.
#[derive(Debug, Default)]
struct Idle {
    cap: usize,
    per_ip: Mutex<HashMap<IpAddr, IpCount>>,
}

#[derive(Debug, Default)]
struct IpCount {
    idle: usize,
    /// Refusing since the count last reached the cap: the refusals are logged once per
    /// episode, not once per connection.
    refusing: bool,
}

impl Idle {
    fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap,
            per_ip: Mutex::new(HashMap::new()),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<IpAddr, IpCount>) -> T) -> T {
        // The map only holds counts: a panic elsewhere cannot leave it half-written.
        let mut m = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut m)
    }

    /// Admits a new connection from `ip` (idle until its first request is read), or `None`
    /// when that address already holds the cap.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Arc<Conn>> {
        let admitted = self.with(|m| {
            let c = m.entry(ip).or_default();
            if self.cap > 0 && c.idle >= self.cap {
                if !c.refusing {
                    c.refusing = true;
                    tracing::warn!(
                        %ip,
                        cap = self.cap,
                        "refusing connections: this address holds the most idle or \
                         unfinished connections allowed (--max-idle-connections-per-ip)"
                    );
                }
                return false;
            }
            c.idle += 1;
            true
        });
        admitted.then(|| {
            Arc::new(Conn {
                idle: self.clone(),
                ip,
                in_flight: AtomicUsize::new(0),
            })
        })
    }

    fn add(&self, ip: IpAddr, delta: isize) {
        self.with(|m| {
            let c = m.entry(ip).or_default();
            c.idle = c.idle.saturating_add_signed(delta);
            if c.idle < self.cap {
                c.refusing = false;
            }
            if c.idle == 0 {
                m.remove(&ip);
            }
        });
    }

    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> usize {
        self.with(|m| m.get(&ip).map_or(0, |c| c.idle))
    }
}

/// One admitted connection; counted idle while no request is being served. Dropped (after
/// the connection and every request on it ended) it leaves the count.
#[derive(Debug)]
struct Conn {
    idle: Arc<Idle>,
    ip: IpAddr,
    in_flight: AtomicUsize,
}

impl Conn {
    /// A request's head was read: the connection is busy until the guard drops.
    fn busy(self: &Arc<Self>) -> Busy {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.idle.add(self.ip, -1);
        }
        Busy(self.clone())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Every `Busy` holds the connection, so none is left: it was counted idle.
        self.idle.add(self.ip, -1);
    }
}

struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.add(self.0.ip, 1);
        }
    }
}

/// Serves `app` on `tcp` until the task is aborted, over TLS when an acceptor is given.
pub async fn serve(
    tcp: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    limits: ConnLimits,
) {
    let idle = Idle::new(limits.max_idle_per_ip);
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait, as axum's own loop does.
                tracing::warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Counted from the accept, so the cap covers connections still in their TLS
        // handshake too.
        let Some(conn) = idle.admit(peer.ip()) else {
            drop(stream);
            continue;
        };
        let app = app.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, peer, app, conn, limits).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(
                        crate::tls::HANDSHAKE_TIMEOUT,
                        acceptor.accept(stream),
                    );
                    match handshake.await {
                        Ok(Ok(s)) => serve_connection(s, peer, app, conn, limits).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Serves one connection: HTTP/1.1 with upgrades (the Raft append stream), the header-read
/// deadline on every request head, including the wait for the next one on a kept-alive
/// connection.
async fn serve_connection<S>(
    io: S,
    peer: SocketAddr,
    app: Router,
    conn: Arc<Conn>,
    limits: ConnLimits,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let busy = conn.busy();
        let app = app.clone();
        async move {
            let resp = app.oneshot(req.map(axum::body::Body::new)).await;
            drop(busy);
            resp
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    if let Err(e) = builder
        .serve_connection(TokioIo::new(io), svc)
        .with_upgrades()
        .await
    {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn an_address_holds_at_most_the_cap_of_idle_connections() {
        let idle = Idle::new(2);
        let a1 = idle.admit(A).expect("first");
        let a2 = idle.admit(A).expect("second");
        assert!(idle.admit(A).is_none(), "the third idle one is refused");
        // Another address has a cap of its own.
        let b1 = idle.admit(B).expect("other address");
        // A connection serving a request no longer counts: room for one more.
        let busy = a1.busy();
        assert_eq!(idle.count(A), 1);
        let a3 = idle.admit(A).expect("room while a1 is busy");
        assert!(idle.admit(A).is_none());
        // a1 idle again: back at the cap (3 idle, over it, until one closes).
        drop(busy);
        assert_eq!(idle.count(A), 3);
        assert!(idle.admit(A).is_none());
        drop((a2, a3));
        assert_eq!(idle.count(A), 1);
        assert!(idle.admit(A).is_some(), "closing frees the slots");
        drop((a1, b1));
        assert_eq!(idle.count(A), 0);
        assert_eq!(idle.count(B), 0);
        assert!(
            idle.with(|m| m.is_empty()),
            "no entry left for gone addresses"
        );
    }

    #[test]
    fn a_connection_busy_when_it_closes_leaves_no_count() {
        let idle = Idle::new(1);
        let c = idle.admit(A).expect("admitted");
        let busy = c.busy();
        drop(c);
        assert_eq!(idle.count(A), 0);
        drop(busy);
        assert_eq!(idle.count(A), 0);
        assert!(idle.admit(A).is_some());
    }

    #[test]
    fn zero_means_no_cap() {
        let idle = Idle::new(0);
        let conns: Vec<_> = (0..1000).filter_map(|_| idle.admit(A)).collect();
        assert_eq!(conns.len(), 1000);
    }
}
