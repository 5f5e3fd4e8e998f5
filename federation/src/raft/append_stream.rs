//! The append stream: a leader's appends to one follower as length-prefixed frames on one
//! connection, instead of one HTTP POST each.
//!
//! Why: on the two-core machine the three nodes and the load generator share, every CPU
//! cycle a node spends counts against submissions. A call-graph profile of a leader under
//! `wrk -t2 -c64` put a large share of its samples in the HTTP client (reqwest and hyper: a
//! URL parsed, a header map built, a pooled connection checked out and back, HTTP/1 framing)
//! for the append RPCs alone (measured: docs/benchmarks/submissions.md), and each follower
//! pays the server's half of it (parsing, routing, the middleware) for every append. The
//! frame carries the same MessagePack bytes as the POST body; only the envelope changes.
//!
//! How: the client opens the stream with an HTTP upgrade on the peer port (`GET` [`PATH`]
//! with `Upgrade:` [`PROTOCOL`] and the cluster secret), so TLS, the secret and
//! `--peer-listen` apply to it exactly as to the POSTs. After `101 Switching Protocols` each
//! append is one frame each way, in order: a 4-byte big-endian length, then the bytes. One
//! request is in flight per stream (openraft sends a follower's appends one after the other
//! on each of its clients), so answers need no ids.
//!
//! A peer that answers the upgrade 404 or 405 is a node from before the stream existed: the
//! client falls back to POSTs for that peer, so a rolling upgrade keeps replicating.

use std::future::Future;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::peer_plane::PeerPlane;

/// Where a peer serves the stream's upgrade.
pub const PATH: &str = "/raft/append-stream";
/// The `Upgrade` token; a new framing would take a new token.
pub const PROTOCOL: &str = "tideway-append/1";
/// The largest frame either side accepts: the limit the POST route puts on a body.
pub const MAX_FRAME: usize = 1 << 30;
/// Bytes of a frame's length prefix.
const PREFIX: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("append stream: {0}")]
    Io(#[from] std::io::Error),
    #[error("append stream: a frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    #[error("append stream: opening it: {0}")]
    Open(#[source] reqwest::Error),
    #[error("append stream: the peer answered the upgrade with HTTP {0}")]
    Refused(u16),
}

impl StreamError {
    /// The peer could not be reached at all (as against a connection that failed later).
    pub fn is_connect(&self) -> bool {
        matches!(self, StreamError::Open(e) if e.is_connect())
    }
}

/// A frame for `body`, written by `fill` after the length prefix, so that a large body (an
/// append's entries) is not copied once more to put four bytes in front of it.
pub fn frame<E>(
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<Vec<u8>, FrameError<E>> {
    let mut buf = vec![0u8; PREFIX];
    fill(&mut buf).map_err(FrameError::Body)?;
    let len = buf.len() - PREFIX;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    // `len` is at most MAX_FRAME, which fits in four bytes.
    let prefix = u32::try_from(len).map_err(|_| FrameError::TooLarge(len))?;
    buf[..PREFIX].copy_from_slice(&prefix.to_be_bytes());
    Ok(buf)
}

/// Why a frame could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FrameError<E> {
    #[error("{0}")]
    Body(E),
    #[error("a frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
}

/// The body of a frame built by [`frame`].
pub fn body(frame: &[u8]) -> &[u8] {
    frame.get(PREFIX..).unwrap_or_default()
}

/// Reads one frame's body; `None` at a clean end of the stream (before a frame began).
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Vec<u8>>, StreamError> {
    let mut prefix = [0u8; PREFIX];
    let mut got = 0;
    while got < PREFIX {
        let n = r.read(&mut prefix[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        got += n;
    }
    let len = usize::try_from(u32::from_be_bytes(prefix)).map_err(|_| StreamError::TooLarge(0))?;
    if len > MAX_FRAME {
        return Err(StreamError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Answers a request for a stream: `101 Switching Protocols`, and the upgraded connection
/// served by [`serve`] on a task of its own. A request without the stream's `Upgrade`
/// header is refused (400), so that a plain GET cannot hold a connection open.
pub fn accept<F, Fut>(req: axum::extract::Request, answer: F) -> axum::response::Response
where
    F: Fn(Vec<u8>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Vec<u8>, String>> + Send,
{
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let asks = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes() == PROTOCOL.as_bytes());
    if !asks {
        return (
            StatusCode::BAD_REQUEST,
            format!("an append stream needs `Upgrade: {PROTOCOL}`"),
        )
            .into_response();
    }
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(conn) => serve(hyper_util::rt::TokioIo::new(conn), answer).await,
            Err(e) => tracing::debug!("append stream: the upgrade failed: {e}"),
        }
    });
    axum::response::Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, PROTOCOL)
        .body(axum::body::Body::empty())
        .unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
}

/// Serves one stream until the peer closes it or sends what is not a frame: each frame's
/// body goes to `answer`, whose bytes go back as the next frame. An `answer` error (bytes
/// that are not an append request) closes the stream: the leader's client then sees the
/// connection end, as it would see a 400 to a POST, and opens a new one.
pub async fn serve<S, F, Fut>(io: S, answer: F)
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Fn(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<Vec<u8>, String>>,
{
    let mut io = BufReader::new(io);
    loop {
        let body = match read_frame(&mut io).await {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("{e}; closing the stream");
                return;
            }
        };
        let reply = match answer(body).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "append stream: a frame that is not an append request ({e}); closing the stream"
                );
                return;
            }
        };
        let framed = match frame(|b| {
            b.extend_from_slice(&reply);
            Ok::<_, std::convert::Infallible>(())
        }) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("append stream: {e}; closing the stream");
                return;
            }
        };
        if let Err(e) = write_all(&mut io, &framed).await {
            tracing::debug!("append stream: {e}; closing the stream");
            return;
        }
    }
}

async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(bytes).await?;
    w.flush().await
}

/// The leader's end of one stream.
pub struct AppendStream<S = reqwest::Upgraded> {
    io: BufReader<S>,
}

/// What asking a peer for a stream gives.
pub enum Opened {
    Stream(AppendStream),
    /// The peer does not serve streams (a node from before them): use POSTs.
    Unsupported,
}

/// Asks the peer at `addr` for an append stream.
pub async fn open(
    http: &reqwest::Client,
    plane: &PeerPlane,
    addr: &str,
) -> Result<Opened, StreamError> {
    use reqwest::StatusCode;
    use reqwest::header::{CONNECTION, UPGRADE};
    let resp = plane
        .authorize(http.get(plane.url(addr, PATH)))
        .header(CONNECTION, "upgrade")
        .header(UPGRADE, PROTOCOL)
        .send()
        .await
        .map_err(StreamError::Open)?;
    match resp.status() {
        StatusCode::SWITCHING_PROTOCOLS => {
            let io = resp.upgrade().await.map_err(StreamError::Open)?;
            Ok(Opened::Stream(AppendStream::new(io)))
        }
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => Ok(Opened::Unsupported),
        s => Err(StreamError::Refused(s.as_u16())),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AppendStream<S> {
    pub fn new(io: S) -> Self {
        Self {
            io: BufReader::new(io),
        }
    }

    /// Sends one frame (built by [`frame`]) and waits for the answer's body. A stream whose
    /// call failed, or was dropped unfinished, must not be used again: a late answer would
    /// be taken for the next request's.
    pub async fn call(&mut self, frame: &[u8]) -> Result<Vec<u8>, StreamError> {
        write_all(&mut self.io, frame).await?;
        match read_frame(&mut self.io).await? {
            Some(body) => Ok(body),
            None => Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(body: &[u8]) -> Vec<u8> {
        frame(|b| {
            b.extend_from_slice(body);
            Ok::<_, std::convert::Infallible>(())
        })
        .expect("frame")
    }

    #[test]
    fn a_frame_is_its_length_then_its_body() {
        let f = framed(b"hello");
        assert_eq!(f, [0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o']);
        assert_eq!(body(&f), b"hello");
        assert_eq!(framed(b""), [0, 0, 0, 0]);
        // The body's own error comes back as itself.
        let e = frame(|_| Err::<(), _>("no")).expect_err("fails");
        assert!(matches!(e, FrameError::Body("no")));
    }

    #[tokio::test]
    async fn calls_get_their_own_answers_in_order_and_the_end_is_clean() {
        let (client, server) = tokio::io::duplex(64);
        let served = tokio::spawn(serve(server, |body: Vec<u8>| async move {
            // Echo the body reversed, so an answer cannot be mistaken for its request.
            Ok(body.into_iter().rev().collect())
        }));
        let mut s = AppendStream::new(client);
        // Bodies larger than the pipe's buffer, and an empty one.
        for n in [0usize, 1, 63, 64, 65, 10_000] {
            let req: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let got = s.call(&framed(&req)).await.expect("answer");
            let want: Vec<u8> = req.into_iter().rev().collect();
            assert_eq!(got, want, "body of {n} bytes");
        }
        drop(s);
        served.await.expect("the server ends when the client goes");
    }

    #[tokio::test]
    async fn a_body_that_is_not_a_request_closes_the_stream_and_the_call_fails() {
        let (client, server) = tokio::io::duplex(1024);
        let served = tokio::spawn(serve(server, |body: Vec<u8>| async move {
            if body == b"bad" {
                Err("not an append".to_string())
            } else {
                Ok(body)
            }
        }));
        let mut s = AppendStream::new(client);
        assert_eq!(s.call(&framed(b"ok")).await.expect("answer"), b"ok");
        let e = s.call(&framed(b"bad")).await.expect_err("closed");
        assert!(
            matches!(e, StreamError::Io(ref io) if io.kind() == std::io::ErrorKind::UnexpectedEof),
            "{e}"
        );
        served.await.expect("server ended");
    }

    /// A loopback server with `app`, and its address.
    async fn server(app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    fn echo_route() -> axum::Router {
        axum::Router::new().route(
            PATH,
            axum::routing::get(|req: axum::extract::Request| async move {
                accept(req, |body: Vec<u8>| async move { Ok(body) })
            }),
        )
    }

    #[tokio::test]
    async fn a_stream_opened_over_http_carries_many_calls_and_an_old_peer_means_posts() {
        let http = tideway_api::http::client_builder().build().expect("client");
        let plane = PeerPlane::new(false, Some("s3cret".into()));
        // A peer that serves streams: one connection, many calls.
        let addr = server(echo_route()).await;
        let Opened::Stream(mut s) = open(&http, &plane, &addr).await.expect("open") else {
            panic!("the peer serves streams");
        };
        for i in 0..100u32 {
            let req = i.to_be_bytes().repeat(i as usize);
            assert_eq!(s.call(&framed(&req)).await.expect("answer"), req);
        }
        // A peer from before streams (no such route): POSTs.
        let old =
            server(axum::Router::new().route("/raft/append", axum::routing::post(|| async { "" })))
                .await;
        assert!(matches!(
            open(&http, &plane, &old).await.expect("answer"),
            Opened::Unsupported
        ));
        // A peer that refuses (a wrong secret, say) is an error, not a fallback.
        let refusing = server(axum::Router::new().route(
            PATH,
            axum::routing::get(|| async { axum::http::StatusCode::UNAUTHORIZED }),
        ))
        .await;
        let e = open(&http, &plane, &refusing).await.err().expect("refused");
        assert!(matches!(e, StreamError::Refused(401)), "{e}");
        // Nobody listening: a connect error, which the client reports as unreachable.
        let gone = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").to_string()
        };
        let e = open(&http, &plane, &gone)
            .await
            .err()
            .expect("nobody there");
        assert!(e.is_connect(), "{e}");
        // A plain GET of the path, without the upgrade, is refused and holds nothing open.
        let plain = http
            .get(plane.url(&addr, PATH))
            .send()
            .await
            .expect("answer");
        assert_eq!(plain.status(), reqwest::StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn a_length_over_the_limit_or_a_cut_frame_is_an_error_not_an_allocation() {
        // Over the limit: refused before reading (or allocating) the body.
        let (mut w, r) = tokio::io::duplex(64);
        w.write_all(&u32::MAX.to_be_bytes()).await.expect("write");
        let mut r = r;
        let e = read_frame(&mut r).await.expect_err("too large");
        assert!(
            matches!(e, StreamError::TooLarge(n) if n == u32::MAX as usize),
            "{e}"
        );
        // A prefix cut short, and a body cut short, are unexpected ends.
        let (mut w, mut r) = tokio::io::duplex(64);
        w.write_all(&[0, 0]).await.expect("write");
        drop(w);
        let e = read_frame(&mut r).await.expect_err("cut prefix");
        assert!(
            matches!(e, StreamError::Io(ref io) if io.kind() == std::io::ErrorKind::UnexpectedEof)
        );
        let (mut w, mut r) = tokio::io::duplex(64);
        w.write_all(&[0, 0, 0, 9, 1, 2]).await.expect("write");
        drop(w);
        assert!(read_frame(&mut r).await.is_err());
        // Nothing at all is a clean end.
        let (w, mut r) = tokio::io::duplex(64);
        drop(w);
        assert!(read_frame(&mut r).await.expect("clean").is_none());
    }
}
