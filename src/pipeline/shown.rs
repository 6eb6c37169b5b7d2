//! A record as JSON, exactly as it would go to the producer (after the checks, the
//! poison policy and the converters): `replay --dry-run`'s lines and `tail`'s
//! `record` field, `{"table", "topic", "key", "headers": {name: value…},
//! "timestamp", "value"}`.
//!
//! Like `tail`'s JSON lines, a value that is JSON is embedded verbatim and anything
//! else becomes a JSON string, so every line is valid JSON; `key` is the bytes the
//! partitioner hashes (murmur2), as text; a null key or header value is `null`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::outbox::record::KafkaRecord;
use crate::pg::timestamp::{from_unix_micros, to_rfc3339};

/// A value embedded as JSON when it is JSON, else as a string.
#[derive(Serialize)]
#[serde(untagged)]
enum Value<'a> {
    Json(&'a RawValue),
    Text(std::borrow::Cow<'a, str>),
}

/// A record as JSON, exactly as it goes to the producer.
#[derive(Serialize)]
pub struct RecordLine<'a> {
    table: &'a str,
    topic: &'a str,
    key: Option<std::borrow::Cow<'a, str>>,
    headers: BTreeMap<&'a str, Option<std::borrow::Cow<'a, str>>>,
    timestamp: String,
    value: Option<Value<'a>>,
}

fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

fn value(bytes: &[u8]) -> Value<'_> {
    match std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| serde_json::from_str::<&RawValue>(s).ok())
    {
        Some(json) => Value::Json(json),
        None => Value::Text(text(bytes)),
    }
}

impl<'a> RecordLine<'a> {
    /// `record` of `table`; headers in the order the producer sends them (`id`,
    /// the placed columns, then the rest).
    pub fn new(table: &'a str, record: &'a KafkaRecord) -> Self {
        let mut headers = BTreeMap::new();
        headers.insert("id", record.id.as_deref().map(text));
        for (name, v) in &record.placed {
            headers.insert(&**name, v.as_deref().map(text));
        }
        for (name, v) in &record.headers {
            headers.insert(*name, Some(text(v)));
        }
        RecordLine {
            table,
            topic: &record.topic,
            key: record.key.as_deref().map(text),
            headers,
            timestamp: to_rfc3339(from_unix_micros(record.timestamp_ms.saturating_mul(1000))),
            value: record.value.as_deref().map(value),
        }
    }
}
