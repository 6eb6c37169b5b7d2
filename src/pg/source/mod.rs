//! The replication source: everything that reads the outbox out of PostgreSQL,
//! built on the wire client ([`crate::pg::client`]).
//!
//! - [`replication`]: the streaming (walsender) connection — `IDENTIFY_SYSTEM`,
//!   `START_REPLICATION`, the CopyBoth task with its status updates.
//! - [`protocol`]: sans-I/O CopyData payloads (XLogData, keepalive, status update).
//! - [`pgoutput`]: the pure decoder of pgoutput messages.
//! - [`sql_client`]: the ordinary SQL connection (tokio-postgres) the catalog, `check`,
//!   `status`, `setup`, `teardown` and poll mode use; its errors are [`catalog::CatalogError`].
//! - [`catalog`]: publication and slot SQL; [`failover`]: failover slots (PostgreSQL 17+).
//! - [`timeline`]: the timeline history (`TIMELINE_HISTORY`) and what leads where.
//! - [`SourceConfig`] (here): where the outbox lives — the database, the publication
//!   and the outbox tables.
//!
//! Layering: this room may use [`crate::pg::client`] and the leaves of `pg`; nothing
//! in the client uses this room (checked in `pg/mod.rs`).
//!
//! [`SourceConfig`] is a plain settings struct shared by every command that reads the
//! outbox (`run`, `tail`, `setup`, `check`, `status`, `teardown`). It is built and
//! validated by the front (`crate::config`); nothing here parses user input.
//! Invariant: `tables` is non-empty (empty only in `--messages-only` mode) and free
//! of duplicates, in the order the user gave them; `message_prefixes` holds no empty
//! string.

pub mod catalog;
pub mod failover;
pub mod pgoutput;
pub mod protocol;
pub mod publication_state;
pub mod replication;
pub mod republish;
pub mod sql_client;
pub mod timeline;

use crate::pg::client::conninfo::ConnInfo;
use crate::pg::names::TableName;

/// The database, publication and outbox tables a command works on.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Connection parameters (password redacted in Debug).
    pub conninfo: ConnInfo,
    /// Publication name.
    pub publication: String,
    /// Outbox tables, deduplicated, in the order given; empty with `messages_only`.
    pub tables: Vec<TableName>,
    /// Logical decoding message prefixes whose messages are outbox events
    /// (`--message-prefix`; empty: messages off).
    pub message_prefixes: Vec<String>,
    /// The table-less outbox (`--messages-only`): no table, an empty publication.
    pub messages_only: bool,
}
