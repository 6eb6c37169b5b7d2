//! Where the outbox lives: the database, the publication and the outbox tables.
//!
//! A plain settings struct shared by every command that reads the outbox (`run`,
//! `tail`, `setup`, `check`, `status`, `teardown`). It is built and validated by the
//! front (`crate::config`); nothing here parses user input. Invariant: `tables` is
//! non-empty (empty only in `--messages-only` mode) and free of duplicates, in the
//! order the user gave them; `message_prefixes` holds no empty string.

use crate::pg::catalog::TableName;
use crate::pg::conninfo::ConnInfo;

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
