//! One poll batch, from claim to commit, on the work session.
//!
//! The claimed rows enter the logical mode's core ([`Relay`]) as the pgoutput
//! messages a replication stream would carry for them: one Relation (the table's
//! columns from `pg_attribute`, once per session), then per row a Begin, an Insert
//! whose tuple holds the row's values in PostgreSQL text format (the simple query
//! protocol returns them as the type's output function writes them, as pgoutput
//! does), and a Commit. Each row is its own transaction for the core, with a
//! position counted per session (shown as the `lsn` of a poison row or a stall:
//! the row's place in the session, not a WAL position) and its timestamp column as
//! the commit time (unknown in poll mode; the transaction start is the nearest
//! value a row carries), which is what the relay latency histogram measures from.
//!
//! Invariants: the batch's transaction commits only once the core's low-water mark
//! has passed the batch's last row (every record acked, dead-lettered or skipped by
//! policy); any error, a stall, a lost lock session or a shutdown past
//! `--drain-timeout` returns before the mark, and dropping the transaction rolls it
//! back, so nothing unacked is ever marked; at most one record waits for producer
//! queue space, retried before the next row is offered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_postgres::{Client, Notification, SimpleQueryMessage};
use tokio_util::sync::CancellationToken;

use super::sql;
use super::{PollConfig, PollError};
use crate::kafka::producer::KafkaSink;
use crate::metrics::Metrics;
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::catalog::CatalogError;
use crate::pg::source::pgoutput::{
    Begin, ColumnValue, Commit, Insert, PgOutputMessage, Relation, RelationColumn, ReplicaIdentity,
    TupleData,
};
use crate::pg::timestamp;
use crate::pipeline::relay::Relay;
use crate::pipeline::PipelineError;

/// How often the ack wait checks the stall watch, the lock session and shutdown.
const TICK: Duration = Duration::from_millis(100);

/// Claims and relays batches of one table on the work session.
pub(super) struct Claimer<'c> {
    client: &'c Client,
    table: TableName,
    relation: Relation,
    /// Opens a batch transaction (after any other batch of the table ended).
    begin: String,
    claim: String,
    mark: String,
    backlog: String,
    /// Where the timestamp column is in a row, when the table has it.
    timestamp: Option<usize>,
    batch_size: usize,
    /// The last position handed to the core (one per row).
    at: u64,
    /// Whether the core has seen the Relation.
    announced: bool,
}

impl<'c> Claimer<'c> {
    /// Read the table's columns and prepare the batch SQL.
    pub(super) async fn new(
        client: &'c Client,
        table: &TableName,
        pipeline: &crate::pipeline::PipelineConfig,
        poll: &PollConfig,
    ) -> Result<Claimer<'c>, PollError> {
        client
            .batch_execute("SET DateStyle = ISO")
            .await
            .map_err(|e| query_error("SET DateStyle = ISO", e))?;
        let relation = relation(client, table).await?;
        let names: Vec<String> = relation.columns.iter().map(|c| c.name.clone()).collect();
        let ts_column = pipeline.tables.first().map(|t| t.mapping.timestamp.clone());
        let timestamp = ts_column
            .as_ref()
            .and_then(|ts| names.iter().position(|n| n == ts));
        let ts_name = timestamp.and(ts_column.as_deref());
        Ok(Claimer {
            client,
            table: table.clone(),
            begin: sql::begin(table),
            claim: sql::claim(table, &names, &poll.order_by, poll.batch_size),
            mark: sql::mark(table, poll.mark),
            backlog: sql::backlog(table, &poll.order_by, ts_name),
            relation,
            timestamp,
            batch_size: poll.batch_size,
            at: 0,
            announced: false,
        })
    }

    /// Claim, relay, wait for every ack, mark, commit. Returns whether the batch
    /// was full (more rows are likely waiting).
    pub(super) async fn run(&mut self, mut ack: Ack<'_, '_>) -> Result<bool, PollError> {
        if !self.announced {
            let first = PgOutputMessage::Relation(self.relation.clone());
            ack.relay.on_message(ack.sink, Lsn(0), first)?;
            self.announced = true;
        }
        self.client
            .batch_execute(&self.begin)
            .await
            .map_err(|e| query_error(&self.begin, e))?;
        let result = self.claimed(&mut ack).await;
        if result.is_err() {
            // Best effort: a broken connection rolls back by itself.
            let _ = self.client.batch_execute("ROLLBACK").await;
        }
        result
    }

    async fn claimed(&mut self, ack: &mut Ack<'_, '_>) -> Result<bool, PollError> {
        let (messages, ctids) = self.claim().await?;
        if ctids.is_empty() {
            self.commit().await?;
            return Ok(false);
        }
        let end = Lsn(self.at);
        ack.relay_all(messages, end).await?;
        let marked = self
            .client
            .execute(self.mark.as_str(), &[&ctids])
            .await
            .map_err(|e| query_error(&self.mark, e))?;
        self.commit().await?;
        let claimed = ctids.len() as u64;
        ack.metrics.poll.batch(claimed, marked);
        Ok(ctids.len() >= self.batch_size)
    }

    async fn commit(&self) -> Result<(), PollError> {
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| query_error("COMMIT", e).into())
    }

    /// Run the claim; each row as Begin, Insert, Commit at its own position, and
    /// the claimed rows' ctids.
    async fn claim(&mut self) -> Result<(Vec<(Lsn, PgOutputMessage)>, Vec<String>), PollError> {
        let rows = self
            .client
            .simple_query(&self.claim)
            .await
            .map_err(|e| query_error(&self.claim, e))?;
        let width = self.relation.columns.len();
        let mut messages = Vec::with_capacity(rows.len() * 3);
        let mut ctids = Vec::with_capacity(rows.len());
        for row in rows.iter().filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        }) {
            let values: Vec<ColumnValue> = (0..width)
                .map(|i| match row.get(i) {
                    Some(text) => ColumnValue::Text(Bytes::copy_from_slice(text.as_bytes())),
                    None => ColumnValue::Null,
                })
                .collect();
            let commit_time = self
                .timestamp
                .and_then(|i| row.get(i))
                .and_then(|t| timestamp::parse_timestamp_bytes(t.as_bytes()))
                .map_or_else(timestamp::now_pg_micros, |ms| {
                    ms.saturating_mul(1000) - timestamp::to_unix_micros(0)
                });
            ctids.push(row.get(width).unwrap_or_default().to_owned());
            self.at += 1;
            let at = Lsn(self.at);
            messages.extend(self.row_messages(at, commit_time, TupleData(values)));
        }
        Ok((messages, ctids))
    }

    fn row_messages(
        &self,
        at: Lsn,
        commit_time: i64,
        tuple: TupleData,
    ) -> [(Lsn, PgOutputMessage); 3] {
        [
            (
                at,
                PgOutputMessage::Begin(Begin {
                    final_lsn: at,
                    commit_time,
                    xid: 0,
                }),
            ),
            (
                at,
                PgOutputMessage::Insert(Insert {
                    xid: None,
                    relation_id: self.relation.id,
                    tuple,
                }),
            ),
            (
                at,
                PgOutputMessage::Commit(Commit {
                    flags: 0,
                    commit_lsn: at,
                    end_lsn: at,
                    commit_time,
                }),
            ),
        ]
    }

    /// Refresh the backlog gauges.
    pub(super) async fn backlog(&self, metrics: &Metrics) -> Result<(), PollError> {
        let rows = self
            .client
            .simple_query(&self.backlog)
            .await
            .map_err(|e| query_error(&self.backlog, e))?;
        let Some(row) = rows.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        }) else {
            return Ok(());
        };
        let count = row.get(0).and_then(|c| c.parse().ok()).unwrap_or(0);
        let age = row
            .get(1)
            .and_then(|a| a.parse::<f64>().ok())
            .filter(|a| a.is_finite())
            .map(|a| Duration::from_secs_f64(a.max(0.0)));
        metrics.poll.set_backlog(count, age);
        tracing::debug!(table = %self.table, unpublished = count, oldest_age = ?age, "poll backlog");
        Ok(())
    }
}

/// What one batch drives: the core, the producer, and what ends the ack wait (a
/// shutdown past `drain_timeout`, the lock session's notification channel closing).
pub(super) struct Ack<'a, 'r> {
    pub(super) relay: &'a mut Relay<'r>,
    pub(super) sink: &'a mut KafkaSink,
    pub(super) shutdown: &'a CancellationToken,
    pub(super) notes: &'a mut mpsc::UnboundedReceiver<Notification>,
    pub(super) metrics: &'a Arc<Metrics>,
    pub(super) table: &'a TableName,
    pub(super) drain_timeout: Duration,
}

impl Ack<'_, '_> {
    /// Offer the rows to the core, then move delivery reports into it until its
    /// low-water mark passes `end`.
    async fn relay_all(
        &mut self,
        messages: Vec<(Lsn, PgOutputMessage)>,
        end: Lsn,
    ) -> Result<(), PollError> {
        let mut messages = messages.into_iter().peekable();
        let mut drain_deadline: Option<Instant> = None;
        let mut tick = tokio::time::interval(TICK);
        loop {
            self.relay.retry_pending(self.sink)?;
            while self.relay.can_read() {
                let Some((at, message)) = messages.next() else {
                    break;
                };
                self.relay.on_message(self.sink, at, message)?;
            }
            if messages.peek().is_none() && self.relay.confirmed() >= end {
                return Ok(());
            }
            tokio::select! {
                biased;
                // PRIORITY 1: delivery reports free queue space and move the mark.
                delivery = self.sink.next_delivery() => {
                    let Some(delivery) = delivery else {
                        return Err(PipelineError::StreamClosed.into());
                    };
                    self.relay.on_delivery(self.sink, delivery)?;
                    while let Some(more) = self.sink.try_next_delivery() {
                        self.relay.on_delivery(self.sink, more)?;
                    }
                }
                // PRIORITY 2: time — stall watch, lock session, shutdown deadline.
                _ = tick.tick() => self.on_tick(&mut drain_deadline)?,
            }
        }
    }

    fn on_tick(&mut self, drain_deadline: &mut Option<Instant>) -> Result<(), PollError> {
        let tracker = self.relay.tracker();
        self.metrics
            .set_in_flight(tracker.in_flight_records(), tracker.in_flight_bytes());
        self.metrics.set_in_flight_window(self.relay.window());
        let (stall, age) = self.relay.stalled(Instant::now());
        self.metrics.set_oldest_in_flight_age(age);
        if let Some(stall) = stall {
            if self.metrics.stalled(stall.to_string()) {
                tracing::warn!(error = %stall, "poll batch stalled; rolling it back (nothing marked) and replacing the producer");
            } else {
                tracing::debug!(error = %stall, "poll batch still stalled since the stall began; rolling it back again");
            }
            return Err(PipelineError::Stalled(Box::new(stall)).into());
        }
        if self.notes.is_closed() {
            return Err(PollError::LockLost(self.table.clone()));
        }
        if self.shutdown.is_cancelled() {
            let deadline =
                *drain_deadline.get_or_insert_with(|| Instant::now() + self.drain_timeout);
            if Instant::now() >= deadline {
                return Err(PollError::DrainTimedOut(self.drain_timeout));
            }
        }
        Ok(())
    }
}

/// The table as a Relation message: its live columns in order, with their types.
async fn relation(client: &Client, table: &TableName) -> Result<Relation, PollError> {
    const COLUMNS: &str = "SELECT c.oid::int8, a.attname::text, a.atttypid::int8, a.atttypmod \
         FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid \
         WHERE c.oid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum";
    let rows = client
        .query(COLUMNS, &[&table.quoted()])
        .await
        .map_err(|e| query_error(&format!("reading the columns of {table}"), e))?;
    let id = rows.first().map_or(0, |r| r.get::<_, i64>(0));
    let columns = rows
        .iter()
        .map(|r| RelationColumn {
            flags: 0,
            name: r.get(1),
            type_oid: u32::try_from(r.get::<_, i64>(2)).unwrap_or(0),
            type_modifier: r.get(3),
        })
        .collect();
    Ok(Relation {
        xid: None,
        id: u32::try_from(id).unwrap_or(0),
        namespace: table.schema.clone(),
        name: table.name.clone(),
        replica_identity: ReplicaIdentity::Default,
        columns,
    })
}

/// The names of `table`'s live columns.
pub(super) async fn column_names(
    client: &Client,
    table: &TableName,
) -> Result<Vec<String>, PollError> {
    Ok(relation(client, table)
        .await?
        .columns
        .into_iter()
        .map(|c| c.name)
        .collect())
}

fn query_error(context: &str, error: tokio_postgres::Error) -> CatalogError {
    CatalogError::Query {
        context: context.to_owned(),
        error,
    }
}
