//! How a connection is shown to humans and logs: [`ConnInfo::redacted`] and the
//! `Display` impls of [`ConnInfo`], [`HostAddr`] and [`Host`].
//!
//! Invariants: the password is never written; the redacted URL parses back to the same
//! [`ConnInfo`] minus the password (host names containing commas aside), so a logged
//! description can be pasted back as a connection string.

use std::fmt;
use std::path::PathBuf;

use super::percent::{encode, QUERY_KEEP, QUERY_KEEP_IN_LIST};
use super::{
    ChannelBinding, ConnInfo, Host, HostAddr, LoadBalanceHosts, SslNegotiation, TargetSessionAttrs,
};

impl ConnInfo {
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
            push_tcp_hosts(&mut out, &self.hosts);
        } else {
            query.extend(hosts_as_query(&self.hosts));
        }
        if self.hosts.iter().any(|h| h.hostaddr.is_some()) {
            let addrs: Vec<String> = self
                .hosts
                .iter()
                .map(|h| h.hostaddr.map(|a| a.to_string()).unwrap_or_default())
                .collect();
            query.push(("hostaddr", encode(&addrs.join(","), QUERY_KEEP)));
        }
        out.push('/');
        out.push_str(&encode(&self.dbname, b""));
        query.extend(self.settings_as_query());
        for (i, (key, value)) in query.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(key);
            out.push('=');
            out.push_str(value);
        }
        out
    }

    /// The query parameters after the hosts and database: `sslmode` always,
    /// `channel_binding`, `sslnegotiation`, `target_session_attrs` and
    /// `load_balance_hosts` when not the default, then every other setting that is set.
    fn settings_as_query(&self) -> Vec<(&'static str, String)> {
        let mut query = vec![("sslmode", self.sslmode.as_str().to_owned())];
        if self.channel_binding != ChannelBinding::default() {
            query.push(("channel_binding", self.channel_binding.as_str().to_owned()));
        }
        if self.sslnegotiation != SslNegotiation::default() {
            query.push(("sslnegotiation", self.sslnegotiation.as_str().to_owned()));
        }
        if self.target_session_attrs != TargetSessionAttrs::default() {
            let attrs = self.target_session_attrs.as_str().to_owned();
            query.push(("target_session_attrs", attrs));
        }
        if self.load_balance_hosts != LoadBalanceHosts::default() {
            let order = self.load_balance_hosts.as_str().to_owned();
            query.push(("load_balance_hosts", order));
        }
        query.extend(self.keepalives_as_query());
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.to_string_lossy().into_owned());
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
        query
    }
}

impl ConnInfo {
    /// `keepalives=0` when off, and each keepalive setting that is set.
    fn keepalives_as_query(&self) -> Vec<(&'static str, String)> {
        let k = &self.keepalives;
        let secs = |d: Option<std::time::Duration>| d.map(|d| d.as_secs().to_string());
        let settings = [
            ("keepalives", (!k.enabled).then(|| "0".to_owned())),
            ("keepalives_idle", secs(k.idle)),
            ("keepalives_interval", secs(k.interval)),
            ("keepalives_count", k.count.map(|n| n.to_string())),
        ];
        settings
            .into_iter()
            .filter_map(|(key, value)| Some((key, value?)))
            .collect()
    }
}

/// TCP hosts in the authority: `db:5432,[::1]:5433`, every port written out.
fn push_tcp_hosts(out: &mut String, hosts: &[HostAddr]) {
    for (i, h) in hosts.iter().enumerate() {
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
}

/// A host list with a Unix socket cannot be written in the authority (a directory has
/// `/`s), so it goes to the query as parallel `host` and `port` lists.
fn hosts_as_query(hosts: &[HostAddr]) -> [(&'static str, String); 2] {
    let names: Vec<String> = hosts
        .iter()
        .map(|h| encode(&h.host.to_string(), QUERY_KEEP_IN_LIST))
        .collect();
    let ports: Vec<String> = hosts.iter().map(|h| h.port.to_string()).collect();
    [("host", names.join(",")), ("port", ports.join(","))]
}

impl fmt::Display for ConnInfo {
    /// The same text as [`ConnInfo::redacted`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for HostAddr {
    /// `db:5432`, `[::1]:5432`, or for a Unix socket the socket file path; with a
    /// `hostaddr` other than the name, `db:5432 (10.0.0.1)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_name(f)?;
        match (&self.host, self.hostaddr) {
            (Host::Tcp(name), Some(addr)) if *name != addr.to_string() => write!(f, " ({addr})"),
            _ => Ok(()),
        }
    }
}

impl HostAddr {
    fn fmt_name(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

#[cfg(test)]
mod tests {
    use super::super::testing::{env_of, parse, tcp, unix};
    use super::*;

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
            "postgres://a:1,b:2/d?target_session_attrs=read-write&load_balance_hosts=random\
             &keepalives=0&keepalives_idle=9&keepalives_interval=3&keepalives_count=4",
            "host=a,b hostaddr=10.0.0.1, port=1,2 target_session_attrs=prefer-standby",
            "host=/tmp,b hostaddr=,::1 keepalives_idle=30",
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
}
