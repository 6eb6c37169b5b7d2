//! `pgoutbox tail`: decoded outbox events on stdout, for debugging.
//!
//! ```text
//!  catalog conn: the publication, or a temporary one (publication.rs) ─┐
//!  replication conn: temporary slot (or --slot) ─ START_REPLICATION ─▶ Decoder
//!      ─▶ Begin (xid, commit LSN/time) ─▶ Insert on an outbox table ─▶ record::row
//!                                       └ outbox message (message.rs) ─▶ Messages::build
//!      ─▶ poison row? record::decide (--on-invalid: fail │ skip │ dead letter)
//!      ─▶ format (json │ pretty) ─▶ stdout, flushed at every commit
//! ```
//!
//! Tail is `run`'s record path with a printing end: a row goes through the same
//! [`record::row`] (mapping, topic, checks, trace context, converters, with the same
//! `--on-invalid`, `--record-timestamp` and converter flags) and a poison row
//! through the same diagnosis and policy ([`record::decide`]), so the `record` a
//! line shows is what `run` sends (the dead letter for a dead-lettered row), and
//! `poison` names the cause and the action. Only `too-large` is never shown: the
//! broker's size limit decides it, and tail sees no broker.
//!
//! Invariants: tail never confirms an LSN — every status update carries `0/0`, so
//! neither the temporary slot nor an existing `--slot` moves; events appear in commit
//! order, only from committed transactions (pgoutput without `streaming` sends a
//! transaction only after it committed, and never sends rolled-back subtransactions);
//! a row of a table that lost a mapped column is shown as `run` sees it (poison,
//! `missing-column`), not an error; a closed stdout (`| head`) ends tail quietly; tail leaves the database as it found
//! it — the temporary slot ends with the connection, and a publication tail had to
//! create is dropped however tail ends; one a killed tail left behind goes with the
//! next tail or `teardown` (see `publication.rs`).

pub mod format;
mod message;
mod publication;

use std::io::Write;

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::outbox::event::OutboxEvent;
use crate::outbox::invalid::Origin;
use crate::outbox::routing::TopicTemplate;
use crate::outbox::tables::{OutboxTables, RelationRoute};
use crate::pg::client::connection::PgError;
use crate::pg::client::conninfo::ConnInfo;
use crate::pg::lsn::Lsn;
use crate::pg::source::catalog::{self, CatalogError};
use crate::pg::source::pgoutput::{DecodeError, Decoder, PgOutputMessage, TupleData};
use crate::pg::source::protocol::ReplicationMessage;
use crate::pg::source::replication::ReplicationClient;
use crate::pg::source::sql_client;
use crate::pg::source::SourceConfig;
use crate::pipeline::record::{self, Built};
use crate::pipeline::relay::message::Messages;
use crate::pipeline::PipelineConfig;

pub use format::{Outcome, TailEvent};
pub use publication::{drop_leftovers, drop_sql, is_tail_name, leftovers};

/// Settings of `pgoutbox tail`.
#[derive(Debug, Clone)]
pub struct TailConfig {
    /// The database, publication and outbox tables.
    pub source: SourceConfig,
    /// `run`'s record path: the outbox tables (mapping, topic template), the
    /// logical decoding messages shown as events (`--message-prefix`), converters,
    /// record time and poison policy, to show the record `run` would send.
    pub pipeline: PipelineConfig,
    /// Output format.
    pub format: TailFormat,
    /// Stop after this many events.
    pub limit: Option<u64>,
    /// Existing slot to read (never confirmed); `None` = temporary slot.
    pub slot: Option<String>,
    /// The delivery mode `run` would use with the same flags (`--delivery`), said
    /// in tail's start line; tail itself sends nothing.
    pub delivery: Option<crate::pipeline::exactly_once::ExactlyOnceConfig>,
}

/// How tail prints an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TailFormat {
    /// One JSON object per line (for jq and scripts).
    #[default]
    Json,
    /// A block per event, for humans.
    Pretty,
}

/// Why tail stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TailError {
    /// Publication or slot check failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The replication connection failed.
    #[error("replication connection")]
    Replication(#[from] PgError),
    /// The server sent a pgoutput message that does not decode.
    #[error("cannot decode pgoutput message at {lsn}")]
    Decode {
        lsn: Lsn,
        #[source]
        source: DecodeError,
    },
    /// An Insert referenced a relation never described by a Relation message.
    #[error(
        "pgoutput Insert at {lsn} refers to unknown relation {relid} (no Relation message seen)"
    )]
    UnknownRelation { lsn: Lsn, relid: u32 },
    /// Writing to stdout failed.
    #[error("writing events to stdout")]
    Output(#[source] std::io::Error),
}

/// Transaction context from the Begin message.
#[derive(Debug, Clone, Copy, Default)]
struct Txn {
    xid: u32,
    commit_lsn: Lsn,
    commit_time: i64,
}

/// Run tail until `limit` events were printed or `shutdown` fires. Returns the
/// number of events printed. A closed stdout is [`TailError::Output`] with
/// `BrokenPipe`; the temporary slot goes away all the same.
pub async fn run(
    cfg: &TailConfig,
    out: &mut dyn Write,
    shutdown: CancellationToken,
) -> Result<u64, TailError> {
    let source = &cfg.source;
    // With several hosts, the stream comes from the server the catalog checks saw.
    let (publication, host) = {
        let (client, host) = sql_client::connect_on(&source.conninfo).await?;
        catalog::require_logical_wal(&client).await?;
        if source.messages_only {
            catalog::require_messages(&client).await?;
        }
        if let Some(slot) = &cfg.slot {
            let info = catalog::slot_info(&client, slot)
                .await?
                .ok_or_else(|| CatalogError::MissingSlot { slot: slot.clone() })?;
            catalog::check_slot_kind(&info)?;
        }
        (publication::prepare(client, source).await?, host)
    };
    let on_host = source.conninfo.for_host(&host);
    let result = stream(cfg, &on_host, &publication.name, out, shutdown).await;
    publication.release(&on_host).await;
    result
}

/// Stream through `publication` and print events (see [`run`]).
async fn stream(
    cfg: &TailConfig,
    conninfo: &ConnInfo,
    publication: &str,
    out: &mut dyn Write,
    shutdown: CancellationToken,
) -> Result<u64, TailError> {
    // Creating a slot waits for a consistent point (running transactions must end):
    // a signal meanwhile ends tail too, and the server drops the slot with the session.
    let setup = async {
        let mut repl = ReplicationClient::connect(conninfo).await?;
        let (slot, start) = match &cfg.slot {
            Some(slot) => (slot.clone(), Lsn::INVALID),
            None => {
                let name = publication::temporary_name();
                let start = repl.create_logical_slot(&name, true).await?;
                (name, start)
            }
        };
        let stream = repl
            .start_pgoutput(
                &slot,
                start,
                &[publication.to_owned()],
                std::time::Duration::ZERO,
            )
            .await?;
        Ok::<_, TailError>((stream, slot, start))
    };
    let (mut stream, slot, start) = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return Ok(0),
        setup = setup => setup?,
    };
    let delivery = crate::pipeline::exactly_once::describe(cfg.delivery.as_ref(), None);
    tracing::info!(slot = %slot, start = %start, publication = %publication, delivery = %delivery, "tailing outbox");

    let mut state = TailState {
        cfg,
        decoder: Decoder::new(),
        tables: OutboxTables::new(cfg.pipeline.tables.clone()),
        metrics: Metrics::default(),
        messages: Messages::default(),
        txn: Txn::default(),
        printed: 0,
    };
    let result = loop {
        if cfg.limit.is_some_and(|limit| state.printed >= limit) {
            break Ok(());
        }
        let message = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break Ok(()),
            message = stream.recv() => message,
        };
        match message {
            None => break Ok(()),
            Some(Err(err)) => break Err(TailError::Replication(err)),
            Some(Ok(ReplicationMessage::XLogData {
                wal_start, data, ..
            })) => {
                // A closed stdout (`| head`) is an error too: the binary ends quietly
                // with the closed-pipe status, like every other command.
                if let Err(e) = state.handle(wal_start, data, out) {
                    break Err(e);
                }
            }
            Some(Ok(_keepalive)) => {}
        }
    };
    let _ = out.flush();
    // Closing sends a last status update that still carries 0/0: nothing is confirmed.
    if let Err(err) = stream.close().await {
        tracing::debug!(error = %crate::report::Report(&err), "closing replication stream");
    }
    result.map(|()| state.printed)
}

/// Print one event, unless `--limit` events were printed already.
fn print(
    cfg: &TailConfig,
    printed: &mut u64,
    line: &TailEvent<'_>,
    out: &mut dyn Write,
) -> Result<(), TailError> {
    if cfg.limit.is_some_and(|l| *printed >= l) {
        return Ok(());
    }
    match cfg.format {
        TailFormat::Json => format::write_json(line, out),
        TailFormat::Pretty => format::write_pretty(line, out),
    }
    .map_err(TailError::Output)?;
    *printed += 1;
    Ok(())
}

struct TailState<'a> {
    cfg: &'a TailConfig,
    decoder: Decoder,
    tables: OutboxTables,
    /// What the record path counts (tail exports no metrics).
    metrics: Metrics,
    /// Logical decoding messages' mappings, as the relay keeps them.
    messages: Messages,
    txn: Txn,
    printed: u64,
}

impl TailState<'_> {
    fn handle(
        &mut self,
        lsn: Lsn,
        data: bytes::Bytes,
        out: &mut dyn Write,
    ) -> Result<(), TailError> {
        let message = self
            .decoder
            .decode(data)
            .map_err(|source| TailError::Decode { lsn, source })?;
        match message {
            PgOutputMessage::Begin(begin) => {
                self.txn = Txn {
                    xid: begin.xid,
                    commit_lsn: begin.final_lsn,
                    commit_time: begin.commit_time,
                };
            }
            PgOutputMessage::Relation(relation) => {
                if let Err(mismatch) = self.tables.on_relation(&relation) {
                    // As `run`: its rows are poison (missing-column, type-changed),
                    // shown as such.
                    let cause = mismatch.cause();
                    tracing::warn!(error = %mismatch, "outbox table no longer matches the column mapping; `run` handles its rows by --on-invalid {cause}");
                }
                if let Some(RelationRoute::NotOutbox(table)) = self.tables.route(relation.id) {
                    // `run` stops here; tail shows what it can and says what it skips.
                    tracing::warn!(
                        table = %table,
                        lsn = %lsn,
                        "publication {} publishes table {table}, which is not an outbox table (--table): its rows are not shown, and `pgoutbox run` would stop on them; fix: add --table {table}, or ALTER PUBLICATION {} DROP TABLE {};",
                        self.cfg.source.publication,
                        crate::pg::names::quote_ident(&self.cfg.source.publication),
                        table.quoted(),
                    );
                }
            }
            PgOutputMessage::Insert(insert) => {
                let route =
                    self.tables
                        .route(insert.relation_id)
                        .ok_or(TailError::UnknownRelation {
                            lsn,
                            relid: insert.relation_id,
                        })?;
                let printed = &mut self.printed;
                let row = (route, &insert.tuple, lsn);
                on_row(self.cfg, &self.metrics, self.txn, printed, row, out)?;
            }
            PgOutputMessage::Message(message) => self.on_message(&message, lsn, out)?,
            PgOutputMessage::Commit(_) => out.flush().map_err(TailError::Output)?,
            // Updates/deletes are not published (publish = 'insert'); types, origins
            // and truncates carry no outbox events.
            _ => {}
        }
        Ok(())
    }
}

/// One inserted row (of a table routed by `route`, at `lsn`): through `run`'s
/// record path ([`record::row`]) and poison diagnosis ([`record::decide`]), then
/// printed. The diagnosis is every cause that does not depend on the broker's
/// limits (`too-large` is the broker's to find, and tail sees no broker).
fn on_row(
    cfg: &TailConfig,
    metrics: &Metrics,
    txn: Txn,
    printed: &mut u64,
    (route, tuple, lsn): (&RelationRoute, &TupleData, Lsn),
    out: &mut dyn Write,
) -> Result<(), TailError> {
    let pipeline = &cfg.pipeline;
    let built = record::row(pipeline, metrics, route, tuple, txn.commit_time, lsn);
    let Ok((table, built)) = built else {
        return Ok(()); // not an outbox table: warned about at its Relation
    };
    let unmapped = TopicTemplate::default();
    let (event, template) = match route {
        RelationRoute::Outbox(_, mapping, template) => (mapping.event(tuple), template),
        _ => (OutboxEvent::default(), &unmapped),
    };
    let decided;
    let outcome = match &built {
        Built::Send(record) => Outcome::Send(record),
        Built::Poison(record, invalid) => {
            let origin = Origin {
                table: Some(table.to_string()),
                lsn: Some(lsn.to_string()),
            };
            decided = record::decide(pipeline, invalid, record, &origin);
            Outcome::Poison {
                invalid,
                action: pipeline.invalid.action(invalid.cause),
                letter: decided.as_ref().ok().and_then(Option::as_ref),
            }
        }
    };
    let line = TailEvent {
        lsn,
        commit_lsn: txn.commit_lsn,
        xid: txn.xid,
        commit_time: txn.commit_time,
        table,
        op: "insert",
        event: &event,
        template,
        outcome,
    };
    print(cfg, printed, &line, out)
}
