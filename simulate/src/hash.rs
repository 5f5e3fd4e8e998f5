//! A fast, fixed-key hasher for the simulator's lookup maps (uid -> job, seen sets).
//!
//! Every decision of every cycle is looked up by uid; std's SipHash showed up at 10% of a
//! scheduler-mode profile. This is the multiply-rotate hash of rustc's FxHasher, 8 bytes at
//! a time. Fixed keys also keep iteration order identical between runs, although nothing
//! here iterates a hashed map to make a decision.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0x517c_c1b7_2722_0a95;

#[derive(Debug, Clone, Copy, Default)]
pub struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinguishes_similar_uids() {
        let m: FastMap<String, u32> = (0..10_000u32).map(|i| (format!("philly-{i}"), i)).collect();
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get("philly-9999"), Some(&9999));
        assert_eq!(m.get("philly-10000"), None);
    }
}
