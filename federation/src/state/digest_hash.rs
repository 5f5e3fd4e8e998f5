//! The hashes the state digest adds up (see `crate::raft::digest`), shared with the workloads'
//! map, which keeps its part of the sum up to date as it changes
//! ([`super::workloads::Workloads::digest_sum`]).
//!
//! They are here, beside the state, because the workloads' part is the one maintained at
//! apply time: a scheduling cycle's entry rewrites the pending reasons of thousands of
//! workloads at once, and at a million workloads a walk of the map's diff to find them was
//! most of each `cluster status` call after such an entry, where moving the sum as each
//! reason is written costs two small hashes a reason, lost in apply's run-to-run noise
//! (measured: docs/benchmarks/cluster-status.md).

use std::hash::Hasher;
use std::io;
use std::sync::Arc;

use serde::Serialize;
use tideway_api::{PendingReason, Workload, WorkloadStatus};

pub type Error = rmp_serde::encode::Error;

/// A hasher with fixed keys: the same bytes hash the same on every node, however the encoder
/// splits its writes (SipHash buffers partial blocks).
pub fn hasher() -> std::collections::hash_map::DefaultHasher {
    std::collections::hash_map::DefaultHasher::new()
}

/// Above this, the encoding buffer is not kept for the next value (a member's record with its
/// capacity digest can be tens of kilobytes; a workload's is a few hundred bytes).
const KEPT_BUFFER: usize = 64 * 1024;

thread_local! {
    /// Where [`hash_of`] encodes a value before hashing it.
    static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The hash of one value's encoding.
///
/// The value is encoded into a buffer and hashed in one write: the encoder writes field by
/// field, a few bytes at a time, and each write into the hasher has a fixed cost. The hash
/// is the same either way (the hasher's result depends on the bytes, not on how they came).
pub fn hash_of<T: Serialize + ?Sized>(v: &T) -> Result<u64, Error> {
    BUFFER.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            rmp_serde::encode::write_named(&mut *buf, v)?;
            let mut h = hasher();
            h.write(&buf);
            if buf.capacity() > KEPT_BUFFER {
                *buf = Vec::new();
            }
            Ok(h.finish())
        }
        // Only if a value's encoding hashed another value: hash straight from the encoder.
        Err(_) => {
            let mut w = HashWriter(hasher());
            rmp_serde::encode::write_named(&mut w, v)?;
            Ok(w.0.finish())
        }
    })
}

/// An `io::Write` that only hashes what is written to it.
pub struct HashWriter<H>(pub H);

impl<H: Hasher> io::Write for HashWriter<H> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A workload's fields but its pending reason (the destructuring names every field, so one
/// added later is hashed and compared, or fails to compile, never silently left out).
pub fn without_reason(w: &Workload) -> impl Serialize + PartialEq + '_ {
    let Workload {
        api_version,
        kind,
        metadata,
        spec,
        status,
    } = w;
    // Each field named once: the pattern must name them all, so the tuple holds them all.
    macro_rules! all_but_the_reason {
        ($st:expr; $($field:ident),*) => {{
            let WorkloadStatus { pending_reason: _, $($field),* } = $st;
            ($($field),*)
        }};
    }
    let status = status.as_ref().map(|st| {
        all_but_the_reason!(st; phase, message, cluster, attempts, submitted_at, admitted_at,
            started_at, finished_at, nodes, retry_not_before, last_checkpoint_at)
    });
    (api_version, kind, metadata, spec, status)
}

/// Whether `a` and `b` differ at most in their pending reason. Cheaper than encoding either:
/// a scheduling cycle's entry mostly changes reasons only, of many workloads at once.
/// Encoding the view instead of a clone with the reason taken out also saves an allocation
/// per changed workload.
pub fn same_but_reason(a: &Workload, b: &Workload) -> bool {
    without_reason(a) == without_reason(b)
}

/// How many reasons' hashes [`ReasonHashes`] keeps: a backlog of any size has a handful of
/// distinct reasons at a time (one per shape and blocker, shared by `Arc`).
const RECENT_REASONS: usize = 64;

/// Hashes of recent pending reasons by their allocation. A reason is shared by every workload
/// of its shape blocked by the same thing, and with its verdict per member it is most of a
/// pending workload's encoding: it is hashed once, not once per workload.
///
/// Each entry holds its reason, so that an address in the table is never reused by another
/// reason while the entry stands.
#[derive(Default, Clone)]
pub struct ReasonHashes {
    recent: Vec<(Arc<PendingReason>, u64)>,
    /// The entry the next new reason replaces, once the table is full.
    next: usize,
}

impl std::fmt::Debug for ReasonHashes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReasonHashes")
            .field("reasons", &self.recent.len())
            .finish()
    }
}

impl ReasonHashes {
    /// The hash of `reason`'s encoding.
    fn reason(&mut self, reason: &Arc<PendingReason>) -> Result<u64, Error> {
        if let Some((_, h)) = self.recent.iter().find(|(r, _)| Arc::ptr_eq(r, reason)) {
            return Ok(*h);
        }
        let h = hash_of(&**reason)?;
        if self.recent.len() < RECENT_REASONS {
            self.recent.push((Arc::clone(reason), h));
        } else {
            self.recent[self.next] = (Arc::clone(reason), h);
            self.next = (self.next + 1) % RECENT_REASONS;
        }
        Ok(h)
    }

    /// The part of `name`'s hash that its pending reason `reason` makes: the reason's hash
    /// tied to the name, so that two workloads swapping reasons change the sum.
    pub fn part_of(
        &mut self,
        name: &str,
        reason: Option<&Arc<PendingReason>>,
    ) -> Result<u64, Error> {
        match reason {
            None => Ok(0),
            Some(r) => {
                let h = self.reason(r)?;
                hash_of(&(name, h))
            }
        }
    }

    /// The reason's part of workload `name`'s hash.
    pub fn part(&mut self, name: &str, w: &Workload) -> Result<u64, Error> {
        self.part_of(
            name,
            w.status.as_ref().and_then(|s| s.pending_reason.as_ref()),
        )
    }

    /// A workload's hash: its encoding without the reason, plus the reason's part.
    pub fn workload(&mut self, name: &str, w: &Workload) -> Result<u64, Error> {
        Ok(hash_of(&(name, without_reason(w)))?.wrapping_add(self.part(name, w)?))
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{PodSet, WorkloadClass, WorkloadSpec};

    use super::*;

    /// `value` hashed as the encoder writes it, a few bytes at a time.
    fn streamed<T: Serialize + ?Sized>(value: &T) -> u64 {
        let mut w = HashWriter(hasher());
        rmp_serde::encode::write_named(&mut w, value).expect("encode");
        w.0.finish()
    }

    /// Encoding into a buffer and hashing it at once gives the hash the encoder's own writes
    /// gave: digests stay comparable with nodes that hashed the other way.
    #[test]
    fn a_buffered_hash_is_the_streamed_hash() {
        let spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("p", 4, 8, "H100")],
        );
        let mut w = Workload::new("a", spec);
        w.status = Some(WorkloadStatus {
            pending_reason: Some(PendingReason::Queued.shared()),
            ..Default::default()
        });
        assert_eq!(hash_of(&w).expect("hash"), streamed(&w));
        let named = ("a", without_reason(&w));
        assert_eq!(hash_of(&named).expect("hash"), streamed(&named));
        let big = vec![7u8; 4 * KEPT_BUFFER];
        assert_eq!(hash_of(&big).expect("hash"), streamed(&big));
        // A large value does not leave its buffer behind.
        assert!(BUFFER.with(|b| b.borrow().capacity()) <= KEPT_BUFFER);
    }
}
