//! Resolution: from what the string said ([`Raw`]) to a [`ConnInfo`], applying libpq's
//! fallbacks and validating every value.
//!
//! ```text
//! value in the string ─┐
//! PG* variable ────────┼─ first one set wins ─→ validated ─→ ConnInfo field
//! built-in default ────┘
//! ```
//!
//! The steps, in order: user and database, hosts paired with ports, `sslmode`,
//! `channel_binding`, `connect_timeout`, certificate paths and the plain strings, and
//! last the password (string, `PGPASSWORD`, then [`super::pgpass`], which needs the
//! hosts, database and user already resolved). Invariants: an empty variable counts as
//! unset; every host has a port; a value that fails validation is reported with its
//! [`Origin`], and the first failing step in that order is the one reported.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::pgpass;
use super::raw::{split_list, Raw};
use super::{
    ChannelBinding, ConnInfo, ConnInfoError, Host, HostAddr, Origin, SslMode, DEFAULT_HOST,
    DEFAULT_PORT, DEFAULT_USER, SYSTEM_ROOTS,
};
use crate::secret::Secret;

const PORT_EXPECTED: &str = "an integer from 1 to 65535";
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
    let (user, dbname) = user_and_dbname(raw.user, raw.dbname, env);
    let hosts = hosts(raw.host, raw.port, env)?;
    let path = |value, name| env.pick(value, name).map(|(v, _)| PathBuf::from(v));
    let sslrootcert = path(raw.sslrootcert, "PGSSLROOTCERT");
    let system_roots = sslrootcert.as_deref() == Some(Path::new(SYSTEM_ROOTS));
    let sslmode = sslmode(raw.sslmode, env, system_roots)?;
    let channel_binding = channel_binding(raw.channel_binding, env)?;
    let connect_timeout = connect_timeout(raw.connect_timeout, env)?;
    let sslcert = path(raw.sslcert, "PGSSLCERT");
    let sslkey = path(raw.sslkey, "PGSSLKEY");
    let application_name = raw.application_name.or_else(|| env.var("PGAPPNAME"));
    let options = raw.options.or_else(|| env.var("PGOPTIONS"));
    let password = match raw.password.or_else(|| env.var("PGPASSWORD")) {
        Some(p) => Some(p),
        None => pgpass::password(raw.passfile, env, &hosts, &dbname, &user),
    };
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

/// The hosts (string, else `PGHOST`, else [`DEFAULT_HOST`]) each paired with its port:
/// no port means the default for all, one port applies to every host, otherwise there
/// must be exactly one per host.
fn hosts(
    host: Option<Vec<String>>,
    port: Option<Vec<String>>,
    env: Env,
) -> Result<Vec<HostAddr>, ConnInfoError> {
    let mut names = match host {
        Some(hosts) => hosts,
        None => env
            .var("PGHOST")
            .map(|v| split_list(&v))
            .unwrap_or_default(),
    };
    if names.is_empty() {
        names.push(String::new());
    }
    let ports = ports(port, env)?;
    if ports.len() > 1 && ports.len() != names.len() {
        return Err(ConnInfoError::PortCountMismatch {
            ports: ports.len(),
            hosts: names.len(),
        });
    }
    let port_for = |i: usize| match ports.len() {
        0 => DEFAULT_PORT,
        1 => ports[0],
        _ => ports[i],
    };
    let addr = |(i, name): (usize, &String)| HostAddr {
        host: host_from_text(name),
        port: port_for(i),
    };
    Ok(names.iter().enumerate().map(addr).collect())
}

/// The port list from the string, else `PGPORT`; an empty entry is [`DEFAULT_PORT`].
fn ports(port: Option<Vec<String>>, env: Env) -> Result<Vec<u16>, ConnInfoError> {
    let (texts, origin) = match port {
        Some(ports) => (ports, Origin::ConnString),
        None => match env.var("PGPORT") {
            Some(v) => (split_list(&v), Origin::Env("PGPORT")),
            None => (Vec::new(), Origin::ConnString),
        },
    };
    let port = |text: String| {
        if text.is_empty() {
            return Ok(DEFAULT_PORT);
        }
        parse_port_number(&text).ok_or(ConnInfoError::InvalidValue {
            key: "port",
            value: text,
            origin,
            expected: PORT_EXPECTED,
        })
    };
    texts.into_iter().map(port).collect()
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

/// `channel_binding` from the string, else `PGCHANNELBINDING`, else `prefer`.
fn channel_binding(value: Option<String>, env: Env) -> Result<ChannelBinding, ConnInfoError> {
    let picked = env.pick(value, "PGCHANNELBINDING");
    let expected = ChannelBinding::EXPECTED;
    let binding = checked(
        picked,
        "channel_binding",
        expected,
        ChannelBinding::from_libpq,
    )?;
    Ok(binding.unwrap_or_default())
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

fn host_from_text(name: &str) -> Host {
    if name.is_empty() {
        Host::Tcp(DEFAULT_HOST.to_owned())
    } else if name.starts_with('/') {
        Host::Unix(PathBuf::from(name))
    } else {
        Host::Tcp(name.to_owned())
    }
}

pub(super) fn parse_port_number(text: &str) -> Option<u16> {
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
