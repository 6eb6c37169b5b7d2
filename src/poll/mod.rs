//! Poll mode (`pgoutbox run --source poll`): relay an outbox table without logical
//! replication, for servers where `wal_level=logical` or the REPLICATION privilege is
//! out of reach.
//!
//! ```text
//!  lock session: pg_try_advisory_lock(table key) ─ LISTEN "pgoutbox.<table>"
//!     │ (lost ⇒ stop claiming)              ▲ NOTIFY (statement-level insert trigger)
//!     ▼                                     │
//!  wake (notify | --poll-interval | drain: last batch was full)
//!     ▼
//!  work session: BEGIN ─ pg_advisory_xact_lock(batch key: waits out a killed
//!                predecessor's open batch) ─ SELECT … WHERE published_at IS NULL ORDER BY <order>
//!                LIMIT n FOR UPDATE SKIP LOCKED ─ rows as pgoutput messages ─▶ Relay
//!                (the logical mode's core: mapping, poison policy, trace, converters)
//!                ─▶ KafkaSink ─ every ack ─▶ UPDATE … SET published_at = now()
//!                (or DELETE) ─ COMMIT
//! ```
//!
//! Files: `sql.rs` the SQL text (setup, claim, mark, backlog); `batch.rs` one batch
//! from claim to commit; this file the service loop: the lock, the wake-ups, the
//! standby, the backlog gauges.
//!
//! Invariants: a row is marked only in the transaction that claimed it and only
//! after Kafka acked its record (or its dead letter, or `--on-invalid skip` skipped
//! it), so a crash, a broker outage or a lost connection leaves the batch unmarked
//! and it is sent again (at-least-once, duplicates at most one batch per failure);
//! only the holder of the table's advisory lock claims (one active relay, so
//! records leave in the ordering column's order), and only once no other batch
//! transaction of the table is open (a killed relay's batch can outlive its lock
//! session: claiming past the rows it holds would publish them after newer ones);
//! the lock session ending stops claiming at once (an open batch is rolled back,
//! not marked).
//!
//! Order, what consumers may see: records leave in the ordering column's order
//! within each batch and batch after batch — not in commit order. A row whose
//! transaction commits after rows with higher ordering values were published is
//! published later, after them (a long transaction's early rows arrive after
//! newer ones). Rows of one transaction keep their insert order when the ordering
//! column is a sequence (the default `seq` identity column).

mod batch;
pub mod sql;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{Client, Notification};
use tokio_util::sync::CancellationToken;

use crate::kafka::producer::KafkaSink;
use crate::metrics::poll::Wake;
use crate::metrics::{Metrics, Role};
use crate::pg::client::conninfo::ConnInfo;
use crate::pg::names::TableName;
use crate::pg::source::catalog::{self, CatalogError};
use crate::pipeline::{PipelineConfig, PipelineError};
pub use sql::Mark;

/// How often the active relay refreshes the backlog gauges.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);

/// Settings of poll mode.
#[derive(Debug, Clone)]
pub struct PollConfig {
    /// Rows claimed per transaction (`--poll-batch-size`).
    pub batch_size: usize,
    /// Longest wait for a NOTIFY before polling anyway (`--poll-interval`).
    pub interval: Duration,
    /// How acked rows are marked (`--poll-mark`).
    pub mark: Mark,
    /// The column rows are claimed in order of (`--poll-order-by`).
    pub order_by: String,
}

/// Why poll mode stopped or paused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PollError {
    /// A catalog query, or a batch's SQL, failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// Producing, acks, poison rows or a stall.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// Poll mode relays one table per process.
    #[error("poll mode relays one outbox table per process, got {0}; fix: run one `pgoutbox run --source poll` per table")]
    OneTable(String),
    /// The table lacks what poll mode needs.
    #[error("outbox table {table} is not set up for poll mode: {missing}; fix: run `pgoutbox setup --source poll --table {table}{order}` (or have a DBA run what `--print-sql` prints)")]
    NotSetUp {
        table: TableName,
        missing: String,
        order: String,
    },
    /// Another relay holds the table's advisory lock.
    #[error("another relay holds the poll lock of {table} (advisory lock {key})")]
    LockHeld { table: TableName, key: i64 },
    /// Shutdown while records of the open batch were still unacked.
    #[error("records of the open poll batch still unacked after --drain-timeout {0:?}; the batch is rolled back (not marked) and is sent again after restart")]
    DrainTimedOut(Duration),
    /// The session holding the lock ended: claiming stops.
    #[error("the session holding the poll lock of {0} ended; claiming stopped")]
    LockLost(TableName),
}

impl PollError {
    /// Worth retrying (after a back-off): the relay stands by or reconnects.
    pub fn is_transient(&self) -> bool {
        match self {
            PollError::Catalog(e) => e.is_transient(),
            PollError::Pipeline(e) => e.is_transient(),
            PollError::LockHeld { .. } | PollError::LockLost(_) => true,
            PollError::OneTable(_) | PollError::NotSetUp { .. } | PollError::DrainTimedOut(_) => {
                false
            }
        }
    }

    /// Another relay is active.
    pub fn is_standby(&self) -> bool {
        matches!(self, PollError::LockHeld { .. })
    }
}

/// One session of poll mode: lock, then batches until `shutdown` (Ok) or an error.
/// The caller retries transient errors, standing by on [`PollError::LockHeld`].
pub async fn session(
    conninfo: &ConnInfo,
    pipeline: &PipelineConfig,
    poll: &PollConfig,
    sink: &mut KafkaSink,
    generation: u16,
    shutdown: &CancellationToken,
    metrics: &Arc<Metrics>,
) -> Result<(), PollError> {
    let table = one_table(pipeline)?;
    let key = sql::lock_key(&table);
    // Held for the whole session: dropping it releases the lock.
    let (_lock, mut notes) = lock(conninfo, &table, key).await?;
    let work = catalog::connect(conninfo).await?;
    let trigger = preflight(&work, &table, poll).await?;
    let mut claimer = batch::Claimer::new(&work, &table, pipeline, poll).await?;
    metrics.set_role(Role::Active);
    metrics.set_replication_connected(true);
    tracing::info!(
        table = %table, order_by = %poll.order_by, batch_size = poll.batch_size,
        interval = ?poll.interval, mark = poll.mark.name(), lock_key = key,
        notify = trigger, "relaying outbox to kafka by polling (this relay holds the poll lock)"
    );
    let mut relay = crate::pipeline::relay::Relay::new(pipeline, generation, metrics.clone());
    let mut backlog_at = tokio::time::Instant::now();
    let mut wake = Some(Wake::Interval);
    while let Some(cause) = wake {
        metrics.poll.woke(cause);
        let ack = batch::Ack {
            relay: &mut relay,
            sink,
            shutdown,
            notes: &mut notes,
            metrics,
            table: &table,
            drain_timeout: pipeline.drain_timeout,
        };
        let full = match claimer.run(ack).await {
            Err(PollError::DrainTimedOut(t)) => {
                tracing::warn!(drain_timeout = ?t, "stopping with the open poll batch unacked: rolled back, not marked; it is sent again after restart");
                break;
            }
            other => other?,
        };
        if shutdown.is_cancelled() {
            break;
        }
        let now = tokio::time::Instant::now();
        wake = if full {
            // A backlog: poll again at once, refreshing the gauges when due.
            if now >= backlog_at {
                claimer.backlog(metrics).await?;
                backlog_at = now + BACKLOG_EVERY;
            }
            Some(Wake::Drain)
        } else {
            let mut idle = Idle {
                notes: &mut notes,
                shutdown,
                interval: poll.interval,
                backlog_at: &mut backlog_at,
            };
            idle.wait(&claimer, metrics, &table).await?
        };
    }
    log_stopped(relay.stats());
    Ok(())
}

/// Between batches: the wait for the next poll, refreshing the backlog gauges.
struct Idle<'a> {
    notes: &'a mut mpsc::UnboundedReceiver<Notification>,
    shutdown: &'a CancellationToken,
    interval: Duration,
    backlog_at: &'a mut tokio::time::Instant,
}

impl Idle<'_> {
    /// Refresh the backlog when due, then wait for a NOTIFY or the interval
    /// (`None`: shutdown). A closed notification channel is a lost lock session.
    async fn wait(
        &mut self,
        claimer: &batch::Claimer<'_>,
        metrics: &Metrics,
        table: &TableName,
    ) -> Result<Option<Wake>, PollError> {
        let fallback = tokio::time::Instant::now() + self.interval;
        loop {
            if tokio::time::Instant::now() >= *self.backlog_at {
                claimer.backlog(metrics).await?;
                *self.backlog_at = tokio::time::Instant::now() + BACKLOG_EVERY;
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(None),
                note = self.notes.recv() => match note {
                    Some(_) => {
                        drain(self.notes);
                        return Ok(Some(Wake::Notify));
                    }
                    None => return Err(PollError::LockLost(table.clone())),
                },
                _ = tokio::time::sleep_until(fallback) => return Ok(Some(Wake::Interval)),
                _ = tokio::time::sleep_until(*self.backlog_at) => {}
            }
        }
    }
}

/// The session's last line, with the figures the logical mode's "stopped" line has.
fn log_stopped(stats: &crate::pipeline::SessionStats) {
    tracing::info!(
        produced = stats.produced,
        acked = stats.acked,
        latency_samples = stats.latency.count(),
        latency_p50_us = stats.latency.quantile_micros(0.5),
        latency_p99_us = stats.latency.quantile_micros(0.99),
        in_kafka_p50_us = stats.in_kafka.quantile_micros(0.5),
        in_kafka_p99_us = stats.in_kafka.quantile_micros(0.99),
        "stopped"
    );
}

/// The lock session: the table's advisory lock taken (else [`PollError::LockHeld`])
/// and its NOTIFY channel listened to, on one connection, so that the channel
/// closing means the lock is gone too.
async fn lock(
    conninfo: &ConnInfo,
    table: &TableName,
    key: i64,
) -> Result<(Client, mpsc::UnboundedReceiver<Notification>), PollError> {
    let (client, notes) = crate::pg::source::sql_client::connect_listening(conninfo).await?;
    let locked = query_one(&client, &format!("SELECT pg_try_advisory_lock({key})")).await?;
    if locked != "t" {
        return Err(PollError::LockHeld {
            table: table.clone(),
            key,
        });
    }
    let channel = crate::pg::names::quote_ident(&sql::channel(table));
    execute(&client, &format!("LISTEN {channel}")).await?;
    Ok((client, notes))
}

/// Empty the notification queue: one poll answers every NOTIFY sent before it.
fn drain(notes: &mut mpsc::UnboundedReceiver<Notification>) {
    while notes.try_recv().is_ok() {}
}

fn one_table(pipeline: &PipelineConfig) -> Result<TableName, PollError> {
    match pipeline.tables.as_slice() {
        [one] => Ok(one.table.clone()),
        many => {
            let names: Vec<String> = many.iter().map(|t| t.table.to_string()).collect();
            Err(PollError::OneTable(names.join(",")))
        }
    }
}

/// Check the table has what poll mode needs; returns whether the NOTIFY trigger is
/// there (without it, latency is `--poll-interval`: said at WARN, not an error).
async fn preflight(
    client: &Client,
    table: &TableName,
    poll: &PollConfig,
) -> Result<bool, PollError> {
    let columns = batch::column_names(client, table).await?;
    let missing: Vec<String> = [sql::PUBLISHED_COLUMN, poll.order_by.as_str()]
        .into_iter()
        .filter(|c| !columns.iter().any(|name| name == c))
        .map(|c| format!("no column {c:?}"))
        .collect();
    if !missing.is_empty() {
        let order = match poll.order_by == sql::DEFAULT_ORDER_COLUMN {
            true => String::new(),
            false => format!(" --poll-order-by {}", poll.order_by),
        };
        return Err(PollError::NotSetUp {
            table: table.clone(),
            missing: missing.join(", "),
            order,
        });
    }
    let trigger = format!(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = '{}'::regclass AND tgname = '{}'",
        table.quoted().replace('\'', "''"),
        sql::TRIGGER
    );
    let present = query_one(client, &trigger).await? != "0";
    if !present {
        tracing::warn!(table = %table, interval = ?poll.interval, "no NOTIFY trigger {} on the outbox table: new rows wait up to --poll-interval; fix: pgoutbox setup --source poll", sql::TRIGGER);
    }
    Ok(present)
}

async fn query_one(client: &Client, sql: &str) -> Result<String, CatalogError> {
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|error| CatalogError::Query {
            context: sql.to_owned(),
            error,
        })?;
    Ok(messages
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_default())
}

async fn execute(client: &Client, sql: &str) -> Result<(), CatalogError> {
    client
        .batch_execute(sql)
        .await
        .map_err(|error| CatalogError::Query {
            context: sql.to_owned(),
            error,
        })
}
