//! Large files written and read around the page cache (`O_DIRECT` on Linux), for snapshots.
//!
//! A snapshot of a million workloads is about a gigabyte, written once and read back rarely
//! (a restart, a follower far behind). Written through the page cache, every byte first goes
//! into a freshly allocated cache page. On the virtual machines Tideway was measured on,
//! filling new cache pages (a `dd` into a new file) ran at a fraction of the speed of
//! `O_DIRECT` or of writing into pages already cached, and a profile of the leader writing a
//! snapshot of a million workloads spent most of its time in the kernel's copy into new
//! cache pages (`copy_folio_from_iter_atomic`; measured: docs/benchmarks/scale.md). Writing
//! straight from an aligned buffer skips that, and leaves the cache to what is read often. A
//! restart reads the snapshot the same way, straight into the buffer it decodes from: a file
//! written around the cache is not in it, and reading it through the cache would pay for new
//! cache pages there instead (slower than a load from the cache; docs/benchmarks/scale.md).
//!
//! Where the file system refuses `O_DIRECT` (tmpfs), or off Linux, the same code goes
//! through the cache.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::Path;

/// Alignment of the buffer, of each write's length and of its file offset: the page size,
/// a multiple of every block size `O_DIRECT` asks for.
const ALIGN: usize = 4096;

/// Bytes gathered before one write: large writes, few system calls.
const CHUNK: usize = 4 << 20;

pub struct DirectWriter {
    file: File,
    direct: bool,
    /// `CHUNK + ALIGN` bytes; the aligned `CHUNK` of them start at `start`.
    mem: Vec<u8>,
    start: usize,
    /// Bytes gathered in the chunk.
    len: usize,
    /// Bytes written to the file before the chunk.
    written: u64,
}

impl DirectWriter {
    /// Creates (or truncates) `path` for writing, around the page cache where it can.
    pub fn create(path: &Path) -> io::Result<Self> {
        let (file, direct) = open(
            fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true),
            path,
        )?;
        let (mem, start) = aligned(CHUNK)?;
        Ok(Self {
            file,
            direct,
            mem,
            start,
            len: 0,
            written: 0,
        })
    }

    /// Writes what is gathered, sets the file to the exact length written, fsyncs it, and
    /// returns its length.
    pub fn finish(mut self) -> io::Result<u64> {
        let total = self.written + self.len as u64;
        // A direct write's last block is padded to the alignment, the padding cut off after.
        let last = if self.direct {
            self.len.div_ceil(ALIGN) * ALIGN
        } else {
            self.len
        };
        self.mem[self.start + self.len..self.start + last].fill(0);
        self.file
            .write_all(&self.mem[self.start..self.start + last])?;
        if self.direct {
            self.file.set_len(total)?;
        }
        self.file.sync_all()?;
        Ok(total)
    }

    fn write_chunk(&mut self) -> io::Result<()> {
        self.file
            .write_all(&self.mem[self.start..self.start + self.len])?;
        self.written += self.len as u64;
        self.len = 0;
        Ok(())
    }
}

impl Write for DirectWriter {
    #[inline]
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.len);
        let at = self.start + self.len;
        self.mem[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        if self.len == CHUNK {
            self.write_chunk()?;
        }
        Ok(n)
    }

    /// Chunks are written as they fill; what is left waits for [`DirectWriter::finish`],
    /// since a direct write must be a whole number of blocks.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads `len` bytes at `offset` of `path`, around the page cache where it can. Returns the
/// buffer read into and where in it the bytes are (a direct read starts on an aligned offset
/// of the file, into an aligned part of the buffer).
pub fn read_range(path: &Path, offset: u64, len: u64) -> io::Result<(Vec<u8>, Range<usize>)> {
    let len = usize::try_from(len).map_err(io::Error::other)?;
    let (mut file, direct) = open(fs::OpenOptions::new().read(true), path)?;
    if !direct {
        let mut out = vec![0; len];
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(&mut out)?;
        return Ok((out, 0..len));
    }
    let first = offset / ALIGN as u64 * ALIGN as u64;
    let skip = usize::try_from(offset - first).map_err(io::Error::other)?;
    let span = (skip + len).div_ceil(ALIGN) * ALIGN;
    let (mut buf, start) = aligned(span)?;
    file.seek(SeekFrom::Start(first))?;
    let mut got = 0;
    while got < skip + len {
        let want = (span - got).min(CHUNK);
        // Whole aligned chunks; only the read that meets the end of the file comes up short.
        let n = file.read(&mut buf[start + got..start + got + want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file ends before the range read",
            ));
        }
        got += n;
    }
    Ok((buf, start + skip..start + skip + len))
}

/// `len` zeroed bytes at an aligned place: the buffer, and where they start in it.
fn aligned(len: usize) -> io::Result<(Vec<u8>, usize)> {
    let buf = vec![0u8; len + ALIGN];
    let start = buf.as_ptr().align_offset(ALIGN);
    if start > ALIGN {
        return Err(io::Error::other("no aligned buffer for a direct transfer"));
    }
    Ok((buf, start))
}

/// Opens `path` with `options` around the page cache where the system allows it, through
/// it otherwise; says which.
fn open(options: &fs::OpenOptions, path: &Path) -> io::Result<(File, bool)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        match options.clone().custom_flags(libc::O_DIRECT).open(path) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((options.open(path)?, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lengths around the chunk and the alignment come back byte for byte, at their exact
    /// length (the padding of the last direct write is cut off).
    #[test]
    fn writes_exactly_what_it_was_given() {
        let dir = tempfile::tempdir().expect("tempdir");
        for len in [
            0,
            1,
            ALIGN - 1,
            ALIGN,
            ALIGN + 1,
            CHUNK,
            CHUNK + 7,
            2 * CHUNK + ALIGN,
        ] {
            let path = dir.path().join(format!("f{len}"));
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut w = DirectWriter::create(&path).expect("create");
            // In uneven pieces, as an encoder writes.
            for piece in data.chunks(1000) {
                w.write_all(piece).expect("write");
            }
            assert_eq!(w.finish().expect("finish"), len as u64);
            assert_eq!(fs::read(&path).expect("read"), data, "length {len}");
            // Read back whole and in ranges that start and end off the alignment.
            for (at, n) in [
                (0, len),
                (len / 3, len / 2),
                (len.saturating_sub(5), 5.min(len)),
            ] {
                let (buf, range) = read_range(&path, at as u64, n as u64).expect("read range");
                assert_eq!(&buf[range], &data[at..at + n], "length {len}, {n} at {at}");
            }
            assert!(
                read_range(&path, len as u64, 1).is_err(),
                "a range past the end is refused"
            );
        }
    }
}
