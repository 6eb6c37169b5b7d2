//! Where the outbox lives: the database, the publication and the outbox tables.
//!
//! A plain settings struct shared by every command that reads the outbox (`run`,
//! `tail`, `setup`, `check`, `status`, `teardown`). It is built and validated by the
//! front (`crate::config`); nothing here parses user input. Invariant: `tables` is
//! non-empty and free of duplicates, in the order the user gave them.

use crate::pg::catalog::TableName;
use crate::pg::conninfo::ConnInfo;

/// The database, publication and outbox tables a command works on.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Connection parameters (password redacted in Debug).
    pub conninfo: ConnInfo,
    /// Publication name.
    pub publication: String,
    /// Outbox tables, deduplicated, in the order given.
    pub tables: Vec<TableName>,
}
