//! The bytes of the entries a follower was last sent, as the leader encoded them, for its log
//! to write as they are instead of encoding each entry again.
//!
//! The leader's log encodes an entry once and sends those bytes to every follower (see
//! `network::encode_append`). A follower decoded them to hand openraft the entries, and its
//! log then encoded every entry again to write it: a second MessagePack encoding of every
//! workload (its timestamps formatted as text again among it) on each follower, a share of
//! a follower's CPU under a stream of submissions worth saving (measured:
//! docs/benchmarks/submissions.md). The transport now decodes an append request entry by
//! entry ([`decode_append`]), keeps each entry's bytes here, and the log takes them for the
//! entry with the same log id.
//!
//! Whatever bytes are kept decode to the entry they are kept for: they are the span of the
//! request it was just decoded from. A log id that does not match (another leader's request
//! in between, an entry appended some other way) finds nothing, and the log encodes it as
//! before.

use std::sync::{Arc, Mutex};

use openraft::raft::AppendEntriesRequest;
use serde::de::DeserializeOwned;

use super::types::{Entry, LogId, TypeConfig};

/// The entries of the last append request, by index from the first.
pub struct Received<L> {
    last: Mutex<Option<Batch<L>>>,
}

struct Batch<L> {
    first: u64,
    entries: Vec<Option<(L, Arc<[u8]>)>>,
}

impl<L> Default for Received<L> {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
        }
    }
}

impl<L: PartialEq> Received<L> {
    /// Keeps the bytes of a request's entries (consecutive, from index `first`), in place of
    /// the last request's. A request without entries (a heartbeat, which may overtake the
    /// request before it) leaves them.
    pub fn offer(&self, first: u64, entries: Vec<(L, Arc<[u8]>)>) {
        if entries.is_empty() {
            return;
        }
        if let Ok(mut last) = self.last.lock() {
            *last = Some(Batch {
                first,
                entries: entries.into_iter().map(Some).collect(),
            });
        }
    }

    /// The bytes kept for the entry at `index` with log id `id`, once.
    pub fn take(&self, index: u64, id: &L) -> Option<Arc<[u8]>> {
        let mut last = self.last.lock().ok()?;
        let batch = last.as_mut()?;
        let at = usize::try_from(index.checked_sub(batch.first)?).ok()?;
        let slot = batch.entries.get_mut(at)?;
        match slot.take() {
            Some((held, bytes)) if held == *id => Some(bytes),
            other => {
                *slot = other;
                None
            }
        }
    }
}

/// What decoding a request gives: the request, and each entry's bytes with its log id.
pub type Decoded = (AppendEntriesRequest<TypeConfig>, Vec<(LogId, Arc<[u8]>)>);

/// An append request decoded field by field, keeping the bytes each entry was decoded from.
/// `None` when the bytes are not laid out as `rmp_serde::to_vec_named` lays a request out
/// (a map of its four fields, by name): the caller then decodes them the usual way.
pub fn decode_append(body: &[u8]) -> Option<Decoded> {
    use openraft::entry::RaftEntry;
    let mut rest = body;
    if rmp::decode::read_map_len(&mut rest).ok()? != 4 {
        return None;
    }
    let (mut vote, mut prev_log_id, mut entries, mut leader_commit) = (None, None, None, None);
    let mut spans = Vec::new();
    for _ in 0..4 {
        let (key, after) = rmp::decode::read_str_from_slice(rest).ok()?;
        rest = after;
        match key {
            "vote" => vote = Some(value(&mut rest)?),
            "prev_log_id" => prev_log_id = Some(value(&mut rest)?),
            "leader_commit" => leader_commit = Some(value(&mut rest)?),
            "entries" => {
                let n = rmp::decode::read_array_len(&mut rest).ok()?;
                let mut list = Vec::with_capacity(usize::try_from(n).ok()?.min(4096));
                for _ in 0..n {
                    let before = rest;
                    let e: Entry = value(&mut rest)?;
                    let span = &before[..before.len() - rest.len()];
                    spans.push((e.log_id(), Arc::from(span)));
                    list.push(e);
                }
                entries = Some(list);
            }
            _ => return None,
        }
    }
    if !rest.is_empty() {
        return None;
    }
    let rpc = AppendEntriesRequest {
        vote: vote?,
        prev_log_id: prev_log_id?,
        entries: entries?,
        leader_commit: leader_commit?,
    };
    Some((rpc, spans))
}

/// One MessagePack value off the front of `rest`.
fn value<T: DeserializeOwned>(rest: &mut &[u8]) -> Option<T> {
    let mut de = rmp_serde::Deserializer::new(*rest);
    let v = T::deserialize(&mut de).ok()?;
    *rest = de.into_inner();
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::network::tests::sample_request as request;
    use openraft::entry::RaftEntry;

    /// Decoded field by field, a request is the one the usual decoder gives, and each entry's
    /// bytes are exactly its own encoding (what the log would have written); bytes laid out
    /// otherwise are left to the usual decoder.
    #[test]
    fn a_request_decodes_as_before_and_each_entry_keeps_its_own_bytes() {
        for n in [0, 1, 5] {
            let rpc = request(n);
            let body = rmp_serde::to_vec_named(&rpc).expect("encode");
            let (decoded, spans) = decode_append(&body).expect("laid out as encoded");
            let usual: AppendEntriesRequest<TypeConfig> =
                rmp_serde::from_slice(&body).expect("decode");
            assert_eq!(format!("{decoded:?}"), format!("{usual:?}"));
            assert_eq!(spans.len(), rpc.entries.len());
            for ((id, bytes), e) in spans.iter().zip(&rpc.entries) {
                assert_eq!(*id, e.log_id());
                assert_eq!(&**bytes, &rmp_serde::to_vec_named(e).expect("encode")[..]);
            }
        }
        let body = rmp_serde::to_vec_named(&request(2)).expect("encode");
        // Trailing bytes, a cut body, a positional (array) encoding: not decoded here.
        let mut longer = body.clone();
        longer.push(0xc0);
        assert!(decode_append(&longer).is_none());
        assert!(decode_append(&body[..body.len() - 3]).is_none());
        let positional = rmp_serde::to_vec(&request(2)).expect("encode");
        assert!(decode_append(&positional).is_none());
    }

    /// Bytes are given once, and only for the log id they were received with.
    #[test]
    fn kept_bytes_are_taken_once_and_only_for_their_log_id() {
        let log_id = |term, i| openraft::testing::log_id::<TypeConfig>(term, 1, i);
        let r = Received::default();
        let bytes = |b: u8| -> Arc<[u8]> { Arc::from(vec![b; 3]) };
        r.offer(5, vec![(log_id(2, 5), bytes(5)), (log_id(2, 6), bytes(6))]);
        assert_eq!(r.take(6, &log_id(3, 6)), None, "another term's entry");
        assert_eq!(r.take(6, &log_id(2, 6)), Some(bytes(6)));
        assert_eq!(r.take(6, &log_id(2, 6)), None, "taken once");
        assert_eq!(r.take(4, &log_id(2, 4)), None, "before the batch");
        assert_eq!(r.take(7, &log_id(2, 7)), None, "after it");
        r.offer(9, vec![]);
        assert_eq!(
            r.take(5, &log_id(2, 5)),
            Some(bytes(5)),
            "a heartbeat leaves them"
        );
        r.offer(5, vec![(log_id(2, 5), bytes(5))]);
        r.offer(7, vec![(log_id(2, 7), bytes(7))]);
        assert_eq!(
            r.take(5, &log_id(2, 5)),
            None,
            "replaced by the next request"
        );
        assert_eq!(r.take(7, &log_id(2, 7)), Some(bytes(7)));
    }
}
