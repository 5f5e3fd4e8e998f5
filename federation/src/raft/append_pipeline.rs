//! Pipelined appends on the append stream (`tideway-append/2`): the leader sends a
//! follower's next append before the previous one is answered, and the follower hands each
//! to its Raft as it arrives.
//!
//! Why: with one append in flight per follower, every round of replication waited for the
//! last one's answer to travel back before the next batch left the leader, and a follower
//! wrote and fsynced each append alone. openraft's replication already produces an append as
//! soon as the leader's log takes a batch (its request stream, `stream_append`), and its
//! follower side (`Raft::stream_append`) takes appends in order while earlier ones are still
//! being written. What was missing was a transport that keeps several in flight and answers
//! them in order: one connection does, since its frames arrive in the order they were sent.
//!
//! The frames are `super::append_stream`'s. A request frame is the same MessagePack append
//! as before; an answer frame is the follower's `stream_append` item, [`WireAnswer`]. At most
//! [`MAX_IN_FLIGHT`] requests are unanswered, which also keeps the unread answers far below a
//! socket buffer, so that neither side can block writing while the other blocks writing too.
//!
//! An answer that ends the follower's stream (a conflict, a higher vote, its Raft stopped)
//! ends the connection on both sides: appends sent after it would have no answer. A
//! connection whose session ended cleanly (every append answered) is kept for the next one.

use std::collections::VecDeque;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use openraft::errors::{NetworkError, RPCError, Unreachable};
use openraft::raft::{AppendEntriesRequest, StreamAppendResult};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};

use super::append_stream::{self, AppendStream, StreamError};
use super::types::TypeConfig;

/// The most appends one connection carries unanswered.
pub const MAX_IN_FLIGHT: usize = 8;

/// An answer frame: the follower's `stream_append` item, its Raft having stopped (`Fatal`)
/// carried as text.
pub type WireAnswer = Result<StreamAppendResult<TypeConfig>, String>;

/// What the leader's side of a session yields for each append, in order.
pub type Item = Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>;

/// Whether an answer ends the follower's stream (and so the connection).
pub fn ends(answer: &WireAnswer) -> bool {
    !matches!(answer, Ok(Ok(_)))
}

/// An answer frame's bytes as the leader's item. A follower whose Raft refused or stopped is
/// reported as unreachable, as the single append's answer always was.
pub fn decode(bytes: &[u8]) -> Item {
    let answer: WireAnswer = rmp_serde::from_slice(bytes)
        .map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
    answer.map_err(|fatal| RPCError::Unreachable(Unreachable::from_string(fatal)))
}

/// The follower's side of one connection: each frame `decode`d into a request, the requests
/// handed to `process` as one stream, and its answers written back as frames, in order,
/// until the leader closes the connection or an answer ends the stream ([`ends`]).
///
/// Frames are read while earlier ones are still being processed, so a follower's Raft sees
/// the next append while it writes the last. A frame that does not decode closes the
/// connection after the answers already due: the leader then sees its connection end, as it
/// would see a 400 to a POST, and opens a new one.
pub async fn serve<S, Req, D, P, O>(io: S, mut decode: D, process: P)
where
    S: AsyncRead + AsyncWrite + Unpin,
    Req: Send + 'static,
    D: FnMut(Vec<u8>) -> Result<Req, String>,
    P: FnOnce(BoxStream<'static, Req>) -> O,
    O: Stream<Item = WireAnswer>,
{
    let (rd, mut wr) = tokio::io::split(io);
    // Room for what the leader may have in flight, so that reading never waits on Raft.
    let (tx, rx) = tokio::sync::mpsc::channel::<Req>(MAX_IN_FLIGHT);
    let input =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) })
            .boxed();
    let answers = process(input);
    let reading = async move {
        let mut rd = BufReader::new(rd);
        loop {
            let body = match append_stream::read_frame(&mut rd).await {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!("{e}; no more appends on this stream");
                    return;
                }
            };
            match decode(body) {
                Ok(req) => {
                    if tx.send(req).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        "append stream: a frame that is not an append request ({e}); closing the stream"
                    );
                    return;
                }
            }
        }
    };
    let writing = async move {
        futures::pin_mut!(answers);
        while let Some(answer) = answers.next().await {
            let last = ends(&answer);
            let framed = match encode_frame(&answer) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!("append stream: encoding an answer: {e}; closing the stream");
                    return;
                }
            };
            if let Err(e) = append_stream::write_all(&mut wr, &framed).await {
                tracing::debug!("append stream: {e}; closing the stream");
                return;
            }
            if last {
                return;
            }
        }
    };
    // The answers decide the end: reading stops at the leader's end of the stream (which ends
    // the requests, so the answers end once the last is written) or at a bad frame.
    tokio::select! {
        () = writing => {}
        () = async { reading.await; std::future::pending::<()>().await } => {}
    }
}

fn encode_frame<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    append_stream::frame(|b| rmp_serde::encode::write_named(b, value).map_err(|e| e.to_string()))
        .map_err(|e| e.to_string())
}

/// An append sent and not yet answered: its frame, kept to send it again on a new
/// connection, and when its answer is due.
struct InFlight {
    frame: Vec<u8>,
    due: tokio::time::Instant,
}

/// How the leader's side of a session reaches the peer: the frames of an append, a time to
/// answer it, a new connection, and whether the peer is cut off (fault injection).
pub trait Link: Send {
    type Io: AsyncRead + AsyncWrite + Unpin + Send;
    /// The append's frame and how long its answer may take.
    fn frame(
        &self,
        req: &AppendEntriesRequest<TypeConfig>,
    ) -> Result<(Vec<u8>, std::time::Duration), RPCError<TypeConfig>>;
    /// A new connection to the peer.
    fn reopen(
        &mut self,
    ) -> impl std::future::Future<Output = Result<AppendStream<Self::Io>, RPCError<TypeConfig>>> + Send;
    /// `Some` while the peer is cut off.
    fn partitioned(&self) -> Option<RPCError<TypeConfig>>;
    /// A connection whose session ended with every append answered, for the next session.
    fn keep(&mut self, conn: AppendStream<Self::Io>);
}

/// The leader's side of one session: appends from `input` sent as they come, at most
/// [`MAX_IN_FLIGHT`] unanswered, and their answers yielded in order.
pub struct Session<L: Link, In> {
    link: L,
    conn: Option<AppendStream<L::Io>>,
    /// The connection was kept from an earlier session and has not answered in this one: if
    /// it fails, the peer may have closed it meanwhile (a restart, an idle timeout), so it is
    /// replaced once and what was in flight sent again. Appending entries a follower already
    /// holds changes nothing, so sending an append twice is safe.
    kept: bool,
    input: In,
    input_done: bool,
    in_flight: VecDeque<InFlight>,
    ended: bool,
}

impl<L, In> Session<L, In>
where
    L: Link,
    In: Stream<Item = AppendEntriesRequest<TypeConfig>> + Unpin + Send,
{
    /// A session on `conn`; `kept` says it served an earlier session.
    pub fn new(link: L, conn: AppendStream<L::Io>, kept: bool, input: In) -> Self {
        Self {
            link,
            conn: Some(conn),
            kept,
            input,
            input_done: false,
            in_flight: VecDeque::new(),
            ended: false,
        }
    }

    /// The answers as a stream.
    pub fn into_stream<'s>(self) -> BoxStream<'s, Item>
    where
        L: 's,
        In: 's,
    {
        futures::stream::unfold(self, |mut s| async move {
            let item = s.next().await?;
            Some((item, s))
        })
        .boxed()
    }

    /// The next append's answer; `None` once the input has ended and every append is answered
    /// (the connection is then kept), or after an error.
    async fn next(&mut self) -> Option<Item> {
        if self.ended {
            return None;
        }
        loop {
            if self.in_flight.is_empty() {
                if self.input_done {
                    self.ended = true;
                    if let Some(conn) = self.conn.take() {
                        self.link.keep(conn);
                    }
                    return None;
                }
                match self.input.next().await {
                    Some(req) => {
                        if let Err(e) = self.send(&req).await {
                            return Some(self.fail(e));
                        }
                    }
                    None => self.input_done = true,
                }
                continue;
            }
            let due = self.in_flight.front().map(|f| f.due)?;
            let room = !self.input_done && self.in_flight.len() < MAX_IN_FLIGHT;
            let Some(conn) = self.conn.as_mut() else {
                return Some(self.fail(network("append stream: no connection")));
            };
            tokio::select! {
                biased;
                got = conn.receive() => match got {
                    Ok(body) => {
                        self.in_flight.pop_front();
                        self.kept = false;
                        let item = decode(&body);
                        if !matches!(item, Ok(Ok(_))) {
                            // The follower's stream ended with this answer, and so does the
                            // connection.
                            self.conn = None;
                            self.ended = true;
                        }
                        return Some(item);
                    }
                    Err(e) => {
                        if let Err(e) = self.replace(e).await {
                            return Some(self.fail(e));
                        }
                    }
                },
                req = self.input.next(), if room => match req {
                    Some(req) => {
                        if let Err(e) = self.send(&req).await {
                            return Some(self.fail(e));
                        }
                    }
                    None => self.input_done = true,
                },
                () = tokio::time::sleep_until(due) => {
                    return Some(self.fail(network(format!(
                        "append stream: no answer within its time ({} unanswered)",
                        self.in_flight.len()
                    ))));
                }
            }
        }
    }

    async fn send(
        &mut self,
        req: &AppendEntriesRequest<TypeConfig>,
    ) -> Result<(), RPCError<TypeConfig>> {
        if let Some(e) = self.link.partitioned() {
            return Err(e);
        }
        let (frame, ttl) = self.link.frame(req)?;
        let due = tokio::time::Instant::now() + ttl;
        let sent = match self.conn.as_mut() {
            Some(conn) => tokio::time::timeout_at(due, conn.send(&frame)).await,
            None => return Err(network("append stream: no connection")),
        };
        self.in_flight.push_back(InFlight { frame, due });
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => self.replace(e.into()).await,
            Err(_) => Err(network(
                "append stream: the peer took no more frames in time",
            )),
        }
    }

    /// After `e` on the connection: a kept connection that has not answered yet is replaced
    /// once and everything in flight sent again; otherwise `e` ends the session.
    async fn replace(&mut self, e: StreamError) -> Result<(), RPCError<TypeConfig>> {
        self.conn = None;
        if !self.kept {
            return Err(network(e));
        }
        self.kept = false;
        tracing::debug!("{e}; opening a new append stream");
        let mut conn = self.link.reopen().await?;
        for f in &self.in_flight {
            tokio::time::timeout_at(f.due, conn.send(&f.frame))
                .await
                .map_err(|_| network("append stream: the peer took no more frames in time"))?
                .map_err(|e| network(StreamError::from(e)))?;
        }
        self.conn = Some(conn);
        Ok(())
    }

    fn fail(&mut self, e: RPCError<TypeConfig>) -> Item {
        self.conn = None;
        self.ended = true;
        Err(e)
    }
}

fn network(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::from_string(e.to_string()))
}

#[cfg(test)]
#[path = "append_pipeline_tests.rs"]
mod tests;
