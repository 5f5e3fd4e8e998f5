//! Identifiers that travel together: a workload's name, its UID, and a member cluster's name.
//!
//! All three are strings on the wire, and a decision or a command often carries two or three
//! of them side by side; distinct types make swapping them a compile error instead of a
//! misrouted workload. Each serializes as the bare string (`#[serde(transparent)]`), so the
//! JSON is the same as before they existed.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a string as this kind of identifier (no validation: decoding and
            /// `Validate` check names where they enter).
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }

            /// The identifier as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The identifier as an owned string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_string())
            }
        }

        impl From<$name> for String {
            fn from(n: $name) -> Self {
                n.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self.as_str() == other.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

name_type!(
    /// A workload's `metadata.name`, unique among live workloads.
    WorkloadName
);
name_type!(
    /// A workload's `metadata.uid`, assigned by the federation at submission; a resubmission
    /// under the same name gets a new one.
    Uid
);
name_type!(
    /// A member cluster's name in the federation (`MemberCluster.metadata.name`).
    ClusterName
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialize_as_the_bare_string() {
        let n = ClusterName::from("sim-eu");
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"sim-eu\"");
        let u: Uid = serde_json::from_str("\"abc\"").unwrap();
        assert_eq!(u, "abc");
        assert_eq!(u.to_string(), "abc");
        assert_eq!(WorkloadName::new("w").into_string(), "w");
    }
}
