//! `GET /v1/schedules` and `GET /v1/schedules/{name}/timeline`: quota schedules as applied,
//! the window each is in, and a week of quotas hour by hour.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use tideway_api::ScheduleTimeline;

use super::AppState;
use super::error::ApiError;
use crate::dispatcher::tidal::timeline_view;

/// A week, hour by hour.
pub const DEFAULT_TIMELINE_HOURS: u32 = 7 * 24;
/// Five weeks: enough for any comparison, small enough to answer at once.
pub const MAX_TIMELINE_HOURS: u32 = 5 * 7 * 24;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TimelineQuery {
    #[serde(default)]
    pub hours: Option<u32>,
    #[serde(default)]
    pub stale: bool,
}

pub async fn timeline(
    State(st): State<AppState>,
    Path(name): Path<String>,
    q: Result<Query<TimelineQuery>, QueryRejection>,
) -> Result<Json<ScheduleTimeline>, ApiError> {
    let Query(q) = q.map_err(super::workloads::query_error)?;
    let hours = q.hours.unwrap_or(DEFAULT_TIMELINE_HOURS);
    if hours == 0 || hours > MAX_TIMELINE_HOURS {
        return Err(ApiError::field(
            "hours",
            format!("must be between 1 and {MAX_TIMELINE_HOURS} (got {hours})"),
        ));
    }
    st.read_barrier(q.stale).await?;
    let now = st.clock.now();
    st.read(|d| timeline_view(&d.state, &name, now, hours))?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no quota schedule named {name:?} is applied")))
}

/// Every applied schedule where it stands now (the timeline of each, one hour long).
pub async fn list(State(st): State<AppState>) -> Result<Json<Vec<ScheduleTimeline>>, ApiError> {
    st.read_barrier(false).await?;
    let now = st.clock.now();
    Ok(Json(st.read(|d| {
        d.state
            .tidal
            .schedules
            .keys()
            .filter_map(|n| timeline_view(&d.state, n, now, 1))
            .collect()
    })?))
}

/// `GET /v1/schedules/{name}/next`: what the next boundary will do on the live state (the
/// leader's cycle run on a copy, at the boundary's instant). Nothing is written.
pub async fn next(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<tideway_api::ScheduleNext>, ApiError> {
    st.read_barrier(false).await?;
    let now = st.clock.now();
    let live = st.liveness.clone();
    let state = st.read(|d| d.copy())?;
    let missing = format!("no quota schedule named {name:?} is applied");
    tokio::task::spawn_blocking(move || {
        crate::dispatcher::tidal_preview::next_boundary(
            &state,
            &name,
            |n| live.latest_digest(n),
            now,
        )
    })
    .await
    .map_err(|e| ApiError::Internal(format!("schedule preview: {e}")))?
    .map(Json)
    .ok_or(ApiError::NotFound(missing))
}
