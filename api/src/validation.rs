//! Semantic validation shared by every resource.
//!
//! Validation is separate from decoding for two reasons: decoding stops at the first problem
//! while a user fixing a document wants every problem at once, and the server, the CLI and the
//! simulator must apply exactly the same rules. Every error names its field with the camelCase
//! JSON path the user wrote (`spec.podSets[0].gpusPerPod`), never a Rust field name.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::meta::{self, API_VERSION, ObjectMeta};

/// One problem with one field of a document.
///
/// `field` is empty when the problem concerns the document as a whole (for example JSON that
/// does not parse at all), so clients can still show it next to the right thing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FieldError {
    /// camelCase JSON path, e.g. `spec.podSets[0].gpusPerPod`; empty for the whole document.
    pub field: String,
    /// What is wrong, phrased to follow the field name.
    pub reason: String,
}

impl FieldError {
    /// An error at `field`; pass "" for the document as a whole.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

/// Every problem found in one document; never empty when returned as an error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Error)]
#[error("{}", join(.0))]
pub struct ValidationErrors(pub Vec<FieldError>);

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ValidationErrors {
    /// Number of problems found.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True only for a value built by hand: validation never returns an empty list as an error.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems in the order they were found.
    pub fn iter(&self) -> std::slice::Iter<'_, FieldError> {
        self.0.iter()
    }

    /// Whether some error names exactly `field`; tests and callers that react to one field use it.
    pub fn has_field(&self, field: &str) -> bool {
        self.0.iter().any(|e| e.field == field)
    }

    /// The problems, for callers that build a problem+json body.
    pub fn into_inner(self) -> Vec<FieldError> {
        self.0
    }
}

impl IntoIterator for ValidationErrors {
    type Item = FieldError;
    type IntoIter = std::vec::IntoIter<FieldError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl From<ValidationErrors> for Vec<FieldError> {
    fn from(errors: ValidationErrors) -> Self {
        errors.0
    }
}

/// Implemented by every resource so the server can validate any document the same way.
pub trait Validate {
    /// Returns every problem, not just the first.
    fn validate(&self) -> Result<(), ValidationErrors>;
}

/// Checks a resource at a path prefix, so that a bundle (a `Policy`) can validate the
/// resources it embeds and report paths like `spec.queues[2].spec.quotas[0].max`.
pub(crate) trait CheckAt {
    fn check_at(&self, prefix: &str, c: &mut Checker);
}

/// Implements [`Validate`] through [`CheckAt`] for top-level resources.
macro_rules! impl_validate {
    ($($ty:ty),+ $(,)?) => {$(
        impl $crate::validation::Validate for $ty {
            fn validate(&self) -> Result<(), $crate::validation::ValidationErrors> {
                let mut c = $crate::validation::Checker::default();
                $crate::validation::CheckAt::check_at(self, "", &mut c);
                c.finish()
            }
        }
    )+};
}
pub(crate) use impl_validate;

/// A field's path below a prefix, written out only when a problem is reported there: a sound
/// document (nearly every submission) is checked without building a string per field.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<'a> {
    prefix: &'a str,
    field: &'a str,
}

impl<'a> At<'a> {
    /// The path as a prefix for nested checks; borrowed, without a copy, at the top level.
    pub(crate) fn path(self) -> Cow<'a, str> {
        if self.prefix.is_empty() {
            Cow::Borrowed(self.field)
        } else {
            Cow::Owned(self.to_string())
        }
    }
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            f.write_str(self.field)
        } else {
            write!(f, "{}.{}", self.prefix, self.field)
        }
    }
}

/// Joins a path prefix and a relative field path.
pub(crate) fn at<'a>(prefix: &'a str, field: &'a str) -> At<'a> {
    At { prefix, field }
}

/// What a check accepts as the field it reports on: a path already built, or one to build
/// only if the check fails.
pub(crate) trait FieldPath {
    fn into_path(self) -> String;
}

impl FieldPath for String {
    fn into_path(self) -> String {
        self
    }
}

impl FieldPath for &str {
    fn into_path(self) -> String {
        self.to_owned()
    }
}

impl FieldPath for Cow<'_, str> {
    fn into_path(self) -> String {
        self.into_owned()
    }
}

impl FieldPath for At<'_> {
    fn into_path(self) -> String {
        self.to_string()
    }
}

/// Path of a map entry: `labels.team` for plain keys, `labels["tideway.dev/tenant"]` when the
/// key would otherwise be ambiguous. Decoding uses the same spelling.
pub(crate) fn key_path(base: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (base.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (true, false) => format!("[{key:?}]"),
        (false, true) => format!("{base}.{key}"),
        (false, false) => format!("{base}[{key:?}]"),
    }
}

/// Upper bound on free-text and identifier lengths that nothing legitimate comes near.
pub(crate) const MAX_TEXT_LEN: usize = 1024;

/// Accumulates every problem of one document.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    errors: Vec<FieldError>,
}

impl Checker {
    pub(crate) fn push(&mut self, field: impl FieldPath, reason: impl Into<String>) {
        self.errors.push(FieldError::new(field.into_path(), reason));
    }

    /// Problems found so far; a check that only makes sense on sound input compares it.
    pub(crate) fn count(&self) -> usize {
        self.errors.len()
    }

    pub(crate) fn finish(self) -> Result<(), ValidationErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(self.errors))
        }
    }

    /// `apiVersion`, `kind` and `metadata`, common to every resource.
    pub(crate) fn header(
        &mut self,
        prefix: &str,
        api_version: &str,
        kind: &str,
        expected_kind: &str,
        metadata: &ObjectMeta,
    ) {
        if api_version != API_VERSION {
            self.push(
                at(prefix, "apiVersion"),
                format!("must be {API_VERSION:?}, got {api_version:?}"),
            );
        }
        if kind != expected_kind {
            self.push(
                at(prefix, "kind"),
                format!("must be {expected_kind:?}, got {kind:?}"),
            );
        }
        metadata.check_at(&at(prefix, "metadata").path(), self);
    }

    /// A DNS-1123 label: the names of resources and the things they refer to by name.
    pub(crate) fn name(&mut self, field: impl FieldPath, value: &str) {
        if let Err(e) = meta::validate_name(value) {
            self.push(field, e.to_string());
        }
    }

    /// Looser than a name: flavors ("H100"), regions, GPU models and user names come from
    /// outside Tideway and keep their own spelling.
    pub(crate) fn identifier(&mut self, field: impl FieldPath, value: &str) {
        let reason = if value.is_empty() {
            Some("must not be empty".to_owned())
        } else if value.len() > meta::MAX_NAME_LEN {
            Some(format!(
                "must be at most {} characters (got {})",
                meta::MAX_NAME_LEN,
                value.len()
            ))
        } else if !value.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            Some(
                "must start with a letter or digit and contain only letters, digits, '-', '_' or '.'"
                    .to_owned(),
            )
        } else {
            None
        };
        if let Some(reason) = reason {
            self.push(field, reason);
        }
    }

    /// Free text that only needs to be present and bounded.
    pub(crate) fn text(&mut self, field: impl FieldPath, value: &str) {
        if value.trim().is_empty() {
            self.push(field, "must not be empty");
        } else if value.len() > MAX_TEXT_LEN {
            self.push(
                field,
                format!("must be at most {MAX_TEXT_LEN} bytes (got {})", value.len()),
            );
        }
    }

    /// `min..=max`, with the bound in the message so the user knows what would pass.
    pub(crate) fn range<T>(&mut self, field: impl FieldPath, value: T, min: T, max: T)
    where
        T: PartialOrd + fmt::Display + Copy,
    {
        if value < min || value > max {
            let reason = if value < min {
                format!("must be at least {min} (got {value})")
            } else {
                format!("must be at most {max} (got {value})")
            };
            self.push(field, reason);
        }
    }

    /// Reports the second and later occurrences of a key in a list.
    pub(crate) fn unique<'a, I>(&mut self, prefix: &str, list: &str, item_field: &str, keys: I)
    where
        I: IntoIterator<Item = &'a str>,
    {
        // Lists are short (pod sets, regions): a few on the stack are compared in place, so a
        // sound list costs no allocation; a set only past that.
        const ON_STACK: usize = 8;
        let mut few: [&str; ON_STACK] = [""; ON_STACK];
        let mut seen = std::collections::BTreeSet::new();
        for (i, key) in keys.into_iter().enumerate() {
            let repeated = if i < ON_STACK {
                let repeated = few[..i].contains(&key);
                few[i] = key;
                repeated
            } else {
                if i == ON_STACK {
                    seen.extend(few);
                }
                !seen.insert(key)
            };
            if repeated {
                let field = if item_field.is_empty() {
                    format!("{}[{i}]", at(prefix, list))
                } else {
                    format!("{}[{i}].{item_field}", at(prefix, list))
                };
                self.push(field, format!("duplicate {key:?}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_error_display_names_the_field() {
        assert_eq!(
            FieldError::new("spec.queue", "must not be empty").to_string(),
            "spec.queue: must not be empty"
        );
        assert_eq!(FieldError::new("", "bad").to_string(), "bad");
    }

    #[test]
    fn checker_collects_everything() {
        let mut c = Checker::default();
        c.name("a", "Bad_Name");
        c.range("b", 0u32, 1, 10);
        c.range("c", 11u32, 1, 10);
        c.unique("spec", "podSets", "name", ["x", "y", "x"]);
        c.identifier("d", "H100");
        let errs = c.finish().unwrap_err();
        assert_eq!(errs.len(), 4, "{errs}");
        assert!(errs.has_field("a"));
        assert!(errs.has_field("b"));
        assert!(errs.has_field("c"));
        assert!(errs.has_field("spec.podSets[2].name"));
    }

    #[test]
    fn duplicates_are_found_on_either_side_of_the_stack_bound() {
        // Every key named twice once; the second ones at 3 (within the first eight), at 9
        // (of one from the first eight) and at 11 (of one past them).
        let keys = [
            "a", "b", "c", "a", "d", "e", "f", "g", "h", "b", "i", "i", "j",
        ];
        let mut c = Checker::default();
        c.unique("spec", "podSets", "name", keys);
        let errs = c.finish().unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.podSets[3].name",
                "spec.podSets[9].name",
                "spec.podSets[11].name"
            ]
        );
        let mut c = Checker::default();
        c.unique("", "regions", "", ["x", "y"]);
        assert!(c.finish().is_ok(), "two distinct keys");
        let many: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let mut c = Checker::default();
        c.unique("", "regions", "", many.iter().map(String::as_str));
        assert!(c.finish().is_ok(), "forty distinct keys");
    }

    #[test]
    fn a_path_is_the_same_built_late_or_early() {
        assert_eq!(at("", "spec").to_string(), "spec");
        assert_eq!(at("spec", "queue").to_string(), "spec.queue");
        assert!(matches!(at("", "spec").path(), Cow::Borrowed("spec")));
        assert_eq!(
            at("spec.podSets[0]", "flavor").path(),
            "spec.podSets[0].flavor"
        );
        let mut c = Checker::default();
        c.name(at("spec", "queue"), "Bad_Queue");
        c.range(at("spec.podSets[1]", "count"), 0u32, 1, 8);
        let errs = c.finish().unwrap_err();
        assert!(errs.has_field("spec.queue"), "{errs}");
        assert!(errs.has_field("spec.podSets[1].count"), "{errs}");
    }

    #[test]
    fn map_keys_are_quoted_only_when_needed() {
        assert_eq!(key_path("metadata.labels", "team"), "metadata.labels.team");
        assert_eq!(
            key_path("metadata.labels", "tideway.dev/x"),
            r#"metadata.labels["tideway.dev/x"]"#
        );
        assert_eq!(key_path("", "a"), "a");
    }
}
