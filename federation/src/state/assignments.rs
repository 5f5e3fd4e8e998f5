//! The assignment records by member cluster, with a per-cluster revision journal: what lets
//! an agent's long-poll answer "what changed after revision r" without scanning every record
//! of its cluster.
//!
//! The long-poll wakes on every applied entry (each submission too), so a scan cost
//! O(assignments) once per connected agent per entry, under the state lock (measured:
//! docs/benchmarks/scale.md). The records are private: every change goes through
//! [`Assignments::insert`], [`Assignments::touch`] or a removal, which set the record's
//! revision and journal it, so no apply path can change what an agent reads without the
//! journal knowing. The journal is
//! derived: not serialized (the snapshot and the state digest hold the records only, as
//! before), rebuilt when the records are decoded from a snapshot. Revisions only grow, so a
//! journal of (revision, UID) appended on each change is enough; entries made stale by a later
//! change or a removal are skipped at read time and dropped when the journal is rebuilt (once
//! it holds twice as many entries as there are records, so its cost stays amortized O(1)).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tideway_api::agent::AssignmentRecord;

/// Journal entries kept beyond twice the records before a rebuild, so a small state is not
/// rebuilt on every change.
const SLACK: usize = 1024;

/// One cluster's records by workload UID. Persistent, each record shared (as the workloads
/// are, see [`super::workloads`]): a copy of the state under its lock is O(1) in the running
/// work, and a change after a copy clones only the changed record.
pub type ClusterAssignments = imbl::OrdMap<String, Arc<AssignmentRecord>>;

/// Assignment records by member cluster, then workload UID, and their revision journal.
#[derive(Debug, Clone, Default)]
pub struct Assignments {
    /// Persistent, as the maps inside it are: a copy of the state under its lock shares
    /// this map instead of cloning a name per member cluster.
    records: imbl::OrdMap<String, ClusterAssignments>,
    /// Member cluster → revision → UIDs whose record changed at that revision.
    journal: imbl::OrdMap<String, imbl::OrdMap<u64, Vec<String>>>,
    /// Entries in `journal`.
    entries: usize,
    /// Records in `records`.
    len: usize,
}

/// Two states with the same records are equal whatever their journals hold (a restored node
/// has no stale entries; a node that applied the log may).
impl PartialEq for Assignments {
    fn eq(&self, other: &Self) -> bool {
        self.records == other.records
    }
}

impl Serialize for Assignments {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.records.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Assignments {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::from_records(BTreeMap::deserialize(d)?))
    }
}

impl std::ops::Index<&str> for Assignments {
    type Output = ClusterAssignments;

    /// Test and debug convenience, as on a map: panics if the cluster has no records.
    fn index(&self, cluster: &str) -> &ClusterAssignments {
        &self.records[cluster]
    }
}

impl Assignments {
    /// The records, with a journal built from them: one entry per record, at its revision.
    pub fn from_records(records: impl IntoIterator<Item = (String, ClusterAssignments)>) -> Self {
        let records: imbl::OrdMap<String, ClusterAssignments> = records.into_iter().collect();
        let mut journal: imbl::OrdMap<String, imbl::OrdMap<u64, Vec<String>>> = imbl::OrdMap::new();
        let mut len = 0;
        for (cluster, recs) in &records {
            let revs = journal.entry(cluster.clone()).or_default();
            for (uid, rec) in recs.iter() {
                revs.entry(rec.revision).or_default().push(uid.clone());
                len += 1;
            }
        }
        Self {
            records,
            journal,
            entries: len,
            len,
        }
    }

    /// One cluster's records.
    pub fn get(&self, cluster: &str) -> Option<&ClusterAssignments> {
        self.records.get(cluster)
    }

    /// The record of `uid` on `cluster`.
    pub fn record(&self, cluster: &str, uid: &str) -> Option<&AssignmentRecord> {
        self.records
            .get(cluster)
            .and_then(|m| m.get(uid))
            .map(|r| &**r)
    }

    /// Whether `cluster` has any records.
    pub fn contains_key(&self, cluster: &str) -> bool {
        self.records.contains_key(cluster)
    }

    /// Every cluster's records.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &ClusterAssignments)> {
        self.records.iter()
    }

    /// Stores `record` for `uid` on `cluster` (replacing any) and journals it at its revision.
    pub fn insert(&mut self, cluster: &str, uid: &str, record: AssignmentRecord) {
        let revision = record.revision;
        if self
            .records
            .entry(cluster.to_string())
            .or_default()
            .insert(uid.to_string(), Arc::new(record))
            .is_none()
        {
            self.len += 1;
        }
        self.journal_change(cluster, uid, revision);
    }

    /// The record of `uid` on `cluster`, to change at log index `revision`: its revision is
    /// set and the change journaled before it is handed out, so call this only to change it.
    pub fn touch(
        &mut self,
        cluster: &str,
        uid: &str,
        revision: u64,
    ) -> Option<&mut AssignmentRecord> {
        let known = self
            .records
            .get(cluster)
            .is_some_and(|m| m.contains_key(uid));
        if !known {
            return None;
        }
        self.journal_change(cluster, uid, revision);
        let rec = Arc::make_mut(self.records.get_mut(cluster)?.get_mut(uid)?);
        rec.revision = revision;
        Some(rec)
    }

    /// A record to change in a test without journaling it (to set up a case).
    #[cfg(test)]
    pub fn record_mut_untracked(
        &mut self,
        cluster: &str,
        uid: &str,
    ) -> Option<&mut AssignmentRecord> {
        self.records
            .get_mut(cluster)?
            .get_mut(uid)
            .map(Arc::make_mut)
    }

    /// Forgets a removed member's records and journal.
    pub fn remove_cluster(&mut self, cluster: &str) {
        if let Some(recs) = self.records.remove(cluster) {
            self.len -= recs.len();
        }
        if let Some(revs) = self.journal.remove(cluster) {
            self.entries -= revs.values().map(Vec::len).sum::<usize>();
        }
    }

    /// Forgets `uid`'s records on every cluster (a compacted workload). Its journal entries
    /// go stale and are skipped: the agent never sees a removal, as before.
    pub fn remove_uid(&mut self, uid: &str) {
        // Only the clusters that hold it are touched, so a copy shares the others.
        let holding: Vec<String> = self
            .records
            .iter()
            .filter(|(_, recs)| recs.contains_key(uid))
            .map(|(c, _)| c.clone())
            .collect();
        for cluster in holding {
            if let Some(recs) = self.records.get_mut(&cluster)
                && recs.remove(uid).is_some()
            {
                self.len -= 1;
            }
        }
    }

    fn journal_change(&mut self, cluster: &str, uid: &str, revision: u64) {
        self.journal
            .entry(cluster.to_string())
            .or_default()
            .entry(revision)
            .or_default()
            .push(uid.to_string());
        self.entries += 1;
        if self.entries > 2 * self.len + SLACK {
            *self = Self::from_records(std::mem::take(&mut self.records));
        }
    }

    /// Assignments of `cluster` changed after `after`, in revision order (UID order within a
    /// revision: the order a scan gives).
    pub fn after(&self, cluster: &str, after: u64) -> Vec<AssignmentRecord> {
        let (Some(recs), Some(revs)) = (self.records.get(cluster), self.journal.get(cluster))
        else {
            return Vec::new();
        };
        let mut seen = BTreeSet::new();
        let mut found: Vec<(&String, &AssignmentRecord)> = revs
            .range(after.saturating_add(1)..)
            .flat_map(|(_, uids)| uids)
            .filter(|uid| seen.insert(uid.as_str()))
            .filter_map(|uid| recs.get_key_value(uid))
            .map(|(uid, r)| (uid, &**r))
            .filter(|(_, r)| r.revision > after)
            .collect();
        found.sort_by(|a, b| (a.1.revision, a.0).cmp(&(b.1.revision, b.0)));
        found.into_iter().map(|(_, r)| r.clone()).collect()
    }

    /// What [`Assignments::after`] must answer, by a scan of the cluster's records.
    pub fn scan_after(&self, cluster: &str, after: u64) -> Vec<AssignmentRecord> {
        let mut out: Vec<(&String, &AssignmentRecord)> = self
            .records
            .get(cluster)
            .map(|m| {
                m.iter()
                    .map(|(uid, r)| (uid, &**r))
                    .filter(|(_, r)| r.revision > after)
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| (a.1.revision, a.0).cmp(&(b.1.revision, b.0)));
        out.into_iter().map(|(_, r)| r.clone()).collect()
    }

    /// Journal entries held (for the trimming test).
    #[cfg(test)]
    fn journal_entries(&self) -> usize {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::agent::{Assignment, Desired};
    use tideway_api::{PodSet, Workload, WorkloadClass, WorkloadSpec};

    use super::*;

    fn record(uid: &str, revision: u64) -> AssignmentRecord {
        let spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("p", 1, 1, "H100")],
        );
        let mut w = Workload::new(uid, spec);
        w.metadata.uid = Some(uid.into());
        AssignmentRecord {
            revision,
            assignment: Assignment {
                workload: w,
                pool: None,
                attempt: 1,
            },
            desired: Desired::Run,
            checkpoint_by: None,
        }
    }

    #[test]
    fn the_journal_is_trimmed_to_the_records() {
        let mut all = Assignments::default();
        all.insert("a", "u", record("u", 1));
        for revision in 2..=10_000u64 {
            if let Some(rec) = all.touch("a", "u", revision) {
                rec.desired = Desired::Cancel;
            }
        }
        assert!(
            all.journal_entries() <= 2 + SLACK,
            "{} entries",
            all.journal_entries()
        );
        assert_eq!(all.after("a", 9_999).len(), 1);
        assert!(all.after("a", 10_000).is_empty());
    }

    #[test]
    fn a_decoded_copy_answers_as_the_original() {
        let mut all = Assignments::default();
        all.insert("a", "u1", record("u1", 3));
        all.insert("a", "u2", record("u2", 4));
        if let Some(rec) = all.touch("a", "u1", 7) {
            rec.desired = Desired::Cancel;
        }
        let bytes = serde_json::to_vec(&all).expect("encode");
        let back: Assignments = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(back, all);
        for after in 0..8 {
            assert_eq!(
                back.after("a", after),
                all.after("a", after),
                "after {after}"
            );
        }
        assert_eq!(back.after("a", 4)[0].desired, Desired::Cancel);
        // The wire form is the plain map, as before the journal.
        let plain: BTreeMap<String, ClusterAssignments> =
            serde_json::from_slice(&bytes).expect("decode as a map");
        assert_eq!(plain["a"].len(), 2);
    }
}
