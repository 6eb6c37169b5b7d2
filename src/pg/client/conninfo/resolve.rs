//! Resolution: from what the string said ([`Raw`]) to a [`ConnInfo`], applying libpq's
//! fallbacks and validating every value.
//!
//! ```text
//! value in the string ─┐
//! PG* variable ────────┼─ first one set wins ─→ validated ─→ ConnInfo field
//! built-in default ────┘
//! ```
//!
//! The steps, in order: user and database, hosts paired with addresses and ports
//! ([`super::hosts`]), `sslmode`, `channel_binding`, `sslnegotiation`,
//! `connect_timeout`, `target_session_attrs`, `load_balance_hosts`, `keepalives*`,
//! certificate paths and the plain strings, and last the password (string,
//! `PGPASSWORD`, else per host from [`super::pgpass`], which needs the hosts, database
//! and user already resolved). Invariants: an empty variable counts as
//! unset; every host has a port; a value that fails validation is reported with its
//! [`Origin`], and the first failing step in that order is the one reported.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::hosts::hosts;
use super::keepalives::Keepalives;
use super::pgpass;
use super::raw::Raw;
use super::{
    ChannelBinding, ConnInfo, ConnInfoError, LoadBalanceHosts, Origin, SslMode, SslNegotiation,
    TargetSessionAttrs, DEFAULT_USER, SYSTEM_ROOTS,
};
use crate::secret::Secret;

const TIMEOUT_EXPECTED: &str = "an integer number of seconds (0 or less waits forever)";

/// The environment as resolution sees it: a variable set to the empty string is unset.
#[derive(Clone, Copy)]
pub(super) struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Env<'_> {
    /// The variable's value, unless it is unset or empty.
    pub(super) fn var(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.is_empty())
    }

    /// The string's value if it gave one, else the variable's, with where it came from.
    fn pick(&self, value: Option<String>, name: &'static str) -> Option<(String, Origin)> {
        match value {
            Some(v) => Some((v, Origin::ConnString)),
            None => self.var(name).map(|v| (v, Origin::Env(name))),
        }
    }
}

/// Apply the environment, the defaults and validation to what the string said.
pub(super) fn resolve(
    raw: Raw,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ConnInfo, ConnInfoError> {
    let env = Env(env);
    let keepalives = keepalives(&raw)?;
    let (user, dbname) = user_and_dbname(raw.user, raw.dbname, env);
    let mut hosts = hosts(raw.host, raw.hostaddr, raw.port, env)?;
    let path = |value, name| env.pick(value, name).map(|(v, _)| PathBuf::from(v));
    let sslrootcert = path(raw.sslrootcert, "PGSSLROOTCERT");
    let system_roots = sslrootcert.as_deref() == Some(Path::new(SYSTEM_ROOTS));
    let sslmode = sslmode(raw.sslmode, env, system_roots)?;
    let channel_binding = choice(
        raw.channel_binding,
        env,
        "PGCHANNELBINDING",
        "channel_binding",
        ChannelBinding::EXPECTED,
        ChannelBinding::from_libpq,
    )?;
    let sslnegotiation = sslnegotiation(raw.sslnegotiation, env, sslmode)?;
    let connect_timeout = connect_timeout(raw.connect_timeout, env)?;
    let target_session_attrs = choice(
        raw.target_session_attrs,
        env,
        "PGTARGETSESSIONATTRS",
        "target_session_attrs",
        TargetSessionAttrs::EXPECTED,
        TargetSessionAttrs::from_libpq,
    )?;
    let load_balance_hosts = choice(
        raw.load_balance_hosts,
        env,
        "PGLOADBALANCEHOSTS",
        "load_balance_hosts",
        LoadBalanceHosts::EXPECTED,
        LoadBalanceHosts::from_libpq,
    )?;
    let sslcert = path(raw.sslcert, "PGSSLCERT");
    let sslkey = path(raw.sslkey, "PGSSLKEY");
    let application_name = raw.application_name.or_else(|| env.var("PGAPPNAME"));
    let options = raw.options.or_else(|| env.var("PGOPTIONS"));
    let password = raw.password.or_else(|| env.var("PGPASSWORD"));
    if password.is_none() {
        pgpass::fill(raw.passfile, env, &mut hosts, &dbname, &user);
    }
    Ok(ConnInfo {
        hosts,
        user,
        password: password.map(Secret::from),
        dbname,
        sslmode,
        channel_binding,
        sslrootcert,
        sslcert,
        sslkey,
        application_name,
        options,
        connect_timeout,
        target_session_attrs,
        load_balance_hosts,
        keepalives,
        sslnegotiation,
    })
}

/// User: string, `PGUSER`, `USER`, then `postgres`. Database: string, `PGDATABASE`,
/// then the user name.
fn user_and_dbname(user: Option<String>, dbname: Option<String>, env: Env) -> (String, String) {
    let user = user
        .or_else(|| env.var("PGUSER"))
        .or_else(|| env.var("USER"))
        .unwrap_or_else(|| DEFAULT_USER.to_owned());
    let dbname = dbname
        .or_else(|| env.var("PGDATABASE"))
        .unwrap_or_else(|| user.clone());
    (user, dbname)
}

/// One of libpq's named settings (`sslmode`, `target_session_attrs`, …): from the
/// string, else the variable `var`, else `T`'s default; a value that is none of `T`'s
/// spellings is an error naming `key`, the value, where it came from and `expected`.
fn choice<T: Default>(
    value: Option<String>,
    env: Env,
    var: &'static str,
    key: &'static str,
    expected: &'static str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, ConnInfoError> {
    Ok(checked(env.pick(value, var), key, expected, parse)?.unwrap_or_default())
}

/// `sslnegotiation` from the string, else `PGSSLNEGOTIATION`, else `postgres`.
/// `direct` has no plain-text fallback, so (as libpq) it needs an `sslmode` that
/// insists on TLS.
fn sslnegotiation(
    value: Option<String>,
    env: Env,
    sslmode: SslMode,
) -> Result<SslNegotiation, ConnInfoError> {
    let negotiation = choice(
        value,
        env,
        "PGSSLNEGOTIATION",
        "sslnegotiation",
        SslNegotiation::EXPECTED,
        SslNegotiation::from_libpq,
    )?;
    let weak = matches!(sslmode, SslMode::Disable | SslMode::Allow | SslMode::Prefer);
    if negotiation == SslNegotiation::Direct && weak {
        return Err(ConnInfoError::DirectNeedsTls {
            sslmode: sslmode.as_str(),
        });
    }
    Ok(negotiation)
}

/// The four `keepalives*` keywords (libpq has no environment variables for them).
fn keepalives(raw: &Raw) -> Result<Keepalives, ConnInfoError> {
    let from_string = |value: &Option<String>| value.clone().map(|v| (v, Origin::ConnString));
    let number = |value: &Option<String>, key| {
        checked(
            from_string(value),
            key,
            Keepalives::NUMBER_EXPECTED,
            Keepalives::parse_number,
        )
    };
    let seconds = |value, key| Ok::<_, ConnInfoError>(number(value, key)?.map(secs));
    let enabled = checked(
        from_string(&raw.keepalives),
        "keepalives",
        Keepalives::ENABLED_EXPECTED,
        Keepalives::parse_enabled,
    )?;
    Ok(Keepalives {
        enabled: enabled.unwrap_or(true),
        idle: seconds(&raw.keepalives_idle, "keepalives_idle")?,
        interval: seconds(&raw.keepalives_interval, "keepalives_interval")?,
        count: number(&raw.keepalives_count, "keepalives_count")?,
    })
}

/// `sslmode` from the string, else `PGSSLMODE`, else `prefer` — or `verify-full`
/// with `sslrootcert=system`, which (as in libpq 16+) refuses any weaker mode: the
/// public CAs of the system store vouch for any host name, so only the host-name
/// check makes them mean something.
fn sslmode(value: Option<String>, env: Env, system_roots: bool) -> Result<SslMode, ConnInfoError> {
    let picked = env.pick(value, "PGSSLMODE");
    let origin = picked.as_ref().map(|(_, origin)| *origin);
    let mode = checked(picked, "sslmode", SslMode::EXPECTED, SslMode::from_libpq)?;
    match (mode, origin) {
        (None, _) if system_roots => Ok(SslMode::VerifyFull),
        (Some(mode), Some(origin)) if system_roots && mode != SslMode::VerifyFull => {
            Err(ConnInfoError::WeakSslModeWithSystemRoots {
                mode: mode.as_str(),
                origin,
            })
        }
        (mode, _) => Ok(mode.unwrap_or_default()),
    }
}

fn secs(n: u32) -> Duration {
    Duration::from_secs(u64::from(n))
}

/// `connect_timeout` from the string, else `PGCONNECT_TIMEOUT`, else none.
fn connect_timeout(value: Option<String>, env: Env) -> Result<Option<Duration>, ConnInfoError> {
    let picked = env.pick(value, "PGCONNECT_TIMEOUT");
    let timeout = checked(
        picked,
        "connect_timeout",
        TIMEOUT_EXPECTED,
        parse_connect_timeout,
    )?;
    Ok(timeout.flatten())
}

/// A picked value run through `parse`; when `parse` refuses it, an error naming `key`,
/// the value, where it came from and what is `expected`.
fn checked<T>(
    picked: Option<(String, Origin)>,
    key: &'static str,
    expected: &'static str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, ConnInfoError> {
    let Some((value, origin)) = picked else {
        return Ok(None);
    };
    match parse(&value) {
        Some(parsed) => Ok(Some(parsed)),
        None => Err(ConnInfoError::InvalidValue {
            key,
            value,
            origin,
            expected,
        }),
    }
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::super::testing::{env_of, parse, parse_err, tcp};
    use super::super::{ConnInfo, ConnInfoError, SslMode};

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
}
