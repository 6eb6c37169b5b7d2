//! The outbox domain: which columns of an outbox row mean what, and where the
//! resulting record goes.
//!
//! - [`event`]: a decoded pgoutput row → [`event::OutboxEvent`] through a column mapping.
//! - [`routing`]: the topic template (Debezium's `${routedByValue}` syntax) and key rules.
//! - [`tables`]: which relations are outbox tables, per relation id.
//! - [`record`]: event → Kafka record (topic, key, value, headers, timestamp).
//! - [`invalid`]: poison rows — causes, checks, the `--on-invalid` policy, dead
//!   letters, and the error that stops the relay on one.
//! - [`message`]: the content of a logical decoding message → a virtual outbox row
//!   (the table-less outbox: `pg_logical_emit_message`).
//! - [`json`]: the JSON syntax check for payloads in `text` columns.
//! - [`trace`]: W3C trace context (`traceparent`, `tracestate`) from a column or
//!   a JSON key, checked before it becomes headers.
//! - [`connect`]: Kafka Connect record format — placed columns, converters,
//!   payload expansion — byte-identical to a Debezium connector.

pub mod connect;
pub mod event;
pub mod invalid;
pub mod json;
pub mod message;
pub mod pinned;
pub mod record;
pub mod routing;
pub mod tables;
pub mod trace;
