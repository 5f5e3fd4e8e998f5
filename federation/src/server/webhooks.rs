//! `GET /v1/webhooks`: webhooks with their delivery state (cursor, last delivery,
//! failures, last error), after a linearizable read barrier. Secrets are never here: the
//! resource holds only where each server reads them.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::Deserialize;
use tideway_api::webhook::WebhookList;

use super::AppState;
use super::error::ApiError;
use super::workloads::query_error;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct WebhookParams {
    #[serde(default)]
    pub stale: bool,
}

pub async fn list(
    State(st): State<AppState>,
    params: Result<Query<WebhookParams>, QueryRejection>,
) -> Result<Json<WebhookList>, ApiError> {
    let Query(p) = params.map_err(query_error)?;
    st.read_barrier(p.stale).await?;
    let items = st.read(|d| d.state.webhooks.values().cloned().collect())?;
    Ok(Json(WebhookList { items }))
}
