//! Poison rows: outbox rows that cannot become the record the contract promises,
//! and what the relay does with each (`--on-invalid`).
//!
//! Owns the list of causes, the per-cause policy (`fail`, `dlq`, `skip`), the checks
//! that find a cause on a built record, and the dead-letter record. The pipeline
//! owns the actions and their LSN accounting.
//!
//! Causes:
//! - `null-key`: the key column is NULL or empty (no partition, no per-key order);
//! - `invalid-topic`: the routing value renders an illegal Kafka topic name;
//! - `too-large`: the producer or the broker refuses the record's size;
//! - `invalid-json`: the payload column is not `json`/`jsonb` and its text is not
//!   one JSON value (also catches invalid UTF-8);
//! - `missing-column`: the outbox table no longer has a mapped column (renamed or
//!   dropped) — the row cannot be mapped at all.
//!
//! Invariants: the default for every cause is `fail`, so nothing is dropped unless
//! the operator said so; a dead-letter record carries the row's bytes unchanged
//! (except a `too-large` payload, which is omitted and said so in a header) plus the
//! cause and reason in headers; checks never panic and never allocate on a valid row.

use bytes::Bytes;

use crate::outbox::json;
use crate::outbox::record::KafkaRecord;
use crate::pg::pgoutput::{ColumnValue, TupleData};

/// Why a row cannot be relayed as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Key column NULL or empty.
    NullKey,
    /// Routing value yields an illegal topic name.
    InvalidTopic,
    /// Record larger than the producer or broker accepts.
    TooLarge,
    /// Text payload that is not JSON.
    InvalidJson,
    /// A mapped column is missing from the table.
    MissingColumn,
}

impl Cause {
    /// Every cause, in the order of [`Cause::index`].
    pub const ALL: [Cause; 5] = [
        Cause::NullKey,
        Cause::InvalidTopic,
        Cause::TooLarge,
        Cause::InvalidJson,
        Cause::MissingColumn,
    ];

    /// The name used in `--on-invalid`, headers, logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Cause::NullKey => "null-key",
            Cause::InvalidTopic => "invalid-topic",
            Cause::TooLarge => "too-large",
            Cause::InvalidJson => "invalid-json",
            Cause::MissingColumn => "missing-column",
        }
    }

    /// Position in [`Cause::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    fn parse(name: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// What to do with a row of one cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Action {
    /// Stop the relay without confirming past the row (the default).
    #[default]
    Fail,
    /// Write the row to the dead-letter topic; the LSN moves on once it is acked.
    Dlq,
    /// Log, count and move on.
    Skip,
}

impl Action {
    /// The name used in `--on-invalid` and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Action::Fail => "fail",
            Action::Dlq => "dlq",
            Action::Skip => "skip",
        }
    }

    fn parse(name: &str) -> Option<Action> {
        [Action::Fail, Action::Dlq, Action::Skip]
            .into_iter()
            .find(|a| a.name() == name)
    }
}

/// The policy of every cause, plus where dead letters go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPolicy {
    actions: [Action; 5],
    /// The dead-letter topic.
    pub dlq_topic: String,
}

impl Default for InvalidPolicy {
    fn default() -> Self {
        Self {
            actions: [Action::Fail; 5],
            dlq_topic: DEFAULT_DLQ_TOPIC.to_owned(),
        }
    }
}

/// Where dead letters go unless `--dlq-topic` says otherwise.
pub const DEFAULT_DLQ_TOPIC: &str = "pgoutbox.dlq";

/// A bad `--on-invalid` or `--dlq-topic` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(String);

impl InvalidPolicy {
    /// Build from `--on-invalid` values, applied in order: `POLICY` sets every
    /// cause, `CAUSE=POLICY` one cause.
    pub fn parse(specs: &[String], dlq_topic: &str) -> Result<Self, PolicyError> {
        let causes = || {
            Cause::ALL
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let action = |s: &str| {
            Action::parse(s.trim()).ok_or_else(|| {
                PolicyError(format!(
                    "--on-invalid: unknown policy {s:?}; expected fail, dlq or skip"
                ))
            })
        };
        let mut policy = InvalidPolicy {
            dlq_topic: dlq_topic.trim().to_owned(),
            ..InvalidPolicy::default()
        };
        for spec in specs.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            match spec.split_once('=') {
                None => policy.actions = [action(spec)?; 5],
                Some((cause, value)) => {
                    let cause = Cause::parse(cause.trim()).ok_or_else(|| {
                        PolicyError(format!(
                            "--on-invalid: unknown cause {:?}; causes are: {}",
                            cause.trim(),
                            causes()
                        ))
                    })?;
                    policy.actions[cause.index()] = action(value)?;
                }
            }
        }
        if policy.uses_dlq() && !crate::outbox::routing::is_valid_topic(&policy.dlq_topic) {
            return Err(PolicyError(format!(
                "--dlq-topic {:?} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-])",
                policy.dlq_topic
            )));
        }
        Ok(policy)
    }

    /// The action for `cause`.
    pub fn action(&self, cause: Cause) -> Action {
        self.actions[cause.index()]
    }

    /// Whether any cause dead-letters.
    pub fn uses_dlq(&self) -> bool {
        self.actions.contains(&Action::Dlq)
    }

    /// `cause=action` for every cause, for `config show`.
    pub fn describe(&self) -> Vec<String> {
        Cause::ALL
            .iter()
            .map(|c| format!("{}={}", c.name(), self.action(*c).name()))
            .collect()
    }
}

/// One poison row's diagnosis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The cause.
    pub cause: Cause,
    /// A human explanation (goes into logs and the dead-letter header).
    pub reason: String,
}

/// The first cause that makes `record` unfit, if any. `check_json`: the payload
/// column is not `json`/`jsonb`, so PostgreSQL did not check its syntax.
pub fn check(record: &KafkaRecord, check_json: bool) -> Option<Invalid> {
    if record.key.as_ref().map_or(true, Bytes::is_empty) {
        let what = if record.key.is_none() {
            "NULL"
        } else {
            "empty"
        };
        return Some(Invalid {
            cause: Cause::NullKey,
            reason: format!("the key column is {what}"),
        });
    }
    if !record.has_valid_topic() {
        return Some(Invalid {
            cause: Cause::InvalidTopic,
            reason: format!(
                "topic {:?} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-])",
                record.topic
            ),
        });
    }
    if check_json {
        if let Some(payload) = &record.value {
            if let Err(e) = json::validate(payload) {
                return Some(Invalid {
                    cause: Cause::InvalidJson,
                    reason: format!("payload is {e}"),
                });
            }
        }
    }
    None
}

/// Header names of a dead-letter record (besides the usual `id` and `event_type`).
pub mod header {
    /// The cause's name.
    pub const CAUSE: &str = "pgoutbox.dlq.cause";
    /// The human reason.
    pub const REASON: &str = "pgoutbox.dlq.reason";
    /// The topic the record was meant for (possibly illegal).
    pub const TOPIC: &str = "pgoutbox.dlq.topic";
    /// `schema.table` of the row.
    pub const TABLE: &str = "pgoutbox.dlq.table";
    /// LSN of the row's change.
    pub const LSN: &str = "pgoutbox.dlq.lsn";
    /// Present when the payload was left out (value then empty).
    pub const PAYLOAD_OMITTED: &str = "pgoutbox.dlq.payload-omitted";
}

/// Where a row came from, for dead-letter headers (unknown for records the broker
/// refused after the fact).
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// `schema.table`.
    pub table: Option<String>,
    /// LSN text of the change.
    pub lsn: Option<String>,
}

/// The dead-letter record for `record` (the record the row would have become).
pub fn dead_letter(
    record: &KafkaRecord,
    invalid: &Invalid,
    origin: &Origin,
    dlq_topic: &str,
) -> KafkaRecord {
    let mut headers = vec![
        (
            header::CAUSE,
            Bytes::from_static(invalid.cause.name().as_bytes()),
        ),
        (header::REASON, Bytes::from(invalid.reason.clone())),
        (header::TOPIC, Bytes::from(record.topic.clone())),
    ];
    if let Some(table) = &origin.table {
        headers.push((header::TABLE, Bytes::from(table.clone())));
    }
    if let Some(lsn) = &origin.lsn {
        headers.push((header::LSN, Bytes::from(lsn.clone())));
    }
    let value = if invalid.cause == Cause::TooLarge {
        let omitted = match &record.value {
            Some(v) => format!("{} bytes", v.len()),
            None => "size unknown (refused by the broker; see the reason)".to_owned(),
        };
        headers.push((header::PAYLOAD_OMITTED, Bytes::from(omitted)));
        None
    } else {
        record.value.clone()
    };
    KafkaRecord {
        topic: dlq_topic.to_owned(),
        key: record.key.clone().filter(|k| !k.is_empty()),
        value,
        id: record.id.clone(),
        event_type: record.event_type.clone(),
        timestamp_ms: record.timestamp_ms,
        headers,
    }
}

/// A stand-in record for a row that could not be mapped: value = the whole row as
/// a JSON object of column → text value (or null); the `id` header from column
/// `id` when the id column still exists; no key, no topic.
pub fn unmapped_row(
    columns: &[String],
    id: Option<usize>,
    tuple: &TupleData,
    commit_ms: i64,
) -> KafkaRecord {
    let mut value = String::from("{");
    for (i, name) in columns.iter().enumerate() {
        if i > 0 {
            value.push(',');
        }
        push_json_string(&mut value, name.as_bytes());
        value.push(':');
        match tuple.0.get(i) {
            Some(ColumnValue::Text(b) | ColumnValue::Binary(b)) => push_json_string(&mut value, b),
            Some(ColumnValue::UnchangedToast) => value.push_str("\"<unchanged toast>\""),
            _ => value.push_str("null"),
        }
    }
    value.push('}');
    let id = id.and_then(|i| match tuple.0.get(i) {
        Some(ColumnValue::Text(b) | ColumnValue::Binary(b)) => Some(b.clone()),
        _ => None,
    });
    KafkaRecord {
        topic: String::new(),
        key: None,
        value: Some(Bytes::from(value)),
        id,
        event_type: None,
        timestamp_ms: commit_ms,
        headers: Vec::new(),
    }
}

/// Append `bytes` as a JSON string (invalid UTF-8 replaced by U+FFFD).
fn push_json_string(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: Option<&'static str>, topic: &str, value: &'static str) -> KafkaRecord {
        KafkaRecord {
            topic: topic.into(),
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: Some(Bytes::from_static(value.as_bytes())),
            id: Some(Bytes::from_static(b"e1")),
            event_type: Some(Bytes::from_static(b"Created")),
            timestamp_ms: 7,
            headers: Vec::new(),
        }
    }

    #[test]
    fn policy_parsing_applies_in_order_and_names_mistakes() {
        let p = InvalidPolicy::parse(&["dlq".into(), "too-large=skip".into()], "dead").unwrap();
        assert_eq!(p.action(Cause::NullKey), Action::Dlq);
        assert_eq!(p.action(Cause::TooLarge), Action::Skip);
        assert_eq!(p.dlq_topic, "dead");
        assert_eq!(
            InvalidPolicy::parse(&[], "x")
                .unwrap()
                .action(Cause::InvalidJson),
            Action::Fail
        );
        let err = InvalidPolicy::parse(&["nul-key=dlq".into()], "x")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nul-key") && err.contains("null-key, invalid-topic"),
            "{err}"
        );
        let err = InvalidPolicy::parse(&["drop".into()], "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("fail, dlq or skip"), "{err}");
        let err = InvalidPolicy::parse(&["dlq".into()], "bad topic")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--dlq-topic"), "{err}");
        // An illegal DLQ topic does not matter when nothing dead-letters.
        assert!(InvalidPolicy::parse(&["skip".into()], "bad topic").is_ok());
    }

    #[test]
    fn checks_find_each_cause() {
        let cause = |r: &KafkaRecord, json: bool| check(r, json).map(|i| i.cause);
        assert_eq!(cause(&record(Some("k"), "t", "{}"), true), None);
        assert_eq!(cause(&record(None, "t", "{}"), true), Some(Cause::NullKey));
        assert_eq!(
            cause(&record(Some(""), "t", "{}"), true),
            Some(Cause::NullKey)
        );
        assert_eq!(
            cause(&record(Some("k"), "a b", "{}"), true),
            Some(Cause::InvalidTopic)
        );
        assert_eq!(
            cause(&record(Some("k"), "t", "nope"), true),
            Some(Cause::InvalidJson)
        );
        // json/jsonb columns are PostgreSQL's to check.
        assert_eq!(cause(&record(Some("k"), "t", "nope"), false), None);
    }

    #[test]
    fn dead_letter_keeps_the_row_and_says_why() {
        let r = record(Some("k"), "bad topic", "{\"a\":1}");
        let invalid = check(&r, true).unwrap();
        let origin = Origin {
            table: Some("public.outbox".into()),
            lsn: Some("0/16B3748".into()),
        };
        let d = dead_letter(&r, &invalid, &origin, "dead");
        assert_eq!(d.topic, "dead");
        assert_eq!(d.value, r.value);
        assert_eq!(d.key, r.key);
        assert_eq!(d.id, r.id);
        let h = |name: &str| {
            d.headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(h(header::CAUSE).as_deref(), Some("invalid-topic"));
        assert_eq!(h(header::TOPIC).as_deref(), Some("bad topic"));
        assert_eq!(h(header::TABLE).as_deref(), Some("public.outbox"));
        assert_eq!(h(header::LSN).as_deref(), Some("0/16B3748"));
        let big = dead_letter(
            &r,
            &Invalid {
                cause: Cause::TooLarge,
                reason: "too big".into(),
            },
            &Origin::default(),
            "dead",
        );
        assert_eq!(big.value, None);
        assert!(big
            .headers
            .iter()
            .any(|(n, _)| *n == header::PAYLOAD_OMITTED));
    }

    #[test]
    fn unmapped_row_is_a_json_object_of_the_columns() {
        let t = |s: &'static [u8]| ColumnValue::Text(Bytes::from_static(s));
        let tuple = TupleData(vec![t(b"e1"), ColumnValue::Null, t(b"a\"b\\\n\xff")]);
        let cols = ["id".to_owned(), "gone".to_owned(), "body".to_owned()];
        let r = unmapped_row(&cols, Some(0), &tuple, 0);
        assert_eq!(r.id.as_deref(), Some(&b"e1"[..]));
        let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id": "e1", "gone": null, "body": "a\"b\\\n\u{fffd}"})
        );
    }
}
