//! `GET /v1/webhooks` and `DELETE /v1/webhooks/{name}`: webhooks with their delivery state (cursor, last delivery,
//! failures, last error), after a linearizable read barrier. Secrets are never here: the
//! resource holds only where each server reads them.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use tideway_api::webhook::{Webhook, WebhookList};

use crate::state::command::{Command, StoredObject};

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

/// `DELETE /v1/webhooks/{name}`: answers the webhook as it was; 404 if there is none (and
/// nothing is written).
pub async fn delete(
    State(st): State<AppState>,
    principal: Option<axum::Extension<tideway_api::auth::Principal>>,
    Path(name): Path<String>,
) -> Result<Json<Webhook>, ApiError> {
    let deleted = st
        .delete_named(
            principal,
            "webhook",
            &name,
            |d| d.state.webhooks.contains_key(&name),
            |at| Command::DeleteWebhook {
                name: name.clone(),
                at,
            },
        )
        .await?;
    match deleted {
        StoredObject::Webhook(w) => Ok(Json(*w)),
        other => Err(ApiError::Internal(format!(
            "unexpected stored object {other:?}"
        ))),
    }
}
