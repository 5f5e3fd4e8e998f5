//! Strict decoding of JSON and YAML documents into resources, with errors that name the
//! offending field.
//!
//! Plain serde errors say "invalid type: integer `-1`, expected u32" without saying where;
//! wrapping the deserializer in `serde_path_to_error` adds the path
//! (`spec.podSets[0].count`) so the API can answer with a field-level problem. YAML goes
//! through serde-saphyr (maintained, with alias-bomb budgets) rather than serde_yaml.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_path_to_error::{Path, Segment, Track};
use thiserror::Error;

use crate::member_cluster::MemberCluster;
use crate::meta::{ObjectMeta, Resource, TypeMeta};
use crate::policy::Policy;
use crate::priority_class::PriorityClass;
use crate::queue::Queue;
use crate::quota_schedule::QuotaSchedule;
use crate::role_binding::RoleBinding;
use crate::validation::{FieldError, Validate, ValidationErrors, key_path};
use crate::webhook::Webhook;
use crate::workload::Workload;

/// The document formats Tideway reads, chosen by content type or sniffed from the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `application/json` and `+json` media types.
    Json,
    /// `application/yaml` and its aliases; also the fallback when sniffing.
    Yaml,
}

impl Format {
    /// Recognises JSON and YAML media types, with parameters and `+json`/`+yaml` suffixes.
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if essence == "application/json" || essence.ends_with("+json") {
            Some(Self::Json)
        } else if matches!(
            essence.as_str(),
            "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml"
        ) || essence.ends_with("+yaml")
        {
            Some(Self::Yaml)
        } else {
            None
        }
    }

    /// JSON documents are objects; anything else is treated as YAML (a YAML parser would
    /// accept most JSON too, but JSON errors from the JSON parser are clearer).
    pub fn sniff(bytes: &[u8]) -> Self {
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Self::Json,
            _ => Self::Yaml,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Json => "JSON",
            Self::Yaml => "YAML",
        })
    }
}

/// Why a document could not be decoded. `field` is the camelCase path of the offending
/// field, empty when the problem is the document as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Nothing but whitespace.
    #[error("the {format} document is empty")]
    Empty {
        /// The format the caller expected.
        format: Format,
    },
    /// Not well-formed JSON or YAML at all.
    #[error("malformed {format}: {reason}")]
    Syntax {
        /// Which parser rejected it.
        format: Format,
        /// Path of the field where parsing stopped; empty if the parser gave no position.
        field: String,
        /// The parser's message.
        reason: String,
    },
    /// Well-formed, but does not match the resource: unknown field, wrong type, missing field.
    #[error("{}{reason}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
    Invalid {
        /// Which format the document was in.
        format: Format,
        /// camelCase path of the offending field; empty for the document as a whole.
        field: String,
        /// What is wrong, phrased to follow the field name.
        reason: String,
    },
}

impl DecodeError {
    /// The format the document was read as.
    pub fn format(&self) -> Format {
        match self {
            Self::Empty { format } | Self::Syntax { format, .. } | Self::Invalid { format, .. } => {
                *format
            }
        }
    }

    /// camelCase path of the offending field; empty for the document as a whole.
    pub fn field(&self) -> &str {
        match self {
            Self::Empty { .. } => "",
            Self::Syntax { field, .. } | Self::Invalid { field, .. } => field,
        }
    }

    /// What is wrong, without the field name, as a problem+json `errors` entry carries it.
    pub fn reason(&self) -> String {
        match self {
            Self::Empty { .. } => "document is empty".to_owned(),
            Self::Syntax { format, reason, .. } => format!("malformed {format}: {reason}"),
            Self::Invalid { reason, .. } => reason.clone(),
        }
    }

    /// The error as one problem+json `errors` entry.
    pub fn to_field_error(&self) -> FieldError {
        FieldError::new(self.field(), self.reason())
    }
}

/// Spells a serde path the way validation does: `spec.podSets[0].count`, empty for the root.
fn path_string(path: &Path) -> String {
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => out = key_path(&out, key),
            Segment::Enum { variant } => out = key_path(&out, variant),
            // A key serde never saw (duplicate or truncated input): the parent is the best
            // location we have.
            Segment::Unknown => {}
        }
    }
    out
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// A document whose top level must be a mapping.
///
/// serde's derived `Deserialize` for a struct also accepts a sequence of its fields in order,
/// so without this `[2]` decodes as `{"id": 2}`: a body of the wrong shape would perform the
/// action (`POST /v1/cluster/remove` with `[2]` removed voter 2). Every document Tideway reads
/// is an object, so the top level is asked for as a map and anything else is refused before
/// the type sees it. Nested fields keep serde's rules; the type's own visitor reads the map,
/// so unknown fields, defaults and paths in errors are unchanged.
struct ObjectOnly<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapOnly<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for MapOnly<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object (a mapping of field names to values)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(MapOnly(std::marker::PhantomData))
            .map(ObjectOnly)
    }
}

/// Decodes one JSON document strictly (unknown fields and trailing data are errors).
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let format = Format::Json;
    if is_blank(bytes) {
        return Err(DecodeError::Empty { format });
    }
    // Most requests are valid: decode them without tracking the path (which costs a push and
    // a pop per field), and decode again with tracking only to name the field of an error.
    // Decoding is deterministic, so the second pass fails where the first did.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    if let Ok(ObjectOnly(value)) =
        ObjectOnly::<T>::deserialize(&mut de).and_then(|value| de.end().map(|()| value))
    {
        return Ok(value);
    }
    let mut track = Track::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let result =
        ObjectOnly::<T>::deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track))
            .and_then(|ObjectOnly(value)| de.end().map(|()| value));
    result.map_err(|e| {
        let field = path_string(&track.path());
        let reason = e.to_string();
        match e.classify() {
            serde_json::error::Category::Data => DecodeError::Invalid {
                format,
                field,
                reason,
            },
            _ => DecodeError::Syntax {
                format,
                field,
                reason,
            },
        }
    })
}

/// Decodes one YAML document strictly. Several documents in one stream are an error: a
/// request carries one resource.
pub fn decode_yaml<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let format = Format::Yaml;
    if is_blank(bytes) {
        return Err(DecodeError::Empty { format });
    }
    // Checked first: the parser would report the first document's field errors before it
    // noticed the second document.
    if split_documents(bytes).len() > 1 {
        return Err(several_documents(format));
    }
    let mut track = Track::new();
    let options = serde_saphyr::options! { with_snippet: false };
    let result = serde_saphyr::with_deserializer_from_slice_with_options(bytes, options, |de| {
        ObjectOnly::<T>::deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
            .map(|ObjectOnly(value)| value)
    });
    result.map_err(|e| {
        let field = path_string(&track.path());
        // The library's hint addresses the programmer, not the person who wrote the YAML.
        let reason = e
            .to_string()
            .replace(", set DuplicateKeyPolicy in Options if acceptable", "");
        if let serde_saphyr::Error::MultipleDocuments { .. } = e.without_snippet() {
            // The library's hint names its own functions; say what the person can do.
            several_documents(format)
        } else if let serde_saphyr::Error::Unexpected {
            expected: "mapping start",
            ..
        } = e.without_snippet()
        {
            // The parser's own words for a sequence or scalar where an object belongs.
            DecodeError::Invalid {
                format,
                field,
                reason: "invalid type: expected an object (a mapping of field names to values)"
                    .to_owned(),
            }
        } else if is_yaml_data_error(&e) {
            DecodeError::Invalid {
                format,
                field,
                reason,
            }
        } else if matches!(e.without_snippet(), serde_saphyr::Error::Eof { .. }) && field.is_empty()
        {
            DecodeError::Empty { format }
        } else {
            DecodeError::Syntax {
                format,
                field,
                reason,
            }
        }
    })
}

/// The documents of a YAML stream, split at its `---` lines (a `...` line ends one too),
/// leaving out those with nothing but blank lines, comments and directives. A JSON body is one
/// document. Splitting on lines rather than parsing the stream keeps each document's errors
/// its own (field paths from its start); a `---` at the start of a line always ends a
/// document in YAML, even inside a block scalar.
pub fn split_documents(bytes: &[u8]) -> Vec<&[u8]> {
    if Format::sniff(bytes) == Format::Json {
        return vec![bytes];
    }
    let mut docs = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at < bytes.len() {
        let end = bytes[at..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |i| at + i + 1);
        let line = &bytes[at..end];
        let marker = [&b"---"[..], &b"..."[..]]
            .into_iter()
            .find(|m| line.starts_with(m) && line.get(3).is_none_or(|b| b.is_ascii_whitespace()));
        if let Some(m) = marker {
            docs.push(&bytes[start..at]);
            // Content after `--- ` on the same line belongs to the next document.
            start = if *m == b"---"[..] { at + 3 } else { end };
        }
        at = end;
    }
    docs.push(&bytes[start..]);
    docs.retain(|d| {
        d.split(|b| *b == b'\n').any(|l| {
            let l = l.trim_ascii();
            !l.is_empty() && !l.starts_with(b"#") && !l.starts_with(b"%")
        })
    });
    docs
}

fn several_documents(format: Format) -> DecodeError {
    DecodeError::Syntax {
        format,
        field: String::new(),
        reason: "several documents (separated by `---`) where one is expected; \
                 `tideway apply -f` (POST /v1/apply) takes several"
            .to_owned(),
    }
}

/// Errors raised by serde (the document parsed, but does not fit the type).
fn is_yaml_data_error(e: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error as E;
    matches!(
        e.without_snippet(),
        E::Message { .. }
            | E::SerdeInvalidType { .. }
            | E::SerdeInvalidValue { .. }
            | E::SerdeInvalidLength { .. }
            | E::SerdeUnknownVariant { .. }
            | E::SerdeUnknownField { .. }
            | E::SerdeMissingField { .. }
            | E::SerdeVariantId { .. }
            | E::DuplicateMappingKey { .. }
            | E::NullIntoString { .. }
            | E::InvalidScalar { .. }
            | E::InvalidBooleanStrict { .. }
            | E::UnexpectedValueForUnit { .. }
            | E::UnexpectedValueForUnitEnumVariant { .. }
            | E::ExternallyTaggedEnumExpectedScalarOrMapping { .. }
            | E::ExpectedStringKeyForExternallyTaggedEnum { .. }
            | E::TaggedEnumMismatch { .. }
    )
}

/// Decodes JSON or YAML: by the content type when it names one, otherwise by sniffing.
pub fn decode_any<T: DeserializeOwned>(
    bytes: &[u8],
    content_type_hint: Option<&str>,
) -> Result<T, DecodeError> {
    let format = content_type_hint
        .and_then(Format::from_content_type)
        .unwrap_or_else(|| Format::sniff(bytes));
    match format {
        Format::Json => decode_json(bytes),
        Format::Yaml => decode_yaml(bytes),
    }
}

/// Reads only `apiVersion` and `kind`, ignoring the rest, to pick the type to decode into.
pub fn peek_type_meta(
    bytes: &[u8],
    content_type_hint: Option<&str>,
) -> Result<TypeMeta, DecodeError> {
    decode_any(bytes, content_type_hint)
}

/// Any top-level resource; what `tideway apply -f` reads when it does not know the kind.
/// Deliberately not `#[serde(untagged)]`: dispatch is on `kind`, so errors stay precise.
#[derive(Debug, Clone, PartialEq)]
pub enum AnyResource {
    /// A `Workload` document; boxed, since a workload is much larger than the other resources.
    Workload(Box<Workload>),
    /// A `Queue` document.
    Queue(Queue),
    /// A `PriorityClass` document.
    PriorityClass(PriorityClass),
    /// A `QuotaSchedule` document.
    QuotaSchedule(QuotaSchedule),
    /// A `MemberCluster` document.
    MemberCluster(MemberCluster),
    /// A `Policy` document; boxed, since a policy bundle carries the scheduler's tuning.
    Policy(Box<Policy>),
    /// A `Webhook` document.
    Webhook(Webhook),
    /// A `RoleBinding` document.
    RoleBinding(RoleBinding),
}

impl AnyResource {
    /// Every `kind` this enum dispatches on, for the "unknown kind" error message.
    pub const KINDS: [&'static str; 8] = [
        Workload::KIND,
        Queue::KIND,
        PriorityClass::KIND,
        QuotaSchedule::KIND,
        MemberCluster::KIND,
        Policy::KIND,
        Webhook::KIND,
        RoleBinding::KIND,
    ];

    /// The document's `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Workload(_) => Workload::KIND,
            Self::Queue(_) => Queue::KIND,
            Self::PriorityClass(_) => PriorityClass::KIND,
            Self::QuotaSchedule(_) => QuotaSchedule::KIND,
            Self::MemberCluster(_) => MemberCluster::KIND,
            Self::Policy(_) => Policy::KIND,
            Self::Webhook(_) => Webhook::KIND,
            Self::RoleBinding(_) => RoleBinding::KIND,
        }
    }

    /// The document's metadata, whatever its kind.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::Workload(r) => r.metadata(),
            Self::Queue(r) => r.metadata(),
            Self::PriorityClass(r) => r.metadata(),
            Self::QuotaSchedule(r) => r.metadata(),
            Self::MemberCluster(r) => r.metadata(),
            Self::Policy(r) => r.metadata(),
            Self::Webhook(r) => r.metadata(),
            Self::RoleBinding(r) => r.metadata(),
        }
    }
}

impl Validate for AnyResource {
    fn validate(&self) -> Result<(), ValidationErrors> {
        match self {
            Self::Workload(r) => r.validate(),
            Self::Queue(r) => r.validate(),
            Self::PriorityClass(r) => r.validate(),
            Self::QuotaSchedule(r) => r.validate(),
            Self::MemberCluster(r) => r.validate(),
            Self::Policy(r) => r.validate(),
            Self::Webhook(r) => r.validate(),
            Self::RoleBinding(r) => r.validate(),
        }
    }
}

impl Serialize for AnyResource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Workload(r) => r.serialize(serializer),
            Self::Queue(r) => r.serialize(serializer),
            Self::PriorityClass(r) => r.serialize(serializer),
            Self::QuotaSchedule(r) => r.serialize(serializer),
            Self::MemberCluster(r) => r.serialize(serializer),
            Self::Policy(r) => r.serialize(serializer),
            Self::Webhook(r) => r.serialize(serializer),
            Self::RoleBinding(r) => r.serialize(serializer),
        }
    }
}

/// Decodes a document of any kind, dispatching on its `kind` field.
pub fn decode_resource(
    bytes: &[u8],
    content_type_hint: Option<&str>,
) -> Result<AnyResource, DecodeError> {
    let type_meta = peek_type_meta(bytes, content_type_hint)?;
    Ok(match type_meta.kind.as_str() {
        Workload::KIND => AnyResource::Workload(Box::new(decode_any(bytes, content_type_hint)?)),
        Queue::KIND => AnyResource::Queue(decode_any(bytes, content_type_hint)?),
        PriorityClass::KIND => AnyResource::PriorityClass(decode_any(bytes, content_type_hint)?),
        QuotaSchedule::KIND => AnyResource::QuotaSchedule(decode_any(bytes, content_type_hint)?),
        MemberCluster::KIND => AnyResource::MemberCluster(decode_any(bytes, content_type_hint)?),
        Policy::KIND => AnyResource::Policy(Box::new(decode_any(bytes, content_type_hint)?)),
        Webhook::KIND => AnyResource::Webhook(decode_any(bytes, content_type_hint)?),
        RoleBinding::KIND => AnyResource::RoleBinding(decode_any(bytes, content_type_hint)?),
        other => {
            return Err(DecodeError::Invalid {
                format: content_type_hint
                    .and_then(Format::from_content_type)
                    .unwrap_or_else(|| Format::sniff(bytes)),
                field: "kind".to_owned(),
                reason: format!(
                    "unknown kind {other:?}, expected one of {}",
                    AnyResource::KINDS.join(", ")
                ),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA_YAML: &str = include_str!("../testdata/workload-llama-ft.yaml");
    const BENCH_JSON: &str = include_str!("../testdata/workload-bench.json");

    fn bench_with(from: &str, to: &str) -> String {
        assert!(BENCH_JSON.contains(from), "{from}");
        BENCH_JSON.replacen(from, to, 1)
    }

    #[test]
    fn a_stream_splits_into_its_documents() {
        let y = b"# queues\n---\nkind: Queue\n---\n# nothing\n---\nkind: PriorityClass\nx: |\n  ---a\n...\n";
        let docs: Vec<&str> = split_documents(y)
            .into_iter()
            .map(|d| std::str::from_utf8(d).expect("utf-8"))
            .collect();
        assert_eq!(
            docs,
            vec!["\nkind: Queue\n", "\nkind: PriorityClass\nx: |\n  ---a\n"]
        );
        assert_eq!(split_documents(b"kind: Queue\n").len(), 1);
        assert_eq!(split_documents(b"{\"kind\": \"Queue\"}\n---\n").len(), 1);
        assert!(split_documents(b"---\n# only a comment\n").is_empty());
    }

    #[test]
    fn several_documents_where_one_belongs_name_no_library() {
        let e = decode_yaml::<serde_json::Value>(b"a: 1\n---\nb: 2\n").expect_err("two");
        let text = e.to_string();
        assert!(text.contains("apply -f"), "{text}");
        assert!(!text.contains("from_str"), "{text}");
    }

    #[test]
    fn a_document_that_is_not_an_object_is_refused_whole() {
        // serde's derive would read `[2]` as the first field of a struct: the body that
        // removed a voter. Every shape but a mapping is refused at the top, in both formats.
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Remove {
            id: u64,
        }
        for body in ["[2]", "2", "null", "\"x\"", "true", "[{\"id\":2}]"] {
            let err = decode_json::<Remove>(body.as_bytes()).unwrap_err();
            assert!(
                matches!(err, DecodeError::Invalid { .. }),
                "{body}: {err:?}"
            );
            assert_eq!(err.field(), "", "{body}: the document as a whole");
            assert!(err.reason().contains("expected an object"), "{body}: {err}");
        }
        for body in ["[2]\n", "- 2\n", "2\n", "x\n"] {
            let err = decode_yaml::<Remove>(body.as_bytes()).unwrap_err();
            assert!(
                err.reason().contains("expected an object"),
                "{body:?}: {err}"
            );
        }
        assert_eq!(decode_json::<Remove>(br#"{"id":2}"#).unwrap().id, 2);
        assert_eq!(decode_yaml::<Remove>(b"id: 2\n").unwrap().id, 2);
        // Nested paths and unknown fields are still named as before.
        let err = decode_json::<Remove>(br#"{"id":"two"}"#).unwrap_err();
        assert_eq!(err.field(), "id");
        assert!(decode_json::<Workload>(b"[]").is_err());
        assert!(decode_resource(b"[1, 2]", Some("application/json")).is_err());
    }

    fn yaml_with(from: &str, to: &str) -> String {
        assert!(LLAMA_YAML.contains(from), "{from}");
        LLAMA_YAML.replacen(from, to, 1)
    }

    #[test]
    fn malformed_json_is_a_syntax_error() {
        let err = decode_json::<Workload>(br#"{"apiVersion": "tideway.dev/v1alpha1", "kind": }"#)
            .unwrap_err();
        assert!(matches!(err, DecodeError::Syntax { .. }), "{err:?}");
        assert_eq!(err.field(), "kind");
        assert!(err.to_string().starts_with("malformed JSON"), "{err}");

        let truncated = &BENCH_JSON.as_bytes()[..60];
        let err = decode_json::<Workload>(truncated).unwrap_err();
        assert!(matches!(err, DecodeError::Syntax { .. }), "{err:?}");

        let err =
            decode_json::<Workload>(format!("{} {{}}", BENCH_JSON.trim()).as_bytes()).unwrap_err();
        assert!(
            matches!(err, DecodeError::Syntax { .. }),
            "trailing data: {err:?}"
        );

        assert_eq!(
            decode_json::<Workload>(b"  \n").unwrap_err(),
            DecodeError::Empty {
                format: Format::Json
            }
        );
    }

    #[test]
    fn malformed_yaml_is_a_syntax_error() {
        let err = decode_yaml::<Workload>(b"apiVersion: [unclosed\nkind: Workload\n").unwrap_err();
        assert!(matches!(err, DecodeError::Syntax { .. }), "{err:?}");
        assert!(err.to_string().starts_with("malformed YAML"), "{err}");
        assert!(matches!(
            decode_yaml::<Workload>(b"").unwrap_err(),
            DecodeError::Empty { .. }
        ));
        assert!(matches!(
            decode_yaml::<Workload>(b"# only a comment\n").unwrap_err(),
            DecodeError::Empty { .. }
        ));
    }

    #[test]
    fn unknown_field_is_named() {
        let json = bench_with(r#""queue":"default""#, r#""queue":"default","foo":1"#);
        let err = decode_json::<Workload>(json.as_bytes()).unwrap_err();
        assert!(matches!(err, DecodeError::Invalid { .. }), "{err:?}");
        assert_eq!(err.field(), "spec.foo", "{err}");
        assert!(err.reason().contains("unknown field `foo`"), "{err}");

        let yaml = yaml_with("  queue: default\n", "  queue: default\n  foo: 1\n");
        let err = decode_yaml::<Workload>(yaml.as_bytes()).unwrap_err();
        assert!(matches!(err, DecodeError::Invalid { .. }), "{err:?}");
        assert_eq!(err.field(), "spec.foo", "{err}");

        let yaml = yaml_with("gpusPerPod: 8,", "gpusPerPod: 8, gpu: 1,");
        let err = decode_yaml::<Workload>(yaml.as_bytes()).unwrap_err();
        assert_eq!(err.field(), "spec.podSets[0].gpu", "{err}");
    }

    #[test]
    fn wrong_type_is_named() {
        let json = bench_with(r#""count":1"#, r#""count":"two""#);
        let err = decode_json::<Workload>(json.as_bytes()).unwrap_err();
        assert!(matches!(err, DecodeError::Invalid { .. }), "{err:?}");
        assert_eq!(err.field(), "spec.podSets[0].count", "{err}");

        let yaml = yaml_with("count: 2", "count: two");
        let err = decode_yaml::<Workload>(yaml.as_bytes()).unwrap_err();
        assert!(matches!(err, DecodeError::Invalid { .. }), "{err:?}");
        assert_eq!(err.field(), "spec.podSets[0].count", "{err}");

        let yaml = yaml_with("class: training", "class: batch");
        let err = decode_yaml::<Workload>(yaml.as_bytes()).unwrap_err();
        assert_eq!(err.field(), "spec.class", "{err}");

        let yaml = yaml_with("{required: rack}", "{required: rack, preferred: zone}");
        let err = decode_yaml::<Workload>(yaml.as_bytes()).unwrap_err();
        assert_eq!(err.field(), "spec.topology", "{err}");
        assert!(err.reason().contains("exactly one"), "{err}");
    }

    #[test]
    fn negative_count_is_a_type_error_on_that_field() {
        let json = bench_with(r#""count":1"#, r#""count":-1"#);
        let err = decode_json::<Workload>(json.as_bytes()).unwrap_err();
        assert!(matches!(err, DecodeError::Invalid { .. }), "{err:?}");
        assert_eq!(err.field(), "spec.podSets[0].count", "{err}");
        assert!(err.reason().contains("-1"), "{err}");

        let yaml = yaml_with("count: 2", "count: -1");
        let err = decode_yaml::<Workload>(yaml.as_bytes()).unwrap_err();
        assert!(matches!(err, DecodeError::Invalid { .. }), "{err:?}");
        assert_eq!(err.field(), "spec.podSets[0].count", "{err}");
    }

    #[test]
    fn missing_field_is_named_at_its_parent() {
        let json = bench_with(r#""flavor":"H100""#, r#""cpu":"4""#);
        let err = decode_json::<Workload>(json.as_bytes()).unwrap_err();
        assert_eq!(err.field(), "spec.podSets[0]", "{err}");
        assert!(err.reason().contains("missing field `flavor`"), "{err}");
    }

    #[test]
    fn zero_gpus_decode_but_fail_validation_on_that_field() {
        let json = bench_with(r#""gpusPerPod":8"#, r#""gpusPerPod":0"#);
        let w: Workload = decode_json(json.as_bytes()).unwrap();
        let errs = w.validate().unwrap_err();
        assert_eq!(errs.len(), 1, "{errs}");
        assert!(errs.has_field("spec.podSets[0].gpusPerPod"), "{errs}");
    }

    #[test]
    fn multiple_errors_are_reported_at_once() {
        let yaml = LLAMA_YAML
            .replace("name: llama-ft-1", "name: Llama_FT")
            .replace("count: 2", "count: 0")
            .replace("gpusPerPod: 8", "gpusPerPod: 65")
            .replace("priorityClass: normal", "priorityClass: \"\"");
        let w: Workload = decode_yaml(yaml.as_bytes()).unwrap();
        let errs = w.validate().unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.priorityClass",
                "spec.podSets[0].count",
                "spec.podSets[0].gpusPerPod",
                "spec.gang.minCount",
            ],
            "{errs}"
        );
        let problem = crate::problem::Problem::from(errs);
        assert_eq!(problem.status, 400);
        assert_eq!(problem.errors.len(), 5);
    }

    #[test]
    fn decode_error_becomes_a_field_problem() {
        let json = bench_with(r#""count":1"#, r#""count":-1"#);
        let err = decode_json::<Workload>(json.as_bytes()).unwrap_err();
        let problem = crate::problem::Problem::from(err);
        assert_eq!(problem.status, 400);
        assert_eq!(problem.errors[0].field, "spec.podSets[0].count");
    }

    #[test]
    fn format_is_chosen_by_hint_then_by_sniffing() {
        assert_eq!(
            Format::from_content_type("application/json; charset=utf-8"),
            Some(Format::Json)
        );
        assert_eq!(
            Format::from_content_type("application/merge-patch+json"),
            Some(Format::Json)
        );
        assert_eq!(
            Format::from_content_type("application/x-yaml"),
            Some(Format::Yaml)
        );
        assert_eq!(Format::from_content_type("Text/YAML"), Some(Format::Yaml));
        assert_eq!(Format::from_content_type("text/plain"), None);
        assert_eq!(Format::sniff(b"\n  {\"a\":1}"), Format::Json);
        assert_eq!(Format::sniff(b"apiVersion: x"), Format::Yaml);

        let w1: Workload = decode_any(LLAMA_YAML.as_bytes(), None).unwrap();
        let w2: Workload = decode_any(LLAMA_YAML.as_bytes(), Some("text/plain")).unwrap();
        assert_eq!(w1, w2);
        let w3: Workload = decode_any(BENCH_JSON.as_bytes(), Some("application/json")).unwrap();
        // JSON is valid YAML flow syntax, so a YAML hint still decodes it.
        let w4: Workload = decode_any(BENCH_JSON.as_bytes(), Some("application/yaml")).unwrap();
        assert_eq!(w3, w4);
        let err = decode_any::<Workload>(b"{", Some("application/json")).unwrap_err();
        assert_eq!(err.format(), Format::Json);
    }

    #[test]
    fn every_testdata_file_decodes_by_kind_and_validates() {
        let files: [(&str, &str); 7] = [
            ("Workload", LLAMA_YAML),
            ("Workload", BENCH_JSON),
            ("Queue", include_str!("../testdata/queue.yaml")),
            (
                "PriorityClass",
                include_str!("../testdata/priority-class.yaml"),
            ),
            (
                "QuotaSchedule",
                include_str!("../testdata/quota-schedule.yaml"),
            ),
            (
                "MemberCluster",
                include_str!("../testdata/member-cluster.yaml"),
            ),
            ("Policy", include_str!("../testdata/policy.yaml")),
        ];
        for (kind, text) in files {
            let any = decode_resource(text.as_bytes(), None).unwrap();
            assert_eq!(any.kind(), kind);
            any.validate().unwrap();
            assert!(!any.metadata().name.is_empty());
            // Serializes as the inner resource, so it decodes back by kind.
            let json = serde_json::to_vec(&any).unwrap();
            assert_eq!(
                decode_resource(&json, Some("application/json")).unwrap(),
                any
            );
        }
    }

    #[test]
    fn unknown_kind_is_named() {
        let err =
            decode_resource(b"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", None).unwrap_err();
        assert_eq!(err.field(), "kind");
        assert!(err.reason().contains("Workload"), "{err}");
        let err = decode_resource(b"{\"metadata\":{}}", None).unwrap_err();
        assert!(err.reason().contains("missing field"), "{err}");
    }

    #[test]
    fn yaml_alias_bombs_are_refused() {
        let mut doc = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            doc.push_str(&format!(
                "{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n",
                c = (b'a' + i) as char,
                p = (b'a' + i - 1) as char
            ));
        }
        assert!(decode_yaml::<serde_json::Value>(doc.as_bytes()).is_err());
    }

    #[test]
    fn duplicate_keys_are_rejected_at_their_parent() {
        let yaml = yaml_with("  queue: default\n", "  queue: default\n  queue: other\n");
        let err = decode_yaml::<Workload>(yaml.as_bytes()).unwrap_err();
        assert_eq!(err.field(), "spec", "{err}");
        assert!(
            err.reason().contains("duplicate mapping key: queue"),
            "{err}"
        );
        assert!(!err.reason().contains("Options"), "{err}");
    }

    #[test]
    fn template_is_kept_opaque() {
        let yaml = format!(
            "{LLAMA_YAML}  template:\n    spec:\n      containers:\n      - {{name: main, image: \"llama:1\", env: [{{name: A, value: \"1\"}}]}}\n"
        );
        let w: Workload = decode_yaml(yaml.as_bytes()).unwrap();
        w.validate().unwrap();
        assert_eq!(
            w.spec.template.as_ref().unwrap()["spec"]["containers"][0]["env"][0]["value"],
            "1"
        );
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_any::<Workload>(&bytes, None);
            let _ = decode_yaml::<Workload>(&bytes);
            let _ = decode_json::<Workload>(&bytes);
            let _ = decode_resource(&bytes, None);
        }

        #[test]
        fn corrupted_documents_fail_cleanly(
            cut in 0usize..400,
            junk in "[\\[\\]{}:,\"a-z0-9 -]{0,6}",
        ) {
            // Splicing junk into a valid document must give an error or a document, never a
            // panic, and any error must come with a reason.
            for base in [
                include_str!("../testdata/workload-llama-ft.yaml"),
                include_str!("../testdata/workload-bench.json"),
            ] {
                let at = cut.min(base.len());
                let at = (0..=at).rev().find(|&i| base.is_char_boundary(i)).unwrap_or(0);
                let doc = format!("{}{junk}{}", &base[..at], &base[at..]);
                if let Err(e) = decode_resource(doc.as_bytes(), None) {
                    prop_assert!(!e.reason().is_empty());
                }
            }
        }
    }
}
