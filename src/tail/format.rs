//! Rendering of tail events: JSON lines and a human-readable block.
//!
//! Owns the output schema of `pgoutbox tail` (a stable interface: scripts parse it).
//! Invariant: a `jsonb`/`json` payload is embedded verbatim (byte-identical to
//! `payload::text`), never re-serialized; a payload that is not valid JSON (e.g. a
//! `text` column) is emitted as a JSON string instead, so every line is valid JSON.
//! An event whose topic `run` would refuse (a poison row of cause `invalid-topic`)
//! is marked: `topic_invalid` says why (the key is absent otherwise), and the pretty
//! block flags the topic line. `record` is the record `run` sends for the row, in
//! `replay --dry-run`'s form ([`RecordLine`]), absent when it sends none; `poison`
//! (`cause`, `reason`, `action`) is present for a poison row only.

use std::io::Write;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::outbox::event::OutboxEvent;
use crate::outbox::invalid::{Action, Invalid};
use crate::outbox::record::KafkaRecord;
use crate::outbox::routing::{is_valid_topic, TopicTemplate};
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::timestamp::to_rfc3339;
use crate::pipeline::shown::RecordLine;

/// What `run` does with a row, as tail's record path works it out.
pub enum Outcome<'a> {
    /// Sends this record.
    Send(&'a KafkaRecord),
    /// A poison row: why, what `--on-invalid` does with it, and the dead letter
    /// sent instead (`dlq`).
    Poison {
        invalid: &'a Invalid,
        action: Action,
        letter: Option<&'a KafkaRecord>,
    },
}

impl<'a> Outcome<'a> {
    /// The record `run` sends for the row, if any.
    fn record(&self) -> Option<&'a KafkaRecord> {
        match self {
            Outcome::Send(record) => Some(record),
            Outcome::Poison { letter, .. } => *letter,
        }
    }
}

/// Everything tail knows about one inserted outbox row.
pub struct TailEvent<'a> {
    /// WAL position of the row's change record.
    pub lsn: Lsn,
    /// Commit LSN of its transaction.
    pub commit_lsn: Lsn,
    /// Transaction id.
    pub xid: u32,
    /// Commit time, µs since 2000-01-01.
    pub commit_time: i64,
    /// Source table.
    pub table: &'a TableName,
    /// Operation (`insert`).
    pub op: &'a str,
    /// The mapped row.
    pub event: &'a OutboxEvent,
    /// Template to compute the topic `run` would use.
    pub template: &'a TopicTemplate,
    /// What `run` does with it.
    pub outcome: Outcome<'a>,
}

#[derive(Serialize)]
struct PoisonLine<'a> {
    cause: &'static str,
    reason: &'a str,
    action: &'static str,
}

/// A payload either embedded as JSON or, when not JSON, as a string.
#[derive(Serialize)]
#[serde(untagged)]
enum Payload<'a> {
    Json(&'a RawValue),
    Text(&'a str),
}

#[derive(Serialize)]
struct JsonLine<'a> {
    lsn: String,
    commit_lsn: String,
    xid: u32,
    commit_time: String,
    table: String,
    op: &'a str,
    id: Option<&'a str>,
    aggregate_type: Option<&'a str>,
    aggregate_id: Option<&'a str>,
    event_type: Option<&'a str>,
    topic: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    topic_invalid: Option<String>,
    key: Option<&'a str>,
    created_at: Option<&'a str>,
    payload: Option<Payload<'a>>,
    /// The record `run` sends (the dead letter for a dead-lettered poison row),
    /// as `replay --dry-run` prints one; absent when it sends none.
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<RecordLine<'a>>,
    /// The poison-row diagnosis, when the row is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    poison: Option<PoisonLine<'a>>,
}

fn text(value: &Option<bytes::Bytes>) -> Option<&str> {
    value
        .as_deref()
        .map(|b| std::str::from_utf8(b).unwrap_or("<invalid utf-8>"))
}

fn topic(ev: &TailEvent<'_>) -> Option<String> {
    if ev.template.uses_value() {
        text(&ev.event.route_value).map(|v| ev.template.render(v))
    } else {
        Some(ev.template.render(""))
    }
}

/// Why `run` would refuse the topic of this event, if it would: `run` renders a
/// NULL routing value as empty text.
fn topic_invalid(ev: &TailEvent<'_>) -> Option<String> {
    let route = ev
        .event
        .route_value
        .as_deref()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    let topic = ev.template.render(&route);
    (!is_valid_topic(&topic)).then(|| {
        format!(
            "topic {topic:?} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-]): \
             `run` treats this row as a poison row (invalid-topic)"
        )
    })
}

fn payload<'a>(raw: Option<&'a str>) -> Option<Payload<'a>> {
    let raw = raw?;
    Some(match serde_json::from_str::<&RawValue>(raw) {
        Ok(json) => Payload::Json(json),
        Err(_) => Payload::Text(raw),
    })
}

/// Write one JSON line.
pub fn write_json(ev: &TailEvent<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    let e = ev.event;
    let table = ev.table.to_string();
    let poison = match &ev.outcome {
        Outcome::Send(_) => None,
        Outcome::Poison {
            invalid, action, ..
        } => Some(PoisonLine {
            cause: invalid.cause.name(),
            reason: &invalid.reason,
            action: action.name(),
        }),
    };
    let line = JsonLine {
        record: ev.outcome.record().map(|r| RecordLine::new(&table, r)),
        poison,
        lsn: ev.lsn.to_string(),
        commit_lsn: ev.commit_lsn.to_string(),
        xid: ev.xid,
        commit_time: to_rfc3339(ev.commit_time),
        table: table.clone(),
        op: ev.op,
        id: text(&e.id),
        aggregate_type: text(&e.aggregate_type),
        aggregate_id: text(&e.key),
        event_type: text(&e.event_type),
        topic: topic(ev),
        topic_invalid: topic_invalid(ev),
        key: text(&e.key),
        created_at: text(&e.timestamp),
        payload: payload(text(&e.payload)),
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}

/// Write one human-readable block.
pub fn write_pretty(ev: &TailEvent<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    let e = ev.event;
    let or_null = |v: Option<&str>| v.unwrap_or("NULL").to_owned();
    writeln!(
        out,
        "── {} {} xid {} at {} (commit {})",
        ev.table,
        ev.op,
        ev.xid,
        to_rfc3339(ev.commit_time),
        ev.commit_lsn
    )?;
    writeln!(out, "  id          {}", or_null(text(&e.id)))?;
    writeln!(out, "  event_type  {}", or_null(text(&e.event_type)))?;
    let shown = topic(ev).unwrap_or_else(|| "NULL".into());
    match topic_invalid(ev) {
        None => writeln!(out, "  topic       {shown}")?,
        Some(why) => writeln!(out, "  topic       {shown}  ✘ {why}")?,
    }
    writeln!(out, "  key         {}", or_null(text(&e.key)))?;
    if let Outcome::Poison {
        invalid,
        action,
        letter,
    } = &ev.outcome
    {
        let to = letter
            .map(|l| format!(" to {}", l.topic))
            .unwrap_or_default();
        writeln!(
            out,
            "  poison      {} ({}): `run` would {}{to}",
            invalid.cause.name(),
            invalid.reason,
            match action {
                Action::Fail => "stop before it",
                Action::Skip => "skip it",
                _ => "dead-letter it",
            }
        )?;
    }
    let body = match text(&e.payload) {
        Some(raw) => match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| raw.to_owned()),
            Err(_) => raw.to_owned(),
        },
        None => "NULL".to_owned(),
    };
    writeln!(
        out,
        "  payload     {}",
        body.replace('\n', "\n              ")
    )?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn event(payload: &'static str) -> OutboxEvent {
        let b = |s: &'static str| Some(Bytes::from_static(s.as_bytes()));
        OutboxEvent {
            id: b("e1"),
            aggregate_type: b("order"),
            route_value: b("order"),
            key: b("42"),
            event_type: b("created"),
            payload: b(payload),
            timestamp: None,
            trace_context: None,
            placed: Vec::new(),
        }
    }

    fn render(payload: &'static str) -> serde_json::Value {
        render_routed(payload, "order")
    }

    fn render_routed(payload: &'static str, route: &'static str) -> serde_json::Value {
        let mut ev = event(payload);
        ev.route_value = Some(Bytes::from_static(route.as_bytes()));
        let table = TableName::parse("public.outbox").unwrap();
        let template = TopicTemplate::default();
        let record = KafkaRecord::from_event(&ev, &template, 0);
        let mut out = Vec::new();
        let tail = TailEvent {
            outcome: Outcome::Send(&record),
            lsn: Lsn(0x10),
            commit_lsn: Lsn(0x20),
            xid: 7,
            commit_time: 0,
            table: &table,
            op: "insert",
            event: &ev,
            template: &template,
        };
        write_json(&tail, &mut out).unwrap();
        assert_eq!(out.last(), Some(&b'\n'));
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn json_line_has_contract_fields() {
        let v = render(r#"{"a": 1}"#);
        assert_eq!(v["topic"], "outbox.event.order");
        assert_eq!(v["key"], "42");
        assert_eq!(v["aggregate_id"], "42");
        assert_eq!(v["lsn"], "0/10");
        assert_eq!(v["commit_time"], "2000-01-01T00:00:00.000000Z");
        assert_eq!(v["payload"]["a"], 1);
    }

    /// Issue 13 item 9: tail marks an event whose topic `run` would refuse.
    #[test]
    fn illegal_topic_is_marked() {
        let v = render_routed("{}", "new order");
        assert_eq!(v["topic"], "outbox.event.new order");
        assert_eq!(
            v["topic_invalid"],
            "topic \"outbox.event.new order\" is not a legal Kafka topic name \
             (1-249 of [a-zA-Z0-9._-]): `run` treats this row as a poison row (invalid-topic)"
        );
        let fine = render("{}");
        assert!(fine.get("topic_invalid").is_none(), "{fine}");
    }

    #[test]
    fn non_json_payload_becomes_a_string() {
        let v = render("not json {");
        assert_eq!(v["payload"], "not json {");
    }
}
