//! How a list of hosts is walked: libpq's `target_session_attrs` (which server is
//! acceptable) and `load_balance_hosts` (in which order they are tried), and the one
//! place their libpq spellings are written.
//!
//! A server is judged by a [`ServerState`]: whether its sessions are read-only by
//! default and whether it is a hot standby, as libpq reads them from the
//! `default_transaction_read_only` / `in_hot_standby` reports (PostgreSQL 14+) or asks
//! with `SHOW transaction_read_only` / `SELECT pg_is_in_recovery()` on older servers.
//! See <https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNECT-TARGET-SESSION-ATTRS>.
//!
//! Invariant: `as_str` and `from_libpq` are inverse and each `EXPECTED` lists exactly
//! the spellings `from_libpq` accepts, in declaration order (checked by the tests).

use std::fmt;

/// libpq's `target_session_attrs`: what a server must be for the connection to keep it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TargetSessionAttrs {
    /// Any server (the default).
    #[default]
    Any,
    /// Sessions accept read-write transactions by default: a primary whose
    /// `default_transaction_read_only` is off.
    ReadWrite,
    /// Sessions are read-only by default: a standby, or a primary with
    /// `default_transaction_read_only = on`.
    ReadOnly,
    /// Not in recovery (not a hot standby).
    Primary,
    /// A hot standby.
    Standby,
    /// A standby if any listed host is one, otherwise any server (a second pass over
    /// the list).
    PreferStandby,
}

/// libpq's `load_balance_hosts`: the order in which the hosts are tried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LoadBalanceHosts {
    /// In the order given (the default).
    #[default]
    Disable,
    /// In a random order, drawn anew for every connection.
    Random,
}

/// What a connected server is, as far as [`TargetSessionAttrs`] cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerState {
    /// New transactions are read-only by default (`transaction_read_only` on in a
    /// fresh session: `default_transaction_read_only = on`, or a hot standby).
    pub read_only: bool,
    /// The server is a hot standby (`pg_is_in_recovery()`).
    pub hot_standby: bool,
}

impl TargetSessionAttrs {
    /// What a `target_session_attrs` value may be, for error messages.
    pub(crate) const EXPECTED: &'static str =
        "one of any, read-write, read-only, primary, standby, prefer-standby";

    /// The libpq spelling, e.g. `read-write`.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::ReadOnly => "read-only",
            TargetSessionAttrs::Primary => "primary",
            TargetSessionAttrs::Standby => "standby",
            TargetSessionAttrs::PreferStandby => "prefer-standby",
        }
    }

    /// The setting for a libpq spelling (case-sensitive, as in libpq).
    pub fn from_libpq(s: &str) -> Option<Self> {
        Some(match s {
            "any" => TargetSessionAttrs::Any,
            "read-write" => TargetSessionAttrs::ReadWrite,
            "read-only" => TargetSessionAttrs::ReadOnly,
            "primary" => TargetSessionAttrs::Primary,
            "standby" => TargetSessionAttrs::Standby,
            "prefer-standby" => TargetSessionAttrs::PreferStandby,
            _ => return None,
        })
    }

    /// Whether a connected server must be examined at all.
    pub fn needs_check(self) -> bool {
        self != TargetSessionAttrs::Any
    }

    /// Whether the check needs the read-only flag (else the hot-standby flag).
    pub fn is_about_read_only(self) -> bool {
        matches!(
            self,
            TargetSessionAttrs::ReadWrite | TargetSessionAttrs::ReadOnly
        )
    }

    /// `None` when `state` is acceptable, else why not (libpq's words). For
    /// `prefer-standby` this is the first pass, which wants a standby.
    pub fn refusal(self, state: ServerState) -> Option<&'static str> {
        match self {
            TargetSessionAttrs::Any => None,
            TargetSessionAttrs::ReadWrite => state.read_only.then_some("session is read-only"),
            TargetSessionAttrs::ReadOnly => {
                (!state.read_only).then_some("session is not read-only")
            }
            TargetSessionAttrs::Primary => {
                state.hot_standby.then_some("server is in hot standby mode")
            }
            TargetSessionAttrs::Standby | TargetSessionAttrs::PreferStandby => {
                (!state.hot_standby).then_some("server is not in hot standby mode")
            }
        }
    }
}

impl LoadBalanceHosts {
    /// What a `load_balance_hosts` value may be, for error messages.
    pub(crate) const EXPECTED: &'static str = "one of disable, random";

    /// The libpq spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadBalanceHosts::Disable => "disable",
            LoadBalanceHosts::Random => "random",
        }
    }

    /// The setting for a libpq spelling (case-sensitive, as in libpq).
    pub fn from_libpq(s: &str) -> Option<Self> {
        Some(match s {
            "disable" => LoadBalanceHosts::Disable,
            "random" => LoadBalanceHosts::Random,
            _ => return None,
        })
    }
}

impl fmt::Display for TargetSessionAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for LoadBalanceHosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{env_of, parse, parse_err};
    use super::super::ConnInfo;
    use super::*;

    const ALL: [TargetSessionAttrs; 6] = [
        TargetSessionAttrs::Any,
        TargetSessionAttrs::ReadWrite,
        TargetSessionAttrs::ReadOnly,
        TargetSessionAttrs::Primary,
        TargetSessionAttrs::Standby,
        TargetSessionAttrs::PreferStandby,
    ];

    #[test]
    fn expected_lists_every_spelling() {
        let names: Vec<&str> = ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(
            TargetSessionAttrs::EXPECTED,
            format!("one of {}", names.join(", "))
        );
        for attrs in ALL {
            assert_eq!(TargetSessionAttrs::from_libpq(attrs.as_str()), Some(attrs));
        }
        let modes = [LoadBalanceHosts::Disable, LoadBalanceHosts::Random];
        let names: Vec<&str> = modes.iter().map(|m| m.as_str()).collect();
        assert_eq!(
            LoadBalanceHosts::EXPECTED,
            format!("one of {}", names.join(", "))
        );
        for mode in modes {
            assert_eq!(LoadBalanceHosts::from_libpq(mode.as_str()), Some(mode));
        }
    }

    #[test]
    fn refusals_follow_libpq() {
        let primary = ServerState {
            read_only: false,
            hot_standby: false,
        };
        let read_only_primary = ServerState {
            read_only: true,
            hot_standby: false,
        };
        let standby = ServerState {
            read_only: true,
            hot_standby: true,
        };
        let ok = |attrs: TargetSessionAttrs, state| attrs.refusal(state).is_none();
        use TargetSessionAttrs::*;
        for state in [primary, read_only_primary, standby] {
            assert!(ok(Any, state));
        }
        assert!(ok(ReadWrite, primary));
        assert!(!ok(ReadWrite, read_only_primary));
        assert!(!ok(ReadWrite, standby));
        assert!(!ok(ReadOnly, primary));
        assert!(ok(ReadOnly, read_only_primary));
        assert!(ok(ReadOnly, standby));
        assert!(ok(Primary, primary));
        assert!(ok(Primary, read_only_primary));
        assert!(!ok(Primary, standby));
        assert!(!ok(Standby, primary));
        assert!(ok(Standby, standby));
        assert!(ok(PreferStandby, standby));
        assert_eq!(ReadWrite.refusal(standby), Some("session is read-only"));
        assert_eq!(
            Primary.refusal(standby),
            Some("server is in hot standby mode")
        );
    }

    #[test]
    fn parsed_in_every_form() {
        assert_eq!(parse("").target_session_attrs, TargetSessionAttrs::Any);
        assert_eq!(parse("").load_balance_hosts, LoadBalanceHosts::Disable);
        for attrs in ALL {
            let text = attrs.as_str();
            let kv = parse(&format!("host=a,b target_session_attrs={text}"));
            let url = parse(&format!("postgres://a,b/db?target_session_attrs={text}"));
            assert_eq!(kv.target_session_attrs, attrs);
            assert_eq!(url.target_session_attrs, attrs);
        }
        let c = parse("postgres://a:1,b:2/db?load_balance_hosts=random");
        assert_eq!(c.load_balance_hosts, LoadBalanceHosts::Random);
        let env = env_of(&[
            ("PGTARGETSESSIONATTRS", "standby"),
            ("PGLOADBALANCEHOSTS", "random"),
        ]);
        let c = ConnInfo::parse_with_env("host=a", &env).unwrap();
        assert_eq!(c.target_session_attrs, TargetSessionAttrs::Standby);
        assert_eq!(c.load_balance_hosts, LoadBalanceHosts::Random);
        let c = ConnInfo::parse_with_env("target_session_attrs=any", &env).unwrap();
        assert_eq!(c.target_session_attrs, TargetSessionAttrs::Any);
    }

    #[test]
    fn bad_values_name_the_key_and_the_choices() {
        assert_eq!(
            parse_err("target_session_attrs=read_write").to_string(),
            "invalid target_session_attrs \"read_write\" from the connection string: expected \
             one of any, read-write, read-only, primary, standby, prefer-standby"
        );
        assert_eq!(
            parse_err("postgres://h/d?load_balance_hosts=on").to_string(),
            "invalid load_balance_hosts \"on\" from the connection string: expected one of \
             disable, random"
        );
        let env = env_of(&[("PGTARGETSESSIONATTRS", "master")]);
        assert_eq!(
            ConnInfo::parse_with_env("", &env).unwrap_err().to_string(),
            "invalid target_session_attrs \"master\" from environment variable \
             PGTARGETSESSIONATTRS: expected one of any, read-write, read-only, primary, \
             standby, prefer-standby"
        );
    }
}
