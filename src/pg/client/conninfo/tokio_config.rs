//! The bridge to `tokio_postgres`: [`ConnInfo::to_tokio_postgres`], so that the
//! replication client and the ordinary SQL client connect from one description.
//!
//! Invariant: every field with a `tokio_postgres` counterpart is carried over; TLS
//! certificate checks and paths are not, as our own rustls connector (`pg::client::tls`)
//! enforces them from the [`ConnInfo`] itself; nor are `target_session_attrs` and
//! `load_balance_hosts`: tokio-postgres knows only two of the six session kinds, so
//! the SQL connection walks the hosts with the replication connection's own code
//! (`pg::client::host_walk`), one single-host config ([`ConnInfo::for_host`]) per attempt.

use tokio_postgres::config::{
    ChannelBinding as TpChannelBinding, SslMode as TpSslMode, SslNegotiation as TpSslNegotiation,
};

use super::{ChannelBinding, ConnInfo, Host, SslMode, SslNegotiation};

impl ConnInfo {
    /// An equivalent `tokio_postgres::Config`: every host (Unix sockets via
    /// `host_path`) with its own port (and `hostaddr` when every host has one), user,
    /// password, dbname, application_name, options, connect_timeout, keepalives,
    /// sslnegotiation and channel_binding. `ssl_mode` maps Disable→Disable, Allow/Prefer→Prefer,
    /// Require/VerifyCa/VerifyFull→Require; certificate checks are ours. The password
    /// is the one given for all hosts; for a single host with its own password from
    /// the password file, use [`ConnInfo::for_host`] first.
    pub fn to_tokio_postgres(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        let addrs: Option<Vec<_>> = self.hosts.iter().map(|h| h.hostaddr).collect();
        for addr in addrs.into_iter().flatten() {
            config.hostaddr(addr);
        }
        for h in &self.hosts {
            match &h.host {
                Host::Tcp(name) => {
                    config.host(name);
                }
                #[cfg(unix)]
                Host::Unix(dir) => {
                    config.host_path(dir);
                }
                #[cfg(not(unix))]
                Host::Unix(dir) => {
                    config.host(dir.to_string_lossy());
                }
            }
            config.port(h.port);
        }
        config.user(&self.user);
        if let Some(password) = &self.password {
            config.password(password.expose());
        }
        config.dbname(&self.dbname);
        if let Some(name) = &self.application_name {
            config.application_name(name);
        }
        if let Some(options) = &self.options {
            config.options(options);
        }
        if let Some(timeout) = self.connect_timeout {
            config.connect_timeout(timeout);
        }
        config.keepalives(self.keepalives.enabled);
        if let Some(idle) = self.keepalives.idle {
            config.keepalives_idle(idle);
        }
        if let Some(interval) = self.keepalives.interval {
            config.keepalives_interval(interval);
        }
        if let Some(count) = self.keepalives.count {
            config.keepalives_retries(count);
        }
        config.ssl_mode(tp_ssl_mode(self.sslmode));
        config.ssl_negotiation(match self.sslnegotiation {
            SslNegotiation::Postgres => TpSslNegotiation::Postgres,
            SslNegotiation::Direct => TpSslNegotiation::Direct,
        });
        config.channel_binding(tp_channel_binding(self.channel_binding));
        config
    }
}

/// `tokio_postgres` knows only Disable, Prefer and Require: `allow` is treated as
/// `prefer`, and the verifying modes as `require` (the verification is ours).
fn tp_ssl_mode(mode: SslMode) -> TpSslMode {
    match mode {
        SslMode::Disable => TpSslMode::Disable,
        SslMode::Allow | SslMode::Prefer => TpSslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => TpSslMode::Require,
    }
}

fn tp_channel_binding(binding: ChannelBinding) -> TpChannelBinding {
    match binding {
        ChannelBinding::Disable => TpChannelBinding::Disable,
        ChannelBinding::Prefer => TpChannelBinding::Prefer,
        ChannelBinding::Require => TpChannelBinding::Require,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::super::testing::parse;

    #[test]
    fn to_tokio_postgres_maps_fields() {
        use tokio_postgres::config::{Host as TpHost, SslMode as Tp};
        let c = parse(
            "host=db1,/var/run/postgresql,::1 port=5433,5434,5435 user=app password=pw dbname=shop \
             application_name=outbox options='-c wal_sender_timeout=2s' connect_timeout=9 \
             sslmode=verify-full",
        );
        let tp = c.to_tokio_postgres();
        assert_eq!(
            tp.get_hosts(),
            &[
                TpHost::Tcp("db1".into()),
                TpHost::Unix(PathBuf::from("/var/run/postgresql")),
                TpHost::Tcp("::1".into()),
            ]
        );
        assert_eq!(tp.get_ports(), &[5433, 5434, 5435]);
        assert_eq!(tp.get_user(), Some("app"));
        assert_eq!(tp.get_password(), Some(&b"pw"[..]));
        assert_eq!(tp.get_dbname(), Some("shop"));
        assert_eq!(tp.get_application_name(), Some("outbox"));
        assert_eq!(tp.get_options(), Some("-c wal_sender_timeout=2s"));
        assert_eq!(tp.get_connect_timeout(), Some(&Duration::from_secs(9)));
        assert_eq!(tp.get_ssl_mode(), Tp::Require);

        let c = parse(
            "host=a,b hostaddr=10.0.0.1,10.0.0.2 keepalives=0 keepalives_idle=7 \
             keepalives_interval=3 keepalives_count=2",
        );
        let tp = c.to_tokio_postgres();
        assert_eq!(
            tp.get_hostaddrs(),
            &[
                "10.0.0.1".parse::<std::net::IpAddr>().unwrap(),
                "10.0.0.2".parse().unwrap()
            ]
        );
        assert!(!tp.get_keepalives());
        assert_eq!(tp.get_keepalives_idle(), Duration::from_secs(7));
        assert_eq!(tp.get_keepalives_interval(), Some(Duration::from_secs(3)));
        assert_eq!(tp.get_keepalives_retries(), Some(2));
        // A mixed list cannot be expressed: no hostaddr, names resolved instead.
        assert!(parse("host=a,b hostaddr=10.0.0.1,")
            .to_tokio_postgres()
            .get_hostaddrs()
            .is_empty());

        let minimal = parse("").to_tokio_postgres();
        assert_eq!(minimal.get_password(), None);
        assert_eq!(minimal.get_application_name(), None);
        assert_eq!(minimal.get_options(), None);
        assert_eq!(minimal.get_connect_timeout(), None);
        assert_eq!(minimal.get_ports(), &[5432]);

        for (mode, expected) in [
            ("disable", Tp::Disable),
            ("allow", Tp::Prefer),
            ("prefer", Tp::Prefer),
            ("require", Tp::Require),
            ("verify-ca", Tp::Require),
            ("verify-full", Tp::Require),
        ] {
            let tp = parse(&format!("sslmode={mode}")).to_tokio_postgres();
            assert_eq!(tp.get_ssl_mode(), expected, "{mode}");
        }
    }
}
