//! `RoleBinding`: who holds which role. Authentication (a token file or a JWT) says who a
//! caller is and which groups it belongs to; bindings, kept in the replicated state and
//! changed with `tideway apply`, say what those subjects and groups may do.
//!
//! A binding names its subjects and groups rather than the other way round so that one
//! document grants one role to a team, and removing the document revokes exactly that.

use serde::{Deserialize, Serialize};

use crate::meta::{API_VERSION, ObjectMeta, impl_resource};
use crate::validation::{CheckAt, Checker, MAX_TEXT_LEN, at, impl_validate};

/// Grants `spec.role` to `spec.subjects` and the members of `spec.groups`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RoleBinding {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `RoleBinding`.
    pub kind: String,
    /// The binding's name; applying the same name again replaces it.
    pub metadata: ObjectMeta,
    /// The role and whom it is granted to.
    pub spec: RoleBindingSpec,
}

impl_resource!(RoleBinding => "RoleBinding");

impl RoleBinding {
    /// A binding at the current API version.
    pub fn new(name: impl Into<String>, spec: RoleBindingSpec) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: <Self as crate::meta::Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
        }
    }

    /// Whether the binding applies to a caller with this subject and these groups.
    pub fn binds(&self, subject: &str, groups: &[String]) -> bool {
        self.spec.subjects.iter().any(|s| s == subject)
            || self.spec.groups.iter().any(|g| groups.contains(g))
    }
}

/// The role and whom it is granted to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RoleBindingSpec {
    /// What the role allows.
    pub role: Role,
    /// Authenticated subjects (a token's subject, a JWT's `sub`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<String>,
    /// Groups (a token's groups, a JWT's groups claim).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// For `submitter`: the queues it may submit to and read; `*` is every queue. Must be
    /// empty for the other roles, which are not scoped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<String>,
}

/// The roles, from most to least powerful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// Everything: policy, bindings, cluster membership, snapshots.
    Admin,
    /// Read everything, cancel any workload, cordon, drain and uncordon members.
    Operator,
    /// Submit to, read and cancel own work in the bound queues.
    Submitter,
    /// Read everything, change nothing.
    Viewer,
}

impl Role {
    /// The name as serialized (`submitter`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Operator => "operator",
            Self::Submitter => "submitter",
            Self::Viewer => "viewer",
        }
    }
}

/// The queue pattern that stands for every queue in [`RoleBindingSpec::queues`].
pub const ALL_QUEUES: &str = "*";

impl CheckAt for RoleBinding {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.header(
            prefix,
            &self.api_version,
            &self.kind,
            <Self as crate::meta::Resource>::KIND,
            &self.metadata,
        );
        let p = at(prefix, "spec").path();
        let s = &self.spec;
        if s.subjects.is_empty() && s.groups.is_empty() {
            c.push(
                at(&p, "subjects"),
                "name at least one subject or group: a binding to nobody grants nothing",
            );
        }
        for (field, values) in [("subjects", &s.subjects), ("groups", &s.groups)] {
            for (i, v) in values.iter().enumerate() {
                if v.trim().is_empty() || v.len() > MAX_TEXT_LEN {
                    c.push(
                        at(&p, &format!("{field}[{i}]")),
                        format!("must be 1 to {MAX_TEXT_LEN} bytes"),
                    );
                }
            }
        }
        match s.role {
            Role::Submitter if s.queues.is_empty() => c.push(
                at(&p, "queues"),
                "a submitter is scoped to queues: name them, or '*' for every queue",
            ),
            Role::Submitter => {
                for (i, q) in s.queues.iter().enumerate() {
                    if q != ALL_QUEUES {
                        c.name(at(&p, &format!("queues[{i}]")), q);
                    }
                }
            }
            other if !s.queues.is_empty() => c.push(
                at(&p, "queues"),
                format!(
                    "only a submitter is scoped to queues, not {}",
                    other.as_str()
                ),
            ),
            _ => {}
        }
    }
}

impl_validate!(RoleBinding);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::Validate;

    fn binding(role: Role, groups: &[&str], queues: &[&str]) -> RoleBinding {
        RoleBinding::new(
            "b",
            RoleBindingSpec {
                role,
                subjects: vec![],
                groups: groups.iter().map(|s| s.to_string()).collect(),
                queues: queues.iter().map(|s| s.to_string()).collect(),
            },
        )
    }

    #[test]
    fn decodes_from_yaml_and_names_bad_fields() {
        let b: RoleBinding = crate::decode_yaml(
            b"apiVersion: tideway.dev/v1alpha1\nkind: RoleBinding\nmetadata: {name: ml}\nspec:\n  role: submitter\n  groups: [ml-research]\n  queues: [research]\n",
        )
        .expect("decodes");
        assert_eq!(b.spec.role, Role::Submitter);
        assert!(b.validate().is_ok());
        assert!(b.binds("anyone", &["ml-research".to_string()]));
        assert!(!b.binds("anyone", &["ops".to_string()]));

        let e = binding(Role::Submitter, &["g"], &[])
            .validate()
            .unwrap_err();
        assert!(e.has_field("spec.queues"), "{e:?}");
        let e = binding(Role::Viewer, &["g"], &["q"])
            .validate()
            .unwrap_err();
        assert!(e.has_field("spec.queues"), "{e:?}");
        let e = binding(Role::Admin, &[], &[]).validate().unwrap_err();
        assert!(e.has_field("spec.subjects"), "{e:?}");
        let e = binding(Role::Submitter, &["g"], &["Bad Name"])
            .validate()
            .unwrap_err();
        assert!(e.has_field("spec.queues[0]"), "{e:?}");
        assert!(binding(Role::Submitter, &["g"], &["*"]).validate().is_ok());
    }
}
