//! Exactly-once in a session ([`ExactlyOnce`]): when the open Kafka transaction
//! commits, what its watermark says, and how far the slot may follow.
//!
//! ```text
//!  records of PG txns T1..Tn ─▶ open Kafka transaction (begun by the sink's first send)
//!  at a PG commit boundary, once it is --transaction-interval old or holds
//!  MAX_RECORDS records (or the session drains):
//!     watermark{commit_lsn(Tn), end_lsn(Tn)} ─▶ same transaction ─▶ commit (off-thread)
//!     committed ─▶ the slot may be confirmed up to end_lsn(Tn)
//! ```
//!
//! Invariants: a PostgreSQL transaction is never split between two Kafka
//! transactions (a commit starts only between them, so the watermark's commit LSN
//! says exactly which transactions are in Kafka); while a Kafka transaction is open
//! or committing, the slot is confirmed at most to the end LSN of the last
//! committed watermark ([`ExactlyOnce::cap`]) — acks of records in an uncommitted
//! transaction vouch for nothing; no record is sent while a commit runs; a failed
//! commit ends the session (the next one's `init_transactions` aborts what is left
//! and resumes after the newest committed watermark).

use std::time::{Duration, Instant};

use crate::kafka::producer::{Transactions, TxnError};
use crate::kafka::watermark::Watermark;
use crate::outbox::record::KafkaRecord;
use crate::pg::lsn::Lsn;
use crate::state::WatermarkRecord;

/// Records in one Kafka transaction before it commits at the next PostgreSQL
/// commit, whatever its age.
pub const MAX_RECORDS: u64 = 10_000;

/// Record bytes (keys, values, headers) in one Kafka transaction before it
/// commits at the next PostgreSQL commit, whatever its age: what an abort makes
/// the relay send again, and what a read_committed consumer waits behind, stay
/// bounded with large rows too (16 MiB is 160 rows of 100 KB; with small rows
/// [`MAX_RECORDS`] or the interval comes first).
pub const MAX_BYTES: u64 = 16 << 20;

/// What a session has handed to the producer so far (records and their bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    pub records: u64,
    pub bytes: u64,
}

impl Sent {
    fn since(self, before: Sent) -> Sent {
        Sent {
            records: self.records.saturating_sub(before.records),
            bytes: self.bytes.saturating_sub(before.bytes),
        }
    }
}

/// Whether a transaction open for `age`, holding `size`, should commit at this
/// PostgreSQL commit boundary.
fn due_at(age: Duration, interval: Duration, size: Sent, draining: bool) -> bool {
    draining || age >= interval || size.records >= MAX_RECORDS || size.bytes >= MAX_BYTES
}

/// How long a commit may take before the session gives up on it (and the next
/// one aborts the transaction).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(60);

/// The delivery tag of a watermark record: the relay core never sees its report
/// (the commit's own result is what counts).
pub const WATERMARK_TAG: usize = usize::MAX;

/// `--delivery exactly-once` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactlyOnceConfig {
    /// `--watermark-topic`.
    pub watermark_topic: String,
    /// `--transactional-id` (default derived from the server, database and slot).
    pub transactional_id: Option<String>,
    /// `--transaction-interval`.
    pub interval: Duration,
    /// `--accept-watermark-reset`: start from the slot although the state file
    /// says the watermark topic lost this relay's watermark (this start only).
    pub accept_reset: bool,
}

impl ExactlyOnceConfig {
    /// The transactional id: the one given, or `pgoutbox-<system id>-<db>-<slot>`.
    pub fn transactional_id(&self, system_id: &str, database: &str, slot: &str) -> String {
        self.transactional_id
            .clone()
            .unwrap_or_else(|| format!("pgoutbox-{system_id}-{database}-{slot}"))
    }
}

/// The delivery mode in words, as `check`, `tail` and the logs say it: `None` is
/// at-least-once. `transactional_id` is the derived id when it is known.
pub fn describe(cfg: Option<&ExactlyOnceConfig>, transactional_id: Option<&str>) -> String {
    let Some(cfg) = cfg else {
        return "at-least-once (a crash resends what was in flight; consumers deduplicate on the id header)".to_owned();
    };
    let id = cfg
        .transactional_id
        .as_deref()
        .or(transactional_id)
        .unwrap_or("pgoutbox-<system identifier>-<database>-<slot>");
    format!(
        "exactly-once (transactional.id {id}, watermark topic {}, a Kafka transaction per {:?}, \
         {MAX_RECORDS} records or {} MiB; consumers read with isolation.level=read_committed)",
        cfg.watermark_topic,
        cfg.interval,
        MAX_BYTES >> 20
    )
}

/// A commit in progress on a blocking thread.
type Committing = tokio::task::JoinHandle<Result<(), TxnError>>;

/// The exactly-once state of one session.
pub struct ExactlyOnce {
    interval: Duration,
    topic: String,
    txns: Transactions,
    /// What every watermark of this session says besides its LSNs.
    stamp: Watermark,
    /// End LSN of the newest committed watermark: the slot may follow up to here
    /// while a transaction is open.
    committed_end: Lsn,
    /// When the open transaction got its first record (seen).
    opened: Option<Instant>,
    /// The session's count of records handed over when the last transaction
    /// began committing (so the open one holds the rest, its watermark aside).
    produced_before: Sent,
    /// The commit in progress, the watermark it carries, when it began and the
    /// records of its transaction.
    committing: Option<(Committing, Watermark, Instant, u64)>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Where this session's watermarks go, for the state file once one commits.
    record: WatermarkRecord,
}

impl ExactlyOnce {
    /// The state of a session resuming after `newest` (the newest committed
    /// watermark, if any), confirmed by the slot up to `slot_confirmed`.
    pub fn new(
        cfg: &ExactlyOnceConfig,
        txns: Transactions,
        stamp: Watermark,
        slot_confirmed: Lsn,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
    ) -> Self {
        metrics.transactions.enable();
        Self {
            metrics,
            interval: cfg.interval,
            topic: cfg.watermark_topic.clone(),
            record: WatermarkRecord {
                topic: cfg.watermark_topic.clone(),
                transactional_id: txns.id().to_owned(),
            },
            committed_end: slot_confirmed.max(stamp.end_lsn),
            txns,
            stamp,
            opened: None,
            produced_before: Sent::default(),
            committing: None,
        }
    }

    /// The highest LSN the slot may be confirmed to, of `confirmable` (the relay's
    /// acked low-water mark), while a transaction is `open`.
    pub fn cap(&self, confirmable: Lsn, open: bool) -> Lsn {
        if open || self.committing.is_some() {
            confirmable.min(self.committed_end)
        } else {
            confirmable
        }
    }

    /// Where this session's watermarks go (kept in the state file once one
    /// committed).
    pub fn record(&self) -> &WatermarkRecord {
        &self.record
    }

    /// Whether a commit is running (no record may be sent meanwhile).
    pub fn committing(&self) -> bool {
        self.committing.is_some()
    }

    /// Note the session's produced count whenever records may have been sent:
    /// the first one after a commit opens the clock of the transaction.
    pub fn note_sent(&mut self, open: bool) {
        if open && self.opened.is_none() {
            self.opened = Some(Instant::now());
        }
    }

    /// Whether the open transaction should commit now: it is open, no commit runs,
    /// the relay is between PostgreSQL transactions, and it is old or large enough
    /// (or the session drains).
    pub fn due(&self, open: bool, between: bool, produced: Sent, draining: bool) -> bool {
        let Some(since) = self.opened else {
            return false;
        };
        open && between
            && self.committing.is_none()
            && due_at(
                since.elapsed(),
                self.interval,
                produced.since(self.produced_before),
                draining,
            )
    }

    /// The watermark record for a transaction whose last PostgreSQL transaction
    /// committed at `commit_lsn` and ended at `end_lsn`.
    pub fn watermark(&self, commit_lsn: Lsn, end_lsn: Lsn) -> (KafkaRecord, Watermark) {
        let watermark = Watermark {
            commit_lsn,
            end_lsn,
            ..self.stamp.clone()
        };
        let record = KafkaRecord {
            topic: self.topic.clone(),
            key: Some(bytes::Bytes::from(self.txns.id().to_owned())),
            value: Some(bytes::Bytes::from(watermark.encode())),
            id: None,
            event_type: None,
            placed: Vec::new(),
            timestamp_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            headers: Vec::new(),
        };
        (record, watermark)
    }

    /// Start committing, `watermark` sent in the transaction; `produced` is the
    /// session's count of records handed over so far.
    pub fn start_commit(&mut self, watermark: Watermark, produced: Sent) {
        crate::failpoint::hit("before-kafka-commit");
        let txns = self.txns.clone();
        let handle = tokio::task::spawn_blocking(move || txns.commit(COMMIT_TIMEOUT));
        let records = produced.since(self.produced_before).records;
        self.produced_before = produced;
        self.committing = Some((handle, watermark, Instant::now(), records));
    }

    /// The commit's result (pending while none runs). Cancel-safe.
    pub async fn committed(&mut self) -> Result<Lsn, TxnError> {
        let Some((handle, ..)) = &mut self.committing else {
            return std::future::pending().await;
        };
        let result = match handle.await {
            Ok(result) => result,
            Err(join) => Err(TxnError::Failed {
                code: rdkafka::error::RDKafkaErrorCode::Fail,
                reason: format!("the commit's thread failed: {join}"),
                fatal: false,
            }),
        };
        let (_, watermark, began, records) = self.committing.take().expect("a commit was running");
        self.ended(result, &watermark, began, records)
    }

    /// Commit synchronously at the end of a session (a completed drain).
    pub fn commit_now(&mut self, watermark: Watermark, produced: Sent) -> Result<Lsn, TxnError> {
        let (began, records) = (Instant::now(), produced.since(self.produced_before).records);
        self.produced_before = produced;
        let result = self.txns.commit(COMMIT_TIMEOUT);
        self.ended(result, &watermark, began, records)
    }

    /// A commit of `records` records with `watermark`, begun at `began`, ended.
    fn ended(
        &mut self,
        result: Result<(), TxnError>,
        watermark: &Watermark,
        began: Instant,
        records: u64,
    ) -> Result<Lsn, TxnError> {
        if let Err(err) = result {
            self.metrics.transactions.failed();
            return Err(err);
        }
        crate::failpoint::hit("after-kafka-commit");
        self.metrics
            .transactions
            .committed(records, began.elapsed());
        self.committed_end = self.committed_end.max(watermark.end_lsn);
        self.opened = None;
        Ok(watermark.end_lsn)
    }
}

/// `during-init-transactions`: crash while `init_transactions` runs — when the
/// previous producer left a transaction open, the coordinator is aborting it
/// then (a relay never aborts a transaction itself). The watchdog fires if the
/// call has not returned `DURING_INIT` after it began; `done` is set when it
/// returns (a call that returns first is a pass without a hit, logged).
fn init_watchdog(done: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    const DURING_INIT: Duration = Duration::from_millis(20);
    let Some(action) = crate::failpoint::armed("during-init-transactions") else {
        return;
    };
    std::thread::spawn(move || {
        std::thread::sleep(DURING_INIT);
        if done.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("failpoint during-init-transactions missed: init_transactions returned within {DURING_INIT:?}");
        } else {
            crate::failpoint::fire("during-init-transactions", action);
        }
    });
}

/// How long the set-up calls of a session may take: `init_transactions` (which
/// waits for the coordinator to finish the previous producer's transaction) and
/// reading the watermark topic.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a session starts from: what it skips and what it confirms up to.
pub struct Start {
    /// The session's exactly-once state.
    pub state: ExactlyOnce,
    /// Commit LSN of the newest committed watermark (`0/0`: none): transactions
    /// committing at or below it are in Kafka already.
    pub skip_through: Lsn,
}

/// What a session's set-up needs of the stream and the relay.
pub struct Stream<'a> {
    /// The server's system identifier.
    pub system_id: &'a str,
    /// Its timeline.
    pub timeline: u32,
    /// The earlier timelines that lead to it (`TIMELINE_HISTORY`).
    pub history: &'a [crate::pg::source::timeline::TimelineSwitch],
    /// Its WAL end (a watermark past it cannot be this stream's).
    pub wal_end: Lsn,
    /// The database.
    pub database: &'a str,
    /// The slot (acquired: the stream started).
    pub slot: &'a str,
    /// The slot's confirmed position.
    pub slot_confirmed: Lsn,
    /// Where the state file says this relay committed watermarks (`None`: never,
    /// or no state file).
    pub recorded: Option<WatermarkRecord>,
}

/// Set a session up for exactly-once, once its slot is acquired (a standby relay
/// never gets here, so it never fences the active one): a fresh transactional
/// producer, `init_transactions` (fences any zombie and finishes its
/// transaction), the watermark topic (created compacted when missing), the newest
/// watermark read with `read_committed` and judged against the server.
pub async fn start(
    cfg: &ExactlyOnceConfig,
    sink: &mut crate::kafka::producer::KafkaSink,
    reader: rdkafka::ClientConfig,
    stream: &Stream<'_>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
) -> Result<Start, super::PipelineError> {
    use crate::kafka::watermark;

    let id = cfg.transactional_id(stream.system_id, stream.database, stream.slot);
    sink.make_transactional(&id).map_err(|e| TxnError::Failed {
        code: rdkafka::error::RDKafkaErrorCode::Fail,
        reason: e.to_string(),
        fatal: false,
    })?;
    let txns = sink
        .transactions()
        .expect("the sink was just made transactional");
    let init = txns.clone();
    // Crash points around the fencing: before it (the previous producer's
    // transaction still open) and after it (that transaction aborted, nothing of
    // this session written or read yet).
    crate::failpoint::hit("before-init-transactions");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    init_watchdog(done.clone());
    let initialised = blocking(move || init.init(SETUP_TIMEOUT)).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    initialised??;
    crate::failpoint::hit("after-init-transactions");
    watermark::ensure_topic(&reader, &cfg.watermark_topic, SETUP_TIMEOUT).await?;
    let (topic, key) = (cfg.watermark_topic.clone(), id.clone());
    let newest =
        blocking(move || watermark::read_newest(&reader, &topic, &key, SETUP_TIMEOUT)).await??;
    if let Some(found) = &newest {
        found.judge(
            stream.system_id,
            stream.timeline,
            stream.history,
            stream.wal_end,
        )?;
    }
    if newest.is_none() {
        lost(cfg, &id, stream)?;
    }
    let skip_through = newest.as_ref().map_or(Lsn::INVALID, |w| w.commit_lsn);
    match &newest {
        Some(found) => tracing::info!(
            transactional_id = %id,
            watermark_topic = %cfg.watermark_topic,
            watermark_commit_lsn = %found.commit_lsn,
            watermark_end_lsn = %found.end_lsn,
            slot_confirmed = %stream.slot_confirmed,
            "exactly-once: resuming after the newest committed watermark (transactions committed at or below it are in Kafka and are skipped)"
        ),
        None => tracing::info!(
            transactional_id = %id,
            watermark_topic = %cfg.watermark_topic,
            "exactly-once: no watermark yet for this relay; streaming from the slot"
        ),
    }
    let stamp = Watermark {
        system_id: stream.system_id.to_owned(),
        timeline: stream.timeline,
        database: stream.database.to_owned(),
        slot: stream.slot.to_owned(),
        commit_lsn: skip_through,
        end_lsn: newest.as_ref().map_or(Lsn::INVALID, |w| w.end_lsn),
    };
    Ok(Start {
        state: ExactlyOnce::new(cfg, txns, stamp, stream.slot_confirmed, metrics),
        skip_through,
    })
}

/// No watermark was found: a first start, unless the state file says this relay
/// committed some to the same topic and id — then the topic lost them, and the relay
/// stops unless `--accept-watermark-reset` was given.
fn lost(
    cfg: &ExactlyOnceConfig,
    id: &str,
    stream: &Stream<'_>,
) -> Result<(), super::PipelineError> {
    let Some(recorded) = &stream.recorded else {
        return Ok(());
    };
    if recorded.topic != cfg.watermark_topic || recorded.transactional_id != id {
        tracing::warn!(
            recorded_topic = %recorded.topic,
            recorded_transactional_id = %recorded.transactional_id,
            watermark_topic = %cfg.watermark_topic,
            transactional_id = %id,
            slot_confirmed = %stream.slot_confirmed,
            "exactly-once: the watermark topic or transactional id changed since this relay last committed; resuming from the slot"
        );
        return Ok(());
    }
    if cfg.accept_reset {
        tracing::warn!(
            watermark_topic = %cfg.watermark_topic,
            transactional_id = %id,
            slot_confirmed = %stream.slot_confirmed,
            "exactly-once: --accept-watermark-reset: the topic lost this relay's watermark; resuming from the slot (transactions Kafka committed past it are sent again)"
        );
        return Ok(());
    }
    Err(crate::kafka::watermark::WatermarkError::Lost {
        topic: cfg.watermark_topic.clone(),
        transactional_id: id.to_owned(),
        slot_confirmed: stream.slot_confirmed,
    }
    .into())
}

/// Run a blocking call on the blocking pool.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TxnError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|join| TxnError::Failed {
            code: rdkafka::error::RDKafkaErrorCode::Fail,
            reason: format!("a blocking call failed: {join}"),
            fatal: false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_is_due_by_age_records_bytes_or_drain() {
        let (interval, young) = (Duration::from_millis(100), Duration::from_millis(10));
        let small = Sent {
            records: 10,
            bytes: 1_000,
        };
        assert!(!due_at(young, interval, small, false));
        assert!(due_at(young, interval, small, true));
        assert!(due_at(interval, interval, small, false));
        let many = Sent {
            records: MAX_RECORDS,
            ..small
        };
        assert!(due_at(young, interval, many, false));
        let large = Sent {
            bytes: MAX_BYTES,
            ..small
        };
        assert!(due_at(young, interval, large, false));
        let below = Sent {
            records: MAX_RECORDS - 1,
            bytes: MAX_BYTES - 1,
        };
        assert!(!due_at(young, interval, below, false));
    }

    #[test]
    fn describe_names_the_mode_and_its_settings() {
        assert!(describe(None, None).starts_with("at-least-once"));
        let cfg = ExactlyOnceConfig {
            watermark_topic: "pgoutbox.offsets".into(),
            transactional_id: None,
            interval: Duration::from_millis(100),
            accept_reset: false,
        };
        let text = describe(Some(&cfg), Some("pgoutbox-1-app-s"));
        assert!(text.starts_with("exactly-once"), "{text}");
        assert!(text.contains("transactional.id pgoutbox-1-app-s"), "{text}");
        assert!(text.contains("watermark topic pgoutbox.offsets"), "{text}");
        let given = ExactlyOnceConfig {
            transactional_id: Some("mine".into()),
            ..cfg
        };
        assert!(describe(Some(&given), Some("derived")).contains("transactional.id mine"));
    }
}
