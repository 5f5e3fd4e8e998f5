//! What every resource carries regardless of its kind: type information and object metadata.
//!
//! The shape follows Kubernetes on purpose, so that people and tools used to `kubectl`
//! manifests (labels, annotations, resource versions) read Tideway documents without a manual.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::validation::{CheckAt, Checker, at, key_path};

/// The one API version this crate speaks; bumped when a document shape changes incompatibly.
pub const API_VERSION: &str = "tideway.dev/v1alpha1";

/// Names end up as DNS labels in member clusters (Volcano Job names, pod names), hence 63.
pub const MAX_NAME_LEN: usize = 63;

/// Label values follow the Kubernetes limit so labels can be copied onto member objects.
pub const MAX_LABEL_VALUE_LEN: usize = 63;

/// Kubernetes' total annotation budget; anything bigger belongs in the workload template.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Metadata of a stored object; the server owns every field but `name`, `labels` and
/// `annotations`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObjectMeta {
    /// DNS-1123 label, unique per kind; see [`validate_name`].
    pub name: String,
    /// Set by the server at creation; a UUID that never repeats (see [`new_uid`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Matched by placement constraints and list selectors; Kubernetes' key and value rules.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Free-form notes for people and tools; at most [`MAX_ANNOTATIONS_BYTES`] in total.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Set by the server when the object is first stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<DateTime<Utc>>,
    /// Raft log index of the last write; used for optimistic concurrency on updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<u64>,
    /// Bumped on every spec change, so status can say which spec it reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

impl ObjectMeta {
    /// Metadata with only a name, as a client sends it before the server fills in the rest.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
}

/// A fresh object UID. Member agents key idempotent creation on it, so it must never repeat.
///
/// A version-7 UUID: the wall clock's milliseconds, then 74 random bits from the thread's
/// CSPRNG (ChaCha, seeded and reseeded from the OS; no `getrandom` system call per
/// submission). Two UIDs of the same millisecond collide with odds of 2^-74. The time prefix
/// is what matters: the state's UID index is an ordered persistent map, and random (version-4)
/// UIDs sent every submission's insert to a cold leaf anywhere in it, copying that leaf's path
/// when a cycle or a digest shared it, a cost that grew with the backlog. Time-ordered UIDs
/// land at the index's right edge, where the previous submission's path is still warm. The
/// UID stays opaque: nothing may read a time out of it.
pub fn new_uid() -> String {
    use crate::clock::Clock;
    // Before 1970 (a broken clock) the prefix is 0: the UID is still random, only unordered.
    let millis = u64::try_from(crate::clock::RealClock.now().timestamp_millis()).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &rand::random())
        .into_uuid()
        .to_string()
}

/// The two fields every document starts with; used to route a document to its type before
/// decoding it strictly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TypeMeta {
    /// E.g. `tideway.dev/v1alpha1`; must equal [`API_VERSION`] to decode.
    pub api_version: String,
    /// The resource type, e.g. `Workload`.
    pub kind: String,
}

/// Common access to resources, so storage and HTTP handlers can be written once.
pub trait Resource {
    /// The `kind` this type is stored and served as.
    const KIND: &'static str;
    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// Mutable metadata, for the server to stamp uid, versions and timestamps.
    fn metadata_mut(&mut self) -> &mut ObjectMeta;
    /// The object's name, unique per kind.
    fn name(&self) -> &str {
        &self.metadata().name
    }
}

macro_rules! impl_resource {
    ($($ty:ident => $kind:literal),+ $(,)?) => {$(
        impl $crate::meta::Resource for $ty {
            const KIND: &'static str = $kind;
            fn metadata(&self) -> &$crate::meta::ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut $crate::meta::ObjectMeta {
                &mut self.metadata
            }
        }
    )+};
}
pub(crate) use impl_resource;

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// Why a name, label key or label value was rejected; the messages complete "`field` ...".
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MetaError {
    /// The name was empty.
    #[error("must not be empty")]
    Empty,
    /// Longer than the limit.
    #[error("must be at most {max} characters (got {len})")]
    TooLong {
        /// Length found, in bytes.
        len: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// A character outside `[a-z0-9-]`.
    #[error(
        "must consist of lower case letters, digits and '-' (found {found:?} at position {index})"
    )]
    InvalidCharacter {
        /// The first offending character.
        found: char,
        /// Its byte offset in the name.
        index: usize,
    },
    /// A leading or trailing '-'.
    #[error("must start and end with a lower case letter or digit")]
    BadEdge,
    /// A label key that breaks Kubernetes' qualified-name rule.
    #[error("label key {key:?}: {reason}")]
    LabelKey {
        /// The key as given.
        key: String,
        /// Which part of the rule it breaks.
        reason: String,
    },
    /// A label value that breaks Kubernetes' label value rule.
    #[error("label value {value:?}: {reason}")]
    LabelValue {
        /// The value as given.
        value: String,
        /// Which part of the rule it breaks.
        reason: String,
    },
}

/// Checks a DNS-1123 label (lower case alphanumerics and '-', at most 63 characters),
/// the form every Tideway name takes.
pub fn validate_name(name: &str) -> Result<(), MetaError> {
    if name.is_empty() {
        return Err(MetaError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(MetaError::TooLong {
            len: name.len(),
            max: MAX_NAME_LEN,
        });
    }
    if let Some((index, found)) = name
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
    {
        return Err(MetaError::InvalidCharacter { found, index });
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(MetaError::BadEdge);
    }
    Ok(())
}

/// The name part of a label key and a non-empty label value share this rule in Kubernetes.
fn check_label_segment(s: &str) -> Result<(), String> {
    if s.len() > MAX_LABEL_VALUE_LEN {
        return Err(format!("must be at most {MAX_LABEL_VALUE_LEN} characters"));
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge_ok(s.chars().next()) || !edge_ok(s.chars().last()) {
        return Err("must start and end with a letter or digit".to_owned());
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err("may contain only letters, digits, '-', '_' and '.'".to_owned());
    }
    Ok(())
}

/// Kubernetes' qualified-name rule (`[prefix/]name`), so labels copy onto member objects.
pub fn validate_label_key(key: &str) -> Result<(), MetaError> {
    let err = |reason: String| MetaError::LabelKey {
        key: key.to_owned(),
        reason,
    };
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let ok = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|part| validate_name(part).is_ok());
        if !ok {
            return Err(err("prefix must be a DNS subdomain".to_owned()));
        }
    }
    if name.is_empty() {
        return Err(err("name part must not be empty".to_owned()));
    }
    check_label_segment(name).map_err(err)
}

/// Kubernetes' label value rule; the empty value is allowed.
pub fn validate_label_value(value: &str) -> Result<(), MetaError> {
    if value.is_empty() {
        return Ok(());
    }
    check_label_segment(value).map_err(|reason| MetaError::LabelValue {
        value: value.to_owned(),
        reason,
    })
}

impl CheckAt for ObjectMeta {
    fn check_at(&self, prefix: &str, c: &mut Checker) {
        c.name(at(prefix, "name"), &self.name);
        if let Some(uid) = &self.uid
            && uuid::Uuid::parse_str(uid).is_err()
        {
            c.push(at(prefix, "uid"), "must be a UUID");
        }
        for (key, value) in &self.labels {
            if let Err(e) = validate_label_key(key).and_then(|()| validate_label_value(value)) {
                c.push(key_path(&at(prefix, "labels").path(), key), e.to_string());
            }
        }
        let mut annotation_bytes = 0;
        for (key, value) in &self.annotations {
            annotation_bytes += key.len() + value.len();
            if let Err(e) = validate_label_key(key) {
                c.push(
                    key_path(&at(prefix, "annotations").path(), key),
                    e.to_string(),
                );
            }
        }
        if annotation_bytes > MAX_ANNOTATIONS_BYTES {
            c.push(
                at(prefix, "annotations"),
                format!(
                    "must total at most {MAX_ANNOTATIONS_BYTES} bytes (got {annotation_bytes})"
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dns_1123_labels() {
        assert!(validate_name("llama-ft-1").is_ok());
        assert!(validate_name("a").is_ok());
        assert_eq!(validate_name(""), Err(MetaError::Empty));
        assert!(matches!(
            validate_name("Llama"),
            Err(MetaError::InvalidCharacter {
                found: 'L',
                index: 0
            })
        ));
        assert!(matches!(
            validate_name("a_b"),
            Err(MetaError::InvalidCharacter {
                found: '_',
                index: 1
            })
        ));
        assert_eq!(validate_name("-a"), Err(MetaError::BadEdge));
        assert_eq!(validate_name("a-"), Err(MetaError::BadEdge));
        assert!(validate_name(&"a".repeat(63)).is_ok());
        assert_eq!(
            validate_name(&"a".repeat(64)),
            Err(MetaError::TooLong { len: 64, max: 63 })
        );
    }

    #[test]
    fn label_keys_and_values() {
        assert!(validate_label_key("team").is_ok());
        assert!(validate_label_key("tideway.dev/tenant").is_ok());
        assert!(validate_label_key("tideway.dev/").is_err());
        assert!(validate_label_key("Bad_Prefix/x").is_err());
        assert!(validate_label_key("-x").is_err());
        assert!(validate_label_value("").is_ok());
        assert!(validate_label_value("H100_80GB").is_ok());
        assert!(validate_label_value("has space").is_err());
    }

    #[test]
    fn metadata_reports_every_problem() {
        let mut meta = ObjectMeta::named("Bad");
        meta.uid = Some("not-a-uuid".into());
        meta.labels.insert("ok".into(), "bad value".into());
        let mut c = Checker::default();
        meta.check_at("metadata", &mut c);
        let errs = c.finish().unwrap_err();
        assert!(errs.has_field("metadata.name"), "{errs}");
        assert!(errs.has_field("metadata.uid"), "{errs}");
        assert!(errs.has_field("metadata.labels.ok"), "{errs}");
    }

    #[test]
    fn new_uid_is_a_valid_uid() {
        let mut meta = ObjectMeta::named("x");
        meta.uid = Some(new_uid());
        let mut c = Checker::default();
        meta.check_at("", &mut c);
        assert!(c.finish().is_ok());
    }

    #[test]
    fn new_uids_are_time_ordered_v7_uuids_that_do_not_repeat_across_threads() {
        let before = new_uid();
        let per_thread = 2_000;
        let uids: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..per_thread).map(|_| new_uid()).collect::<Vec<_>>()))
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let distinct: std::collections::BTreeSet<&String> = uids.iter().collect();
        assert_eq!(distinct.len(), 4 * per_thread);
        for u in &uids {
            let parsed = uuid::Uuid::parse_str(u).unwrap();
            assert_eq!(parsed.get_version(), Some(uuid::Version::SortRand), "{u}");
            assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122, "{u}");
            assert_eq!(parsed.to_string(), *u, "lowercase, hyphenated");
            // The millisecond prefix (the first 12 hex digits) never falls below that of a UID
            // made earlier, so the UID index grows at its right edge.
            assert!(
                u[..13] >= before[..13],
                "{u} sorts before the earlier {before}"
            );
        }
    }

    #[test]
    fn empty_metadata_fields_are_not_serialized() {
        let json = serde_json::to_string(&ObjectMeta::named("x")).unwrap();
        assert_eq!(json, r#"{"name":"x"}"#);
    }
}
