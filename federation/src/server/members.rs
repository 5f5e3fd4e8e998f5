//! `/v1/members/*`: the agent protocol (register, heartbeat, assignments, status) and the
//! capacity view.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use tideway_api::agent::{
    AssignmentPage, Heartbeat, HeartbeatAck, RegisterRequest, StatusAck, StatusReport,
};
use tideway_api::capacity::{
    CapacitySummary, CapacityView, ClusterCapacity, FRAGMENTATION_DEFINITION, FlavorCapacity,
    PoolCapacity, RegionCapacity,
};
use tideway_api::list::MemberClusterList;
use tideway_api::{ClusterName, MemberCluster, Validate};

use super::AppState;
use super::cluster::json_body;
use super::error::ApiError;
use crate::dispatcher::liveness;
use crate::propose::forward::HeartbeatForward;
use crate::state::command::{Command, CommandResult, StoredObject};

fn member_of(res: CommandResult) -> Result<MemberCluster, ApiError> {
    match res {
        CommandResult::Created {
            object: StoredObject::MemberCluster(m),
        } => Ok(*m),
        other => Err(ApiError::unexpected(other)),
    }
}

/// A member name from a path: a DNS-1123 label, or a 400 that names it. A name that passed
/// this can never reach another route, wherever it is used.
pub(crate) fn member_name(name: &str) -> Result<(), ApiError> {
    tideway_api::meta::validate_name(name).map_err(|e| ApiError::field("name", e.to_string()))
}

pub async fn register(
    State(st): State<AppState>,
    principal: Option<axum::Extension<tideway_api::auth::Principal>>,
    access: Option<axum::Extension<super::authz::Access>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<MemberCluster>, ApiError> {
    let req: RegisterRequest = json_body(body)?;
    let actor = principal
        .as_ref()
        .map(|axum::Extension(p)| p.subject.clone());
    if let Some(axum::Extension(p)) = principal
        && !access.is_some_and(|axum::Extension(a)| a.may_act_for(&req.member.metadata.name))
    {
        return Err(super::authz::deny(
            &p,
            format!(
                "'{}' may not register member cluster '{}'",
                p.subject, req.member.metadata.name
            ),
        ));
    }
    req.member
        .validate()
        .map_err(|e| ApiError::Invalid(e.into_inner()))?;
    // A member an operator removed stays removed: refused before anything is written.
    if let Some(why) = st.read(|d| d.state.registration_refused(&req.member.metadata.name))? {
        return Err(ApiError::Conflict(why));
    }
    let res = st
        .proposer
        .propose(Command::by(
            actor.as_deref(),
            Command::RegisterMember {
                member: Box::new(req.member),
                agent_version: req.agent_version,
                at: st.clock.now(),
                flaps: Some(st.dispatch.flaps),
            },
        ))
        .await?;
    let member = member_of(res)?;
    tracing::info!(
        member = %member.metadata.name,
        region = %member.spec.region,
        actor = actor.as_deref().unwrap_or("-"),
        "member cluster registered"
    );
    Ok(Json(member))
}

pub async fn heartbeat(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<HeartbeatAck>, ApiError> {
    member_name(&name)?;
    let bytes = body.as_ref().map_or(0, |b| b.len());
    let hb: Heartbeat = json_body(body)?;
    heartbeat_fits(&name, &hb).map_err(|(field, why)| ApiError::field(field, why))?;
    let carried = match (&hb.digest, &hb.digest_delta) {
        (Some(_), _) => "full",
        (None, Some(d)) if d.pools.is_empty() => "unchanged",
        (None, Some(_)) => "delta",
        (None, None) => "none",
    };
    // Liveness lives on the leader: a follower passes the heartbeat on.
    let outcome = match st.forwarder.remote_leader().await? {
        Some(leader) => {
            let fwd = HeartbeatForward {
                member: name.clone(),
                heartbeat: hb,
            };
            st.forwarder.heartbeat(leader, &fwd).await?
        }
        None => {
            liveness::heartbeat(
                &st.raft,
                &st.liveness,
                &st.data,
                &st.proposer,
                &st.dispatch,
                &name,
                &hb,
            )
            .await?
        }
    };
    st.metrics.heartbeat(&name, carried, bytes);
    if outcome.base_unknown {
        st.metrics.heartbeat(&name, "resync", 0);
    }
    Ok(Json(HeartbeatAck {
        member: ClusterName::from(name),
        digest_replicated: outcome.replicated,
        lease_ms: Some(st.dispatch.agent_lease().as_millis() as u64),
        digest_version: outcome.version,
        digest_base_unknown: outcome.base_unknown,
    }))
}

/// Whether a heartbeat is well formed for member `name`: at most one of a full digest and a
/// delta, and a full digest of this member. The field and the reason when not. Checked on the
/// node that received it and again on the leader.
pub(crate) fn heartbeat_fits(name: &str, hb: &Heartbeat) -> Result<(), (&'static str, String)> {
    if hb.digest.is_some() && hb.digest_delta.is_some() {
        return Err((
            "digestDelta",
            "a heartbeat carries a full digest or a delta, not both".into(),
        ));
    }
    match &hb.digest {
        Some(d) if d.cluster != name => Err((
            "digest.cluster",
            format!("is '{}', but the heartbeat is for '{name}'", d.cluster),
        )),
        _ => Ok(()),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AssignmentsQuery {
    #[serde(default)]
    pub after: u64,
    /// Long-poll: wait up to this long for a change (at most 60).
    #[serde(default)]
    pub wait_seconds: u64,
}

/// Assignments changed after a revision, long-polled. Served from this node's copy once it
/// has caught up with the leader (a read barrier): the revision only moves forward, so an
/// agent resuming from it never misses a change, whichever node it asks, and an agent that
/// replays from the start (after a restart, or when its lease comes back) never sees a stale
/// `Run` for work the federation has already moved elsewhere.
pub async fn assignments(
    State(st): State<AppState>,
    Path(name): Path<String>,
    q: Result<Query<AssignmentsQuery>, QueryRejection>,
) -> Result<Json<AssignmentPage>, ApiError> {
    let Query(q) = q.map_err(super::workloads::query_error)?;
    st.read_barrier(false).await?;
    let wait = Duration::from_secs(q.wait_seconds.min(60));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let (items, applied, known) = st.read(|d| {
            (
                d.state.assignments_after(&name, q.after),
                d.last_applied.map(|l| l.index()).unwrap_or(0),
                d.state.members.contains_key(&name),
            )
        })?;
        if !known {
            return Err(ApiError::NotFound(format!(
                "member cluster '{name}' is not registered"
            )));
        }
        let now = tokio::time::Instant::now();
        if !items.is_empty() || now >= deadline {
            let revision = items.iter().map(|r| r.revision).max().unwrap_or(q.after);
            return Ok(Json(AssignmentPage { items, revision }));
        }
        let _ = st
            .raft
            .wait(Some(deadline - now))
            .applied_index_at_least(Some(applied + 1), "assignments long-poll")
            .await;
    }
}

pub async fn status(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<StatusAck>, ApiError> {
    let report: StatusReport = json_body(body)?;
    // Only what would change something is proposed: a replayed report, or one for an unknown
    // member or workload, is acknowledged without a log entry. Judged after a read barrier: a
    // node that lags (or is cut off) would not know a new assignment and acknowledge its
    // report as a no-op, and the agent, taking that for delivered, would never send it again
    // (the workload would stay Running on the federation's side for ever).
    st.read_barrier(false).await?;
    let (statuses, checkpoints) = st.read(|d| {
        (
            report
                .statuses
                .into_iter()
                .filter(|s| d.state.status_takes_effect(&name, s))
                .collect::<Vec<_>>(),
            report
                .checkpoints
                .into_iter()
                .filter(|c| d.state.checkpoint_takes_effect(&name, c))
                .collect::<Vec<_>>(),
        )
    })?;
    // Checkpoints first: a report that says both "checkpointed" and "finished" records the
    // checkpoint while the workload still runs.
    let mut updated = 0;
    if !checkpoints.is_empty() {
        match st
            .proposer
            .propose(Command::ReportCheckpoints {
                cluster: name.clone().into(),
                checkpoints,
            })
            .await?
        {
            CommandResult::Updated { count } => updated += count,
            other => return Err(ApiError::unexpected(other)),
        }
    }
    if statuses.is_empty() {
        return Ok(Json(StatusAck { updated }));
    }
    // Counted once committed, and only for reports that took effect (not replays).
    let evicted = statuses
        .iter()
        .filter(|s| matches!(s.phase, tideway_api::agent::LocalPhase::Evicted { .. }))
        .count();
    let res = st
        .proposer
        .propose(Command::ReportStatus {
            cluster: name.clone().into(),
            statuses,
        })
        .await?;
    match res {
        CommandResult::Updated { count } => {
            if evicted > 0 {
                st.metrics.evicted(&name, evicted);
            }
            Ok(Json(StatusAck {
                updated: updated + count,
            }))
        }
        other => Err(ApiError::unexpected(other)),
    }
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StaleQuery {
    #[serde(default)]
    pub stale: bool,
}

pub async fn list(
    State(st): State<AppState>,
    q: Result<Query<StaleQuery>, QueryRejection>,
) -> Result<Json<MemberClusterList>, ApiError> {
    let Query(q) = q.map_err(super::workloads::query_error)?;
    st.read_barrier(q.stale).await?;
    let items = st.read(|d| {
        d.state
            .members
            .values()
            .map(|m| m.cluster.clone())
            .collect::<Vec<_>>()
    })?;
    Ok(Json(MemberClusterList::new(items)))
}

pub async fn capacity(
    State(st): State<AppState>,
    q: Result<Query<StaleQuery>, QueryRejection>,
) -> Result<Json<CapacityView>, ApiError> {
    let Query(q) = q.map_err(super::workloads::query_error)?;
    st.read_barrier(q.stale).await?;
    let view = st.read(|d| capacity_view(&d.state))?;
    Ok(Json(view))
}

/// The fleet's capacity from the members' latest digests: the `/v1/capacity` answer, and what
/// the capacity and fragmentation metrics report.
pub(super) fn capacity_view(state: &crate::state::FederationState) -> CapacityView {
    {
        let mut fleet = CapacitySummary::default();
        let mut regions: BTreeMap<String, CapacitySummary> = BTreeMap::new();
        let mut flavors: BTreeMap<String, CapacitySummary> = BTreeMap::new();
        let mut clusters = Vec::new();
        for (name, m) in &state.members {
            let status = m.cluster.status.clone().unwrap_or_default();
            let mut cap = CapacitySummary::default();
            let mut pools = Vec::new();
            if let Some(dg) = &m.digest {
                for p in &dg.pools {
                    let pc = PoolCapacity::from_digest(p);
                    cap.add(&pc.capacity);
                    flavors
                        .entry(p.flavor.clone())
                        .or_default()
                        .add(&pc.capacity);
                    pools.push(pc);
                }
            }
            fleet.add(&cap);
            regions
                .entry(m.cluster.spec.region.clone())
                .or_default()
                .add(&cap);
            clusters.push(ClusterCapacity {
                cluster: name.clone(),
                region: m.cluster.spec.region.clone(),
                phase: status.phase,
                last_heartbeat: status.last_heartbeat,
                digest_at: m.digest.as_ref().map(|d| d.generated_at),
                capacity: cap,
                pools,
            });
        }
        CapacityView {
            fleet,
            regions: regions
                .into_iter()
                .map(|(region, capacity)| RegionCapacity { region, capacity })
                .collect(),
            flavors: flavors
                .into_iter()
                .map(|(flavor, capacity)| FlavorCapacity { flavor, capacity })
                .collect(),
            clusters,
            fragmentation_definition: FRAGMENTATION_DEFINITION.to_string(),
        }
    }
}
