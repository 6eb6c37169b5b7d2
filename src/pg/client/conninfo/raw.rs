//! [`Raw`]: what a connection string said, as text, before the environment, the
//! defaults and validation are applied. Both parsers ([`super::url`],
//! [`super::keyword_value`]) fill one; [`super::resolve`] consumes it.
//!
//! Invariant: an empty value is stored as unset (`None`), so `host=''` and an absent
//! `host` resolve the same way; a later value for a key replaces an earlier one.

/// What the string said, before environment, defaults and validation. `None` = unset.
#[derive(Default)]
pub(super) struct Raw {
    pub(super) host: Option<Vec<String>>,
    pub(super) hostaddr: Option<Vec<String>>,
    pub(super) port: Option<Vec<String>>,
    pub(super) user: Option<String>,
    pub(super) password: Option<String>,
    pub(super) passfile: Option<String>,
    pub(super) dbname: Option<String>,
    pub(super) sslmode: Option<String>,
    pub(super) channel_binding: Option<String>,
    pub(super) sslrootcert: Option<String>,
    pub(super) sslcert: Option<String>,
    pub(super) sslkey: Option<String>,
    pub(super) application_name: Option<String>,
    pub(super) options: Option<String>,
    pub(super) connect_timeout: Option<String>,
    pub(super) target_session_attrs: Option<String>,
    pub(super) load_balance_hosts: Option<String>,
    pub(super) keepalives: Option<String>,
    pub(super) keepalives_idle: Option<String>,
    pub(super) keepalives_interval: Option<String>,
    pub(super) keepalives_count: Option<String>,
    pub(super) sslnegotiation: Option<String>,
}

impl Raw {
    /// Store `value` under `key`; `false` when the key is not accepted.
    pub(super) fn set(&mut self, key: &str, value: String) -> bool {
        let value = Some(value).filter(|v| !v.is_empty());
        let slot = match key {
            "host" => {
                self.host = value.map(|v| split_list(&v));
                return true;
            }
            "hostaddr" => {
                self.hostaddr = value.map(|v| split_list(&v));
                return true;
            }
            "port" => {
                self.port = value.map(|v| split_list(&v));
                return true;
            }
            "user" => &mut self.user,
            "password" => &mut self.password,
            "passfile" => &mut self.passfile,
            "dbname" => &mut self.dbname,
            "sslmode" => &mut self.sslmode,
            "channel_binding" => &mut self.channel_binding,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            "sslkey" => &mut self.sslkey,
            "application_name" => &mut self.application_name,
            "options" => &mut self.options,
            "connect_timeout" => &mut self.connect_timeout,
            "target_session_attrs" => &mut self.target_session_attrs,
            "load_balance_hosts" => &mut self.load_balance_hosts,
            "keepalives" => &mut self.keepalives,
            "keepalives_idle" => &mut self.keepalives_idle,
            "keepalives_interval" => &mut self.keepalives_interval,
            "keepalives_count" => &mut self.keepalives_count,
            "sslnegotiation" => &mut self.sslnegotiation,
            _ => return false,
        };
        *slot = value;
        true
    }
}

/// `a, b,c` → `["a", "b", "c"]`: a comma-separated list, each entry trimmed.
pub(super) fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(|part| part.trim().to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::super::error::ACCEPTED;
    use super::super::KEYWORDS;
    use super::*;

    #[test]
    fn keyword_list_is_consistent() {
        assert_eq!(KEYWORDS.join(", "), ACCEPTED);
        for keyword in KEYWORDS {
            assert!(Raw::default().set(keyword, "x".into()), "{keyword}");
        }
    }
}
