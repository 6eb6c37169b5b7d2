//! The URL form: `postgres://` or `postgresql://`
//! `[user[:password]@][host[:port][,host[:port]...]][/dbname][?keyword=value&...]`,
//! parsed into a [`Raw`].
//!
//! Each component is percent-decoded on its own, IPv6 hosts are written in brackets,
//! and query parameters are named like the keywords and override the parts before the
//! `?`. The user info ends at the *last* `@` before the first `/` or `?`, so an
//! unencoded `@` in a password still works (libpq stops at the first `@`).
//!
//! Invariant: when the structure looks broken by an unencoded `/`, `?` or `@` in the
//! user info, nothing that may be password text reaches an error
//! ([`ConnInfoError::MalformedUrl`]).

use super::error::{missing_equals, unknown_keyword, word_error};
use super::hosts::parse_port_number;
use super::percent::percent_decode;
use super::raw::Raw;
use super::ConnInfoError;

/// The part after `postgres://` or `postgresql://` (scheme matched case-insensitively).
pub(super) fn strip_scheme(s: &str) -> Option<&str> {
    ["postgresql://", "postgres://"].iter().find_map(|scheme| {
        let head = s.get(..scheme.len())?;
        head.eq_ignore_ascii_case(scheme)
            .then(|| &s[scheme.len()..])
    })
}

/// Everything after the scheme of a URL.
pub(super) fn parse_url(rest: &str, raw: &mut Raw) -> Result<(), ConnInfoError> {
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
        set_userinfo(userinfo, raw)?;
    }
    set_hosts(hostspec, suspicious, raw)?;
    if let Some(path) = path {
        if suspicious && path.contains('@') {
            return Err(ConnInfoError::MalformedUrl);
        }
        raw.set("dbname", percent_decode(path, "database name")?);
    }
    if let Some(query) = query {
        set_query(query, raw)?;
    }
    Ok(())
}

/// `user[:password]`, each percent-decoded.
fn set_userinfo(userinfo: &str, raw: &mut Raw) -> Result<(), ConnInfoError> {
    let (user, password) = match userinfo.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (userinfo, None),
    };
    raw.set("user", percent_decode(user, "user name")?);
    if let Some(password) = password {
        raw.set("password", percent_decode(password, "password")?);
    }
    Ok(())
}

/// `host[:port][,host[:port]...]`; an empty entry keeps its place in the list (and
/// later means the default), an all-empty list leaves hosts or ports unset.
fn set_hosts(hostspec: &str, suspicious: bool, raw: &mut Raw) -> Result<(), ConnInfoError> {
    if hostspec.is_empty() {
        return Ok(());
    }
    let mut hosts = Vec::new();
    let mut ports = Vec::new();
    for entry in hostspec.split(',') {
        let (host, port) = split_host_port(entry)?;
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
    Ok(())
}

/// One list entry, `host`, `host:port`, `[v6]` or `[v6]:port`, still percent-encoded.
fn split_host_port(entry: &str) -> Result<(&str, &str), ConnInfoError> {
    let Some(bracketed) = entry.strip_prefix('[') else {
        return Ok(entry.split_once(':').unwrap_or((entry, "")));
    };
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
    Ok((inner, port))
}

/// `keyword=value&...`; as in the keyword/value form, a word right after a password
/// is never quoted in an error.
fn set_query(query: &str, raw: &mut Raw) -> Result<(), ConnInfoError> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::super::testing::{env_of, parse, tcp, unix};
    use super::super::{ConnInfo, SslMode};
    use crate::secret::Secret;

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
}
