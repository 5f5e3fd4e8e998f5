//! `watch_statuses`: status transitions as a stream, without kube-runtime.
//!
//! The protocol is Kubernetes' list-then-watch: list to get every object and a
//! resourceVersion, watch from that version, resume from the last version seen when the
//! server closes the watch (it does every few minutes), and re-list when the server answers
//! `410 Gone` (the version was compacted away). kube-runtime's watcher does the same; doing
//! it here costs ~150 lines and saves a crate whose compile time dominates a 2-core build.
//!
//! Two things a naive watch loop gets wrong, handled here:
//! - the stream carries *transitions*: a MODIFIED event that leaves the phase unchanged
//!   (a pod count ticking) emits nothing;
//! - after a re-list, jobs that vanished while we were not watching never send DELETED, so
//!   the re-list is diffed against what we knew and the missing ones are reported gone.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};

use super::config::SchedulerMode;
use super::error::{classify, is_gone, is_gone_status};
use super::labels;
use super::status::{deleted_status, identity, local_status};
use super::{Clock, list_all};
use crate::backend::{BackendError, LocalPhase, LocalStatus};

/// Backoff after a failed list or watch, doubling up to the cap; reset by any success.
const BACKOFF_START: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(30);

type Key = (String, u32);

/// What we last reported for one job.
struct Known {
    phase: LocalPhase,
    /// Kept to build the "gone" status (evicted if it carried our preemption deadline) if it
    /// vanishes during a watch gap.
    obj: DynamicObject,
}

enum Step {
    List,
    Watch(String),
    Streaming {
        version: String,
        events: BoxStream<'static, kube::Result<WatchEvent<DynamicObject>>>,
        /// Whether this watch delivered anything; one that ends empty-handed is followed by a
        /// pause, so a proxy that closes watches at once cannot make us spin.
        delivered: bool,
    },
}

struct State {
    jobs: Api<DynamicObject>,
    mode: SchedulerMode,
    clock: Clock,
    step: Step,
    known: HashMap<Key, Known>,
    out: VecDeque<Result<LocalStatus, BackendError>>,
    backoff: Option<Duration>,
}

/// Status transitions of every job the agent manages, forever. Errors are yielded (so the
/// caller can log them) and the stream keeps going after a backoff; dropping it stops
/// watching.
pub(super) fn watch_statuses(
    jobs: Api<DynamicObject>,
    mode: SchedulerMode,
    clock: Clock,
) -> BoxStream<'static, Result<LocalStatus, BackendError>> {
    let state = State {
        jobs,
        mode,
        clock,
        step: Step::List,
        known: HashMap::new(),
        out: VecDeque::new(),
        backoff: None,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.out.pop_front() {
                return Some((item, st));
            }
            st.advance().await;
        }
    })
    .boxed()
}

impl State {
    /// One protocol step; its results land in `out`.
    async fn advance(&mut self) {
        match std::mem::replace(&mut self.step, Step::List) {
            Step::List => {
                wait(self.backoff).await;
                let lp = ListParams::default().labels(&labels::managed_selector());
                match list_all(&self.jobs, lp).await {
                    Ok((items, version)) => {
                        self.backoff = None;
                        self.relisted(items);
                        self.step = Step::Watch(version);
                    }
                    Err(e) => self.failed(Step::List, classify("list jobs", e)),
                }
            }
            Step::Watch(version) => {
                wait(self.backoff).await;
                let wp = WatchParams::default().labels(&labels::managed_selector());
                match self.jobs.watch(&wp, &version).await {
                    Ok(events) => {
                        self.step = Step::Streaming {
                            version,
                            events: events.boxed(),
                            delivered: false,
                        }
                    }
                    Err(e) if is_gone(&e) => self.step = Step::List,
                    Err(e) => self.failed(Step::Watch(version), classify("watch jobs", e)),
                }
            }
            Step::Streaming {
                mut version,
                mut events,
                delivered,
            } => match events.next().await {
                // The server ends every watch after its timeout: resume where we were.
                None => {
                    if !delivered {
                        self.backoff = Some(self.backoff.unwrap_or(BACKOFF_START));
                    }
                    self.step = Step::Watch(version);
                }
                Some(Ok(event)) => {
                    self.backoff = None;
                    match event {
                        WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                            remember_version(&mut version, &obj);
                            self.seen(obj);
                        }
                        WatchEvent::Deleted(obj) => {
                            remember_version(&mut version, &obj);
                            self.deleted(&obj);
                        }
                        WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                        WatchEvent::Error(s) if is_gone_status(&s) => {
                            self.step = Step::List;
                            return;
                        }
                        WatchEvent::Error(s) => {
                            let e = BackendError::Unavailable(format!(
                                "watch jobs: {} {} {}",
                                s.code, s.reason, s.message
                            ));
                            self.failed(Step::Watch(version), e);
                            return;
                        }
                    }
                    self.step = Step::Streaming {
                        version,
                        events,
                        delivered: true,
                    };
                }
                Some(Err(e)) if is_gone(&e) => self.step = Step::List,
                Some(Err(e)) => self.failed(Step::Watch(version), classify("watch jobs", e)),
            },
        }
    }

    fn failed(&mut self, retry: Step, e: BackendError) {
        self.backoff = Some(
            self.backoff
                .map_or(BACKOFF_START, |b| (b * 2).min(BACKOFF_CAP)),
        );
        self.out.push_back(Err(e));
        self.step = retry;
    }

    /// A full list: report changes, and report as gone what is no longer there.
    fn relisted(&mut self, items: Vec<DynamicObject>) {
        let mut present = std::collections::HashSet::new();
        for obj in items {
            if let Some(key) = identity(&obj) {
                present.insert(key);
            }
            self.seen(obj);
        }
        let mut vanished: Vec<Key> = self
            .known
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        // Sorted so the stream is deterministic, not in hash order.
        vanished.sort();
        for key in vanished {
            if let Some(known) = self.known.remove(&key) {
                self.report_gone(&known);
            }
        }
    }

    fn seen(&mut self, obj: DynamicObject) {
        let now = self.clock.now();
        let Some(status) = local_status(self.mode, &obj, now) else {
            return;
        };
        let key = (status.uid.clone(), status.attempt);
        let changed = self.known.get(&key).is_none_or(|k| k.phase != status.phase);
        let known = Known {
            phase: status.phase.clone(),
            obj,
        };
        self.known.insert(key, known);
        if changed {
            self.out.push_back(Ok(status));
        }
    }

    fn deleted(&mut self, obj: &DynamicObject) {
        let Some(key) = identity(obj) else { return };
        // Unknown (created and deleted within one gap) is still worth reporting.
        let finished = self
            .known
            .remove(&key)
            .is_some_and(|k| k.phase.is_terminal());
        if !finished && let Some(s) = deleted_status(obj, self.clock.now()) {
            self.out.push_back(Ok(s));
        }
    }

    /// A job that finished and was then deleted (by `remove`) has nothing new to say.
    fn report_gone(&mut self, known: &Known) {
        if known.phase.is_terminal() {
            return;
        }
        if let Some(s) = deleted_status(&known.obj, self.clock.now()) {
            self.out.push_back(Ok(s));
        }
    }
}

/// A free function, not a method: `&State` is not `Send` (the watch stream is not `Sync`).
async fn wait(backoff: Option<Duration>) {
    if let Some(b) = backoff {
        tokio::time::sleep(b).await;
    }
}

fn remember_version(version: &mut String, obj: &DynamicObject) {
    if let Some(v) = &obj.metadata.resource_version {
        v.clone_into(version);
    }
}
