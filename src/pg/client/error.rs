//! The errors of the wire client: [`DbError`], a server's `ErrorResponse` or
//! `NoticeResponse` field by field, and [`PgError`], everything that can go wrong on
//! a connection — with the rule that splits them into *transient* (reconnect) and
//! *definite* (stop), and the fixes for authentication failures the server reports
//! without a hint.
//!
//! Invariant: a TLS failure that surfaces as an I/O error is reported as the
//! definite [`PgError::Tls`], never as a dropped connection to retry.

use std::fmt;
use std::time::Duration;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::ErrorFields;

use crate::pg::client::frame::ProtocolError;
use crate::pg::client::host_walk::NoHostAccepted;
use crate::pg::client::tls::{self, TlsError};

/// SQLSTATE 08P01: the peer broke the protocol. Class 08 is otherwise transient
/// (connection trouble); a protocol violation does not go away by reconnecting.
const PROTOCOL_VIOLATION: &str = "08P01";

/// An `ErrorResponse` from the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbError {
    /// `ERROR`, `FATAL`, `PANIC`.
    pub severity: String,
    /// SQLSTATE, e.g. `55006` (object in use).
    pub code: String,
    /// Primary message.
    pub message: String,
    /// Optional detail.
    pub detail: Option<String>,
    /// Optional hint (often the fix).
    pub hint: Option<String>,
}

impl DbError {
    pub(crate) fn from_fields(mut fields: ErrorFields<'_>) -> Self {
        let mut err = DbError::default();
        while let Ok(Some(field)) = fields.next() {
            let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
            match field.type_() {
                b'V' => err.severity = value,
                b'S' if err.severity.is_empty() => err.severity = value,
                b'C' => err.code = value,
                b'M' => err.message = value,
                b'D' => err.detail = Some(value),
                b'H' => err.hint = Some(value),
                _ => {}
            }
        }
        err
    }

    /// The log level a notice of this severity deserves ([`log_notice`]).
    pub fn notice_level(&self) -> tracing::Level {
        match self.severity.as_str() {
            "WARNING" => tracing::Level::WARN,
            "NOTICE" | "INFO" => tracing::Level::INFO,
            // LOG, DEBUG1..5: what the server would only log for itself.
            _ => tracing::Level::DEBUG,
        }
    }
}

impl From<&tokio_postgres::error::DbError> for DbError {
    fn from(db: &tokio_postgres::error::DbError) -> Self {
        DbError {
            severity: db.severity().to_owned(),
            code: db.code().code().to_owned(),
            message: db.message().to_owned(),
            detail: db.detail().map(str::to_owned),
            hint: db.hint().map(str::to_owned),
        }
    }
}

/// Log a server notice (`NoticeResponse`) at the level of its severity: a WARNING
/// is a warning, not an info line.
pub fn log_notice(notice: &DbError) {
    let severity = notice.severity.as_str();
    match notice.notice_level() {
        tracing::Level::WARN => tracing::warn!(severity, notice = %notice, "server notice"),
        tracing::Level::INFO => tracing::info!(severity, notice = %notice, "server notice"),
        _ => tracing::debug!(severity, notice = %notice, "server notice"),
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)?;
        if let Some(detail) = &self.detail {
            write!(f, "; detail: {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DbError {}

/// Errors of the raw connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// Socket error while doing `context`.
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// TLS setup or handshake failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The server sent an `ErrorResponse` (its message and SQLSTATE say it all).
    #[error(transparent)]
    Db(#[from] DbError),
    /// The server sent bytes that do not parse.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// Authentication cannot proceed (method unsupported, password missing, SCRAM failure).
    #[error("authentication of user {user:?} failed: {reason}")]
    Auth { user: String, reason: String },
    /// The server did something the protocol does not allow at this point.
    #[error("unexpected server message while {context}: {what}")]
    Unexpected { context: String, what: String },
    /// No host of a multi-host list gave an acceptable session.
    #[error(transparent)]
    NoHost(#[from] NoHostAccepted),
    /// Connect and authentication took longer than `connect_timeout`.
    #[error("connecting to {target} timed out after {after:?}; fix: check the host and port are reachable, or raise connect_timeout")]
    Timeout { target: String, after: Duration },
    /// The server ended the replication stream (CopyDone, or CommandComplete when the
    /// walsender exits at server shutdown).
    #[error("server ended the replication stream")]
    StreamEnded,
    /// The replication connection went silent and is given up (the path may be
    /// black-holed: no FIN or RST ever arrives).
    #[error("replication connection to {target} presumed dead: {silence} for {after:?}; the limit is the session's wal_sender_timeout (change it with options=-c wal_sender_timeout=<duration> in the database URL)")]
    StreamTimeout {
        target: String,
        silence: &'static str,
        after: Duration,
    },
}

impl PgError {
    /// The SQLSTATE when the server reported the error.
    pub fn code(&self) -> Option<&str> {
        match self {
            PgError::Db(db) => Some(&db.code),
            _ => None,
        }
    }

    /// Whether reconnecting and resuming from the slot may succeed: lost connections,
    /// timeouts, server shutdown and "slot in use" are transient; authentication,
    /// configuration, missing objects and protocol violations are definite.
    pub fn is_transient(&self) -> bool {
        match self {
            PgError::Io { .. }
            | PgError::Timeout { .. }
            | PgError::StreamEnded
            | PgError::StreamTimeout { .. } => true,
            PgError::NoHost(none) => none.is_transient(),
            PgError::Db(db) => {
                (matches!(
                    db.code.get(..2),
                    // 08 connection exception, 57 operator intervention (admin shutdown,
                    // crash shutdown, cannot connect now), 53 insufficient resources.
                    Some("08" | "57" | "53")
                ) && db.code != PROTOCOL_VIOLATION)
                    || db.code == "55006"
            }
            _ => false,
        }
    }
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> PgError {
    let context = context.into();
    move |source| io_error(context, source)
}

/// An I/O error, unless TLS itself failed (e.g. the server sent an alert because it
/// rejected our client certificate): that is a definite [`PgError::Tls`], not a
/// dropped connection to retry.
pub(crate) fn io_error(context: String, source: std::io::Error) -> PgError {
    match tls::session_error(&context, &source) {
        Some(tls) => PgError::Tls(tls),
        None => PgError::Io { context, source },
    }
}

/// The fix for an authentication failure the server reports without a hint. They all
/// come with SQLSTATE 28000, so the message is what tells them apart.
pub(crate) fn auth_hint(message: &str) -> Option<&'static str> {
    if message.contains("channel binding check failed") {
        Some("the server saw a different TLS certificate than the one this client verified, so something between them terminates TLS (a proxy or an interception device); connect directly to the server, and if that device is intended, set channel_binding=disable")
    } else if message.contains("requires a valid client certificate") {
        Some("set sslcert and sslkey to a client certificate issued by a CA in the server's ssl_ca_file, with CN = the user name")
    } else if message.starts_with("certificate authentication failed") {
        Some("the client certificate's CN must be the user name (or be mapped to it in pg_ident.conf)")
    } else {
        None
    }
}

pub(crate) fn with_auth_hint(err: PgError) -> PgError {
    match err {
        PgError::Db(mut db) if db.hint.is_none() => {
            db.hint = auth_hint(&db.message).map(str::to_owned);
            PgError::Db(db)
        }
        other => other,
    }
}
