//! The one path from a mapped outbox row to the record that leaves, and the one
//! place `--on-invalid` is applied to a poison row. Shared by the relay
//! ([`super::relay::Relay`], rows read from the WAL) and `pgoutbox replay` (rows
//! read back with SQL), so a replayed event is byte for byte the record `run` sent:
//! same topic, key, value, headers, placements, trace context and converters.
//!
//! ```text
//!  OutboxEvent ─▶ from_event (topic, key, value, timestamp) ─▶ placed headers
//!              ─▶ diagnose ─┬─ poison ─▶ Built::Poison ─▶ poison(): fail | skip | dead letter
//!                           └─ clean  ─▶ trace context ─▶ converters ─▶ Built::Send
//! ```
//!
//! Invariants: the checks read the raw column text, before the converters run (a
//! delivered NULL key only becomes JsonConverter's `null` afterwards); a malformed
//! trace context never holds an event back (counted, logged, left out); every
//! poison row is counted and logged with its action, and `fail` becomes a
//! [`PoisonRow`] error naming the row.

use crate::kafka::producer::DeliveryError;
use crate::metrics::Metrics;
use crate::outbox::event::{OutboxEvent, ResolvedMapping};
use crate::outbox::invalid::{
    self, Action, BrokerRefusal, Cause, Invalid, Origin, PoisonRow, Verdict,
};
use crate::outbox::record::KafkaRecord;
use crate::outbox::routing::TopicTemplate;
use crate::outbox::tables::RelationRoute;
use crate::outbox::trace;
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::TupleData;
use crate::pg::timestamp;

use super::PipelineConfig;

/// Where a row came from, for log lines (no allocation per row).
#[derive(Clone, Copy)]
pub struct RowAt<'t> {
    /// Its outbox table (for a logical decoding message: its prefix, as text).
    pub table: &'t dyn std::fmt::Display,
    /// The WAL position of its change; [`Lsn::INVALID`] for a row read with SQL.
    pub lsn: Lsn,
}

/// What a row becomes.
#[derive(Debug)]
pub enum Built {
    /// The record to send.
    Send(KafkaRecord),
    /// A poison row: the record it would have become and why it cannot go.
    Poison(KafkaRecord, Invalid),
}

/// What the row `tuple` of a table routed by `route` becomes — the record to
/// send, or a poison row (a table that lost a mapped column or changed one's type:
/// `missing-column`, `type-changed`) —
/// with its table; `Err(table)` when the table is published but no outbox table.
/// The one entry from a row to its record for `run` (WAL), poll mode, `replay`
/// (rows read with SQL, `lsn` [`Lsn::INVALID`]) and `tail`.
pub fn row<'r>(
    cfg: &PipelineConfig,
    metrics: &Metrics,
    route: &'r RelationRoute,
    tuple: &TupleData,
    commit_time: i64,
    lsn: Lsn,
) -> Result<(&'r TableName, Built), &'r TableName> {
    match route {
        RelationRoute::NotOutbox(table) => Err(table),
        RelationRoute::Outbox(table, mapping, template) => {
            let event = mapping.event(tuple);
            let at = RowAt { table, lsn };
            let found = (&**mapping, template);
            Ok((table, build(cfg, metrics, found, &event, commit_time, at)))
        }
        RelationRoute::Unmapped(u) => {
            let commit_ms = timestamp::to_unix_micros(commit_time).div_euclid(1000);
            let record = invalid::unmapped_row(&u.columns, u.id, tuple, commit_ms);
            let invalid = u.invalid.clone();
            Ok((&u.table, Built::Poison(record, invalid)))
        }
    }
}

/// The record for `event`, a row of `at.table` under `mapping` and `template`;
/// `commit_time` (µs since 2000-01-01) stamps it when `--record-timestamp` says so.
pub fn build(
    cfg: &PipelineConfig,
    metrics: &Metrics,
    (mapping, template): (&ResolvedMapping, &TopicTemplate),
    event: &OutboxEvent,
    commit_time: i64,
    at: RowAt<'_>,
) -> Built {
    let timestamp_ms = cfg
        .record_timestamp
        .millis(event.timestamp.as_deref(), commit_time);
    let mut record = KafkaRecord::from_event(event, template, timestamp_ms);
    record.placed = mapping.headers(event);
    let route = event.route_value.as_deref();
    let unchecked = mapping.payload_unchecked();
    match invalid::diagnose(&record, route, template, unchecked, &cfg.invalid) {
        Verdict::Poison(invalid) => Built::Poison(record, invalid),
        verdict => {
            let mut record = finish(metrics, record, event, mapping, verdict, at);
            // Converters run after the checks, which read the raw text (a delivered
            // NULL key becomes JsonConverter's `null` here).
            cfg.format.encode(&mut record, event, mapping);
            Built::Send(record)
        }
    }
}

/// A record about to go out: count a keyless row delivered by policy, and add the
/// trace-context headers (a malformed context is counted and logged, and the
/// record goes without it: tracing never holds an event back).
fn finish(
    metrics: &Metrics,
    mut record: KafkaRecord,
    event: &OutboxEvent,
    mapping: &ResolvedMapping,
    verdict: Verdict,
    at: RowAt<'_>,
) -> KafkaRecord {
    if let Verdict::NullKeyDelivered(what) = verdict {
        metrics.invalid_row(Cause::NullKey, Action::Deliver);
        tracing::debug!(event_id = %record.id_text(), table = %at.table, lsn = %at.lsn, "delivering a row whose key column is {what} (--on-invalid null-key=deliver)");
    }
    let Some(keys) = mapping.trace_keys() else {
        return record;
    };
    let found = trace::extract(event.trace_context.as_ref(), keys);
    metrics.trace_context(found.outcome());
    if let Some(problem) = &found.problem {
        tracing::warn!(event_id = %record.id_text(), table = %at.table, lsn = %at.lsn, error = %problem, "trace context not propagated as is (--trace-context); the record is sent");
    }
    if let Some(parent) = found.traceparent {
        record.headers.push((trace::TRACEPARENT, parent));
    }
    if let Some(state) = found.tracestate {
        record.headers.push((trace::TRACESTATE, state));
    }
    record
}

/// What `--on-invalid` makes of a poison row that would have become `record`,
/// without counting or logging it (`tail` shows it; [`poison`] applies it):
/// `Ok(None)` to skip it, `Ok(Some(letter))` to send its dead letter instead, or
/// the [`PoisonRow`] error that stops before it.
pub fn decide(
    cfg: &PipelineConfig,
    invalid: &Invalid,
    record: &KafkaRecord,
    origin: &Origin,
) -> Result<Option<KafkaRecord>, Box<PoisonRow>> {
    match cfg.invalid.action(invalid.cause) {
        Action::Fail => Err(Box::new(PoisonRow::new(
            invalid.clone(),
            record.id_text(),
            origin.clone(),
        ))),
        Action::Skip => Ok(None),
        _ => Ok(Some(invalid::dead_letter(
            record,
            invalid,
            origin,
            &cfg.invalid.dlq_topic,
        ))),
    }
}

/// Apply `--on-invalid` to a poison row that would have become `record`: count and
/// log it, then [`decide`].
pub fn poison(
    cfg: &PipelineConfig,
    metrics: &Metrics,
    invalid: Invalid,
    record: &KafkaRecord,
    origin: &Origin,
) -> Result<Option<KafkaRecord>, Box<PoisonRow>> {
    let action = cfg.invalid.action(invalid.cause);
    metrics.invalid_row(invalid.cause, action);
    let event_id = record.id_text();
    if action == Action::Fail {
        return decide(cfg, &invalid, record, origin);
    }
    tracing::warn!(
        cause = invalid.cause.name(),
        reason = %invalid.reason,
        event_id,
        table = origin.table.as_deref().unwrap_or(""),
        lsn = origin.lsn.as_deref().unwrap_or(""),
        action = action.name(),
        "poison row: {} (--on-invalid)",
        if action == Action::Skip { "skipping" } else { "dead-lettering" }
    );
    decide(cfg, &invalid, record, origin)
}

/// The refusal predicate, the one place it is written: a refusal makes a poison
/// row (`too-large`) when the broker or librdkafka refused the record's size and it
/// is not a dead letter (a refused dead letter is never poison again: it stops).
pub fn is_poison_refusal(cfg: &PipelineConfig, err: &DeliveryError) -> bool {
    err.is_too_large() && err.topic != cfg.invalid.dlq_topic
}

/// The row the broker refused for its size, when [`is_poison_refusal`], rebuilt
/// from the report for [`poison`] to apply `--on-invalid` to (`fail` stops with the
/// row's table and LSN). `size` is what it counted in flight; `commit_ms` stamps
/// its dead letter.
pub fn refused_row(
    cfg: &PipelineConfig,
    err: &DeliveryError,
    size: usize,
    commit_ms: i64,
) -> Option<(KafkaRecord, Invalid)> {
    if !is_poison_refusal(cfg, err) {
        return None;
    }
    let refused = err.refused.as_deref();
    Some(invalid::refused_by_broker(BrokerRefusal {
        topic: &err.topic,
        event_id: &err.event_id,
        key: refused.and_then(|r| r.key.clone()),
        event_type: refused.and_then(|r| r.event_type.clone()),
        reason: &err.reason,
        size,
        commit_ms,
    }))
}
