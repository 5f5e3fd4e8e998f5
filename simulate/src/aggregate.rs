//! Running work shown to the scheduler core as a few aggregate workloads.
//!
//! Without preemption (and per-user limits) the scheduler needs three things from running
//! work: quota usage per queue and flavor, capacity already promised but not yet visible in
//! a digest, and when capacity will come back (reservations). None of them needs one entry
//! per job. An aggregate stands for the pods of one *group* (queue, cluster, pool, pod size,
//! placed or not) whose expected end falls in one *bucket*: `[2^(b-1), 2^b)` seconds from
//! now. Its expected end is the bucket's latest, so reservation start estimates are at most
//! a factor two pessimistic for far-off ends and exact for imminent ones.
//!
//! The cost matters because a cycle runs at almost every event: aggregates are accumulated
//! in a dense array in O(running), and the `RunningWorkload` objects are kept across cycles
//! and moved in and out of the scheduler input, so a cycle allocates only for a group and
//! bucket it never saw before.

use tideway_api::{PodSet, Workload, WorkloadClass, WorkloadSpec};
use tideway_scheduler::RunningWorkload;

use super::time::{Secs, to_utc};
use rustc_hash::FxHashMap;

/// Buckets per group: one per bit of a `u64` of seconds, plus "due now".
const BUCKETS: usize = 65;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub queue: u32,
    pub cluster: u32,
    /// Global pool index.
    pub pool: u32,
    pub gpus_per_pod: u32,
    /// Placed on nodes (in the member's digest) or only dispatched.
    pub placed: bool,
}

/// Names an aggregate needs: queue, cluster, pool, flavor.
pub struct Names {
    pub queue: String,
    pub cluster: String,
    pub pool: String,
    pub flavor: String,
}

#[derive(Clone, Copy)]
struct Acc {
    pods: u64,
    first_start: Secs,
    last_end: Secs,
}

#[derive(Default)]
pub struct Aggregates {
    groups: Vec<GroupKey>,
    group_ids: FxHashMap<GroupKey, u32>,
    /// `group * BUCKETS + bucket` -> slot + 1 (0: none yet).
    slot_of: Vec<u32>,
    store: Vec<Option<RunningWorkload>>,
    acc: Vec<Acc>,
    /// Slot of each entry currently in the scheduler input.
    in_input: Vec<u32>,
}

impl Aggregates {
    /// The id of a group, registering it on first use.
    pub fn group(&mut self, key: GroupKey) -> u32 {
        if let Some(&g) = self.group_ids.get(&key) {
            return g;
        }
        let g = self.groups.len() as u32;
        self.groups.push(key);
        self.group_ids.insert(key, g);
        self.slot_of.extend(std::iter::repeat_n(0, BUCKETS));
        g
    }

    /// Rebuilds `running` from `(groups with pods, start, expected end)` of every running
    /// job. `names` resolves a group's names when a slot is first created.
    pub fn fill<'a>(
        &mut self,
        running: &mut Vec<RunningWorkload>,
        jobs: impl Iterator<Item = (&'a [(u32, u32)], Secs, Secs)>,
        now: Secs,
        names: impl Fn(&GroupKey) -> Names,
    ) {
        // Take last cycle's entries back.
        for (rw, slot) in running.drain(..).zip(self.in_input.drain(..)) {
            self.store[slot as usize] = Some(rw);
        }
        for a in &mut self.acc {
            a.pods = 0;
        }
        for (aggs, start, end) in jobs {
            let left = u64::try_from(end - now).unwrap_or(0);
            let bucket = (64 - left.leading_zeros()) as usize;
            for &(g, pods) in aggs {
                let i = g as usize * BUCKETS + bucket;
                let slot = match self.slot_of.get(i).copied() {
                    Some(0) => {
                        let s = self.store.len();
                        self.store.push(None);
                        self.acc.push(Acc {
                            pods: 0,
                            first_start: start,
                            last_end: end,
                        });
                        self.slot_of[i] = s as u32 + 1;
                        s
                    }
                    Some(s) => s as usize - 1,
                    None => continue,
                };
                let a = &mut self.acc[slot];
                if a.pods == 0 {
                    a.first_start = start;
                    a.last_end = end;
                }
                a.pods += u64::from(pods);
                a.first_start = a.first_start.min(start);
                a.last_end = a.last_end.max(end);
            }
        }
        for (i, &s1) in self.slot_of.iter().enumerate() {
            if s1 == 0 {
                continue;
            }
            let slot = s1 as usize - 1;
            let a = self.acc[slot];
            if a.pods == 0 {
                continue;
            }
            let key = self.groups[i / BUCKETS];
            let mut rw = self.store[slot].take().unwrap_or_else(|| {
                let n = names(&key);
                let name = format!("sim-aggregate-{slot}");
                let spec = WorkloadSpec::new(
                    n.queue,
                    WorkloadClass::Training,
                    vec![PodSet::new("pods", 0, key.gpus_per_pod, &n.flavor)],
                );
                let mut w = Workload::new(name.clone(), spec);
                w.metadata.uid = Some(name);
                RunningWorkload {
                    workload: w,
                    cluster: n.cluster,
                    pool: n.pool,
                    placements: Vec::new(),
                    started_at: None,
                    admitted_at: to_utc(now),
                    last_checkpoint_at: None,
                    preemptible_after: None,
                    accounted_in_digest: key.placed,
                    preempting_for: None,
                }
            });
            if let Some(ps) = rw.workload.spec.pod_sets.first_mut() {
                ps.count = u32::try_from(a.pods).unwrap_or(u32::MAX);
            }
            rw.workload.spec.runtime_estimate_seconds =
                Some(u64::try_from(a.last_end - a.first_start).unwrap_or(0));
            rw.started_at = Some(to_utc(a.first_start));
            rw.admitted_at = to_utc(a.first_start);
            running.push(rw);
            self.in_input.push(slot as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(k: &GroupKey) -> Names {
        Names {
            queue: format!("q{}", k.queue),
            cluster: "c".into(),
            pool: "p".into(),
            flavor: "P100".into(),
        }
    }

    #[test]
    fn groups_by_bucket_and_reuses_entries() {
        let mut a = Aggregates::default();
        let g = a.group(GroupKey {
            queue: 0,
            cluster: 0,
            pool: 0,
            gpus_per_pod: 1,
            placed: true,
        });
        let one = [(g, 1u32)];
        let two = [(g, 2u32)];
        let mut running = Vec::new();
        // ends 10 s and 12 s away share a bucket; 1,000 s away is another
        let jobs = [(&one[..], 0, 110), (&two[..], 5, 112), (&one[..], 0, 1100)];
        a.fill(&mut running, jobs.iter().copied(), 100, names);
        assert_eq!(running.len(), 2);
        let pods: Vec<u32> = running
            .iter()
            .map(|r| r.workload.spec.pod_sets[0].count)
            .collect();
        assert_eq!(pods, [3, 1]);
        assert_eq!(running[0].workload.spec.runtime_estimate_seconds, Some(112));
        assert_eq!(running[0].workload.spec.queue, "q0");
        // next cycle: the far job ended; its entry leaves the input, the other is reused
        a.fill(&mut running, jobs[..2].iter().copied(), 100, names);
        assert_eq!(running.len(), 1);
        assert_eq!(a.store.len(), 2);
    }
}
