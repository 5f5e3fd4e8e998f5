//! The part of the pending backlog a cycle shows the scheduler core: each group's head.
//!
//! Why this gives the decisions of a cycle over the whole backlog. Pending workloads that the
//! core cannot tell apart except by identity and age fall in one group: same spec (the
//! opaque template aside, which the core never reads), same labels (the spread key), same
//! retry state, and, when they give no run-time estimate, the same name prefix (what a
//! learned estimate is keyed by). Within a group the core walks them oldest first (a
//! younger one never ages past an older one of the same class, and they tie on everything
//! else), and once it keeps one of them pending, every later one is kept pending for the same
//! reason: capacity and quota only shrink within a cycle, and the core caches exactly these
//! answers per shape and queue (a shape that fits nowhere, a quota block, a failed
//! preemption plan, a failed reservation). A pending answer changes nothing for the
//! workloads decided after it, except the count of those waiting for a flavor when a
//! reservation is priced, which the input carries in `unshown_pending`.
//!
//! So the cycle shows each group's first `k` members; if a group's last shown member was
//! given something other than "pending" (its group might have more to place), that group's
//! `k` grows and the core runs again, until every group ends in a pending answer or is shown
//! whole. The cost is that of the heads, not of the backlog; the test below compares the
//! decisions with those of the whole backlog on mixed input.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tideway_api::Workload;
use tideway_scheduler::{Decision, PendingWorkload, SchedulerInput, SchedulerOutput, schedule};

/// Members of a group shown at first; a group whose head was all acted on shows more.
pub const HEAD: usize = 4;

/// How much a group's window grows when its whole head was acted on.
const GROWTH: usize = 4;

/// Which group a pending workload is in (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey(u64, u64);

/// The group of `w`.
pub fn group_key(w: &Workload) -> GroupKey {
    let mut spec = w.spec.clone();
    spec.template = None;
    let bytes = serde_json::to_vec(&(
        &spec,
        &w.metadata.labels,
        w.status.as_ref().map(|s| (s.attempts, s.retry_not_before)),
        spec.runtime_estimate_seconds
            .is_none()
            .then(|| tideway_scheduler::estimator::name_prefix(&w.metadata.name)),
    ))
    .unwrap_or_default();
    // Two independent 64-bit hashes: a collision would merge two groups.
    let hash = |salt: u8| {
        let mut h = std::hash::DefaultHasher::new();
        salt.hash(&mut h);
        bytes.hash(&mut h);
        h.finish()
    };
    GroupKey(hash(1), hash(2))
}

/// When the workload was submitted, as the cycle's input gives it (`now` when unknown).
pub fn submitted_at(w: &Workload) -> Option<DateTime<Utc>> {
    w.status.as_ref().and_then(|s| s.submitted_at)
}

/// Flavors a workload waits for, each once (as the core counts them for reservations).
fn flavors(w: &Workload) -> Vec<String> {
    let mut f: Vec<String> = w
        .spec
        .pod_sets
        .iter()
        .filter(|p| u64::from(p.count) * u64::from(p.gpus_per_pod) > 0)
        .map(|p| p.flavor.to_string())
        .collect();
    f.sort_unstable();
    f.dedup();
    f
}

#[derive(Debug)]
struct Group {
    flavors: Vec<String>,
    /// By (submitted at, submission sequence): the order the core walks them in.
    members: BTreeMap<(DateTime<Utc>, u64), Arc<Workload>>,
}

/// The pending workloads by group, each group in the core's order; kept up to date on every
/// change, so a cycle reads only the heads.
#[derive(Debug, Default)]
pub struct PendingIndex {
    groups: HashMap<GroupKey, Group>,
    of_seq: HashMap<u64, (GroupKey, DateTime<Utc>)>,
}

impl PendingIndex {
    /// Files a pending workload; one without a submission time is taken as the youngest
    /// (the cycle gives it `now`).
    pub fn insert(&mut self, seq: u64, w: Arc<Workload>) {
        self.remove(seq);
        let submitted_at = submitted_at(&w).unwrap_or(DateTime::<Utc>::MAX_UTC);
        let key = group_key(&w);
        let g = self.groups.entry(key).or_insert_with(|| Group {
            flavors: flavors(&w),
            members: BTreeMap::new(),
        });
        g.members.insert((submitted_at, seq), w);
        self.of_seq.insert(seq, (key, submitted_at));
    }

    pub fn remove(&mut self, seq: u64) {
        let Some((key, at)) = self.of_seq.remove(&seq) else {
            return;
        };
        if let Some(g) = self.groups.get_mut(&key) {
            g.members.remove(&(at, seq));
            if g.members.is_empty() {
                self.groups.remove(&key);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.of_seq.len()
    }

    pub fn is_empty(&self) -> bool {
        self.of_seq.is_empty()
    }

    /// Pending workloads per queue.
    pub fn depths(&self) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        for g in self.groups.values() {
            if let Some(w) = g.members.values().next() {
                *m.entry(w.spec.queue.to_string()).or_default() += g.members.len() as i64;
            }
        }
        m
    }

    /// The members of `key` after its first `shown`, in order, from `from` on (for writing
    /// the group's reason to the ones the core was not shown).
    pub fn tail(
        &self,
        key: GroupKey,
        shown: usize,
        from: Option<(DateTime<Utc>, u64)>,
    ) -> impl Iterator<Item = ((DateTime<Utc>, u64), &Arc<Workload>)> {
        let g = self.groups.get(&key);
        let start = g
            .and_then(|g| g.members.keys().nth(shown))
            .copied()
            .map(|first| from.map_or(first, |f| f.max(first)));
        g.zip(start)
            .into_iter()
            .flat_map(|(g, s)| g.members.range(s..))
            .map(|(k, w)| (*k, w))
    }

    /// Puts in `input` each group's first `k` members (`HEAD`, or what `wide` says), less
    /// `skip` (uids that sit the cycle out), plus any in `force` (holders of capacity, shown
    /// wherever they are), and the count of those left out per flavor; answers the groups.
    pub fn select(
        &self,
        wide: &HashMap<GroupKey, usize>,
        skip: &HashSet<String>,
        force: &HashSet<String>,
        input: &mut SchedulerInput,
    ) -> Window {
        let now = input.now;
        let mut pending = Vec::new();
        let mut groups = Vec::new();
        let mut unshown: BTreeMap<String, u32> = BTreeMap::new();
        for (key, g) in &self.groups {
            let k = wide.get(key).copied().unwrap_or(HEAD);
            let mut heads = Vec::new();
            let mut left = 0u32;
            for ((_, seq), w) in &g.members {
                let uid = tideway_scheduler::input::uid_of(w);
                if skip.contains(uid) {
                    continue;
                }
                if heads.len() < k {
                    heads.push(uid.to_owned());
                } else if !force.contains(uid) {
                    left += 1;
                    continue;
                }
                pending.push(PendingWorkload {
                    workload: Workload::clone(w),
                    submitted_at: submitted_at(w).unwrap_or(now),
                    seq: *seq,
                });
            }
            if left > 0 {
                for f in &g.flavors {
                    *unshown.entry(f.clone()).or_default() += left;
                }
            }
            groups.push(Shown {
                key: *key,
                heads,
                truncated: left > 0,
            });
        }
        pending.sort_unstable_by_key(|p| p.seq);
        input.pending = pending;
        input.unshown_pending = unshown;
        Window { groups }
    }
}

/// One group in a window.
#[derive(Debug)]
pub struct Shown {
    pub key: GroupKey,
    /// The uids of its first members shown, in order.
    pub heads: Vec<String>,
    /// Whether members were left out.
    pub truncated: bool,
}

/// The groups a cycle showed the core (the workloads themselves are in its input).
#[derive(Debug)]
pub struct Window {
    pub groups: Vec<Shown>,
}

/// Where each workload's decision is in `out`, by uid.
fn decision_index(out: &SchedulerOutput) -> HashMap<&str, usize> {
    out.decisions
        .iter()
        .enumerate()
        .map(|(i, d)| (d.uid(), i))
        .collect()
}

impl Window {
    /// Groups with members left out whose last shown member was not kept pending: the core
    /// might have acted on more of them.
    fn open(&self, out: &SchedulerOutput, by_uid: &HashMap<&str, usize>) -> Vec<(GroupKey, usize)> {
        self.groups
            .iter()
            .filter(|g| g.truncated)
            .filter(|g| {
                g.heads.last().is_none_or(|uid| {
                    by_uid
                        .get(uid.as_str())
                        .and_then(|i| out.decisions.get(*i))
                        .is_none_or(|d| !matches!(d, Decision::Pending { .. }))
                })
            })
            .map(|g| (g.key, g.heads.len()))
            .collect()
    }

    /// Each truncated group's answer for the members left out: the index, in `out`, of its
    /// last shown member's (pending) decision.
    pub fn representatives(&self, out: &SchedulerOutput) -> HashMap<GroupKey, (usize, usize)> {
        let by_uid = decision_index(out);
        self.groups
            .iter()
            .filter(|g| g.truncated)
            .filter_map(|g| {
                let i = *by_uid.get(g.heads.last()?.as_str())?;
                matches!(out.decisions.get(i), Some(Decision::Pending { .. }))
                    .then_some((g.key, (i, g.heads.len())))
            })
            .collect()
    }
}

/// Runs the core on the heads of `index` (`base` carries everything but the pending work;
/// `prepare` completes an input, e.g. with learned estimates), widening groups until every
/// group left truncated ends in a pending answer. Answers the input and output of the last
/// run, its window, and how many runs it took; `wide` keeps the widths for the next cycle.
pub fn run(
    base: &SchedulerInput,
    index: &PendingIndex,
    skip: &HashSet<String>,
    wide: &mut HashMap<GroupKey, usize>,
    prepare: impl Fn(&mut SchedulerInput),
) -> (SchedulerInput, SchedulerOutput, Window, u32) {
    wide.retain(|k, _| index.groups.contains_key(k));
    let force: HashSet<String> = base
        .reservations
        .iter()
        .chain(&base.preemptors)
        .map(|r| r.uid.clone())
        .collect();
    let mut runs = 0;
    loop {
        runs += 1;
        let mut input = base.clone();
        let window = index.select(wide, skip, &force, &mut input);
        prepare(&mut input);
        let out = schedule(&input);
        let open = window.open(&out, &decision_index(&out));
        if open.is_empty() {
            return (input, out, window, runs);
        }
        for (key, shown) in open {
            wide.insert(key, shown.saturating_mul(GROWTH));
        }
    }
}
