//! The emitter task: every `--heartbeat-interval`, while this relay is active, one
//! `pg_logical_emit_message(false, 'pgoutbox-heartbeat', …)` on an ordinary SQL
//! connection to the server the replication stream reads from; and whether the
//! heartbeat went stale (WARN once per episode), checked at the moment it can go
//! stale — an idle relay does not wake every second for it.
//!
//! Invariants: the connection is re-opened when the stream moved to another server
//! (failover) or after any failure; one emission waits at most [`EMIT_TIMEOUT`]; a
//! failure is counted and retried at the next interval, logged at WARN when it starts,
//! then at most once a minute while it lasts, and at INFO when emission works again —
//! it never ends the task, let alone the relay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Beat, Target, MIN_SERVER_VERSION, PREFIX};
use crate::metrics::heartbeat::{mono_us, Identity, Staleness};
use crate::metrics::{Metrics, Role};
use crate::pg::client::conninfo::HostAddr;

/// Longest wait for one connection attempt or one emission.
const EMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often staleness is checked while it cannot be foreseen (stale already, or
/// the heartbeat is off): the WARN and its recovery line are at most this late.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long after the foreseen moment the check runs, so the age is past the
/// maximum by then.
const CHECK_MARGIN: Duration = Duration::from_millis(1);
/// Least time between two WARN lines of one run of failures.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Why one emission failed.
#[derive(Debug, thiserror::Error)]
enum EmitError {
    #[error(transparent)]
    Connect(#[from] crate::pg::source::catalog::CatalogError),
    #[error("pg_logical_emit_message failed")]
    Query(#[source] tokio_postgres::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// The SQL connection and the host it is on.
struct Conn {
    host: HostAddr,
    client: tokio_postgres::Client,
}

/// The task's state.
pub(super) struct Emitter {
    me: Identity,
    interval: Duration,
    metrics: Arc<Metrics>,
    target: watch::Receiver<Option<Target>>,
    conn: Option<Conn>,
    seq: u64,
    failures: Failures,
}

impl Emitter {
    pub(super) fn new(
        me: Identity,
        interval: Duration,
        metrics: Arc<Metrics>,
        target: watch::Receiver<Option<Target>>,
    ) -> Self {
        Self {
            me,
            interval,
            metrics,
            target,
            conn: None,
            seq: 0,
            failures: Failures::default(),
        }
    }

    /// Emit and check until `stop`.
    pub(super) async fn run(mut self, stop: CancellationToken) {
        let mut emit = tokio::time::interval(self.interval);
        emit.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut check_at = tokio::time::Instant::now() + CHECK_EVERY.min(self.interval);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                // An emission may wait for a server: shutdown does not wait for it.
                _ = emit.tick() => tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    _ = self.tick() => {}
                },
                _ = tokio::time::sleep_until(check_at) => {
                    self.check();
                    check_at = tokio::time::Instant::now() + self.next_check();
                }
            }
        }
    }

    /// How long until the next staleness check: the moment the heartbeat goes stale
    /// unless one comes back first (which only moves that moment later, so a check
    /// is never late); every [`CHECK_EVERY`] while stale. A standby, or a relay
    /// whose heartbeat is off, judges nothing, and becoming active or turning the
    /// heartbeat on restarts the age: it waits a whole maximum age.
    fn next_check(&self) -> Duration {
        let heartbeat = &self.metrics.heartbeat;
        let judged = self.metrics.role() == Role::Active;
        match heartbeat.until_stale().filter(|_| judged) {
            Some(left) if left.is_zero() => CHECK_EVERY,
            Some(left) => left + CHECK_MARGIN,
            None => heartbeat.max_age().max(CHECK_EVERY),
        }
    }

    /// WARN when the heartbeat just went stale (only an active relay's counts).
    fn check(&self) {
        if self.metrics.role() != Role::Active {
            return;
        }
        if let Some(Staleness::BecameStale { age, max_age }) = self.metrics.heartbeat.check() {
            tracing::warn!(
                silent_s = format!("{:.1}", age.as_secs_f64()),
                max_age = %humantime::format_duration(max_age),
                sent = self.seq,
                "no heartbeat came back through the replication stream within --heartbeat-max-age: the stream is stalled or far behind; /readyz fails until one does (check the walsender in pg_stat_replication, pgoutbox_in_flight_records and the relay's log)"
            );
        }
    }

    /// One emission, when this relay is active on a server that can carry it.
    async fn tick(&mut self) {
        let target = self.target.borrow().clone();
        let Some(target) = target else { return };
        if self.metrics.role() != Role::Active || target.server_version < MIN_SERVER_VERSION {
            return;
        }
        match self.emit(&target).await {
            Ok(()) => {
                self.metrics.heartbeat.sent();
                self.failures.succeeded(self.seq);
            }
            Err(err) => {
                self.conn = None;
                self.metrics.heartbeat.failed();
                self.failures.failed(&err, &target);
            }
        }
    }

    async fn emit(&mut self, target: &Target) -> Result<(), EmitError> {
        let host = target.conninfo.hosts.first();
        if self
            .conn
            .as_ref()
            .is_some_and(|c| Some(&c.host) != host || c.client.is_closed())
        {
            self.conn = None; // the stream moved (failover), or the connection broke
        }
        if self.conn.is_none() {
            let connect = crate::pg::source::sql_client::connect_on(&target.conninfo);
            let (client, host) = tokio::time::timeout(EMIT_TIMEOUT, connect)
                .await
                .map_err(|_| EmitError::Timeout(EMIT_TIMEOUT))??;
            self.conn = Some(Conn { host, client });
        }
        let Some(conn) = &self.conn else {
            return Ok(()); // just connected
        };
        self.seq += 1;
        let (slot, relay) = (&self.me.slot, &self.me.relay);
        let content = Beat::new(slot, relay, self.seq, mono_us()).to_content();
        let sql = "SELECT pg_logical_emit_message(false, $1::text, $2::text)";
        tokio::time::timeout(EMIT_TIMEOUT, conn.client.execute(sql, &[&PREFIX, &content]))
            .await
            .map_err(|_| EmitError::Timeout(EMIT_TIMEOUT))?
            .map_err(EmitError::Query)?;
        Ok(())
    }
}

/// A run of emission failures, for rate-limited logging.
#[derive(Default)]
struct Failures {
    count: u64,
    logged: Option<Instant>,
}

impl Failures {
    fn failed(&mut self, err: &EmitError, target: &Target) {
        self.count += 1;
        let due = self
            .logged
            .map_or(true, |at| at.elapsed() >= FAILURE_LOG_EVERY);
        if !due {
            return;
        }
        self.logged = Some(Instant::now());
        tracing::warn!(
            error = %crate::report::Report(err),
            server = %target.conninfo.redacted(),
            failures = self.count,
            "cannot emit a heartbeat (retrying every interval; logged at most once a minute): the relay keeps relaying, /readyz fails once --heartbeat-max-age passes without one; fix: make the server the stream reads from reachable and writable for the relay's user (pg_logical_emit_message needs a primary and EXECUTE on it)"
        );
    }

    fn succeeded(&mut self, seq: u64) {
        if self.count > 0 {
            tracing::info!(failures = self.count, seq, "heartbeat emission works again");
        }
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::heartbeat::Identity;
    use crate::pg::client::conninfo::ConnInfo;

    /// An emitter of an active relay whose stream's server refuses connections.
    fn unreachable() -> (Emitter, Arc<Metrics>, watch::Sender<Option<Target>>) {
        let metrics = Arc::new(Metrics::default());
        metrics.set_role(Role::Active);
        let me = Identity {
            slot: "s".into(),
            relay: "1-a".into(),
        };
        let conninfo = ConnInfo::parse_with_env(
            "postgres://relay@127.0.0.1:1/db?sslmode=disable&connect_timeout=5",
            &|_| None,
        )
        .unwrap();
        let target = Target {
            conninfo,
            server_version: 170_000,
        };
        let (tx, rx) = watch::channel(Some(target));
        let emitter = Emitter::new(me, Duration::from_secs(1), metrics.clone(), rx);
        (emitter, metrics, tx)
    }

    fn counter(metrics: &Metrics, name: &str) -> String {
        let text = metrics.render();
        let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
        line.unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn a_failed_emission_is_counted_and_retried_never_fatal() {
        let (mut emitter, metrics, _tx) = unreachable();
        emitter.tick().await;
        emitter.tick().await;
        assert_eq!(
            counter(&metrics, "pgoutbox_heartbeats_failed_total"),
            "pgoutbox_heartbeats_failed_total 2",
            "each interval tries again"
        );
        assert_eq!(
            counter(&metrics, "pgoutbox_heartbeats_sent_total"),
            "pgoutbox_heartbeats_sent_total 0"
        );
        assert_eq!(emitter.failures.count, 2);
        assert!(emitter.conn.is_none());
    }

    #[test]
    fn staleness_is_checked_when_it_can_begin_not_every_second() {
        let (emitter, metrics, _tx) = unreachable();
        let armed = std::time::Instant::now();
        metrics.heartbeat.enable(Duration::from_secs(60));
        let next = emitter.next_check();
        // Whatever time passed since arming is all the check may come earlier.
        assert!(
            next + armed.elapsed() >= Duration::from_secs(60)
                && next <= Duration::from_secs(60) + CHECK_MARGIN,
            "fresh: at the moment the heartbeat would go stale, {next:?}"
        );
        metrics.set_role(Role::Standby);
        assert_eq!(
            emitter.next_check(),
            Duration::from_secs(60),
            "a standby judges nothing; becoming active re-arms the age"
        );
        metrics.set_role(Role::Active);
        metrics.heartbeat.disable();
        assert_eq!(
            emitter.next_check(),
            Duration::from_secs(60),
            "off (a PostgreSQL 13 server): enabling re-arms the age"
        );
        metrics.heartbeat.enable(Duration::from_micros(1));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(
            emitter.next_check(),
            CHECK_EVERY,
            "stale: every second, as before"
        );
    }

    #[tokio::test]
    async fn nothing_is_emitted_by_a_standby_or_to_postgres_13() {
        let (mut emitter, metrics, tx) = unreachable();
        metrics.set_role(Role::Standby);
        emitter.tick().await;
        metrics.set_role(Role::Active);
        tx.send_modify(|t| {
            if let Some(t) = t {
                t.server_version = 130_012;
            }
        });
        emitter.tick().await;
        assert_eq!(
            counter(&metrics, "pgoutbox_heartbeats_failed_total"),
            "pgoutbox_heartbeats_failed_total 0",
            "not even tried"
        );
    }
}
