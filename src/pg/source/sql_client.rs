//! The ordinary SQL connection (tokio-postgres) that catalog queries, `check`,
//! `status`, `setup` and `teardown` use: TLS per `sslmode` through our rustls
//! connector, and a multi-host list walked by [`crate::pg::client::host_walk`] exactly as the
//! replication connection walks it (tokio-postgres itself knows only two of libpq's
//! six `target_session_attrs`).
//!
//! Invariants: each attempt connects to one host ([`ConnInfo::for_host`], so each
//! host gets its own password-file line); the connection task runs in the background
//! until the client is dropped; errors name the host and the fix. A listening
//! connection ([`connect_listening`]) forwards each `NOTIFY` it receives on a
//! channel, which closes when the connection ends — how poll mode learns that its
//! lock session is gone.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{Client, Notification, SimpleQueryMessage};

use crate::pg::client::channel_binding::Refusal;
use crate::pg::client::conninfo::{ChannelBinding, ConnInfo, HostAddr, SslMode};
use crate::pg::client::host_walk::{self, HostAttempt, WalkError};
use crate::pg::client::tls::{self, MakeRustlsConnect};
use crate::pg::source::catalog::{describe, CatalogError};

/// The parameters the state check reads, as reported at startup (PostgreSQL 14+).
const REPORTED: [&str; 2] = ["in_hot_standby", "default_transaction_read_only"];

/// Open an ordinary SQL connection to the first acceptable host of `info` (order and
/// `target_session_attrs` as libpq; see [`crate::pg::client::host_walk`]).
pub async fn connect(info: &ConnInfo) -> Result<Client, CatalogError> {
    Ok(connect_on(info).await?.0)
}

/// [`connect`], also saying which host it chose.
pub async fn connect_on(info: &ConnInfo) -> Result<(Client, HostAddr), CatalogError> {
    walk(info, SqlAttempt { notify: None }).await
}

/// [`connect`], forwarding the notifications of the channels the client `LISTEN`s
/// to. The receiver yields `None` once the connection has ended.
pub async fn connect_listening(
    info: &ConnInfo,
) -> Result<(Client, mpsc::UnboundedReceiver<Notification>), CatalogError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let (client, _) = walk(info, SqlAttempt { notify: Some(tx) }).await?;
    Ok((client, rx))
}

async fn walk(info: &ConnInfo, attempt: SqlAttempt) -> Result<(Client, HostAddr), CatalogError> {
    match host_walk::walk(info, &attempt).await {
        Ok((session, addr)) => Ok((session.client, addr)),
        Err(WalkError::Host(err)) => Err(err),
        Err(WalkError::NoHost(none)) => Err(none.into()),
    }
}

/// A connected client and what the server reported at startup.
struct Session {
    client: Client,
    reported: [Option<String>; 2],
}

/// The SQL connection as one attempt of a host walk; `notify` receives the
/// notifications of a listening connection.
struct SqlAttempt {
    notify: Option<mpsc::UnboundedSender<Notification>>,
}

impl HostAttempt for SqlAttempt {
    type Conn = Session;
    type Error = CatalogError;

    async fn connect(&self, single: &ConnInfo) -> Result<Session, CatalogError> {
        connect_one(single, self.notify.clone()).await
    }

    async fn query_one(&self, conn: &mut Session, sql: &str) -> Result<String, CatalogError> {
        let context = || format!("checking target_session_attrs with {sql}");
        let messages =
            conn.client
                .simple_query(sql)
                .await
                .map_err(|source| CatalogError::Query {
                    context: context(),
                    error: source,
                })?;
        let value = messages.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        });
        Ok(value.unwrap_or_default())
    }

    fn reported(&self, conn: &Session, name: &str) -> Option<String> {
        let i = REPORTED.iter().position(|r| *r == name)?;
        conn.reported[i].clone()
    }

    fn timed_out(&self, target: String, after: Duration) -> CatalogError {
        CatalogError::Timeout { target, after }
    }

    /// The server answered with a definite error (authentication, no such
    /// database), or TLS or channel binding cannot be met.
    fn is_definite(&self, err: &CatalogError) -> bool {
        match err {
            CatalogError::Connect { error: source, .. } => {
                source.as_db_error().is_some() && !err.is_transient()
            }
            CatalogError::Tls(_) | CatalogError::ChannelBinding { .. } => true,
            _ => false,
        }
    }

    fn is_transient(&self, err: &CatalogError) -> bool {
        err.is_transient()
    }
}

/// The one host of `single`, with our TLS connector when `sslmode` asks for TLS.
async fn connect_one(
    single: &ConnInfo,
    notify: Option<mpsc::UnboundedSender<Notification>>,
) -> Result<Session, CatalogError> {
    let config = single.to_tokio_postgres();
    let connected = match tls::client_config(single)? {
        Some(tls) => config
            .connect(MakeRustlsConnect::new(tls))
            .await
            .map(|(client, conn)| {
                let reported = REPORTED.map(|n| conn.parameter(n).map(str::to_owned));
                (spawn_connection(client, conn, notify), reported)
            }),
        None => config
            .connect(tokio_postgres::NoTls)
            .await
            .map(|(client, conn)| {
                let reported = REPORTED.map(|n| conn.parameter(n).map(str::to_owned));
                (spawn_connection(client, conn, notify), reported)
            }),
    };
    let (client, reported) = connected.map_err(|source| connect_error(single, source))?;
    Ok(Session { client, reported })
}

/// tokio-postgres reports an unmet `channel_binding=require` as "server did not use
/// channel binding"; say why and what to change instead.
fn connect_error(info: &ConnInfo, source: tokio_postgres::Error) -> CatalogError {
    let unbound = info.channel_binding == ChannelBinding::Require
        && source.as_db_error().is_none()
        && describe(&source).contains("channel binding");
    if !unbound {
        return CatalogError::Connect {
            target: info.redacted(),
            error: source,
        };
    }
    let target = info
        .hosts
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    let reason = if info.sslmode == SslMode::Disable {
        Refusal::NotTls { target }.to_string()
    } else {
        format!(
            "channel_binding=require, but the server at {target} did not complete a \
             SCRAM-SHA-256-PLUS exchange: the connection is not TLS (the server declined \
             SSL), or this user's pg_hba.conf method is not scram-sha-256 (no password was \
             sent); fix: use sslmode=require or stricter with ssl = on in the server and \
             scram-sha-256 in pg_hba.conf, or set channel_binding=prefer"
        )
    };
    CatalogError::ChannelBinding {
        target: info.redacted(),
        user: info.user.clone(),
        reason,
    }
}

/// Drive a tokio-postgres connection in the background; it ends when the client
/// is dropped. Notifications go to `notify` (dropped, so closed, when it ends).
fn spawn_connection<S, T>(
    client: Client,
    conn: tokio_postgres::Connection<S, T>,
    notify: Option<mpsc::UnboundedSender<Notification>>,
) -> Client
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    crate::task::spawn("catalog-connection", async move {
        // Polled message by message (not awaited whole, which logs every notice at
        // INFO through the `log` crate) so a notice is logged at its severity's level.
        let mut conn = conn;
        loop {
            match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notice(notice))) => {
                    crate::pg::client::connection::log_notice(&(&notice).into());
                }
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    if let Some(tx) = &notify {
                        let _ = tx.send(n);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    tracing::debug!(error = %crate::report::Report(&err), "catalog connection ended");
                    break;
                }
                None => break,
            }
        }
    });
    client
}
