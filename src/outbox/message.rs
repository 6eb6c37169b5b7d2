//! Logical decoding messages as outbox events: the content of a
//! `pg_logical_emit_message(true, 'pgoutbox', content)` → a virtual outbox row.
//!
//! Owns the message contract and its one rule for the column mapping: the content
//! is a UTF-8 JSON object whose **field names are the mapped column names** (with
//! the defaults `id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`,
//! optional `created_at`), so `--id-column`, `--key-column`
//! (`--table.field.event.key`), `--payload-column`, `--placement`, `--trace-context`
//! … mean the same for a message as for a row. One field name is the message's own:
//! `headers`, an object of string values that become Kafka headers (e.g.
//! `traceparent`). A message becomes a [`MessageRow`]: a relation whose columns
//! are the object's fields and a tuple of their values, so the relay maps it with
//! the very [`ColumnMapping`] and record path of a table row.
//!
//! Values as a row would carry them: a JSON string is the column's text, `null` is
//! SQL NULL, any other value is its JSON text; the payload field is always JSON (a
//! string payload is the JSON string `"…"`, as in a `jsonb` column).
//!
//! Invariants: parsing never panics, whatever the bytes; every way a content can
//! fail the contract is a [`MessageError`] saying what is wrong (it becomes a
//! `bad-message` poison event); required fields are those the mapping requires of
//! a table (id, route-by, key, payload, placements, trace context).

use std::sync::Arc;

use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::outbox::event::{ColumnMapping, MissingColumn, ResolvedMapping};
use crate::pg::source::pgoutput::{
    ColumnValue, Relation, RelationColumn, ReplicaIdentity, TupleData,
};

/// The field of a message that carries its Kafka headers.
pub const HEADERS_FIELD: &str = "headers";

/// The default message prefix.
pub const DEFAULT_PREFIX: &str = "pgoutbox";

/// The prefix of the relay's own heartbeat messages: never an outbox event.
pub const HEARTBEAT_PREFIX: &str = "pgoutbox-heartbeat";

/// Schema name of the virtual relation (envelope schema names, dead-letter origin).
pub const MESSAGE_NAMESPACE: &str = "message";

const TEXT_OID: u32 = 25;
const JSONB_OID: u32 = 3802;

/// Why a message's content is not an outbox event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Not UTF-8.
    #[error("content is not UTF-8 (invalid byte at offset {0})")]
    NotUtf8(usize),
    /// Not one JSON value.
    #[error("content is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not an object.
    #[error("content is a JSON {0}, not an object with the outbox fields")]
    NotObject(&'static str),
    /// `headers` is not an object.
    #[error("field \"headers\" is a JSON {0}, not an object of string values")]
    HeadersNotObject(&'static str),
    /// A header value that is not a string.
    #[error("header {name:?} is a JSON {kind}, not a string")]
    HeaderNotString {
        /// The header name.
        name: String,
        /// What the value is.
        kind: &'static str,
    },
    /// A field the mapping requires is absent.
    #[error("no field {field:?} (mapped as {role}); fields are: {available}")]
    MissingField {
        /// The field (mapped column name).
        field: String,
        /// What it is mapped as.
        role: &'static str,
        /// The fields the message has.
        available: String,
    },
}

/// One message's content as a virtual outbox row (borrowing field names from the
/// content). Fields come in name order (serde_json's map), so a producer's field
/// order never changes the mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRow<'a> {
    /// The message's prefix (names the virtual relation).
    prefix: &'a str,
    /// Field names (`headers` excluded), in name order: the relation's columns.
    names: Vec<Cow<'a, str>>,
    /// Position of the payload field in `names`.
    payload: Option<usize>,
    /// Their values in PostgreSQL text form.
    pub tuple: TupleData,
    /// The `headers` object's entries, in order.
    pub headers: Vec<(Arc<str>, Bytes)>,
}

impl<'a> MessageRow<'a> {
    /// Parse `content` of a message with `prefix`; `payload` is the mapped payload
    /// field (its value is always JSON text). Values are slices of `content` where
    /// the JSON text is the value (no copy); only a string with escapes is copied.
    /// One pass over the JSON on the happy path.
    pub fn parse(content: &'a Bytes, prefix: &'a str, payload: &str) -> Result<Self, MessageError> {
        let text =
            std::str::from_utf8(content).map_err(|e| MessageError::NotUtf8(e.valid_up_to()))?;
        let fields = object(text)?;
        let slice = |raw: &str| content.slice_ref(raw.as_bytes());
        let mut row = MessageRow {
            prefix,
            names: Vec::with_capacity(fields.len()),
            payload: None,
            tuple: TupleData(Vec::with_capacity(fields.len())),
            headers: Vec::new(),
        };
        for (name, raw) in fields {
            if name == HEADERS_FIELD {
                row.headers = parse_headers(raw.get(), &slice)?;
                continue;
            }
            let json = name == payload;
            if json {
                row.payload = Some(row.names.len());
            }
            row.tuple.0.push(column_value(raw.get(), json, &slice));
            row.names.push(name);
        }
        Ok(row)
    }

    /// The field names, for a cache of resolved mappings.
    pub fn field_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| n.as_ref())
    }

    /// The virtual relation: namespace `message`, named after the prefix, a column
    /// per field (`jsonb` for the payload, `text` for the others).
    pub fn relation(&self) -> Relation {
        let columns = self
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| RelationColumn {
                flags: 0,
                name: name.to_string(),
                type_oid: if self.payload == Some(i) {
                    JSONB_OID
                } else {
                    TEXT_OID
                },
                type_modifier: -1,
            });
        Relation {
            xid: None,
            id: 0,
            namespace: MESSAGE_NAMESPACE.into(),
            name: self.prefix.into(),
            replica_identity: ReplicaIdentity::Default,
            columns: columns.collect(),
        }
    }

    /// Resolve `mapping` against this message's fields.
    pub fn resolve(&self, mapping: &ColumnMapping) -> Result<ResolvedMapping, MessageError> {
        mapping.resolve(&self.relation()).map_err(missing_field)
    }
}

/// The fields of the JSON object `text`, keys borrowed unless escaped; otherwise
/// why it is not one (not JSON at all, or another JSON value).
fn object(text: &str) -> Result<BTreeMap<Cow<'_, str>, &RawValue>, MessageError> {
    if let Ok(fields) = serde_json::from_str::<BTreeMap<&str, &RawValue>>(text) {
        return Ok(fields
            .into_iter()
            .map(|(k, v)| (Cow::Borrowed(k), v))
            .collect());
    }
    match serde_json::from_str::<BTreeMap<String, &RawValue>>(text) {
        Ok(fields) => Ok(fields
            .into_iter()
            .map(|(k, v)| (Cow::Owned(k), v))
            .collect()),
        Err(_) => match serde_json::from_str::<&RawValue>(text) {
            Ok(value) => Err(MessageError::NotObject(raw_kind(value.get()))),
            Err(e) => Err(MessageError::NotJson(e.to_string())),
        },
    }
}

fn missing_field(missing: MissingColumn) -> MessageError {
    MessageError::MissingField {
        field: missing.column,
        role: missing.role,
        available: if missing.available.is_empty() {
            "none".into()
        } else {
            missing.available
        },
    }
}

/// A field's value: `null` → NULL, a string (unless `json`) → its text, anything
/// else → its JSON text as written. `raw` is valid JSON (serde checked it).
fn column_value(raw: &str, json: bool, slice: &impl Fn(&str) -> Bytes) -> ColumnValue {
    match raw.as_bytes().first() {
        Some(b'n') => ColumnValue::Null,
        Some(b'"') if !json => ColumnValue::Text(string(raw, slice).unwrap_or_default()),
        _ => ColumnValue::Text(slice(raw)),
    }
}

/// The text of the JSON string `raw` (`None`: not a string): a slice of the
/// content, or a copy when it has escapes.
fn string(raw: &str, slice: &impl Fn(&str) -> Bytes) -> Option<Bytes> {
    if !raw.starts_with('"') {
        return None;
    }
    match serde_json::from_str::<&str>(raw) {
        Ok(s) => Some(slice(s)),
        Err(_) => serde_json::from_str::<String>(raw).ok().map(Bytes::from),
    }
}

fn parse_headers(
    raw: &str,
    slice: &impl Fn(&str) -> Bytes,
) -> Result<Vec<(Arc<str>, Bytes)>, MessageError> {
    let map: BTreeMap<Cow<'_, str>, &RawValue> =
        serde_json::from_str(raw).map_err(|_| MessageError::HeadersNotObject(raw_kind(raw)))?;
    map.into_iter()
        .map(|(name, value)| match string(value.get(), slice) {
            Some(text) => Ok((Arc::from(name.as_ref()), text)),
            None => Err(MessageError::HeaderNotString {
                name: name.into_owned(),
                kind: raw_kind(value.get()),
            }),
        })
        .collect()
}

/// What the valid JSON text `raw` is, from its first byte.
fn raw_kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'n') => "null",
        Some(b't' | b'f') => "boolean",
        Some(b'"') => "string",
        Some(b'[') => "array",
        Some(b'{') => "object",
        _ => "number",
    }
}

/// What a JSON value is, for error messages (`object`, `array`, `string`, …).
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse a test's content (kept for the test's lifetime: rows borrow it).
    fn parse(content: &'static str) -> Result<MessageRow<'static>, MessageError> {
        let content: &'static Bytes = Box::leak(Box::new(Bytes::from_static(content.as_bytes())));
        MessageRow::parse(content, "pgoutbox", "payload")
    }

    #[test]
    fn an_object_maps_like_a_row_with_the_default_mapping() {
        let row = parse(
            r#"{"id":"e1","aggregate_type":"order","aggregate_id":"42","event_type":"created",
                "payload":{"total":3},"created_at":"2026-11-29T13:09:37.5+00:00",
                "headers":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}"#,
        )
        .unwrap();
        let mapping = row.resolve(&ColumnMapping::default()).unwrap();
        let event = mapping.event(&row.tuple);
        assert_eq!(event.id.as_deref(), Some(&b"e1"[..]));
        assert_eq!(event.route_value.as_deref(), Some(&b"order"[..]));
        assert_eq!(event.key.as_deref(), Some(&b"42"[..]));
        assert_eq!(event.event_type.as_deref(), Some(&b"created"[..]));
        assert_eq!(event.payload.as_deref(), Some(&br#"{"total":3}"#[..]));
        assert!(!mapping.payload_unchecked());
        let stamp = crate::outbox::record::RecordTimestamp::Column;
        assert_eq!(
            stamp.millis(event.timestamp.as_deref(), 0),
            1_795_957_777_500
        );
        assert_eq!(row.headers.len(), 1);
        assert_eq!(&*row.headers[0].0, "traceparent");
        assert_eq!(row.relation().namespace, "message");
        assert_eq!(row.relation().name, "pgoutbox");
    }

    #[test]
    fn values_are_text_null_or_json_and_the_payload_always_json() {
        let row =
            parse(r#"{"id":7,"aggregate_type":"o","aggregate_id":null,"payload":"hi"}"#).unwrap();
        let event = row
            .resolve(&ColumnMapping::default())
            .unwrap()
            .event(&row.tuple);
        assert_eq!(event.id.as_deref(), Some(&b"7"[..]));
        assert_eq!(event.key, None);
        assert_eq!(event.payload.as_deref(), Some(&b"\"hi\""[..]));
        assert_eq!(event.event_type, None);
        assert_eq!(event.timestamp, None);
        let row =
            parse(r#"{"id":"1","aggregate_type":"o","aggregate_id":"k","payload":null}"#).unwrap();
        let event = row
            .resolve(&ColumnMapping::default())
            .unwrap()
            .event(&row.tuple);
        assert_eq!(event.payload, None);
    }

    #[test]
    fn field_names_follow_the_column_mapping() {
        let mapping = ColumnMapping {
            key: "order_id".into(),
            payload: "body".into(),
            ..ColumnMapping::default()
        };
        let content = br#"{"id":"1","aggregate_type":"o","order_id":"9","body":"x"}"#;
        let content = Bytes::from_static(content);
        let row = MessageRow::parse(&content, "p", "body").unwrap();
        let event = row.resolve(&mapping).unwrap().event(&row.tuple);
        assert_eq!(event.key.as_deref(), Some(&b"9"[..]));
        assert_eq!(event.payload.as_deref(), Some(&b"\"x\""[..]));
        // The default names no longer count: aggregate_id is not the key field.
        let content =
            Bytes::from_static(br#"{"id":"1","aggregate_type":"o","aggregate_id":"9","body":1}"#);
        let row = MessageRow::parse(&content, "p", "body").unwrap();
        let err = row.resolve(&mapping).unwrap_err().to_string();
        assert_eq!(
            err,
            "no field \"order_id\" (mapped as key); fields are: aggregate_id, aggregate_type, body, id"
        );
    }

    #[test]
    fn every_broken_content_says_what_is_wrong() {
        let bad = |content: &[u8]| {
            let content = Bytes::copy_from_slice(content);
            MessageRow::parse(&content, "pgoutbox", "payload")
                .and_then(|row| row.resolve(&ColumnMapping::default()))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            bad(b"{\"id\":\"\xff\"}"),
            "content is not UTF-8 (invalid byte at offset 7)"
        );
        assert!(
            bad(b"{\"id\":").starts_with("content is not JSON: EOF"),
            "{}",
            bad(b"{\"id\":")
        );
        assert!(bad(b"").starts_with("content is not JSON"));
        assert_eq!(
            bad(b"[1,2]"),
            "content is a JSON array, not an object with the outbox fields"
        );
        assert_eq!(
            bad(b"\"x\""),
            "content is a JSON string, not an object with the outbox fields"
        );
        assert_eq!(
            bad(b"{}"),
            "no field \"payload\" (mapped as payload); fields are: none"
        );
        assert_eq!(
            bad(br#"{"id":"1","aggregate_type":"o","aggregate_id":"k","payload":1,"headers":[]}"#),
            "field \"headers\" is a JSON array, not an object of string values"
        );
        assert_eq!(
            bad(br#"{"id":"1","aggregate_type":"o","aggregate_id":"k","payload":1,"headers":{"n":1}}"#),
            "header \"n\" is a JSON number, not a string"
        );
        assert_eq!(
            bad(br#"{"aggregate_type":"o","aggregate_id":"k","payload":1}"#),
            "no field \"id\" (mapped as id); fields are: aggregate_id, aggregate_type, payload"
        );
    }

    #[test]
    fn values_are_slices_of_the_content_and_escapes_are_decoded() {
        let content = Bytes::from_static(
            br#" {"id":"e\u0031","aggregate_type":"o","aggregate_id":"k","payload": {"a": [1, 2]},"headers":{"h":"v\n"}} "#,
        );
        let row = MessageRow::parse(&content, "pgoutbox", "payload").unwrap();
        let event = row
            .resolve(&ColumnMapping::default())
            .unwrap()
            .event(&row.tuple);
        assert_eq!(event.id.as_deref(), Some(&b"e1"[..]));
        // The payload is the JSON text as written (a jsonb column's text, from the
        // helper), sliced out of the message without a copy.
        let payload = event.payload.unwrap();
        assert_eq!(&payload[..], br#"{"a": [1, 2]}"#);
        let range = content.as_ptr() as usize..content.as_ptr() as usize + content.len();
        assert!(range.contains(&(payload.as_ptr() as usize)));
        assert_eq!(&row.headers[0].1[..], b"v\n");
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        for content in [
            &b"\0"[..],
            b"{\"a\":{\"b\":[",
            b"{\"headers\":null}",
            b"1e999",
            b"nul",
        ] {
            let content = Bytes::from_static(content);
            let _ = MessageRow::parse(&content, "x", "payload");
        }
    }
}
