//! Workload names to their submission sequence numbers, for the cycle's copy of the backlog
//! ([`super::backlog`]), in a table that keeps each name's hash beside it.
//!
//! A `HashMap<Arc<str>, u64>` rehashes every name each time it grows: at a million names that
//! is a million strings read from all over the heap, all in the one cycle that crossed the
//! threshold (the 1M scale bench logged such cycles at several times the length of the cycles
//! around them; measured: docs/benchmarks/scale.md). Kept with its name, the hash is read
//! instead of the name, and the same growth costs a fraction of that.

use std::hash::BuildHasher;
use std::sync::Arc;

/// Names to sequence numbers. The hash is keyed per index (std's `RandomState`), since names
/// are chosen by users.
#[derive(Default)]
pub struct NameIndex {
    seed: std::hash::RandomState,
    /// (hash of the name, the name, its sequence number).
    table: hashbrown::HashTable<(u64, Arc<str>, u64)>,
}

impl NameIndex {
    fn hash(&self, name: &str) -> u64 {
        self.seed.hash_one(name)
    }

    /// The sequence number of `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.table
            .find(self.hash(name), |(_, n, _)| &**n == name)
            .map(|(_, _, seq)| *seq)
    }

    /// Files `name` at `seq`, replacing what it was filed at.
    pub fn insert(&mut self, name: Arc<str>, seq: u64) {
        let hash = self.hash(&name);
        match self
            .table
            .entry(hash, |(_, n, _)| *n == name, |(h, _, _)| *h)
        {
            hashbrown::hash_table::Entry::Occupied(mut e) => e.get_mut().2 = seq,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((hash, name, seq));
            }
        }
    }

    /// Forgets `name`; answers the sequence number it was filed at.
    pub fn remove(&mut self, name: &str) -> Option<u64> {
        let hash = self.hash(name);
        let (entry, _) = self
            .table
            .find_entry(hash, |(_, n, _)| &**n == name)
            .ok()?
            .remove();
        Some(entry.2)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }
}

impl std::fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NameIndex")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The index answers as a `HashMap` from names to numbers does, through growth and
        /// removals (names drawn from a small set, so they repeat and replace).
        #[test]
        fn it_answers_as_a_map_does(
            ops in proptest::collection::vec((0u8..3, 0u16..400, any::<u64>()), 1..2000)
        ) {
            let mut index = NameIndex::default();
            let mut map: HashMap<String, u64> = HashMap::new();
            for (op, n, seq) in ops {
                let name = format!("w-{n}");
                match op {
                    0 | 1 => {
                        index.insert(name.as_str().into(), seq);
                        map.insert(name.clone(), seq);
                    }
                    _ => prop_assert_eq!(index.remove(&name), map.remove(&name)),
                }
                prop_assert_eq!(index.get(&name), map.get(&name).copied());
                prop_assert_eq!(index.len(), map.len());
            }
            for (name, seq) in &map {
                prop_assert_eq!(index.get(name), Some(*seq));
            }
            prop_assert_eq!(index.get("absent"), None);
        }
    }
}
