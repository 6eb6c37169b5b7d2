//! `pgoutbox replay`: send events still in an outbox table to Kafka again.
//!
//! ```text
//!  Selection ─▶ resolve (server clock, UTC) ─▶ per table: columns (the publication's
//!  column list, as pgoutput sends them) ─▶ Relation ─▶ OutboxTables
//!  BEGIN READ ONLY REPEATABLE READ; DECLARE cursor … ORDER BY timestamp, id
//!  FETCH n (text values) ─▶ TupleData ─▶ mapping.event ─▶ pipeline::record::build ─▶ Output
//!                                        poison row ─▶ pipeline::record::poison (--on-invalid)
//!  Output: --dry-run JSON lines, or Deliverer (a unit per row) ─▶ KafkaSink, every report ─▶ Summary
//! ```
//!
//! Files: `select.rs` ([`Selection`], what the flags select), `table.rs` (catalog,
//! cursor, rows as tuples), `read.rs` (table by table, row by row), `deliver.rs`
//! (dry run, or the relay's deliverer with one unit per row), `print.rs` (JSON
//! lines, [`Summary`]).
//!
//! Invariants: a replayed row takes the relay's own path — the [`Relation`]
//! pgoutput would send (the columns the publication publishes) resolves the
//! mapping, [`crate::pipeline::record`] builds the record, and the relay's
//! [`Deliverer`](crate::pipeline::deliver::Deliverer) applies `--on-invalid` and
//! hands it over — so a record differs from what `run` sent
//! only by the `pgoutbox.replay` header (value: the replay's start time, RFC 3339
//! UTC, the same on each of its records) and, where the record time falls back to
//! the commit time (`--record-timestamp commit`, or a NULL timestamp column), by
//! that time: a row keeps no commit time, so the replay's start time stands in;
//! one snapshot serves the whole replay of a table (rows inserted meanwhile are not
//! picked up; the snapshot holds back vacuum until the table is done); memory is
//! bounded by `--batch-size` and the in-flight cap, not by the rows selected; a
//! replay never uses or moves a replication slot; nothing selected is passed over
//! without being counted (sent, dead-lettered, skipped, failed) and a requested id
//! that is not there is named.
//!
//! [`Relation`]: crate::pg::source::pgoutput::Relation

mod deliver;
pub mod print;
mod read;
pub mod select;
mod table;

use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::kafka::config::{producer_config, KafkaOptions, UnsafeOption};
use crate::kafka::producer::{CreateError, KafkaSink};
use crate::metrics::Metrics;
use crate::outbox::invalid::PoisonRow;
use crate::pg::names::TableName;
use crate::pg::source::catalog::{self, CatalogError};
use crate::pg::source::SourceConfig;
use crate::pg::timestamp::{from_unix_micros, now_pg_micros, to_rfc3339};
use crate::pipeline::PipelineConfig;

pub use deliver::{MAX_IN_FLIGHT, REPLAY_HEADER};
pub use print::Summary;
pub use select::{RawSelection, Selection, SelectionError, TimeBound};

use deliver::{Ctx, Kafka, Output};
use read::Reader;
use table::Bounds;

/// Settings of a replay.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// The database and its outbox tables.
    pub source: SourceConfig,
    /// The record path, as `run` has it (mapping, templates, format, poison policy).
    pub pipeline: PipelineConfig,
    /// Which rows.
    pub selection: Selection,
    /// Where to: the brokers and producer settings, `None` for `--dry-run`.
    pub kafka: Option<(String, KafkaOptions)>,
    /// Rows per `FETCH`.
    pub batch_size: usize,
}

/// Why a replay failed or is incomplete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// Could not connect or query the catalog.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// A query failed.
    #[error("{context}: {message}")]
    Query { context: String, message: String },
    /// The table does not exist.
    #[error("outbox table {0} does not exist; replay re-sends rows still in an outbox table, so events sent as logical decoding messages (no table) cannot be replayed: their WAL is recycled once the slot confirmed it; fix: pass the outbox table with --table schema.table")]
    NoTable(TableName),
    /// A column replay needs is missing.
    #[error("outbox table {table} has no column {column:?} (mapped as {role}); fix: map it to an existing column")]
    MissingColumn {
        table: TableName,
        column: String,
        role: &'static str,
    },
    /// A time range on a table without a usable timestamp column.
    #[error("--from/--to compare the timestamp column {column:?} of {table}, which is {found}; fix: name a timestamptz, timestamp or date column with --timestamp-column (or the table's timestamp_column), or select with --id / --all")]
    TimeColumn {
        table: TableName,
        column: String,
        found: String,
    },
    /// PostgreSQL could not read a `--from` / `--to`.
    #[error("invalid --{flag} {value:?}: {message}; fix: use RFC 3339 (2026-12-01T10:00:00Z) or an age (90m, 2h, 3days)")]
    Time {
        flag: &'static str,
        value: String,
        message: String,
    },
    /// An `--id` the id column's type cannot hold.
    #[error("invalid --id for the id column {column:?} of {table}: {message}")]
    Id {
        table: TableName,
        column: String,
        message: String,
    },
    /// `--on-invalid fail` met a poison row. Unlike `run`, which reads the row as it
    /// was inserted (from the WAL), replay reads it as the table holds it now, so
    /// correcting the row is a fix here.
    #[error(
        "poison row ({}) in {}: event {}: {}; the replay stopped before it (the records before it were sent); fix: replay reads the row as the table holds it now, so correct the row and replay it (--id {}), or replay with --on-invalid {}=dlq (to the dead-letter topic) or {}=skip",
        .0.cause, .0.table, .0.event_id, .0.reason, .0.event_id, .0.cause, .0.cause
    )]
    Poison(Box<PoisonRow>),
    /// A `--kafka-option` that would weaken delivery.
    #[error(transparent)]
    UnsafeOption(#[from] UnsafeOption),
    /// The producer could not be created.
    #[error(transparent)]
    Producer(#[from] CreateError),
    /// The delivery accounting failed (a bug: a failed record is listed, never
    /// returned).
    #[error(transparent)]
    Deliver(Box<crate::pipeline::PipelineError>),
    /// The producer's report channel closed.
    #[error("the Kafka producer stopped reporting deliveries")]
    ProducerGone,
    /// Writing the dry run's output or the summary failed.
    #[error("writing the replay's output")]
    Output(#[source] std::io::Error),
    /// A signal ended a wait for the producer while rows were read (internal: the
    /// replay then drains and reports what it did).
    #[error("interrupted by a signal")]
    Interrupted,
    /// Some records were not delivered, some ids not found, or a signal stopped it.
    #[error("{0}")]
    Incomplete(String),
}

/// Replay what `cfg` selects: records to Kafka (or, with `--dry-run`, as JSON lines
/// to `records`), then the summary to `report`. Returns the summary when every
/// selected row was handled and every record acked.
pub async fn run(
    cfg: &ReplayConfig,
    records: &mut dyn Write,
    report: &mut dyn Write,
    shutdown: CancellationToken,
) -> Result<Summary, ReplayError> {
    let started = now_pg_micros();
    let metrics = Arc::new(Metrics::default());
    let client = catalog::connect(&cfg.source.conninfo).await?;
    // pgoutput's text output: ISO dates, as the relay's replication connection asks.
    simple(&client, "SET DateStyle = 'ISO'").await?;
    let pipeline = with_not_null(&cfg.pipeline, &client).await?;
    let bounds = resolve(&client, &cfg.selection).await?;
    let stamp = to_rfc3339(started);
    log_start(cfg, &bounds, &stamp);
    let stamp = Bytes::from(stamp);
    let mut output = output(
        cfg,
        &pipeline,
        records,
        &metrics,
        (&stamp, started),
        &shutdown,
    )?;
    let mut ctx = Ctx {
        cfg: &pipeline,
        metrics: &metrics,
        stamp,
        summary: Summary {
            dry_run: cfg.kafka.is_none(),
            ..Summary::default()
        },
    };
    let mut reader = Reader {
        client: &client,
        bounds: &bounds,
        batch: cfg.batch_size,
        started,
        found: HashSet::new(),
        interrupted: false,
    };
    let read = match reader.all(&mut ctx, &mut output, &shutdown).await {
        Err(ReplayError::Interrupted) => {
            reader.interrupted = true;
            Ok(())
        }
        other => other,
    };
    ctx.summary.interrupted = reader.interrupted;
    let drained = output.finish(&mut ctx, &shutdown).await;
    // An interrupted replay did not look at every row: it names no id as missing.
    if !reader.interrupted {
        ctx.summary.not_found = bounds
            .ids
            .iter()
            .filter(|id| !reader.found.contains(*id))
            .cloned()
            .collect();
    }
    let summary = ctx.summary;
    // The summary even when the replay stopped: what was sent is sent.
    let written = report.write_all(summary.render().as_bytes());
    read?;
    drained?;
    written.map_err(ReplayError::Output)?;
    verdict(summary)
}

/// Where the records go: `records` for a dry run, else a producer as `run`'s.
fn output<'o>(
    cfg: &ReplayConfig,
    pipeline: &'o PipelineConfig,
    records: &'o mut dyn Write,
    metrics: &Arc<Metrics>,
    (stamp, started): (&Bytes, i64),
    shutdown: &CancellationToken,
) -> Result<Output<'o>, ReplayError> {
    Ok(match &cfg.kafka {
        None => Output::DryRun(records),
        Some((brokers, options)) => {
            let config = replay_producer_config(brokers, options)?;
            let sink = KafkaSink::new(&config, metrics.clone())?;
            let marks = (stamp.clone(), started);
            let kafka = Kafka::new(sink, pipeline, metrics.clone(), marks, shutdown.clone());
            Output::Kafka(Box::new(kafka))
        }
    })
}

/// Whether the replay did all it was asked.
fn verdict(summary: Summary) -> Result<Summary, ReplayError> {
    let mut problems = Vec::new();
    if let Some(first) = summary.failed.first() {
        problems.push(format!(
            "{} record(s) failed, first: event {} to topic {}: {}",
            summary.failed.len(),
            first.event_id,
            first.topic,
            first.reason
        ));
    }
    if !summary.not_found.is_empty() {
        problems.push(format!(
            "no selected row has --id {}",
            summary.not_found.join(", ")
        ));
    }
    if summary.interrupted {
        problems.push("interrupted by a signal before every selected row was read".into());
    }
    match problems.is_empty() {
        true => Ok(summary),
        false => Err(ReplayError::Incomplete(problems.join("; "))),
    }
}

/// The producer `run` uses, except that a record gets a delivery deadline
/// (`message.timeout.ms`, 5 minutes unless set with --kafka-option): the relay
/// waits forever because its slot holds the rows, a replay reports the record as
/// failed instead of hanging.
fn replay_producer_config(
    brokers: &str,
    options: &KafkaOptions,
) -> Result<rdkafka::ClientConfig, ReplayError> {
    let mut config = producer_config(brokers, options)?;
    if !options
        .redacted()
        .iter()
        .any(|(k, _)| k == "message.timeout.ms")
    {
        config.set("message.timeout.ms", "300000");
    }
    Ok(config)
}

fn log_start(cfg: &ReplayConfig, bounds: &Bounds, stamp: &str) {
    let tables: Vec<String> = cfg.source.tables.iter().map(ToString::to_string).collect();
    let at = |b: Option<i64>| b.map_or_else(|| "-".to_owned(), |u| to_rfc3339(from_unix_micros(u)));
    tracing::info!(
        tables = %tables.join(","),
        from = %at(bounds.from),
        to = %at(bounds.to),
        ids = bounds.ids.len(),
        dry_run = cfg.kafka.is_none(),
        header = %format!("{REPLAY_HEADER}={stamp}"),
        "replaying outbox rows (order: timestamp column, then id; not commit order)"
    );
}

async fn simple(client: &Client, sql: &str) -> Result<(), ReplayError> {
    client
        .batch_execute(sql)
        .await
        .map_err(|e| table::query_failed(format!("running {sql:?}"), &e))
}

/// Each table's `NOT NULL` columns when a converter writes Connect schemas (as `run`).
async fn with_not_null(
    pipeline: &PipelineConfig,
    client: &Client,
) -> Result<PipelineConfig, ReplayError> {
    let mut pipeline = pipeline.clone();
    if pipeline.format.writes_schemas() {
        for spec in &mut pipeline.tables {
            spec.mapping.not_null = catalog::not_null_columns(client, &spec.table).await?;
        }
    }
    Ok(pipeline)
}

/// The time bounds as µs since the Unix epoch, read by the server (in UTC).
async fn resolve(client: &Client, selection: &Selection) -> Result<Bounds, ReplayError> {
    simple(client, "SET TimeZone = 'UTC'").await?;
    let mut out = Bounds {
        ids: selection.ids.clone(),
        ..Bounds::default()
    };
    for (flag, bound) in [("from", &selection.from), ("to", &selection.to)] {
        let Some(bound) = bound else { continue };
        let row = match bound {
            TimeBound::Ago(age) => {
                let micros = i64::try_from(age.as_micros()).unwrap_or(i64::MAX);
                client.query_one("SELECT (extract(epoch FROM now() - $1::int8 * interval '1 microsecond') * 1000000)::int8", &[&micros]).await
            }
            TimeBound::At(text) => {
                client
                    .query_one(
                        "SELECT (extract(epoch FROM $1::text::timestamptz) * 1000000)::int8",
                        &[text],
                    )
                    .await
            }
        };
        let text = match bound {
            TimeBound::Ago(age) => humantime::format_duration(*age).to_string(),
            TimeBound::At(text) => text.clone(),
        };
        let micros: i64 = row
            .map_err(|e| ReplayError::Time {
                flag,
                value: text,
                message: catalog::describe(&e),
            })?
            .get(0);
        match flag {
            "from" => out.from = Some(micros),
            _ => out.to = Some(micros),
        }
    }
    simple(client, "RESET TimeZone").await?;
    Ok(out)
}
