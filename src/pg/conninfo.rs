//! `ConnInfo`: where and how to connect to PostgreSQL, parsed the way libpq does.
//!
//! Owns the parsing of libpq connection strings, in both of libpq's forms:
//!
//! * URLs, `postgres://` or `postgresql://`
//!   `[user[:password]@][host[:port][,host[:port]...]][/dbname][?keyword=value&...]`,
//!   percent-decoded, IPv6 hosts in brackets, query parameters named like the keywords;
//! * keyword/value strings, `host=db port = 5433 password='it\'s'`, whitespace-separated,
//!   values optionally single-quoted with `\'` and `\\` escapes.
//!
//! It also owns the fallbacks libpq applies: a value in the string wins over the
//! matching `PG*` environment variable, which wins over the built-in default, and when
//! no password is given the password file (`PGPASSFILE`, else `~/.pgpass`) is consulted.
//! Turning the result into a `tokio_postgres::Config` is here too, so the replication
//! client and the ordinary SQL client always agree on one description.
//!
//! Invariants:
//!
//! * a parsed [`ConnInfo`] has at least one host, each with a resolved port;
//! * the password lives only in a [`Secret`]: `Debug` shows `[redacted]`,
//!   [`ConnInfo::redacted`] and `Display` leave it out, and no [`ConnInfoError`] ever
//!   carries it, nor text that looks like a fragment of a mistyped password (see
//!   [`ConnInfoError::Withheld`] and [`ConnInfoError::MalformedUrl`]);
//! * parsing never panics, whatever the input.
//!
//! libpq behaviour that is deliberately not replicated is listed on [`ConnInfo::parse`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::secret::Secret;

/// The port used when neither the string nor `PGPORT` names one.
pub const DEFAULT_PORT: u16 = 5432;

/// The host used when neither the string nor `PGHOST` names one (libpq would use its
/// compiled-in Unix socket directory instead).
pub const DEFAULT_HOST: &str = "localhost";

/// The user name used when the string, `PGUSER` and `USER` are all silent.
pub const DEFAULT_USER: &str = "postgres";

/// The keywords accepted in a keyword/value string and as URL query parameters.
pub const KEYWORDS: &[&str] = &[
    "host",
    "port",
    "user",
    "password",
    "passfile",
    "dbname",
    "sslmode",
    "channel_binding",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
    "options",
    "connect_timeout",
];

/// `KEYWORDS` as one line, for error messages.
const ACCEPTED: &str = "host, port, user, password, passfile, dbname, sslmode, channel_binding, \
                        sslrootcert, sslcert, sslkey, application_name, options, connect_timeout";

const PORT_EXPECTED: &str = "an integer from 1 to 65535";
const SSLMODE_EXPECTED: &str = "one of disable, allow, prefer, require, verify-ca, verify-full";
const CHANNEL_BINDING_EXPECTED: &str = "one of disable, prefer, require";
const TIMEOUT_EXPECTED: &str = "an integer number of seconds (0 or less waits forever)";

/// Unix socket directories treated as "the default one", so that they match a
/// `localhost` entry in the password file as libpq's compiled-in directory does.
const DEFAULT_SOCKET_DIRS: &[&str] = &["/tmp", "/var/run/postgresql", "/run/postgresql"];

/// A fully resolved description of a PostgreSQL connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// The servers to try, in order; never empty after parsing.
    pub hosts: Vec<HostAddr>,
    /// The role to log in as.
    pub user: String,
    /// The password, from the string, `PGPASSWORD` or the password file.
    pub password: Option<Secret>,
    /// The database to connect to.
    pub dbname: String,
    /// Whether and how strictly to use TLS.
    pub sslmode: SslMode,
    /// Whether SCRAM authentication binds to the TLS channel (libpq `channel_binding`).
    pub channel_binding: ChannelBinding,
    /// CA certificate(s) used to verify the server (libpq `sslrootcert`).
    pub sslrootcert: Option<PathBuf>,
    /// Client certificate (libpq `sslcert`).
    pub sslcert: Option<PathBuf>,
    /// Client private key (libpq `sslkey`).
    pub sslkey: Option<PathBuf>,
    /// Reported to the server as `application_name`.
    pub application_name: Option<String>,
    /// Server options sent at startup, e.g. `-c wal_sender_timeout=2s`.
    pub options: Option<String>,
    /// Bound on each connection attempt; `None` waits forever.
    pub connect_timeout: Option<Duration>,
}

/// One server to try: a host and the port to use with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostAddr {
    /// Where the server is.
    pub host: Host,
    /// TCP port, or for a Unix socket the number in the socket file name.
    pub port: u16,
}

/// A TCP host name or address, or a Unix-socket directory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A host name or an IP address (IPv6 without brackets).
    Tcp(String),
    /// A directory holding the server's socket `.s.PGSQL.<port>`; any host written
    /// with a leading `/` is one.
    Unix(PathBuf),
}

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SslMode {
    /// Never use TLS.
    Disable,
    /// Plain first, TLS if the server insists.
    Allow,
    /// TLS if the server offers it, else plain (the default).
    #[default]
    Prefer,
    /// TLS, without checking the server certificate.
    Require,
    /// TLS, and the certificate must chain to a trusted CA.
    VerifyCa,
    /// TLS, a trusted certificate, and its name must match the host.
    VerifyFull,
}

/// libpq's `channel_binding`: whether SCRAM-SHA-256 authentication is bound to the
/// TLS channel (`SCRAM-SHA-256-PLUS`, `tls-server-end-point`), which proves that the
/// server that checked the password is the one at the other end of this TLS session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChannelBinding {
    /// Never bind, even when the server offers it.
    Disable,
    /// Bind when the connection is TLS and the server offers it (the default).
    #[default]
    Prefer,
    /// Refuse to log in unless the server completes a bound SCRAM exchange: over a
    /// connection without TLS, or with any other authentication method, the
    /// connection fails before a password is sent.
    Require,
}

/// Where a rejected value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The connection string itself.
    ConnString,
    /// The named environment variable.
    Env(&'static str),
}

/// Why a connection string could not be turned into a [`ConnInfo`]. No variant holds
/// the password or text that may be part of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnInfoError {
    /// A keyword or URL query parameter that is not accepted.
    #[error("unknown connection parameter \"{keyword}\" (accepted: {ACCEPTED})")]
    UnknownKeyword {
        /// The keyword as written.
        keyword: String,
    },
    /// A word in a keyword/value string (or a URL query) that is not followed by `=`.
    #[error("missing \"=\" after \"{keyword}\" in connection string")]
    MissingEquals {
        /// The word as written.
        keyword: String,
    },
    /// An unknown keyword or a word without `=` whose text is not shown: it follows an
    /// unquoted password, or it is not shaped like any keyword, so it may be part of a
    /// password.
    #[error(
        "unexpected text in connection string, not shown as it may be part of a password \
         (quote values with spaces as key='...', percent-encode special characters in URLs; \
         accepted parameters: {ACCEPTED})"
    )]
    Withheld,
    /// A value that is not valid for its key.
    #[error("invalid {key} \"{value}\" from {origin}: expected {expected}")]
    InvalidValue {
        /// The keyword, e.g. `port`.
        key: &'static str,
        /// The value as found.
        value: String,
        /// Where it was found.
        origin: Origin,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// The port list fits neither "one port for all hosts" nor "one port per host".
    #[error("could not match {ports} port numbers to {hosts} hosts")]
    PortCountMismatch {
        /// How many ports were given.
        ports: usize,
        /// How many hosts were given.
        hosts: usize,
    },
    /// A URL component with a bad `%` escape, `%00`, or bytes that are not UTF-8.
    #[error("invalid percent-encoding in URL {component}")]
    PercentEncoding {
        /// Which part of the URL, e.g. `password`.
        component: &'static str,
    },
    /// A URL that looks like a user name or password with an unencoded `/`, `?` or `@`
    /// broke its structure; the offending text is not shown.
    #[error(
        "malformed URL, details not shown as they may contain the password \
         (percent-encode \"/\", \"?\", \"@\" and \":\" in the user name and password)"
    )]
    MalformedUrl,
    /// Any other syntax error; the message never quotes the input.
    #[error("invalid connection string: {0}")]
    Syntax(&'static str),
}

impl ConnInfo {
    /// Parse a URL (`postgres://` or `postgresql://`) or a keyword/value string
    /// (`host=… port=…`), filling unset fields from the process environment (PGHOST,
    /// PGPORT, PGUSER, PGPASSWORD, PGPASSFILE, PGDATABASE, PGSSLMODE, PGCHANNELBINDING,
    /// PGSSLROOTCERT, PGSSLCERT, PGSSLKEY, PGAPPNAME, PGOPTIONS, PGCONNECT_TIMEOUT) and
    /// then defaults.
    ///
    /// Precedence is string > environment > default. Defaults: host `localhost`, port
    /// 5432, user `PGUSER`, else `USER`, else `postgres`; dbname = user; sslmode
    /// `prefer`; channel_binding `prefer`. An empty value (`host=''`, `postgres://:5432`, an empty variable) counts
    /// as unset. When a keyword appears twice the later one wins; URL query parameters
    /// override the parts before the `?`.
    ///
    /// Lists: `host` and `port` take comma-separated lists (in a URL also
    /// `h1:5432,h2:5433`); one port applies to every host, otherwise there must be one
    /// per host, and an empty entry means the default.
    ///
    /// `connect_timeout` is whole seconds; 0 or negative means wait forever and 1 is
    /// raised to 2, as libpq does.
    ///
    /// Password file: when neither the string nor `PGPASSWORD` gives a password, the
    /// file named by `passfile`, else `PGPASSFILE`, else `$HOME/.pgpass`
    /// (`%APPDATA%\postgresql\pgpass.conf` on Windows) is read. Lines are
    /// `hostname:port:database:username:password`, `*` matches any value in the first
    /// four fields, `\:` and `\\` escape, lines starting with `#` are comments, and the
    /// first matching line wins. Hosts are tried in order and the first host with a match
    /// supplies the one password used for all of them. A Unix socket in one of the usual
    /// default directories matches `localhost`. A missing or unreadable file is ignored.
    /// Unlike libpq, the file's permissions are not checked: secrets mounted by container
    /// orchestrators are commonly group/world-readable (0644) and libpq would silently
    /// skip them.
    ///
    /// Not replicated from libpq: other keywords (`hostaddr`, `service`,
    /// `target_session_attrs`, `replication`, `sslpassword`, ...) and their variables are
    /// rejected or ignored; a `dbname` that is itself a connection string is not
    /// expanded; the default host is `localhost`, not a Unix socket; the URL form
    /// `ssl=true` is not translated; abstract (`@`) Unix sockets are not recognised;
    /// in a URL the user info ends at the last `@` before the first `/` or `?`
    /// (libpq stops at the first `@`).
    pub fn parse(s: &str) -> Result<Self, ConnInfoError> {
        Self::parse_with_env(s, &|name| std::env::var(name).ok())
    }

    /// Same as [`ConnInfo::parse`], with an injected environment lookup (for tests, and
    /// so callers can control it). `env` is asked for the `PG*` variables above and for
    /// `USER`, `HOME` and (on Windows) `APPDATA`. The password file, if any, is still
    /// read from the real file system.
    pub fn parse_with_env(
        s: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConnInfoError> {
        let s = s.trim();
        let mut raw = Raw::default();
        match strip_scheme(s) {
            Some(rest) => parse_url(rest, &mut raw)?,
            None => parse_keyword_value(s, &mut raw)?,
        }
        resolve(raw, env)
    }

    /// The connection described for humans and logs: URL form without the password, e.g.
    /// `postgres://app@db:5432/shop?sslmode=require`. Unix-socket hosts move to the
    /// query (`postgres://app@/shop?host=/tmp&port=5432&sslmode=prefer`). Parsing the
    /// result gives back the same `ConnInfo` minus the password (host names containing
    /// commas aside).
    pub fn redacted(&self) -> String {
        let mut out = String::from("postgres://");
        out.push_str(&encode(&self.user, b""));
        out.push('@');
        let mut query: Vec<(&str, String)> = Vec::new();
        if self.hosts.iter().all(|h| matches!(h.host, Host::Tcp(_))) {
            for (i, h) in self.hosts.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let Host::Tcp(name) = &h.host {
                    if name.contains(':') {
                        out.push('[');
                        out.push_str(&encode(name, b":"));
                        out.push(']');
                    } else {
                        out.push_str(&encode(name, b""));
                    }
                }
                out.push(':');
                out.push_str(&h.port.to_string());
            }
        } else {
            let hosts: Vec<String> = self
                .hosts
                .iter()
                .map(|h| encode(&h.host.to_string(), QUERY_KEEP_IN_LIST))
                .collect();
            let ports: Vec<String> = self.hosts.iter().map(|h| h.port.to_string()).collect();
            query.push(("host", hosts.join(",")));
            query.push(("port", ports.join(",")));
        }
        out.push('/');
        out.push_str(&encode(&self.dbname, b""));

        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.to_string_lossy().into_owned());
        query.push(("sslmode", self.sslmode.as_str().to_owned()));
        if self.channel_binding != ChannelBinding::default() {
            query.push(("channel_binding", self.channel_binding.as_str().to_owned()));
        }
        let optional = [
            ("sslrootcert", path(&self.sslrootcert)),
            ("sslcert", path(&self.sslcert)),
            ("sslkey", path(&self.sslkey)),
            ("application_name", self.application_name.clone()),
            ("options", self.options.clone()),
            (
                "connect_timeout",
                self.connect_timeout.map(|d| d.as_secs().to_string()),
            ),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                query.push((key, encode(&value, QUERY_KEEP)));
            }
        }
        for (i, (key, value)) in query.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(key);
            out.push('=');
            out.push_str(value);
        }
        out
    }

    /// An equivalent `tokio_postgres::Config`: every host (Unix sockets via
    /// `host_path`) with its own port, user, password, dbname, application_name,
    /// options, connect_timeout and channel_binding. `ssl_mode` maps Disable→Disable,
    /// Allow/Prefer→Prefer, Require/VerifyCa/VerifyFull→Require; certificate
    /// verification and the certificate paths are left to our own rustls connector.
    pub fn to_tokio_postgres(&self) -> tokio_postgres::Config {
        use tokio_postgres::config::SslMode as Tp;
        let mut config = tokio_postgres::Config::new();
        for h in &self.hosts {
            match &h.host {
                Host::Tcp(name) => {
                    config.host(name);
                }
                #[cfg(unix)]
                Host::Unix(dir) => {
                    config.host_path(dir);
                }
                #[cfg(not(unix))]
                Host::Unix(dir) => {
                    config.host(dir.to_string_lossy());
                }
            }
            config.port(h.port);
        }
        config.user(&self.user);
        if let Some(password) = &self.password {
            config.password(password.expose());
        }
        config.dbname(&self.dbname);
        if let Some(name) = &self.application_name {
            config.application_name(name);
        }
        if let Some(options) = &self.options {
            config.options(options);
        }
        if let Some(timeout) = self.connect_timeout {
            config.connect_timeout(timeout);
        }
        config.ssl_mode(match self.sslmode {
            SslMode::Disable => Tp::Disable,
            SslMode::Allow | SslMode::Prefer => Tp::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Tp::Require,
        });
        config.channel_binding(match self.channel_binding {
            ChannelBinding::Disable => tokio_postgres::config::ChannelBinding::Disable,
            ChannelBinding::Prefer => tokio_postgres::config::ChannelBinding::Prefer,
            ChannelBinding::Require => tokio_postgres::config::ChannelBinding::Require,
        });
        config
    }
}

impl FromStr for ConnInfo {
    type Err = ConnInfoError;

    /// [`ConnInfo::parse`], reading the process environment.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ConnInfo::parse(s)
    }
}

impl fmt::Display for ConnInfo {
    /// The same text as [`ConnInfo::redacted`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl HostAddr {
    /// For a Unix-socket host, the socket file itself: `<dir>/.s.PGSQL.<port>`.
    pub fn unix_socket_path(&self) -> Option<PathBuf> {
        match &self.host {
            Host::Unix(dir) => Some(dir.join(format!(".s.PGSQL.{}", self.port))),
            Host::Tcp(_) => None,
        }
    }
}

impl fmt::Display for HostAddr {
    /// `db:5432`, `[::1]:5432`, or for a Unix socket the socket file path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Tcp(name) if name.contains(':') => write!(f, "[{name}]:{}", self.port),
            Host::Tcp(name) => write!(f, "{name}:{}", self.port),
            Host::Unix(dir) => write!(
                f,
                "{}",
                dir.join(format!(".s.PGSQL.{}", self.port)).display()
            ),
        }
    }
}

impl fmt::Display for Host {
    /// The host name, or the socket directory.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Tcp(name) => f.write_str(name),
            Host::Unix(dir) => write!(f, "{}", dir.display()),
        }
    }
}

impl SslMode {
    /// The libpq spelling, e.g. `verify-full`.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The mode for a libpq spelling (case-sensitive, as in libpq).
    pub fn from_libpq(s: &str) -> Option<Self> {
        Some(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

impl ChannelBinding {
    /// The libpq spelling, e.g. `require`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelBinding::Disable => "disable",
            ChannelBinding::Prefer => "prefer",
            ChannelBinding::Require => "require",
        }
    }

    /// The setting for a libpq spelling (case-sensitive, as in libpq).
    pub fn from_libpq(s: &str) -> Option<Self> {
        Some(match s {
            "disable" => ChannelBinding::Disable,
            "prefer" => ChannelBinding::Prefer,
            "require" => ChannelBinding::Require,
            _ => return None,
        })
    }
}

impl fmt::Display for ChannelBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::ConnString => f.write_str("the connection string"),
            Origin::Env(var) => write!(f, "environment variable {var}"),
        }
    }
}

// ---------------------------------------------------------------------------------
// Parsing into raw, unvalidated settings.

/// What the string said, before environment, defaults and validation. `None` = unset.
#[derive(Default)]
struct Raw {
    host: Option<Vec<String>>,
    port: Option<Vec<String>>,
    user: Option<String>,
    password: Option<String>,
    passfile: Option<String>,
    dbname: Option<String>,
    sslmode: Option<String>,
    channel_binding: Option<String>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
    application_name: Option<String>,
    options: Option<String>,
    connect_timeout: Option<String>,
}

impl Raw {
    /// Store `value` under `key`; `false` when the key is not accepted.
    fn set(&mut self, key: &str, value: String) -> bool {
        let value = Some(value).filter(|v| !v.is_empty());
        let slot = match key {
            "host" => {
                self.host = value.map(|v| split_list(&v));
                return true;
            }
            "port" => {
                self.port = value.map(|v| split_list(&v));
                return true;
            }
            "user" => &mut self.user,
            "password" => &mut self.password,
            "passfile" => &mut self.passfile,
            "dbname" => &mut self.dbname,
            "sslmode" => &mut self.sslmode,
            "channel_binding" => &mut self.channel_binding,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            "sslkey" => &mut self.sslkey,
            "application_name" => &mut self.application_name,
            "options" => &mut self.options,
            "connect_timeout" => &mut self.connect_timeout,
            _ => return false,
        };
        *slot = value;
        true
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(|part| part.trim().to_owned()).collect()
}

/// The part after `postgres://` or `postgresql://` (scheme matched case-insensitively).
fn strip_scheme(s: &str) -> Option<&str> {
    ["postgresql://", "postgres://"].iter().find_map(|scheme| {
        let head = s.get(..scheme.len())?;
        head.eq_ignore_ascii_case(scheme)
            .then(|| &s[scheme.len()..])
    })
}

/// Whether `word` is shaped like a keyword, so that quoting it in an error cannot leak
/// much of anything else.
fn plausible_keyword(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= 64
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An error about `word`, or [`ConnInfoError::Withheld`] when showing it could leak.
fn word_error(
    word: String,
    after_password: bool,
    make: fn(String) -> ConnInfoError,
) -> ConnInfoError {
    if after_password || !plausible_keyword(&word) {
        ConnInfoError::Withheld
    } else {
        make(word)
    }
}

fn unknown_keyword(keyword: String) -> ConnInfoError {
    ConnInfoError::UnknownKeyword { keyword }
}

fn missing_equals(keyword: String) -> ConnInfoError {
    ConnInfoError::MissingEquals { keyword }
}

/// `key = value key2='quoted \' value'`, as libpq's `conninfo_parse`.
fn parse_keyword_value(s: &str, raw: &mut Raw) -> Result<(), ConnInfoError> {
    let mut it = s.chars().peekable();
    let is_space = |c: &char| c.is_ascii_whitespace();
    // An unquoted password is cut at the first space, so the text right after it may be
    // the rest of the password: never quote that text in an error.
    let mut after_password = false;
    loop {
        while it.next_if(is_space).is_some() {}
        if it.peek().is_none() {
            return Ok(());
        }
        let mut keyword = String::new();
        while let Some(c) = it.next_if(|c| !c.is_ascii_whitespace() && *c != '=') {
            keyword.push(c);
        }
        while it.next_if(is_space).is_some() {}
        if it.next_if_eq(&'=').is_none() {
            return Err(word_error(keyword, after_password, missing_equals));
        }
        if keyword.is_empty() {
            return Err(ConnInfoError::Syntax("missing keyword before \"=\""));
        }
        while it.next_if(is_space).is_some() {}
        let mut value = String::new();
        let quoted = it.next_if_eq(&'\'').is_some();
        if quoted {
            loop {
                match it.next() {
                    Some('\'') => break,
                    Some('\\') => match it.next() {
                        Some(c) => value.push(c),
                        None => return Err(ConnInfoError::Syntax("unterminated quoted value")),
                    },
                    Some(c) => value.push(c),
                    None => return Err(ConnInfoError::Syntax("unterminated quoted value")),
                }
            }
        } else {
            while let Some(c) = it.next_if(|c| !c.is_ascii_whitespace()) {
                if c == '\\' {
                    // libpq: a backslash escapes the next character, even a space; a
                    // trailing backslash is dropped.
                    if let Some(next) = it.next() {
                        value.push(next);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        let is_password = keyword == "password";
        if !raw.set(&keyword, value) {
            return Err(word_error(keyword, after_password, unknown_keyword));
        }
        after_password = is_password && !quoted;
    }
}

/// Everything after the scheme of a URL.
fn parse_url(rest: &str, raw: &mut Raw) -> Result<(), ConnInfoError> {
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.split_once('/') {
        Some((authority, path)) => (authority, Some(path)),
        None => (before_query, None),
    };
    let (userinfo, hostspec) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    // No `@` in the authority but one later: most likely a user name or password with
    // an unencoded `/` or `?` cut the authority short, so what we took for host, port
    // or database may be password text. Errors about them must not show it.
    let suspicious = userinfo.is_none() && rest[authority.len()..].contains('@');

    if let Some(userinfo) = userinfo {
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (userinfo, None),
        };
        raw.set("user", percent_decode(user, "user name")?);
        if let Some(password) = password {
            raw.set("password", percent_decode(password, "password")?);
        }
    }

    if !hostspec.is_empty() {
        let mut hosts = Vec::new();
        let mut ports = Vec::new();
        for entry in hostspec.split(',') {
            let (host, port) = if let Some(bracketed) = entry.strip_prefix('[') {
                let (inner, tail) = bracketed.split_once(']').ok_or(ConnInfoError::Syntax(
                    "missing \"]\" after IPv6 address in URL",
                ))?;
                let port = if tail.is_empty() {
                    ""
                } else {
                    tail.strip_prefix(':').ok_or(ConnInfoError::Syntax(
                        "unexpected text after \"]\" in URL host (expected \":\" and a port)",
                    ))?
                };
                (inner, port)
            } else {
                entry.split_once(':').unwrap_or((entry, ""))
            };
            let port = percent_decode(port, "port")?;
            if suspicious && !port.is_empty() && parse_port_number(&port).is_none() {
                return Err(ConnInfoError::MalformedUrl);
            }
            hosts.push(percent_decode(host, "host")?.trim().to_owned());
            ports.push(port.trim().to_owned());
        }
        if hosts.iter().any(|h| !h.is_empty()) {
            raw.host = Some(hosts);
        }
        if ports.iter().any(|p| !p.is_empty()) {
            raw.port = Some(ports);
        }
    }

    if let Some(path) = path {
        if suspicious && path.contains('@') {
            return Err(ConnInfoError::MalformedUrl);
        }
        raw.set("dbname", percent_decode(path, "database name")?);
    }

    if let Some(query) = query {
        let mut after_password = false;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                let word = percent_decode(pair, "query parameter").unwrap_or_default();
                return Err(word_error(word, after_password, missing_equals));
            };
            let key = percent_decode(key, "query parameter name")?;
            let value = percent_decode(value, "query parameter value")?;
            let is_password = key == "password";
            if !raw.set(&key, value) {
                return Err(word_error(key, after_password, unknown_keyword));
            }
            after_password = is_password;
        }
    }
    Ok(())
}

/// RFC 3986 percent-decoding (no `+` → space, as in libpq). `%00`, a malformed escape
/// or a result that is not UTF-8 is an error naming only the component.
fn percent_decode(s: &str, component: &'static str) -> Result<String, ConnInfoError> {
    if !s.contains('%') {
        return Ok(s.to_owned());
    }
    let err = || ConnInfoError::PercentEncoding { component };
    let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
                return Err(err());
            };
            let byte = u8::try_from(hi * 16 + lo).map_err(|_| err())?;
            if byte == 0 {
                return Err(err());
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| err())
}

/// Characters left as they are in query values besides the unreserved ones.
const QUERY_KEEP: &[u8] = b"/:,@!$'()*+;";
/// The same inside a comma-separated list, where a literal comma must be escaped.
const QUERY_KEEP_IN_LIST: &[u8] = b"/:@!$'()*+;";

/// Percent-encode everything but RFC 3986 unreserved characters and `keep`.
fn encode(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// Resolution: environment, defaults, validation, password file.

fn resolve(raw: Raw, env: &dyn Fn(&str) -> Option<String>) -> Result<ConnInfo, ConnInfoError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let pick = |value: Option<String>, name: &'static str| -> Option<(String, Origin)> {
        match value {
            Some(v) => Some((v, Origin::ConnString)),
            None => var(name).map(|v| (v, Origin::Env(name))),
        }
    };

    let user = raw
        .user
        .or_else(|| var("PGUSER"))
        .or_else(|| var("USER"))
        .unwrap_or_else(|| DEFAULT_USER.to_owned());
    let dbname = raw
        .dbname
        .or_else(|| var("PGDATABASE"))
        .unwrap_or_else(|| user.clone());

    let mut host_names = match raw.host {
        Some(hosts) => hosts,
        None => var("PGHOST").map(|v| split_list(&v)).unwrap_or_default(),
    };
    if host_names.is_empty() {
        host_names.push(String::new());
    }
    let (port_texts, port_origin) = match raw.port {
        Some(ports) => (ports, Origin::ConnString),
        None => match var("PGPORT") {
            Some(v) => (split_list(&v), Origin::Env("PGPORT")),
            None => (Vec::new(), Origin::ConnString),
        },
    };
    let mut ports = Vec::with_capacity(port_texts.len());
    for text in &port_texts {
        ports.push(if text.is_empty() {
            DEFAULT_PORT
        } else {
            parse_port_number(text).ok_or_else(|| ConnInfoError::InvalidValue {
                key: "port",
                value: text.clone(),
                origin: port_origin,
                expected: PORT_EXPECTED,
            })?
        });
    }
    let port_for = |i: usize| match ports.len() {
        0 => DEFAULT_PORT,
        1 => ports[0],
        _ => ports[i],
    };
    if ports.len() > 1 && ports.len() != host_names.len() {
        return Err(ConnInfoError::PortCountMismatch {
            ports: ports.len(),
            hosts: host_names.len(),
        });
    }
    let hosts: Vec<HostAddr> = host_names
        .iter()
        .enumerate()
        .map(|(i, name)| HostAddr {
            host: host_from_text(name),
            port: port_for(i),
        })
        .collect();

    let sslmode = match pick(raw.sslmode, "PGSSLMODE") {
        None => SslMode::default(),
        Some((v, origin)) => SslMode::from_libpq(&v).ok_or(ConnInfoError::InvalidValue {
            key: "sslmode",
            value: v,
            origin,
            expected: SSLMODE_EXPECTED,
        })?,
    };
    let channel_binding = match pick(raw.channel_binding, "PGCHANNELBINDING") {
        None => ChannelBinding::default(),
        Some((v, origin)) => ChannelBinding::from_libpq(&v).ok_or(ConnInfoError::InvalidValue {
            key: "channel_binding",
            value: v,
            origin,
            expected: CHANNEL_BINDING_EXPECTED,
        })?,
    };
    let connect_timeout = match pick(raw.connect_timeout, "PGCONNECT_TIMEOUT") {
        None => None,
        Some((v, origin)) => parse_connect_timeout(&v).ok_or(ConnInfoError::InvalidValue {
            key: "connect_timeout",
            value: v,
            origin,
            expected: TIMEOUT_EXPECTED,
        })?,
    };
    let path = |value: Option<String>, name: &'static str| {
        pick(value, name).map(|(v, _)| PathBuf::from(v))
    };
    let sslrootcert = path(raw.sslrootcert, "PGSSLROOTCERT");
    let sslcert = path(raw.sslcert, "PGSSLCERT");
    let sslkey = path(raw.sslkey, "PGSSLKEY");
    let application_name = raw.application_name.or_else(|| var("PGAPPNAME"));
    let options = raw.options.or_else(|| var("PGOPTIONS"));

    let password = match raw.password.or_else(|| var("PGPASSWORD")) {
        Some(p) => Some(Secret::from(p)),
        None => raw
            .passfile
            .or_else(|| var("PGPASSFILE"))
            .map(PathBuf::from)
            .or_else(|| default_passfile(&var))
            .and_then(|file| password_from_file(&file, &hosts, &dbname, &user))
            .map(Secret::from),
    };

    Ok(ConnInfo {
        hosts,
        user,
        password,
        dbname,
        sslmode,
        channel_binding,
        sslrootcert,
        sslcert,
        sslkey,
        application_name,
        options,
        connect_timeout,
    })
}

fn host_from_text(name: &str) -> Host {
    if name.is_empty() {
        Host::Tcp(DEFAULT_HOST.to_owned())
    } else if name.starts_with('/') {
        Host::Unix(PathBuf::from(name))
    } else {
        Host::Tcp(name.to_owned())
    }
}

fn parse_port_number(text: &str) -> Option<u16> {
    text.trim().parse::<u16>().ok().filter(|p| *p != 0)
}

/// libpq semantics: whole seconds, `<= 0` means no timeout, 1 is raised to 2.
/// `None` = not an integer; `Some(None)` = no timeout.
fn parse_connect_timeout(text: &str) -> Option<Option<Duration>> {
    let secs: i64 = text.trim().parse().ok()?;
    Some(match secs {
        ..=0 => None,
        1 => Some(Duration::from_secs(2)),
        n => Some(Duration::from_secs(n.unsigned_abs())),
    })
}

fn default_passfile(var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if cfg!(windows) {
        var("APPDATA").map(|dir| Path::new(&dir).join("postgresql").join("pgpass.conf"))
    } else {
        var("HOME").map(|home| Path::new(&home).join(".pgpass"))
    }
}

/// The password for the first host that has a matching line, if any. Any failure to
/// read the file means "no password from the file".
fn password_from_file(file: &Path, hosts: &[HostAddr], dbname: &str, user: &str) -> Option<String> {
    if !std::fs::metadata(file).ok()?.is_file() {
        return None;
    }
    let contents = std::fs::read(file).ok()?;
    hosts.iter().find_map(|h| {
        let host = match &h.host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(dir) if DEFAULT_SOCKET_DIRS.iter().any(|d| dir == Path::new(d)) => {
                DEFAULT_HOST.to_owned()
            }
            Host::Unix(dir) => dir.to_string_lossy().into_owned(),
        };
        pgpass_lookup(&contents, &host, &h.port.to_string(), dbname, user)
    })
}

/// The password of the first line of a password file matching the four values.
/// An empty password on the matching line means none.
fn pgpass_lookup(
    contents: &[u8],
    host: &str,
    port: &str,
    dbname: &str,
    user: &str,
) -> Option<String> {
    contents
        .split(|b| *b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .find_map(|line| {
            let mut rest = line;
            for wanted in [host, port, dbname, user] {
                rest = pgpass_field_matches(rest, wanted)?;
            }
            Some(unescape(rest))
        })
        .filter(|password| !password.is_empty())
}

/// If the first field of `line` is `*` or equals `wanted` once unescaped, the rest of
/// the line after its `:`.
fn pgpass_field_matches<'a>(line: &'a str, wanted: &str) -> Option<&'a str> {
    if let Some(rest) = line.strip_prefix("*:") {
        return Some(rest);
    }
    let mut field = String::new();
    let mut chars = line.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => field.push(chars.next()?.1),
            ':' => return (field == wanted).then(|| &line[i + 1..]),
            c => field.push(c),
        }
    }
    None
}

/// Drop each escaping backslash (a trailing lone backslash stays).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(chars.next().unwrap_or('\\'));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// An environment holding exactly `pairs`.
    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn parse(s: &str) -> ConnInfo {
        ConnInfo::parse_with_env(s, &env_of(&[])).unwrap()
    }

    fn parse_err(s: &str) -> ConnInfoError {
        ConnInfo::parse_with_env(s, &env_of(&[])).unwrap_err()
    }

    fn tcp(name: &str, port: u16) -> HostAddr {
        HostAddr {
            host: Host::Tcp(name.to_owned()),
            port,
        }
    }

    fn unix(dir: &str, port: u16) -> HostAddr {
        HostAddr {
            host: Host::Unix(PathBuf::from(dir)),
            port,
        }
    }

    /// A file in the temp directory removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("pgoutbox-conninfo-{}-{name}", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            TempFile(path)
        }

        fn path(&self) -> &str {
            self.0.to_str().unwrap()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn url_minimal_uses_defaults() {
        for s in [
            "postgres://",
            "postgresql://",
            "postgres:///",
            "  postgres://\n",
        ] {
            let c = parse(s);
            assert_eq!(c.hosts, vec![tcp("localhost", 5432)], "{s}");
            assert_eq!(c.user, "postgres");
            assert_eq!(c.dbname, "postgres");
            assert_eq!(c.password, None);
            assert_eq!(c.sslmode, SslMode::Prefer);
            assert_eq!(c.sslrootcert, None);
            assert_eq!(c.application_name, None);
            assert_eq!(c.options, None);
            assert_eq!(c.connect_timeout, None);
        }
    }

    #[test]
    fn url_full() {
        let c = parse(
            "postgresql://app:s3cret@db.example.com:6543/shop?sslmode=verify-full\
             &sslrootcert=/etc/ssl/ca.pem&sslcert=/c/client.crt&sslkey=/c/client.key\
             &application_name=outbox&options=-c%20wal_sender_timeout%3D2s&connect_timeout=10",
        );
        assert_eq!(c.hosts, vec![tcp("db.example.com", 6543)]);
        assert_eq!(c.user, "app");
        assert_eq!(c.password.as_ref().map(Secret::expose), Some("s3cret"));
        assert_eq!(c.dbname, "shop");
        assert_eq!(c.sslmode, SslMode::VerifyFull);
        assert_eq!(c.sslrootcert, Some(PathBuf::from("/etc/ssl/ca.pem")));
        assert_eq!(c.sslcert, Some(PathBuf::from("/c/client.crt")));
        assert_eq!(c.sslkey, Some(PathBuf::from("/c/client.key")));
        assert_eq!(c.application_name.as_deref(), Some("outbox"));
        assert_eq!(c.options.as_deref(), Some("-c wal_sender_timeout=2s"));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(10)));
    }

    #[test]
    fn url_percent_encoded_password_user_and_dbname() {
        let c = parse("postgres://us%3Aer:p%40ss%2Fw%3Ard%25@db/my%20db");
        assert_eq!(c.user, "us:er");
        assert_eq!(c.password.unwrap().expose(), "p@ss/w:rd%");
        assert_eq!(c.dbname, "my db");
        assert_eq!(c.hosts, vec![tcp("db", 5432)]);
    }

    #[test]
    fn url_unencoded_at_in_password_uses_last_at() {
        let c = parse("postgres://app:p@ss@db/shop");
        assert_eq!(c.password.unwrap().expose(), "p@ss");
        assert_eq!(c.hosts, vec![tcp("db", 5432)]);
    }

    #[test]
    fn url_ipv6() {
        assert_eq!(
            parse("postgres://[::1]:5433/db").hosts,
            vec![tcp("::1", 5433)]
        );
        assert_eq!(
            parse("postgres://u@[2001:db8::1]/db").hosts,
            vec![tcp("2001:db8::1", 5432)]
        );
        assert_eq!(
            parse("postgres://[fe80::1%25eth0]:6000").hosts,
            vec![tcp("fe80::1%eth0", 6000)]
        );
    }

    #[test]
    fn url_multi_host() {
        let c = parse("postgres://h1:5432,h2:5433,[::1]/db");
        assert_eq!(
            c.hosts,
            vec![tcp("h1", 5432), tcp("h2", 5433), tcp("::1", 5432)]
        );
        // Without ports at all, every host gets PGPORT or the default.
        let c =
            ConnInfo::parse_with_env("postgres://a,b/db", &env_of(&[("PGPORT", "6000")])).unwrap();
        assert_eq!(c.hosts, vec![tcp("a", 6000), tcp("b", 6000)]);
    }

    #[test]
    fn url_unix_socket() {
        let c = parse("postgres:///db?host=/tmp");
        assert_eq!(c.hosts, vec![unix("/tmp", 5432)]);
        assert_eq!(c.dbname, "db");
        let c = parse("postgresql://%2Fvar%2Frun%2Fpostgresql:5433/db");
        assert_eq!(c.hosts, vec![unix("/var/run/postgresql", 5433)]);
        assert_eq!(
            c.hosts[0].unix_socket_path(),
            Some(PathBuf::from("/var/run/postgresql/.s.PGSQL.5433"))
        );
        // Mixed lists in the query.
        let c = parse("postgres://u@/db?host=/tmp,db2&port=5432,5433");
        assert_eq!(c.hosts, vec![unix("/tmp", 5432), tcp("db2", 5433)]);
    }

    #[test]
    fn url_query_overrides_authority() {
        let c = parse("postgres://u:p@h:1/db?host=other&port=7000&user=v&dbname=e&password=q");
        assert_eq!(c.hosts, vec![tcp("other", 7000)]);
        assert_eq!(c.user, "v");
        assert_eq!(c.dbname, "e");
        assert_eq!(c.password.unwrap().expose(), "q");
    }

    #[test]
    fn scheme_is_case_insensitive() {
        assert_eq!(parse("POSTGRES://h/db").hosts, vec![tcp("h", 5432)]);
    }

    #[test]
    fn keyword_value_with_quoting() {
        let c = parse(
            r"host=db port = 5433  user=app password='it\'s a \\secret' dbname='my db' options='-c wal_sender_timeout=2s' application_name=out\ box",
        );
        assert_eq!(c.hosts, vec![tcp("db", 5433)]);
        assert_eq!(c.user, "app");
        assert_eq!(c.password.unwrap().expose(), r"it's a \secret");
        assert_eq!(c.dbname, "my db");
        assert_eq!(c.options.as_deref(), Some("-c wal_sender_timeout=2s"));
        assert_eq!(c.application_name.as_deref(), Some("out box"));
    }

    #[test]
    fn keyword_value_details() {
        // Empty quoted value = unset; the later duplicate wins; tabs/newlines separate.
        let c = parse("dbname='' user=a\tuser=b\nhost='/var/run/postgresql'");
        assert_eq!(c.user, "b");
        assert_eq!(c.dbname, "b");
        assert_eq!(c.hosts, vec![unix("/var/run/postgresql", 5432)]);
        // The empty string is all defaults.
        assert_eq!(parse(""), parse("postgres://"));
        // Unicode in values is fine.
        assert_eq!(
            parse("application_name=bücher").application_name.as_deref(),
            Some("bücher")
        );
    }

    #[test]
    fn keyword_value_host_and_port_lists() {
        let c = parse("host=a,b,c port=1,,3");
        assert_eq!(c.hosts, vec![tcp("a", 1), tcp("b", 5432), tcp("c", 3)]);
        let c = parse("host=a,,/tmp port=7");
        assert_eq!(
            c.hosts,
            vec![tcp("a", 7), tcp("localhost", 7), unix("/tmp", 7)]
        );
        assert_eq!(
            parse_err("host=a,b,c port=1,2"),
            ConnInfoError::PortCountMismatch { ports: 2, hosts: 3 }
        );
        assert_eq!(
            parse_err("host=a,b,c port=1,2").to_string(),
            "could not match 2 port numbers to 3 hosts"
        );
    }

    fn full_env() -> impl Fn(&str) -> Option<String> {
        env_of(&[
            ("PGHOST", "envhost1,envhost2"),
            ("PGPORT", "6001,6002"),
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "envpass"),
            ("PGDATABASE", "envdb"),
            ("PGSSLMODE", "require"),
            ("PGSSLROOTCERT", "/env/ca.pem"),
            ("PGSSLCERT", "/env/c.crt"),
            ("PGSSLKEY", "/env/c.key"),
            ("PGAPPNAME", "envapp"),
            ("PGOPTIONS", "-c envopt=1"),
            ("PGCONNECT_TIMEOUT", "7"),
            ("USER", "osuser"),
        ])
    }

    #[test]
    fn env_wins_over_defaults() {
        let c = ConnInfo::parse_with_env("", &full_env()).unwrap();
        assert_eq!(c.hosts, vec![tcp("envhost1", 6001), tcp("envhost2", 6002)]);
        assert_eq!(c.user, "envuser");
        assert_eq!(c.password.unwrap().expose(), "envpass");
        assert_eq!(c.dbname, "envdb");
        assert_eq!(c.sslmode, SslMode::Require);
        assert_eq!(c.sslrootcert, Some(PathBuf::from("/env/ca.pem")));
        assert_eq!(c.sslcert, Some(PathBuf::from("/env/c.crt")));
        assert_eq!(c.sslkey, Some(PathBuf::from("/env/c.key")));
        assert_eq!(c.application_name.as_deref(), Some("envapp"));
        assert_eq!(c.options.as_deref(), Some("-c envopt=1"));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(7)));
    }

    #[test]
    fn string_wins_over_env() {
        let c = ConnInfo::parse_with_env(
            "host=h port=1 user=u password=p dbname=d sslmode=disable sslrootcert=/r \
             sslcert=/c sslkey=/k application_name=a options=o connect_timeout=3",
            &full_env(),
        )
        .unwrap();
        assert_eq!(c.hosts, vec![tcp("h", 1)]);
        assert_eq!(c.user, "u");
        assert_eq!(c.password.unwrap().expose(), "p");
        assert_eq!(c.dbname, "d");
        assert_eq!(c.sslmode, SslMode::Disable);
        assert_eq!(c.sslrootcert, Some(PathBuf::from("/r")));
        assert_eq!(c.sslcert, Some(PathBuf::from("/c")));
        assert_eq!(c.sslkey, Some(PathBuf::from("/k")));
        assert_eq!(c.application_name.as_deref(), Some("a"));
        assert_eq!(c.options.as_deref(), Some("o"));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(3)));
        // The same through a URL.
        let c = ConnInfo::parse_with_env("postgres://u@h1,h2/d", &full_env()).unwrap();
        assert_eq!(c.hosts, vec![tcp("h1", 6001), tcp("h2", 6002)]);
        assert_eq!((c.user.as_str(), c.dbname.as_str()), ("u", "d"));
    }

    #[test]
    fn user_and_dbname_defaults() {
        let c = ConnInfo::parse_with_env("", &env_of(&[("USER", "osuser")])).unwrap();
        assert_eq!((c.user.as_str(), c.dbname.as_str()), ("osuser", "osuser"));
        let c = ConnInfo::parse_with_env("user=app", &env_of(&[("USER", "osuser")])).unwrap();
        assert_eq!((c.user.as_str(), c.dbname.as_str()), ("app", "app"));
        // An empty variable counts as unset.
        let c = ConnInfo::parse_with_env("", &env_of(&[("PGUSER", ""), ("PGHOST", "")])).unwrap();
        assert_eq!(c.user, "postgres");
        assert_eq!(c.hosts, vec![tcp("localhost", 5432)]);
    }

    #[test]
    fn connect_timeout_follows_libpq() {
        let t = |v: &str| parse(&format!("connect_timeout={v}")).connect_timeout;
        assert_eq!(t("0"), None);
        assert_eq!(t("-5"), None);
        assert_eq!(t("1"), Some(Duration::from_secs(2)));
        assert_eq!(t("30"), Some(Duration::from_secs(30)));
        assert_eq!(
            parse_err("connect_timeout=1.5").to_string(),
            "invalid connect_timeout \"1.5\" from the connection string: \
             expected an integer number of seconds (0 or less waits forever)"
        );
    }

    const PGPASS: &str = "# hostname:port:database:username:password\n\
                          \n\
                          other:*:*:*:wrong\n\
                          db\\:weird:5432:*:app:colon\n\
                          *:5433:shop:app:pa\\:ss\\\\word\n\
                          localhost:5432:*:sock:via-socket\r\n\
                          /srv/pg:5432:*:sock:via-dir\n\
                          \\*:*:*:*:literal-star\n\
                          *:*:*:*:fallback\n";

    #[test]
    fn pgpass_lookup_with_wildcards_and_escapes() {
        let file = TempFile::new("pgpass-main", PGPASS);
        let env = env_of(&[("PGPASSFILE", file.path())]);
        let pw = |s: &str| {
            ConnInfo::parse_with_env(s, &env)
                .unwrap()
                .password
                .map(|p| p.expose().to_owned())
        };
        assert_eq!(
            pw("host=db port=5433 dbname=shop user=app").as_deref(),
            Some(r"pa:ss\word")
        );
        assert_eq!(pw(r"host=db:weird user=app").as_deref(), Some("colon"));
        assert_eq!(pw("host=other").as_deref(), Some("wrong"));
        assert_eq!(pw("host=/tmp user=sock").as_deref(), Some("via-socket"));
        assert_eq!(pw("host=/srv/pg user=sock").as_deref(), Some("via-dir"));
        assert_eq!(pw("host=*").as_deref(), Some("literal-star"));
        assert_eq!(pw("host=elsewhere").as_deref(), Some("fallback"));
        // The first host with a match supplies the password.
        let hosts = TempFile::new("pgpass-hosts", "h2:*:*:*:second\nh3:*:*:*:third\n");
        let c = ConnInfo::parse_with_env("host=h1,h3,h2", &env_of(&[("PGPASSFILE", hosts.path())]))
            .unwrap();
        assert_eq!(c.password.unwrap().expose(), "third");
        // A password given otherwise wins; the passfile keyword overrides PGPASSFILE.
        assert_eq!(pw("host=other password=given").as_deref(), Some("given"));
        let with_pgpassword = env_of(&[("PGPASSFILE", file.path()), ("PGPASSWORD", "envpw")]);
        let c = ConnInfo::parse_with_env("host=other", &with_pgpassword).unwrap();
        assert_eq!(c.password.unwrap().expose(), "envpw");
        let other = TempFile::new("pgpass-other", "*:*:*:*:from-keyword\n");
        let c = ConnInfo::parse_with_env(&format!("passfile='{}'", other.path()), &env).unwrap();
        assert_eq!(c.password.unwrap().expose(), "from-keyword");
    }

    #[test]
    fn pgpass_default_location_and_missing_file() {
        let home =
            std::env::temp_dir().join(format!("pgoutbox-conninfo-home-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join(".pgpass"), "*:*:*:app:from-home\n").unwrap();
        let env = env_of(&[("HOME", home.to_str().unwrap())]);
        let c = ConnInfo::parse_with_env("user=app", &env).unwrap();
        assert_eq!(
            c.password.map(|p| p.expose().to_owned()).as_deref(),
            Some("from-home")
        );
        let c = ConnInfo::parse_with_env("user=other", &env).unwrap();
        assert_eq!(c.password, None);
        std::fs::remove_dir_all(&home).unwrap();
        // Missing files and directories are ignored.
        let c = ConnInfo::parse_with_env("user=app", &env).unwrap();
        assert_eq!(c.password, None);
        let dir = std::env::temp_dir();
        let env = env_of(&[("PGPASSFILE", dir.to_str().unwrap())]);
        assert_eq!(ConnInfo::parse_with_env("", &env).unwrap().password, None);
    }

    #[test]
    fn pgpass_line_matching() {
        let c = b"a:1:d:u\nshort:1:d\n#a:1:d:u:commented\na:1:d:u:\na:1:d:u:ok:with:colons\n";
        assert_eq!(
            pgpass_lookup(c, "a", "1", "d", "u"),
            None,
            "first match is empty"
        );
        let c = b"a:1:d:u\nshort:1:d\na:1:d:u:ok:with:colons\n";
        assert_eq!(
            pgpass_lookup(c, "a", "1", "d", "u").as_deref(),
            Some("ok:with:colons")
        );
        assert_eq!(pgpass_lookup(b"#a:1:d:u:x\n", "#a", "1", "d", "u"), None);
        assert_eq!(
            pgpass_lookup(b"a:1:d:u:trail\\", "a", "1", "d", "u").as_deref(),
            Some("trail\\")
        );
    }

    #[test]
    fn keyword_list_is_consistent() {
        assert_eq!(KEYWORDS.join(", "), ACCEPTED);
        for keyword in KEYWORDS {
            assert!(Raw::default().set(keyword, "x".into()), "{keyword}");
        }
    }

    #[test]
    fn unknown_keyword_error() {
        let err = parse_err("host=h foo=bar");
        assert_eq!(
            err,
            ConnInfoError::UnknownKeyword {
                keyword: "foo".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "unknown connection parameter \"foo\" (accepted: host, port, user, password, \
             passfile, dbname, sslmode, channel_binding, sslrootcert, sslcert, sslkey, application_name, \
             options, connect_timeout)"
        );
        assert_eq!(
            parse_err("postgres://h/db?hostaddr=1.2.3.4"),
            ConnInfoError::UnknownKeyword {
                keyword: "hostaddr".into()
            }
        );
    }

    #[test]
    fn bad_port_errors() {
        assert_eq!(
            parse_err("port=abc").to_string(),
            "invalid port \"abc\" from the connection string: expected an integer from 1 to 65535"
        );
        for bad in ["port=0", "port=65536", "port=-1", "postgres://h:99999/db"] {
            assert!(
                matches!(
                    parse_err(bad),
                    ConnInfoError::InvalidValue { key: "port", .. }
                ),
                "{bad}"
            );
        }
        let err = ConnInfo::parse_with_env("", &env_of(&[("PGPORT", "x")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid port \"x\" from environment variable PGPORT: expected an integer from 1 to 65535"
        );
    }

    #[test]
    fn channel_binding_parses_like_libpq() {
        assert_eq!(parse("").channel_binding, ChannelBinding::Prefer);
        for (text, value) in [
            ("disable", ChannelBinding::Disable),
            ("prefer", ChannelBinding::Prefer),
            ("require", ChannelBinding::Require),
        ] {
            assert_eq!(
                parse(&format!("channel_binding={text}")).channel_binding,
                value
            );
            let url = format!("postgres://u@h/d?channel_binding={text}");
            assert_eq!(parse(&url).channel_binding, value);
            assert_eq!(value.to_string(), text);
        }
        let env = env_of(&[("PGCHANNELBINDING", "require")]);
        let from_env = ConnInfo::parse_with_env("host=h", &env).unwrap();
        assert_eq!(from_env.channel_binding, ChannelBinding::Require);
        let string_wins = ConnInfo::parse_with_env("channel_binding=disable", &env).unwrap();
        assert_eq!(string_wins.channel_binding, ChannelBinding::Disable);
        assert_eq!(
            parse_err("channel_binding=Require").to_string(),
            "invalid channel_binding \"Require\" from the connection string: expected one of \
             disable, prefer, require"
        );
        // Shown (and round-tripped) only when not the default.
        let c = parse("postgres://u@h/d?sslmode=require&channel_binding=require");
        assert_eq!(
            c.redacted(),
            "postgres://u@h:5432/d?sslmode=require&channel_binding=require"
        );
        assert_eq!(parse(&c.redacted()), c);
        assert!(!parse("postgres://u@h/d")
            .redacted()
            .contains("channel_binding"));
        let tp = c.to_tokio_postgres();
        assert_eq!(
            tp.get_channel_binding(),
            tokio_postgres::config::ChannelBinding::Require
        );
    }

    #[test]
    fn bad_sslmode_errors() {
        assert_eq!(
            parse_err("sslmode=verify").to_string(),
            "invalid sslmode \"verify\" from the connection string: expected one of disable, \
             allow, prefer, require, verify-ca, verify-full"
        );
        let err = ConnInfo::parse_with_env("", &env_of(&[("PGSSLMODE", "Require")])).unwrap_err();
        assert_eq!(
            err,
            ConnInfoError::InvalidValue {
                key: "sslmode",
                value: "Require".into(),
                origin: Origin::Env("PGSSLMODE"),
                expected: SSLMODE_EXPECTED,
            }
        );
        for (text, mode) in [
            ("disable", SslMode::Disable),
            ("allow", SslMode::Allow),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            assert_eq!(parse(&format!("sslmode={text}")).sslmode, mode);
            assert_eq!(mode.to_string(), text);
        }
    }

    #[test]
    fn syntax_errors() {
        assert_eq!(
            parse_err("host"),
            ConnInfoError::MissingEquals {
                keyword: "host".into()
            }
        );
        assert_eq!(
            parse_err("host").to_string(),
            "missing \"=\" after \"host\" in connection string"
        );
        assert_eq!(
            parse_err("=x"),
            ConnInfoError::Syntax("missing keyword before \"=\"")
        );
        assert_eq!(
            parse_err("host='db").to_string(),
            "invalid connection string: unterminated quoted value"
        );
        assert!(matches!(
            parse_err("postgres://[::1/db"),
            ConnInfoError::Syntax(_)
        ));
        assert!(matches!(
            parse_err("postgres://[::1]x/db"),
            ConnInfoError::Syntax(_)
        ));
        assert_eq!(
            parse_err("postgres://h/db?sslmode"),
            ConnInfoError::MissingEquals {
                keyword: "sslmode".into()
            }
        );
        assert_eq!(
            parse_err("postgres://h/d%zzb"),
            ConnInfoError::PercentEncoding {
                component: "database name"
            }
        );
        assert_eq!(
            parse_err("postgres://h/d%00b").to_string(),
            "invalid percent-encoding in URL database name"
        );
    }

    /// Error text must never contain any piece of the password, even when the password
    /// broke the syntax.
    #[test]
    fn errors_never_show_the_password() {
        let cases = [
            ("password=hunter2 two words", "words"),
            ("password=hunter2 two=words", "two"),
            ("host=h password=hunter2 sslmode=bogus", "hunter2"),
            ("password='hunter2", "hunter2"),
            ("postgres://u:hunter2/more@h/db", "hunter2"),
            ("postgres://u:hun/ter2@h/db", "ter2"),
            ("postgres://u:12/hunter2@h/db", "hunter2"),
            ("postgres://u:ab?hunter2@h/db", "hunter2"),
            ("postgres://u:12?hunter2@h/db", "hunter2"),
            ("postgres://u:hunter2%zz@h/db", "hunter2"),
            ("postgres://h/db?password=hunter2&two", "two"),
            ("postgres://h/db?password=hunter2&two=x", "two"),
            ("postgres://h/db?password=hunter2%", "hunter2"),
            ("host=h pass:word=hunter2", "hunter2"),
        ];
        for (input, secret) in cases {
            let err = ConnInfo::parse_with_env(input, &env_of(&[])).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(
                !shown.contains(secret),
                "{input:?} leaked {secret:?}: {shown}"
            );
            assert!(!shown.contains("hunter2"), "{input:?} leaked: {shown}");
        }
    }

    #[test]
    fn redacted_hides_password_and_round_trips() {
        let c = parse("postgres://app:s3cret@db:5432/shop?sslmode=require");
        assert_eq!(c.redacted(), "postgres://app@db:5432/shop?sslmode=require");
        assert_eq!(c.to_string(), c.redacted());

        let inputs = [
            "postgresql://app:s3cret@db.example.com:6543/shop?sslmode=verify-full\
             &sslrootcert=/etc/ssl/ca.pem&application_name=out%26box&options=-c%20a%3Db\
             &connect_timeout=10",
            "postgres://us%3Aer:s3cret@[::1]:5433,h2/my%2Fdb%3F",
            "host=/tmp,db2 port=5432,6000 user=app password=s3cret dbname='a b'",
            "host=/var/run/postgresql password=s3cret sslkey='/k ey' sslcert=/c",
        ];
        let env = env_of(&[("PGPASSWORD", "s3cret-env")]);
        for input in inputs {
            let c = ConnInfo::parse_with_env(input, &env).unwrap();
            let text = c.redacted();
            assert!(!text.contains("s3cret"), "{text}");
            let back = ConnInfo::parse_with_env(&text, &env_of(&[])).unwrap();
            assert_eq!(
                back,
                ConnInfo {
                    password: None,
                    ..c
                },
                "{text}"
            );
        }
        assert_eq!(
            parse("host=/tmp,db2 port=5432,6000 user=app dbname=d").redacted(),
            "postgres://app@/d?host=/tmp,db2&port=5432,6000&sslmode=prefer"
        );
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = parse("postgres://app:hunter2@db/shop");
        let debug = format!("{c:?} {c:#?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("[redacted]"), "{debug}");
        let tp = format!("{:?}", c.to_tokio_postgres());
        assert!(!tp.contains("hunter2"), "{tp}");
    }

    #[test]
    fn host_addr_display() {
        assert_eq!(tcp("db", 5432).to_string(), "db:5432");
        assert_eq!(tcp("::1", 5433).to_string(), "[::1]:5433");
        assert_eq!(unix("/tmp", 5432).to_string(), "/tmp/.s.PGSQL.5432");
    }

    #[test]
    fn to_tokio_postgres_maps_fields() {
        use tokio_postgres::config::{Host as TpHost, SslMode as Tp};
        let c = parse(
            "host=db1,/var/run/postgresql,::1 port=5433,5434,5435 user=app password=pw dbname=shop \
             application_name=outbox options='-c wal_sender_timeout=2s' connect_timeout=9 \
             sslmode=verify-full",
        );
        let tp = c.to_tokio_postgres();
        assert_eq!(
            tp.get_hosts(),
            &[
                TpHost::Tcp("db1".into()),
                TpHost::Unix(PathBuf::from("/var/run/postgresql")),
                TpHost::Tcp("::1".into()),
            ]
        );
        assert_eq!(tp.get_ports(), &[5433, 5434, 5435]);
        assert_eq!(tp.get_user(), Some("app"));
        assert_eq!(tp.get_password(), Some(&b"pw"[..]));
        assert_eq!(tp.get_dbname(), Some("shop"));
        assert_eq!(tp.get_application_name(), Some("outbox"));
        assert_eq!(tp.get_options(), Some("-c wal_sender_timeout=2s"));
        assert_eq!(tp.get_connect_timeout(), Some(&Duration::from_secs(9)));
        assert_eq!(tp.get_ssl_mode(), Tp::Require);

        let minimal = parse("").to_tokio_postgres();
        assert_eq!(minimal.get_password(), None);
        assert_eq!(minimal.get_application_name(), None);
        assert_eq!(minimal.get_options(), None);
        assert_eq!(minimal.get_connect_timeout(), None);
        assert_eq!(minimal.get_ports(), &[5432]);

        for (mode, expected) in [
            ("disable", Tp::Disable),
            ("allow", Tp::Prefer),
            ("prefer", Tp::Prefer),
            ("require", Tp::Require),
            ("verify-ca", Tp::Require),
            ("verify-full", Tp::Require),
        ] {
            let tp = parse(&format!("sslmode={mode}")).to_tokio_postgres();
            assert_eq!(tp.get_ssl_mode(), expected, "{mode}");
        }
    }

    /// A cheap deterministic fuzz: random strings over an alphabet of the characters
    /// every parser branch cares about must give `Ok` or `Err`, never a panic.
    #[test]
    fn never_panics() {
        let alphabet: Vec<char> = "postgres:/@[]%,?&=' \\\t\nhx0159aF#*é€\u{0}"
            .chars()
            .collect();
        let prefixes = ["", "postgres://", "postgresql://u:p@", "host=", "password="];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let env = env_of(&[]);
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            let mut s = String::from(prefixes[(next() % prefixes.len() as u64) as usize]);
            for _ in 0..len {
                s.push(alphabet[(next() % alphabet.len() as u64) as usize]);
            }
            if let Ok(c) = ConnInfo::parse_with_env(&s, &env) {
                assert!(!c.hosts.is_empty(), "{s:?}");
                let _ = c.redacted();
                let _ = c.to_tokio_postgres();
            }
        }
    }
}
