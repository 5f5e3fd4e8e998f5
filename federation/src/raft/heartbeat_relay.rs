//! Heartbeats sent from a task of their own, so that one whose answer comes later than
//! openraft waits for still arrives, and its connection is kept.
//!
//! Why: openraft's heartbeat worker drops each heartbeat call after the heartbeat interval
//! (50 ms by default), whatever deadline the transport would give it. Where a round trip is
//! longer than that (nodes in other regions), every heartbeat was cut off mid-call: its
//! append stream dropped (an answer arriving late must not be read as the next one's), a new
//! one opened for the next heartbeat (two more round trips), and that one cut off too, so
//! followers heard from their leader only through replication and deposed it when it was idle
//! (issue 53). Here the call runs on a relay task that owns its own client: openraft's timeout
//! drops only the wait for the answer, the heartbeat still reaches the follower (its election
//! timer is reset), the connection stays open, and its round trip is measured. The answer goes
//! back to openraft only if it still waits; the leader's quorum clock (ReadIndex reads, lease
//! reads) therefore still needs round trips under the heartbeat interval, which the node warns
//! about (`rtt::Timing::unsafe_for`).
//!
//! At most one heartbeat waits behind the one in flight; openraft's later calls wait for room
//! and are cut off by its timeout, so a follower far away gets about one heartbeat per round
//! trip rather than a backlog.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

/// One heartbeat for the relay, and where its answer goes.
struct Job<Req, Resp> {
    req: Req,
    answer: oneshot::Sender<Resp>,
}

/// The caller's end of a relay task; the task ends when this is dropped.
pub struct Relay<Req, Resp> {
    tx: mpsc::Sender<Job<Req, Resp>>,
}

/// Why a relayed call got no answer.
#[derive(Debug, thiserror::Error)]
#[error("the heartbeat relay to this peer has stopped")]
pub struct RelayStopped;

impl<Req: Send + 'static, Resp: Send + 'static> Relay<Req, Resp> {
    /// Starts a relay whose task owns `client` and makes each call with `call`, which hands
    /// the client back with the answer.
    pub fn spawn<C, F, Fut>(client: C, mut call: F) -> Self
    where
        C: Send + 'static,
        F: FnMut(C, Req) -> Fut + Send + 'static,
        Fut: Future<Output = (C, Resp)> + Send,
    {
        let (tx, mut rx) = mpsc::channel::<Job<Req, Resp>>(1);
        tokio::spawn(async move {
            let mut client = client;
            while let Some(job) = rx.recv().await {
                let (back, resp) = call(client, job.req).await;
                client = back;
                // The caller may have stopped waiting (openraft's timeout): nothing to do.
                let _ = job.answer.send(resp);
            }
        });
        Self { tx }
    }

    /// Sends `req` through the relay and waits for its answer. Dropping this future (a
    /// timeout) leaves the call running on the relay.
    pub async fn call(&self, req: Req) -> Result<Resp, RelayStopped> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .send(Job { req, answer })
            .await
            .map_err(|_| RelayStopped)?;
        rx.await.map_err(|_| RelayStopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn a_call_cut_off_by_its_caller_still_completes_on_the_relay() {
        let done = Arc::new(AtomicU32::new(0));
        let seen = done.clone();
        // The "client" counts its completed calls; each takes 80 ms.
        let relay = Relay::spawn(0u32, move |n: u32, req: u32| {
            let seen = seen.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(80)).await;
                seen.fetch_add(1, Ordering::SeqCst);
                (n + 1, req * 10)
            }
        });
        // The caller gives up after 20 ms, as openraft does at its heartbeat interval.
        let cut = tokio::time::timeout(Duration::from_millis(20), relay.call(1)).await;
        assert!(cut.is_err(), "the caller stopped waiting");
        // The call still completes, and the client is handed back for the next one.
        assert_eq!(relay.call(2).await.expect("answer"), 20);
        assert_eq!(done.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_dropped_relay_stops_its_task() {
        let (tx, rx) = oneshot::channel::<()>();
        let relay = Relay::spawn(tx, |c, req: u32| async move { (c, req) });
        assert_eq!(relay.call(7).await.expect("answer"), 7);
        drop(relay);
        // The task ended and dropped the client (the oneshot sender).
        assert!(rx.await.is_err());
    }
}
