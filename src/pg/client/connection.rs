//! A raw PostgreSQL frontend/backend connection: transport, startup, authentication
//! and simple queries.
//!
//! Owns everything up to the point where a replication stream starts. tokio-postgres
//! cannot be used for the replication connection (it cannot enter CopyBoth mode), so
//! this module speaks the protocol directly with `postgres_protocol`'s codecs:
//!
//! ```text
//!  TCP ─(SSLRequest → rustls per sslmode, or rustls at once: sslnegotiation=direct)─
//!  StartupMessage ─ auth (trust │ cleartext │ md5 │ SCRAM-SHA-256 │ SCRAM-SHA-256-PLUS) ─
//!  ParameterStatus… ─ ReadyForQuery ─ Query/… ─ (CopyBoth)
//! ```
//!
//! Channel binding follows `channel_binding` (see [`crate::pg::client::channel_binding`]): over
//! TLS, SCRAM-SHA-256-PLUS binds the login to the server certificate the TLS session
//! saw; with `require`, a connection that cannot bind fails before any password is sent.
//!
//! With several hosts, [`PgConnection::connect`] walks them with
//! [`crate::pg::client::host_walk`] (order, `target_session_attrs`, one error listing every
//! host); TCP keepalives follow the `keepalives*` settings.
//!
//! Invariants: every wait on the server is bounded by `connect_timeout` during
//! startup, so a wrong password or a silent server gives an error, never a hang; an
//! `ErrorResponse` always becomes [`PgError::Db`] with SQLSTATE, message, detail and
//! hint; the password never appears in an error.
//! See <https://www.postgresql.org/docs/current/protocol-flow.html>.

use crate::pg::client::error::{io, io_error, with_auth_hint};

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::sasl::ScramSha256;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pg::client::channel_binding::{self, Plan, Refusal, TlsBinding};
use crate::pg::client::conninfo::{
    ChannelBinding, ConnInfo, Host, HostAddr, SslMode, SslNegotiation,
};
use crate::pg::client::frame::{parse_backend, Backend};
use crate::pg::client::host_walk::{self, HostAttempt, WalkError};
use crate::pg::client::tls::{self};

pub use crate::pg::client::error::{log_notice, DbError, PgError};

/// A byte stream to the server: plain TCP, TLS, or a Unix socket.
pub trait Transport: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Transport for T {}

/// One row of a simple-query result; all values are text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleRow {
    /// Column names, in order.
    pub columns: std::sync::Arc<Vec<String>>,
    /// Values, `None` for SQL NULL.
    pub values: Vec<Option<String>>,
}

impl SimpleRow {
    /// The value of column `name`, if present and not NULL.
    pub fn get(&self, name: &str) -> Option<&str> {
        let idx = self.columns.iter().position(|c| c == name)?;
        self.values.get(idx)?.as_deref()
    }
}

/// An authenticated connection, ready for queries.
pub struct PgConnection {
    stream: Box<dyn Transport>,
    /// The TCP socket under `stream` (plain or TLS; `None` over a Unix socket), for
    /// socket options set while streaming. Valid as long as `stream` is.
    tcp_fd: Option<RawFd>,
    read_buf: BytesMut,
    write_buf: BytesMut,
    params: HashMap<String, String>,
    target: String,
    host: HostAddr,
}

impl PgConnection {
    /// Connect to the first acceptable host of `info` (in the order and by the
    /// `target_session_attrs` of [`crate::pg::client::host_walk`]) and authenticate. With
    /// `replication` the session is a walsender (`replication=database`), on which the
    /// state check's SQL runs in simple-query mode (PostgreSQL 10+).
    pub async fn connect(info: &ConnInfo, replication: bool) -> Result<Self, PgError> {
        match host_walk::walk(info, &RawAttempt { replication }).await {
            Ok((conn, _)) => Ok(conn),
            Err(WalkError::Host(err)) => Err(err),
            Err(WalkError::NoHost(none)) => Err(none.into()),
        }
    }

    /// The one host of `single` (see [`ConnInfo::for_host`]).
    async fn connect_one(single: &ConnInfo, replication: bool) -> Result<Self, PgError> {
        let addr = single.hosts.first().ok_or_else(|| PgError::Unexpected {
            context: "connecting".into(),
            what: "no host given".into(),
        })?;
        let target = describe(addr);
        let (stream, binding, tcp_fd): (Box<dyn Transport>, TlsBinding, _) = match &addr.host {
            Host::Unix(dir) => {
                let path = dir.join(format!(".s.PGSQL.{}", addr.port));
                let sock = tokio::net::UnixStream::connect(&path)
                    .await
                    .map_err(io(format!("connecting to {target}")))?;
                (Box::new(sock), TlsBinding::NotTls, None)
            }
            Host::Tcp(host) => {
                let tcp = connect_tcp(single, addr, host, &target).await?;
                let fd = tcp.as_raw_fd();
                let (stream, binding) = Self::maybe_tls(single, host, &target, tcp).await?;
                (stream, binding, Some(fd))
            }
        };
        let mut conn = PgConnection {
            stream,
            tcp_fd,
            read_buf: BytesMut::with_capacity(64 * 1024),
            write_buf: BytesMut::new(),
            params: HashMap::new(),
            target,
            host: addr.clone(),
        };
        conn.startup(single, replication, &binding).await?;
        Ok(conn)
    }

    /// Negotiate TLS per sslmode: SSLRequest, then 'S' (go TLS) or 'N' (plain).
    /// Returns the stream and what it offers for channel binding.
    async fn maybe_tls(
        info: &ConnInfo,
        host: &str,
        target: &str,
        mut tcp: TcpStream,
    ) -> Result<(Box<dyn Transport>, TlsBinding), PgError> {
        let plain = |tcp: TcpStream| -> (Box<dyn Transport>, TlsBinding) {
            (Box::new(tcp), TlsBinding::NotTls)
        };
        let Some(config) = tls::client_config(info)? else {
            return Ok(plain(tcp));
        };
        if matches!(info.sslmode, SslMode::Allow) {
            // allow = "plain first"; plain is what we do unless the server insists.
            return Ok(plain(tcp));
        }
        if info.sslnegotiation == SslNegotiation::Direct {
            // TLS at once, no SSLRequest (PostgreSQL 17+; the config carries the
            // ALPN protocol the server requires). Parsing guaranteed an sslmode
            // without a plain fallback.
            let stream = tls::handshake(config, host, tcp).await?;
            let binding = tls::channel_binding(&stream);
            return Ok((Box::new(stream), binding));
        }
        let mut req = BytesMut::new();
        frontend::ssl_request(&mut req);
        tcp.write_all(&req)
            .await
            .map_err(io(format!("sending SSLRequest to {target}")))?;
        let answer = tcp
            .read_u8()
            .await
            .map_err(io(format!("reading SSLRequest answer from {target}")))?;
        match answer {
            b'S' => {
                let stream = tls::handshake(config, host, tcp).await?;
                let binding = tls::channel_binding(&stream);
                Ok((Box::new(stream), binding))
            }
            b'N' if matches!(info.sslmode, SslMode::Prefer) => Ok(plain(tcp)),
            b'N' => Err(PgError::Unexpected {
                context: format!("negotiating TLS with {target}"),
                what: format!(
                    "server does not support SSL but sslmode={}; fix: enable ssl on the server or use sslmode=prefer",
                    info.sslmode.as_str()
                ),
            }),
            other => Err(PgError::Unexpected {
                context: format!("negotiating TLS with {target}"),
                what: format!("answer byte {other:#04x} to SSLRequest"),
            }),
        }
    }

    async fn startup(
        &mut self,
        info: &ConnInfo,
        replication: bool,
        binding: &TlsBinding,
    ) -> Result<(), PgError> {
        let mut params: Vec<(&str, &str)> = vec![
            ("user", &info.user),
            ("database", &info.dbname),
            ("client_encoding", "UTF8"),
            // pgoutput renders values with the session's output settings; ISO dates
            // are what the record timestamp parser reads (a DateStyle set in the
            // server config would otherwise change the text of `created_at`).
            ("DateStyle", "ISO"),
        ];
        if replication {
            params.push(("replication", "database"));
        }
        params.push((
            "application_name",
            info.application_name.as_deref().unwrap_or("pgoutbox"),
        ));
        if let Some(options) = &info.options {
            params.push(("options", options));
        }
        frontend::startup_message(params.iter().copied(), &mut self.write_buf)
            .map_err(io("encoding StartupMessage"))?;
        self.flush().await?;
        self.authenticate(info, binding).await?;
        loop {
            match self.read_message("starting up").await? {
                Message::ReadyForQuery(_) => return Ok(()),
                Message::BackendKeyData(_) => {}
                other => self.unexpected("starting up", other)?,
            }
        }
    }

    async fn authenticate(&mut self, info: &ConnInfo, binding: &TlsBinding) -> Result<(), PgError> {
        let auth_err = |reason: String| PgError::Auth {
            user: info.user.clone(),
            reason,
        };
        let password = || {
            info.password.as_ref().map(|p| p.expose().as_bytes().to_vec()).ok_or_else(|| {
                auth_err(format!(
                    "the server asks for a password for user {:?} and none was given; fix: put it in the URL, PGPASSWORD or ~/.pgpass",
                    info.user
                ))
            })
        };
        let require = info.channel_binding == ChannelBinding::Require;
        let target = self.target.clone();
        // With channel_binding=require, refuse any step that cannot bind before a
        // password leaves the client (libpq does the same).
        let refuse_unbound = |method: &'static str| -> Result<(), PgError> {
            if !require {
                return Ok(());
            }
            let refusal = match binding {
                TlsBinding::NotTls => Refusal::NotTls {
                    target: target.clone(),
                },
                _ => Refusal::Method {
                    target: target.clone(),
                    method,
                },
            };
            Err(auth_err(refusal.to_string()))
        };
        let mut bound = false;
        loop {
            let message = self
                .read_message("authenticating")
                .await
                .map_err(with_auth_hint)?;
            match message {
                Message::AuthenticationOk => {
                    if !bound {
                        refuse_unbound("no password (trust or cert)")?;
                    }
                    return Ok(());
                }
                Message::AuthenticationCleartextPassword => {
                    refuse_unbound("cleartext password")?;
                    frontend::password_message(&password()?, &mut self.write_buf)
                        .map_err(io("encoding password message"))?;
                    self.flush().await?;
                }
                Message::AuthenticationMd5Password(body) => {
                    refuse_unbound("md5")?;
                    let hash = postgres_protocol::authentication::md5_hash(
                        info.user.as_bytes(),
                        &password()?,
                        body.salt(),
                    );
                    frontend::password_message(hash.as_bytes(), &mut self.write_buf)
                        .map_err(io("encoding password message"))?;
                    self.flush().await?;
                }
                Message::AuthenticationSasl(body) => {
                    let mut offered = Vec::new();
                    let mut mechanisms = body.mechanisms();
                    while let Some(m) = mechanisms.next().map_err(io("reading SASL mechanisms"))? {
                        offered.push(m.to_owned());
                    }
                    let plan =
                        channel_binding::plan(info.channel_binding, binding, &offered, &self.target)
                            .map_err(|refusal| auth_err(refusal.to_string()))?;
                    bound = plan.is_bound();
                    tracing::debug!(mechanism = plan.mechanism, target = %self.target, "authenticating with SASL");
                    self.scram(&password()?, plan).await.map_err(|e| match e {
                        PgError::Io { source, .. } if source.kind() != std::io::ErrorKind::UnexpectedEof => {
                            auth_err(format!("SCRAM exchange failed: {source}"))
                        }
                        other => with_auth_hint(other),
                    })?;
                }
                Message::AuthenticationKerberosV5
                | Message::AuthenticationScmCredential
                | Message::AuthenticationGss
                | Message::AuthenticationSspi => {
                    return Err(auth_err(
                        "the server asks for GSSAPI/SSPI/Kerberos authentication, which pgoutbox does not support; fix: use scram-sha-256 for this user in pg_hba.conf".into(),
                    ))
                }
                other => self.unexpected("authenticating", other)?,
            }
        }
    }

    /// SCRAM-SHA-256 (RFC 5802/7677), bound to the TLS channel when `plan` says so
    /// (SCRAM-SHA-256-PLUS, RFC 5929 `tls-server-end-point`). With binding, the
    /// server checks the certificate hash inside the client proof, so a login
    /// relayed through a TLS interceptor fails even with the right password.
    async fn scram(&mut self, password: &[u8], plan: Plan) -> Result<(), PgError> {
        let mut scram = ScramSha256::new(password, plan.binding);
        frontend::sasl_initial_response(plan.mechanism, scram.message(), &mut self.write_buf)
            .map_err(io("encoding SASLInitialResponse"))?;
        self.flush().await?;
        match self.read_message("authenticating (SCRAM)").await? {
            Message::AuthenticationSaslContinue(body) => scram
                .update(body.data())
                .map_err(io("processing SCRAM server-first message"))?,
            other => return self.unexpected("authenticating (SCRAM)", other),
        }
        frontend::sasl_response(scram.message(), &mut self.write_buf)
            .map_err(io("encoding SASLResponse"))?;
        self.flush().await?;
        match self.read_message("authenticating (SCRAM)").await? {
            Message::AuthenticationSaslFinal(body) => scram
                .finish(body.data())
                .map_err(io("verifying SCRAM server signature")),
            other => self.unexpected("authenticating (SCRAM)", other),
        }
    }

    fn unexpected<T>(&self, context: &str, message: Message) -> Result<T, PgError> {
        Err(PgError::Unexpected {
            context: context.to_owned(),
            what: message_name(&message).to_owned(),
        })
    }

    /// Write out everything queued in the write buffer.
    pub(crate) async fn flush(&mut self) -> Result<(), PgError> {
        let target = &self.target;
        self.stream
            .write_all(&self.write_buf)
            .await
            .map_err(|source| io_error(format!("writing to {target}"), source))?;
        self.write_buf.clear();
        self.stream
            .flush()
            .await
            .map_err(io(format!("writing to {}", self.target)))
    }

    /// Read the next backend message, handling the asynchronous ones
    /// (ParameterStatus, NoticeResponse, NotificationResponse) and turning
    /// ErrorResponse into [`PgError::Db`].
    pub(crate) async fn read_backend(&mut self, context: &str) -> Result<Backend, PgError> {
        loop {
            if let Some(backend) = parse_backend(&mut self.read_buf)? {
                match backend {
                    Backend::Message(Message::ErrorResponse(body)) => {
                        return Err(PgError::Db(DbError::from_fields(body.fields())))
                    }
                    Backend::Message(Message::ParameterStatus(body)) => {
                        if let (Ok(name), Ok(value)) = (body.name(), body.value()) {
                            self.params.insert(name.to_owned(), value.to_owned());
                        }
                    }
                    Backend::Message(Message::NoticeResponse(body)) => {
                        log_notice(&DbError::from_fields(body.fields()));
                    }
                    Backend::Message(Message::NotificationResponse(_)) => {}
                    other => return Ok(other),
                }
                continue;
            }
            self.read_buf.reserve(64 * 1024);
            let n = self
                .stream
                .read_buf(&mut self.read_buf)
                .await
                .map_err(io(format!("{context} ({})", self.target)))?;
            if n == 0 {
                return Err(PgError::Io {
                    context: format!("{context} ({})", self.target),
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                });
            }
        }
    }

    async fn read_message(&mut self, context: &str) -> Result<Message, PgError> {
        match self.read_backend(context).await? {
            Backend::Message(m) => Ok(m),
            Backend::CopyBothResponse => Err(PgError::Unexpected {
                context: context.to_owned(),
                what: "CopyBothResponse".into(),
            }),
        }
    }

    /// Run one simple-protocol query and collect its rows (all result sets
    /// concatenated). The error of a failed query is returned after the server is
    /// ready again, so the connection stays usable.
    pub async fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleRow>, PgError> {
        frontend::query(sql, &mut self.write_buf).map_err(io("encoding Query"))?;
        self.flush().await?;
        let mut rows = Vec::new();
        let mut columns = std::sync::Arc::new(Vec::new());
        let mut failure = None;
        loop {
            let msg = match self.read_message("running a query").await {
                Ok(m) => m,
                Err(PgError::Db(db)) => {
                    failure = Some(PgError::Db(db));
                    continue;
                }
                Err(e) => return Err(e),
            };
            match msg {
                Message::RowDescription(body) => {
                    let names: Vec<String> = body
                        .fields()
                        .map(|f| Ok(f.name().to_owned()))
                        .collect()
                        .map_err(io("reading RowDescription"))?;
                    columns = std::sync::Arc::new(names);
                }
                Message::DataRow(body) => {
                    let buf = body.buffer();
                    let values: Vec<Option<String>> = body
                        .ranges()
                        .map(|r| {
                            Ok(r.and_then(|r| buf.get(r))
                                .map(|v| String::from_utf8_lossy(v).into_owned()))
                        })
                        .collect()
                        .map_err(io("reading DataRow"))?;
                    rows.push(SimpleRow {
                        columns: columns.clone(),
                        values,
                    });
                }
                Message::CommandComplete(_) | Message::EmptyQueryResponse => {}
                Message::ReadyForQuery(_) => {
                    return match failure {
                        Some(err) => Err(err),
                        None => Ok(rows),
                    }
                }
                other => self.unexpected("running a query", other)?,
            }
        }
    }

    /// A server parameter reported at startup (e.g. `server_version`).
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    /// `server_version` as a number like `server_version_num` (150018 for 15.18).
    pub fn server_version_num(&self) -> Option<u32> {
        parse_server_version(self.parameter("server_version")?)
    }

    /// Human-readable target (`host:port`), without credentials.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The host this connection is on (of several, the one the walk chose).
    pub fn host(&self) -> &HostAddr {
        &self.host
    }

    /// Queue a `Query` message without waiting for its result.
    pub(crate) fn queue_query(&mut self, sql: &str) -> Result<(), PgError> {
        frontend::query(sql, &mut self.write_buf).map_err(io("encoding Query"))
    }

    /// Give up the connection: the transport, any bytes already read, the target's
    /// description and the TCP socket under the transport (valid while it is).
    pub(crate) fn into_parts(self) -> (Box<dyn Transport>, BytesMut, String, Option<RawFd>) {
        (self.stream, self.read_buf, self.target, self.tcp_fd)
    }
}

/// The replication (or plain) connection as one attempt of a host walk.
struct RawAttempt {
    replication: bool,
}

impl HostAttempt for RawAttempt {
    type Conn = PgConnection;
    type Error = PgError;

    async fn connect(&self, single: &ConnInfo) -> Result<PgConnection, PgError> {
        PgConnection::connect_one(single, self.replication).await
    }

    async fn query_one(&self, conn: &mut PgConnection, sql: &str) -> Result<String, PgError> {
        let rows = conn.simple_query(sql).await?;
        let value = rows
            .first()
            .and_then(|row| row.values.first().cloned().flatten());
        value.ok_or_else(|| PgError::Unexpected {
            context: format!("checking target_session_attrs on {}", conn.target),
            what: format!("no value from {sql}"),
        })
    }

    fn reported(&self, conn: &PgConnection, name: &str) -> Option<String> {
        conn.parameter(name).map(str::to_owned)
    }

    fn timed_out(&self, target: String, after: Duration) -> PgError {
        PgError::Timeout { target, after }
    }

    /// The server answered and refused: authentication, or a definite server error
    /// (a missing database); transient server errors move on to the next host.
    fn is_definite(&self, err: &PgError) -> bool {
        matches!(err, PgError::Auth { .. }) || matches!(err, PgError::Db(_) if !err.is_transient())
    }

    fn is_transient(&self, err: &PgError) -> bool {
        err.is_transient()
    }
}

/// TCP to `addr` (its `hostaddr` if set, else the name resolved), with no delay and
/// the keepalives of `info`.
async fn connect_tcp(
    info: &ConnInfo,
    addr: &HostAddr,
    host: &str,
    target: &str,
) -> Result<TcpStream, PgError> {
    let connected = match addr.hostaddr {
        Some(ip) => TcpStream::connect((ip, addr.port)).await,
        None => TcpStream::connect((host, addr.port)).await,
    };
    let tcp = connected.map_err(io(format!("connecting to {target}")))?;
    let _ = tcp.set_nodelay(true);
    if let Some(keepalive) = info.keepalives.to_socket2() {
        socket2::SockRef::from(&tcp)
            .set_tcp_keepalive(&keepalive)
            .map_err(io(format!("setting TCP keepalives on {target}")))?;
    }
    Ok(tcp)
}

fn describe(addr: &HostAddr) -> String {
    addr.to_string()
}

/// `"15.18 (Debian …)"` → 150018, `"16beta1"` → 160000, `"9.6.24"` → 90624.
pub fn parse_server_version(text: &str) -> Option<u32> {
    let digits_dots: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = digits_dots.split('.').filter(|p| !p.is_empty());
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    if major >= 10 {
        Some(major * 10000 + minor)
    } else {
        let patch: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Some(major * 10000 + minor * 100 + patch)
    }
}

fn message_name(message: &Message) -> &'static str {
    match message {
        Message::AuthenticationOk => "AuthenticationOk",
        Message::BackendKeyData(_) => "BackendKeyData",
        Message::CommandComplete(_) => "CommandComplete",
        Message::CopyData(_) => "CopyData",
        Message::CopyDone => "CopyDone",
        Message::CopyInResponse(_) => "CopyInResponse",
        Message::CopyOutResponse(_) => "CopyOutResponse",
        Message::DataRow(_) => "DataRow",
        Message::EmptyQueryResponse => "EmptyQueryResponse",
        Message::ReadyForQuery(_) => "ReadyForQuery",
        Message::RowDescription(_) => "RowDescription",
        _ => "message",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_log_at_their_severity() {
        let notice = |severity: &str| DbError {
            severity: severity.to_owned(),
            ..DbError::default()
        };
        assert_eq!(notice("WARNING").notice_level(), tracing::Level::WARN);
        assert_eq!(notice("NOTICE").notice_level(), tracing::Level::INFO);
        assert_eq!(notice("INFO").notice_level(), tracing::Level::INFO);
        assert_eq!(notice("LOG").notice_level(), tracing::Level::DEBUG);
        assert_eq!(notice("DEBUG1").notice_level(), tracing::Level::DEBUG);
    }

    #[test]
    fn server_versions_parse() {
        assert_eq!(
            parse_server_version("15.18 (Debian 15.18-0+deb12u1)"),
            Some(150018)
        );
        assert_eq!(parse_server_version("16beta1"), Some(160000));
        assert_eq!(parse_server_version("9.6.24"), Some(90624));
        assert_eq!(parse_server_version("18.0"), Some(180000));
        assert_eq!(parse_server_version("garbage"), None);
    }

    #[test]
    fn transient_classification() {
        let db = |code: &str| {
            PgError::Db(DbError {
                code: code.into(),
                ..Default::default()
            })
        };
        assert!(db("57P01").is_transient());
        assert!(db("55006").is_transient());
        assert!(db("08006").is_transient());
        assert!(!db("28P01").is_transient());
        assert!(!db("42704").is_transient());
        assert!(PgError::StreamEnded.is_transient());
    }

    #[test]
    fn db_error_display_has_code_detail_hint() {
        let e = DbError {
            severity: "ERROR".into(),
            code: "42704".into(),
            message: "replication slot \"x\" does not exist".into(),
            detail: Some("d".into()),
            hint: Some("h".into()),
        };
        assert_eq!(
            e.to_string(),
            "replication slot \"x\" does not exist (SQLSTATE 42704); detail: d; hint: h"
        );
    }
}
