//! Snapshots on disk, written atomically and streamed.
//!
//! A snapshot is written to a temporary file, fsynced, renamed over its final name, and the
//! directory is fsynced, so a crash at any point leaves either the old snapshot or the new one,
//! never a torn file.
//!
//! The file (format 2) is a short header and then the state part's bytes as they are encoded:
//!
//! ```text
//! "TWSNAP2\n" | header length (u32, little endian) | header (MessagePack: format, meta) | body
//! ```
//!
//! so the state is encoded straight into the file, never into a buffer the size of the
//! state first, and a reader finds the body at an offset without decoding it. Format 1 (one
//! MessagePack map holding the meta and the body as one byte string) is still read; it
//! needed the body in memory twice to write (encoded, then encoded again inside the map) and
//! twice to read: those buffers were a large part of the leader's heap at its peak (a
//! heaptrack profile of `tideway server` under `tw_post.lua`; measured:
//! docs/benchmarks/memory.md).

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::direct_io::DirectWriter;
use super::types::SnapshotMeta;

const FILE_NAME: &str = "snapshot.bin";

/// The first bytes of a format-2 file. A format-1 file starts with a MessagePack map marker
/// (0x80-0x8f or 0xde/0xdf), never with `T`.
const MAGIC: &[u8; 8] = b"TWSNAP2\n";

pub const FORMAT_V1: u32 = 1;
pub const FORMAT_V2: u32 = 2;

/// Headers are a few hundred bytes (a log id and the membership); anything larger is not a
/// header of ours.
const MAX_HEADER_BYTES: u32 = 1 << 20;

/// The on-disk form of a format-1 snapshot: its meta and the encoded state machine.
#[derive(Deserialize)]
struct StoredSnapshotV1 {
    format: u32,
    meta: SnapshotMeta,
    #[serde(with = "serde_bytes_vec")]
    data: Vec<u8>,
}

/// The header of a format-2 snapshot.
#[derive(Serialize, Deserialize)]
struct Header {
    format: u32,
    meta: SnapshotMeta,
}

/// A snapshot read from disk: its meta and its state part (in `buf`, at `range`: a read
/// around the page cache lands at an aligned place in its buffer).
#[derive(Debug)]
pub struct LoadedSnapshot {
    pub meta: SnapshotMeta,
    buf: Vec<u8>,
    range: std::ops::Range<usize>,
}

impl LoadedSnapshot {
    /// The encoded state part.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }
}

/// The state part of the latest snapshot on disk, not read yet: the open file keeps these
/// bytes readable even after a newer snapshot is renamed over the name.
#[derive(Debug)]
pub struct SnapshotBody {
    file: fs::File,
    offset: u64,
    len: u64,
}

impl SnapshotBody {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the whole body (blocking I/O).
    pub fn read_all(mut self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len).map_err(io::Error::other)?;
        let mut out = vec![0; len];
        self.file.seek(SeekFrom::Start(self.offset))?;
        self.file.read_exact(&mut out)?;
        Ok(out)
    }
}

mod serde_bytes_vec {
    use serde::Deserializer;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

#[derive(Debug, Clone)]
pub struct SnapshotDir {
    dir: PathBuf,
}

impl SnapshotDir {
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// Writes a snapshot atomically and durably, its body written by `body` into the file as
    /// it is encoded. Returns the body as written (its file stays open for reading).
    pub fn save_with(
        &self,
        meta: &SnapshotMeta,
        body: impl FnOnce(&mut DirectWriter) -> io::Result<()>,
    ) -> io::Result<SnapshotBody> {
        let header = rmp_serde::to_vec_named(&Header {
            format: FORMAT_V2,
            meta: meta.clone(),
        })
        .map_err(io::Error::other)?;
        let header_len = u32::try_from(header.len()).map_err(io::Error::other)?;
        let tmp = self.dir.join(format!("{FILE_NAME}.tmp"));
        let (file, written) = {
            // Written around the page cache (see `direct_io`), read back through it: the
            // reading handle is opened on the same file before the rename.
            let mut w = DirectWriter::create(&tmp)?;
            w.write_all(MAGIC)?;
            w.write_all(&header_len.to_le_bytes())?;
            w.write_all(&header)?;
            body(&mut w)?;
            let written = w.finish()?;
            (fs::File::open(&tmp)?, written)
        };
        fs::rename(&tmp, self.path())?;
        fs::File::open(&self.dir)?.sync_all()?;
        let offset = body_offset(header_len);
        Ok(SnapshotBody {
            file,
            offset,
            len: written - offset,
        })
    }

    /// Writes a snapshot whose body is in memory (one received from the leader).
    pub fn save(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        self.save_with(meta, |w| w.write_all(data)).map(|_| ())
    }

    /// The latest complete snapshot, read whole, if any.
    pub fn load(&self) -> io::Result<Option<LoadedSnapshot>> {
        let Some((meta, body)) = self.latest()? else {
            return Ok(None);
        };
        let (buf, range) = match body {
            Body::Bytes(b) => {
                let n = b.len();
                (b, 0..n)
            }
            // Around the page cache, as it was written (see `direct_io`). Nothing writes a
            // snapshot while a node loads one, so the name still holds the same file.
            Body::File(f) => super::direct_io::read_range(&self.path(), f.offset, f.len)?,
        };
        Ok(Some(LoadedSnapshot { meta, buf, range }))
    }

    /// The meta of the latest snapshot and its body, read only as far as the header (a
    /// format-1 file is read whole: it has no header to stop at).
    pub fn latest(&self) -> io::Result<Option<(SnapshotMeta, Body)>> {
        let mut f = match fs::File::open(self.path()) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let size = f.metadata()?.len();
        let mut start = Vec::with_capacity(MAGIC.len());
        (&mut f).take(MAGIC.len() as u64).read_to_end(&mut start)?;
        if start != MAGIC {
            // Format 1: one MessagePack map, read whole.
            f.read_to_end(&mut start)?;
            let snap: StoredSnapshotV1 =
                rmp_serde::from_slice(&start).map_err(|e| invalid(e.to_string()))?;
            if snap.format != FORMAT_V1 {
                return Err(invalid(format!(
                    "unsupported snapshot format {}",
                    snap.format
                )));
            }
            return Ok(Some((snap.meta, Body::Bytes(snap.data))));
        }
        let mut len = [0u8; 4];
        f.read_exact(&mut len)?;
        let header_len = u32::from_le_bytes(len);
        if header_len > MAX_HEADER_BYTES {
            return Err(invalid(format!("snapshot header of {header_len} bytes")));
        }
        let mut header = vec![0; header_len as usize];
        f.read_exact(&mut header)?;
        let header: Header = rmp_serde::from_slice(&header).map_err(|e| invalid(e.to_string()))?;
        if header.format != FORMAT_V2 {
            return Err(invalid(format!(
                "unsupported snapshot format {}",
                header.format
            )));
        }
        let offset = body_offset(header_len);
        let len = size
            .checked_sub(offset)
            .ok_or_else(|| invalid("snapshot file shorter than its header"))?;
        Ok(Some((
            header.meta,
            Body::File(SnapshotBody {
                file: f,
                offset,
                len,
            }),
        )))
    }
}

/// Where a format-2 file's body starts, after the magic, the length and the header.
fn body_offset(header_len: u32) -> u64 {
    MAGIC.len() as u64 + 4 + u64::from(header_len)
}

/// A snapshot's state part, where it is.
#[derive(Debug)]
pub enum Body {
    /// In memory: received from the leader, or read from a format-1 file.
    Bytes(Vec<u8>),
    /// In the snapshot file, read when it is needed (sent to a follower).
    File(SnapshotBody),
}

impl Body {
    pub fn len(&self) -> u64 {
        match self {
            Self::Bytes(b) => b.len() as u64,
            Self::File(f) => f.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes (blocking I/O for a file).
    pub fn into_bytes(self) -> io::Result<Vec<u8>> {
        match self {
            Self::Bytes(b) => Ok(b),
            Self::File(f) => f.read_all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::types::{StoredMembership, TypeConfig};

    fn meta(index: u64) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: Some(openraft::testing::log_id::<TypeConfig>(3, 1, index)),
            last_membership: StoredMembership::default(),
        }
    }

    #[test]
    fn a_streamed_snapshot_reads_back_and_its_body_is_found_without_reading_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let snaps = SnapshotDir::open(dir.path()).expect("open");
        assert!(snaps.load().expect("load").is_none());
        let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let written = snaps
            .save_with(&meta(7), |w| {
                for c in body.chunks(777) {
                    w.write_all(c)?;
                }
                Ok(())
            })
            .expect("save");
        assert_eq!(written.len(), body.len() as u64);
        assert_eq!(written.read_all().expect("read back"), body);
        let (m, b) = snaps.latest().expect("latest").expect("some");
        assert_eq!(m, meta(7));
        assert!(matches!(b, Body::File(_)), "format 2 is not read whole");
        assert_eq!(b.len(), body.len() as u64);
        // A newer snapshot renamed over the name leaves the opened body readable.
        snaps.save(&meta(9), b"newer").expect("save newer");
        assert_eq!(b.into_bytes().expect("read"), body);
        let loaded = snaps.load().expect("load").expect("some");
        assert_eq!((&loaded.meta, loaded.data()), (&meta(9), &b"newer"[..]));
    }

    #[test]
    fn a_format_1_file_still_loads() {
        #[derive(Serialize)]
        struct V1<'a> {
            format: u32,
            meta: SnapshotMeta,
            #[serde(with = "serde_bytes_ser")]
            data: &'a [u8],
        }
        mod serde_bytes_ser {
            pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(v)
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let snaps = SnapshotDir::open(dir.path()).expect("open");
        let bytes = rmp_serde::to_vec_named(&V1 {
            format: FORMAT_V1,
            meta: meta(5),
            data: b"state",
        })
        .expect("encode");
        fs::write(snaps.path(), bytes).expect("write");
        let loaded = snaps.load().expect("load").expect("some");
        assert_eq!((&loaded.meta, loaded.data()), (&meta(5), &b"state"[..]));
        let (m, b) = snaps.latest().expect("latest").expect("some");
        assert_eq!(m, meta(5));
        assert_eq!(b.into_bytes().expect("bytes"), b"state");
    }

    #[test]
    fn a_truncated_or_foreign_file_is_an_error_not_a_snapshot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let snaps = SnapshotDir::open(dir.path()).expect("open");
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&100u32.to_le_bytes());
        f.extend_from_slice(b"short");
        fs::write(snaps.path(), &f).expect("write");
        assert!(snaps.load().is_err());
        fs::write(snaps.path(), b"garbage").expect("write");
        let e = snaps.load().expect_err("garbage");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&u32::MAX.to_le_bytes());
        fs::write(snaps.path(), &f).expect("write");
        assert!(snaps.load().is_err());
    }
}
