//! The host list: `host`, `hostaddr` and `port` (each a comma-separated list, from the
//! string or `PGHOST` / `PGHOSTADDR` / `PGPORT`) paired into [`HostAddr`]s, as libpq
//! pairs them.
//!
//! Invariants: the result is never empty; when both `host` and `hostaddr` are given
//! they have the same length (an empty entry of either means "use the other"); one
//! port applies to every host, otherwise there is exactly one per host; an empty port
//! entry is [`DEFAULT_PORT`]; with neither a host name nor an address an entry is
//! [`DEFAULT_HOST`].

use std::net::IpAddr;
use std::path::PathBuf;

use super::raw::split_list;
use super::resolve::Env;
use super::{ConnInfoError, Host, HostAddr, Origin, DEFAULT_HOST, DEFAULT_PORT};

const PORT_EXPECTED: &str = "an integer from 1 to 65535";
const HOSTADDR_EXPECTED: &str =
    "a numeric IPv4 or IPv6 address (a host name goes in host; an empty entry uses the host name)";

/// The hosts to try, in the order written, each with its address and port.
pub(super) fn hosts(
    host: Option<Vec<String>>,
    hostaddr: Option<Vec<String>>,
    port: Option<Vec<String>>,
    env: Env,
) -> Result<Vec<HostAddr>, ConnInfoError> {
    let names = host
        .or_else(|| env.var("PGHOST").map(|v| split_list(&v)))
        .unwrap_or_default();
    let addrs = hostaddrs(hostaddr, env)?;
    if !names.is_empty() && !addrs.is_empty() && names.len() != addrs.len() {
        return Err(ConnInfoError::HostaddrCountMismatch {
            hosts: names.len(),
            hostaddrs: addrs.len(),
        });
    }
    let count = names.len().max(addrs.len()).max(1);
    let ports = ports(port, env)?;
    if ports.len() > 1 && ports.len() != count {
        return Err(ConnInfoError::PortCountMismatch {
            ports: ports.len(),
            hosts: count,
        });
    }
    let entry = |i: usize| {
        let hostaddr = addrs.get(i).copied().flatten();
        let name = names.get(i).map(String::as_str).unwrap_or_default();
        HostAddr {
            host: host_from_text(name, hostaddr),
            hostaddr,
            port: match ports.len() {
                0 => DEFAULT_PORT,
                1 => ports[0],
                _ => ports[i],
            },
            passfile_password: None,
        }
    };
    Ok((0..count).map(entry).collect())
}

/// The `hostaddr` list from the string, else `PGHOSTADDR`; an empty entry is `None`.
fn hostaddrs(
    hostaddr: Option<Vec<String>>,
    env: Env,
) -> Result<Vec<Option<IpAddr>>, ConnInfoError> {
    let (texts, origin) = listed(hostaddr, env, "PGHOSTADDR");
    let addr = |text: String| {
        if text.is_empty() {
            return Ok(None);
        }
        text.parse::<IpAddr>()
            .map(Some)
            .map_err(|_| ConnInfoError::InvalidValue {
                key: "hostaddr",
                value: text,
                origin,
                expected: HOSTADDR_EXPECTED,
            })
    };
    texts.into_iter().map(addr).collect()
}

/// The port list from the string, else `PGPORT`; an empty entry is [`DEFAULT_PORT`].
fn ports(port: Option<Vec<String>>, env: Env) -> Result<Vec<u16>, ConnInfoError> {
    let (texts, origin) = listed(port, env, "PGPORT");
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

/// A list from the string, else from the variable `var`, with where it came from.
fn listed(value: Option<Vec<String>>, env: Env, var: &'static str) -> (Vec<String>, Origin) {
    match value {
        Some(list) => (list, Origin::ConnString),
        None => match env.var(var) {
            Some(v) => (split_list(&v), Origin::Env(var)),
            None => (Vec::new(), Origin::ConnString),
        },
    }
}

/// A host entry: a directory (leading `/`) is a Unix socket; an empty name is the
/// address when one is given, else [`DEFAULT_HOST`].
fn host_from_text(name: &str, hostaddr: Option<IpAddr>) -> Host {
    match (name, hostaddr) {
        ("", Some(addr)) => Host::Tcp(addr.to_string()),
        ("", None) => Host::Tcp(DEFAULT_HOST.to_owned()),
        (dir, _) if dir.starts_with('/') => Host::Unix(PathBuf::from(dir)),
        (name, _) => Host::Tcp(name.to_owned()),
    }
}

pub(super) fn parse_port_number(text: &str) -> Option<u16> {
    text.trim().parse::<u16>().ok().filter(|p| *p != 0)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::super::testing::{env_of, parse, parse_err, tcp};
    use super::super::{ConnInfo, ConnInfoError, HostAddr};

    fn with_addr(name: &str, addr: &str, port: u16) -> HostAddr {
        HostAddr {
            hostaddr: Some(addr.parse::<IpAddr>().unwrap()),
            ..tcp(name, port)
        }
    }

    #[test]
    fn every_multi_host_form() {
        let two = vec![tcp("a", 5432), tcp("b", 5433)];
        for s in [
            "postgres://a:5432,b:5433/db",
            "postgres:///db?host=a,b&port=5432,5433",
            "postgres://x:1/db?host=a,b&port=5432,5433",
            "host=a,b port=5432,5433",
            "host='a, b' port=',5433'",
        ] {
            assert_eq!(parse(s).hosts, two, "{s}");
        }
        // One port for every host.
        let same = vec![tcp("a", 5433), tcp("b", 5433)];
        assert_eq!(parse("host=a,b port=5433").hosts, same);
        assert_eq!(parse("postgres:///db?host=a,b&port=5433").hosts, same);
        // `postgres://a,b:5433` gives a the default port and b its own, as libpq.
        assert_eq!(
            parse("postgres://a,b:5433/db").hosts,
            vec![tcp("a", 5432), tcp("b", 5433)]
        );
    }

    #[test]
    fn hostaddr_pairs_with_hosts() {
        let c = parse("host=db1,db2 hostaddr=10.0.0.1,::1 port=5432,5433");
        assert_eq!(
            c.hosts,
            vec![
                with_addr("db1", "10.0.0.1", 5432),
                with_addr("db2", "::1", 5433)
            ]
        );
        // An empty entry resolves that host's name.
        let c = parse("host=db1,db2 hostaddr=,10.0.0.2");
        assert_eq!(
            c.hosts,
            vec![tcp("db1", 5432), with_addr("db2", "10.0.0.2", 5432)]
        );
        // hostaddr alone: the address is also the name.
        let c = parse("postgres:///d?hostaddr=127.0.0.1,127.0.0.2&port=1,2");
        assert_eq!(
            c.hosts,
            vec![
                with_addr("127.0.0.1", "127.0.0.1", 1),
                with_addr("127.0.0.2", "127.0.0.2", 2)
            ]
        );
        let env = env_of(&[("PGHOSTADDR", "10.1.1.1")]);
        let c = ConnInfo::parse_with_env("host=db", &env).unwrap();
        assert_eq!(c.hosts, vec![with_addr("db", "10.1.1.1", 5432)]);
    }

    #[test]
    fn list_errors_name_the_key_and_the_fix() {
        assert_eq!(
            parse_err("host=a,b hostaddr=10.0.0.1"),
            ConnInfoError::HostaddrCountMismatch {
                hosts: 2,
                hostaddrs: 1
            }
        );
        assert_eq!(
            parse_err("host=a,b hostaddr=10.0.0.1").to_string(),
            "could not match 2 host names to 1 hostaddr values; fix: give one hostaddr per \
             host (an empty entry uses the host name), or leave one of the two lists out"
        );
        assert_eq!(
            parse_err("hostaddr=db.example.com").to_string(),
            "invalid hostaddr \"db.example.com\" from the connection string: expected a \
             numeric IPv4 or IPv6 address (a host name goes in host; an empty entry uses the \
             host name)"
        );
        assert_eq!(
            parse_err("postgres://a,b,c/db?port=1,2").to_string(),
            "could not match 2 port numbers to 3 hosts; fix: give one port for all hosts, or \
             one per host (an empty entry means 5432)"
        );
        assert!(matches!(
            parse_err("host=a,b port=1,x"),
            ConnInfoError::InvalidValue { key: "port", .. }
        ));
    }
}
