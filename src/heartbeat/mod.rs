//! The end-to-end heartbeat: proof that the whole pipeline is alive when no event
//! flows.
//!
//! ```text
//!  emitter task (every --heartbeat-interval, while active)
//!    SQL connection to the stream's server ─▶ pg_logical_emit_message(false,
//!      'pgoutbox-heartbeat', {"slot","relay","seq",…})  ─▶ WAL
//!  WAL ─▶ walsender ─▶ replication stream ─▶ Relay (Message arm) ─▶ returned():
//!    ours? ─ yes ─▶ round trip, age := 0 (pgoutbox_heartbeat_*)   ─▶ /readyz
//!           └ no ─▶ pgoutbox_heartbeats_foreign_total
//!    nothing open, nothing in flight ─▶ confirm the message's LSN (quiet databases)
//! ```
//!
//! Files: `content.rs` (what a heartbeat says, parsed without panics), `emitter.rs`
//! (the task); the shared counters and staleness are
//! [`crate::metrics::heartbeat`]; the relay core's one hook is in
//! `pipeline/relay/heartbeat.rs`.
//!
//! Invariants: a heartbeat is non-transactional (it needs no commit, and reaches the
//! stream even while the relay's own transactions are open elsewhere) and never
//! becomes a Kafka record or counts as an event; a relay counts only heartbeats of
//! its own slot *and* process (every slot of the database sees every message; a
//! restarted relay does not time its predecessor's); the emitter writes to the server
//! the replication stream reads from ([`Heartbeat::on_stream`], set by each session),
//! so after a failover it follows the stream; an emission failure is counted, logged
//! (rate-limited) and retried, and never stops the relay: staleness shows in `/readyz`;
//! on PostgreSQL 13 (pgoutput has no `messages` option, so a heartbeat could never
//! come back) the heartbeat is off, said once at INFO.

mod content;
mod emitter;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics::heartbeat::{Identity, Staleness};
use crate::metrics::Metrics;
use crate::pg::client::conninfo::ConnInfo;
use crate::pg::source::pgoutput::LogicalMessage;
use crate::task::Tasks;

pub use content::{Beat, ContentError};

/// The prefix of every heartbeat message (distinct from the event prefix
/// `pgoutbox`, so a heartbeat is never taken for an event).
pub const PREFIX: &str = "pgoutbox-heartbeat";

/// The first PostgreSQL whose pgoutput passes logical decoding messages on (14).
pub const MIN_SERVER_VERSION: u32 = 140_000;

/// `--heartbeat-interval` and `--heartbeat-max-age`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// How often to emit (`None`: off).
    pub interval: Option<Duration>,
    /// `/readyz` fails when no heartbeat came back for longer than this.
    pub max_age: Duration,
}

impl HeartbeatConfig {
    /// The defaults: every 10 s, stale after 60 s.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
    /// See [`Self::DEFAULT_INTERVAL`].
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(60);
}

/// The server the replication stream reads from, as a single-host connection.
#[derive(Debug, Clone)]
struct Target {
    conninfo: ConnInfo,
    server_version: u32,
}

/// The heartbeat of one `run`: its settings, identity and the stream's server.
pub struct Heartbeat {
    cfg: HeartbeatConfig,
    me: Identity,
    metrics: Arc<Metrics>,
    target: watch::Sender<Option<Target>>,
}

impl Heartbeat {
    /// The heartbeat of the relay on `slot` (identified in `metrics`).
    pub fn new(cfg: HeartbeatConfig, slot: &str, metrics: Arc<Metrics>) -> Self {
        let me = Identity {
            slot: slot.to_owned(),
            relay: relay_id(),
        };
        metrics.heartbeat.identify(me.clone());
        Self {
            cfg,
            me,
            metrics,
            target: watch::Sender::new(None),
        }
    }

    /// Start the emitter as a task of `tasks`, stopped by `stop` (nothing when off).
    pub fn spawn(&self, tasks: &mut Tasks, stop: CancellationToken) {
        let Some(interval) = self.cfg.interval else {
            tracing::info!("heartbeat off (--heartbeat-interval 0): /readyz cannot tell a silent stream from an idle one");
            return;
        };
        let emitter = emitter::Emitter::new(
            self.me.clone(),
            interval,
            self.metrics.clone(),
            self.target.subscribe(),
        );
        tasks.spawn("heartbeat", emitter.run(stop));
    }

    /// A session streams from the server of `conninfo` (one host), PostgreSQL
    /// `server_version`: heartbeats go there from now on, and are judged only where
    /// they can come back (PostgreSQL 14+).
    pub fn on_stream(&self, conninfo: &ConnInfo, server_version: u32) {
        if self.cfg.interval.is_none() {
            return;
        }
        let supported = server_version >= MIN_SERVER_VERSION;
        let was = self
            .target
            .borrow()
            .as_ref()
            .map(|t| t.server_version >= MIN_SERVER_VERSION);
        if supported && was != Some(true) {
            self.metrics.heartbeat.enable(self.cfg.max_age);
        }
        if !supported && was != Some(false) {
            self.metrics.heartbeat.disable();
            tracing::info!(
                server_version,
                "heartbeat off on this server: PostgreSQL before 14 has no pgoutput `messages` option, so a heartbeat could never come back through the stream; upgrade to 14+ for /readyz to prove the stream alive (--heartbeat-interval 0 silences this line)"
            );
        }
        self.target.send_replace(Some(Target {
            conninfo: conninfo.clone(),
            server_version,
        }));
    }
}

/// A message with the heartbeat prefix came through the stream: this relay's own
/// (round trip, age back to 0) or another's (counted, ignored).
pub fn returned(metrics: &Metrics, message: &LogicalMessage) {
    let state = &metrics.heartbeat;
    let beat = match Beat::parse(&message.content) {
        Ok(beat) => beat,
        Err(err) => {
            state.foreign();
            tracing::debug!(lsn = %message.lsn, error = %crate::report::Report(&err), "ignoring a message with the heartbeat prefix");
            return;
        }
    };
    let ours = state
        .identity()
        .is_some_and(|me| me.slot == beat.slot && me.relay == beat.relay);
    if !ours {
        state.foreign();
        tracing::debug!(slot = %beat.slot, relay = %beat.relay, seq = beat.seq, "ignoring another relay's heartbeat");
        return;
    }
    tracing::debug!(seq = beat.seq, lsn = %message.lsn, round_trip_us = crate::metrics::heartbeat::mono_us().saturating_sub(beat.mono_us), "heartbeat back");
    let recovered = state.seen(beat.seq, beat.mono_us);
    if let Some(Staleness::Recovered {
        stale_for,
        round_trip,
    }) = recovered
    {
        tracing::info!(
            seq = beat.seq,
            stale_for_s = format!("{:.1}", stale_for.as_secs_f64()),
            round_trip_s = format!("{:.3}", round_trip.as_secs_f64()),
            "heartbeat back through the replication stream: the stream delivers again"
        );
    }
}

/// This process among the relays on one slot: its pid and start time.
fn relay_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{:x}", std::process::id(), nanos as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::heartbeat::mono_us;
    use crate::pg::lsn::Lsn;

    fn message(content: String) -> LogicalMessage {
        LogicalMessage {
            xid: None,
            flags: 0,
            lsn: Lsn(0x100),
            prefix: PREFIX.to_owned(),
            content: content.into(),
        }
    }

    #[test]
    fn own_heartbeats_count_others_are_ignored() {
        let metrics = Metrics::default();
        metrics.heartbeat.identify(Identity {
            slot: "mine".into(),
            relay: "1-a".into(),
        });
        metrics.heartbeat.enable(Duration::from_secs(5));
        let at = mono_us();
        returned(
            &metrics,
            &message(Beat::new("other", "1-a", 1, at).to_content()),
        );
        returned(
            &metrics,
            &message(Beat::new("mine", "2-b", 1, at).to_content()),
        );
        returned(&metrics, &message("not json".into()));
        assert_eq!(metrics.heartbeat.round_trip(), None, "nothing of ours yet");
        returned(
            &metrics,
            &message(Beat::new("mine", "1-a", 1, at).to_content()),
        );
        assert!(metrics.heartbeat.round_trip().is_some());
        let text = metrics.render();
        assert!(
            text.contains("pgoutbox_heartbeats_seen_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("pgoutbox_heartbeats_foreign_total 3\n"),
            "{text}"
        );
        assert!(text.contains("\npgoutbox_heartbeat_age_seconds "), "{text}");
        assert!(
            text.contains("\npgoutbox_heartbeat_round_trip_seconds "),
            "{text}"
        );
    }

    #[test]
    fn relay_ids_name_the_process() {
        let id = relay_id();
        assert!(id.starts_with(&format!("{}-", std::process::id())), "{id}");
    }
}
