//! pgoutbox: a relay that streams a PostgreSQL transactional outbox through logical
//! replication (`pgoutput`).
//!
//! # Layout
//! - [`cli`]: raw command-line arguments (clap), each with a `PGOUTBOX_*` env twin.
//! - [`config`]: raw arguments → each room's own settings struct; only `main`, `cli`
//!   and `config` know clap and config types. It holds the TOML
//!   file layer ([`config::file`]), the Debezium option names ([`cli::router_keys`])
//!   and `config import-debezium` ([`config::debezium`]).
//! - [`secret`]: a string that never prints (passwords).
//! - [`report`]: how an error is printed (the one rule for error messages);
//!   [`exit`]: the binary's exit statuses; [`failure`]: which error exits with which.
//! - [`pg`]: PostgreSQL, in two rooms and three leaves. [`pg::client`] is the wire
//!   client ([`pg::client::conninfo`] libpq connection strings,
//!   [`pg::client::host_walk`] how both connections walk a multi-host list,
//!   [`pg::client::tls`], SCRAM channel binding, [`pg::client::frame`] sans-I/O
//!   framing, [`pg::client::connection`] transport/auth). [`pg::source`] is the
//!   replication source built on it ([`pg::source::replication`] the streaming
//!   connection, [`pg::source::protocol`] CopyData payloads, [`pg::source::pgoutput`]
//!   decoder, [`pg::source::catalog`] publication/slot SQL on the
//!   [`pg::source::sql_client`] connection, [`pg::source::failover`] failover slots,
//!   and the database, publication and tables a command works on). The leaves:
//!   [`pg::names`] (`TableName`, quoting), [`pg::lsn`] positions, [`pg::timestamp`].
//! - [`outbox`]: row → event ([`outbox::event`]), logical decoding message → the
//!   same event ([`outbox::message`], the table-less outbox), topic rules ([`outbox::routing`]),
//!   poison rows with their dead letters ([`outbox::invalid`]), W3C trace context
//!   ([`outbox::trace`]) and the Kafka Connect record format of a Debezium
//!   connector ([`outbox::connect`]).
//! - [`kafka`]: producer settings, the delivery-report sink and what is logged of
//!   broker trouble ([`kafka::outage`]: an outage once, then a summary a minute).
//! - [`metrics`], [`http`]: Prometheus metrics, `/metrics` `/livez` `/readyz`, the
//!   active/standby role ([`metrics::role`]).
//! - [`heartbeat`]: the end-to-end heartbeat — a logical decoding message emitted
//!   on the SQL connection and timed when it comes back through the stream.
//! - [`pipeline`]: one session's relay — the sans-I/O core, its I/O shell (the
//!   `select!` loop) and the per-transaction ack tracker.
//! - [`poll`]: `run --source poll`, the polling relay for servers without logical
//!   replication (claim, mark, NOTIFY wake-up, advisory lock, backlog).
//! - [`run`]: `pgoutbox run`, the service: setup, hot standby, and
//!   [`run::supervisor`], the one reconnect loop every session kind (logical,
//!   poll) runs under: back-off, standby, role, producer renewal, session metrics.
//! - [`state`]: the state file, the last delivered LSN on local disk.
//! - [`safety`]: slot-safety checks against it (slot advanced, dropped, lost,
//!   promoted, …) and where a session resumes ([`safety::resume`]).
//! - [`tail`]: `pgoutbox tail`, the debug mode that never confirms a slot.
//! - [`replay`]: `pgoutbox replay`, events still in the outbox table sent again
//!   (by time or id) through the relay's record path, marked `pgoutbox.replay`.
//! - [`setup`]: `pgoutbox setup`, publication + slot, idempotent.
//! - [`ops`]: `check`, `status`, `teardown`.
//! - [`task`]: named background tasks, joined at shutdown.

pub mod cli;
pub mod config;
pub mod exit;
pub mod failpoint;
pub mod failure;
pub mod heartbeat;
pub mod http;
pub mod kafka;
#[cfg(test)]
mod layering;
pub mod metrics;
pub mod ops;
pub mod outbox;
pub mod pg;
pub mod pipeline;
pub mod poll;
pub mod replay;
pub mod report;
pub mod run;
pub mod safety;
pub mod secret;
pub mod setup;
pub mod state;
pub mod tail;
pub mod task;
