//! [`SslMode`], [`ChannelBinding`] and [`SslNegotiation`]: libpq's `sslmode`,
//! `channel_binding` and `sslnegotiation`, and the one place their libpq spellings are
//! written.
//!
//! Invariant: [`SslMode::as_str`] / [`ChannelBinding::as_str`] and `from_libpq` are
//! inverse, and each `EXPECTED` sentence lists exactly the spellings `from_libpq`
//! accepts, in declaration order (checked by the tests). Everything else that names a
//! mode (error texts, the Debezium importer, TLS errors) goes through these.

use std::fmt;

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

/// libpq's `sslnegotiation` (PostgreSQL 17+): how TLS is started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SslNegotiation {
    /// Ask with an `SSLRequest` first, then start TLS if the server agrees (the
    /// default; every server version).
    #[default]
    Postgres,
    /// Start TLS at once, with ALPN `postgresql` (servers 17 and later).
    Direct,
}

impl SslNegotiation {
    /// What an `sslnegotiation` value may be, for error messages.
    pub(crate) const EXPECTED: &'static str = "one of postgres, direct";

    /// The libpq spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslNegotiation::Postgres => "postgres",
            SslNegotiation::Direct => "direct",
        }
    }

    /// The setting for a libpq spelling (case-sensitive, as in libpq).
    pub fn from_libpq(s: &str) -> Option<Self> {
        Some(match s {
            "postgres" => SslNegotiation::Postgres,
            "direct" => SslNegotiation::Direct,
            _ => return None,
        })
    }
}

impl SslMode {
    /// What an `sslmode` value may be, for error messages.
    pub(crate) const EXPECTED: &'static str =
        "one of disable, allow, prefer, require, verify-ca, verify-full";

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
    /// What a `channel_binding` value may be, for error messages.
    pub(crate) const EXPECTED: &'static str = "one of disable, prefer, require";

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

#[cfg(test)]
mod tests {
    use super::super::testing::{env_of, parse, parse_err};
    use super::super::{ConnInfo, ConnInfoError, Origin};
    use super::*;

    #[test]
    fn expected_lists_every_spelling() {
        use SslMode::*;
        let modes = [Disable, Allow, Prefer, Require, VerifyCa, VerifyFull];
        let names: Vec<&str> = modes.iter().map(|m| m.as_str()).collect();
        assert_eq!(SslMode::EXPECTED, format!("one of {}", names.join(", ")));
        for mode in modes {
            assert_eq!(SslMode::from_libpq(mode.as_str()), Some(mode));
        }
        let bindings = [
            ChannelBinding::Disable,
            ChannelBinding::Prefer,
            ChannelBinding::Require,
        ];
        let names: Vec<&str> = bindings.iter().map(|b| b.as_str()).collect();
        assert_eq!(
            ChannelBinding::EXPECTED,
            format!("one of {}", names.join(", "))
        );
        for binding in bindings {
            assert_eq!(ChannelBinding::from_libpq(binding.as_str()), Some(binding));
        }
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
    fn sslnegotiation_parses_like_libpq() {
        assert_eq!(parse("").sslnegotiation, SslNegotiation::Postgres);
        let c = parse("postgres://h/d?sslnegotiation=postgres&sslmode=require");
        assert_eq!(c.sslnegotiation, SslNegotiation::Postgres);
        for mode in ["require", "verify-ca", "verify-full"] {
            let c = parse(&format!(
                "sslnegotiation=direct sslmode={mode} sslrootcert=/ca"
            ));
            assert_eq!(c.sslnegotiation, SslNegotiation::Direct);
            // Shown (and round-tripped) only when not the default.
            assert!(
                c.redacted().contains("sslnegotiation=direct"),
                "{}",
                c.redacted()
            );
            assert_eq!(parse(&c.redacted()), c);
            assert_eq!(
                c.to_tokio_postgres().get_ssl_negotiation(),
                tokio_postgres::config::SslNegotiation::Direct
            );
        }
        assert!(!parse("sslmode=require")
            .redacted()
            .contains("sslnegotiation"));
        assert_eq!(
            parse_err("sslnegotiation=direct").to_string(),
            "sslnegotiation=direct needs sslmode=require, verify-ca or verify-full, not \
             prefer: direct TLS has no plain-text fallback; fix: set sslmode=verify-full (or \
             require), or drop sslnegotiation=direct"
        );
        for weak in ["disable", "allow", "prefer"] {
            assert_eq!(
                parse_err(&format!("sslnegotiation=direct sslmode={weak}")),
                ConnInfoError::DirectNeedsTls {
                    sslmode: SslMode::from_libpq(weak).unwrap().as_str()
                }
            );
        }
        let env = env_of(&[("PGSSLNEGOTIATION", "direct"), ("PGSSLMODE", "require")]);
        let c = ConnInfo::parse_with_env("", &env).unwrap();
        assert_eq!(c.sslnegotiation, SslNegotiation::Direct);
        assert_eq!(
            parse_err("sslnegotiation=tls").to_string(),
            "invalid sslnegotiation \"tls\" from the connection string: expected one of \
             postgres, direct"
        );
        for n in [SslNegotiation::Postgres, SslNegotiation::Direct] {
            assert_eq!(SslNegotiation::from_libpq(n.as_str()), Some(n));
        }
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
                expected: SslMode::EXPECTED,
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
}
