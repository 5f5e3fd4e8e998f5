use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use openraft::entry::RaftEntry;
use openraft::raft::{AppendEntriesRequest, StreamAppendError};
use tokio::io::DuplexStream;

use super::*;
use crate::raft::append_stream::{AppendStream, frame};
use crate::raft::types::{Entry, LogId, Vote};

fn log_id(i: u64) -> LogId {
    openraft::testing::log_id::<TypeConfig>(2, 1, i)
}

/// An append of one blank entry at `i`.
fn append(i: u64) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: Vote::new_committed(2, 1),
        prev_log_id: Some(log_id(i - 1)),
        entries: vec![Entry::new_blank(log_id(i))],
        leader_commit: None,
    }
}

fn decode_req(body: Vec<u8>) -> Result<AppendEntriesRequest<TypeConfig>, String> {
    rmp_serde::from_slice(&body).map_err(|e| e.to_string())
}

fn last_of(req: &AppendEntriesRequest<TypeConfig>) -> WireAnswer {
    Ok(Ok(req.entries.last().map(|e| e.log_id())))
}

/// A follower that answers each append with its last log id, but only once `group` appends
/// have arrived (the answers of a group leave together): a leader with one append in flight
/// never gets an answer from it.
fn serve_in_groups(io: DuplexStream, group: usize) -> tokio::task::JoinHandle<()> {
    tokio::spawn(serve(io, decode_req, move |input| {
        input
            .chunks(group)
            .flat_map(|reqs| futures::stream::iter(reqs.iter().map(last_of).collect::<Vec<_>>()))
    }))
}

#[derive(Clone, Default)]
struct TestLink {
    ttl: Duration,
    cut: Arc<AtomicBool>,
    kept: Arc<Mutex<Option<AppendStream<DuplexStream>>>>,
    reopened: Arc<AtomicUsize>,
    /// What a reopen gives: a connection to a follower answering one append at a time.
    reopen_serves: bool,
}

impl Link for TestLink {
    type Io = DuplexStream;

    fn frame(
        &self,
        req: &AppendEntriesRequest<TypeConfig>,
    ) -> Result<(Vec<u8>, Duration), RPCError<TypeConfig>> {
        let f = frame(|b| rmp_serde::encode::write_named(b, req)).map_err(network)?;
        Ok((f, self.ttl))
    }

    async fn reopen(&mut self) -> Result<AppendStream<DuplexStream>, RPCError<TypeConfig>> {
        self.reopened.fetch_add(1, Ordering::SeqCst);
        if !self.reopen_serves {
            return Err(network("nobody there"));
        }
        let (client, server) = tokio::io::duplex(1 << 16);
        serve_in_groups(server, 1);
        Ok(AppendStream::new(client))
    }

    fn partitioned(&self) -> Option<RPCError<TypeConfig>> {
        self.cut
            .load(Ordering::SeqCst)
            .then(|| RPCError::Unreachable(Unreachable::from_string("cut off")))
    }

    fn keep(&mut self, conn: AppendStream<DuplexStream>) {
        *self.kept.lock().expect("lock") = Some(conn);
    }
}

fn link() -> TestLink {
    TestLink {
        ttl: Duration::from_secs(5),
        ..TestLink::default()
    }
}

fn answered(items: &[Item]) -> Vec<Option<LogId>> {
    items
        .iter()
        .map(|i| match i {
            Ok(Ok(id)) => *id,
            other => panic!("not a success: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn appends_go_out_before_the_last_is_answered_and_come_back_in_order() {
    let (client, server) = tokio::io::duplex(1 << 16);
    // Answers come only in groups of four: with one append in flight this would hang.
    let served = serve_in_groups(server, 4);
    let l = link();
    let input = futures::stream::iter((1..=12).map(append));
    let session = Session::new(l.clone(), AppendStream::new(client), false, input);
    let items: Vec<Item> =
        tokio::time::timeout(Duration::from_secs(10), session.into_stream().collect())
            .await
            .expect("twelve answers without waiting for each in turn");
    assert_eq!(
        answered(&items),
        (1..=12).map(|i| Some(log_id(i))).collect::<Vec<_>>()
    );
    // Every append answered: the connection is kept for the next session, and works.
    let conn = l.kept.lock().expect("lock").take().expect("kept");
    let more = Session::new(
        l.clone(),
        conn,
        true,
        futures::stream::iter((13..=16).map(append)),
    );
    let items: Vec<Item> = more.into_stream().collect().await;
    assert_eq!(
        answered(&items),
        (13..=16).map(|i| Some(log_id(i))).collect::<Vec<_>>()
    );
    assert_eq!(l.reopened.load(Ordering::SeqCst), 0);
    drop(l.kept.lock().expect("lock").take());
    served
        .await
        .expect("the follower ends when the leader goes");
}

#[tokio::test]
async fn never_more_than_the_limit_is_unanswered() {
    let (client, server) = tokio::io::duplex(1 << 16);
    // A follower that answers only once the limit and one more have arrived: the leader
    // must stop at the limit, so the session runs out of time instead.
    let served = serve_in_groups(server, MAX_IN_FLIGHT + 1);
    let l = TestLink {
        ttl: Duration::from_millis(300),
        ..link()
    };
    let input = futures::stream::iter((1..=(MAX_IN_FLIGHT as u64 + 1)).map(append));
    let items: Vec<Item> = Session::new(l, AppendStream::new(client), false, input)
        .into_stream()
        .collect()
        .await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        matches!(&items[0], Err(RPCError::Network(e)) if e.to_string().contains("no answer")),
        "{items:?}"
    );
    served.abort();
}

#[tokio::test]
async fn an_answer_that_ends_the_followers_stream_ends_the_session_and_its_connection() {
    let (client, server) = tokio::io::duplex(1 << 16);
    let served = tokio::spawn(serve(server, decode_req, |input| {
        input.map(|req| {
            if req.entries[0].log_id().index() == 3 {
                Ok(Err(StreamAppendError::Conflict(log_id(2))))
            } else {
                last_of(&req)
            }
        })
    }));
    let l = link();
    let input = futures::stream::iter((1..=6).map(append));
    let items: Vec<Item> = Session::new(l.clone(), AppendStream::new(client), false, input)
        .into_stream()
        .collect()
        .await;
    assert_eq!(
        answered(&items[..2]),
        vec![Some(log_id(1)), Some(log_id(2))]
    );
    assert!(
        matches!(items[2], Ok(Err(StreamAppendError::Conflict(c))) if c == log_id(2)),
        "{items:?}"
    );
    assert_eq!(items.len(), 3, "nothing after the conflict: {items:?}");
    assert!(l.kept.lock().expect("lock").is_none(), "not kept");
    served
        .await
        .expect("the follower closes after the conflict");
}

#[tokio::test]
async fn a_kept_connection_that_failed_is_replaced_once_and_the_appends_sent_again() {
    // A kept connection whose follower went away meanwhile.
    let (client, server) = tokio::io::duplex(1 << 16);
    drop(server);
    let l = TestLink {
        reopen_serves: true,
        ..link()
    };
    let input = futures::stream::iter((1..=5).map(append));
    let items: Vec<Item> = Session::new(l.clone(), AppendStream::new(client), true, input)
        .into_stream()
        .collect()
        .await;
    assert_eq!(
        answered(&items),
        (1..=5).map(|i| Some(log_id(i))).collect::<Vec<_>>()
    );
    assert_eq!(l.reopened.load(Ordering::SeqCst), 1);

    // A new connection (not kept) that fails is the session's error: no second try.
    let (client, server) = tokio::io::duplex(1 << 16);
    drop(server);
    let l = TestLink {
        reopen_serves: true,
        ..link()
    };
    let items: Vec<Item> = Session::new(
        l.clone(),
        AppendStream::new(client),
        false,
        futures::stream::iter((1..=2).map(append)),
    )
    .into_stream()
    .collect()
    .await;
    assert_eq!(items.len(), 1);
    assert!(matches!(items[0], Err(RPCError::Network(_))), "{items:?}");
    assert_eq!(l.reopened.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_follower_that_does_not_answer_in_time_is_an_error_not_a_hang() {
    let (client, server) = tokio::io::duplex(1 << 16);
    let served = tokio::spawn(serve(server, decode_req, |input| {
        input.filter_map(|_| std::future::pending::<Option<WireAnswer>>())
    }));
    let l = TestLink {
        ttl: Duration::from_millis(100),
        ..link()
    };
    let items: Vec<Item> = tokio::time::timeout(
        Duration::from_secs(5),
        Session::new(
            l,
            AppendStream::new(client),
            false,
            futures::stream::iter((1..=3).map(append)),
        )
        .into_stream()
        .collect(),
    )
    .await
    .expect("an error within the append's time");
    assert_eq!(items.len(), 1);
    assert!(matches!(items[0], Err(RPCError::Network(_))), "{items:?}");
    served.abort();
}

#[tokio::test]
async fn a_peer_cut_off_is_unreachable_before_anything_is_sent() {
    let (client, server) = tokio::io::duplex(1 << 16);
    let served = serve_in_groups(server, 1);
    let l = link();
    l.cut.store(true, Ordering::SeqCst);
    let items: Vec<Item> = Session::new(
        l,
        AppendStream::new(client),
        false,
        futures::stream::iter((1..=3).map(append)),
    )
    .into_stream()
    .collect()
    .await;
    assert_eq!(items.len(), 1);
    assert!(
        matches!(items[0], Err(RPCError::Unreachable(_))),
        "{items:?}"
    );
    served
        .await
        .expect("the follower ends when the leader goes");
}

#[tokio::test]
async fn a_frame_that_is_not_an_append_closes_the_connection_after_the_answers_due() {
    let (client, server) = tokio::io::duplex(1 << 16);
    let served = serve_in_groups(server, 1);
    let mut conn = AppendStream::new(client);
    let good = frame(|b| rmp_serde::encode::write_named(b, &append(1))).expect("frame");
    let bad = frame(|b| {
        b.extend_from_slice(b"not msgpack");
        Ok::<_, std::convert::Infallible>(())
    })
    .expect("frame");
    conn.send(&good).await.expect("send");
    conn.send(&bad).await.expect("send");
    let first = conn.receive().await.expect("the good one's answer");
    assert_eq!(answered(&[decode(&first)]), vec![Some(log_id(1))]);
    assert!(conn.receive().await.is_err(), "closed after the bad frame");
    served.await.expect("the follower ended");
    // What a follower's Raft that stopped answers is the leader's "unreachable".
    let fatal = rmp_serde::to_vec_named(&WireAnswer::Err("stopped".into())).expect("encode");
    assert!(matches!(decode(&fatal), Err(RPCError::Unreachable(_))));
    assert!(ends(&WireAnswer::Err("stopped".into())));
    assert!(!ends(&Ok(Ok(None))));
}
