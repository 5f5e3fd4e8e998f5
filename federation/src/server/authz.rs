//! Authorization: what an authenticated principal may do, by role.
//!
//! Authentication (a token file or a JWT) gives a subject and groups; roles come from the
//! `RoleBinding`s in the replicated state (changed with `tideway apply`, admin only), plus
//! these built-in bindings, so that a token file works without any binding applied (and
//! `tideway dev` and old token files keep their meaning):
//!
//! | group | role |
//! |---|---|
//! | `system:admins` | admin: everything, including policy (`apply`), bindings, cluster membership and snapshots |
//! | `system:operators` | operator: read everything, cancel any workload, cordon/drain members |
//! | `system:submitters` | submitter to every queue |
//! | `queue:NAME` | submitter to queue NAME |
//! | `system:viewers` | viewer: read everything |
//!
//! A principal bound to no role may do nothing (403), whatever its credential says: a valid
//! JWT from the organization's identity provider is not by itself a grant. A submitter reads
//! only the workloads (and their audit records) of its own queues; another tenant's workload
//! is answered 404, as if it did not exist, so names do not leak across tenants.
//!
//! A subject `agent:CLUSTER` is the member agent of CLUSTER: it may register that cluster,
//! heartbeat, read its assignments and report its status, and nothing else. The route
//! check here runs before any handler and hands the resolved [`Access`] to the handlers in
//! the request's extensions; what depends on the body (the queue of a submission, the owner
//! of a cancelled workload, the cluster a registration names) is checked by the handler.
//! Every refusal is a 403 that writes nothing, and is logged with the subject and the route.

use std::sync::RwLock;

use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use tideway_api::Role;
use tideway_api::auth::Principal;
use tideway_api::role_binding::ALL_QUEUES;

use super::error::ApiError;
use crate::raft::state_machine::StateMachineData;
use crate::state::FederationState;

/// What a principal's bindings grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    pub admin: bool,
    pub operator: bool,
    /// Reads everything (a viewer, or any role above a scoped submitter).
    pub viewer: bool,
    /// Submitter to every queue.
    pub all_queues: bool,
    /// Submitter to these queues.
    pub queues: Vec<String>,
    /// The member cluster this principal is the agent of.
    pub agent_of: Option<String>,
}

impl Access {
    /// What the built-in bindings (the groups in the table above) grant.
    pub fn of(p: &Principal) -> Self {
        let mut a = Self {
            agent_of: p.subject.strip_prefix("agent:").map(str::to_string),
            ..Self::default()
        };
        for g in &p.groups {
            match g.as_str() {
                "system:admins" => a.grant(Role::Admin, &[]),
                "system:operators" => a.grant(Role::Operator, &[]),
                "system:submitters" => a.grant(Role::Submitter, &[ALL_QUEUES.to_string()]),
                "system:viewers" => a.grant(Role::Viewer, &[]),
                other => {
                    if let Some(q) = other.strip_prefix("queue:") {
                        a.grant(Role::Submitter, &[q.to_string()]);
                    }
                }
            }
        }
        a
    }

    /// The built-in bindings and those of `state` that apply to `p`.
    pub fn resolve(p: &Principal, state: &FederationState) -> Self {
        let mut a = Self::of(p);
        for b in state.bindings_of(&p.subject, &p.groups) {
            a.grant(b.spec.role, &b.spec.queues);
        }
        a
    }

    fn grant(&mut self, role: Role, queues: &[String]) {
        match role {
            Role::Admin => self.admin = true,
            Role::Operator => self.operator = true,
            Role::Viewer => self.viewer = true,
            Role::Submitter => {
                for q in queues {
                    if q == ALL_QUEUES {
                        self.all_queues = true;
                    } else if !self.queues.contains(q) {
                        self.queues.push(q.clone());
                    }
                }
            }
        }
    }

    /// Whether any role at all is bound.
    fn any_role(&self) -> bool {
        self.admin || self.operator || self.viewer || self.submitter()
    }

    /// Reads every queue's workloads.
    pub fn reads_all(&self) -> bool {
        self.admin || self.operator || self.viewer || self.all_queues
    }

    /// May read the workloads (and their audit records) of `queue`.
    pub fn may_read_queue(&self, queue: &str) -> bool {
        self.reads_all() || self.queues.iter().any(|q| q == queue)
    }

    fn submitter(&self) -> bool {
        self.all_queues || !self.queues.is_empty()
    }

    /// May submit to `queue`.
    pub fn may_submit_to(&self, queue: &str) -> bool {
        self.admin || self.all_queues || self.queues.iter().any(|q| q == queue)
    }

    /// May cancel a workload submitted by `owner`.
    pub fn may_cancel(&self, subject: &str, owner: Option<&str>) -> bool {
        self.admin || self.operator || (self.submitter() && owner == Some(subject))
    }

    /// May act as the agent of `cluster`.
    pub fn may_act_for(&self, cluster: &str) -> bool {
        self.admin || self.agent_of.as_deref() == Some(cluster)
    }

    /// Whether the route itself is open to this principal; `Err` says why not.
    pub fn route(&self, method: &Method, path: &str) -> Result<(), String> {
        if self.admin {
            return Ok(());
        }
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        // Member lifecycle is an operator's act, never an agent's: an agent must not be able
        // to take its own cluster out of service (or put it back) on the fleet's behalf.
        if let ["v1", "members", _, verb] = segs.as_slice()
            && matches!(*verb, "cordon" | "uncordon" | "drain" | "readmit")
        {
            return if self.operator && self.agent_of.is_none() {
                Ok(())
            } else {
                Err(format!("{verb} needs the operator role"))
            };
        }
        // The agent plane: only its own cluster, and nothing else.
        if let ["v1", "members", name, _verb] = segs.as_slice() {
            return if self.may_act_for(name) {
                Ok(())
            } else {
                Err(format!(
                    "only the agent of '{name}' or an admin may do this"
                ))
            };
        }
        if segs == ["v1", "members", "register"] {
            return if self.agent_of.is_some() {
                Ok(())
            } else {
                Err("only a member agent's credential or an admin may register a cluster".into())
            };
        }
        if self.agent_of.is_some() {
            return Err("an agent credential serves its own cluster's agent protocol only".into());
        }
        if !self.any_role() {
            return Err("no role is bound to this subject or its groups".into());
        }
        match (method, segs.as_slice()) {
            (&Method::GET | &Method::HEAD, ["v1", "rolebindings", ..]) if !self.reads_all() => {
                Err("reading role bindings needs the viewer role or above".into())
            }
            // Fleet-wide figures and notification endpoints: not a single tenant's to read.
            // `/metrics` carries series of every queue (pending, quota, usage): a scraper
            // needs a viewer's credential (a token bound to system:viewers serves).
            // A boundary's preview names the running workloads it would reclaim, of every
            // tenant: not for a scoped submitter either.
            (
                &Method::GET | &Method::HEAD,
                ["v1", "usage" | "webhooks", ..] | ["metrics"] | ["v1", "schedules", _, "next"],
            ) if !self.reads_all() => Err(format!("{path} needs the viewer role or above")),
            (&Method::GET | &Method::HEAD, _) => Ok(()),
            (&Method::POST, ["v1", "workloads"]) if self.submitter() => Ok(()),
            (&Method::POST, ["v1", "workloads"]) => {
                Err("submitting needs a submitter role (a queue:NAME group)".into())
            }
            (&Method::DELETE, ["v1", "workloads", _]) if self.operator || self.submitter() => {
                Ok(())
            }
            _ => Err(format!("{method} {path} needs the admin role")),
        }
    }
}

/// The check: refuses a route the principal's roles do not open, before any handler, and
/// passes the resolved [`Access`] on to the handlers (`None`: go on). Without a principal (an
/// anonymous, loopback-only server, or a token-less read on `tideway dev`) everything is
/// open.
pub fn authorize(data: &RwLock<StateMachineData>, req: &mut Request) -> Option<Response> {
    // No principal: nothing to refuse.
    let p = req.extensions().get::<Principal>()?;
    let access = match data.read() {
        Ok(d) => Access::resolve(p, &d.state),
        Err(_) => return Some(ApiError::Internal("state lock poisoned".into()).into_response()),
    };
    match access.route(req.method(), req.uri().path()) {
        Ok(()) => {
            req.extensions_mut().insert(access);
            None
        }
        Err(why) => {
            tracing::warn!(
                subject = %p.subject,
                method = %req.method(),
                path = %req.uri().path(),
                "request denied: {why}"
            );
            Some(ApiError::Forbidden(why).into_response())
        }
    }
}

/// Whether the caller may read workloads of `queue`: with no [`Access`] (an anonymous
/// server) everything is readable.
pub fn readable(access: Option<&Access>, queue: &str) -> bool {
    access.is_none_or(|a| a.may_read_queue(queue))
}

/// A handler's check of what depends on the request's content.
pub fn deny(p: &Principal, what: String) -> ApiError {
    tracing::warn!(subject = %p.subject, "request denied: {what}");
    ApiError::Forbidden(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(subject: &str, groups: &[&str]) -> Access {
        Access::of(&Principal {
            subject: subject.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
    }

    #[test]
    fn each_role_reaches_exactly_its_routes() {
        let admin = who("root", &["system:admins"]);
        let op = who("olga", &["system:operators"]);
        let sub = who("alice", &["queue:research"]);
        let viewer = who("vic", &["system:viewers"]);
        let nobody = who("nobody", &["some-idp-group"]);
        let agent = who("agent:sim-eu", &[]);
        let post = Method::POST;
        let get = Method::GET;
        let del = Method::DELETE;
        for a in [&admin, &op, &sub, &viewer] {
            assert!(a.route(&get, "/v1/workloads").is_ok());
            assert!(a.route(&get, "/v1/policy/versions").is_ok());
        }
        assert!(
            agent.route(&get, "/v1/workloads").is_err(),
            "agents read no tenant data"
        );
        assert!(
            nobody.route(&get, "/v1/workloads").is_err(),
            "a credential without a binding grants nothing"
        );
        assert!(admin.route(&get, "/v1/rolebindings").is_ok());
        assert!(viewer.route(&get, "/v1/rolebindings").is_ok());
        assert!(sub.route(&get, "/v1/rolebindings").is_err());
        assert!(sub.route(&get, "/v1/usage").is_err());
        assert!(sub.route(&get, "/v1/webhooks").is_err());
        assert!(viewer.route(&get, "/v1/usage").is_ok());
        assert!(viewer.route(&get, "/v1/webhooks").is_ok());
        // Every queue's series are on /metrics: a scoped submitter may not read them.
        assert!(sub.route(&get, "/metrics").is_err());
        assert!(viewer.route(&get, "/metrics").is_ok());
        assert!(op.route(&get, "/metrics").is_ok());
        assert!(agent.route(&get, "/metrics").is_err());
        assert!(sub.route(&get, "/v1/schedules/day-night/next").is_err());
        assert!(viewer.route(&get, "/v1/schedules/day-night/next").is_ok());
        assert!(sub.route(&get, "/v1/schedules/day-night/timeline").is_ok());
        assert!(op.route(&del, "/v1/rolebindings/x").is_err());
        assert!(sub.route(&post, "/v1/workloads").is_ok());
        assert!(viewer.route(&post, "/v1/workloads").is_err());
        assert!(op.route(&post, "/v1/workloads").is_err());
        assert!(op.route(&del, "/v1/workloads/x").is_ok());
        assert!(viewer.route(&del, "/v1/workloads/x").is_err());
        for path in [
            "/v1/apply",
            "/v1/cluster/join",
            "/v1/cluster/snapshot",
            "/v1/policy/apply",
            "/v1/policy/rollback",
            "/v1/policy/widen",
            "/v1/policy/diff",
            "/v1/policy/dry-run",
        ] {
            assert!(admin.route(&post, path).is_ok());
            for a in [&op, &sub, &viewer, &agent] {
                assert!(a.route(&post, path).is_err(), "{path} {a:?}");
            }
        }
        assert!(agent.route(&post, "/v1/members/sim-eu/heartbeat").is_ok());
        assert!(agent.route(&get, "/v1/members/sim-eu/assignments").is_ok());
        assert!(agent.route(&post, "/v1/members/sim-us/status").is_err());
        assert!(agent.route(&post, "/v1/members/register").is_ok());
        assert!(sub.route(&post, "/v1/members/register").is_err());
        assert!(sub.route(&post, "/v1/members/sim-eu/status").is_err());
        assert!(op.route(&post, "/v1/members/sim-eu/drain").is_ok());
        assert!(op.route(&post, "/v1/members/sim-eu/cordon").is_ok());
        assert!(agent.route(&post, "/v1/members/sim-eu/cordon").is_err());
        assert!(sub.route(&post, "/v1/members/sim-eu/drain").is_err());
        assert!(op.route(&Method::DELETE, "/v1/members/sim-eu").is_err());
    }

    #[test]
    fn submission_and_cancel_are_scoped() {
        let sub = who("alice", &["queue:research"]);
        assert!(sub.may_submit_to("research"));
        assert!(!sub.may_submit_to("prod"));
        assert!(sub.may_cancel("alice", Some("alice")));
        assert!(!sub.may_cancel("alice", Some("bob")));
        assert!(who("olga", &["system:operators"]).may_cancel("olga", Some("bob")));
        assert!(who("all", &["system:submitters"]).may_submit_to("prod"));
    }

    #[test]
    fn bindings_in_the_state_add_roles_to_the_built_in_ones() {
        use tideway_api::{RoleBinding, RoleBindingSpec};
        let mut state = FederationState::default();
        let bind = |name: &str, role, subjects: &[&str], groups: &[&str], queues: &[&str]| {
            RoleBinding::new(
                name,
                RoleBindingSpec {
                    role,
                    subjects: subjects.iter().map(|s| s.to_string()).collect(),
                    groups: groups.iter().map(|s| s.to_string()).collect(),
                    queues: queues.iter().map(|s| s.to_string()).collect(),
                },
            )
        };
        for b in [
            bind("ml", Role::Submitter, &[], &["ml"], &["research", "eval"]),
            bind("olga", Role::Operator, &["olga"], &[], &[]),
            bind("audit", Role::Viewer, &[], &["auditors"], &[]),
        ] {
            state.role_bindings.insert(b.metadata.name.clone(), b);
        }
        let p = |subject: &str, groups: &[&str]| Principal {
            subject: subject.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        let bob = Access::resolve(&p("bob", &["ml", "queue:sandbox"]), &state);
        assert_eq!(bob.queues, vec!["sandbox", "research", "eval"]);
        assert!(bob.may_read_queue("research") && !bob.may_read_queue("prod"));
        assert!(!bob.reads_all());
        let olga = Access::resolve(&p("olga", &[]), &state);
        assert!(olga.operator && olga.reads_all());
        let eve = Access::resolve(&p("eve", &["auditors"]), &state);
        assert!(eve.route(&Method::GET, "/v1/workloads").is_ok());
        assert!(eve.route(&Method::POST, "/v1/workloads").is_err());
        let stranger = Access::resolve(&p("stranger", &["ml-other"]), &state);
        assert!(stranger.route(&Method::GET, "/v1/workloads").is_err());
    }
}
