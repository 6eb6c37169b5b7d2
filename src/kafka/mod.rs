//! The Kafka side: an idempotent producer whose delivery reports flow back to the
//! pipeline as plain values.
//!
//! - [`authz`]: [`authz::NotAuthorized`] — a refusal of the relay's rights, with
//!   its principal and the `kafka-acls` command that grants them.
//! - [`config`]: the producer settings pgoutbox insists on, then user overrides.
//! - [`outage`]: what is logged of broker errors — an outage once, then a
//!   summary a minute, then its end.
//! - [`probe`]: [`probe::reaches_a_broker`] — does a client get an answer from a
//!   broker (brokers-only metadata, constant size whatever the cluster).
//! - [`producer`]: [`producer::KafkaSink`] — send with backpressure (queue full),
//!   delivery reports on a channel, error classification (transient / permanent).
//! - [`wakeup`]: [`wakeup::QueueWakeup`] — librdkafka's main queue wakes the
//!   relay's loop (no polling thread).
//! - [`watermark`]: [`watermark::Watermark`] — exactly-once's source position,
//!   written in each Kafka transaction and read back at start.

pub mod authz;
pub mod config;
pub mod outage;
pub mod probe;
pub mod producer;
pub mod wakeup;
pub mod watermark;
