//! [`Session`], the I/O shell of one replication session: it moves bytes between
//! the replication stream, the producer and the [`Relay`] core, keeps time (status
//! tick, drain deadline, progress) and is the one place an LSN goes to disk and then
//! to the server.
//!
//! Invariants: an LSN is confirmed only after [`Checkpoint::persist`] returned for
//! it, during the session (status tick) and at its end, and — with a publication
//! watch ([`crate::safety::publication`]) — only as far as a catalog reading begun
//! after it was written vouched for it (the state file follows every ack, the
//! server at most a reading behind); a session that ends by a
//! completed drain flushes the producer (bounded by what is left of the drain
//! timeout) before that last confirmation; a session whose oldest in-flight record
//! went `--stall-timeout` without progress ends with [`PipelineError::Stalled`]
//! (after logging it and marking `/readyz`), confirming nothing past that record —
//! the caller replaces the producer and resumes from the slot. The status tick
//! only runs while it has work (`Session::has_tick_work`): an idle session wakes
//! only for the server, the producer, shutdown and the progress line.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::PipelineError;
use super::exactly_once::{ExactlyOnce, WATERMARK_TAG};
use super::progress::{self, PROGRESS_INTERVAL};
use super::relay::Relay;
use super::{PipelineConfig, SessionStats};
use crate::kafka::producer::{Delivery, KafkaSink, SendError, TxnError};
use crate::metrics::{Metrics, Role};
use crate::pg::client::connection::PgError;
use crate::pg::lsn::Lsn;
use crate::pg::source::protocol::ReplicationMessage;
use crate::pg::source::replication::ReplicationStream;
use crate::safety::publication::{PublicationChanged, PublicationWatch, Reading, WatchError};
use crate::state::Checkpoint;

/// The commit in progress (pending without one).
async fn committed(eos: &mut Option<ExactlyOnce>) -> Result<Lsn, TxnError> {
    match eos {
        Some(eos) => eos.committed().await,
        None => std::future::pending().await,
    }
}

/// The watch's reading in progress (pending without a watch).
async fn finished(watch: &mut Option<PublicationWatch>) -> Result<Reading, WatchError> {
    match watch {
        Some(watch) => watch.finished().await,
        None => std::future::pending().await,
    }
}

/// What woke the loop.
enum Step {
    Shutdown,
    Delivery(Option<Delivery>),
    Tick,
    Wal(Option<Result<ReplicationMessage, PgError>>),
    Progress,
    Watch(Result<Reading, WatchError>),
    Committed(Result<Lsn, TxnError>),
}

/// How a session's loop ended without an error.
enum End {
    /// Shutdown, and every record in flight was reported before `deadline`.
    Drained { deadline: Instant },
    /// Shutdown, and the drain deadline passed first.
    TimedOut,
}

/// WAL messages handled per wake-up of the loop when more are already queued.
const WAL_BATCH: usize = 256;

/// One replication session: the stream, the producer and the relay core.
pub struct Session<'a> {
    cfg: &'a PipelineConfig,
    relay: Relay<'a>,
    metrics: Arc<Metrics>,
    /// The server's WAL end as last reported in XLogData or a keepalive (for the
    /// lag gauge).
    server_wal_end: Lsn,
    sink: &'a mut KafkaSink,
    stream: ReplicationStream,
    /// Persists an LSN before it may be confirmed.
    checkpoint: Checkpoint,
    /// Something the gauges show changed since the last status tick.
    gauges_stale: bool,
    /// The publication watch: the slot is confirmed only as far as it vouched for
    /// (`None`: messages only, or a test without one).
    watch: Option<PublicationWatch>,
    /// The last LSN sent to the server as confirmed (at most the relay's last
    /// persisted one, [`Relay::last_reported`], and what the watch vouched for).
    server_confirmed: Lsn,
    /// Exactly-once: the Kafka transaction and its watermark (`None`: at-least-once).
    eos: Option<ExactlyOnce>,
}

impl<'a> Session<'a> {
    /// A session over a started stream. `generation` must differ from the previous
    /// session's so stale delivery reports are told apart; `checkpoint` persists
    /// every LSN before it is confirmed.
    pub fn new(
        cfg: &'a PipelineConfig,
        sink: &'a mut KafkaSink,
        stream: ReplicationStream,
        generation: u16,
        metrics: Arc<Metrics>,
        checkpoint: Checkpoint,
    ) -> Self {
        metrics.set_replication_connected(true);
        metrics.set_role(Role::Active);
        Self {
            cfg,
            relay: Relay::new(cfg, generation, metrics.clone()),
            metrics,
            server_wal_end: Lsn::INVALID,
            sink,
            stream,
            checkpoint,
            gauges_stale: true,
            watch: None,
            server_confirmed: Lsn::INVALID,
            eos: None,
        }
    }

    /// Exactly-once: send records in Kafka transactions with a watermark, skip what
    /// the newest committed watermark holds (`skip_through`: its commit LSN), and
    /// confirm only what a committed transaction holds.
    pub fn exactly_once(mut self, eos: ExactlyOnce, skip_through: Lsn) -> Self {
        self.relay.skip_through(skip_through);
        self.eos = Some(eos);
        self
    }

    /// What of `lsn` (acked) may be confirmed: with exactly-once, no further than
    /// the last committed watermark while a transaction is open or committing.
    fn capped(&self, lsn: Lsn) -> Lsn {
        match &self.eos {
            Some(eos) => eos.cap(lsn, self.sink.transaction_open()),
            None => lsn,
        }
    }

    /// Exactly-once: commit the open transaction when it is due (at a PostgreSQL
    /// commit boundary, old or large enough, or draining): its watermark first.
    fn maybe_commit(&mut self) -> Result<(), PipelineError> {
        let Some(eos) = &mut self.eos else {
            return Ok(());
        };
        let open = self.sink.transaction_open();
        let produced = self.relay.sent();
        eos.note_sent(open);
        let between = !self.relay.in_transaction() && !self.relay.waiting_for_queue();
        if !eos.due(open, between, produced, self.relay.draining()) {
            return Ok(());
        }
        let (commit_lsn, end_lsn) = self.relay.last_commit();
        let (record, watermark) = eos.watermark(commit_lsn, end_lsn);
        match self.sink.send(&record, WATERMARK_TAG) {
            Ok(()) => {
                eos.start_commit(watermark, produced);
                Ok(())
            }
            // Tried again at the next tick.
            Err(SendError::QueueFull) => Ok(()),
            Err(SendError::Refused(err)) => Err(PipelineError::Delivery(err)),
        }
    }

    /// Confirm to the server only what `watch` vouched for (see
    /// [`crate::safety::publication`]); the state file still follows every ack.
    pub fn watching(mut self, watch: Option<PublicationWatch>) -> Self {
        self.watch = watch;
        self
    }

    /// The slot's `confirmed_flush_lsn` when the stream started: what the server
    /// already holds as confirmed (the lag gauge counts from it until this session
    /// confirms more).
    pub fn resuming_from(mut self, start: Lsn) -> Self {
        self.relay.reported(start);
        self.server_confirmed = start;
        self
    }

    /// Run until shutdown (then drain, flush, confirm, close) or an error.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<SessionStats, PipelineError> {
        let mut result = self.run_loop(shutdown).await;
        self.metrics.set_replication_connected(false);
        if result.is_err() {
            if let Some(fenced) = self.commit_verdict().await {
                result = Err(fenced);
            }
        }
        if let Ok(End::Drained { deadline }) = result {
            self.flush(deadline);
            if let Err(err) = self.commit_at_end() {
                result = Err(err);
            }
        }
        let mut stats = self.relay.stats().clone();
        stats.drain_timed_out = matches!(result, Ok(End::TimedOut));
        // Whatever happened, tell the server what is safely delivered (once on disk).
        let confirmed = self.capped(self.relay.confirmed());
        match self.checkpoint.persist(confirmed).await {
            Ok(()) => {
                let (vouched, finding) = self.vouch_at_end(confirmed, &result).await;
                if let (Some(finding), true) = (finding, result.is_ok()) {
                    result = Err(finding);
                }
                stats.confirmed = vouched;
                self.confirm_durable(vouched);
            }
            Err(err) => {
                tracing::error!(error = %crate::report::Report(&err), lsn = %confirmed, "not confirming")
            }
        }
        if let Err(err) = self.stream.close().await {
            tracing::debug!(error = %crate::report::Report(&err), "closing replication stream");
        }
        result.map(|_| stats)
    }

    async fn run_loop(&mut self, shutdown: CancellationToken) -> Result<End, PipelineError> {
        let mut status = tokio::time::interval(self.cfg.status_interval);
        status.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut drain_deadline: Option<Instant> = None;
        let mut progress = tokio::time::interval(PROGRESS_INTERVAL);
        progress.reset();
        // A change the start found to repair is read (and repaired) at once, even
        // on an idle database.
        if let Some(watch) = &mut self.watch {
            watch.want(Lsn::INVALID, std::time::Instant::now());
        }
        loop {
            let committing = self.eos.as_ref().is_some_and(ExactlyOnce::committing);
            if let Some(deadline) =
                drain_deadline.filter(|_| self.relay.is_drained() && !committing)
            {
                return Ok(End::Drained { deadline });
            }
            let can_read = self.relay.can_read() && !committing;
            let ticking = drain_deadline.is_some() || self.has_tick_work();
            let reading = self.watch.as_ref().is_some_and(PublicationWatch::reading);
            let step = tokio::select! {
                biased;
                // PRIORITY 1: shutdown: stop reading WAL, drain in-flight records.
                _ = shutdown.cancelled(), if drain_deadline.is_none() => Step::Shutdown,
                // PRIORITY 2: delivery reports.
                delivery = self.sink.next_delivery() => Step::Delivery(delivery),
                // PRIORITY 3: status timer, queue-full retry, drain deadline; only
                // while there is something to do (an idle relay sleeps).
                _ = status.tick(), if ticking => Step::Tick,
                // PRIORITY 4: new WAL, only under the in-flight caps.
                message = self.stream.recv(), if can_read => Step::Wal(message),
                // PRIORITY 5: a periodic progress line for operators.
                _ = progress.tick() => Step::Progress,
                // PRIORITY 6: the publication watch's reading came back.
                reading = finished(&mut self.watch), if reading => Step::Watch(reading),
                // Exactly-once: the transaction's commit came back.
                result = committed(&mut self.eos), if committing => Step::Committed(result),
            };
            match step {
                Step::Shutdown => {
                    progress::draining(&self.relay);
                    drain_deadline = Some(Instant::now() + self.cfg.drain_timeout);
                    self.relay.start_drain();
                }
                Step::Delivery(None) | Step::Wal(None) => return Err(PipelineError::StreamClosed),
                Step::Delivery(Some(delivery)) => {
                    self.on_deliveries(delivery)?;
                    self.maybe_commit()?;
                }
                Step::Committed(result) => {
                    result?;
                    self.committed_watermark();
                    self.sink.transaction_ended();
                    self.gauges_stale = true;
                }
                Step::Tick => {
                    self.report_status().await?;
                    self.check_stall()?;
                    if !committing {
                        self.relay.retry_pending(&mut *self.sink)?;
                    }
                    self.maybe_commit()?;
                    if drain_deadline.is_some_and(|d| Instant::now() >= d) {
                        progress::drain_timed_out(&self.relay);
                        return Ok(End::TimedOut);
                    }
                }
                Step::Progress => progress::log(&self.relay),
                Step::Wal(Some(Err(err))) => return Err(err.into()),
                Step::Wal(Some(Ok(message))) => {
                    self.on_wal_batch(message)?;
                    self.maybe_commit()?;
                }
                Step::Watch(reading) => self.on_reading(reading).await?,
            }
        }
    }

    /// Whether a status tick has work: records in flight (stall watch), an LSN to
    /// confirm, a record waiting for queue space, or gauges to refresh. An idle
    /// relay (keepalives only) then wakes only when the server or the producer
    /// says something, not ten times a second.
    fn has_tick_work(&self) -> bool {
        self.gauges_stale
            || self.server_confirmed < self.relay.last_reported()
            || self.relay.tracker().in_flight_records() > 0
            || self.relay.waiting_for_queue()
            || self.relay.to_report().is_some()
            || self.sink.transaction_open()
    }

    /// `first` and every report that is ready, in one go; then the record waiting
    /// for queue space, if any.
    fn on_deliveries(&mut self, first: Delivery) -> Result<(), PipelineError> {
        self.gauges_stale = true;
        self.on_delivery(first)?;
        while let Some(more) = self.sink.try_next_delivery() {
            self.on_delivery(more)?;
        }
        if self.eos.as_ref().is_some_and(ExactlyOnce::committing) {
            return Ok(()); // nothing is sent while a commit runs
        }
        self.relay.retry_pending(&mut *self.sink)
    }

    /// One report to the core. With exactly-once, a watermark's report is the
    /// commit's business, and any failed record ends the session: the transaction
    /// cannot commit, and the next session's `init_transactions` aborts it. A row
    /// the broker refused for its size is noted first ([`Refusals`]), so the redo
    /// turns it poison before it is sent (`--on-invalid too-large=…`, its dead
    /// letter in the redo's transaction); any other refusal for good stops the
    /// relay instead of redoing the transaction forever.
    ///
    /// [`Refusals`]: super::refusals::Refusals
    fn on_delivery(&mut self, delivery: Delivery) -> Result<(), PipelineError> {
        if self.eos.is_some() {
            if delivery.tag == WATERMARK_TAG {
                return match delivery.result {
                    Ok(()) => Ok(()),
                    Err(err) => Err(PipelineError::Delivery(err)),
                };
            }
            if let Err(err) = delivery.result {
                let cfg = self.cfg;
                if super::record::is_poison_refusal(cfg, &err) {
                    cfg.refusals.note(&err);
                    return Err(PipelineError::RedoWithoutRow(Box::new(err)));
                }
                return Err(PipelineError::Delivery(err));
            }
        }
        self.relay.on_delivery(&mut *self.sink, delivery)
    }

    /// `first` and what is already queued, without another round of the select
    /// (which re-polls every branch): a backlog is read in batches, and deliveries
    /// wait at most [`WAL_BATCH`] messages.
    fn on_wal_batch(&mut self, first: ReplicationMessage) -> Result<(), PipelineError> {
        self.on_wal(first)?;
        for _ in 0..WAL_BATCH {
            if !self.relay.can_read() {
                break;
            }
            match self.stream.try_recv() {
                Some(Ok(message)) => self.on_wal(message)?,
                Some(Err(err)) => return Err(err.into()),
                None => break,
            }
        }
        Ok(())
    }

    /// One message to the core, noting the server's WAL end it carries.
    fn on_wal(&mut self, message: ReplicationMessage) -> Result<(), PipelineError> {
        let (ReplicationMessage::XLogData { wal_end, .. }
        | ReplicationMessage::PrimaryKeepalive { wal_end, .. }) = &message;
        self.server_wal_end = self.server_wal_end.max(*wal_end);
        self.gauges_stale = true;
        self.relay.on_wal(&mut *self.sink, message)
    }

    /// Record what is delivered in the state file (at most once per tick, and only
    /// when it moved), then confirm to the server what is vouched for. Then the
    /// gauges, with the lag counted from what the server now holds as confirmed
    /// (the same definition as `pgoutbox status`, see [`crate::metrics`]).
    async fn report_status(&mut self) -> Result<(), PipelineError> {
        if let Some(lsn) = self.relay.to_report() {
            let lsn = self.capped(lsn);
            if lsn > self.relay.last_reported() {
                self.checkpoint.record(lsn).await?;
                self.relay.reported(lsn);
            }
        }
        self.confirm_vouched().await?;
        self.gauges_stale = false;
        let tracker = self.relay.tracker();
        self.metrics
            .set_in_flight(tracker.in_flight_records(), tracker.in_flight_bytes());
        self.metrics.set_in_flight_window(self.relay.window());
        let confirmed = self.relay.last_reported();
        let wal_end = self.server_wal_end.max(confirmed);
        self.metrics
            .set_slot(confirmed.0, wal_end.bytes_since(confirmed));
        Ok(())
    }

    /// The one place an LSN goes to the server during a session: tell it what is
    /// recorded and vouched for, once that is durable in the state file; ask the
    /// watch for a reading when the recorded position is past what it vouched for.
    async fn confirm_vouched(&mut self) -> Result<(), PipelineError> {
        let persisted = self.relay.last_reported();
        let lsn = match &mut self.watch {
            Some(watch) => {
                watch.want(persisted, std::time::Instant::now());
                persisted.min(watch.vouched())
            }
            None => persisted,
        };
        if lsn > self.server_confirmed {
            self.checkpoint.persist(lsn).await?;
            self.confirm_durable(lsn);
            self.stream.send_status_now();
            self.server_confirmed = lsn;
        }
        Ok(())
    }

    /// Tell the server `lsn`, which the state file holds durably (checked in debug
    /// builds, so every integration test checks it at every confirm).
    fn confirm_durable(&mut self, lsn: Lsn) {
        debug_assert!(
            self.checkpoint
                .durable()
                .map_or(true, |durable| durable >= lsn),
            "confirming {lsn} past the state file's durable {:?}",
            self.checkpoint.durable()
        );
        self.stream.confirm(lsn);
    }

    /// A reading of the publication came back: confirm what it vouched for, or
    /// stop on a change (counted, `/readyz`), or end the session on a failed
    /// reading (a new session reconnects and reads again).
    async fn on_reading(
        &mut self,
        reading: Result<Reading, WatchError>,
    ) -> Result<(), PipelineError> {
        match reading {
            Ok(Reading::Vouched(baseline)) => {
                self.checkpoint.keep_publication(baseline);
                self.confirm_vouched().await
            }
            Ok(Reading::Changed(changed)) => Err(self.changed(changed)),
            Ok(Reading::PublicationGone | Reading::Repairing) => Ok(()),
            Err(err) => Err(PipelineError::Watch(err)),
        }
    }

    /// The finding, said and counted.
    fn changed(&self, changed: Box<PublicationChanged>) -> PipelineError {
        self.metrics.publication_changed(changed.to_string());
        tracing::error!(
            publication = %changed.publication,
            since_lsn = %changed.since_lsn,
            until_lsn = %changed.until_lsn,
            "{changed}"
        );
        PipelineError::PublicationChanged(changed)
    }

    /// At the end of a session, what the server may be told: `persisted` once
    /// one more reading vouched for it (a session ending on a change or a failed
    /// reading gets no reading, only what was vouched already).
    async fn vouch_at_end(
        &mut self,
        persisted: Lsn,
        result: &Result<End, PipelineError>,
    ) -> (Lsn, Option<PipelineError>) {
        let Some(watch) = &mut self.watch else {
            return (persisted, None);
        };
        let mut finding = None;
        let readable = match result {
            Ok(_) => true,
            Err(PipelineError::Watch(_) | PipelineError::PublicationChanged(_)) => false,
            Err(err) => err.is_transient(),
        };
        if readable && persisted > watch.vouched() {
            match watch.read_now().await {
                Ok(Reading::Vouched(baseline)) => self.checkpoint.keep_publication(baseline),
                Ok(Reading::Changed(changed)) => finding = Some(changed),
                Ok(Reading::PublicationGone | Reading::Repairing) => {}
                Err(err) => {
                    tracing::warn!(error = %crate::report::Report(&err), "could not read the publication at the end of the session; the slot stays at the position last vouched for")
                }
            }
        }
        let vouched = persisted.min(watch.vouched());
        (vouched, finding.map(|changed| self.changed(changed)))
    }

    /// End the session when the oldest in-flight record went `--stall-timeout`
    /// without progress: say so (log, `/readyz`, metrics) and let the caller
    /// replace the producer and resume from the slot.
    fn check_stall(&mut self) -> Result<(), PipelineError> {
        let (stall, age) = self.relay.stalled(std::time::Instant::now());
        self.metrics.set_oldest_in_flight_age(age);
        let Some(stall) = stall else { return Ok(()) };
        // Said once per stall: while no ack came since the last one (a broker
        // cluster below min.insync.replicas for minutes), each further producer
        // replacement is a debug line; `/readyz` and the counter show it goes on.
        if self.metrics.stalled(stall.to_string()) {
            tracing::warn!(
                topic = %stall.record.topic,
                table = %stall.record.table,
                lsn = %stall.record.lsn,
                event_id = %stall.event_id(),
                age_s = stall.age.as_secs(),
                in_flight = stall.in_flight,
                stall_timeout = %humantime::format_duration(stall.timeout),
                "no kafka ack for the oldest in-flight record within --stall-timeout; replacing the producer and resuming from the slot"
            );
        } else {
            tracing::debug!(
                lsn = %stall.record.lsn,
                age_s = stall.age.as_secs(),
                "still no kafka ack since the stall began; replacing the producer again"
            );
        }
        Err(PipelineError::Stalled(Box::new(stall)))
    }

    /// Exactly-once, a session ending on an error while a commit runs: wait for
    /// the commit's verdict (it is bounded by its own timeout). Committed, the
    /// state file and the final confirmation count it; fenced, that is why the
    /// session ended (returned: the relay stops instead of standing by as if
    /// nothing happened — a zombie learns it was one); any other failure leaves the
    /// transaction to the next session's `init_transactions`.
    async fn commit_verdict(&mut self) -> Option<PipelineError> {
        if !self.eos.as_ref().is_some_and(ExactlyOnce::committing) {
            return None;
        }
        match committed(&mut self.eos).await {
            Ok(end_lsn) => {
                tracing::info!(%end_lsn, "the kafka transaction in flight when the session ended committed");
                self.committed_watermark();
                self.sink.transaction_ended();
                None
            }
            Err(err @ TxnError::Fenced { .. }) => Some(PipelineError::Transaction(err)),
            Err(err) => {
                tracing::warn!(error = %crate::report::Report(&err), "the kafka transaction in flight when the session ended did not commit; the next session aborts it and sends its rows again");
                None
            }
        }
    }

    /// Exactly-once, after a completed drain: commit what is open (its watermark
    /// first), so the final confirmation covers it.
    fn commit_at_end(&mut self) -> Result<(), PipelineError> {
        let Some(eos) = &mut self.eos else {
            return Ok(());
        };
        if !self.sink.transaction_open() || self.relay.in_transaction() {
            return Ok(());
        }
        let (commit_lsn, end_lsn) = self.relay.last_commit();
        let (record, watermark) = eos.watermark(commit_lsn, end_lsn);
        self.sink
            .send(&record, WATERMARK_TAG)
            .map_err(|e| match e {
                SendError::Refused(err) => PipelineError::Delivery(err),
                SendError::QueueFull => PipelineError::StreamClosed,
            })?;
        let produced = self.relay.sent();
        let commit = || eos.commit_now(watermark, produced);
        let result = match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(commit),
            _ => commit(),
        };
        result?;
        self.committed_watermark();
        self.sink.transaction_ended();
        Ok(())
    }

    /// A Kafka transaction with a watermark committed: the state file keeps where
    /// (written with the next confirmed LSN), so a later start can tell a topic
    /// that lost the watermark from a first start.
    fn committed_watermark(&self) {
        if let Some(eos) = &self.eos {
            self.checkpoint.keep_watermark(eos.record());
        }
    }

    /// After a completed drain nothing of this session is left in librdkafka, but a
    /// failed earlier session's records may be: give them what is left of the drain
    /// time, so nothing sits in the queue when the process exits.
    fn flush(&mut self, deadline: Instant) {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let mut flush = || self.sink.flush(remaining);
        // librdkafka's flush blocks; on a multi-threaded runtime, tell it so.
        let flushed = match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(flush),
            _ => flush(),
        };
        if !flushed {
            tracing::warn!(
                in_flight = self.sink.in_flight(),
                "producer still holds records after the drain; they will be resent from the slot"
            );
        }
    }
}
