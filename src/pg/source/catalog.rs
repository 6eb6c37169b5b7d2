//! Catalog helpers on an ordinary (non-replication) SQL connection.
//!
//! Owns the SQL that inspects and creates the publication and the replication slot;
//! the connection itself is opened by [`crate::pg::source::sql_client`] (re-exported here as
//! [`connect`]), with the same TLS rules and host walk as the replication connection. Keeping catalog queries off the replication
//! connection means a slow catalog query can never delay a keepalive reply.
//!
//! Invariants: `ensure_*` functions are idempotent — they create what is missing,
//! accept what exists and matches, and fail with the exact SQL to run when what
//! exists does not match or when the role lacks the privilege to create it. They
//! never drop or alter an existing object.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use crate::pg::client::host_walk::NoHostAccepted;
use crate::pg::client::tls::{self, TlsError};
use crate::pg::lsn::Lsn;
use crate::pg::names::{quote_ident, TableName};
use crate::pg::source::failover;
pub use crate::pg::source::sql_client::connect;

/// Errors from catalog operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// Could not connect.
    #[error("cannot connect to {target}: {}", describe(error))]
    Connect {
        target: String,
        /// Rendered by [`describe`] in the message (so not a `source`).
        error: tokio_postgres::Error,
    },
    /// Connect and authentication took longer than `connect_timeout`.
    #[error("connecting to {target} timed out after {after:?}; fix: check the host and port are reachable, or raise connect_timeout")]
    Timeout {
        target: String,
        after: std::time::Duration,
    },
    /// No host of a multi-host list gave an acceptable session.
    #[error(transparent)]
    NoHost(#[from] NoHostAccepted),
    /// TLS configuration failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// `channel_binding=require` could not be met (nothing was sent that could leak
    /// the password).
    #[error("cannot connect to {target}: authentication of user {user:?} failed: {reason}")]
    ChannelBinding {
        target: String,
        user: String,
        reason: String,
    },
    /// A query failed.
    #[error("{context}: {}", describe(error))]
    Query {
        context: String,
        /// Rendered by [`describe`] in the message (so not a `source`).
        error: tokio_postgres::Error,
    },
    /// The server cannot decode logically: checked before anything is created, so a
    /// refused start leaves no publication behind.
    #[error(
        "wal_level is {observed}, but logical replication needs wal_level = logical; fix: {}",
        WAL_LEVEL_FIX
    )]
    WalLevel { observed: String },
    /// `--messages-only` on a server whose pgoutput cannot send logical decoding
    /// messages (the `messages` option is PostgreSQL 14+).
    #[error("{MESSAGES_ONLY_NEEDS_14} (this server is {version})")]
    MessagesNeed14 { version: String },
    /// An outbox table does not exist.
    #[error("outbox table {table} does not exist; fix: create it (see sql/outbox.sql) or pass the right --table")]
    MissingTable { table: TableName },
    /// The role may not create the publication.
    #[error("role {role:?} may not create publication {publication:?} ({reason}); fix: have an owner of the tables run: {sql}")]
    PublicationPermission {
        role: String,
        publication: String,
        reason: String,
        sql: String,
    },
    /// The publication exists but does not publish every outbox table.
    #[error("publication {publication:?} exists but does not include {missing}; fix: run: ALTER PUBLICATION {ident} ADD TABLE {missing}")]
    PublicationIncomplete {
        publication: String,
        ident: String,
        missing: String,
    },
    /// A slot of that name exists with another plugin or kind.
    #[error("replication slot {slot:?} exists but is a {kind} slot with plugin {plugin:?}, not a pgoutput logical slot; fix: choose another --slot or drop it with SELECT pg_drop_replication_slot('{slot}')")]
    SlotMismatch {
        slot: String,
        kind: String,
        plugin: String,
    },
    /// The slot belongs to another database.
    #[error("replication slot {slot:?} belongs to database {slot_db:?}, but the connection is to {db:?}; fix: use another --slot name for this database")]
    SlotDatabase {
        slot: String,
        slot_db: String,
        db: String,
    },
    /// The slot does not exist.
    #[error("replication slot {slot:?} does not exist; fix: run `pgoutbox setup --slot {slot}` or omit --slot to use a temporary slot")]
    MissingSlot { slot: String },
    /// The slot is in use by a walsender, so it cannot be dropped.
    #[error("replication slot {slot:?} is active (walsender pid {pid}); fix: stop the relay first (or end that session: SELECT pg_terminate_backend({pid}))")]
    SlotActive { slot: String, pid: i32 },
    /// The role may not drop an object (publication: owner only; slot: REPLICATION).
    #[error("role {role:?} may not drop {object} ({reason}); fix: have its owner or a superuser run: {sql}")]
    DropPermission {
        role: String,
        object: String,
        reason: String,
        sql: String,
    },
}

/// How to make a server logical-decoding capable (`check` gives the same fix).
pub const WAL_LEVEL_FIX: &str = "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL";

/// Why `--messages-only` cannot work before PostgreSQL 14, and the fix (`check` and
/// `run` say the same).
pub const MESSAGES_ONLY_NEEDS_14: &str = "--messages-only relays logical decoding messages, which pgoutput streams from PostgreSQL 14 on (its `messages` option); fix: upgrade the server to PostgreSQL 14 or later, or relay an outbox table instead (--table, see sql/outbox.sql)";

/// First PostgreSQL version whose pgoutput streams logical decoding messages.
pub const MESSAGES_MIN_VERSION_NUM: i32 = 140000;

/// Refuse `--messages-only` on a server older than PostgreSQL 14, before anything
/// is created.
pub async fn require_messages(client: &Client) -> Result<(), CatalogError> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version')",
            &[],
        )
        .await
        .map_err(query_err("reading server_version"))?;
    if row.get::<_, i32>(0) >= MESSAGES_MIN_VERSION_NUM {
        Ok(())
    } else {
        Err(CatalogError::MessagesNeed14 {
            version: row.get(1),
        })
    }
}

/// Refuse a server whose `wal_level` is not `logical`, before anything is created:
/// PostgreSQL would accept the publication and only refuse the slot.
pub async fn require_logical_wal(client: &Client) -> Result<(), CatalogError> {
    let row = client
        .query_one("SELECT current_setting('wal_level')", &[])
        .await
        .map_err(query_err("reading wal_level"))?;
    let observed: String = row.get(0);
    if observed == "logical" {
        Ok(())
    } else {
        Err(CatalogError::WalLevel { observed })
    }
}

/// tokio-postgres prints a server error as just "db error"; show the server's
/// message, SQLSTATE, detail and hint instead (never the password: the server does
/// not echo it).
pub fn describe(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => {
            let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(&format!("; detail: {detail}"));
            }
            let hint = db
                .hint()
                .or_else(|| crate::pg::client::error::auth_hint(db.message()));
            if let Some(hint) = hint {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => {
            let mut text = crate::report::render(err);
            let fix = tls::chain_fix(err);
            if !text.contains(fix) {
                text.push_str(fix);
            }
            text
        }
    }
}

impl CatalogError {
    /// Whether retrying later may succeed (server unreachable, restarting, or the
    /// connection dropped); configuration and permission problems are definite.
    pub fn is_transient(&self) -> bool {
        let pg_transient = |e: &tokio_postgres::Error| match e.code() {
            // 08P01 (protocol violation, e.g. a failed channel-binding check) is not
            // a connection glitch.
            Some(code) if code == &SqlState::PROTOCOL_VIOLATION => false,
            Some(code) => {
                let c = code.code();
                c.starts_with("08") || c.starts_with("57") || c.starts_with("53")
            }
            // A TLS failure (certificate rejected) is definite, like on the
            // replication connection.
            None if tls::rustls_in_chain(e).is_some() => false,
            None => e.is_closed() || e.as_db_error().is_none(),
        };
        match self {
            CatalogError::Connect { error, .. } | CatalogError::Query { error, .. } => {
                pg_transient(error)
            }
            CatalogError::Timeout { .. } => true,
            CatalogError::NoHost(none) => none.is_transient(),
            _ => false,
        }
    }
}

pub(crate) fn query_err(
    context: impl Into<String>,
) -> impl FnOnce(tokio_postgres::Error) -> CatalogError {
    let context = context.into();
    move |error| CatalogError::Query { context, error }
}

/// The SQL that creates the publication for `tables`, insert-only.
///
/// `publish_via_partition_root` (PostgreSQL 13+) makes rows of a partitioned outbox
/// arrive under the root table's name; without it they arrive under each partition's
/// name, which is not a configured outbox table, and would be skipped.
pub fn create_publication_sql(publication: &str, tables: &[TableName]) -> String {
    let list: Vec<String> = tables.iter().map(TableName::quoted).collect();
    // No table (--messages-only): an empty publication, which the slot's pgoutput
    // still needs; logical decoding messages do not depend on its tables.
    let target = match list.is_empty() {
        true => String::new(),
        false => format!(" FOR TABLE {}", list.join(", ")),
    };
    format!(
        "CREATE PUBLICATION {}{target} WITH (publish = 'insert', publish_via_partition_root = true)",
        quote_ident(publication),
    )
}

/// What `ensure_*` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The object was created now.
    Created,
    /// It already existed and matches.
    Existed,
}

/// Create the publication when missing; when present, check it covers every table.
pub async fn ensure_publication(
    client: &Client,
    publication: &str,
    tables: &[TableName],
) -> Result<Ensured, CatalogError> {
    for table in tables {
        let exists = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table.quoted()])
            .await
            .map_err(query_err(format!("checking that table {table} exists")))?;
        if !exists.get::<_, bool>(0) {
            return Err(CatalogError::MissingTable {
                table: table.clone(),
            });
        }
    }
    if publication_exists(client, publication).await? {
        let rows = client
            .query(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1",
                &[&publication],
            )
            .await
            .map_err(query_err(format!(
                "listing tables of publication {publication}"
            )))?;
        let published: Vec<TableName> = rows
            .iter()
            .map(|r| TableName {
                schema: r.get(0),
                name: r.get(1),
            })
            .collect();
        let missing: Vec<String> = tables
            .iter()
            .filter(|t| !published.contains(t))
            .map(TableName::quoted)
            .collect();
        if !missing.is_empty() {
            return Err(CatalogError::PublicationIncomplete {
                publication: publication.to_owned(),
                ident: quote_ident(publication),
                missing: missing.join(", "),
            });
        }
        return Ok(Ensured::Existed);
    }
    let sql = create_publication_sql(publication, tables);
    match client.batch_execute(&sql).await {
        Ok(()) => {
            tracing::info!(publication, sql = %sql, "created publication");
            Ok(Ensured::Created)
        }
        // Another process created it between our check and our CREATE.
        Err(e) if e.code() == Some(&SqlState::DUPLICATE_OBJECT) => Ok(Ensured::Existed),
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            let role = current_user(client).await.unwrap_or_default();
            Err(CatalogError::PublicationPermission {
                role,
                publication: publication.to_owned(),
                reason: e
                    .as_db_error()
                    .map(|d| d.message().to_owned())
                    .unwrap_or_default(),
                sql,
            })
        }
        Err(e) => Err(query_err(format!("creating publication {publication}"))(e)),
    }
}

/// Whether publication `publication` exists.
pub async fn publication_exists(client: &Client, publication: &str) -> Result<bool, CatalogError> {
    Ok(client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(query_err(format!("looking up publication {publication}")))?
        .is_some())
}

/// The columns of `table` declared `NOT NULL` (empty when the table does not exist:
/// the relay reports a missing table elsewhere). Kafka Connect schemas mark them
/// `optional: false`, which pgoutput's Relation message does not carry.
pub async fn not_null_columns(
    client: &Client,
    table: &TableName,
) -> Result<Vec<String>, CatalogError> {
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_attribute a \
             JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 \
             AND NOT a.attisdropped AND a.attnotnull",
            &[&table.schema, &table.name],
        )
        .await
        .map_err(query_err(format!(
            "reading the NOT NULL columns of {table}"
        )))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The least-privilege setup a DBA runs for a dedicated pgoutbox role, one statement
/// or comment per element: a `LOGIN REPLICATION` role (placeholder password), `USAGE`
/// on each schema and `SELECT` on each outbox table. The publication is not granted
/// here: `CREATE PUBLICATION … FOR TABLE` needs ownership of every table, which
/// cannot be granted, so a table owner runs the statement `pgoutbox setup` prints.
pub fn grants_sql(role: &str, tables: &[TableName]) -> Vec<String> {
    let role_ident = quote_ident(role);
    let mut sql = vec![
        "-- pgoutbox role: logs in, opens replication connections, reads the outbox tables."
            .to_owned(),
        format!("CREATE ROLE {role_ident} WITH LOGIN REPLICATION PASSWORD 'change-me';"),
    ];
    let mut schemas: Vec<&str> = Vec::new();
    for table in tables {
        if !schemas.contains(&table.schema.as_str()) {
            schemas.push(&table.schema);
        }
    }
    for schema in schemas {
        sql.push(format!(
            "GRANT USAGE ON SCHEMA {} TO {role_ident};",
            quote_ident(schema)
        ));
    }
    for table in tables {
        sql.push(format!(
            "GRANT SELECT ON {} TO {role_ident};",
            table.quoted()
        ));
    }
    sql.push(
        "-- CREATE PUBLICATION ... FOR TABLE needs ownership of every table, which cannot be \
         granted: an owner of the tables runs the CREATE PUBLICATION statement that \
         `pgoutbox setup` prints. The role creates its replication slot itself."
            .to_owned(),
    );
    sql
}

async fn current_user(client: &Client) -> Option<String> {
    client
        .query_one("SELECT current_user::text", &[])
        .await
        .ok()
        .map(|r| r.get(0))
}

/// A row of `pg_replication_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// Slot name.
    pub name: String,
    /// Output plugin (`pgoutput`), `None` for physical slots.
    pub plugin: Option<String>,
    /// `logical` or `physical`.
    pub slot_type: String,
    /// Database of a logical slot.
    pub database: Option<String>,
    /// Whether a walsender is streaming from it now.
    pub active: bool,
    /// That walsender's pid.
    pub active_pid: Option<i32>,
    /// Whether it is a temporary slot.
    pub temporary: bool,
    /// Oldest WAL the slot retains.
    pub restart_lsn: Option<Lsn>,
    /// What the consumer confirmed.
    pub confirmed_flush_lsn: Option<Lsn>,
    /// `reserved`, `extended`, `unreserved`, `lost` (PostgreSQL 13+).
    pub wal_status: Option<String>,
    /// Whether it is a failover slot, copied to standbys (PostgreSQL 17+, else `None`).
    pub failover: Option<bool>,
    /// Whether it is such a copy, synchronized from the primary (PostgreSQL 17+).
    pub synced: Option<bool>,
}

/// Look up one slot by name.
pub async fn slot_info(client: &Client, slot: &str) -> Result<Option<SlotInfo>, CatalogError> {
    let row = client
        .query_opt(
            // failover and synced exist since PostgreSQL 17: read through jsonb so
            // the one query works (NULL) on older servers.
            "SELECT slot_name::text, plugin::text, slot_type::text, active, active_pid, temporary, \
                    restart_lsn::text, confirmed_flush_lsn::text, wal_status::text, database::text, \
                    (to_jsonb(s) ->> 'failover')::bool, (to_jsonb(s) ->> 'synced')::bool \
             FROM pg_replication_slots s WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query_err(format!("looking up replication slot {slot}")))?;
    let lsn = |v: Option<String>| v.and_then(|s| s.parse().ok());
    Ok(row.map(|r| SlotInfo {
        name: r.get(0),
        plugin: r.get(1),
        slot_type: r.get(2),
        active: r.get(3),
        active_pid: r.get(4),
        temporary: r.get(5),
        restart_lsn: lsn(r.get(6)),
        confirmed_flush_lsn: lsn(r.get(7)),
        wal_status: r.get(8),
        database: r.get(9),
        failover: r.get(10),
        synced: r.get(11),
    }))
}

/// Check an existing slot is a pgoutput logical slot.
pub fn check_slot_kind(info: &SlotInfo) -> Result<(), CatalogError> {
    if info.slot_type == "logical" && info.plugin.as_deref() == Some("pgoutput") {
        return Ok(());
    }
    Err(CatalogError::SlotMismatch {
        slot: info.name.clone(),
        kind: info.slot_type.clone(),
        plugin: info.plugin.clone().unwrap_or_default(),
    })
}

/// Check a slot belongs to the database `client` is connected to.
pub async fn check_slot_database(client: &Client, info: &SlotInfo) -> Result<(), CatalogError> {
    let db: String = client
        .query_one("SELECT current_database()::text", &[])
        .await
        .map_err(query_err("reading current_database()"))?
        .get(0);
    match &info.database {
        Some(slot_db) if *slot_db != db => Err(CatalogError::SlotDatabase {
            slot: info.name.clone(),
            slot_db: slot_db.clone(),
            db,
        }),
        _ => Ok(()),
    }
}

/// Create a persistent `pgoutput` slot when missing; a failover slot
/// ([`failover`]) when `failover` and the server is PostgreSQL 17+. An existing slot
/// is left as it is (`check` reports a missing `failover`).
pub async fn ensure_slot(
    client: &Client,
    slot: &str,
    failover: bool,
) -> Result<Ensured, CatalogError> {
    if let Some(info) = slot_info(client, slot).await? {
        check_slot_kind(&info)?;
        check_slot_database(client, &info).await?;
        return Ok(Ensured::Existed);
    }
    let version = server_version_num(client).await?;
    let sql = failover::create_slot_sql(slot, failover, version);
    match client.execute(sql.as_str(), &[]).await {
        Ok(_) => {
            let failover = failover && failover::supported(version);
            tracing::info!(slot, failover, "created replication slot");
            Ok(Ensured::Created)
        }
        Err(e) if e.code() == Some(&SqlState::DUPLICATE_OBJECT) => Ok(Ensured::Existed),
        Err(e) => Err(query_err(format!("creating replication slot {slot}"))(e)),
    }
}

/// The server's `server_version_num` (e.g. 170004).
pub async fn server_version_num(client: &Client) -> Result<i32, CatalogError> {
    let row = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(query_err("reading server_version_num".to_owned()))?;
    Ok(row.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_least_privilege() {
        let tables = [
            TableName::parse("public.outbox").unwrap(),
            TableName::parse("sales.\"Order Outbox\"").unwrap(),
            TableName::parse("public.outbox2").unwrap(),
        ];
        let sql = grants_sql("pg\"outbox", &tables);
        let statements: Vec<&str> = sql
            .iter()
            .map(String::as_str)
            .filter(|s| !s.starts_with("--"))
            .collect();
        assert_eq!(
            statements,
            [
                "CREATE ROLE \"pg\"\"outbox\" WITH LOGIN REPLICATION PASSWORD 'change-me';",
                "GRANT USAGE ON SCHEMA \"public\" TO \"pg\"\"outbox\";",
                "GRANT USAGE ON SCHEMA \"sales\" TO \"pg\"\"outbox\";",
                "GRANT SELECT ON \"public\".\"outbox\" TO \"pg\"\"outbox\";",
                "GRANT SELECT ON \"sales\".\"Order Outbox\" TO \"pg\"\"outbox\";",
                "GRANT SELECT ON \"public\".\"outbox2\" TO \"pg\"\"outbox\";",
            ]
        );
        // Comments are single SQL lines, and say who creates the publication.
        let comments: Vec<&String> = sql.iter().filter(|s| s.starts_with("--")).collect();
        assert_eq!(comments.len(), 2);
        assert!(comments.iter().all(|c| !c.contains('\n')));
        assert!(comments[1].contains("ownership"), "{}", comments[1]);
        assert!(comments[1].contains("pgoutbox setup"), "{}", comments[1]);
        assert!(!sql
            .iter()
            .any(|s| s.contains("SUPERUSER") || s.contains("ALL PRIVILEGES")));
    }

    #[test]
    fn publication_sql_is_insert_only() {
        let sql = create_publication_sql(
            "pgoutbox",
            &[
                TableName::parse("public.outbox").unwrap(),
                TableName::parse("s.o2").unwrap(),
            ],
        );
        assert_eq!(
            sql,
            "CREATE PUBLICATION \"pgoutbox\" FOR TABLE \"public\".\"outbox\", \"s\".\"o2\" WITH (publish = 'insert', publish_via_partition_root = true)"
        );
    }
}
