//! `/v1/workloads`: submit, get, list, cancel. Plus read-only listings of queues and priority classes.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use tideway_api::auth::Principal;
use tideway_api::list::{PriorityClassList, QueueList, WorkloadList};
use tideway_api::{API_VERSION, Validate, Workload, WorkloadPhase};

use super::authz::{self, Access};
use super::error::ApiError;
use super::{AppState, MAX_BODY_BYTES};
use crate::state::command::{Command, CommandResult, Rejection, StoredObject};
use crate::state::tenancy::{self, DEFAULT_TENANT, Resolved};

pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
const MAX_KEY_LEN: usize = 256;

fn body_or_error(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge {
                limit: MAX_BODY_BYTES,
            }
        } else {
            ApiError::BadBody(e.body_text())
        }
    })
}

/// The client's key, or `None` when it sent none: the server then uses the workload's UID,
/// fresh and never repeated, which apply stores as one string shared by the record and the
/// UID index (a generated key of its own was about 64 bytes more per workload).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get(IDEMPOTENCY_HEADER) {
        None => Ok(None),
        Some(v) => {
            let s = v.to_str().map_err(|_| {
                ApiError::field("header:Idempotency-Key", "must be printable ASCII")
            })?;
            if s.is_empty() || s.len() > MAX_KEY_LEN {
                return Err(ApiError::field(
                    "header:Idempotency-Key",
                    format!("must be 1 to {MAX_KEY_LEN} characters"),
                ));
            }
            Ok(Some(s.to_string()))
        }
    }
}

/// The Content-Type a client sent, if any. A value that is not visible ASCII is refused with
/// 415 rather than read as if it were absent (and so taken for JSON).
pub fn content_type(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    match headers.get(header::CONTENT_TYPE) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s).filter(|s| !s.is_empty()))
            .map_err(|_| ApiError::UnsupportedMediaType(format!("{:?}", v.as_bytes()))),
    }
}

/// Decodes a workload from JSON or YAML, as the Content-Type says.
pub fn decode_workload(headers: &HeaderMap, body: &[u8]) -> Result<Workload, ApiError> {
    let ct = content_type(headers)?.unwrap_or("application/json");
    if tideway_api::Format::from_content_type(ct).is_none() {
        return Err(ApiError::UnsupportedMediaType(ct.to_string()));
    }
    // Another kind of document says which verb takes it, rather than failing on its fields.
    if let Ok(meta) = tideway_api::peek_type_meta(body, Some(ct))
        && meta.kind != <Workload as tideway_api::Resource>::KIND
        && tideway_api::AnyResource::KINDS.contains(&meta.kind.as_str())
    {
        return Err(ApiError::field(
            "kind",
            format!(
                "submit takes a Workload; create or replace a {} with `tideway apply -f` \
                 (POST /v1/apply)",
                meta.kind
            ),
        ));
    }
    tideway_api::decode_any(body, Some(ct)).map_err(ApiError::from)
}

/// The GPU flavors the fleet offers: those of the pools in the members' latest capacity
/// digests. Empty while no member has reported one, when nothing can be said of a flavor.
pub(crate) fn fleet_flavors(
    state: &crate::state::FederationState,
) -> std::collections::BTreeSet<String> {
    state
        .members
        .values()
        .filter_map(|m| m.digest.as_ref())
        .flat_map(|d| d.pools.iter().map(|p| p.flavor.clone()))
        .collect()
}

/// The flavors `w` asks for that no member offers, with the flavors the fleet has; `None`
/// when every flavor is offered, or no member has reported its capacity yet.
pub(crate) fn absent_flavors(
    state: &crate::state::FederationState,
    w: &Workload,
) -> Option<(Vec<String>, Vec<String>)> {
    let fleet = fleet_flavors(state);
    if fleet.is_empty() {
        return None;
    }
    let mut absent: Vec<String> = w
        .spec
        .pod_sets
        .iter()
        .map(|p| p.flavor.to_string())
        .filter(|f| !fleet.contains(f))
        .collect();
    absent.sort();
    absent.dedup();
    (!absent.is_empty()).then(|| (absent, fleet.into_iter().collect()))
}

/// Why an accepted workload cannot run as the fleet is: it is kept (a member offering its
/// flavor may join), but the submitter is told rather than left waiting.
pub(crate) fn submission_warnings(
    state: &crate::state::FederationState,
    w: &Workload,
) -> Vec<String> {
    match absent_flavors(state, w) {
        Some((absent, fleet)) => vec![format!(
            "no member cluster offers {} GPUs (the fleet has {}): the workload stays pending \
             until a member with that flavor joins; resubmit with a flavor the fleet has",
            absent.join(", "),
            fleet.join(", ")
        )],
        None => Vec::new(),
    }
}

/// Refuses a `spec.template` larger than `max` bytes of JSON, naming the field.
fn check_template(w: &Workload, max: usize) -> Result<(), ApiError> {
    let Some(t) = &w.spec.template else {
        return Ok(());
    };
    let len = serde_json::to_vec(t).map_or(usize::MAX, |b| b.len());
    if len > max {
        return Err(ApiError::field(
            "spec.template",
            format!("is {len} bytes as JSON; at most {max} are accepted"),
        ));
    }
    Ok(())
}

pub async fn submit(
    State(st): State<AppState>,
    principal: Option<Extension<Principal>>,
    access: Option<Extension<Access>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let res = submit_checked(&st, principal, access, headers, body).await;
    if let Err(e) = &res {
        // By the problem type the client sees: invalid, conflict, forbidden, unavailable...
        let problem = e.to_problem();
        st.metrics
            .rejected(problem.type_.rsplit('/').next().unwrap_or("unknown"));
    }
    res
}

async fn submit_checked(
    st: &AppState,
    principal: Option<Extension<Principal>>,
    access: Option<Extension<Access>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = st.clock.instant();
    let body = body_or_error(body)?;
    let uid = tideway_api::new_uid();
    let client_key = idempotency_key(&headers)?;
    let mut w = decode_workload(&headers, &body)?;
    // Authenticated: the workload is the caller's, whatever the body claims, and only in a
    // queue the caller may submit to.
    let actor = principal.as_ref().map(|Extension(p)| p.subject.clone());
    if let Some(Extension(p)) = principal {
        let allowed = access.is_some_and(|Extension(a)| a.may_submit_to(&w.spec.queue));
        if !allowed {
            return Err(authz::deny(
                &p,
                format!("'{}' may not submit to queue '{}'", p.subject, w.spec.queue),
            ));
        }
        w.spec.user = Some(p.subject.into());
    }
    w.validate()
        .map_err(|e| ApiError::Invalid(e.into_inner()))?;
    check_template(&w, st.limits.max_template_bytes)?;
    // The queue's time limits: its default when the workload names none, its maximum
    // enforced (an unknown queue is refused below).
    // Under the read lock rather than on a copy of the queue's spec: the check is a few
    // comparisons, the copy was a handful of allocations per submission.
    // The queue's tenant scopes the name: a workload of another tenant than the default is
    // stored as TENANT/NAME (`state::tenancy`), so another tenant's names are not in its way.
    let plain = w.metadata.name.clone();
    let tenant = st
        .read(|d| match d.state.queues.get(w.spec.queue.as_str()) {
            Some(q) => q
                .spec
                .apply_time_limits(&mut w.spec)
                .map(|()| (q.spec.tenant != DEFAULT_TENANT).then(|| q.spec.tenant.clone())),
            None => Ok(None),
        })?
        .map_err(|e| ApiError::Invalid(vec![e]))?;
    if let Some(t) = &tenant {
        w.metadata.name = tenancy::stored_name(t, &plain);
    }
    let tenant = tenant.as_deref().unwrap_or(DEFAULT_TENANT);
    // An authenticated caller's key is its own: another subject's same key is a new key.
    let key = match &client_key {
        Some(k) => tenancy::scoped_key(actor.as_deref(), k),
        None => uid.clone(),
    };
    // Taken once, here: it travels in the command, so the nodes that apply it need not.
    let digest = crate::state::idempotency::submission_digest(&w);
    // A quick answer for a replay or an unknown queue; apply checks both again, in log order.
    let (key, pre) = st.read(|d| {
        let key = legacy_key(&d.state, key, client_key.as_deref(), actor.as_deref());
        match d.state.replay(&key, || digest) {
            Some(Ok(existing)) => return Ok((key, Some(existing.clone()))),
            Some(Err(rejection)) => return Err(ApiError::from(present_rejection(rejection))),
            None => {}
        }
        // A taken name is refused here, so a refused submission writes nothing to the log.
        if d.state.name_taken(tenant, &plain) {
            return Err(ApiError::from(Rejection::Conflict { name: plain }));
        }
        let mut errs = d.state.check_references(&w);
        errs.extend(d.state.check_permissions(&w));
        if errs.is_empty() {
            Ok((key, None))
        } else {
            Err(ApiError::Invalid(errs))
        }
    })??;
    if let Some(existing) = pre {
        st.metrics.submissions("replayed");
        return Ok(workload_response(StatusCode::OK, &existing));
    }
    w.status = None;
    w.metadata.uid = Some(uid);
    let cmd = Command::by(
        actor.as_deref(),
        Command::SubmitWorkload {
            workload: Box::new(w),
            idempotency_key: key,
            at: st.clock.now(),
            digest: Some(digest),
        },
    );
    let result = st.proposer.propose(cmd).await;
    let resp = match result {
        Ok(CommandResult::Created {
            object: StoredObject::Workload(w),
        }) => {
            st.metrics.submissions("created");
            tracing::info!(
                workload = %w.metadata.name,
                queue = %w.spec.queue,
                class = w.spec.class.as_str(),
                gpus = w.spec.total_gpus(),
                "workload submitted"
            );
            let warnings = st.read(|d| submission_warnings(&d.state, &w))?;
            if warnings.is_empty() {
                workload_response(StatusCode::CREATED, &w)
            } else {
                submitted_response(&w, warnings)
            }
        }
        Ok(CommandResult::Existing {
            object: StoredObject::Workload(w),
        }) => {
            st.metrics.submissions("replayed");
            workload_response(StatusCode::OK, &w)
        }
        Ok(CommandResult::Rejected { rejection }) => {
            st.metrics.submissions("rejected");
            return Err(present_rejection(rejection).into());
        }
        Ok(other) => return Err(ApiError::unexpected(other)),
        Err(e) => {
            st.metrics.submissions("unavailable");
            return Err(e.into());
        }
    };
    st.metrics.observe_submit(started.elapsed());
    Ok(resp)
}

/// The record key to use for a submission: `key`, unless the subject sent the same key
/// before keys were scoped per subject, in which case its unscoped record, so that a retry
/// across the upgrade is still answered with its workload.
fn legacy_key(
    state: &crate::state::FederationState,
    key: String,
    client_key: Option<&str>,
    subject: Option<&str>,
) -> String {
    let (Some(plain), Some(subject)) = (client_key, subject) else {
        return key;
    };
    if state.idempotency.contains_key(key.as_str()) {
        return key;
    }
    match state.by_idempotency_key(plain) {
        Some(w) if w.spec.user.as_deref() == Some(subject) => plain.to_owned(),
        _ => key,
    }
}

/// A refusal as the client sees it: its own key and the plain workload name, never the
/// scoped forms the state records.
fn present_rejection(r: Rejection) -> Rejection {
    match r {
        Rejection::Conflict { name } => Rejection::Conflict {
            name: tenancy::plain_name(&name).to_owned(),
        },
        Rejection::IdempotencyKeyReused { key, workload } => Rejection::IdempotencyKeyReused {
            key: tenancy::client_key(&key).to_owned(),
            workload: tenancy::plain_name(&workload).to_owned(),
        },
        Rejection::Terminal { name, phase } => Rejection::Terminal {
            name: tenancy::plain_name(&name).to_owned(),
            phase,
        },
        other => other,
    }
}

/// A workload for an answer: with its plain name (a copy only when it is stored under a
/// qualified one).
fn presented(w: &Workload) -> std::borrow::Cow<'_, Workload> {
    if w.metadata.name.contains('/') {
        let mut w = w.clone();
        tenancy::present(&mut w);
        std::borrow::Cow::Owned(w)
    } else {
        std::borrow::Cow::Borrowed(w)
    }
}

/// Where a workload's JSON answer starts its buffer: most answers fit (a submitted workload
/// is 0.6-1 KiB). axum's `Json` starts at 128 bytes and doubles, which copied a submission's
/// answer four or five times on the way. Below 1 KiB, since glibc serves smaller requests from
/// its per-thread cache, while a larger one first consolidates its fast bins
/// (`malloc_consolidate`, a visible share of a loaded leader's profile with 2 KiB here;
/// measured: docs/benchmarks/submissions.md).
const WORKLOAD_JSON_CAPACITY: usize = 1000;

fn workload_response(status: StatusCode, w: &Workload) -> Response {
    let w = presented(w);
    let mut buf = Vec::with_capacity(WORKLOAD_JSON_CAPACITY);
    if let Err(e) = serde_json::to_writer(&mut buf, &*w) {
        return ApiError::Internal(format!("encoding the workload: {e}")).into_response();
    }
    let json = HeaderValue::from_static("application/json");
    let mut resp = (status, [(header::CONTENT_TYPE, json)], buf).into_response();
    // The string's buffer becomes the header's, not a copy of it.
    let location = Bytes::from(format!("/v1/workloads/{}", w.metadata.name));
    if let Ok(v) = HeaderValue::from_maybe_shared(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// A 201 with warnings next to the workload: the rare answer, so not on the fast path of
/// [`workload_response`].
fn submitted_response(w: &Workload, warnings: Vec<String>) -> Response {
    let body = tideway_api::Submitted {
        workload: presented(w).into_owned(),
        warnings,
    };
    let location = format!("/v1/workloads/{}", body.workload.metadata.name);
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(body),
    )
        .into_response()
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    #[serde(default)]
    pub stale: bool,
}

pub(crate) fn query_error(e: QueryRejection) -> ApiError {
    // serde_urlencoded names the parameter in its message, e.g. "limit: invalid digit".
    let text = e.body_text();
    let field = text
        .split_once(": ")
        .map(|(_, rest)| rest)
        .unwrap_or(&text)
        .split(|c: char| c == ':' || c.is_whitespace())
        .next()
        .unwrap_or("")
        .trim_matches('`')
        .to_string();
    ApiError::field(&format!("query:{field}"), text)
}

/// The answer for a workload that does not exist, or that the caller may not read: the
/// same 404, so a submitter cannot learn another tenant's workload names by probing.
pub fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("workload '{id}' not found"))
}

/// A name found in several tenants the caller reads: it must say which.
fn ambiguous(id: &str, tenants: &[String]) -> ApiError {
    ApiError::field(
        "query:tenant",
        format!(
            "workload '{id}' exists in tenants {}: name one",
            tenants.join(", ")
        ),
    )
}

/// The workload `id` (a name, in the caller's tenants or in `tenant`, or a UID) among those
/// the caller may read: its stored form, or the same 404 as for a name that does not exist.
pub fn resolve<T>(
    state: &crate::state::FederationState,
    access: Option<&Access>,
    id: &str,
    tenant: Option<&str>,
    then: impl FnOnce(&Workload) -> T,
) -> Result<T, ApiError> {
    match state.resolve(id, tenant, |w| authz::readable(access, &w.spec.queue)) {
        Resolved::One(w) => Ok(then(w)),
        Resolved::NotFound => Err(not_found(id)),
        Resolved::Ambiguous(tenants) => Err(ambiguous(id, &tenants)),
    }
}

/// `?tenant=`: which tenant's workload a name means, for a caller that reads several.
#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TenantParams {
    /// The tenant (a queue's `spec.tenant`) whose workload the name means.
    pub tenant: Option<String>,
}

/// The query of `GET /v1/workloads/{id}`: a read, or a watch of the one workload.
#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct GetParams {
    /// The tenant (a queue's `spec.tenant`) whose workload the name means.
    pub tenant: Option<String>,
    #[serde(default)]
    pub stale: bool,
    #[serde(default)]
    pub watch: bool,
    #[serde(rename = "resourceVersion")]
    pub resource_version: Option<u64>,
    #[serde(rename = "timeoutSeconds")]
    pub timeout_seconds: Option<u64>,
}

/// `watch=true&resourceVersion=N&timeoutSeconds=T`: long-poll the changes after N. (Fields
/// repeated in each query type rather than flattened: serde's flatten loses the types of
/// URL-encoded values.)
#[derive(Debug, Default)]
pub struct WatchParams {
    pub watch: bool,
    pub resource_version: Option<u64>,
    pub timeout_seconds: Option<u64>,
}

impl WatchParams {
    async fn serve(
        &self,
        st: &AppState,
        access: Option<&Access>,
        scope: super::watch::WatchScope,
    ) -> Result<Response, ApiError> {
        let wait = self
            .timeout_seconds
            .unwrap_or(super::watch::DEFAULT_WAIT_SECS);
        if wait > super::watch::MAX_WAIT_SECS {
            return Err(ApiError::field(
                "query:timeoutSeconds",
                format!("must be at most {}", super::watch::MAX_WAIT_SECS),
            ));
        }
        let mut page = super::watch::watch(
            st,
            access,
            &scope,
            self.resource_version.unwrap_or(0),
            std::time::Duration::from_secs(wait),
        )
        .await?;
        for ev in &mut page.items {
            if let Some((_, name)) = ev.name.split_once('/') {
                ev.name = name.to_owned();
            }
            if let Some(w) = &mut ev.object {
                tenancy::present(w);
            }
        }
        Ok(Json(page).into_response())
    }
}

pub async fn get_one(
    State(st): State<AppState>,
    access: Option<Extension<Access>>,
    Path(id): Path<String>,
    params: Result<Query<GetParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(query_error)?;
    let access = access.map(|Extension(a)| a);
    let tenant = params.tenant.as_deref();
    if params.watch {
        // The one workload, resolved as `get` resolves it: another tenant's answers the same
        // 404 as a name that does not exist. A caller who reads everything may still watch a
        // name that is not there (yet, or any more), as before names were scoped.
        let mut found = st.read(|d| resolve(&d.state, access.as_ref(), &id, tenant, stored))?;
        if matches!(found, Err(ApiError::NotFound(_))) {
            // Not on this node yet, perhaps: ask again after a linearizable read.
            st.read_barrier(false).await?;
            found = st.read(|d| resolve(&d.state, access.as_ref(), &id, tenant, stored))?;
        }
        let name = match found {
            Ok(name) => name,
            Err(ApiError::NotFound(_)) if access.as_ref().is_none_or(Access::reads_all) => id,
            Err(e) => return Err(e),
        };
        let scope = super::watch::WatchScope {
            name: Some(name),
            queue: None,
        };
        let w = WatchParams {
            watch: true,
            resource_version: params.resource_version,
            timeout_seconds: params.timeout_seconds,
        };
        return w.serve(&st, access.as_ref(), scope).await;
    }
    st.read_barrier(params.stale).await?;
    let now = st.clock.now();
    let mut w = st.read(|d| {
        let mut w = resolve(&d.state, access.as_ref(), &id, tenant, Workload::clone)?;
        with_window_message(&d.state, std::slice::from_mut(&mut w), now);
        Ok::<_, ApiError>(w)
    })??;
    tenancy::present(&mut w);
    Ok(Json(w).into_response())
}

/// Pending workloads a tidal window's quota holds back get, as `status.message`, the
/// sentence naming the schedule, the window and when it ends (computed on read: it holds a
/// time left, which no replicated record could keep true).
fn with_window_message(
    state: &crate::state::FederationState,
    items: &mut [Workload],
    now: chrono::DateTime<chrono::Utc>,
) {
    let pending = |w: &Workload| {
        w.status
            .as_ref()
            .is_some_and(|s| s.phase == tideway_api::WorkloadPhase::Pending)
    };
    if !items.iter().any(pending) || state.tidal.schedules.is_empty() {
        return;
    }
    let queues = crate::dispatcher::queue_view::with_status(state, now);
    for w in items.iter_mut().filter(|w| pending(w)) {
        if let Some(s) = crate::dispatcher::window_reason::sentence(&queues, w)
            && let Some(st) = w.status.as_mut()
        {
            st.message = Some(s);
        }
    }
}

/// A workload's stored name (what the state, the log and watches key it by).
fn stored(w: &Workload) -> String {
    w.metadata.name.clone()
}

/// `DELETE /v1/workloads/{id}`: cancel. The leader's answer is the workload as cancelled; a
/// workload that already finished is a 409, an unknown one a 404.
pub async fn cancel(
    State(st): State<AppState>,
    principal: Option<Extension<Principal>>,
    access: Option<Extension<Access>>,
    Path(id): Path<String>,
    params: Result<Query<TenantParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(query_error)?;
    let actor = principal.as_ref().map(|Extension(p)| p.subject.clone());
    let access = access.map(|Extension(a)| a);
    // An unknown, finished or already cancelled workload is answered from the applied state
    // (read linearizably, so a lagging follower cannot answer 404 for a fresh workload):
    // a cancel that changes nothing writes nothing to the log.
    st.read_barrier(false).await?;
    // The name as the caller means it (its tenants', or `tenant`'s), to its stored name; the
    // owner and the queue never change, so this node's copy is good enough to decide on.
    let (name, owner) = st.read(|d| {
        resolve(
            &d.state,
            access.as_ref(),
            &id,
            params.tenant.as_deref(),
            |w| (stored(w), w.spec.user.clone()),
        )
    })??;
    if let Some(Extension(p)) = principal {
        let access = access.unwrap_or_default();
        if !access.may_cancel(&p.subject, owner.as_deref()) {
            return Err(authz::deny(
                &p,
                format!("'{}' may cancel only its own workloads", p.subject),
            ));
        }
    }
    match st.read(|d| d.state.cancel_outcome(&name))? {
        Ok(_) => {}
        Err(CommandResult::Rejected { rejection }) => {
            return Err(ApiError::from(present_rejection(rejection)));
        }
        Err(CommandResult::Existing {
            object: StoredObject::Workload(w),
        }) => return Ok(Json(presented(&w)).into_response()),
        Err(other) => return Err(ApiError::unexpected(other)),
    }
    let res = st
        .proposer
        .propose(Command::by(
            actor.as_deref(),
            Command::CancelWorkload {
                id: name,
                at: st.clock.now(),
            },
        ))
        .await;
    match res {
        Ok(
            CommandResult::Created {
                object: StoredObject::Workload(w),
            }
            | CommandResult::Existing {
                object: StoredObject::Workload(w),
            },
        ) => Ok(Json(presented(&w)).into_response()),
        Ok(CommandResult::Rejected { rejection }) => {
            Err(ApiError::from(present_rejection(rejection)))
        }
        Ok(other) => Err(ApiError::unexpected(other)),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub queue: Option<String>,
    /// Only the workloads of this tenant (the tenant of their queue).
    pub tenant: Option<String>,
    pub phase: Option<String>,
    pub limit: Option<usize>,
    /// The `continue` token of the previous page.
    pub after: Option<u64>,
    #[serde(default)]
    pub stale: bool,
    #[serde(default)]
    pub watch: bool,
    #[serde(rename = "resourceVersion")]
    pub resource_version: Option<u64>,
    #[serde(rename = "timeoutSeconds")]
    pub timeout_seconds: Option<u64>,
}

pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 1000;

fn parse_phase(s: &str) -> Result<WorkloadPhase, ApiError> {
    s.parse::<WorkloadPhase>()
        .map_err(|e| ApiError::field("query:phase", e.to_string()))
}

pub async fn list(
    State(st): State<AppState>,
    access: Option<Extension<Access>>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let access = access.map(|Extension(a)| a);
    let Query(p) = params.map_err(query_error)?;
    if p.watch {
        if p.tenant.is_some() {
            return Err(ApiError::field(
                "query:tenant",
                "is not supported with watch=true: watch a queue of the tenant instead",
            ));
        }
        let scope = super::watch::WatchScope {
            name: None,
            queue: p.queue.clone(),
        };
        let w = WatchParams {
            watch: true,
            resource_version: p.resource_version,
            timeout_seconds: p.timeout_seconds,
        };
        return w.serve(&st, access.as_ref(), scope).await;
    }
    let limit = p.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::field(
            "query:limit",
            format!("must be between 1 and {MAX_PAGE}"),
        ));
    }
    let phase = p.phase.as_deref().map(parse_phase).transpose()?;
    st.read_barrier(p.stale).await?;
    let now = st.clock.now();
    let page = st.read(|d| {
        let start = p.after.map(|a| a.saturating_add(1)).unwrap_or(0);
        let mut items = Vec::new();
        let mut last_seq = 0;
        let mut more = false;
        for (seq, name) in d.state.order.range(start..) {
            let Some(w) = d.state.workloads.get(&**name) else {
                continue;
            };
            if p.queue.as_ref().is_some_and(|q| w.spec.queue != q)
                || !authz::readable(access.as_ref(), &w.spec.queue)
                || p.tenant
                    .as_ref()
                    .is_some_and(|t| d.state.tenant_of(w) != *t)
            {
                continue;
            }
            if let Some(ph) = &phase
                && w.status.as_ref().map(|s| &s.phase) != Some(ph)
            {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            last_seq = *seq;
            items.push(presented(w).into_owned());
        }
        with_window_message(&d.state, &mut items, now);
        // The token is the sequence number of the last item returned.
        let next = more.then_some(last_seq);
        WorkloadList {
            api_version: API_VERSION.to_string(),
            kind: "WorkloadList".into(),
            items,
            continue_: next,
        }
    })?;
    Ok(Json(page).into_response())
}

pub async fn list_queues(
    State(st): State<AppState>,
    params: Result<Query<ReadParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(query_error)?;
    st.read_barrier(params.stale).await?;
    let now = st.clock.now();
    let qs = st.read(|d| crate::dispatcher::queue_view::with_status(&d.state, now))?;
    Ok(Json(QueueList::new(qs)).into_response())
}

pub async fn list_priority_classes(
    State(st): State<AppState>,
    params: Result<Query<ReadParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(query_error)?;
    st.read_barrier(params.stale).await?;
    let pcs = st.read(|d| {
        d.state
            .priority_classes
            .values()
            .cloned()
            .collect::<Vec<_>>()
    })?;
    Ok(Json(PriorityClassList::new(pcs)).into_response())
}
