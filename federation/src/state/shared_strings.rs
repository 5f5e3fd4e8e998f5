//! One copy of each name, UID and idempotency key in a state decoded from a snapshot.
//!
//! Apply shares them: the workloads map's key, the submission order, the UID index, the
//! idempotency records and their expiry set hold one `Arc<str>` per name, UID and key (and a
//! submission without a client key is keyed by its UID, so that is one string too). Decoding
//! gives every occurrence an allocation of its own, so a node that loaded a snapshot held
//! more per workload than one that applied the same log: enough to take a leader at a
//! million workloads from within 2 GiB to over it after a restart (measured:
//! docs/benchmarks/memory.md). The encoding is strings either way, so this changes no bytes
//! on disk or on the wire.

use std::collections::HashMap;
use std::sync::Arc;

use super::{FederationState, IdempotencyRecord};

impl FederationState {
    /// Points every index at one copy of each string: the workloads map's keys for names,
    /// the UID index's keys for UIDs, the idempotency map's keys for keys. A string that is
    /// not in the map it should come from keeps its own copy, so the state is equal before
    /// and after.
    pub fn share_strings(&mut self) {
        // Two threads: a million hash inserts and ordered-map updates per index take seconds,
        // and a restarted node waits for them before it serves (see `raft::snapshot_decode`).
        // First the two lookups, each from its own map; then the order and UID index are
        // updated on one thread while the idempotency records and their expiry are rebuilt on
        // this one (whose heap keeps them).
        let Self {
            workloads,
            order,
            uids,
            idempotency,
            idempotency_expiry,
            ..
        } = self;
        let (names, uid_keys) = crate::two_threads::both(
            "share-strings",
            || -> HashMap<&str, &Arc<str>> {
                workloads.keys().map(|k| (&**k, k.shared())).collect()
            },
            || -> Vec<Arc<str>> { uids.keys().cloned().collect() },
        );
        let names = names.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let name = |n: &Arc<str>| names.get(&**n).map_or_else(|| n.clone(), |k| Arc::clone(k));
        let uid_of: HashMap<&str, &Arc<str>> = uid_keys.iter().map(|k| (&**k, k)).collect();
        let uid = |u: &Arc<str>| {
            uid_of
                .get(&**u)
                .map_or_else(|| u.clone(), |k| Arc::clone(k))
        };
        let (updated, (records, expiry)) = crate::two_threads::both(
            "share-strings",
            || {
                // The order and the UID index keep their keys: their values change in place,
                // which allocates nothing (a decoded map is not shared, so no node is copied).
                let seqs: Vec<u64> = order.keys().copied().collect();
                for seq in seqs {
                    if let Some(n) = order.get_mut(&seq) {
                        *n = name(n);
                    }
                }
                for u in &uid_keys {
                    if let Some(n) = uids.get_mut(&**u) {
                        *n = name(n);
                    }
                }
            },
            || {
                // A key that is its workload's UID becomes the UID index's string: a new key,
                // so the records' map is rebuilt, and with it the expiry set that names the
                // keys.
                let mut keys: HashMap<&str, Arc<str>> = HashMap::with_capacity(idempotency.len());
                let records: imbl::OrdMap<Arc<str>, IdempotencyRecord> = idempotency
                    .iter()
                    .map(|(k, r)| {
                        let rec_uid = r.uid.as_ref().map(uid);
                        let key = match &rec_uid {
                            Some(u) if **u == **k => u.clone(),
                            _ => k.clone(),
                        };
                        keys.insert(&**k, key.clone());
                        let rec = IdempotencyRecord {
                            workload: name(&r.workload),
                            at: r.at,
                            uid: rec_uid,
                            digest: r.digest,
                        };
                        (key, rec)
                    })
                    .collect();
                let expiry: imbl::OrdSet<_> = idempotency_expiry
                    .iter()
                    .map(|(at, k)| (*at, keys.get(&**k).map_or_else(|| k.clone(), Arc::clone)))
                    .collect();
                (records, expiry)
            },
        );
        updated.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        *idempotency = records;
        *idempotency_expiry = expiry;
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::{PodSet, Workload, WorkloadClass, WorkloadSpec};

    use super::*;
    use crate::state::command::Command;

    fn submit(s: &mut FederationState, i: u64, key: Option<&str>) {
        let spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("p", 1, 1, "H100")],
        );
        let mut w = Workload::new(format!("w{i}"), spec);
        let uid = format!("00000000-0000-4000-8000-{i:012}");
        w.metadata.uid = Some(uid.clone());
        let at = chrono::Utc
            .timestamp_opt(1_800_000_000 + i as i64, 0)
            .single()
            .expect("time");
        s.apply(
            i,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: key.map_or(uid, str::to_string),
                at,
                digest: None,
            },
        );
    }

    #[test]
    fn a_decoded_state_shares_its_strings_again_and_stays_equal() {
        let mut s = FederationState::default();
        for i in 1..=40 {
            // Every third with a client's own key, the rest keyed by their UID.
            let key = format!("client-{i}");
            submit(&mut s, i, (i % 3 == 0).then_some(key.as_str()));
        }
        assert_eq!(s.workloads.len(), 40);
        assert_eq!(s.idempotency.len(), 40);
        let bytes = rmp_serde::to_vec_named(&s).expect("encode");
        let mut back: FederationState = rmp_serde::from_slice(&bytes).expect("decode");
        assert!(back == s);
        let name_of_first = back.order.values().next().expect("order").clone();
        let (key, _) = back
            .workloads
            .get_key_value(&*name_of_first)
            .expect("workload");
        assert!(
            !Arc::ptr_eq(key.shared(), &name_of_first),
            "decoding copies"
        );

        back.share_strings();
        assert!(back == s, "the same state");
        assert_eq!(rmp_serde::to_vec_named(&back).expect("encode"), bytes);
        for (_, n) in back.order.iter() {
            let (key, _) = back.workloads.get_key_value(&**n).expect("workload");
            assert!(Arc::ptr_eq(key.shared(), n), "order shares the map's key");
        }
        for (u, n) in back.uids.iter() {
            let (key, _) = back.workloads.get_key_value(&**n).expect("workload");
            assert!(
                Arc::ptr_eq(key.shared(), n),
                "the UID index shares the name"
            );
            let (k, rec) = back
                .idempotency
                .iter()
                .find(|(_, r)| r.uid.as_deref() == Some(&**u))
                .expect("its record");
            assert!(rec.uid.as_ref().is_some_and(|x| Arc::ptr_eq(x, u)));
            assert!(Arc::ptr_eq(&rec.workload, n));
            if **k == **u {
                assert!(Arc::ptr_eq(k, u), "a UID key is the UID index's string");
            }
        }
        for (_, k) in back.idempotency_expiry.iter() {
            let (key, _) = back.idempotency.get_key_value(&**k).expect("record");
            assert!(Arc::ptr_eq(key, k), "the expiry shares the record's key");
        }
    }
}
