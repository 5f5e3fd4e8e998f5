//! A snapshot's large collections encoded on several threads.
//!
//! Writing a snapshot is encoding the state, and at a million workloads that is about a
//! gigabyte of MessagePack, which took a live leader several times as long as the same state
//! built in one go (measured: docs/benchmarks/scale.md). A live heap is scattered, so the
//! encoder spends its time waiting on memory for the strings it copies (`memcpy` was a large
//! share of a snapshot's samples). Nearly all of the bytes are in the collections that grow
//! with the workloads (the workloads, their idempotency records and expiry, UIDs, submission
//! order, the audit trail), and each of their entries encodes without the others. So their
//! entries are encoded in chunks on worker threads, each chunk into a buffer of its own, and
//! written in order: several threads wait on memory at once, and each encodes into a plain
//! `Vec`.
//!
//! The bytes are exactly those of `rmp_serde::encode::write_named` for the same value (a test
//! holds them equal): the snapshot format does not change. The state's derived `Serialize`
//! stays as it is; the fields that grow are serialized with [`ordmap`], [`ordset`] and
//! [`vector`], which are the collection's own `Serialize` except on a thread inside
//! [`write_named`]. There, one writes only its collection's header and leaves a job (encode
//! the entries) to the writer, which runs it before the next bytes it is given, or at the
//! end: the entries land right after their header, as they would have.

use std::cell::RefCell;
use std::io::{self, Write};
use std::sync::mpsc;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// Encodes entries into the writer, after the header its collection wrote.
type Job = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()>>;

thread_local! {
    /// `Some` while this thread runs [`write_named`] (and not one of its jobs): the jobs
    /// collections left for the writer.
    static DEFERRED: RefCell<Option<Vec<Job>>> = const { RefCell::new(None) };
}

/// Entries per chunk: about a megabyte of workloads, 17 KB of the order index. Large enough
/// that handing a chunk over costs little beside encoding it, small enough that the chunks
/// in flight (two per worker) stay a few megabytes.
const CHUNK_ENTRIES: usize = 1024;

/// `rmp_serde::encode::write_named(w, value)`, with the collections that grow encoded on
/// worker threads.
pub fn write_named<W: Write, T: Serialize + ?Sized>(w: &mut W, value: &T) -> io::Result<()> {
    let _active = Active::enter();
    let mut out = Splicer { inner: w };
    rmp_serde::encode::write_named(&mut out, value).map_err(io_error)?;
    out.run_deferred()
}

/// The writer's own error where the encoder failed to write (a full disk says so), the
/// encoder's otherwise.
fn io_error(e: rmp_serde::encode::Error) -> io::Error {
    use rmp::encode::ValueWriteError;
    match e {
        rmp_serde::encode::Error::InvalidValueWrite(
            ValueWriteError::InvalidMarkerWrite(e) | ValueWriteError::InvalidDataWrite(e),
        ) => e,
        other => io::Error::other(other),
    }
}

/// Marks this thread as inside [`write_named`] until dropped (also when encoding fails).
struct Active;

impl Active {
    fn enter() -> Self {
        DEFERRED.with(|d| *d.borrow_mut() = Some(Vec::new()));
        Active
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        DEFERRED.with(|d| *d.borrow_mut() = None);
    }
}

fn active() -> bool {
    DEFERRED.with(|d| d.borrow().is_some())
}

fn defer(job: Job) {
    DEFERRED.with(|d| {
        if let Some(jobs) = d.borrow_mut().as_mut() {
            jobs.push(job);
        }
    });
}

/// The writer the encoder is given: runs what collections left before passing bytes on.
struct Splicer<'a, W> {
    inner: &'a mut W,
}

impl<W: Write> Splicer<'_, W> {
    fn run_deferred(&mut self) -> io::Result<()> {
        let jobs = DEFERRED.with(|d| d.borrow_mut().as_mut().map(std::mem::take));
        let Some(jobs) = jobs.filter(|j| !j.is_empty()) else {
            return Ok(());
        };
        // A job encodes plainly, even where it runs on this thread.
        DEFERRED.with(|d| *d.borrow_mut() = None);
        let result = jobs.into_iter().try_for_each(|job| job(self.inner));
        DEFERRED.with(|d| *d.borrow_mut() = Some(Vec::new()));
        result
    }
}

impl<W: Write> Write for Splicer<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.run_deferred()?;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.run_deferred()?;
        self.inner.flush()
    }
}

/// `serialize_with` for a persistent map that grows with the workloads.
pub fn ordmap<K, V, S>(m: &imbl::OrdMap<K, V>, s: S) -> Result<S::Ok, S::Error>
where
    K: Serialize + Ord + Clone + Send + Sync + 'static,
    V: Serialize + Clone + Send + Sync + 'static,
    S: Serializer,
{
    if !active() {
        return m.serialize(s);
    }
    let header = s.serialize_map(Some(m.len()))?;
    let m = m.clone();
    defer(Box::new(move |w| {
        encode_in_chunks(w, m.iter(), |(k, v), buf| {
            rmp_serde::encode::write_named(buf, k)?;
            rmp_serde::encode::write_named(buf, v)
        })
    }));
    header.end()
}

/// `serialize_with` for a persistent set that grows with the workloads.
pub fn ordset<A, S>(set: &imbl::OrdSet<A>, s: S) -> Result<S::Ok, S::Error>
where
    A: Serialize + Ord + Clone + Send + Sync + 'static,
    S: Serializer,
{
    seq(set, set.len(), s)
}

/// `serialize_with` for a persistent vector that grows with the workloads.
pub fn vector<A, S>(v: &imbl::Vector<A>, s: S) -> Result<S::Ok, S::Error>
where
    A: Serialize + Clone + Send + Sync + 'static,
    S: Serializer,
{
    seq(v, v.len(), s)
}

/// A sequence of `len` elements (a set or a vector): its own `Serialize`, or inside
/// [`write_named`] its header and a job for its elements.
fn seq<C, A, S>(c: &C, len: usize, s: S) -> Result<S::Ok, S::Error>
where
    C: Serialize + Clone + 'static,
    for<'a> &'a C: IntoIterator<Item = &'a A>,
    A: Serialize + Sync + 'static,
    S: Serializer,
{
    if !active() {
        return c.serialize(s);
    }
    let header = s.serialize_seq(Some(len))?;
    let c = c.clone();
    defer(Box::new(move |w| {
        encode_in_chunks(w, (&c).into_iter(), |a, buf| {
            rmp_serde::encode::write_named(buf, a)
        })
    }));
    header.end()
}

/// Worker threads: one per core, at least two (one encodes while the other's chunk is
/// written), at most four (past that the disk and memory bound it, and a snapshot should not
/// take every core of a large machine from the server).
fn workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4))
}

type Encode<T> = fn(&T, &mut Vec<u8>) -> Result<(), rmp_serde::encode::Error>;

/// A snapshot is background work: its workers run at a lower priority (nice 10) than the
/// threads that serve requests. At a million workloads on two cores, the three nodes'
/// snapshots fell together and `cluster status` answered several times slower at p99 while
/// they ran than when they did not (measured: docs/benchmarks/cluster-status.md). Best
/// effort: where the system refuses, they run as they are.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` and `setpriority` take and return plain integers; this changes only
    // the calling thread's nice value (on Linux a priority set by thread id is per thread).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}

/// Runs `work` on a thread of its own at the workers' lower priority, and hands back its
/// result. For the snapshot's own thread, which writes the chunks and encodes all the
/// rest: at the default priority it took a core from the nodes' runtime workers for the
/// snapshot's whole length, and with three nodes snapshotting at once on two cores,
/// `cluster status` p99 at a million workloads grew severalfold (measured:
/// docs/benchmarks/cluster-status.md). And for the scheduling cycle's work sized by the
/// backlog (`dispatcher::cycle`). Not a
/// blocking-pool thread: a nice value, once raised, cannot be lowered back without
/// privilege, and would stay with whatever that pool thread ran next.
pub fn low_priority_thread<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> impl std::future::Future<Output = io::Result<T>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let ended = format!("the thread `{name}` ended without an answer (it panicked)");
    let spawned = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            lower_priority();
            let _ = tx.send(work());
        });
    async move {
        spawned?;
        rx.await.map_err(|_| io::Error::other(ended))
    }
}

/// Encodes `items` in chunks on worker threads and writes the chunks to `w` in order. Each
/// worker takes every n-th chunk, and at most two chunks per worker are in flight, so no
/// channel ever fills: neither side waits on the other but for work. Where no thread can be
/// had, the items are encoded here.
fn encode_in_chunks<T: Send>(
    w: &mut dyn Write,
    items: impl Iterator<Item = T>,
    encode: Encode<T>,
) -> io::Result<()> {
    let mut items = items.peekable();
    if items.peek().is_none() {
        return Ok(());
    }
    std::thread::scope(|s| {
        let mut lanes = Vec::new();
        for _ in 0..workers() {
            let (job_tx, job_rx) = mpsc::sync_channel::<Vec<T>>(2);
            let (out_tx, out_rx) = mpsc::sync_channel::<io::Result<Vec<u8>>>(2);
            let spawned = std::thread::Builder::new()
                .name("snapshot-encode".into())
                .spawn_scoped(s, move || {
                    lower_priority();
                    for chunk in job_rx {
                        let mut buf = Vec::with_capacity(1 << 20);
                        let encoded = chunk
                            .iter()
                            .try_for_each(|t| encode(t, &mut buf))
                            .map(|()| buf)
                            .map_err(io::Error::other);
                        if out_tx.send(encoded).is_err() {
                            return;
                        }
                    }
                });
            if spawned.is_err() {
                break;
            }
            lanes.push((job_tx, out_rx));
        }
        if lanes.is_empty() {
            return encode_here(w, items, encode);
        }
        let gone = || io::Error::other("a snapshot encoding thread stopped");
        let n = lanes.len();
        let (mut sent, mut written) = (0usize, 0usize);
        loop {
            while sent - written < 2 * n {
                let chunk: Vec<T> = items.by_ref().take(CHUNK_ENTRIES).collect();
                if chunk.is_empty() {
                    break;
                }
                lanes[sent % n].0.send(chunk).map_err(|_| gone())?;
                sent += 1;
            }
            if written == sent {
                return Ok(());
            }
            let buf = lanes[written % n].1.recv().map_err(|_| gone())??;
            w.write_all(&buf)?;
            written += 1;
        }
    })
}

fn encode_here<T>(
    w: &mut dyn Write,
    items: impl Iterator<Item = T>,
    encode: Encode<T>,
) -> io::Result<()> {
    let mut buf = Vec::new();
    for t in items {
        encode(&t, &mut buf).map_err(io::Error::other)?;
        if buf.len() >= 1 << 20 {
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    w.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_low_priority_thread_answers_at_nice_10_and_leaves_the_caller_as_it_was() {
        fn nice() -> i32 {
            // SAFETY: getpriority reads the calling thread's nice value (Linux: per thread).
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        }
        let before = nice();
        let (value, theirs) = low_priority_thread("test-low", move || (41 + 1, nice()))
            .await
            .expect("answer");
        assert_eq!(value, 42);
        // Raised by 10 from what the thread inherited (the test's own, usually 0; at most 19).
        assert_eq!(theirs, (before + 10).min(19));
        assert_eq!(nice(), before, "the caller's priority is untouched");
        // A thread that panics is an error, not a hang.
        let e = low_priority_thread("test-panics", || -> u8 { panic!("on purpose") })
            .await
            .expect_err("no answer");
        assert!(e.to_string().contains("test-panics"), "{e}");
    }

    #[derive(Serialize, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct Item {
        name: String,
        gpus: u32,
        tags: Vec<String>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Outer {
        first: u64,
        #[serde(serialize_with = "ordmap")]
        by_name: imbl::OrdMap<String, Item>,
        #[serde(serialize_with = "ordset")]
        names: imbl::OrdSet<(u64, String)>,
        middle: Option<String>,
        #[serde(serialize_with = "vector")]
        trail: imbl::Vector<Item>,
        nested: Inner,
    }

    #[derive(Serialize)]
    struct Inner {
        #[serde(serialize_with = "ordmap")]
        last: imbl::OrdMap<u64, String>,
    }

    fn item(i: usize) -> Item {
        Item {
            name: format!("job-{i}"),
            gpus: (i % 9) as u32,
            tags: (0..i % 4).map(|t| format!("t{t}")).collect(),
        }
    }

    fn outer(n: usize) -> Outer {
        Outer {
            first: 7,
            by_name: (0..n).map(|i| (format!("job-{i:06}"), item(i))).collect(),
            names: (0..n).map(|i| (i as u64, format!("n{i}"))).collect(),
            middle: Some("between".into()),
            trail: (0..n).map(item).collect(),
            nested: Inner {
                last: (0..n as u64).map(|i| (i, format!("v{i}"))).collect(),
            },
        }
    }

    /// The same bytes as the plain encoder's, for empty collections, one entry, a chunk's
    /// worth give or take one, and many chunks (more than the workers have in flight), with
    /// a deferred collection last in its struct (written at the next field or at the end).
    #[test]
    fn writes_exactly_the_plain_encoding() {
        for n in [
            0,
            1,
            CHUNK_ENTRIES - 1,
            CHUNK_ENTRIES,
            CHUNK_ENTRIES + 1,
            CHUNK_ENTRIES * 11 + 5,
        ] {
            let value = outer(n);
            let plain = rmp_serde::to_vec_named(&value).expect("plain");
            let mut parallel = Vec::new();
            write_named(&mut parallel, &value).expect("parallel");
            assert!(parallel == plain, "{n} entries: the bytes differ");
        }
        // Outside `write_named` the collections encode as their own `Serialize` does.
        let value = outer(3);
        let plain = rmp_serde::to_vec_named(&value).expect("plain");
        let value_plain: Vec<u8> = {
            let mut v = Vec::new();
            let mut se = rmp_serde::Serializer::new(&mut v).with_struct_map();
            value.serialize(&mut se).expect("encode");
            v
        };
        assert!(value_plain == plain);
        assert!(!active(), "the thread is left as it was");
    }

    /// A writer that fails partway: the error comes back, every worker stops, and the thread
    /// is no longer marked as encoding.
    #[test]
    fn a_failing_writer_is_an_error_not_a_hang() {
        struct FailsAfter(usize);
        impl Write for FailsAfter {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                if self.0 < buf.len() {
                    return Err(io::Error::other("disk full"));
                }
                self.0 -= buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let value = outer(CHUNK_ENTRIES * 9);
        for budget in [0, 100, 200_000] {
            let err = write_named(&mut FailsAfter(budget), &value).expect_err("fails");
            assert!(err.to_string().contains("disk full"), "{err}");
            assert!(!active());
        }
    }
}
