//! The outbox domain: which columns of an outbox row mean what, and where the
//! resulting record goes.
//!
//! - [`event`]: a decoded pgoutput row → [`event::OutboxEvent`] through a column mapping.
//! - [`routing`]: the topic template (Debezium's `${routedByValue}` syntax) and key rules.

pub mod event;
pub mod routing;
