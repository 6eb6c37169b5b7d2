//! `pgoutbox run`: the service.
//!
//! Owns startup (publication and slot created when missing — unless the state file
//! says this relay has relayed through them before), the one Kafka producer that
//! outlives replication sessions, and the reconnect loop:
//!
//! ```text
//!  ensure publication + slot ─▶ loop { connect (walking every host afresh: after a
//!  failover the new primary) ─ slot-safety checks ─ START_REPLICATION (at the state
//!  file's LSN when it describes this history and the slot fell behind it, else at
//!  the slot's confirmed_flush_lsn) ─ slot-safety check of that LSN ─ Session::run }
//!  ── transient error ─▶ back off, retry
//!  └─ definite error (slot safety included) ─▶ exit non-zero
//! ```
//!
//! Invariants: a new session resumes at the last position this relay confirmed —
//! the state file's, when the server is the same system on the same timeline
//! ([`crate::safety::resume`]), else the slot's — so only what was in flight is
//! produced again (duplicates possible, loss never); a slot that moved behind the
//! relay's back stops it before anything is relayed ([`crate::safety`]); "slot is
//! active" (another relay holds it) is a transient condition — this process stands
//! by and takes over when the slot frees up; a producer that librdkafka declared
//! fatally broken (e.g. the idempotent producer's OUT_OF_ORDER_SEQUENCE_NUMBER) is
//! replaced by a new one before the next session, unless its cause would break a new
//! one too, and so is a producer whose oldest record got no ack for
//! `--stall-timeout` (the session ends as stalled); SIGTERM/SIGINT drains, confirms
//! and exits cleanly.
//!
//! With `--source poll` ([`crate::poll`]) the same producer, mapping and reconnect
//! loop relay by polling the outbox table instead: no publication, no slot, no
//! state file; the table's advisory lock decides which relay is active. Both kinds
//! are [`Source`]s of the one reconnect loop, [`supervisor::supervise`]
//! (back-off, standby, role, producer generation, session metrics).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::heartbeat::{Heartbeat, HeartbeatConfig};
use crate::kafka::config::{producer_config, KafkaOptions, UnsafeOption};
use crate::kafka::producer::{CreateError, KafkaSink, TxnError};
use crate::kafka::watermark;
use crate::metrics::Metrics;
use crate::pg::client::connection::PgError;
use crate::pg::client::conninfo::{ConnInfo, TargetSessionAttrs};
use crate::pg::lsn::Lsn;
use crate::pg::source::catalog::{self, CatalogError};
use crate::pg::source::failover;
use crate::pg::source::publication_state;
use crate::pg::source::replication::{ReplicationClient, SystemIdentity};
use crate::pg::source::SourceConfig;
use crate::pipeline::exactly_once;
use crate::pipeline::{PipelineConfig, PipelineError, Session, SessionStats};
use crate::safety::publication::PublicationWatch;
use crate::safety::{Resume, SafetyConfig, SafetyError, SlotGuard, SlotReason};
use crate::task::Tasks;

use self::supervisor::{retry, supervise, Lines, Source};

pub mod supervisor;

/// How long one producer probe waits for a broker's answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// The pause between two producer probes.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// How long `run` waits for its helper tasks once they were told to stop: the probe
/// may be inside one metadata request, an HTTP connection inside its own timeout.
const HELPER_JOIN_TIMEOUT: Duration = Duration::from_secs(15);

/// SQLSTATE of "replication slot … is active for PID …".
const OBJECT_IN_USE: &str = "55006";

/// Settings of `pgoutbox run`.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Where the outbox lives.
    pub source: SourceConfig,
    /// Replication slot.
    pub slot: String,
    /// Create a missing slot as a failover slot (PostgreSQL 17+; no-op before).
    pub slot_failover: bool,
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// Extra librdkafka settings (secret values redacted in `Debug`).
    pub kafka_options: KafkaOptions,
    /// `--kafka-rounds`: hold small records while a round is in flight.
    pub kafka_rounds: bool,
    /// `--wal-linger`: how long reads of the replication stream are gathered.
    pub wal_linger: Duration,
    /// The relay loop's settings.
    pub pipeline: PipelineConfig,
    /// Longest wait between reconnect attempts.
    pub max_backoff: Duration,
    /// Where to serve /metrics, /livez, /readyz (`None`: off).
    pub http_addr: Option<std::net::SocketAddr>,
    /// State file and `--accept-slot-reset`.
    pub safety: SafetyConfig,
    /// `--heartbeat-interval`, `--heartbeat-max-age`.
    pub heartbeat: HeartbeatConfig,
    /// `--source poll`: poll the table instead of streaming a slot.
    pub poll: Option<crate::poll::PollConfig>,
    /// `--delivery exactly-once` (`None`: at-least-once).
    pub exactly_once: Option<crate::pipeline::exactly_once::ExactlyOnceConfig>,
}

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A Kafka option is refused.
    #[error(transparent)]
    Option(#[from] UnsafeOption),
    /// The producer could not be created.
    #[error(transparent)]
    Producer(#[from] CreateError),
    /// Publication/slot setup or lookup failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The session failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Http(#[from] crate::http::BindError),
    /// The producer failed fatally for a reason a new producer would meet as well.
    #[error("the kafka producer stopped on a fatal error: {reason} ({code:?}); a new producer would fail the same way; fix: correct the cause (e.g. authorization: grant the relay's principal WRITE and DESCRIBE on its topics, `kafka-acls.sh --bootstrap-server BROKER --add --allow-principal User:RELAY --operation Write --operation Describe --topic TOPIC`; since Kafka 3.0 WRITE suffices for an idempotent producer, older brokers also need IDEMPOTENT_WRITE on the cluster) and restart")]
    ProducerFatal {
        code: rdkafka::error::RDKafkaErrorCode,
        reason: String,
    },
    /// The broker refused the relay's principal a right (an ACL is missing).
    #[error(transparent)]
    NotAuthorized(Box<crate::kafka::authz::NotAuthorized>),
    /// The slot moved behind the relay's back, or the state file is unusable.
    #[error(transparent)]
    Safety(#[from] SafetyError),
    /// Poll mode stopped.
    #[error(transparent)]
    Poll(#[from] crate::poll::PollError),
}

impl RunError {
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            RunError::Catalog(e) => e.is_transient(),
            RunError::Pipeline(e) => e.is_transient(),
            RunError::Poll(e) => e.is_transient(),
            _ => false,
        }
    }

    fn is_slot_in_use(&self) -> bool {
        matches!(self, RunError::Pipeline(PipelineError::Pg(e)) if e.code() == Some(OBJECT_IN_USE))
    }
}

/// Run the relay until `shutdown` fires or a definite error occurs. Either way, the
/// helper tasks it started (HTTP endpoint, producer probe) have ended when it returns.
pub async fn run(cfg: &RunConfig, shutdown: CancellationToken) -> Result<(), RunError> {
    run_relay(cfg, shutdown)
        .await
        .map_err(|err| not_authorized(cfg, err))
}

/// A refusal of the relay's rights, however it surfaced (a record's delivery
/// report, or the producer's fatal error at InitProducerId), said with the
/// principal and the ACL that fixes it.
fn not_authorized(cfg: &RunConfig, err: RunError) -> RunError {
    use crate::kafka::authz::{is_authorization, NotAuthorized};
    let (code, reason, topic) = match &err {
        RunError::Pipeline(PipelineError::Delivery(d))
        | RunError::Poll(crate::poll::PollError::Pipeline(PipelineError::Delivery(d)))
            if is_authorization(d.code) =>
        {
            (d.code, d.reason.clone(), Some(d.topic.clone()))
        }
        RunError::ProducerFatal { code, reason } if is_authorization(*code) => {
            (*code, reason.clone(), None)
        }
        RunError::Pipeline(PipelineError::Transaction(TxnError::NotAuthorized {
            id,
            code,
            reason,
        })) => {
            let refusal = NotAuthorized::transactional(
                &cfg.kafka_options,
                &cfg.brokers,
                *code,
                reason.clone(),
                id,
            );
            return RunError::NotAuthorized(Box::new(refusal));
        }
        _ => return err,
    };
    let refusal = NotAuthorized::new(
        &cfg.kafka_options,
        &cfg.brokers,
        code,
        reason,
        topic.as_deref(),
        cfg.pipeline
            .tables
            .first()
            .map_or("", |t| t.template.prefix()),
    );
    RunError::NotAuthorized(Box::new(refusal))
}

async fn run_relay(cfg: &RunConfig, shutdown: CancellationToken) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::default());
    metrics.set_in_flight_limits(
        cfg.pipeline.max_in_flight_records,
        cfg.pipeline.max_in_flight_bytes,
    );
    metrics.set_in_flight_window(
        crate::pipeline::window::Window::new().records(cfg.pipeline.max_in_flight_records),
    );
    metrics.set_exactly_once(cfg.exactly_once.is_some());
    let mut tasks = Tasks::new();
    // Stops the helper tasks on shutdown and also when the relay ends on an error.
    let helpers = shutdown.child_token();
    let beat = Heartbeat::new(cfg.heartbeat.clone(), &cfg.slot, metrics.clone());
    let result = relay(cfg, &shutdown, &metrics, &mut tasks, &helpers, &beat).await;
    helpers.cancel();
    tasks.join(HELPER_JOIN_TIMEOUT).await;
    result
}

/// The relay proper: set-up (PostgreSQL's prerequisites before the producer, so a
/// `wal_level` error is not buried under broker errors), then sessions under the
/// [`supervise`] loop until shutdown or a definite error.
async fn relay(
    cfg: &RunConfig,
    shutdown: &CancellationToken,
    metrics: &Arc<Metrics>,
    tasks: &mut Tasks,
    helpers: &CancellationToken,
    beat: &Heartbeat,
) -> Result<(), RunError> {
    warn_if_standby_possible(&cfg.source.conninfo);
    if let Some(addr) = cfg.http_addr {
        crate::http::serve(addr, metrics.clone(), helpers.clone(), tasks).await?;
    }
    let guard = match &cfg.poll {
        Some(_) => None,
        None => {
            let guard = open_guard(cfg)?;
            let create = guard.may_create()?;
            let watched = guard.watches_publication()?;
            retry(cfg.max_backoff, shutdown, || {
                ensure_objects(cfg, create, watched)
            })
            .await?;
            Some(guard)
        }
    };
    let mut sink = KafkaSink::new(
        &producer_config(&cfg.brokers, &cfg.kafka_options)?,
        metrics.clone(),
    )?;
    tasks.spawn(
        "producer-probe",
        probe_producer(&sink, metrics.clone(), helpers.clone()),
    );
    match (guard, &cfg.poll) {
        (Some(guard), _) => {
            // A steady stream of small transactions goes out in rounds (see ROUND_AT);
            // not in Kafka transactions, whose commit hands over everything at once.
            sink.hold_rounds(cfg.kafka_rounds && cfg.exactly_once.is_none());
            beat.spawn(tasks, helpers.clone());
            let mut source = Logical {
                cfg,
                shutdown,
                metrics,
                guard,
                beat,
            };
            supervise(&mut source, &mut sink, metrics, cfg.max_backoff, shutdown).await
        }
        (None, Some(poll)) => {
            let mut source = Polling {
                cfg,
                poll,
                shutdown,
                metrics,
            };
            supervise(&mut source, &mut sink, metrics, cfg.max_backoff, shutdown).await
        }
        (None, None) => unreachable!("a guard is opened unless polling"),
    }
}

/// Logical replication from the slot: one session streams it from its last
/// confirmed position.
struct Logical<'a> {
    cfg: &'a RunConfig,
    shutdown: &'a CancellationToken,
    metrics: &'a Arc<Metrics>,
    guard: SlotGuard,
    beat: &'a Heartbeat,
}

impl Source for Logical<'_> {
    async fn session(&mut self, sink: &mut KafkaSink, generation: u16) -> Result<(), RunError> {
        let stats = session(
            self.cfg,
            sink,
            generation,
            self.shutdown,
            self.metrics,
            &mut self.guard,
            self.beat,
        )
        .await?;
        tracing::info!(
            produced = stats.produced,
            acked = stats.acked,
            confirmed = %stats.confirmed,
            drain_timed_out = stats.drain_timed_out,
            latency_samples = stats.latency.count(),
            latency_p50_us = stats.latency.quantile_micros(0.5),
            latency_p99_us = stats.latency.quantile_micros(0.99),
            in_kafka_p50_us = stats.in_kafka.quantile_micros(0.5),
            in_kafka_p99_us = stats.in_kafka.quantile_micros(0.99),
            "stopped"
        );
        Ok(())
    }

    fn held_elsewhere(&self, err: &RunError) -> bool {
        err.is_slot_in_use()
    }

    fn standing_by(&mut self) {
        self.guard.note_standby();
    }

    fn lines(&self) -> Lines {
        Lines {
            standby: "slot is held by another process; standing by to take over",
            interrupted: "replication session interrupted; resuming from the slot",
        }
    }
}

/// `--source poll`: one session polls the table while it holds the table's lock;
/// another relay holding that lock makes this one stand by.
struct Polling<'a> {
    cfg: &'a RunConfig,
    poll: &'a crate::poll::PollConfig,
    shutdown: &'a CancellationToken,
    metrics: &'a Arc<Metrics>,
}

impl Source for Polling<'_> {
    async fn session(&mut self, sink: &mut KafkaSink, generation: u16) -> Result<(), RunError> {
        crate::poll::session(
            &self.cfg.source.conninfo,
            &self.cfg.pipeline,
            self.poll,
            sink,
            generation,
            self.shutdown,
            self.metrics,
        )
        .await
        .map_err(RunError::from)
    }

    fn held_elsewhere(&self, err: &RunError) -> bool {
        matches!(err, RunError::Poll(e) if e.is_standby())
    }

    fn lines(&self) -> Lines {
        Lines {
            standby: "standing by to take over",
            interrupted:
                "poll session interrupted; the open batch was rolled back and is claimed again",
        }
    }
}

/// Several hosts and a `target_session_attrs` that admits a standby: after a
/// failover (or with a replica listed first) the relay may land on a server where it
/// cannot stream its slot.
fn warn_if_standby_possible(conninfo: &ConnInfo) {
    let attrs = conninfo.target_session_attrs;
    let safe = matches!(
        attrs,
        TargetSessionAttrs::ReadWrite | TargetSessionAttrs::Primary
    );
    if conninfo.hosts.len() > 1 && !safe {
        tracing::warn!(
            hosts = conninfo.hosts.len(),
            target_session_attrs = %attrs,
            "several hosts with target_session_attrs={attrs}: the relay may connect to a standby, where it cannot stream its slot; add target_session_attrs=read-write (or primary) to --database-url"
        );
    }
}

fn open_guard(cfg: &RunConfig) -> Result<SlotGuard, SafetyError> {
    let (table, timestamp) = cfg.pipeline.tables.first().map_or_else(
        || ("outbox".to_owned(), "created_at".to_owned()),
        |t| (t.table.quoted(), t.mapping.timestamp.clone()),
    );
    SlotGuard::open(
        &cfg.safety,
        &cfg.source.conninfo.dbname,
        &cfg.slot,
        &cfg.source.publication,
        &table,
        &timestamp,
    )
}

/// Create the publication and the slot when missing — only when `create` (no
/// history with them, or `--accept-slot-reset`); otherwise an existing publication
/// is still checked (unless `watched`: the state file keeps a baseline of it, which
/// the session's publication check compares), and what is missing is reported by
/// the slot-safety checks.
async fn ensure_objects(cfg: &RunConfig, create: bool, watched: bool) -> Result<(), RunError> {
    let client = catalog::connect(&cfg.source.conninfo).await?;
    catalog::require_logical_wal(&client).await?;
    if cfg.source.messages_only {
        catalog::require_messages(&client).await?;
    }
    // With a recorded baseline the session's publication check judges a table
    // missing from the publication (naming the change and the window) instead.
    if create || (!watched && catalog::publication_exists(&client, &cfg.source.publication).await?)
    {
        catalog::ensure_publication(&client, &cfg.source.publication, &cfg.source.tables).await?;
    }
    if create {
        catalog::ensure_slot(&client, &cfg.slot, cfg.slot_failover).await?;
    }
    let info = catalog::slot_info(&client, &cfg.slot).await?;
    if cfg.slot_failover && info.is_some_and(|i| i.failover == Some(false)) {
        tracing::warn!(
            slot = %cfg.slot,
            fix = %failover::enable_fix(&cfg.slot, &cfg.source.conninfo.redacted()),
            "the slot is not a failover slot: standbys get no copy, so after a failover the relay stops on the promoted server"
        );
    }
    Ok(())
}

/// Every [`PROBE_EVERY`], ask whether a broker answers the producer
/// ([`crate::kafka::probe`]) and record it: `/readyz` reflects a broker outage even
/// when no record is being produced. The probes block, so they run on a thread of
/// their own, which sleeps between them: an idle relay's runtime does not wake for
/// them. Ends at `stop`, after at most one probe's timeout.
fn probe_producer(
    sink: &KafkaSink,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let probe = sink.prober();
    async move {
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("pgoutbox-probe".into())
            .spawn(move || loop {
                metrics.set_producer_connected(probe(PROBE_TIMEOUT));
                // Woken early only by the sender's drop, at `stop`.
                if stop_rx.recv_timeout(PROBE_EVERY)
                    != Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                {
                    break;
                }
            });
        let thread = match thread {
            Ok(thread) => thread,
            Err(err) => {
                tracing::error!(error = %err, "could not start the producer probe thread: /readyz and pgoutbox_producer_connected will not show a broker outage while no record is produced");
                return;
            }
        };
        stop.cancelled().await;
        drop(stop_tx);
        // A probe in progress ends within its timeout; joined off the runtime.
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

async fn session(
    cfg: &RunConfig,
    sink: &mut KafkaSink,
    generation: u16,
    shutdown: &CancellationToken,
    metrics: &Arc<Metrics>,
    guard: &mut SlotGuard,
    beat: &Heartbeat,
) -> Result<SessionStats, RunError> {
    let mut client = ReplicationClient::connect(&cfg.source.conninfo)
        .await
        .map_err(PipelineError::Pg)?;
    // With several hosts, the catalog queries go to the server the stream comes
    // from: the one the replication connection's walk chose.
    let on_stream_host = cfg.source.conninfo.for_host(client.host());
    tracing::info!(host = %client.host(), "connected for replication");
    let catalog_client = catalog::connect(&on_stream_host).await?;
    // Heartbeats go to the server the stream reads from (after a failover: the new one).
    beat.on_stream(&on_stream_host, client.server_version_num());
    let info = catalog::slot_info(&catalog_client, &cfg.slot).await?;
    let identity = client.identify_system().await.map_err(PipelineError::Pg)?;
    let resume = guard
        .before_start(&catalog_client, &identity, info.as_ref())
        .await?;
    // The publication as it is now against the state file's baseline, read before
    // the stream starts (messages-only: no table to lose).
    let baseline = match cfg.source.tables.is_empty() {
        true => None,
        false => {
            let tables = &cfg.source.tables;
            let version = catalog::server_version_num(&catalog_client).await?;
            let observed =
                publication_state::read(&catalog_client, &cfg.source.publication, tables, version)
                    .await?;
            let (baseline, repair_now) = guard.publication_start(&identity, &observed, tables)?;
            Some((version, baseline, repair_now))
        }
    };
    let info = info.ok_or_else(|| CatalogError::MissingSlot {
        slot: cfg.slot.clone(),
    })?;
    catalog::check_slot_kind(&info)?;
    catalog::check_slot_database(&catalog_client, &info).await?;
    // Exactly-once judges its watermark against the timeline history, which only a
    // walsender answers before it streams.
    let history = match cfg.exactly_once {
        Some(_) => crate::pg::source::timeline::read(&mut client, identity.timeline)
            .await
            .map_err(|e| explain(guard, e))?,
        None => Vec::new(),
    };
    let stream = client
        .start_pgoutput(
            &cfg.slot,
            resume.start_lsn(),
            std::slice::from_ref(&cfg.source.publication),
            cfg.wal_linger,
        )
        .await
        .map_err(|e| explain(guard, e))?;
    // The slot is ours now: nobody else can move it, so its position is final.
    let slot_lsn = catalog::slot_info(&catalog_client, &cfg.slot)
        .await?
        .and_then(|i| i.confirmed_flush_lsn)
        .unwrap_or(Lsn::INVALID);
    let checkpoint = guard
        .after_start(&identity, slot_lsn, &resume)?
        .pinning(&cfg.pipeline.pinned, guard.take_accept_type_change());
    let pipeline = with_not_null(&cfg.pipeline, &catalog_client).await?;
    let watch = match baseline {
        Some((version, baseline, repair_now)) => {
            checkpoint
                .record_publication(baseline.clone())
                .await
                .map_err(SafetyError::from)?;
            let repair =
                cfg.safety.publication_repair && version >= crate::safety::repair::MIN_VERSION_NUM;
            Some(
                PublicationWatch::new(
                    catalog_client,
                    version,
                    &cfg.source.publication,
                    &cfg.source.tables,
                    baseline,
                )
                .repairing(repair, repair_now, checkpoint.clone()),
            )
        }
        None => None,
    };
    let exactly_once = match &cfg.exactly_once {
        Some(eos) => {
            let database = identity
                .dbname
                .clone()
                .unwrap_or_else(|| cfg.source.conninfo.dbname.clone());
            let stream = exactly_once::Stream {
                system_id: &identity.system_id,
                timeline: identity.timeline,
                history: &history,
                wal_end: identity.xlogpos,
                database: &database,
                slot: &cfg.slot,
                slot_confirmed: slot_lsn,
                recorded: checkpoint.watermark(),
            };
            let reader = watermark::reader_config(&cfg.brokers, &cfg.kafka_options);
            Some(exactly_once::start(eos, sink, reader, &stream, metrics.clone()).await?)
        }
        None => None,
    };
    log_start(cfg, &identity, &resume, slot_lsn, metrics);
    let session = Session::new(
        &pipeline,
        sink,
        stream,
        generation,
        metrics.clone(),
        checkpoint,
    )
    .resuming_from(resume.start_lsn().max(slot_lsn))
    .watching(watch);
    let session = match exactly_once {
        Some(start) => session.exactly_once(start.state, start.skip_through),
        None => session,
    };
    session.run(shutdown.clone()).await.map_err(|e| match e {
        PipelineError::Pg(pg) => explain(guard, pg),
        other => other.into(),
    })
}

/// The session's one start line: where it streams from and why; a followed
/// promotion also at WARN, counted.
fn log_start(
    cfg: &RunConfig,
    identity: &SystemIdentity,
    resume: &Resume,
    slot_lsn: Lsn,
    metrics: &Metrics,
) {
    if let Resume::Slot(SlotReason::Promoted { from, to }) = resume {
        metrics.promotion_followed();
        tracing::warn!(
            slot = %cfg.slot,
            from_timeline = from,
            to_timeline = to,
            slot_lsn = %slot_lsn,
            "the server was promoted from timeline {from} to {to} (same system {}); following it from the slot's synchronized position: events confirmed on the old primary after it are sent again",
            identity.system_id
        );
    }
    let tables: Vec<String> = cfg.source.tables.iter().map(ToString::to_string).collect();
    tracing::info!(
        slot = %cfg.slot,
        start_lsn = %resume.start_lsn().max(slot_lsn),
        resume_from = resume.source(),
        reason = %resume,
        timeline = identity.timeline,
        brokers = %cfg.brokers,
        tables = %tables.join(","),
        message_prefixes = %cfg.source.message_prefixes.join(","),
        publication = %cfg.source.publication,
        "relaying outbox to kafka{}",
        if cfg.source.messages_only { " (messages only: no outbox table)" } else { "" }
    );
}

/// The pipeline settings with each table's `NOT NULL` columns, when a converter
/// writes Connect schemas (whose `optional` flag says it). Read once per session: a
/// column made `NOT NULL` later shows in the schemas after the next reconnect.
async fn with_not_null(
    pipeline: &PipelineConfig,
    client: &tokio_postgres::Client,
) -> Result<PipelineConfig, RunError> {
    let mut pipeline = pipeline.clone();
    if pipeline.format.writes_schemas() {
        for spec in &mut pipeline.tables {
            spec.mapping.not_null = catalog::not_null_columns(client, &spec.table).await?;
        }
    }
    Ok(pipeline)
}

/// A server error as a slot-safety finding when it is one (a lost slot, a missing
/// publication), else as the replication error it is.
fn explain(guard: &SlotGuard, err: PgError) -> RunError {
    match guard.explain(&err) {
        Some(finding) => finding.into(),
        None => PipelineError::Pg(err).into(),
    }
}
