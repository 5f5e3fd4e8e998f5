//! The agent loop: register, heartbeat with digests, follow assignments, report status.
//!
//! The agent may talk to any federation node. On any error it moves on to the next address it
//! was given, so it follows leader changes and node losses without configuration. Losing the
//! federation never touches the member cluster: running work keeps running, and when a node
//! answers again the agent re-registers, resumes its assignments from the last revision it
//! applied, and re-sends every status (all of it idempotent).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use chrono::{DateTime, Utc};

use tideway_api::agent::{
    AssignmentRecord, Desired, LocalPhase, LocalStatus, RegisterRequest, StatusReport,
};
use tideway_api::client::{Client, ClientError};
use tideway_api::digest::CapacityDigest;
use tideway_api::digest_delta::DeltaSender;
use tideway_api::{MemberCluster, MemberClusterSpec, Pool};
use tokio::sync::watch;

use crate::backend::{Backend, BackendError, ReportedCheckpoint};

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub cluster: String,
    pub region: String,
    pub zone: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Federation nodes, any of which may answer.
    pub federation: Vec<String>,
    pub heartbeat_interval: Duration,
    pub status_interval: Duration,
    /// How long an assignment long-poll waits for a change.
    pub poll_wait: Duration,
    /// Bearer token for a federation that requires one.
    pub token: Option<String>,
}

impl AgentConfig {
    pub fn new(cluster: &str, region: &str, federation: Vec<String>) -> Self {
        Self {
            cluster: cluster.to_string(),
            region: region.to_string(),
            zone: None,
            labels: BTreeMap::new(),
            federation,
            heartbeat_interval: Duration::from_secs(2),
            status_interval: Duration::from_secs(1),
            poll_wait: Duration::from_secs(20),
            token: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("no federation address given")]
    NoFederation,
    #[error("building a client for {0}: {1}")]
    Client(String, ClientError),
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
}

/// The federation as the agent sees it: a list of nodes and which one it is using.
#[derive(Clone)]
struct Federation {
    clients: Arc<Vec<Client>>,
    at: Arc<AtomicUsize>,
}

impl Federation {
    fn new(addrs: &[String], token: Option<&str>) -> Result<Self, AgentError> {
        if addrs.is_empty() {
            return Err(AgentError::NoFederation);
        }
        let clients = addrs
            .iter()
            .map(|a| Client::with_token(a, token).map_err(|e| AgentError::Client(a.clone(), e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            clients: Arc::new(clients),
            at: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn current(&self) -> &Client {
        &self.clients[self.at.load(Ordering::Relaxed) % self.clients.len()]
    }

    /// Moves on to the next node after a failure.
    fn rotate(&self, failed: &Client, err: &ClientError) {
        let i = self.at.load(Ordering::Relaxed);
        if std::ptr::eq(&self.clients[i % self.clients.len()], failed) {
            self.at.store(i + 1, Ordering::Relaxed);
            tracing::info!(from = failed.base_url(), error = %err, "switching federation node");
        }
    }
}

fn member_from(cfg: &AgentConfig, digest: &CapacityDigest) -> MemberCluster {
    let mut pools: Vec<Pool> = Vec::new();
    let mut models: Vec<String> = Vec::new();
    for p in &digest.pools {
        if !pools.iter().any(|x| x.name == p.pool) {
            pools.push(Pool {
                name: p.pool.clone(),
                kind: p.kind,
            });
        }
        if !models.contains(&p.flavor) {
            models.push(p.flavor.clone());
        }
    }
    let mut spec = MemberClusterSpec::new(cfg.region.clone(), pools);
    spec.zone = cfg.zone.clone();
    spec.gpu_models = models;
    // The levels its nodes are labelled with, as the backend found them: the federation places
    // a workload requiring a level only on members that declare it.
    for d in digest.pools.iter().flat_map(|p| &p.domains) {
        if !spec.topology_levels.contains(&d.level) {
            spec.topology_levels.push(d.level);
        }
    }
    spec.topology_levels.sort();
    let mut m = MemberCluster::new(cfg.cluster.clone(), spec);
    m.metadata.labels = cfg.labels.clone();
    m
}

/// Pauses between failed attempts at one thing: exponential from 100 ms to 1 s, with jitter
/// so that the agents of a fleet that lost the federation at the same moment do not all come
/// back in step. Endless: a loop makes a new one after each success, which resets the delay.
fn retry_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(1))
        .with_jitter()
        .without_max_times()
        .build()
}

/// The next pause of `delays` (the longest one if it ever ran dry).
fn next_delay(delays: &mut impl Iterator<Item = Duration>) -> Duration {
    delays.next().unwrap_or(Duration::from_secs(1))
}

/// The agent's lease on the work it runs. The federation acknowledges a heartbeat only once
/// its leader has confirmed it still leads, and says how long the agent may go on running its
/// work after sending it ([`tideway_api::agent::HeartbeatAck::lease_ms`]); it moves a lost
/// member's work only later than that, by a margin for clock skew (docs/agents.md). So when
/// the lease runs out (the agent is cut off from the federation, or only reaches a node that
/// no longer leads), the agent stops all its active work at once (evicted, as a preemption
/// without grace) before anyone else can start it. When a heartbeat is acknowledged again it
/// reports the evictions (the federation requeues that work, to resume from its checkpoint;
/// reports for work it moved meanwhile are refused) and replays its assignments from the
/// start, read linearizably, so the copies of moved work are deleted.
///
/// A timer alone does not keep that promise: after the process was paused (SIGSTOP, a VM
/// freeze, a long GC-like stall of the host) every task wakes at once, and whichever runs
/// first may serve or report the work the lease no longer covers. So every path that shows,
/// reports or renews the cluster's work first takes the lease with [`Lease::hold`], which
/// stops the work if the lease has run out by the clock *now*, under the same lock the
/// guard and the assignment loop use.
#[derive(Clone, Default)]
pub struct Lease(Arc<tokio::sync::Mutex<LeaseState>>);

#[derive(Debug, Default)]
struct LeaseState {
    /// Whether any heartbeat was acknowledged since the agent started.
    acked: bool,
    /// Until when the work may run; `None` when the federation gives no lease.
    until: Option<tokio::time::Instant>,
    /// The work was stopped when the lease ran out and not replayed since.
    suspended: bool,
    /// Bumped each time the lease comes back after a suspension.
    resumed: u64,
}

impl LeaseState {
    fn expired(&self, now: tokio::time::Instant) -> bool {
        self.until.is_some_and(|u| now >= u)
    }

    fn may_run(&self, now: tokio::time::Instant) -> bool {
        self.acked && !self.suspended && !self.expired(now)
    }

    /// The lease ran out and the work could not be stopped (the cluster did not answer):
    /// what the cluster holds must not be shown or reported as this member's.
    fn lapsed_unfenced(&self, now: tokio::time::Instant) -> bool {
        self.acked && !self.suspended && self.expired(now)
    }
}

/// The lease ran out and the cluster's work could not be stopped yet; nothing may be shown or
/// reported until it is.
#[derive(Debug, thiserror::Error)]
#[error("the agent's lease ran out and its work could not be stopped yet")]
pub struct LeaseLapsed;

/// The lease, checked against the clock when it was taken and held: while it lives neither the
/// guard nor the assignment loop nor a renewal can change what the cluster runs.
pub struct HeldLease<'a> {
    _guard: tokio::sync::MutexGuard<'a, LeaseState>,
}

impl Lease {
    /// Takes the lease, first stopping the work if the lease has run out by now. Every path
    /// that shows or reports what the cluster runs goes through here, so that after a pause
    /// no stale view leaves the agent before the guard has had its turn.
    pub async fn hold<B: Backend>(&self, backend: &B) -> Result<HeldLease<'_>, LeaseLapsed> {
        let mut st = self.0.lock().await;
        Lease::enforce(&mut st, backend).await;
        if st.lapsed_unfenced(tokio::time::Instant::now()) {
            return Err(LeaseLapsed);
        }
        Ok(HeldLease { _guard: st })
    }

    /// A heartbeat sent at `sent` was acknowledged with `lease`. A lease that ran out before
    /// the answer came is enforced first: the federation may have moved the work in the
    /// meantime (the answer may have waited out a pause of this process), so the work stops
    /// and the renewal brings a replay of the assignments rather than a silent extension.
    pub(crate) async fn renew<B: Backend>(
        &self,
        backend: &B,
        sent: tokio::time::Instant,
        lease: Option<Duration>,
    ) {
        let mut st = self.0.lock().await;
        Lease::enforce(&mut st, backend).await;
        if st.lapsed_unfenced(tokio::time::Instant::now()) {
            // The work the lapsed lease covered could not be stopped: a renewal now would
            // let it run on as if the lease had never run out. The guard keeps trying; a
            // later heartbeat renews once it has.
            return;
        }
        st.acked = true;
        st.until = lease.map(|l| st.until.map_or(sent + l, |u| u.max(sent + l)));
        if st.suspended && !st.expired(tokio::time::Instant::now()) {
            st.suspended = false;
            st.resumed += 1;
            tracing::info!("lease regained: replaying the assignments");
        }
    }

    /// Stops every workload the backend holds if the lease has run out. Called with the
    /// lease locked, so no assignment is applied meanwhile.
    async fn enforce<B: Backend>(st: &mut LeaseState, backend: &B) {
        if !st.lapsed_unfenced(tokio::time::Instant::now()) {
            return;
        }
        let uids: Vec<String> = match backend.statuses().await {
            Ok(s) => s
                .into_iter()
                .filter(|s| matches!(s.phase, LocalPhase::Running | LocalPhase::Pending))
                .map(|s| s.uid)
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "lease lost, and the cluster's work cannot be listed; retrying");
                return;
            }
        };
        let mut stopped = 0;
        for uid in &uids {
            match backend.preempt(uid, Duration::ZERO).await {
                Ok(()) => stopped += 1,
                Err(e) => {
                    tracing::warn!(%uid, error = %e, "lease lost, and the work cannot be stopped; retrying");
                    return;
                }
            }
        }
        st.suspended = true;
        tracing::warn!(
            stopped,
            "lease lost (no acknowledged heartbeat): stopped all work until the federation answers"
        );
    }
}

/// Stops the work when the lease runs out.
async fn guard_lease<B: Backend>(lease: Lease, backend: Arc<B>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let mut st = lease.0.lock().await;
        Lease::enforce(&mut st, backend.as_ref()).await;
    }
}

/// Registers, retrying across nodes until one accepts.
async fn register<B: Backend>(
    cfg: &AgentConfig,
    fed: &Federation,
    backend: &B,
    stop: &watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let mut delays = retry_delays();
    loop {
        let digest = backend.digest().await?;
        let req = RegisterRequest {
            member: member_from(cfg, &digest),
            agent_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        };
        let c = fed.current();
        match c.register_member(&req).await {
            Ok(_) => {
                tracing::info!(cluster = %cfg.cluster, via = c.base_url(), "registered");
                return Ok(());
            }
            Err(ClientError::Problem(p)) if p.status == 409 => {
                // Refused for good until an operator acts (the member was removed): say so,
                // and ask again now and then.
                tracing::warn!(cluster = %cfg.cluster, problem = %p.detail.clone().unwrap_or_default(), "registration refused");
                if *stop.borrow() {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Err(e) => {
                fed.rotate(c, &e);
                if *stop.borrow() {
                    return Ok(());
                }
                tokio::time::sleep(next_delay(&mut delays)).await;
            }
        }
    }
}

/// Heartbeats every interval. Each carries the capacity digest, as a delta against the one
/// the federation last said it holds once a federation names versions (see
/// [`DeltaSender`]); a federation that lacks the delta's base gets the full digest at once.
async fn heartbeats<B: Backend>(
    cfg: AgentConfig,
    fed: Federation,
    backend: Arc<B>,
    lease: Lease,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(cfg.heartbeat_interval);
    let mut sender = DeltaSender::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        // The digest says what the cluster's work occupies: read it only with the lease
        // checked, so that after a pause it never shows work the lease no longer covers.
        let digest = {
            let Ok(_held) = lease.hold(backend.as_ref()).await else {
                continue;
            };
            match backend.digest().await {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the cluster's capacity");
                    continue;
                }
            }
        };
        let mut hb = sender.heartbeat(digest.clone());
        // A second round only when the federation asked for the full digest.
        for _ in 0..2 {
            let c = fed.current();
            let sent = tokio::time::Instant::now();
            match c.heartbeat(&cfg.cluster, &hb).await {
                Ok(ack) => {
                    lease
                        .renew(
                            backend.as_ref(),
                            sent,
                            ack.lease_ms.map(Duration::from_millis),
                        )
                        .await;
                    if sender.acknowledged(&ack) && hb.digest.is_none() {
                        tracing::debug!(cluster = %cfg.cluster, "digest base unknown to the federation: sending the full digest");
                        hb = sender.heartbeat(digest.clone());
                        continue;
                    }
                }
                Err(e) if e.is_not_found() => {
                    // The federation does not know us (a fresh cluster, or a restored backup).
                    sender.failed();
                    let _ = register(&cfg, &fed, backend.as_ref(), &stop).await;
                }
                Err(e) => {
                    sender.failed();
                    fed.rotate(c, &e);
                }
            }
            break;
        }
    }
}

async fn follow_assignments<B: Backend>(
    cfg: AgentConfig,
    fed: Federation,
    backend: Arc<B>,
    lease: Lease,
    mut stop: watch::Receiver<bool>,
) {
    // Start from 0 after every (re)start: ensure is idempotent, so replaying is harmless and
    // guarantees nothing assigned while we were away is missed.
    let mut revision = 0u64;
    let mut resumed = 0u64;
    // Whether the finished work the federation no longer lists was forgotten since the last
    // replay from revision 0 began.
    let mut swept = false;
    let mut delays = retry_delays();
    // Notices passed to the backend, by (uid, deadline): each once per agent run (the
    // backends are idempotent too, for the replay after a restart).
    let mut noticed: HashSet<(String, DateTime<Utc>)> = HashSet::new();
    loop {
        if *stop.borrow() {
            return;
        }
        {
            let st = lease.0.lock().await;
            if st.resumed != resumed {
                resumed = st.resumed;
                revision = 0;
                swept = false;
            }
            if !st.may_run(tokio::time::Instant::now()) {
                drop(st);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = stop.changed() => return,
                }
                continue;
            }
        }
        let c = fed.current().clone();
        let page = tokio::select! {
            r = c.assignments(&cfg.cluster, revision, cfg.poll_wait.as_secs()) => r,
            _ = stop.changed() => return,
        };
        match page {
            Ok(page) => {
                // Applied with the lease held: nothing starts once it has run out.
                let mut st = lease.0.lock().await;
                Lease::enforce(&mut st, backend.as_ref()).await;
                if !st.may_run(tokio::time::Instant::now()) || st.resumed != resumed {
                    continue;
                }
                let mut all_ok = true;
                // Attempts this member will never run: preempted before they started, or
                // refused by the cluster for good. Each is reported unless the cluster holds it.
                let mut gone: Vec<(String, u32, LocalPhase)> = Vec::new();
                for rec in &page.items {
                    let uid = rec.assignment.uid().to_string();
                    let res = match &rec.desired {
                        Desired::Run => match backend.ensure(&rec.assignment).await {
                            Ok(()) => match rec.checkpoint_by {
                                Some(by) if !noticed.contains(&(uid.clone(), by)) => {
                                    let r = backend.checkpoint(&uid, by).await;
                                    if r.is_ok() {
                                        tracing::info!(%uid, %by, "checkpoint notice passed on");
                                        noticed.insert((uid.clone(), by));
                                    }
                                    r
                                }
                                _ => Ok(()),
                            },
                            Err(e) => Err(e),
                        },
                        Desired::Preempt { grace_seconds } => {
                            let r = backend
                                .preempt(&uid, Duration::from_secs(*grace_seconds))
                                .await;
                            if r.is_ok() {
                                gone.push((
                                    uid.clone(),
                                    rec.assignment.attempt,
                                    LocalPhase::Evicted {
                                        reason: "preempted before it started on this member".into(),
                                    },
                                ));
                            }
                            r
                        }
                        Desired::Cancel => backend.remove(&uid).await,
                    };
                    match res {
                        Ok(()) => {}
                        Err(BackendError::Unavailable(e)) => {
                            tracing::warn!(%uid, error = %e, "member cluster unavailable; will retry");
                            all_ok = false;
                            break;
                        }
                        // Refused for good (an invalid template, a pool it does not have,
                        // forbidden): reported Failed, so the federation retries it with
                        // backoff, elsewhere if it can, up to the retry limit, instead of
                        // leaving it Assigned here for ever.
                        Err(BackendError::Rejected(e)) if matches!(rec.desired, Desired::Run) => {
                            tracing::warn!(%uid, error = %e, "assignment refused by the cluster; reporting it failed");
                            gone.push((
                                uid.clone(),
                                rec.assignment.attempt,
                                LocalPhase::Failed {
                                    reason: format!("refused by the member cluster: {e}"),
                                },
                            ));
                        }
                        Err(e) => {
                            tracing::warn!(%uid, error = %e, "assignment refused by the cluster")
                        }
                    }
                }
                drop(st);
                // Outside the lease lock: a report starts nothing, and must not hold up the
                // heartbeats that renew the lease.
                if all_ok && !gone.is_empty() {
                    all_ok = report_never_started(&cfg, &fed, backend.as_ref(), &gone).await;
                }
                // A page from revision 0 lists every assignment the federation still holds.
                if all_ok && revision == 0 && !swept {
                    swept = forget_unlisted(backend.as_ref(), &page.items).await;
                }
                if all_ok {
                    revision = page.revision;
                    delays = retry_delays();
                } else {
                    tokio::time::sleep(next_delay(&mut delays)).await;
                }
            }
            Err(e) => {
                fed.rotate(&c, &e);
                tokio::time::sleep(next_delay(&mut delays)).await;
            }
        }
    }
}

/// Work this member never started has no copy here to checkpoint, stop and report: preempted
/// work whose `Run` came while the agent was away (by the time it replayed its assignments
/// the record said `Preempt`), and work the cluster refused for good. Without a word from us
/// the federation would wait for ever, with the workload Assigned. Reports each attempt in
/// the phase given (Evicted requeues it; Failed retries it with backoff up to the limit);
/// attempts the backend holds report themselves when they stop, so nothing reported here can
/// still be running. Answers whether the report went through (if not, the page is applied
/// again, which repeats the check).
async fn report_never_started<B: Backend>(
    cfg: &AgentConfig,
    fed: &Federation,
    backend: &B,
    gone: &[(String, u32, LocalPhase)],
) -> bool {
    let held = match backend.statuses().await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read local statuses");
            return false;
        }
    };
    let statuses = never_started(&held, gone, backend.now());
    if statuses.is_empty() {
        return true;
    }
    tracing::info!(
        count = statuses.len(),
        "work that never started here: reported evicted or failed"
    );
    let c = fed.current();
    match c
        .report_status(
            &cfg.cluster,
            &StatusReport {
                statuses,
                checkpoints: Vec::new(),
            },
        )
        .await
    {
        Ok(_) => true,
        Err(e) => {
            fed.rotate(c, &e);
            false
        }
    }
}

/// The Evicted statuses for the preempted attempts (uid, attempt) of which `held` (the
/// backend's statuses) has no copy at all.
fn never_started(
    held: &[LocalStatus],
    gone: &[(String, u32, LocalPhase)],
    now: DateTime<Utc>,
) -> Vec<LocalStatus> {
    let held: HashSet<(&str, u32)> = held.iter().map(|s| (s.uid.as_str(), s.attempt)).collect();
    gone.iter()
        .filter(|(uid, attempt, _)| !held.contains(&(uid.as_str(), *attempt)))
        .map(|(uid, attempt, phase)| LocalStatus {
            uid: uid.clone(),
            attempt: *attempt,
            phase: phase.clone(),
            since: now,
            nodes: Vec::new(),
        })
        .collect()
}

/// Forgets the finished work the federation no longer lists at all. A success (or a
/// failure, an eviction, a move) is answered with `Desired::Cancel`, and the agent removes the
/// work; but an agent away for longer than the federation's retention never sees that Cancel,
/// because compaction drops the assignment record. Without this sweep such a member would keep
/// that work for ever (the sim in its state file, Kubernetes as finished Jobs). Only terminal
/// work is touched: what still runs or waits is the federation's to stop, and every report of
/// work the federation still wants to hear about is for a listed assignment. Answers whether
/// the sweep completed (if not, the next full replay tries again).
async fn forget_unlisted<B: Backend>(backend: &B, listed: &[AssignmentRecord]) -> bool {
    let held = match backend.statuses().await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read local statuses");
            return false;
        }
    };
    let stale = unlisted_terminal(&held, listed);
    let mut forgotten = 0usize;
    for uid in &stale {
        match backend.remove(uid).await {
            Ok(()) => forgotten += 1,
            Err(e) => {
                tracing::warn!(%uid, error = %e, "cannot remove finished work");
                return false;
            }
        }
    }
    if forgotten > 0 {
        tracing::info!(
            forgotten,
            "removed finished work the federation no longer lists (compacted while away)"
        );
    }
    true
}

/// The uids of `held` that finished (every attempt held is terminal) and that no record of
/// `listed` names, each once.
fn unlisted_terminal(held: &[LocalStatus], listed: &[AssignmentRecord]) -> Vec<String> {
    let listed: HashSet<&str> = listed.iter().map(|r| r.assignment.uid()).collect();
    let active: HashSet<&str> = held
        .iter()
        .filter(|s| !s.phase.is_terminal())
        .map(|s| s.uid.as_str())
        .collect();
    let mut out: Vec<String> = held
        .iter()
        .filter(|s| !listed.contains(s.uid.as_str()) && !active.contains(s.uid.as_str()))
        .map(|s| s.uid.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The statuses and checkpoints to report, read with the lease checked: after a pause the
/// work the lease no longer covers is stopped before it is read, so a report never says that
/// work the federation may have moved still runs here. `None` when nothing may be read yet.
async fn fenced_report<B: Backend>(
    lease: &Lease,
    backend: &B,
) -> Option<(Vec<LocalStatus>, Vec<ReportedCheckpoint>)> {
    let _held = match lease.hold(backend).await {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(error = %e, "not reporting statuses");
            return None;
        }
    };
    match backend.report().await {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read local statuses");
            None
        }
    }
}

async fn report_statuses<B: Backend>(
    cfg: AgentConfig,
    fed: Federation,
    backend: Arc<B>,
    lease: Lease,
    mut stop: watch::Receiver<bool>,
) {
    // What the federation has acknowledged, so only changes are sent. Both maps keep only
    // what the cluster still holds: finished work the cluster forgot is forgotten here too.
    let mut sent: BTreeMap<(String, u32), LocalStatus> = BTreeMap::new();
    let mut sent_checkpoints: BTreeMap<(String, u32), DateTime<Utc>> = BTreeMap::new();
    let mut tick = tokio::time::interval(cfg.status_interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let Some((statuses, checkpoints)) = fenced_report(&lease, backend.as_ref()).await else {
            continue;
        };
        // Work the cluster no longer holds (removed after a Cancel) is forgotten here too,
        // or these maps would grow with every workload the member ever ran.
        let held: HashSet<(&str, u32)> = statuses
            .iter()
            .map(|s| (s.uid.as_str(), s.attempt))
            .collect();
        sent.retain(|(uid, attempt), _| held.contains(&(uid.as_str(), *attempt)));
        sent_checkpoints.retain(|(uid, attempt), _| held.contains(&(uid.as_str(), *attempt)));
        let changed: Vec<LocalStatus> = statuses
            .iter()
            .filter(|s| {
                sent.get(&(s.uid.clone(), s.attempt))
                    .is_none_or(|prev| prev.phase != s.phase)
            })
            .cloned()
            .collect();
        let new_checkpoints: Vec<ReportedCheckpoint> = checkpoints
            .into_iter()
            .filter(|c| {
                sent_checkpoints
                    .get(&(c.uid.clone(), c.attempt))
                    .is_none_or(|prev| *prev < c.at)
            })
            .collect();
        if changed.is_empty() && new_checkpoints.is_empty() {
            continue;
        }
        let c = fed.current();
        match c
            .report_status(
                &cfg.cluster,
                &StatusReport {
                    statuses: changed.clone(),
                    checkpoints: new_checkpoints.clone(),
                },
            )
            .await
        {
            Ok(_) => {
                for s in changed {
                    sent.insert((s.uid.clone(), s.attempt), s);
                }
                for cp in new_checkpoints {
                    sent_checkpoints.insert((cp.uid, cp.attempt), cp.at);
                }
            }
            Err(e) => fed.rotate(c, &e),
        }
    }
}

/// Fencing after a (re)start: before the cluster's work is shown or reported, stop every
/// workload the federation has taken away from this member while the agent was gone (its
/// assignment is `Desired::Cancel`: the work was moved elsewhere). Waits for a federation node
/// to answer; a member the federation does not know has nothing to stop.
pub async fn fence<B: Backend>(
    cfg: &AgentConfig,
    backend: &B,
    stop: &watch::Receiver<bool>,
) -> Result<usize, AgentError> {
    let fed = Federation::new(&cfg.federation, cfg.token.as_deref())?;
    loop {
        if *stop.borrow() {
            return Ok(0);
        }
        let c = fed.current();
        match c.assignments(&cfg.cluster, 0, 0).await {
            Ok(page) => {
                let mut stopped = 0;
                for rec in page.items.iter().filter(|r| r.desired == Desired::Cancel) {
                    let uid = rec.assignment.uid();
                    match backend.remove(uid).await {
                        Ok(()) => stopped += 1,
                        Err(e) => tracing::warn!(%uid, error = %e, "cannot stop fenced work"),
                    }
                }
                if stopped > 0 {
                    tracing::info!(stopped, "stopped work the federation moved elsewhere");
                }
                return Ok(stopped);
            }
            Err(e) if e.is_not_found() => return Ok(0),
            Err(e) => {
                fed.rotate(c, &e);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Runs the agent until `stop` turns true.
pub async fn run<B: Backend>(
    cfg: AgentConfig,
    backend: Arc<B>,
    stop: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    run_with_ready(cfg, backend, stop, None, Lease::default()).await
}

/// Like [`run`], telling `ready` once the member is registered and fenced: from then on what
/// the backend runs is what the federation wants it to run (a local view may be shown, each
/// answer with `lease` held: [`Lease::hold`]).
pub async fn run_with_ready<B: Backend>(
    cfg: AgentConfig,
    backend: Arc<B>,
    stop: watch::Receiver<bool>,
    ready: Option<watch::Sender<bool>>,
    lease: Lease,
) -> Result<(), AgentError> {
    let fed = Federation::new(&cfg.federation, cfg.token.as_deref())?;
    fence(&cfg, backend.as_ref(), &stop).await?;
    register(&cfg, &fed, backend.as_ref(), &stop).await?;
    // Again once registered: a move the leader decided while this member was still NotReady
    // may have applied between the first fence and the registration. After the registration
    // is applied the member is Ready, and a later move of its work is refused by the state.
    fence(&cfg, backend.as_ref(), &stop).await?;
    if let Some(ready) = ready {
        let _ = ready.send(true);
    }
    let tasks = vec![
        tokio::spawn(heartbeats(
            cfg.clone(),
            fed.clone(),
            backend.clone(),
            lease.clone(),
            stop.clone(),
        )),
        tokio::spawn(follow_assignments(
            cfg.clone(),
            fed.clone(),
            backend.clone(),
            lease.clone(),
            stop.clone(),
        )),
        tokio::spawn(guard_lease(lease.clone(), backend.clone(), stop.clone())),
        tokio::spawn(report_statuses(
            cfg.clone(),
            fed.clone(),
            backend.clone(),
            lease,
            stop.clone(),
        )),
    ];
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimBackend;
    use crate::sim::cluster::tests::{assignment, small, t};
    use tideway_api::clock::ManualClock;

    fn active(b: &SimBackend) -> Vec<String> {
        let st = futures_statuses(b);
        st.into_iter()
            .filter(|s| matches!(s.phase, LocalPhase::Running | LocalPhase::Pending))
            .map(|s| s.uid)
            .collect()
    }

    fn futures_statuses(b: &SimBackend) -> Vec<LocalStatus> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(b.statuses()).expect("statuses")
    }

    #[test]
    fn a_lapsed_lease_stops_all_work_and_a_renewal_resumes_with_a_replay() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let b = SimBackend::new(small(), Arc::new(ManualClock::new(t(0))));
        rt.block_on(b.ensure(&assignment("u1", 1, 8, None)))
            .expect("ensure");
        assert_eq!(active(&b), vec!["u1".to_string()]);
        let lease = Lease::default();
        let now = tokio::time::Instant::now();
        rt.block_on(async {
            // Before any acknowledged heartbeat nothing runs from the assignments.
            assert!(!lease.0.lock().await.may_run(now));
            lease.renew(&b, now, Some(Duration::from_secs(3))).await;
            let mut st = lease.0.lock().await;
            assert!(st.may_run(now + Duration::from_secs(2)));
            // Within the lease: enforce leaves the work alone.
            Lease::enforce(&mut st, &b).await;
            assert!(!st.suspended);
            // Run out: everything stops, and stays stopped.
            st.until = Some(now - Duration::from_millis(1));
            Lease::enforce(&mut st, &b).await;
            assert!(st.suspended);
            assert!(!st.may_run(now));
            assert_eq!(st.resumed, 0);
        });
        assert!(active(&b).is_empty(), "the work stopped with the lease");
        rt.block_on(async {
            // An acknowledged heartbeat brings the lease back and asks for a replay.
            lease
                .renew(
                    &b,
                    tokio::time::Instant::now(),
                    Some(Duration::from_secs(3)),
                )
                .await;
            let st = lease.0.lock().await;
            assert!(!st.suspended);
            assert_eq!(st.resumed, 1, "follow_assignments replays from revision 0");
            assert!(st.may_run(tokio::time::Instant::now()));
        });
    }

    /// A sim cluster running one workload, under a lease acknowledged now for 3 s.
    async fn one_running_under_a_3s_lease() -> (SimBackend, Lease) {
        let b = SimBackend::new(small(), Arc::new(ManualClock::new(t(0))));
        b.ensure(&assignment("u1", 1, 8, None))
            .await
            .expect("ensure");
        let lease = Lease::default();
        lease
            .renew(
                &b,
                tokio::time::Instant::now(),
                Some(Duration::from_secs(3)),
            )
            .await;
        (b, lease)
    }

    /// A pause of the whole process: the clock jumps past the lease and no timer has fired
    /// (the guard has not run). Whatever comes first afterwards, a report or a renewal, stops
    /// the work before it reads or extends anything.
    #[tokio::test(start_paused = true)]
    async fn after_a_pause_past_the_lease_a_report_shows_nothing_running() {
        let (b, lease) = one_running_under_a_3s_lease().await;
        let (before, _) = fenced_report(&lease, &b).await.expect("a report");
        assert_eq!(before[0].phase, LocalPhase::Running);
        tokio::time::advance(Duration::from_secs(10)).await;
        let (after, _) = fenced_report(&lease, &b).await.expect("a report");
        assert_eq!(after.len(), 1);
        assert!(
            matches!(after[0].phase, LocalPhase::Evicted { .. }),
            "the lapsed lease stopped the work before the report was read: {after:?}"
        );
        assert!(lease.0.lock().await.suspended);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_after_a_pause_past_the_lease_stops_the_work_and_asks_for_a_replay() {
        let (b, lease) = one_running_under_a_3s_lease().await;
        tokio::time::advance(Duration::from_secs(10)).await;
        // The first heartbeat after the pause is acknowledged: the old lease had run out, so
        // the federation may have moved the work; it stops, and the new lease replays.
        lease
            .renew(
                &b,
                tokio::time::Instant::now(),
                Some(Duration::from_secs(3)),
            )
            .await;
        let st = b.statuses().await.expect("statuses");
        assert!(
            st.iter()
                .all(|s| !matches!(s.phase, LocalPhase::Running | LocalPhase::Pending)),
            "{st:?}"
        );
        let l = lease.0.lock().await;
        assert_eq!(l.resumed, 1, "the assignments are replayed from revision 0");
        assert!(l.may_run(tokio::time::Instant::now()));
    }

    /// A sim cluster whose API can be taken down.
    struct Flaky {
        sim: SimBackend,
        down: std::sync::atomic::AtomicBool,
    }

    impl Flaky {
        fn up(&self) -> Result<(), BackendError> {
            if self.down.load(Ordering::SeqCst) {
                return Err(BackendError::Unavailable("down".into()));
            }
            Ok(())
        }
    }

    impl Backend for Flaky {
        async fn digest(&self) -> Result<CapacityDigest, BackendError> {
            self.up()?;
            self.sim.digest().await
        }
        async fn ensure(&self, a: &tideway_api::agent::Assignment) -> Result<(), BackendError> {
            self.up()?;
            self.sim.ensure(a).await
        }
        async fn preempt(&self, uid: &str, grace: Duration) -> Result<(), BackendError> {
            self.up()?;
            self.sim.preempt(uid, grace).await
        }
        async fn checkpoint(&self, uid: &str, by: DateTime<Utc>) -> Result<(), BackendError> {
            self.sim.checkpoint(uid, by).await
        }
        async fn remove(&self, uid: &str) -> Result<(), BackendError> {
            self.up()?;
            self.sim.remove(uid).await
        }
        async fn statuses(&self) -> Result<Vec<LocalStatus>, BackendError> {
            self.up()?;
            self.sim.statuses().await
        }
        fn now(&self) -> DateTime<Utc> {
            self.sim.now()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn while_lapsed_work_cannot_be_stopped_nothing_is_reported_or_renewed() {
        let b = Flaky {
            sim: SimBackend::new(small(), Arc::new(ManualClock::new(t(0)))),
            down: Default::default(),
        };
        b.ensure(&assignment("u1", 1, 8, None))
            .await
            .expect("ensure");
        let lease = Lease::default();
        let three = Some(Duration::from_secs(3));
        lease.renew(&b, tokio::time::Instant::now(), three).await;
        tokio::time::advance(Duration::from_secs(10)).await;
        b.down.store(true, Ordering::SeqCst);
        assert!(lease.hold(&b).await.is_err(), "nothing may be shown");
        assert!(fenced_report(&lease, &b).await.is_none());
        // An acknowledgement does not revive the lapsed lease over work still running.
        lease.renew(&b, tokio::time::Instant::now(), three).await;
        assert!(lease.hold(&b).await.is_err());
        // The cluster answers again: the work stops first, then a renewal replays.
        b.down.store(false, Ordering::SeqCst);
        let (st, _) = fenced_report(&lease, &b).await.expect("a report");
        assert!(matches!(st[0].phase, LocalPhase::Evicted { .. }), "{st:?}");
        lease.renew(&b, tokio::time::Instant::now(), three).await;
        assert_eq!(lease.0.lock().await.resumed, 1);
    }

    #[test]
    fn without_a_lease_from_the_federation_the_work_keeps_running() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let b = SimBackend::new(small(), Arc::new(ManualClock::new(t(0))));
        rt.block_on(b.ensure(&assignment("u1", 1, 8, None)))
            .expect("ensure");
        let lease = Lease::default();
        rt.block_on(async {
            lease.renew(&b, tokio::time::Instant::now(), None).await;
            let mut st = lease.0.lock().await;
            Lease::enforce(&mut st, &b).await;
            assert!(!st.suspended);
            assert!(st.may_run(tokio::time::Instant::now() + Duration::from_secs(3600)));
        });
        assert_eq!(active(&b), vec!["u1".to_string()]);
    }

    #[test]
    fn work_never_started_here_is_reported_evicted_or_failed() {
        let b = SimBackend::new(small(), Arc::new(ManualClock::new(t(0))));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(b.ensure(&assignment("u1", 1, 8, None)))
            .expect("ensure");
        // u1 attempt 1 is held (it reports itself when it stops); attempt 2 of u1 and u2
        // never came here.
        let evicted = || LocalPhase::Evicted {
            reason: "preempted before it started on this member".into(),
        };
        let mut gone = vec![
            ("u1".to_string(), 1, evicted()),
            ("u1".to_string(), 2, evicted()),
            ("u2".to_string(), 1, evicted()),
        ];
        for (uid, _, _) in &gone {
            rt.block_on(b.preempt(uid, Duration::from_secs(30)))
                .expect("preempt");
        }
        // u3 names a pool the cluster does not have: refused for good, reported Failed.
        let mut bad = assignment("u3", 1, 8, None);
        bad.pool = Some("nope".into());
        let Err(BackendError::Rejected(why)) = rt.block_on(b.ensure(&bad)) else {
            panic!("a pool the cluster lacks is refused");
        };
        gone.push((
            "u3".into(),
            1,
            LocalPhase::Failed {
                reason: why.clone(),
            },
        ));
        let out = never_started(&futures_statuses(&b), &gone, t(5));
        let got: Vec<(&str, u32)> = out.iter().map(|s| (s.uid.as_str(), s.attempt)).collect();
        assert_eq!(got, vec![("u1", 2), ("u2", 1), ("u3", 1)]);
        assert!(
            out[..2]
                .iter()
                .all(|s| matches!(s.phase, LocalPhase::Evicted { .. }) && s.since == t(5))
        );
        assert_eq!(out[2].phase, LocalPhase::Failed { reason: why });
        assert_eq!(active(&b), vec!["u1".to_string()], "u1 checkpoints first");
    }

    fn record(uid: &str, desired: Desired) -> AssignmentRecord {
        AssignmentRecord {
            revision: 1,
            assignment: assignment(uid, 1, 8, Some(60)),
            desired,
            checkpoint_by: None,
        }
    }

    #[test]
    fn a_cancel_after_success_and_a_replay_without_the_record_both_forget_finished_work() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let clock = Arc::new(ManualClock::new(t(0)));
        let b = SimBackend::new(small(), clock.clone());
        for uid in ["done", "compacted", "listed", "runs"] {
            let mut a = assignment(uid, 1, 8, Some(60));
            if uid == "runs" {
                a.workload.spec.runtime_estimate_seconds = Some(3600);
            }
            rt.block_on(b.ensure(&a)).expect("ensure");
        }
        clock.advance(Duration::from_secs(120));
        let finished: Vec<String> = futures_statuses(&b)
            .into_iter()
            .filter(|s| s.phase == LocalPhase::Succeeded)
            .map(|s| s.uid)
            .collect();
        assert_eq!(finished.len(), 3, "{finished:?}");
        // The federation recorded the success of "done" and answered with Cancel: the agent
        // removes it, as follow_assignments does for every Cancel.
        rt.block_on(b.remove("done")).expect("remove");
        // Then a full replay: "compacted" is no longer listed (compacted while the agent was
        // away), "listed" still is (its success not yet recorded), "runs" still runs.
        let listed = [record("listed", Desired::Run), record("runs", Desired::Run)];
        assert_eq!(
            unlisted_terminal(&futures_statuses(&b), &listed),
            vec!["compacted".to_string()]
        );
        assert!(rt.block_on(forget_unlisted(&b, &listed)));
        let mut left: Vec<String> = futures_statuses(&b).into_iter().map(|s| s.uid).collect();
        left.sort();
        assert_eq!(left, vec!["listed".to_string(), "runs".to_string()]);
        // Work that still runs is never swept, listed or not.
        assert!(rt.block_on(forget_unlisted(&b, &[])));
        assert_eq!(active(&b), vec!["runs".to_string()]);
    }

    #[test]
    fn retry_delays_grow_from_the_minimum_stay_bounded_and_never_end() {
        let d: Vec<Duration> = retry_delays().take(50).collect();
        assert_eq!(d.len(), 50, "the agent retries forever");
        assert!(d[0] >= Duration::from_millis(100), "{d:?}");
        // Jitter adds at most the delay itself to the 1 s cap.
        assert!(d.iter().all(|x| *x <= Duration::from_secs(2)), "{d:?}");
        assert!(d[49] >= Duration::from_secs(1), "{d:?}");
    }
}
