//! Snapshots on disk, written atomically.
//!
//! A snapshot is written to a temporary file, fsynced, renamed over its final name, and the
//! directory is fsynced, so a crash at any point leaves either the old snapshot or the new one,
//! never a torn file.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::types::SnapshotMeta;

const FILE_NAME: &str = "snapshot.bin";

/// The on-disk form of a snapshot: its meta and the encoded state machine.
#[derive(Serialize, Deserialize)]
pub struct StoredSnapshot {
    /// On-disk format version; bump with explicit upgrade code.
    pub format: u32,
    pub meta: SnapshotMeta,
    #[serde(with = "serde_bytes_vec")]
    pub data: Vec<u8>,
}

pub const FORMAT_V1: u32 = 1;

mod serde_bytes_vec {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

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

    /// Writes the snapshot atomically and durably.
    pub fn save(&self, snap: &StoredSnapshot) -> io::Result<()> {
        let bytes = rmp_serde::to_vec_named(snap).map_err(io::Error::other)?;
        let tmp = self.dir.join(format!("{FILE_NAME}.tmp"));
        {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.path())?;
        fs::File::open(&self.dir)?.sync_all()?;
        Ok(())
    }

    /// The latest complete snapshot, if any.
    pub fn load(&self) -> io::Result<Option<StoredSnapshot>> {
        let bytes = match fs::read(self.path()) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let snap: StoredSnapshot = rmp_serde::from_slice(&bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        if snap.format != FORMAT_V1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unsupported snapshot format {}", snap.format),
            ));
        }
        Ok(Some(snap))
    }
}
