//! The OpenAPI 3.1 document of the public API, served at `/openapi.json` and checked in as
//! `docs/openapi.json`.
//!
//! The operations are described here, on documentation-only functions, rather than on the
//! handlers: the handlers stay readable and the whole contract is in one file. The schemas are
//! derived from the wire types themselves (`tideway-api`'s `openapi` feature) and the query
//! parameters from the handlers' own query types, so a field added there shows up here
//! without anyone remembering to. Tests below fail when a route of the router is missing from
//! the document, and when the checked-in copy differs from what the code generates.

use std::borrow::Cow;
use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use tideway_api::agent::{
    AssignmentPage, Heartbeat, HeartbeatAck, RegisterRequest, StatusAck, StatusReport,
};
use tideway_api::audit::AuditEventList;
use tideway_api::capacity::CapacityView;
use tideway_api::cluster::{
    JoinAck, JoinRequest, NodeStatus, PartitionAck, PartitionRequest, PromoteAck, PromoteRequest,
    RemoveAck, RemoveRequest, SnapshotAck,
};
use tideway_api::explain::ExplainResponse;
// The lists are named by their generic type, not the aliases (`QueueList`), so that each
// gets its own schema (`ResourceList_Queue`).
use tideway_api::list::{AppliedList, ResourceList, WorkloadList};
use tideway_api::usage::UsageReport;
use tideway_api::watch::WatchPage;
use tideway_api::webhook::{Webhook, WebhookList};
use tideway_api::{
    DiffRequest, DryRunReport, MemberCluster, Policy, PolicyDiff, PolicyHistory, PriorityClass,
    Problem, Queue, QuotaSchedule, RoleBinding, RollbackRequest, ScheduleNext, ScheduleTimeline,
    Submitted, Workload,
};
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{OneOfBuilder, Schema};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

use super::events::EventParams;
use super::members::{AssignmentsQuery, StaleQuery};
use super::schedules::TimelineQuery;
use super::usage::UsageParams;
use super::webhooks::WebhookParams;
use super::workloads::{GetParams, ListParams, ReadParams, TenantParams};

/// The route the document is served at.
pub const PATH: &str = "/openapi.json";

/// The document, as the OpenAPI object.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as pretty JSON with a final newline, exactly as checked in.
pub fn json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        // Serializing a tree of maps, strings and numbers cannot fail; an empty document
        // would fail the checked-in comparison loudly rather than panic a server.
        let mut s = serde_json::to_string_pretty(&document()).unwrap_or_default();
        s.push('\n');
        s
    })
}

/// `GET /openapi.json`.
pub async fn serve() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tideway",
        description = "Federation control plane for GPU fleets: submission, capacity, tidal quotas, policy and audit. Errors are RFC 9457 problem+json documents that name the offending field.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    modifiers(&Conventions),
    paths(
        operations::submit_workload, operations::list_workloads, operations::get_workload,
        operations::cancel_workload, operations::explain_workload, operations::apply,
        operations::events, operations::policy_history, operations::policy_version,
        operations::policy_apply, operations::policy_rollback, operations::policy_widen,
        operations::policy_diff, operations::policy_dry_run, operations::list_role_bindings,
        operations::delete_role_binding, operations::list_queues, operations::list_schedules,
        operations::schedule_timeline, operations::schedule_next, operations::list_priority_classes,
        operations::list_members, operations::register_member, operations::member_heartbeat,
        operations::member_assignments, operations::member_status, operations::remove_member, operations::readmit_member,
        operations::cordon_member, operations::uncordon_member, operations::drain_member,
        operations::capacity, operations::usage, operations::list_webhooks,
        operations::delete_webhook, operations::cluster_status, operations::cluster_join,
        operations::cluster_remove, operations::cluster_promote, operations::cluster_snapshot, operations::debug_partition,
        operations::metrics, operations::healthz, operations::openapi_json,
    ),
    components(schemas(Problem, AnyResource, WatchPage, AppliedList)),
    tags(
        (name = "workloads", description = "Submit, read, watch, explain and cancel workloads"),
        (name = "resources", description = "Queues, priority classes, schedules, role bindings, webhooks"),
        (name = "policy", description = "Versioned scheduling policy: apply, diff, dry-run, rollback"),
        (name = "members", description = "Member clusters: the agent protocol and lifecycle"),
        (name = "fleet", description = "Capacity, usage and the audit trail"),
        (name = "cluster", description = "The federation's own Raft membership"),
        (name = "operations", description = "Health, metrics and this document"),
    ),
)]
struct ApiDoc;

/// What every operation has in common, added once instead of on each: the bearer token (a
/// server started without `--auth-tokens` ignores it) and the problem+json error answer.
struct Conventions;

impl Modify for Conventions {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token from `--auth-tokens`, or a JWT when the server verifies them",
                    ))
                    .build(),
            ),
        );
        doc.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
        let problem = ResponseBuilder::new()
            .description(
                "An error: 400/422 invalid input (`errors[].field` names it), 401, 403, 404, \
                 409, 413, 415, 429, 503 no leader",
            )
            .content(
                "application/problem+json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            )
            .build();
        for item in doc.paths.paths.values_mut() {
            for op in operations(item) {
                op.responses
                    .responses
                    .entry("default".into())
                    .or_insert_with(|| problem.clone().into());
            }
        }
    }
}

fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// Any document `POST /v1/apply` takes or answers, dispatched on `kind`.
struct AnyResource;

const RESOURCE_KINDS: [&str; 8] = [
    "Workload",
    "Queue",
    "PriorityClass",
    "QuotaSchedule",
    "MemberCluster",
    "Policy",
    "Webhook",
    "RoleBinding",
];

impl PartialSchema for AnyResource {
    fn schema() -> RefOr<Schema> {
        let mut one_of = OneOfBuilder::new().description(Some(
            "A resource document; `kind` says which (apply takes Queue, PriorityClass, \
             QuotaSchedule, Policy, Webhook and RoleBinding)",
        ));
        for kind in RESOURCE_KINDS {
            one_of = one_of.item(Ref::from_schema_name(kind));
        }
        one_of.into()
    }
}

impl ToSchema for AnyResource {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("AnyResource")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        fn add<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            schemas.push((T::name().into_owned(), T::schema()));
            T::schemas(schemas);
        }
        add::<Workload>(schemas);
        add::<Queue>(schemas);
        add::<PriorityClass>(schemas);
        add::<QuotaSchedule>(schemas);
        add::<MemberCluster>(schemas);
        add::<Policy>(schemas);
        add::<Webhook>(schemas);
        add::<RoleBinding>(schemas);
    }
}

/// The operations, in the router's order: documentation only, utoipa reads their attributes.
mod operations {
    // Nothing calls them; they exist for `#[utoipa::path]`.
    #![allow(dead_code)]

    use super::*;

    /// Submit a workload
    ///
    /// JSON or YAML. Answers 201 with the stored workload once committed, 200 for an idempotent
    /// replay of the same `Idempotency-Key` (24 hours); 409 for another key with a name that
    /// exists in the queue's tenant. Names are scoped per tenant (the queue's `spec.tenant`) and
    /// keys per authenticated subject: another tenant's names and another subject's keys are
    /// not in the way. A workload accepted that cannot run as the fleet is (a flavor no member
    /// offers) is answered with `warnings` next to the workload's fields.
    #[utoipa::path(post, path = "/v1/workloads", tag = "workloads",
        params(("Idempotency-Key" = Option<String>, Header, description = "1-256 printable ASCII characters, scoped to the authenticated subject; generated when absent")),
        request_body(content((Workload = "application/json"), (Workload = "application/yaml"))),
        responses(
            (status = 201, description = "Accepted and committed: the workload, with `warnings` when it cannot run as the fleet is", body = Submitted),
            (status = 200, description = "An idempotent replay: the original workload", body = Workload),
        ))]
    fn submit_workload() {}

    /// List or watch workloads
    ///
    /// A page in submission order (`continue` is the next `after`). With `watch=true`, a
    /// long-poll of the changes after `resourceVersion`, answered as a `WatchPage`.
    #[utoipa::path(get, path = "/v1/workloads", tag = "workloads", params(ListParams),
        responses(
            (status = 200, description = "A page, or a WatchPage when `watch=true`", body = WorkloadList),
            (status = 410, description = "A watch from a resource version the audit trail no longer reaches: list again from 0", body = Problem, content_type = "application/problem+json"),
        ))]
    fn list_workloads() {}

    /// Read one workload
    ///
    /// By name (in the caller's tenants, or `tenant`) or UID; with `watch=true`, a long-poll of
    /// its changes (a `WatchPage`). A workload the caller may not read is 404, as one that does
    /// not exist; a name in several tenants the caller reads is 400 naming `query:tenant`.
    #[utoipa::path(get, path = "/v1/workloads/{id}", tag = "workloads",
        params(("id" = String, Path, description = "Workload name or UID"), GetParams),
        responses(
            (status = 200, description = "The workload, or a WatchPage when `watch=true`", body = Workload),
            (status = 410, description = "A watch from a resource version the audit trail no longer reaches: list again from 0", body = Problem, content_type = "application/problem+json"),
        ))]
    fn get_workload() {}

    /// Cancel a workload
    ///
    /// 200 with the workload, now Cancelled (again: unchanged); 409 for one that already finished.
    #[utoipa::path(delete, path = "/v1/workloads/{id}", tag = "workloads",
        params(("id" = String, Path, description = "Workload name or UID"), TenantParams),
        responses((status = 200, description = "The cancelled workload", body = Workload)))]
    fn cancel_workload() {}

    /// Why a workload is pending, per member cluster
    #[utoipa::path(get, path = "/v1/workloads/{id}/explain", tag = "workloads",
        params(("id" = String, Path, description = "Workload name or UID"), TenantParams),
        responses((status = 200, description = "The explanation", body = ExplainResponse)))]
    fn explain_workload() {}

    /// Create or replace a resource
    ///
    /// Queue, PriorityClass, QuotaSchedule, Policy, Webhook or RoleBinding, in JSON or YAML. The
    /// `tideway-apply-outcome` header says `created`, `configured` or `unchanged`. A YAML stream
    /// of several documents (`---`) is applied in order, its queues, priority classes and quota
    /// schedules as one policy version, and answered with an `AppliedList` (an outcome per
    /// document); a refusal names the document (`documents[1].spec.tenant`, from 0).
    #[utoipa::path(post, path = "/v1/apply", tag = "resources",
        request_body(content((AnyResource = "application/json"), (AnyResource = "application/yaml"))),
        responses((status = 200, description = "The stored resource", body = AnyResource,
            headers(("tideway-apply-outcome" = String, description = "created, configured or unchanged")))))]
    fn apply() {}

    /// The audit trail, oldest first
    #[utoipa::path(get, path = "/v1/events", tag = "fleet", params(EventParams),
        responses((status = 200, description = "Audit records", body = AuditEventList)))]
    fn events() {}

    /// Every policy version, newest last
    #[utoipa::path(get, path = "/v1/policy/versions", tag = "policy", params(ReadParams),
        responses((status = 200, description = "The version history", body = PolicyHistory)))]
    fn policy_history() {}

    /// One policy version
    #[utoipa::path(get, path = "/v1/policy/versions/{version}", tag = "policy",
        params(("version" = String, Path, description = "A version number, or `current`"), ReadParams),
        responses((status = 200, description = "The policy as it was", body = Policy)))]
    fn policy_version() {}

    /// Apply a policy as the next version
    #[utoipa::path(post, path = "/v1/policy/apply", tag = "policy",
        request_body(content((Policy = "application/json"), (Policy = "application/yaml"))),
        responses((status = 200, description = "The new version", body = Policy)))]
    fn policy_apply() {}

    /// Restore an earlier policy version as a new one
    #[utoipa::path(post, path = "/v1/policy/rollback", tag = "policy", request_body = RollbackRequest,
        responses((status = 200, description = "The new version", body = Policy)))]
    fn policy_rollback() {}

    /// Widen a scoped rollout to the whole fleet
    #[utoipa::path(post, path = "/v1/policy/widen", tag = "policy",
        responses((status = 200, description = "The new version", body = Policy)))]
    fn policy_widen() {}

    /// Compare two policy versions
    #[utoipa::path(post, path = "/v1/policy/diff", tag = "policy", request_body = DiffRequest,
        responses((status = 200, description = "The differences", body = PolicyDiff)))]
    fn policy_diff() {}

    /// Evaluate a candidate policy against the current state without applying it
    #[utoipa::path(post, path = "/v1/policy/dry-run", tag = "policy",
        request_body(content((Policy = "application/json"), (Policy = "application/yaml"))),
        responses((status = 200, description = "What would change", body = DryRunReport)))]
    fn policy_dry_run() {}

    /// Every role binding
    #[utoipa::path(get, path = "/v1/rolebindings", tag = "resources", params(ReadParams),
        responses((status = 200, description = "Role bindings by name", body = ResourceList<RoleBinding>)))]
    fn list_role_bindings() {}

    /// Delete a role binding (admin)
    #[utoipa::path(delete, path = "/v1/rolebindings/{name}", tag = "resources",
        params(("name" = String, Path, description = "Role binding name")),
        responses((status = 200, description = "The binding as it was", body = RoleBinding)))]
    fn delete_role_binding() {}

    /// Every queue with its usage
    #[utoipa::path(get, path = "/v1/queues", tag = "resources", params(ReadParams),
        responses((status = 200, description = "Queues by name", body = ResourceList<Queue>)))]
    fn list_queues() {}

    /// Every quota schedule with its next transitions
    #[utoipa::path(get, path = "/v1/schedules", tag = "resources",
        responses((status = 200, description = "One timeline per schedule", body = Vec<ScheduleTimeline>)))]
    fn list_schedules() {}

    /// One quota schedule's hour-by-hour timeline
    #[utoipa::path(get, path = "/v1/schedules/{name}/timeline", tag = "resources",
        params(("name" = String, Path, description = "Quota schedule name"), TimelineQuery),
        responses((status = 200, description = "The timeline", body = ScheduleTimeline)))]
    fn schedule_timeline() {}

    /// What a quota schedule's next boundary will do on the live state
    #[utoipa::path(get, path = "/v1/schedules/{name}/next", tag = "resources",
        params(("name" = String, Path, description = "Quota schedule name")),
        responses((status = 200, description = "The quotas before and after, and the running workloads the first cycle after it would reclaim", body = ScheduleNext)))]
    fn schedule_next() {}

    /// Every priority class
    #[utoipa::path(get, path = "/v1/priorityclasses", tag = "resources", params(ReadParams),
        responses((status = 200, description = "Priority classes by name", body = ResourceList<PriorityClass>)))]
    fn list_priority_classes() {}

    /// Every member cluster with its health
    #[utoipa::path(get, path = "/v1/members", tag = "members", params(StaleQuery),
        responses((status = 200, description = "Member clusters by name", body = ResourceList<MemberCluster>)))]
    fn list_members() {}

    /// Register a member cluster (agent)
    #[utoipa::path(post, path = "/v1/members/register", tag = "members", request_body = RegisterRequest,
        responses((status = 200, description = "The member as stored", body = MemberCluster)))]
    fn register_member() {}

    /// A member's heartbeat: liveness, with its capacity digest or only what changed since the digest version the last answer named (agent)
    #[utoipa::path(post, path = "/v1/members/{name}/heartbeat", tag = "members",
        params(("name" = String, Path, description = "Member cluster name")), request_body = Heartbeat,
        responses((status = 200, description = "Acknowledged; `digestBaseUnknown` asks for the full digest", body = HeartbeatAck),
            (status = 400, description = "Both a digest and a delta, a digest of another member, or a delta that does not fit its base", body = Problem)))]
    fn member_heartbeat() {}

    /// A member's assignments changed after a revision, long-polled (agent)
    #[utoipa::path(get, path = "/v1/members/{name}/assignments", tag = "members",
        params(("name" = String, Path, description = "Member cluster name"), AssignmentsQuery),
        responses((status = 200, description = "Assignments after the revision", body = AssignmentPage)))]
    fn member_assignments() {}

    /// A member's report of its workloads' local phases (agent)
    #[utoipa::path(post, path = "/v1/members/{name}/status", tag = "members",
        params(("name" = String, Path, description = "Member cluster name")), request_body = StatusReport,
        responses((status = 200, description = "Acknowledged", body = StatusAck)))]
    fn member_status() {}

    /// Remove a member cluster (admin)
    #[utoipa::path(delete, path = "/v1/members/{name}", tag = "members",
        params(("name" = String, Path, description = "Member cluster name")),
        responses((status = 200, description = "The member as it was", body = MemberCluster)))]
    fn remove_member() {}

    /// Let a removed member's agent register again (operator)
    #[utoipa::path(post, path = "/v1/members/{name}/readmit", tag = "members",
        params(("name" = String, Path, description = "Member cluster name")),
        responses((status = 200, description = "How many removals were lifted (0: it was not removed)", body = StatusAck)))]
    fn readmit_member() {}

    /// Stop placing new work on a member
    #[utoipa::path(post, path = "/v1/members/{name}/cordon", tag = "members",
        params(("name" = String, Path, description = "Member cluster name")),
        responses((status = 200, description = "The member", body = MemberCluster)))]
    fn cordon_member() {}

    /// Place work on a member again
    #[utoipa::path(post, path = "/v1/members/{name}/uncordon", tag = "members",
        params(("name" = String, Path, description = "Member cluster name")),
        responses((status = 200, description = "The member", body = MemberCluster)))]
    fn uncordon_member() {}

    /// Cordon a member and move its work elsewhere
    #[utoipa::path(post, path = "/v1/members/{name}/drain", tag = "members",
        params(("name" = String, Path, description = "Member cluster name")),
        responses((status = 200, description = "The member", body = MemberCluster)))]
    fn drain_member() {}

    /// The fleet's capacity by region, cluster, pool and flavor
    #[utoipa::path(get, path = "/v1/capacity", tag = "fleet", params(StaleQuery),
        responses((status = 200, description = "The capacity view", body = CapacityView)))]
    fn capacity() {}

    /// GPU time per day, queue, tenant and flavor, for chargeback
    #[utoipa::path(get, path = "/v1/usage", tag = "fleet", params(UsageParams),
        responses((status = 200, description = "The usage report", body = UsageReport)))]
    fn usage() {}

    /// Every webhook with its delivery state
    #[utoipa::path(get, path = "/v1/webhooks", tag = "resources", params(WebhookParams),
        responses((status = 200, description = "Webhooks", body = WebhookList)))]
    fn list_webhooks() {}

    /// Delete a webhook (admin)
    #[utoipa::path(delete, path = "/v1/webhooks/{name}", tag = "resources",
        params(("name" = String, Path, description = "Webhook name")),
        responses((status = 200, description = "The webhook as it was", body = Webhook)))]
    fn delete_webhook() {}

    /// This node's view of the federation: Raft role, term, indexes, peers
    #[utoipa::path(get, path = "/v1/cluster/status", tag = "cluster",
        params(("digest" = Option<bool>, Query, description = "Include the state digest (default true); false skips encoding the state")),
        responses((status = 200, description = "The node's status", body = NodeStatus)))]
    fn cluster_status() {}

    /// Add a node to the federation (admin)
    #[utoipa::path(post, path = "/v1/cluster/join", tag = "cluster", request_body = JoinRequest,
        responses((status = 200, description = "Joined", body = JoinAck)))]
    fn cluster_join() {}

    /// Remove a node from the federation (admin)
    #[utoipa::path(post, path = "/v1/cluster/remove", tag = "cluster", request_body = RemoveRequest,
        responses((status = 200, description = "Removed", body = RemoveAck)))]
    fn cluster_remove() {}

    /// Make a learner that has caught up a voter (admin); 409 while it lags
    #[utoipa::path(post, path = "/v1/cluster/promote", tag = "cluster", request_body = PromoteRequest,
        responses((status = 200, description = "Promoted", body = PromoteAck)))]
    fn cluster_promote() {}

    /// Take a Raft snapshot now (admin)
    #[utoipa::path(post, path = "/v1/cluster/snapshot", tag = "cluster",
        responses((status = 200, description = "The snapshot taken", body = SnapshotAck)))]
    fn cluster_snapshot() {}

    /// Cut this node off from some peers (fault injection, off unless the server allows it)
    #[utoipa::path(post, path = "/v1/debug/partition", tag = "cluster", request_body = PartitionRequest,
        responses((status = 200, description = "The peers now blocked", body = PartitionAck)))]
    fn debug_partition() {}

    /// Prometheus metrics
    #[utoipa::path(get, path = "/metrics", tag = "operations",
        responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String)))]
    fn metrics() {}

    /// Liveness (no authentication)
    #[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
        responses((status = 200, description = "`ok`", content_type = "text/plain", body = String)))]
    fn healthz() {}

    /// This document
    #[utoipa::path(get, path = "/openapi.json", tag = "operations",
        responses((status = 200, description = "OpenAPI 3.1", content_type = "application/json", body = Object)))]
    fn openapi_json() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command that regenerates the checked-in document.
    const REGENERATE: &str = "cargo run -q -- openapi > docs/openapi.json";

    #[test]
    fn is_openapi_3_1() {
        let v: serde_json::Value = serde_json::from_str(json()).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        assert!(v["components"]["schemas"]["Workload"].is_object(), "{v}");
        assert!(v["components"]["schemas"]["Problem"].is_object(), "{v}");
    }

    /// docs/openapi.json is what the code generates; CI fails when a change to a wire type or
    /// a route was not followed by regenerating it.
    #[test]
    fn checked_in_document_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        if checked_in != json() {
            let first = checked_in
                .lines()
                .zip(json().lines())
                .position(|(a, b)| a != b)
                .map_or(
                    checked_in.lines().count().min(json().lines().count()),
                    |n| n,
                );
            panic!(
                "docs/openapi.json is stale (first difference at line {}); regenerate it from \
                 the repository root with `{REGENERATE}`",
                first + 1
            );
        }
    }

    /// Every route of the public router, with each of its methods, is an operation of the
    /// document (the node-to-node `/internal` routes are not public and not listed).
    #[test]
    fn document_covers_every_route() {
        let doc = document();
        let mut missing = Vec::new();
        let routes = super::super::tests::source_routes();
        assert!(routes.len() > 30, "{routes:?}");
        for (path, methods) in &routes {
            let Some(item) = doc.paths.paths.get(path.as_str()) else {
                missing.push(format!("{path} (all methods)"));
                continue;
            };
            for m in methods {
                let present = match m.as_str() {
                    "get" => item.get.is_some(),
                    "post" => item.post.is_some(),
                    "delete" => item.delete.is_some(),
                    "put" => item.put.is_some(),
                    "patch" => item.patch.is_some(),
                    _ => false,
                };
                if !present {
                    missing.push(format!("{} {path}", m.to_uppercase()));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "routes of the router missing from the OpenAPI document (add a #[utoipa::path] \
             fn in federation/src/server/openapi.rs, then `{REGENERATE}`): {missing:?}"
        );
        // And nothing documented that the router does not serve.
        let served: Vec<&str> = routes.iter().map(|(p, _)| p.as_str()).collect();
        let extra: Vec<&String> = doc
            .paths
            .paths
            .keys()
            .filter(|p| !served.contains(&p.as_str()))
            .collect();
        assert!(extra.is_empty(), "documented but not routed: {extra:?}");
    }
}
