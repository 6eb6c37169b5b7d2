//! The one reconnect loop every session kind runs under ([`supervise`]): logical
//! replication (`run`) and polling (`run --source poll`) are [`Source`]s; the loop
//! owns back-off, standing by, the relay's role, the producer generation and the
//! metrics that describe sessions, so each of those has one meaning.
//!
//! ```text
//!  loop { session(generation) ─ Ok ─▶ return (shutdown: drained and confirmed)
//!         └ Err ─ producer fenced (exactly-once)? ─▶ return the error
//!                 producer fatally broken or stalled? ─▶ new producer ─┐
//!                 another relay holds the slot / lock? ─▶ standby ──────┤
//!                 transient? ─▶ connecting, reconnects += 1 ───────────┤
//!                 otherwise ─▶ return the error (exit non-zero)         │
//!         back off (reset after a session that lasted 30 s), generation += 1 ◀┘ }
//! ```
//!
//! Metrics, one meaning each: `pgoutbox_role` is `standby` while another relay
//! holds what this one would stream, `connecting` between an interrupted session
//! and the next one (a session sets `active` once it streams);
//! `pgoutbox_replication_connected` is 0 from an interruption until a session
//! streams again; `pgoutbox_reconnects_total` counts sessions restarted after they
//! ended on a transient error (a standby's retries are not reconnects).
//!
//! Logs: a standby says so once until it becomes active; a stalled session was
//! already reported by the session itself (once per stall), so its end is a debug
//! line; any other interruption is a WARN with the error and the retry delay.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use rdkafka::error::RDKafkaErrorCode;

use super::RunError;
use crate::kafka::producer::{is_fence, is_permanent, KafkaSink, TxnError};
use crate::metrics::{Metrics, Role};
use crate::pipeline::PipelineError;

/// A session that lasted this long resets the back-off: the next failure is new.
const HEALTHY_SESSION: Duration = Duration::from_secs(30);

/// What the supervisor runs: one session after another.
pub trait Source {
    /// One session, from connecting to its end: `Ok` once it drained and stopped
    /// at shutdown, else why it ended. Records of an earlier generation that
    /// report late are ignored by the session (`generation` tags them).
    fn session(
        &mut self,
        sink: &mut KafkaSink,
        generation: u16,
    ) -> impl std::future::Future<Output = Result<(), RunError>>;

    /// Whether `err` means another relay holds what this one streams (the slot is
    /// active elsewhere, the table's lock is taken): stand by and retry.
    fn held_elsewhere(&self, err: &RunError) -> bool;

    /// This relay stands by (called on every standby retry).
    fn standing_by(&mut self) {}

    /// The first standby line, and the interruption line, of this kind.
    fn lines(&self) -> Lines;
}

/// How a [`Source`] words its log lines.
pub struct Lines {
    /// Logged once when it begins standing by.
    pub standby: &'static str,
    /// Logged (WARN) when a session is interrupted and will be retried.
    pub interrupted: &'static str,
}

/// Run `source`'s sessions until shutdown or a definite error.
pub async fn supervise<S: Source>(
    source: &mut S,
    sink: &mut KafkaSink,
    metrics: &Metrics,
    max_backoff: Duration,
    shutdown: &CancellationToken,
) -> Result<(), RunError> {
    let mut generation: u16 = 0;
    let mut backoff = Backoff::new(max_backoff);
    let mut standing_by = false;
    while !shutdown.is_cancelled() {
        let started = tokio::time::Instant::now();
        let err = match source.session(sink, generation).await {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        if !(renew_producer(sink, &err)? || err.is_transient()) {
            return Err(err);
        }
        if started.elapsed() > HEALTHY_SESSION {
            backoff.reset();
        }
        let delay = backoff.next();
        let lines = source.lines();
        if source.held_elsewhere(&err) {
            metrics.set_role(Role::Standby);
            source.standing_by();
            if !standing_by {
                tracing::info!(error = %crate::report::Report(&err), "{}", lines.standby);
            }
            standing_by = true;
        } else {
            metrics.set_role(Role::Connecting);
            metrics.set_replication_connected(false);
            metrics.reconnected();
            if ended_stalled(&err) {
                tracing::debug!(retry_in = ?delay, "stalled session ended; resuming with a new producer");
            } else {
                tracing::warn!(error = %crate::report::Report(&err), retry_in = ?delay, "{}", lines.interrupted);
            }
            standing_by = false;
        }
        generation = generation.wrapping_add(1);
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(delay) => {}
        }
    }
    Ok(())
}

/// Retry `op` on transient errors with back-off until it succeeds or shutdown
/// (`Ok` then): set-up steps before the first session, e.g. creating the
/// publication while PostgreSQL is still starting.
pub async fn retry<F, Fut>(
    max_backoff: Duration,
    shutdown: &CancellationToken,
    mut op: F,
) -> Result<(), RunError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), RunError>>,
{
    let mut backoff = Backoff::new(max_backoff);
    loop {
        match op().await {
            Err(err) if err.is_transient() && !shutdown.is_cancelled() => {
                let delay = backoff.next();
                tracing::warn!(error = %crate::report::Report(&err), retry_in = ?delay, "cannot reach PostgreSQL; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            other => return other,
        }
    }
}

/// Replace the producer when librdkafka declared it fatally broken (it delivers
/// nothing more) or when the session ended stalled (its oldest record got no ack
/// for `--stall-timeout`: e.g. retried under a producer id a restarted broker no
/// longer knows; a new producer gets a new id). Safe because the ended session
/// confirmed nothing past its unacked records, so the next one produces them again
/// from the slot, in WAL order; reports of the old producer are discarded. Returns
/// whether the producer was replaced; an error when the cause would break a new
/// producer too.
fn renew_producer(sink: &mut KafkaSink, err: &RunError) -> Result<bool, RunError> {
    let Some((code, reason)) = sink.fatal_error() else {
        if ended_stalled(err) {
            sink.renew()?;
            return Ok(true);
        }
        return Ok(false);
    };
    // Exactly-once: another relay took the transactional id (and so the slot); a
    // new producer would fence it in turn. Stop, as a fenced commit does. (An
    // idempotent producer without transactions bumps its epoch itself.)
    if let Some(txns) = sink.transactions().filter(|_| is_fence(code)) {
        let id = txns.id().to_owned();
        return Err(PipelineError::Transaction(TxnError::Fenced { id, reason }).into());
    }
    // A refused transactional id (librdkafka makes InitProducerId's refusal fatal):
    // a new producer would be refused in turn; stop with the ACL that fixes it.
    if let Some(txns) = sink
        .transactions()
        .filter(|_| crate::kafka::authz::is_authorization(code))
    {
        let id = txns.id().to_owned();
        let refused = TxnError::NotAuthorized { id, code, reason };
        return Err(PipelineError::Transaction(refused).into());
    }
    if is_permanent(code) {
        return Err(RunError::ProducerFatal { code, reason });
    }
    // librdkafka stopped the producer rather than deliver past a record the broker
    // failed for good (`enable.gapless.guarantee`). When the session's own error
    // says that failure is definite (e.g. the topic's WRITE was refused), a new
    // producer would meet it again: the caller stops with it. Otherwise (an epoch
    // the broker no longer takes, a size refusal to redo as poison, a send refused
    // because the producer had already stopped) a new producer goes on.
    if code == RDKafkaErrorCode::GaplessGuarantee && !err.is_transient() && !stopped_sending(err) {
        return Ok(false);
    }
    tracing::warn!(code = ?code, reason = %reason, "kafka producer hit a fatal error; replacing it and resuming from the slot");
    sink.renew()?;
    Ok(true)
}

/// Whether a session ended on a record the producer refused only because it had
/// already stopped (librdkafka's `_FATAL`), not for anything of its own.
fn stopped_sending(err: &RunError) -> bool {
    match err {
        RunError::Pipeline(PipelineError::Delivery(e))
        | RunError::Poll(crate::poll::PollError::Pipeline(PipelineError::Delivery(e))) => {
            e.code == RDKafkaErrorCode::Fatal
        }
        _ => false,
    }
}

/// Whether a session ended because its oldest record got no ack within
/// `--stall-timeout` (already said by the session, once per stall).
fn ended_stalled(err: &RunError) -> bool {
    match err {
        RunError::Pipeline(e) | RunError::Poll(crate::poll::PollError::Pipeline(e)) => {
            matches!(e, PipelineError::Stalled(_))
        }
        _ => false,
    }
}

/// Exponential back-off from 250 ms up to a cap.
struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(250);

    fn new(max: Duration) -> Self {
        Self {
            next: Self::FIRST,
            max,
        }
    }

    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1));
        let seq: Vec<u128> = (0..5).map(|_| b.next().as_millis()).collect();
        assert_eq!(seq, [250, 500, 1000, 1000, 1000]);
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(250));
    }
}
