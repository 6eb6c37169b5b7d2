//! `ConnInfo`: where and how to connect to PostgreSQL, parsed the way libpq does.
//!
//! Owns libpq connection strings in both of libpq's forms — URLs
//! (`postgres://app:pw@db:5432/shop?sslmode=require`) and keyword/value strings
//! (`host=db port=5433 password='it\'s'`) — the fallbacks libpq applies to them
//! (string > `PG*` environment variable > built-in default, then the password file),
//! how a connection is shown without its password, and the `tokio_postgres::Config`
//! built from it, so the replication client and the ordinary SQL client always agree
//! on one description.
//!
//! ```text
//!                    url.rs            resolve.rs                    redact.rs
//! "postgres://…"  ─→ parse_url ──┐                                ┌─→ redacted(), Display
//!                                ├─→ Raw ─→ resolve ─→ ConnInfo ──┤
//! "host=… port=…" ─→ parse_keyword_value   (env, defaults,        └─→ to_tokio_postgres()
//!                    keyword_value.rs       validation, pgpass)       tokio_config.rs
//! ```
//!
//! # Layout
//!
//! * `mod.rs` — the public types ([`ConnInfo`], [`HostAddr`], [`Host`]), the defaults,
//!   [`ConnInfo::parse`] (the whole flow above) and re-exports;
//! * `url.rs`, `keyword_value.rs` — the two parsers, text → `Raw`;
//! * `raw.rs` — `Raw`, the settings as written, before any fallback;
//! * `percent.rs` — percent decoding (URL input) and encoding (redacted output);
//! * `resolve.rs` — environment, defaults and validation, step by step;
//! * `pgpass.rs` — the password file: where it is and which line applies;
//! * `tls_settings.rs` — [`SslMode`], [`ChannelBinding`] and [`SslNegotiation`], the
//!   one place their libpq spellings are written;
//! * `host_choice.rs` — [`TargetSessionAttrs`] and [`LoadBalanceHosts`]: which of
//!   several hosts is acceptable and in which order they are tried;
//! * `keepalives.rs` — [`Keepalives`], the TCP keepalive settings;
//! * `hosts.rs` — the host, hostaddr and port lists paired up;
//! * `error.rs` — [`ConnInfoError`], [`Origin`] and the rule for what an error may quote;
//! * `redact.rs` — [`ConnInfo::redacted`] and the `Display` impls;
//! * `tokio_config.rs` — [`ConnInfo::to_tokio_postgres`].
//!
//! # Invariants
//!
//! * a parsed [`ConnInfo`] has at least one host, each with a resolved port;
//! * every setting has the same meaning for the replication connection and the SQL
//!   connection: both walk [`ConnInfo::hosts`] the same way (`pg::client::host_walk`);
//! * the password lives only in a [`Secret`]: `Debug` shows `[redacted]`,
//!   [`ConnInfo::redacted`] and `Display` leave it out, and no [`ConnInfoError`] ever
//!   carries it, nor text that looks like a fragment of a mistyped password (see
//!   [`ConnInfoError::Withheld`] and [`ConnInfoError::MalformedUrl`]);
//! * parsing never panics, whatever the input.
//!
//! libpq behaviour that is deliberately not replicated is listed on [`ConnInfo::parse`].

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::secret::Secret;

mod error;
mod host_choice;
mod hosts;
mod keepalives;
mod keyword_value;
mod percent;
mod pgpass;
mod raw;
mod redact;
mod resolve;
#[cfg(test)]
mod testing;
mod tls_settings;
mod tokio_config;
mod url;

pub use error::{ConnInfoError, Origin};
pub use host_choice::{LoadBalanceHosts, ServerState, TargetSessionAttrs};
pub use keepalives::Keepalives;
pub use percent::encode as percent_encode;
pub use tls_settings::{ChannelBinding, SslMode, SslNegotiation};

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
    "hostaddr",
    "port",
    "user",
    "password",
    "passfile",
    "dbname",
    "sslmode",
    "channel_binding",
    "sslnegotiation",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
    "options",
    "connect_timeout",
    "target_session_attrs",
    "load_balance_hosts",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
];

/// A fully resolved description of a PostgreSQL connection.
/// The `sslrootcert` value that means "the operating system's trust store" (libpq 16+).
pub const SYSTEM_ROOTS: &str = "system";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// The servers to try, in order; never empty after parsing.
    pub hosts: Vec<HostAddr>,
    /// The role to log in as.
    pub user: String,
    /// The password given for every host: from the string, `PGPASSWORD` or
    /// `--database-password-file`. When unset, each host may have its own from the
    /// password file ([`HostAddr::passfile_password`]; see [`ConnInfo::password_for`]).
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
    /// Bound on each host's connection attempt (libpq applies it per host); `None`
    /// waits forever.
    pub connect_timeout: Option<Duration>,
    /// Which server of [`ConnInfo::hosts`] is acceptable.
    pub target_session_attrs: TargetSessionAttrs,
    /// In which order the hosts are tried.
    pub load_balance_hosts: LoadBalanceHosts,
    /// TCP keepalives of every TCP connection.
    pub keepalives: Keepalives,
    /// How TLS is started.
    pub sslnegotiation: SslNegotiation,
}

/// One server to try: a host and the port to use with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostAddr {
    /// Where the server is: the name used for TLS verification and the password
    /// file, and the address unless `hostaddr` is set.
    pub host: Host,
    /// libpq `hostaddr`: the numeric address to connect to instead of resolving
    /// `host` (no DNS lookup).
    pub hostaddr: Option<IpAddr>,
    /// TCP port, or for a Unix socket the number in the socket file name.
    pub port: u16,
    /// What the password file says for this host, port, database and user (looked up
    /// only when no password was given otherwise).
    pub passfile_password: Option<Secret>,
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

impl ConnInfo {
    /// Parse a URL (`postgres://` or `postgresql://`) or a keyword/value string
    /// (`host=… port=…`), filling unset fields from the process environment (PGHOST,
    /// PGHOSTADDR, PGPORT, PGUSER, PGPASSWORD, PGPASSFILE, PGDATABASE, PGSSLMODE,
    /// PGCHANNELBINDING, PGSSLNEGOTIATION, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY, PGAPPNAME,
    /// PGOPTIONS, PGCONNECT_TIMEOUT, PGTARGETSESSIONATTRS, PGLOADBALANCEHOSTS) and
    /// then defaults.
    ///
    /// Precedence is string > environment > default. Defaults: host `localhost`, port
    /// 5432, user `PGUSER`, else `USER`, else `postgres`; dbname = user; sslmode
    /// `prefer`; channel_binding `prefer`; target_session_attrs `any`;
    /// load_balance_hosts `disable`; keepalives on with the system's timings. An empty
    /// value (`host=''`, `postgres://:5432`, an empty variable) counts as unset. When a
    /// keyword appears twice the later one wins; URL query parameters override the
    /// parts before the `?`.
    ///
    /// Lists: `host`, `hostaddr` and `port` take comma-separated lists (in a URL also
    /// `h1:5432,h2:5433`); one port applies to every host, otherwise there must be one
    /// per host, and an empty entry means the default. `hostaddr` entries are numeric
    /// addresses connected to instead of resolving the host name (which still serves
    /// TLS verification and the password file). How the list is walked —
    /// `target_session_attrs`, `load_balance_hosts`, `connect_timeout` per host — is
    /// `pg::client::host_walk`.
    ///
    /// `connect_timeout` is whole seconds; 0 or negative means wait forever and 1 is
    /// raised to 2, as libpq does. `keepalives=0` turns TCP keepalives off;
    /// `keepalives_idle`, `keepalives_interval` (seconds) and `keepalives_count` are
    /// positive whole numbers. `sslnegotiation=direct` (PostgreSQL 17+: TLS at once,
    /// ALPN `postgresql`, no SSLRequest) needs `sslmode` require, verify-ca or
    /// verify-full, as in libpq.
    ///
    /// Password file: when neither the string nor `PGPASSWORD` gives a password, the
    /// file named by `passfile`, else `PGPASSFILE`, else `$HOME/.pgpass`
    /// (`%APPDATA%\postgresql\pgpass.conf` on Windows) is read. Lines are
    /// `hostname:port:database:username:password`, `*` matches any value in the first
    /// four fields, `\:` and `\\` escape, lines starting with `#` are comments, and the
    /// first matching line wins. Each host is looked up on its own
    /// ([`ConnInfo::password_for`]), as libpq does. A Unix socket in one of the usual
    /// default directories matches `localhost`. A missing or unreadable file is ignored.
    /// Unlike libpq, the file's permissions are not checked: secrets mounted by container
    /// orchestrators are commonly group/world-readable (0644) and libpq would silently
    /// skip them.
    ///
    /// Not replicated from libpq: other keywords (`service`, `replication`,
    /// `sslpassword`, `gssencmode`, ...) and their variables are rejected or ignored; a
    /// `dbname` that is itself a connection string is not expanded; the default host is
    /// `localhost`, not a Unix socket; the URL form `ssl=true` is not translated;
    /// abstract (`@`) Unix sockets are not recognised; in a URL the user info ends at
    /// the last `@` before the first `/` or `?` (libpq stops at the first `@`).
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
        let mut raw = raw::Raw::default();
        match url::strip_scheme(s) {
            Some(rest) => url::parse_url(rest, &mut raw)?,
            None => keyword_value::parse_keyword_value(s, &mut raw)?,
        }
        resolve::resolve(raw, env)
    }
}

impl FromStr for ConnInfo {
    type Err = ConnInfoError;

    /// [`ConnInfo::parse`], reading the process environment.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ConnInfo::parse(s)
    }
}

impl ConnInfo {
    /// The password to send to `addr`: the one given for all hosts, else the password
    /// file's line for this host (libpq looks the file up per host).
    pub fn password_for<'a>(&'a self, addr: &'a HostAddr) -> Option<&'a Secret> {
        self.password.as_ref().or(addr.passfile_password.as_ref())
    }

    /// The same settings for `addr` alone, with its password resolved: what one
    /// attempt of a host walk connects with.
    pub fn for_host(&self, addr: &HostAddr) -> ConnInfo {
        ConnInfo {
            hosts: vec![addr.clone()],
            password: self.password_for(addr).cloned(),
            ..self.clone()
        }
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

#[cfg(test)]
mod tests {
    use super::testing::env_of;
    use super::*;

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
