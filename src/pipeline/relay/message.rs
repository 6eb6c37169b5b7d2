//! Logical decoding messages in the relay: `pg_logical_emit_message` content with
//! an outbox prefix (`--message-prefix`) → the record path of a table row.
//!
//! Owns which messages are events and how they join the transaction accounting;
//! the content contract is [`crate::outbox::message`]. A message is parsed into a
//! virtual row, mapped by the global column mapping, then goes through a row's
//! path ([`crate::pipeline::record::build`]: diagnose, trace context, converters)
//! to `send`, or through `poison` (`--on-invalid`, new cause `bad-message`).
//!
//! Invariants: a transactional message counts in its transaction, so rows and
//! messages of one transaction reach the sink in WAL (= commit) order and the LSN
//! passes the transaction only once all its records are acked; a rolled-back
//! message never reaches the relay (PostgreSQL decodes it at commit only); a
//! non-transactional message with an outbox prefix is either counted and warned
//! about (`ignore`, the default) or relayed as a unit of its own, confirmed at its
//! LSN once acked (`relay`); a prefix is matched exactly, and the relay's own
//! heartbeat prefix is never an event; no message is ever dropped without a log
//! line and a counter.

use std::sync::Arc;

use bytes::Bytes;

use super::Relay;
use crate::metrics::Metrics;
use crate::outbox::connect::EnvelopeCache;
use crate::outbox::event::{ColumnMapping, ResolvedMapping};
use crate::outbox::invalid::{Cause, Invalid, Origin};
use crate::outbox::message::{MessageError, MessageRow, DEFAULT_PREFIX, HEARTBEAT_PREFIX};
use crate::outbox::record::{default_placed, KafkaRecord};
use crate::outbox::routing::TopicTemplate;
use crate::pg::source::pgoutput::LogicalMessage;
use crate::pg::timestamp;
use crate::pipeline::error::PipelineError;
use crate::pipeline::record::{self, Built, RowAt};
use crate::pipeline::sink::Sink;
use crate::pipeline::PipelineConfig;

/// Log a warning for the first ignored non-transactional message and then for
/// every this-many (each one is counted in the metric).
const WARN_EVERY: u64 = 1000;

/// What to do with a non-transactional message with an outbox prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NonTransactional {
    /// Count it and warn (first, then every 1000th): it is not relayed.
    #[default]
    Ignore,
    /// Relay it as a unit of its own, confirmed at its LSN once acked.
    Relay,
}

/// Settings for logical decoding messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageConfig {
    /// Prefixes whose messages are outbox events (exact match); empty: none.
    pub prefixes: Vec<String>,
    /// Non-transactional messages with such a prefix.
    pub non_transactional: NonTransactional,
    /// How fields map (the global column mapping; field names = column names).
    pub mapping: ColumnMapping,
    /// Where the records go.
    pub template: TopicTemplate,
}

impl Default for MessageConfig {
    fn default() -> Self {
        Self {
            prefixes: vec![DEFAULT_PREFIX.to_owned()],
            non_transactional: NonTransactional::Ignore,
            mapping: ColumnMapping::default(),
            template: TopicTemplate::default(),
        }
    }
}

impl NonTransactional {
    /// The `--message-non-transactional` value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ignore => "ignore",
            Self::Relay => "relay",
        }
    }
}

impl MessageConfig {
    /// Whether messages with `prefix` are outbox events.
    pub fn accepts(&self, prefix: &str) -> bool {
        prefix != HEARTBEAT_PREFIX && self.prefixes.iter().any(|p| p == prefix)
    }
}

/// A session's message state (the relay's, and `tail`'s to show the same records).
#[derive(Debug, Default)]
pub struct Messages {
    /// The field names of the last message and the mapping resolved for them
    /// (messages of one helper share their fields, so this resolves once).
    last: Option<(Vec<String>, Arc<ResolvedMapping>)>,
    envelope_cache: EnvelopeCache,
}

impl Messages {
    /// What `message` (committed at `commit_time`) becomes: its record through a
    /// row's path, or a poison event (`bad-message`, with the content as its
    /// stand-in record; or a poison field's cause). Also returns what names its
    /// source in logs and dead letters.
    pub fn build(
        &mut self,
        cfg: &PipelineConfig,
        metrics: &Metrics,
        message: &LogicalMessage,
        commit_time: i64,
    ) -> (String, Built) {
        let source = format!("message with prefix {:?}", message.prefix);
        let payload = &cfg.messages.mapping.payload;
        let parsed = MessageRow::parse(&message.content, &message.prefix, payload)
            .and_then(|row| Ok((self.mapping(&row, &cfg.messages.mapping)?, row)));
        let (mapping, row) = match parsed {
            Ok(parsed) => parsed,
            Err(err) => {
                let invalid = Invalid {
                    cause: Cause::BadMessage,
                    reason: err.to_string(),
                };
                let commit_ms = timestamp::to_unix_micros(commit_time).div_euclid(1000);
                return (
                    source,
                    Built::Poison(stand_in(&message.content, commit_ms), invalid),
                );
            }
        };
        let event = mapping.event(&row.tuple);
        let at = RowAt {
            table: &source,
            lsn: message.lsn,
        };
        let found = (&*mapping, &cfg.messages.template);
        let mut built = record::build(cfg, metrics, found, &event, commit_time, at);
        let (Built::Send(record) | Built::Poison(record, _)) = &mut built;
        add_headers(record, row.headers);
        (source, built)
    }

    /// The mapping for `row`'s fields, from the cache when they did not change.
    fn mapping(
        &mut self,
        row: &MessageRow,
        mapping: &ColumnMapping,
    ) -> Result<Arc<ResolvedMapping>, MessageError> {
        if let Some((names, resolved)) = &self.last {
            if names.iter().map(String::as_str).eq(row.field_names()) {
                return Ok(resolved.clone());
            }
        }
        let resolved = Arc::new(
            row.resolve(mapping)?
                .with_envelope_cache(&self.envelope_cache),
        );
        let names = row.field_names().map(str::to_owned).collect();
        self.last = Some((names, resolved.clone()));
        Ok(resolved)
    }
}

impl Relay<'_> {
    /// A logical decoding message: an outbox event when its prefix is one of
    /// `--message-prefix`, else nothing to relay.
    pub(super) fn on_logical_message<S: Sink>(
        &mut self,
        sink: &mut S,
        message: &LogicalMessage,
    ) -> Result<(), PipelineError> {
        if crate::safety::repair::is_repair(&message.prefix) {
            return self.on_repair_message(sink, message);
        }
        let cfg = &self.cfg.messages;
        if !cfg.accepts(&message.prefix) {
            return Ok(());
        }
        if self.skipped(message.lsn) {
            return Ok(()); // exactly-once: in Kafka already
        }
        if message.flags & LogicalMessage::TRANSACTIONAL != 0 {
            let Some(txn) = &self.txn else {
                // Outside Begin/Commit only with streaming, which is never enabled.
                return Err(PipelineError::UnexpectedMessage(
                    "transactional logical decoding",
                ));
            };
            let (no, commit_time) = (txn.no, txn.commit_time);
            return self.relay_message(sink, message, no, commit_time);
        }
        if let Some(txn) = &self.txn {
            // Not sent by pgoutput without streaming; if it were, it joins the
            // open transaction rather than confirming past it.
            let (no, commit_time) = (txn.no, txn.commit_time);
            return self.relay_message(sink, message, no, commit_time);
        }
        match cfg.non_transactional {
            NonTransactional::Ignore => {
                self.ignore(message);
                Ok(())
            }
            NonTransactional::Relay => {
                let no = self.deliver.begin(timestamp::now_pg_micros());
                let result = self.relay_message(sink, message, no, timestamp::now_pg_micros());
                self.deliver.commit(no, message.lsn)?;
                self.last_commit = (message.lsn, message.lsn);
                result
            }
        }
    }

    fn ignore(&self, message: &LogicalMessage) {
        let count = self.metrics.message_ignored();
        if count % WARN_EVERY == 1 {
            tracing::warn!(
                prefix = %message.prefix,
                lsn = %message.lsn,
                ignored_so_far = count,
                "ignoring a non-transactional logical decoding message with an outbox prefix: it was emitted outside any transaction's commit (pg_logical_emit_message(false, …)) and is not relayed; emit it with transactional = true, or relay such messages with --message-non-transactional relay (counted in pgoutbox_messages_ignored_total; logged for the first and every {WARN_EVERY}th)"
            );
        }
    }

    /// Message `message` of transaction `txn` (committed at `commit_time`) → its
    /// record, or a poison event.
    fn relay_message<S: Sink>(
        &mut self,
        sink: &mut S,
        message: &LogicalMessage,
        txn: u64,
        commit_time: i64,
    ) -> Result<(), PipelineError> {
        let (source, built) = self
            .messages
            .build(self.cfg, &self.metrics, message, commit_time);
        let origin = Origin {
            table: Some(source.clone()),
            lsn: Some(message.lsn.to_string()),
        };
        let at = (txn, message.lsn);
        match built {
            Built::Poison(record, invalid) => {
                self.deliver.poison(sink, invalid, record, at, origin)
            }
            Built::Send(record) => {
                let at = RowAt {
                    table: &source,
                    lsn: self.at,
                };
                self.deliver.send(sink, record, txn, at)
            }
        }
    }
}

/// The message's `headers` after the record's own headers; a name the record
/// already carries (`id`, a placement, `--trace-context`'s) keeps its value.
fn add_headers(record: &mut KafkaRecord, headers: Vec<(Arc<str>, Bytes)>) {
    for (name, value) in headers {
        let taken = &*name == "id"
            || record.placed.iter().any(|(n, _)| *n == name)
            || record.headers.iter().any(|(n, _)| *n == &*name);
        if !taken {
            record.placed.push((name, Some(value)));
        }
    }
}

/// What a bad message becomes for its dead letter: the content as sent.
fn stand_in(content: &Bytes, commit_ms: i64) -> KafkaRecord {
    KafkaRecord {
        topic: String::new(),
        key: None,
        value: Some(content.clone()),
        id: None,
        event_type: None,
        placed: default_placed(None),
        timestamp_ms: commit_ms,
        headers: Vec::new(),
    }
}
