//! A server's log lines leave its serving threads through a buffer that one thread writes out.
//!
//! tracing's fmt layer writes every event with a `write(2)` of its own. A server logs a line per
//! submission, and with stderr on a file that system call cost a measurable share of a
//! three-node federation's submissions/s (see docs/benchmarks/submissions.md, "The shared
//! anchor as it is, and the log line's system call"). Here an event's line is appended to a
//! shared buffer under a short lock, and a writer thread writes all that is buffered in one
//! call, at most one wake and one write per 5 ms: under load many lines per system call, and a
//! line reaches stderr within about 5 ms.
//!
//! The price, and how it is kept small:
//! - lines still buffered when the process is killed with SIGKILL are lost; the writer is at most
//!   one write behind. A clean exit, an error exit and a panic flush what is buffered first
//!   ([`LogGuard`], [`install_panic_flush`]).
//! - a writer that cannot keep up (stderr a pipe nobody reads) would make the buffer grow
//!   without bound, or block the server's threads if it were bounded by waiting. Past
//!   [`MAX_BUFFERED`] bytes new lines are dropped instead, and the writer says how many once it
//!   can write again.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The most bytes of log lines waiting for the writer (about 40,000 lines).
pub const MAX_BUFFERED: usize = 8 << 20;

/// The lines waiting, and what the writer must know.
#[derive(Default)]
struct Pending {
    buf: Vec<u8>,
    /// Lines dropped since the last write because the buffer was full.
    dropped: u64,
    /// The guard was dropped: the writer thread ends once the buffer is empty.
    closed: bool,
    /// The writer thread waits for a line: the next line into the empty buffer wakes it. A
    /// wake is a system call, so no line wakes a writer that is not waiting.
    idle: bool,
}

impl Pending {
    /// Nothing to write: no line, and no drop to report.
    fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.dropped == 0
    }
}

struct Shared {
    pending: Mutex<Pending>,
    ready: Condvar,
    /// Held while bytes go out, taken while `pending` is still held, so chunks leave in the
    /// order they were taken from the buffer (the writer thread's and a flush's alike).
    out: Mutex<Box<dyn Write + Send>>,
    max: usize,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while a line was appended leaves whole lines behind; keep logging.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Takes what is buffered and writes it out, in order with every other taker.
    fn write_out(&self, mut pending: MutexGuard<'_, Pending>) {
        if pending.is_empty() {
            return; // a flush took it meanwhile
        }
        let chunk = std::mem::take(&mut pending.buf);
        let dropped = std::mem::take(&mut pending.dropped);
        let mut out = lock(&self.out);
        drop(pending);
        // Nowhere to report a failed write of the log itself.
        if dropped > 0 {
            let notice = format!("{dropped} log lines dropped: the log's output did not keep up\n");
            let _ = out.write_all(notice.as_bytes());
        }
        let _ = out.write_all(&chunk);
        let _ = out.flush();
    }

    fn flush(&self) {
        self.write_out(lock(&self.pending));
    }
}

/// The tracing writer: `tracing_subscriber::fmt().with_writer(sink)`. Buffered, or (for a
/// client verb, see [`LogSink::direct`]) straight to stderr.
#[derive(Clone)]
pub struct LogSink {
    shared: Option<Arc<Shared>>,
}

/// Flushes what is buffered and stops the writer thread when dropped: keep it alive for as
/// long as anything may log, and drop it before `std::process::exit`, which runs no
/// destructors.
pub struct LogGuard {
    shared: Arc<Shared>,
}

impl LogSink {
    /// A sink writing to `out` from a thread of its own, holding at most `max` bytes.
    pub fn new(out: Box<dyn Write + Send>, max: usize) -> std::io::Result<(Self, LogGuard)> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            ready: Condvar::new(),
            out: Mutex::new(out),
            max,
        });
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || run(&writer))?;
        Ok((
            Self {
                shared: Some(Arc::clone(&shared)),
            },
            LogGuard { shared },
        ))
    }

    /// Every line straight to stderr with a system call of its own, as tracing does alone.
    pub fn direct() -> Self {
        Self { shared: None }
    }

    /// Stderr through the buffer.
    pub fn stderr() -> std::io::Result<(Self, LogGuard)> {
        Self::new(Box::new(std::io::stderr()), MAX_BUFFERED)
    }
}

/// How long the writer lets lines gather after the first one that woke it. Waking the writer
/// costs about what the write it saves did, so a wake per line gains nothing (measured): one
/// wake per `LINGER` at most, under load many lines per write; a line reaches stderr within
/// about this long.
const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

fn run(shared: &Shared) {
    loop {
        let mut pending = lock(&shared.pending);
        while pending.is_empty() && !pending.closed {
            pending.idle = true;
            pending = shared
                .ready
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        pending.idle = false;
        if pending.is_empty() {
            return; // closed, and nothing left
        }
        if !pending.closed {
            drop(pending);
            std::thread::sleep(LINGER);
            pending = lock(&shared.pending);
        }
        shared.write_out(pending);
    }
}

impl LogGuard {
    /// A panic hook that flushes the buffered lines before the previous hook prints the panic,
    /// so the lines that led to it come first.
    pub fn install_panic_flush(&self) {
        let shared = Arc::downgrade(&self.shared);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(s) = shared.upgrade() {
                s.flush();
            }
            previous(info);
        }));
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.shared.flush();
        lock(&self.shared.pending).closed = true;
        self.shared.ready.notify_one();
    }
}

/// One event's writer. The fmt layer formats a whole line and hands it over in one
/// `write_all`, which this accepts in one `write`: lines of concurrent events never interleave.
pub struct SinkWriter<'a>(Target<'a>);

enum Target<'a> {
    Buffered(&'a Shared),
    Direct(std::io::Stderr),
}

impl Write for SinkWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let shared = match &mut self.0 {
            Target::Buffered(shared) => *shared,
            Target::Direct(stderr) => return stderr.write(bytes),
        };
        let mut pending = lock(&shared.pending);
        if pending.buf.len() + bytes.len() > shared.max {
            pending.dropped += 1;
            return Ok(bytes.len());
        }
        pending.buf.extend_from_slice(bytes);
        let wake = std::mem::take(&mut pending.idle);
        drop(pending);
        if wake {
            shared.ready.notify_one();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.0 {
            Target::Buffered(_) => Ok(()),
            Target::Direct(stderr) => stderr.flush(),
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogSink {
    type Writer = SinkWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        match &self.shared {
            Some(shared) => SinkWriter(Target::Buffered(shared)),
            None => SinkWriter(Target::Direct(std::io::stderr())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// An output the test reads back, that can be made to block until released.
    #[derive(Clone, Default)]
    struct Captured {
        bytes: Arc<Mutex<Vec<u8>>>,
        writes: Arc<Mutex<usize>>,
        gate: Option<Arc<Mutex<mpsc::Receiver<()>>>>,
    }

    impl Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if let Some(g) = &self.gate {
                let _ = lock(g).recv();
            }
            *lock(&self.writes) += 1;
            lock(&self.bytes).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn line(sink: &LogSink, text: &str) {
        use tracing_subscriber::fmt::MakeWriter;
        sink.make_writer().write_all(text.as_bytes()).unwrap();
    }

    /// Polls `done` for up to about 10 s (the writer runs on a thread of its own).
    fn wait_until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("not within 10 s: {what}");
    }

    fn text(c: &Captured) -> String {
        String::from_utf8(lock(&c.bytes).clone()).unwrap()
    }

    #[test]
    fn lines_from_many_threads_come_out_whole_and_in_each_threads_order() {
        let out = Captured::default();
        let (sink, guard) = LogSink::new(Box::new(out.clone()), MAX_BUFFERED).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000 {
                        line(
                            &sink,
                            &format!("thread {t} line {i} {}\n", "x".repeat(i % 50)),
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(guard); // flushes
        let all = text(&out);
        let lines: Vec<&str> = all.lines().collect();
        assert_eq!(lines.len(), 8_000);
        for t in 0..4 {
            let seen: Vec<usize> = lines
                .iter()
                .filter_map(|l| l.strip_prefix(&format!("thread {t} line ")))
                .map(|rest| {
                    let (i, xs) = rest.split_once(' ').unwrap();
                    let i: usize = i.parse().unwrap();
                    assert_eq!(xs, "x".repeat(i % 50), "a line was cut or mixed");
                    i
                })
                .collect();
            assert_eq!(seen, (0..2_000).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_line_is_written_without_waiting_for_more() {
        let out = Captured::default();
        let (sink, _guard) = LogSink::new(Box::new(out.clone()), MAX_BUFFERED).unwrap();
        line(&sink, "alone\n");
        wait_until("the line written", || text(&out) == "alone\n");
    }

    #[test]
    fn a_stalled_output_drops_lines_past_the_bound_and_says_how_many() {
        let (release, gate) = mpsc::channel();
        let out = Captured {
            gate: Some(Arc::new(Mutex::new(gate))),
            ..Captured::default()
        };
        let (sink, guard) = LogSink::new(Box::new(out.clone()), 100).unwrap();
        // The writer takes the first line and blocks writing it.
        line(&sink, "first\n");
        wait_until("the writer took it", || {
            lock(&guard.shared.pending).buf.is_empty()
        });
        // 10 lines of 20 bytes while it is blocked: 5 fit in 100 bytes, 5 are dropped, and
        // writing never blocks the caller.
        for i in 0..10 {
            line(&sink, &format!("line {i:02} 0123456789\n"));
        }
        assert_eq!(lock(&guard.shared.pending).dropped, 5);
        for _ in 0..10 {
            release.send(()).unwrap();
        }
        drop(guard);
        let all = text(&out);
        assert_eq!(
            all,
            "first\n5 log lines dropped: the log's output did not keep up\n\
             line 00 0123456789\nline 01 0123456789\nline 02 0123456789\n\
             line 03 0123456789\nline 04 0123456789\n"
        );
        // The five lines that waited went out in one write, after the notice's.
        assert_eq!(*lock(&out.writes), 3);
    }
}
