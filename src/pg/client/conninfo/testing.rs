//! Helpers shared by the unit tests of the `conninfo` files: an injected environment,
//! parsing shortcuts and host constructors.

use std::collections::HashMap;
use std::path::PathBuf;

use super::{ConnInfo, ConnInfoError, Host, HostAddr};

/// An environment holding exactly `pairs`.
pub(super) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

/// `s` parsed with an empty environment.
pub(super) fn parse(s: &str) -> ConnInfo {
    ConnInfo::parse_with_env(s, &env_of(&[])).unwrap()
}

/// The error parsing `s` with an empty environment gives.
pub(super) fn parse_err(s: &str) -> ConnInfoError {
    ConnInfo::parse_with_env(s, &env_of(&[])).unwrap_err()
}

pub(super) fn tcp(name: &str, port: u16) -> HostAddr {
    HostAddr {
        host: Host::Tcp(name.to_owned()),
        hostaddr: None,
        port,
        passfile_password: None,
    }
}

pub(super) fn unix(dir: &str, port: u16) -> HostAddr {
    HostAddr {
        host: Host::Unix(PathBuf::from(dir)),
        hostaddr: None,
        port,
        passfile_password: None,
    }
}
