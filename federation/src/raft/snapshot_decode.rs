//! Decoding a snapshot's state part on two threads: the workloads map on one, the rest of the
//! state on the other.
//!
//! A restarted node spends most of its first seconds decoding its snapshot, and at a million
//! workloads that alone was half of the time a node took to be back in service (measured:
//! docs/benchmarks/scale.md). The workloads map is about half the bytes and half the
//! decoding; the other half is the indexes beside it (idempotency records and their expiry,
//! UIDs, submission order), the audit trail and the small parts. Neither half needs the other
//! to be decoded, so they are decoded at once.
//!
//! The bytes are the same MessagePack as ever: nothing changes on disk or on the wire. A scan
//! finds where the workloads map begins and ends by reading only MessagePack headers (a
//! string's or a binary's bytes are stepped over, never read), and the rest of the state is
//! decoded from the same bytes with an empty map in the workloads' place, so each field is
//! decoded by its own `Deserialize`, as strictly as before (a body cut short after the map is
//! refused by that decode). Anything the scan does not expect on its way to the map (another
//! layout, a truncated or corrupt body) falls back to decoding the whole body on one thread,
//! which then reports the error it always did.

use std::io::Read;
use std::ops::Range;

use crate::state::workloads::Workloads;

/// Why the scan could not find the workloads map. Never shown to anyone: the caller decodes
/// the whole body instead, and that decode names what is wrong.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScanError {
    #[error("the body ends inside a value at byte {0}")]
    Truncated(usize),
    #[error("byte {at} is the reserved MessagePack marker 0xc1")]
    Reserved { at: usize },
    #[error("expected a map at byte {0}")]
    NotAMap(usize),
    #[error("expected a string key at byte {0}")]
    NotAKey(usize),
    #[error("no field `{0}`")]
    Missing(&'static str),
}

/// Reads MessagePack headers from a byte slice.
struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn byte(&mut self) -> Result<u8, ScanError> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or(ScanError::Truncated(self.at))?;
        self.at += 1;
        Ok(b)
    }

    /// A big-endian unsigned integer of `n` bytes (1, 2 or 4).
    fn uint(&mut self, n: usize) -> Result<usize, ScanError> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(ScanError::Truncated(self.at))?;
        let b = self
            .bytes
            .get(self.at..end)
            .ok_or(ScanError::Truncated(self.at))?;
        self.at = end;
        Ok(b.iter().fold(0usize, |v, x| (v << 8) | usize::from(*x)))
    }

    fn step(&mut self, n: usize) -> Result<(), ScanError> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(ScanError::Truncated(self.at))?;
        if end > self.bytes.len() {
            return Err(ScanError::Truncated(self.at));
        }
        self.at = end;
        Ok(())
    }

    /// Steps over one whole value, however deeply nested: a count of the values still to
    /// step over instead of recursion, so no input can overflow the stack.
    fn skip_value(&mut self) -> Result<(), ScanError> {
        let mut pending: usize = 1;
        while pending > 0 {
            pending -= 1;
            let at = self.at;
            let m = self.byte()?;
            let (data, children) = match m {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
                0x80..=0x8f => (0, 2 * usize::from(m & 0x0f)),
                0x90..=0x9f => (0, usize::from(m & 0x0f)),
                0xa0..=0xbf => (usize::from(m & 0x1f), 0),
                0xc1 => return Err(ScanError::Reserved { at }),
                0xc4 | 0xd9 => (self.uint(1)?, 0),
                0xc5 | 0xda => (self.uint(2)?, 0),
                0xc6 | 0xdb => (self.uint(4)?, 0),
                0xc7 => (self.uint(1)? + 1, 0),
                0xc8 => (self.uint(2)? + 1, 0),
                0xc9 => (self.uint(4)? + 1, 0),
                0xca | 0xce | 0xd2 => (4, 0),
                0xcb | 0xcf | 0xd3 => (8, 0),
                0xcc | 0xd0 => (1, 0),
                0xcd | 0xd1 => (2, 0),
                0xd4 => (2, 0),
                0xd5 => (3, 0),
                0xd6 => (5, 0),
                0xd7 => (9, 0),
                0xd8 => (17, 0),
                0xdc => (0, self.uint(2)?),
                0xdd => (0, self.uint(4)?),
                0xde => (0, 2 * self.uint(2)?),
                0xdf => (0, 2usize.saturating_mul(self.uint(4)?)),
            };
            self.step(data)?;
            pending = pending
                .checked_add(children)
                .ok_or(ScanError::Truncated(at))?;
        }
        Ok(())
    }

    fn map_len(&mut self) -> Result<usize, ScanError> {
        let at = self.at;
        match self.byte()? {
            m @ 0x80..=0x8f => Ok(usize::from(m & 0x0f)),
            0xde => self.uint(2),
            0xdf => self.uint(4),
            _ => Err(ScanError::NotAMap(at)),
        }
    }

    fn key(&mut self) -> Result<&'a [u8], ScanError> {
        let at = self.at;
        let len = match self.byte()? {
            m @ 0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.uint(1)?,
            0xda => self.uint(2)?,
            0xdb => self.uint(4)?,
            _ => return Err(ScanError::NotAKey(at)),
        };
        let start = self.at;
        self.step(len)?;
        Ok(&self.bytes[start..self.at])
    }

    /// Within the map that starts here, moves to the start of the value under `name`,
    /// stepping over only the values before it.
    fn enter(&mut self, name: &'static str) -> Result<(), ScanError> {
        for _ in 0..self.map_len()? {
            if self.key()? == name.as_bytes() {
                return Ok(());
            }
            self.skip_value()?;
        }
        Err(ScanError::Missing(name))
    }

    /// Within the map that starts here, the byte range of the value under `name`.
    fn field(&mut self, name: &'static str) -> Result<Range<usize>, ScanError> {
        self.enter(name)?;
        let start = self.at;
        self.skip_value()?;
        Ok(start..self.at)
    }
}

/// Where the workloads map lies in a snapshot's state part: `{"v1": {.., "state": {..,
/// "workloads": <here>, ..}, ..}}`.
pub(crate) fn workloads_range(bytes: &[u8]) -> Result<Range<usize>, ScanError> {
    // Only the values before each key on the way are stepped over, and the workloads map
    // itself once, to find its end.
    let mut s = Scanner { bytes, at: 0 };
    s.enter("v1")?;
    s.enter("state")?;
    s.field("workloads")
}

/// Decodes `bytes` as `T` with its workloads map decoded on a thread of its own; `set` puts
/// that map into the decoded value. Falls back to one decode of the whole when the scan
/// fails.
pub(crate) fn decode_split<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    set: impl FnOnce(&mut T, Workloads),
) -> Result<T, rmp_serde::decode::Error> {
    let range = match workloads_range(bytes) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "snapshot decoded on one thread");
            return rmp_serde::from_slice(bytes);
        }
    };
    // An empty map in the workloads' place: the same field, so the rest decodes as strictly
    // as the whole did.
    const EMPTY_MAP: [u8; 1] = [0x80];
    let (before, workloads, after) = (
        &bytes[..range.start],
        &bytes[range.clone()],
        &bytes[range.end..],
    );
    let (map, rest) = crate::two_threads::both(
        "snapshot-decode",
        || rmp_serde::from_slice::<Workloads>(workloads),
        || rmp_serde::from_read::<_, T>(before.chain(&EMPTY_MAP[..]).chain(after)),
    );
    let map = map.unwrap_or_else(|_| {
        Err(rmp_serde::decode::Error::Uncategorized(
            "the thread decoding the workloads panicked".into(),
        ))
    });
    let mut rest = rest?;
    set(&mut rest, map?);
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of MessagePack value, nested: the scan steps over each exactly.
    #[test]
    fn the_scan_steps_over_every_kind_of_value() {
        #[derive(serde::Serialize)]
        struct All {
            small: u8,
            neg: i8,
            big: u64,
            wide: i64,
            f: f32,
            d: f64,
            none: Option<u8>,
            yes: bool,
            short: String,
            long: String,
            longer: String,
            #[serde(with = "serde_bytes_like")]
            bin: Vec<u8>,
            list: Vec<u32>,
            long_list: Vec<u8>,
            nested: std::collections::BTreeMap<String, Vec<Option<String>>>,
            many: std::collections::BTreeMap<u32, u32>,
        }
        mod serde_bytes_like {
            pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(v)
            }
        }
        let v = All {
            small: 7,
            neg: -100,
            big: u64::MAX,
            wide: i64::MIN,
            f: 1.5,
            d: -2.25,
            none: None,
            yes: true,
            short: "abc".into(),
            long: "x".repeat(300),
            longer: "y".repeat(70_000),
            bin: vec![1; 40_000],
            list: (0..20).collect(),
            long_list: vec![9; 70_000],
            nested: [("k".to_string(), vec![None, Some("v".into())])].into(),
            many: (0..100).map(|i| (i, i * 1000)).collect(),
        };
        let mut bytes = rmp_serde::to_vec_named(&v).expect("encode");
        bytes.extend_from_slice(&[0xc3, 0x01]);
        let mut s = Scanner {
            bytes: &bytes,
            at: 0,
        };
        s.skip_value().expect("skip");
        assert_eq!(s.at, bytes.len() - 2, "stepped over exactly the value");
        // Each field is found, and its range decodes to the field's value.
        for (name, want) in [("short", "abc"), ("long", &*"x".repeat(300))] {
            let mut s = Scanner {
                bytes: &bytes,
                at: 0,
            };
            let r = match name {
                "short" => s.field("short"),
                _ => s.field("long"),
            }
            .expect("found");
            let got: String = rmp_serde::from_slice(&bytes[r]).expect("decode");
            assert_eq!(got, want);
        }
        let mut s = Scanner {
            bytes: &bytes,
            at: 0,
        };
        assert!(matches!(s.field("absent"), Err(ScanError::Missing(_))));
        // Cut anywhere inside, the scan says so instead of reading past the end.
        for cut in [1, 10, 500, 40_000, 100_000, bytes.len() - 3] {
            let mut s = Scanner {
                bytes: &bytes[..cut],
                at: 0,
            };
            assert!(s.skip_value().is_err(), "cut at {cut}");
        }
        let mut s = Scanner {
            bytes: &[0x92, 0xc1, 0x00],
            at: 0,
        };
        assert!(matches!(s.skip_value(), Err(ScanError::Reserved { at: 1 })));
    }
}
