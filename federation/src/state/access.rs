//! Role bindings in the replicated state: every node authorizes from the same bindings, and a
//! change is a log entry like any other (with its actor in the audit trail). Once the policy
//! bundle lists the bindings, a binding applied or deleted alone is a policy change: the next
//! version, so that diff and rollback cover who may do what.

use chrono::{DateTime, Utc};
use tideway_api::RoleBinding;

use super::FederationState;
use super::command::{CommandResult, Rejection, StoredObject};

impl FederationState {
    pub(super) fn put_role_binding(
        &mut self,
        mut binding: RoleBinding,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        if self.policy_owns_role_bindings() {
            let name = binding.metadata.name.clone();
            return self.put_policy_role_binding(&name, Some(binding), at, index);
        }
        binding.metadata.resource_version = Some(index);
        let created = self
            .role_bindings
            .get(&binding.metadata.name)
            .and_then(|b| b.metadata.creation_timestamp)
            .unwrap_or(at);
        binding.metadata.creation_timestamp = Some(created);
        self.role_bindings
            .insert(binding.metadata.name.clone(), binding.clone());
        CommandResult::Created {
            object: StoredObject::RoleBinding(Box::new(binding)),
        }
    }

    pub(super) fn delete_role_binding(
        &mut self,
        name: &str,
        at: DateTime<Utc>,
        index: u64,
    ) -> CommandResult {
        if self.policy_owns_role_bindings() {
            return self.put_policy_role_binding(name, None, at, index);
        }
        match self.role_bindings.remove(name) {
            Some(b) => CommandResult::Created {
                object: StoredObject::RoleBinding(Box::new(b)),
            },
            None => CommandResult::Rejected {
                rejection: Rejection::NotFound {
                    what: format!("role binding '{name}'"),
                },
            },
        }
    }

    /// The bindings that apply to a caller with this subject and these groups.
    pub fn bindings_of<'a>(
        &'a self,
        subject: &'a str,
        groups: &'a [String],
    ) -> impl Iterator<Item = &'a RoleBinding> + 'a {
        self.role_bindings
            .values()
            .filter(move |b| b.binds(subject, groups))
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::audit::AuditKind;
    use tideway_api::{Role, RoleBindingSpec};

    use super::*;
    use crate::state::command::Command;

    #[test]
    fn bindings_are_put_replaced_deleted_and_audited_with_their_actor() {
        let at = Utc.timestamp_opt(1_800_000_000, 0).single().expect("time");
        let mut s = FederationState::default();
        let b = RoleBinding::new(
            "ml",
            RoleBindingSpec {
                role: Role::Submitter,
                subjects: vec![],
                groups: vec!["ml".into()],
                queues: vec!["research".into()],
            },
        );
        let put = |b: RoleBinding| {
            Command::by(
                Some("root"),
                Command::PutRoleBinding {
                    binding: Box::new(b),
                    at,
                },
            )
        };
        assert!(matches!(
            s.apply(1, put(b.clone())),
            CommandResult::Created { .. }
        ));
        let groups = vec!["ml".to_string()];
        assert_eq!(s.bindings_of("bob", &groups).count(), 1);
        assert_eq!(s.bindings_of("bob", &[]).count(), 0);
        let mut wider = b.clone();
        wider.spec.queues.push("prod".into());
        s.apply(2, put(wider));
        assert_eq!(s.role_bindings["ml"].spec.queues.len(), 2);
        assert_eq!(s.role_bindings["ml"].metadata.resource_version, Some(2));
        let del = |name: &str| {
            Command::by(
                Some("root"),
                Command::DeleteRoleBinding {
                    name: name.into(),
                    at,
                },
            )
        };
        assert!(matches!(
            s.apply(3, del("ml")),
            CommandResult::Created { .. }
        ));
        assert!(matches!(
            s.apply(4, del("ml")),
            CommandResult::Rejected {
                rejection: Rejection::NotFound { .. }
            }
        ));
        let trail: Vec<(AuditKind, &str, u64)> = s
            .audit
            .events
            .iter()
            .map(|e| (e.kind, e.actor.as_str(), e.index))
            .collect();
        assert_eq!(
            trail,
            vec![
                (AuditKind::AccessChanged, "root", 1),
                (AuditKind::AccessChanged, "root", 2),
                (AuditKind::AccessChanged, "root", 3),
            ],
            "a refused delete records nothing"
        );
        assert_eq!(
            s.audit.policy_version, 0,
            "bindings are not scheduling policy"
        );
    }
}
