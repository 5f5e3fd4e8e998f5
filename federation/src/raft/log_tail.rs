//! The newest entries of the Raft log, decoded, beside their durable copy in redb.
//!
//! openraft reads entries back from the log to replicate them (once per follower) and to
//! apply them, and each read from redb decoded the entry again: a leader under submissions
//! decoded every entry three times, through serde's buffered path for the internally tagged
//! command enum, about a tenth of its CPU. The tail keeps what the node itself appended since
//! its start, bounded, and answers a read that it covers whole with copies (an entry's
//! commands are shared, so a copy is cheap). Anything else is read from redb as before.
//!
//! It holds what the log holds for its indexes: filled when an append is handed to the log's
//! writer (openraft reads an entry back as soon as `append` returns, before it is durable),
//! cut with a truncation or a purge, and always one contiguous run ending at the last
//! appended entry. An entry leaves it for its bounds only once it is durable, so whatever
//! redb does not hold yet, the tail does.
//!
//! Each entry is held with the bytes it was written to redb as, which are also its bytes
//! inside an append RPC: the leader sends them to its followers as they are
//! (`network::encode_append`) instead of encoding the same entry once per follower.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// Encoded bytes of entries kept at most: replication and apply read within the last few
/// batches; a follower further behind is served from redb. Small, because the decoded
/// entries take a few times their encoded size on a leader already near its memory aim at
/// a million pending workloads.
pub const TAIL_BYTES: usize = 8 << 20;

/// Entries kept at most, whatever their size.
pub const TAIL_ENTRIES: usize = 1024;

#[derive(Debug)]
pub struct LogTail<E> {
    /// Each entry with its bytes and the number of the write that carries it to redb.
    entries: BTreeMap<u64, (E, Arc<[u8]>, u64)>,
    bytes: usize,
    /// Writes up to this number are durable.
    durable: u64,
}

impl<E> Default for LogTail<E> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            bytes: 0,
            durable: 0,
        }
    }
}

impl<E> LogTail<E> {
    /// Writes up to number `write` are durable: their entries may leave for the bounds.
    pub fn durable(&mut self, write: u64) {
        self.durable = self.durable.max(write);
        self.trim();
    }

    /// Drops the oldest durable entries while over the bounds. One not yet durable stays,
    /// and all after it: redb could not answer for it.
    fn trim(&mut self) {
        while self.bytes > TAIL_BYTES || self.entries.len() > TAIL_ENTRIES {
            match self.entries.first_entry() {
                Some(first) if first.get().2 <= self.durable => {
                    let (_, b, _) = first.remove();
                    self.bytes -= b.len();
                }
                _ => break,
            }
        }
    }
}

impl<E: Clone> LogTail<E> {
    /// An entry handed to the log's writer, at `index` (contiguous with what is held, or the
    /// tail starts over there), with its encoded bytes and the number of the write that
    /// carries it (numbers rise with the order of the writes).
    pub fn appended(&mut self, index: u64, entry: E, encoded: Arc<[u8]>, write: u64) {
        let follows = |t: &Self| {
            t.entries
                .last_key_value()
                .is_none_or(|(last, _)| last.checked_add(1) == Some(index))
        };
        // An overwrite drops what it replaces and all after; a gap drops everything, so
        // that what is held stays one run (and `index` is never already held below).
        if !follows(self) {
            self.truncate_from(index);
            if !follows(self) {
                self.entries.clear();
                self.bytes = 0;
            }
        }
        self.bytes += encoded.len();
        self.entries.insert(index, (entry, encoded, write));
        self.trim();
    }

    /// Forgets the entries from `index` on (a truncation of the log after `index - 1`).
    pub fn truncate_from(&mut self, index: u64) {
        let dropped = self.entries.split_off(&index);
        self.bytes -= dropped.values().map(|(_, b, _)| b.len()).sum::<usize>();
    }

    /// Forgets the entries up to `index` (a purge).
    pub fn purge_upto(&mut self, index: u64) {
        let kept = match index.checked_add(1) {
            Some(next) => self.entries.split_off(&next),
            None => BTreeMap::new(),
        };
        let dropped = std::mem::replace(&mut self.entries, kept);
        self.bytes -= dropped.values().map(|(_, b, _)| b.len()).sum::<usize>();
    }

    /// Copies of the entries in the range, if the tail holds every index of it that the log
    /// can hold: from its start up to a bounded end within the tail. `None` sends the reader
    /// to redb.
    pub fn read(&self, start: Bound<u64>, end: Bound<u64>) -> Option<Vec<E>> {
        let (&first, _) = self.entries.first_key_value()?;
        let (&last, _) = self.entries.last_key_value()?;
        let lo = match start {
            Bound::Included(a) => a,
            Bound::Excluded(a) => a.checked_add(1)?,
            Bound::Unbounded => return None,
        };
        // Exclusive end.
        let hi = match end {
            Bound::Included(b) => b.checked_add(1)?,
            Bound::Excluded(b) => b,
            Bound::Unbounded => return None,
        };
        if lo < first || hi > last.checked_add(1)? {
            return None;
        }
        if lo >= hi {
            return Some(Vec::new());
        }
        Some(
            self.entries
                .range(lo..hi)
                .map(|(_, (e, _, _))| e.clone())
                .collect(),
        )
    }

    /// The encoded bytes of the entry at `index`, if held and `is_it` says it is the entry
    /// the caller means (the log id: an index alone may have been rewritten since).
    pub fn encoded(&self, index: u64, is_it: impl FnOnce(&E) -> bool) -> Option<Arc<[u8]>> {
        let (e, b, _) = self.entries.get(&index)?;
        is_it(e).then(|| b.clone())
    }

    #[cfg(test)]
    pub fn span(&self) -> Option<(u64, u64, usize)> {
        Some((
            *self.entries.first_key_value()?.0,
            *self.entries.last_key_value()?.0,
            self.bytes,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound::{Excluded, Included, Unbounded};

    use super::*;

    /// Encoded bytes of `n` bytes (their content does not matter to the tail).
    fn b(n: usize) -> Arc<[u8]> {
        vec![0u8; n].into()
    }

    #[test]
    fn reads_only_what_it_holds_whole_and_follows_truncations_and_purges() {
        let mut t = LogTail::default();
        assert_eq!(t.read(Included(1), Excluded(2)), None);
        for i in 5..=9 {
            t.appended(i, i * 10, b(100), 0);
        }
        assert_eq!(t.read(Included(5), Excluded(8)), Some(vec![50, 60, 70]));
        assert_eq!(t.read(Included(7), Included(9)), Some(vec![70, 80, 90]));
        // Before its start, past its end, or open-ended: redb answers.
        assert_eq!(t.read(Included(4), Excluded(8)), None);
        assert_eq!(t.read(Included(8), Excluded(11)), None);
        assert_eq!(t.read(Included(8), Unbounded), None);
        assert_eq!(t.read(Unbounded, Excluded(8)), None);
        // A truncation after 6, then new entries from 7 on.
        t.truncate_from(7);
        assert_eq!(t.read(Included(5), Excluded(8)), None);
        t.appended(7, 700, b(100), 0);
        assert_eq!(t.read(Included(5), Excluded(8)), Some(vec![50, 60, 700]));
        assert_eq!(t.span(), Some((5, 7, 300)));
        // An append that overwrites the middle drops what followed it.
        t.appended(6, 600, b(50), 0);
        assert_eq!(t.span(), Some((5, 6, 150)));
        assert_eq!(t.read(Included(5), Included(6)), Some(vec![50, 600]));
        // A purge up to 5.
        t.purge_upto(5);
        assert_eq!(t.read(Included(5), Included(6)), None);
        assert_eq!(t.read(Included(6), Included(6)), Some(vec![600]));
        // A gap (a restart's first append far ahead): the tail starts over there.
        t.appended(20, 2000, b(10), 0);
        assert_eq!(t.span(), Some((20, 20, 10)));
    }

    #[test]
    fn answers_an_entrys_bytes_only_for_the_entry_meant() {
        let mut t = LogTail::default();
        t.appended(3, 30, vec![1, 2, 3].into(), 0);
        assert_eq!(
            t.encoded(3, |e| *e == 30).as_deref(),
            Some(&[1u8, 2, 3][..])
        );
        // Another entry at that index (a term's rewrite the caller knows of), or none.
        assert_eq!(t.encoded(3, |e| *e == 31), None);
        assert_eq!(t.encoded(4, |_| true), None);
        t.truncate_from(3);
        assert_eq!(t.encoded(3, |_| true), None);
    }

    #[test]
    fn keeps_within_its_bounds() {
        let mut t = LogTail::default();
        for i in 0..(TAIL_ENTRIES as u64 + 10) {
            t.appended(i, i, b(1), 0);
        }
        let (first, last, bytes) = t.span().expect("entries");
        assert_eq!(last - first + 1, TAIL_ENTRIES as u64);
        assert_eq!(bytes, TAIL_ENTRIES);
        let big = TAIL_BYTES / 3 + 1;
        for i in 0..3u64 {
            t.appended(last + 1 + i, 0, b(big), 0);
        }
        let (_, _, bytes) = t.span().expect("entries");
        assert!(bytes <= TAIL_BYTES, "{bytes}");
    }

    #[test]
    fn keeps_what_is_not_yet_durable_beyond_its_bounds() {
        let mut t = LogTail::default();
        // Writes 1 and 2 carry big entries; only the first is durable so far.
        let big = TAIL_BYTES / 2 + 1;
        t.appended(1, 1, b(big), 1);
        t.durable(1);
        t.appended(2, 2, b(big), 2);
        t.appended(3, 3, b(big), 2);
        // Over the bounds: the durable entry left, the others stay for readers.
        assert_eq!(t.span().map(|(first, last, _)| (first, last)), Some((2, 3)));
        assert_eq!(t.read(Included(2), Included(3)), Some(vec![2, 3]));
        t.durable(2);
        assert_eq!(
            t.span().map(|(first, last, _)| (first, last)),
            Some((3, 3)),
            "trimmed once durable"
        );
    }
}
