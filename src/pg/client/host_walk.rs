//! Walking a host list the way libpq does, for both the replication connection
//! ([`crate::pg::client::connection`]) and the SQL connection (tokio-postgres, the
//! replication source's catalog connection), each a `HostAttempt`, so the two
//! always mean the same thing by a connection string.
//!
//! ```text
//!  hosts ─ order (load_balance_hosts) ─▶ for each host, within connect_timeout:
//!      connect + authenticate ─ Err ─▶ definite (auth, no such database)? stop : next host
//!          │ Ok
//!      server state (GUC reports, else SHOW transaction_read_only /
//!          pg_is_in_recovery()) ─ refused by target_session_attrs ─▶ next host
//!          │ accepted
//!      use it          (prefer-standby: a second pass as `any` when no standby)
//! ```
//!
//! Invariants: `connect_timeout` bounds each host's attempt (connecting, TLS,
//! authentication and the state check), not the walk; a host whose server answered
//! with a definite error ends the walk with that error, as libpq does after a failed
//! authentication; every other failure is recorded and the next host tried, and when
//! none is left the error lists each host with why it was passed over
//! ([`NoHostAccepted`]). Unlike libpq, a server error of the transient classes (08
//! connection, 53 resources, 57 operator intervention: "the database system is
//! starting up", "too many clients") moves on to the next host instead of ending the
//! walk: a relay restarted during a failover must not be held by the old primary's
//! crash recovery. Each call walks the list afresh, so a reconnect after a failover
//! finds the new primary. Also unlike libpq, `load_balance_hosts=random` shuffles the
//! hosts but not the addresses one host name resolves to (those are tried in the
//! resolver's order).
//! See <https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-MULTIPLE-HOSTS>.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use crate::pg::client::conninfo::{
    ConnInfo, HostAddr, LoadBalanceHosts, ServerState, TargetSessionAttrs,
};

/// Bound on one host's attempt when `connect_timeout` is unset.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// One way of connecting to a single host: the replication or the SQL connection.
pub(crate) trait HostAttempt {
    /// The connected session.
    type Conn;
    /// What connecting can fail with (reported with its whole cause chain).
    type Error: std::error::Error + 'static;

    /// Connect and authenticate to the one host of `single`.
    async fn connect(&self, single: &ConnInfo) -> Result<Self::Conn, Self::Error>;
    /// Run `sql` (one row, one column) on the session, for the state check.
    async fn query_one(&self, conn: &mut Self::Conn, sql: &str) -> Result<String, Self::Error>;
    /// A server parameter reported at startup, e.g. `in_hot_standby`.
    fn reported(&self, conn: &Self::Conn, name: &str) -> Option<String>;
    /// The error for an attempt that outlived `connect_timeout`.
    fn timed_out(&self, target: String, after: Duration) -> Self::Error;
    /// Whether `err` ends the walk (the server answered, and another host of the same
    /// cluster would answer the same: wrong password, no such database, TLS refused).
    fn is_definite(&self, err: &Self::Error) -> bool;
    /// Whether trying again later may succeed (see `PgError::is_transient`).
    fn is_transient(&self, err: &Self::Error) -> bool;
}

/// Why one host was passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFailure {
    /// The host, as `host:port`.
    pub target: String,
    /// What happened there.
    pub reason: String,
    /// Whether the session was fine but not what `target_session_attrs` asks for.
    pub refused: bool,
    /// Whether trying again later may succeed (a refusal may: a failover).
    pub transient: bool,
}

/// No host of the list gave an acceptable session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct NoHostAccepted {
    /// The setting that judged the sessions.
    pub target_session_attrs: TargetSessionAttrs,
    /// Every attempt, in the order made.
    pub failures: Vec<HostFailure>,
}

impl NoHostAccepted {
    /// Whether walking again later may succeed: every host failed in a way that may
    /// pass (down, unreachable, not yet promoted).
    pub fn is_transient(&self) -> bool {
        self.failures.iter().all(|f| f.transient)
    }

    fn render(&self) -> String {
        let attempts: Vec<String> = self
            .failures
            .iter()
            .map(|f| {
                // Most connection errors already name the host.
                if f.reason.contains(&f.target) {
                    f.reason.clone()
                } else {
                    format!("{}: {}", f.target, f.reason)
                }
            })
            .collect();
        let refused = self.failures.iter().filter(|f| f.refused).count();
        let fix = if refused == self.failures.len() {
            "fix: if a failover is under way this resolves itself once a server is promoted; \
             otherwise list the server you want among the hosts, or change target_session_attrs"
        } else if refused > 0 {
            "fix: if a failover is under way this resolves itself once a server is promoted; \
             otherwise check that the servers are up and reachable from here (host, port, \
             firewall)"
        } else {
            "fix: check that the servers are up and reachable from here (host, port, \
             firewall), or raise connect_timeout"
        };
        format!(
            "no acceptable server among {} host attempts (target_session_attrs={}): {}; {fix}",
            self.failures.len(),
            self.target_session_attrs,
            attempts.join("; ")
        )
    }
}

/// How a walk failed.
#[derive(Debug)]
pub(crate) enum WalkError<E> {
    /// A host's own error: a definite one that ended the walk, or the only host's
    /// connection failure when no session was judged (reported as it is, as before
    /// multi-host support).
    Host(E),
    /// Every host failed or was refused.
    NoHost(NoHostAccepted),
}

/// Walk the hosts of `info` with `attempt`; the session and the host it is on.
pub(crate) async fn walk<A: HostAttempt>(
    info: &ConnInfo,
    attempt: &A,
) -> Result<(A::Conn, HostAddr), WalkError<A::Error>> {
    let hosts = order(info);
    let passes: &[TargetSessionAttrs] = match info.target_session_attrs {
        TargetSessionAttrs::PreferStandby => {
            &[TargetSessionAttrs::PreferStandby, TargetSessionAttrs::Any]
        }
        ref one => std::slice::from_ref(one),
    };
    let mut failures = Vec::new();
    let mut last_error = None;
    for &attrs in passes {
        for addr in &hosts {
            match try_host(info, addr, attrs, attempt).await {
                Ok(conn) => return Ok((conn, addr.clone())),
                Err(Tried::Definite(err)) => return Err(WalkError::Host(err)),
                Err(Tried::Failed(err)) => {
                    let transient = attempt.is_transient(&err);
                    failures.push(failure(addr, crate::report::render(&err), false, transient));
                    last_error = Some(err);
                }
                Err(Tried::Refused(reason)) => failures.push(failure(addr, reason, true, true)),
            }
        }
    }
    match last_error {
        Some(err) if failures.len() == 1 => Err(WalkError::Host(err)),
        _ => Err(WalkError::NoHost(NoHostAccepted {
            target_session_attrs: info.target_session_attrs,
            failures,
        })),
    }
}

/// The outcome of one host that was not used.
enum Tried<E> {
    Definite(E),
    Failed(E),
    Refused(String),
}

fn failure(addr: &HostAddr, reason: String, refused: bool, transient: bool) -> HostFailure {
    HostFailure {
        target: addr.to_string(),
        reason,
        refused,
        transient,
    }
}

/// One host: connect and judge the session, all within `connect_timeout`.
async fn try_host<A: HostAttempt>(
    info: &ConnInfo,
    addr: &HostAddr,
    attrs: TargetSessionAttrs,
    attempt: &A,
) -> Result<A::Conn, Tried<A::Error>> {
    let timeout = info.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let single = info.for_host(addr);
    let judged = async {
        let mut conn = attempt.connect(&single).await?;
        if !attrs.needs_check() {
            return Ok(Ok(conn));
        }
        let state = server_state(attempt, &mut conn, attrs).await?;
        Ok(match attrs.refusal(state) {
            None => Ok(conn),
            Some(reason) => Err(reason),
        })
    };
    match tokio::time::timeout(timeout, judged).await {
        Ok(Ok(Ok(conn))) => Ok(conn),
        Ok(Ok(Err(reason))) => Err(Tried::Refused(reason.to_owned())),
        Ok(Err(err)) if attempt.is_definite(&err) => Err(Tried::Definite(err)),
        Ok(Err(err)) => Err(Tried::Failed(err)),
        Err(_) => Err(Tried::Failed(attempt.timed_out(addr.to_string(), timeout))),
    }
}

/// What `target_session_attrs` needs to know of the server: from the
/// `in_hot_standby` and `default_transaction_read_only` reports (PostgreSQL 14+),
/// else asked with one query, as libpq does.
async fn server_state<A: HostAttempt>(
    attempt: &A,
    conn: &mut A::Conn,
    attrs: TargetSessionAttrs,
) -> Result<ServerState, A::Error> {
    let standby = attempt.reported(conn, "in_hot_standby");
    let read_only = attempt.reported(conn, "default_transaction_read_only");
    if let (Some(standby), Some(read_only)) = (standby, read_only) {
        let hot_standby = standby == "on";
        return Ok(ServerState {
            read_only: hot_standby || read_only == "on",
            hot_standby,
        });
    }
    let (sql, yes) = if attrs.is_about_read_only() {
        ("SHOW transaction_read_only", "on")
    } else {
        ("SELECT pg_catalog.pg_is_in_recovery()", "t")
    };
    let flag = attempt.query_one(conn, sql).await? == yes;
    // The other flag is not asked; only the one `attrs` looks at matters.
    Ok(ServerState {
        read_only: flag,
        hot_standby: flag,
    })
}

/// The hosts in the order to try them: as given, or shuffled for
/// `load_balance_hosts=random` (a fresh order for every walk).
pub(crate) fn order(info: &ConnInfo) -> Vec<HostAddr> {
    let mut hosts = info.hosts.clone();
    if info.load_balance_hosts == LoadBalanceHosts::Random {
        shuffle(&mut hosts, random_seed());
    }
    hosts
}

/// Fisher–Yates with a xorshift generator: the order need not be secret, only varied.
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed.max(1);
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let j = usize::try_from(state % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
}

/// A seed that differs between calls and processes (std's per-map random keys).
fn random_seed() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::pg::client::conninfo::{ConnInfo, Host};

    /// A fake cluster: each host name says how its server behaves.
    struct Fake {
        tried: Mutex<Vec<String>>,
        /// Whether the server reports `in_hot_standby` (PostgreSQL 14+).
        reports: bool,
    }

    #[derive(Debug)]
    struct FakeError(String, bool);

    impl std::fmt::Display for FakeError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for FakeError {}

    fn name(info: &ConnInfo) -> String {
        match &info.hosts[0].host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(_) => unreachable!(),
        }
    }

    impl HostAttempt for Fake {
        type Conn = String;
        type Error = FakeError;

        async fn connect(&self, single: &ConnInfo) -> Result<String, FakeError> {
            let host = name(single);
            self.tried.lock().unwrap().push(host.clone());
            match host.as_str() {
                "down" => Err(FakeError("connection refused".into(), false)),
                "badpw" => Err(FakeError("password authentication failed".into(), true)),
                "slow" => std::future::pending().await,
                _ => Ok(host),
            }
        }

        async fn query_one(&self, conn: &mut String, sql: &str) -> Result<String, FakeError> {
            let standby = conn.starts_with("standby");
            let read_only = standby || conn.starts_with("ro");
            Ok(match sql {
                "SHOW transaction_read_only" => {
                    if read_only {
                        "on"
                    } else {
                        "off"
                    }
                }
                _ => {
                    if standby {
                        "t"
                    } else {
                        "f"
                    }
                }
            }
            .to_owned())
        }

        fn reported(&self, conn: &String, name: &str) -> Option<String> {
            if !self.reports {
                return None;
            }
            let standby = conn.starts_with("standby");
            let on = match name {
                "in_hot_standby" => standby,
                _ => conn.starts_with("ro"),
            };
            Some(if on { "on" } else { "off" }.to_owned())
        }

        fn timed_out(&self, target: String, after: Duration) -> FakeError {
            FakeError(format!("{target} timed out after {after:?}"), false)
        }

        fn is_definite(&self, err: &FakeError) -> bool {
            err.1
        }

        fn is_transient(&self, err: &FakeError) -> bool {
            !err.1
        }
    }

    fn run(conn: &str, reports: bool) -> (Result<String, String>, Vec<String>) {
        let info = ConnInfo::parse_with_env(conn, &|_| None).unwrap();
        let fake = Fake {
            tried: Mutex::new(Vec::new()),
            reports,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let result = rt.block_on(walk(&info, &fake));
        let result = match result {
            Ok((conn, addr)) => {
                assert_eq!(addr.host, Host::Tcp(conn.clone()));
                Ok(conn)
            }
            Err(WalkError::Host(e)) => Err(e.0),
            Err(WalkError::NoHost(e)) => Err(e.to_string()),
        };
        (result, fake.tried.into_inner().unwrap())
    }

    #[test]
    fn target_session_attrs_choose_the_right_server() {
        let hosts = "host=down,standby1,ro1,primary1,standby2";
        for reports in [true, false] {
            let pick =
                |attrs: &str| run(&format!("{hosts} target_session_attrs={attrs}"), reports).0;
            assert_eq!(pick("any"), Ok("standby1".into()));
            assert_eq!(pick("read-write"), Ok("primary1".into()));
            assert_eq!(pick("read-only"), Ok("standby1".into()));
            assert_eq!(pick("primary"), Ok("ro1".into()));
            assert_eq!(pick("standby"), Ok("standby1".into()));
            assert_eq!(pick("prefer-standby"), Ok("standby1".into()));
        }
        // prefer-standby without a standby: a second pass takes any server.
        let (got, tried) = run(
            "host=down,primary1 target_session_attrs=prefer-standby",
            true,
        );
        assert_eq!(got, Ok("primary1".into()));
        assert_eq!(tried, ["down", "primary1", "down", "primary1"]);
    }

    #[test]
    fn the_error_lists_every_host_and_why() {
        let (got, tried) = run(
            "host=down,standby1,slow port=1,2,3 target_session_attrs=read-write connect_timeout=2",
            true,
        );
        assert_eq!(tried, ["down", "standby1", "slow"]);
        assert_eq!(
            got.unwrap_err(),
            "no acceptable server among 3 host attempts (target_session_attrs=read-write): \
             down:1: connection refused; standby1:2: session is read-only; slow:3 timed out \
             after 2s; fix: if a failover is under way this resolves itself once a server is \
             promoted; otherwise check that the servers are up and reachable from here (host, \
             port, firewall)"
        );
        let (got, _) = run("host=down,slow connect_timeout=2", true);
        assert_eq!(
            got.unwrap_err(),
            "no acceptable server among 2 host attempts (target_session_attrs=any): down:5432: \
             connection refused; slow:5432 timed out after 2s; fix: check that the servers are \
             up and reachable from here (host, port, firewall), or raise connect_timeout"
        );
        let (got, _) = run("host=standby1,standby2 target_session_attrs=primary", true);
        assert_eq!(
            got.unwrap_err(),
            "no acceptable server among 2 host attempts (target_session_attrs=primary): \
             standby1:5432: server is in hot standby mode; standby2:5432: server is in hot \
             standby mode; fix: if a failover is under way this resolves itself once a server \
             is promoted; otherwise list the server you want among the hosts, or change \
             target_session_attrs"
        );
    }

    #[test]
    fn one_host_keeps_its_own_error_and_definite_errors_stop() {
        assert_eq!(run("host=down", true).0, Err("connection refused".into()));
        let (got, tried) = run("host=badpw,primary1", true);
        assert_eq!(got, Err("password authentication failed".into()));
        assert_eq!(tried, ["badpw"]);
        let (got, tried) = run("host=down,down,primary1", true);
        assert_eq!(got, Ok("primary1".into()));
        assert_eq!(tried.len(), 3);
    }

    #[test]
    fn load_balancing_varies_the_order_and_keeps_every_host() {
        let info =
            ConnInfo::parse_with_env("host=a,b,c,d,e,f load_balance_hosts=random", &|_| None)
                .unwrap();
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..200 {
            let order = order(&info);
            let mut sorted: Vec<String> = order.iter().map(|h| h.host.to_string()).collect();
            firsts.insert(sorted[0].clone());
            sorted.sort();
            assert_eq!(sorted, ["a", "b", "c", "d", "e", "f"]);
        }
        assert!(firsts.len() >= 4, "first hosts seen: {firsts:?}");
        let fixed = ConnInfo::parse_with_env("host=a,b,c", &|_| None).unwrap();
        assert_eq!(order(&fixed), fixed.hosts);
    }
}
