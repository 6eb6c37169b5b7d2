//! Kafka Connect record format: what a Debezium connector's converters and the
//! Outbox Event Router's placement/expansion options make of an outbox row, byte
//! for byte, so consumers cannot tell pgoutbox from the connector it replaces.
//!
//! ```text
//!  OutboxEvent ─► KafkaRecord (raw text: key, payload)        outbox::record
//!             ─► headers from header placements (names = aliases)  ResolvedMapping::headers
//!             ─► RecordFormat::encode:
//!                  key   = key converter(key column)
//!                  value = value converter(payload | {payload, envelope fields},
//!                                          payload expanded when asked)
//! ```
//!
//! - `placement`: `column:header|envelope[:alias]`;
//! - `schema`: a column's Connect schema (type, `optional` from `NOT NULL`);
//! - `jackson`: JSON text as Jackson writes it (escapes, surrogates, doubles);
//! - `expand`: `table.expand.json.payload`, schema inference from the JSON;
//! - `cache`: the envelope schema Debezium reuses per payload schema.
//!
//! The converters (`string`, `json`, `json-schemas`) are Connect's StringConverter,
//! JsonConverter with `schemas.enable=false` and with `schemas.enable=true`; header
//! values are always the column's text, as the Connect worker's default
//! `header.converter` (SimpleHeaderConverter) writes a string. The golden records
//! these rules were read from are in `tests/fixtures/debezium/` (generator:
//! `tools/debezium-golden/`).
//!
//! Invariants: encoding never fails and never panics; with the default format
//! (`string`/`string`, no envelope, no expansion) key and value are left untouched.

mod cache;
mod expand;
mod jackson;
mod placement;
mod schema;

pub use cache::EnvelopeCache;
pub use placement::{Place, Placement, PlacementError};
pub use schema::{ColumnSchema, ColumnType};

use bytes::Bytes;

use crate::outbox::event::{OutboxEvent, ResolvedMapping, ResolvedPlacement};
use crate::outbox::record::KafkaRecord;

use self::expand::Expanded;

/// A Kafka Connect converter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Converter {
    /// `StringConverter`: the text as UTF-8 (a null stays null).
    #[default]
    String,
    /// `JsonConverter` with `schemas.enable=false`: a JSON value (a null is `null`).
    Json,
    /// `JsonConverter` with `schemas.enable=true`: `{"schema":…,"payload":…}`.
    JsonSchemas,
}

impl Converter {
    /// The name used by `--key-converter` / `--value-converter`.
    pub fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Json => "json",
            Self::JsonSchemas => "json-schemas",
        }
    }
}

/// How key and value are serialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFormat {
    /// Key converter.
    pub key: Converter,
    /// Value converter.
    pub value: Converter,
    /// Debezium's `table.expand.json.payload`.
    pub expand_json: bool,
    /// Debezium's `topic.prefix`: names the envelope schema
    /// `<logical_name>.<schema>.<table>.<route>.Value`.
    pub logical_name: String,
}

impl Default for RecordFormat {
    fn default() -> Self {
        Self {
            key: Converter::String,
            value: Converter::String,
            expand_json: false,
            logical_name: "pgoutbox".to_owned(),
        }
    }
}

impl RecordFormat {
    /// Whether a converter writes Connect schemas (which need `NOT NULL` facts).
    pub fn writes_schemas(&self) -> bool {
        self.key == Converter::JsonSchemas || self.value == Converter::JsonSchemas
    }

    /// Serialise the record's key and value (raw text on entry) for `event`.
    pub fn encode(&self, record: &mut KafkaRecord, event: &OutboxEvent, mapping: &ResolvedMapping) {
        if self.key != Converter::String {
            record.key = Some(self.key_bytes(record.key.as_deref(), mapping.key_schema));
        }
        let envelope: Vec<(&ResolvedPlacement, Option<&[u8]>)> = mapping
            .placed
            .iter()
            .zip(&event.placed)
            .filter(|(p, _)| p.place == Place::Envelope)
            .map(|(p, v)| (p, v.as_deref()))
            .collect();
        if self.value == Converter::String && envelope.is_empty() && !self.expand_json {
            return;
        }
        let payload = record.value.take();
        let expanded = match self.expand_json {
            true => payload.as_deref().and_then(expand::expand),
            false => None,
        };
        let value = Value {
            payload: payload.as_deref(),
            schema: mapping.payload_schema,
            expanded: expanded.as_ref(),
            envelope: &envelope,
        };
        record.value = match self.value {
            Converter::String => value.display(),
            Converter::Json => Some(Bytes::from(value.json())),
            Converter::JsonSchemas => {
                let envelope = Envelope {
                    cache: &mapping.envelope_cache,
                    name: || self.envelope_name(event, mapping),
                };
                Some(Bytes::from(value.json_with_schema(envelope)))
            }
        };
    }

    fn key_bytes(&self, key: Option<&[u8]>, schema: ColumnSchema) -> Bytes {
        let mut out = Vec::with_capacity(key.map_or(4, |k| k.len() + 2));
        if self.key == Converter::JsonSchemas {
            out.extend_from_slice(b"{\"schema\":");
            schema.push_json(&mut out, None);
            out.extend_from_slice(b",\"payload\":");
        }
        push_scalar(&mut out, key, schema.kind);
        if self.key == Converter::JsonSchemas {
            out.push(b'}');
        }
        Bytes::from(out)
    }

    /// The envelope's schema name for `event`, e.g. `shop.public.outbox.order.Value`
    /// (used for the first record of a payload schema only: see [`EnvelopeCache`]).
    fn envelope_name(&self, event: &OutboxEvent, mapping: &ResolvedMapping) -> String {
        let route = String::from_utf8_lossy(event.route_value.as_deref().unwrap_or_default());
        format!("{}.{}.{route}.Value", self.logical_name, mapping.table)
    }
}

/// A column value as a JSON scalar: numbers as their text, everything else a
/// string, NULL as `null`.
fn push_scalar(out: &mut Vec<u8>, value: Option<&[u8]>, kind: ColumnType) {
    match value {
        None => out.extend_from_slice(b"null"),
        Some(v) if kind.is_number() => out.extend_from_slice(v),
        Some(v) => jackson::push_string(out, v),
    }
}

/// Where an envelope's schema comes from: the session's cache, or a new one named
/// by `name`.
struct Envelope<'a, F> {
    cache: &'a EnvelopeCache,
    name: F,
}

/// The parts of a record value.
struct Value<'a> {
    payload: Option<&'a [u8]>,
    schema: ColumnSchema,
    expanded: Option<&'a Expanded>,
    envelope: &'a [(&'a ResolvedPlacement, Option<&'a [u8]>)],
}

impl Value<'_> {
    /// StringConverter: the payload text, or Connect's `Struct{…}` text (fields
    /// with a null value left out) for an envelope or an expanded payload.
    fn display(&self) -> Option<Bytes> {
        if self.envelope.is_empty() {
            return match self.expanded {
                Some(e) => {
                    let mut out = Vec::new();
                    e.push_display(&mut out);
                    Some(Bytes::from(out))
                }
                None => self.payload.map(Bytes::copy_from_slice),
            };
        }
        let mut out = b"Struct{".to_vec();
        let mut first = true;
        let mut field = |out: &mut Vec<u8>, name: &[u8]| {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(name);
            out.push(b'=');
        };
        if let Some(payload) = self.payload {
            field(&mut out, b"payload");
            match self.expanded {
                Some(e) => e.push_display(&mut out),
                None => out.extend_from_slice(payload),
            }
        }
        for (p, v) in self.envelope {
            if let Some(v) = v {
                field(&mut out, p.alias.as_bytes());
                out.extend_from_slice(v);
            }
        }
        out.push(b'}');
        Some(Bytes::from(out))
    }

    /// JsonConverter without schemas.
    fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.payload.map_or(16, |p| p.len() + 64));
        self.push_json(&mut out);
        out
    }

    fn push_json(&self, out: &mut Vec<u8>) {
        if self.envelope.is_empty() {
            return self.push_payload(out);
        }
        out.extend_from_slice(b"{\"payload\":");
        self.push_payload(out);
        for (p, v) in self.envelope {
            out.push(b',');
            jackson::push_string(out, p.alias.as_bytes());
            out.push(b':');
            push_scalar(out, *v, p.schema.kind);
        }
        out.push(b'}');
    }

    fn push_payload(&self, out: &mut Vec<u8>) {
        match self.expanded {
            Some(e) => e.push_json(out),
            None => push_scalar(out, self.payload, self.schema.kind),
        }
    }

    /// JsonConverter with schemas; an envelope's schema comes from `envelope`.
    fn json_with_schema(&self, envelope: Envelope<'_, impl FnOnce() -> String>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.payload.map_or(128, |p| p.len() + 256));
        out.extend_from_slice(b"{\"schema\":");
        if self.envelope.is_empty() {
            self.push_payload_schema(&mut out, None);
        } else {
            let mut payload = Vec::new();
            self.push_payload_schema(&mut payload, Some("payload"));
            let schema = envelope.cache.get_or_build(&payload, || {
                let mut s = b"{\"type\":\"struct\",\"fields\":[".to_vec();
                s.extend_from_slice(&payload);
                for (p, _) in self.envelope {
                    s.push(b',');
                    p.schema.push_json(&mut s, Some(&p.alias));
                }
                s.extend_from_slice(b"],\"optional\":false,\"name\":");
                jackson::push_string(&mut s, (envelope.name)().as_bytes());
                s.push(b'}');
                s
            });
            out.extend_from_slice(&schema);
        }
        out.extend_from_slice(b",\"payload\":");
        self.push_json(&mut out);
        out.push(b'}');
        out
    }

    fn push_payload_schema(&self, out: &mut Vec<u8>, field: Option<&str>) {
        match self.expanded {
            Some(e) => e.push_schema(out, field),
            None => self.schema.push_json(out, field),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::event::ColumnMapping;
    use crate::outbox::routing::TopicTemplate;
    use crate::pg::source::pgoutput::{ColumnValue, Relation, TupleData};

    /// The record pgoutbox sends for one text row under `format` and `placements`.
    fn encoded(format: &RecordFormat, placements: &[&str], key: Option<&str>) -> KafkaRecord {
        let columns = [
            "id",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "payload",
        ];
        let relation = Relation::text_columns(1, "outbox", &columns);
        let mapping = ColumnMapping {
            placements: Some(
                placements
                    .iter()
                    .map(|p| Placement::parse(p).unwrap())
                    .collect(),
            ),
            ..ColumnMapping::default()
        }
        .resolve(&relation)
        .unwrap();
        let t = |s: &str| ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()));
        let key = key.map_or(ColumnValue::Null, t);
        let tuple = TupleData(vec![t("e1"), t("order"), key, t("Created"), t("{\"a\":1}")]);
        let event = mapping.event(&tuple);
        let mut record = KafkaRecord::from_event(&event, &TopicTemplate::default(), 0);
        record.placed = mapping.headers(&event);
        format.encode(&mut record, &event, &mapping);
        record
    }

    #[test]
    fn the_default_format_leaves_key_and_value_as_stored() {
        let r = encoded(
            &RecordFormat::default(),
            &["event_type:header:eventType"],
            Some("42"),
        );
        assert_eq!(r.key.as_deref(), Some(&b"42"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(&*r.placed[0].0, "eventType");
    }

    #[test]
    fn json_converter_quotes_and_writes_null_as_null() {
        let json = RecordFormat {
            key: Converter::Json,
            value: Converter::Json,
            ..RecordFormat::default()
        };
        let r = encoded(&json, &["aggregate_type:envelope:type"], None);
        assert_eq!(r.key.as_deref(), Some(&b"null"[..]));
        assert_eq!(
            r.value.as_deref(),
            Some(&br#"{"payload":"{\"a\":1}","type":"order"}"#[..])
        );
        assert!(r.placed.is_empty(), "an envelope field is no header");
    }
}
