//! Authorization: what an authenticated principal may do, by role.
//!
//! Roles come from the principal's groups in the token file (a first step: role bindings in
//! the replicated state, changed with `tideway apply`, are to replace them):
//!
//! | group | role |
//! |---|---|
//! | `system:admins` | admin: everything, including policy (`apply`), cluster membership and snapshots |
//! | `system:operators` | operator: read everything, cancel any workload |
//! | `system:submitters` | submitter to every queue |
//! | `queue:NAME` | submitter to queue NAME (and cancel of its own workloads) |
//! | `system:viewers`, or none of these | viewer: read only |
//!
//! A subject `agent:CLUSTER` is the member agent of CLUSTER: it may register that cluster,
//! heartbeat, read its assignments and report its status, and nothing else. The route
//! check here runs before any handler; what depends on the body (the queue of a submission,
//! the owner of a cancelled workload, the cluster a registration names) is checked by the
//! handler with [`Access`]. Every refusal is a 403 that writes nothing, and is logged with
//! the subject and the route.

use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tideway_api::auth::Principal;

use super::error::ApiError;

/// What a principal's groups grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    pub admin: bool,
    pub operator: bool,
    /// Submitter to every queue.
    pub all_queues: bool,
    /// Submitter to these queues.
    pub queues: Vec<String>,
    /// The member cluster this principal is the agent of.
    pub agent_of: Option<String>,
}

impl Access {
    pub fn of(p: &Principal) -> Self {
        let has = |g: &str| p.groups.iter().any(|x| x == g);
        Self {
            admin: has("system:admins"),
            operator: has("system:operators"),
            all_queues: has("system:submitters"),
            queues: p
                .groups
                .iter()
                .filter_map(|g| g.strip_prefix("queue:"))
                .map(str::to_string)
                .collect(),
            agent_of: p.subject.strip_prefix("agent:").map(str::to_string),
        }
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
            && matches!(*verb, "cordon" | "uncordon" | "drain")
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
        match (method, segs.as_slice()) {
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

/// The middleware: refuses a route the principal's roles do not open, before any handler.
/// Without a principal (an anonymous, loopback-only server) everything is open.
pub async fn authorize(req: Request, next: Next) -> Response {
    let Some(p) = req.extensions().get::<Principal>() else {
        return next.run(req).await;
    };
    match Access::of(p).route(req.method(), req.uri().path()) {
        Ok(()) => next.run(req).await,
        Err(why) => {
            tracing::warn!(
                subject = %p.subject,
                method = %req.method(),
                path = %req.uri().path(),
                "request denied: {why}"
            );
            ApiError::Forbidden(why).into_response()
        }
    }
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
        let viewer = who("vic", &[]);
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
}
