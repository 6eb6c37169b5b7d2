//! [`ConnInfoError`] and [`Origin`]: what can go wrong turning text into a
//! [`ConnInfo`](super::ConnInfo), and the rule that decides what an error may quote.
//!
//! Invariant: no error carries the password, nor text that may be a fragment of a
//! mistyped one. A word is quoted only when it is shaped like a keyword and does not
//! follow an unquoted password ([`word_error`]); otherwise the error is
//! [`ConnInfoError::Withheld`].

use std::fmt;

/// `KEYWORDS` as one line, for error messages.
pub(super) const ACCEPTED: &str =
    "host, hostaddr, port, user, password, passfile, dbname, sslmode, channel_binding, \
     sslnegotiation, sslrootcert, sslcert, sslkey, application_name, options, \
     connect_timeout, target_session_attrs, load_balance_hosts, keepalives, \
     keepalives_idle, keepalives_interval, keepalives_count";

/// Where a rejected value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The connection string itself.
    ConnString,
    /// The named environment variable.
    Env(&'static str),
}

/// Why a connection string could not be turned into a [`ConnInfo`](super::ConnInfo). No variant holds
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
    /// The `hostaddr` list and the `host` list are both given with different lengths.
    #[error("could not match {hosts} host names to {hostaddrs} hostaddr values; fix: give one hostaddr per host (an empty entry uses the host name), or leave one of the two lists out")]
    HostaddrCountMismatch {
        /// How many host names were given.
        hosts: usize,
        /// How many hostaddr values were given.
        hostaddrs: usize,
    },
    /// `sslnegotiation=direct` with an `sslmode` that would allow plain text.
    #[error("sslnegotiation=direct needs sslmode=require, verify-ca or verify-full, not {sslmode}: direct TLS has no plain-text fallback; fix: set sslmode=verify-full (or require), or drop sslnegotiation=direct")]
    DirectNeedsTls {
        /// The `sslmode` in effect.
        sslmode: &'static str,
    },
    /// `sslrootcert=system` with an `sslmode` that does not check the host name.
    #[error(
        "sslmode={mode} (from {origin}) cannot be used with sslrootcert=system; \
         fix: use sslmode=verify-full (the default with sslrootcert=system), or name a private CA file in sslrootcert"
    )]
    WeakSslModeWithSystemRoots {
        /// The weaker mode that was given.
        mode: &'static str,
        /// Where it was given.
        origin: Origin,
    },
    /// The port list fits neither "one port for all hosts" nor "one port per host".
    #[error("could not match {ports} port numbers to {hosts} hosts; fix: give one port for all hosts, or one per host (an empty entry means 5432)")]
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

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::ConnString => f.write_str("the connection string"),
            Origin::Env(var) => write!(f, "environment variable {var}"),
        }
    }
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
pub(super) fn word_error(
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

/// [`ConnInfoError::UnknownKeyword`], as a `make` for [`word_error`].
pub(super) fn unknown_keyword(keyword: String) -> ConnInfoError {
    ConnInfoError::UnknownKeyword { keyword }
}

/// [`ConnInfoError::MissingEquals`], as a `make` for [`word_error`].
pub(super) fn missing_equals(keyword: String) -> ConnInfoError {
    ConnInfoError::MissingEquals { keyword }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{env_of, parse_err};
    use super::super::ConnInfo;
    use super::*;

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
            "unknown connection parameter \"foo\" (accepted: host, hostaddr, port, user, \
             password, passfile, dbname, sslmode, channel_binding, sslnegotiation, sslrootcert, \
             sslcert, sslkey, application_name, options, connect_timeout, target_session_attrs, \
             load_balance_hosts, keepalives, keepalives_idle, keepalives_interval, \
             keepalives_count)"
        );
        assert_eq!(
            parse_err("postgres://h/db?service=prod"),
            ConnInfoError::UnknownKeyword {
                keyword: "service".into()
            }
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
}
