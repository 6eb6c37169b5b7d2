//! The logical replication connection: replication commands and the CopyBoth stream.
//!
//! ```text
//!               ┌──────────────── stream task (one per stream) ────────────────┐
//!  socket ──read──▶ parse_backend ─▶ parse_copy_data ─┬─ XLogData ─▶ pending ─▶ mpsc ─▶ caller
//!                                                     └─ keepalive: reply now if asked
//!  socket ◀─write── standby status update ◀── timer (min(10 s, wal_sender_timeout/2))
//!                                          ◀── caller's `confirm` / `send_status_now`
//!                                          ◀── silence watchdog (asks for a reply)
//! ```
//!
//! Invariants:
//! - The flush LSN sent to the server is only ever what the caller passed to
//!   [`ReplicationStream::confirm`] (starting at `0/0`, which confirms nothing), and it
//!   never moves backwards. The connection never advances it on its own.
//! - The socket is only read while nothing parsed waits to be handed over, and the
//!   queue towards the caller holds at most [`QUEUE_MESSAGES`] messages and
//!   [`QUEUE_BYTES`] bytes of WAL data (one message at least, whatever its size), so
//!   what the stream holds is bounded by one read buffer plus that queue even when
//!   the caller stops reading; status updates keep flowing on the timer meanwhile, so
//!   the server never hits `wal_sender_timeout` because of a slow consumer.
//! - Every message owns its bytes: a CopyData payload is copied out of the read
//!   buffer, never a slice of it. A message (and every record value, key or event id
//!   sliced from it downstream) then keeps alive exactly its own bytes, not the
//!   [`READ_CHUNK`] buffer it arrived in, and that buffer is reused from read to read
//!   instead of a new one being allocated whenever a message of the last one is still
//!   alive. Measured (bench/run.sh memory, issue 29, tansu): with 50,000 one-row
//!   transactions in flight (broker paused) the relay's RSS was 96–101 MB with
//!   shared slices (each transaction's event id kept its read buffer alive) and
//!   55–62 MB with copies; 3,000 rows of 100 KB peaked at 210–228 MB against
//!   62–85 MB. The copy costs one small allocation and memcpy per message. A buffer
//!   grown past [`READ_BUF_KEEP`] for one large message is given back once that
//!   message was parsed.
//! - A keepalive asking for a reply is answered as soon as it is parsed.
//! - At live rates reads are gathered ([`linger`], `--wal-linger`): after a read
//!   that ended a transaction, the socket is read again when the linger is over or
//!   16 KiB wait, whichever comes first. Only the timing of reads changes; every rule above holds, and a
//!   linger is capped at a quarter of the receive timeout so it never looks like
//!   silence.
//! - A connection that went silent is given up, never waited on forever. While the
//!   task reads, something must arrive within the receive timeout (the session's
//!   `wal_sender_timeout`, 60 s when that is disabled): after half of it without a
//!   byte the task sends a status update that requests a reply, and after all of it
//!   the stream ends with [`PgError::StreamTimeout`]. A black-holed path (no FIN, no
//!   RST) is otherwise invisible to the client, while the server drops its side
//!   after its own `wal_sender_timeout`. Time spent not reading (the caller is
//!   behind) does not count as silence; a write that does not complete within the
//!   receive timeout ends the stream the same way.
//!
//! See <https://www.postgresql.org/docs/current/protocol-replication.html>.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Sleep;
use tracing::Instrument;

use crate::pg::client::connection::{PgConnection, PgError, SimpleRow, Transport};
use crate::pg::client::conninfo::{ConnInfo, HostAddr};
use crate::pg::client::frame::{parse_backend, Backend};
use crate::pg::lsn::Lsn;
use crate::pg::names::{quote_ident, quote_literal};
use crate::pg::source::protocol::{encode_standby_status, parse_copy_data, ReplicationMessage};
use crate::pg::timestamp::now_pg_micros;

mod budget;
mod linger;
mod timers;

use budget::{oversized, send_front, Queued, READ_CHUNK};
pub use budget::{QUEUE_BYTES, QUEUE_MESSAGES};
pub use timers::parse_pg_duration;
use timers::Timers;

/// The pgoutput protocol version to request from a server: the highest it supports
/// (1 on PostgreSQL ≤ 13, 2 on 14, 3 on 15, 4 on 16+).
pub fn pgoutput_proto_version(server_version_num: u32) -> u32 {
    match server_version_num {
        v if v >= 160000 => 4,
        v if v >= 150000 => 3,
        v if v >= 140000 => 2,
        _ => 1,
    }
}

/// Result of `IDENTIFY_SYSTEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemIdentity {
    /// Cluster system identifier.
    pub system_id: String,
    /// Current timeline.
    pub timeline: u32,
    /// Current WAL flush position.
    pub xlogpos: Lsn,
    /// Database of this connection.
    pub dbname: Option<String>,
}

/// A walsender connection (`replication=database`) before streaming starts.
pub struct ReplicationClient {
    conn: PgConnection,
}

impl ReplicationClient {
    /// Connect and authenticate as a walsender.
    pub async fn connect(info: &ConnInfo) -> Result<Self, PgError> {
        Ok(Self {
            conn: PgConnection::connect(info, true).await?,
        })
    }

    /// The host this connection is on: of several, the one the host walk chose
    /// (`target_session_attrs`).
    pub fn host(&self) -> &HostAddr {
        self.conn.host()
    }

    /// The server's version number (e.g. 150018), 0 when it did not report one.
    pub fn server_version_num(&self) -> u32 {
        self.conn.server_version_num().unwrap_or(0)
    }

    /// Run a replication command or SQL statement (walsenders of
    /// `replication=database` accept plain SQL in the simple protocol).
    pub async fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleRow>, PgError> {
        self.conn.simple_query(sql).await
    }

    /// `IDENTIFY_SYSTEM`.
    pub async fn identify_system(&mut self) -> Result<SystemIdentity, PgError> {
        let rows = self.conn.simple_query("IDENTIFY_SYSTEM").await?;
        let row = rows
            .first()
            .ok_or_else(|| unexpected("IDENTIFY_SYSTEM", "no row"))?;
        let xlogpos = row
            .get("xlogpos")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| unexpected("IDENTIFY_SYSTEM", "no xlogpos"))?;
        Ok(SystemIdentity {
            system_id: row.get("systemid").unwrap_or_default().to_owned(),
            timeline: row
                .get("timeline")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            xlogpos,
            dbname: row.get("dbname").map(str::to_owned),
        })
    }

    /// Create a `pgoutput` slot; a temporary one disappears with this connection.
    /// Returns the consistent point: streaming from the slot starts there.
    pub async fn create_logical_slot(
        &mut self,
        slot: &str,
        temporary: bool,
    ) -> Result<Lsn, PgError> {
        // The pre-PostgreSQL-15 syntax, which every version from 10 to 18 accepts.
        let sql = format!(
            "CREATE_REPLICATION_SLOT {}{} LOGICAL pgoutput NOEXPORT_SNAPSHOT",
            quote_ident(slot),
            if temporary { " TEMPORARY" } else { "" }
        );
        let rows = self.conn.simple_query(&sql).await?;
        rows.first()
            .and_then(|r| r.get("consistent_point"))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| unexpected("CREATE_REPLICATION_SLOT", "no consistent_point"))
    }

    /// `wal_sender_timeout` of this session (`None` when disabled with 0).
    pub async fn wal_sender_timeout(&mut self) -> Result<Option<Duration>, PgError> {
        let rows = self.conn.simple_query("SHOW wal_sender_timeout").await?;
        let text = rows
            .first()
            .and_then(|r| r.values.first().cloned().flatten())
            .ok_or_else(|| unexpected("SHOW wal_sender_timeout", "no value"))?;
        parse_pg_duration(&text)
            .map(|d| (!d.is_zero()).then_some(d))
            .ok_or_else(|| unexpected("SHOW wal_sender_timeout", &text))
    }

    /// `START_REPLICATION SLOT … LOGICAL start (pgoutput options)` and hand the
    /// connection to a stream task. `start` = `0/0` resumes at the slot's
    /// `confirmed_flush_lsn`.
    pub async fn start_pgoutput(
        mut self,
        slot: &str,
        start: Lsn,
        publications: &[String],
        linger: Duration,
    ) -> Result<ReplicationStream, PgError> {
        let version = self.server_version_num();
        // A SQL_ASCII database stores bytes with no encoding: asking the server to
        // convert them to UTF8 fails on the first byte above 0x7f and wedges the
        // slot. SQL_ASCII on our side turns conversion off; the bytes pass as they
        // are and the outbox checks (`--on-invalid`) judge them.
        if self.conn.parameter("server_encoding") == Some("SQL_ASCII") {
            self.conn
                .simple_query("SET client_encoding = 'SQL_ASCII'")
                .await?;
        }
        let timers = Timers::for_wal_sender_timeout(self.wal_sender_timeout().await?);
        let publication_names = publications
            .iter()
            .map(|p| quote_ident(p))
            .collect::<Vec<_>>()
            .join(",");
        let mut options = vec![
            format!("\"proto_version\" '{}'", pgoutput_proto_version(version)),
            format!(
                "\"publication_names\" {}",
                quote_literal(&publication_names)
            ),
        ];
        // `messages` (logical decoding messages) exists since PostgreSQL 14; older
        // servers reject unknown options. Streaming and two_phase stay off: the relay
        // wants whole committed transactions only.
        if version >= 140000 {
            options.push("\"messages\" 'true'".to_owned());
        }
        let sql = format!(
            "START_REPLICATION SLOT {} LOGICAL {} ({})",
            quote_ident(slot),
            start,
            options.join(", ")
        );
        self.conn.queue_query(&sql)?;
        self.conn.flush().await?;
        loop {
            match self.conn.read_backend("starting replication").await {
                Ok(Backend::CopyBothResponse) => break,
                Ok(Backend::Message(Message::ReadyForQuery(_))) => {
                    return Err(unexpected(
                        "START_REPLICATION",
                        "ReadyForQuery before CopyBothResponse",
                    ))
                }
                Ok(_) => {}
                // The connection is dropped on error, so the ReadyForQuery that
                // follows an ErrorResponse need not be read.
                Err(e) => return Err(e),
            }
        }
        Ok(ReplicationStream::spawn(self.conn, slot, timers, linger))
    }
}

fn unexpected(context: &str, what: &str) -> PgError {
    PgError::Unexpected {
        context: context.to_owned(),
        what: what.to_owned(),
    }
}

/// State shared between the caller and the stream task.
struct Feedback {
    /// The flush LSN the caller confirmed (monotonic).
    flush: AtomicU64,
    /// Wakes the task to send a status update right away.
    wake: Notify,
    /// Standby status updates sent so far (observability and tests).
    sent: AtomicU64,
}

enum Command {
    Close(oneshot::Sender<Result<(), PgError>>),
}

/// A running logical replication stream. Dropping it closes the connection.
pub struct ReplicationStream {
    events: mpsc::Receiver<Result<ReplicationMessage, PgError>>,
    queued: Arc<Queued>,
    feedback: Arc<Feedback>,
    commands: mpsc::Sender<Command>,
    timers: Timers,
}

impl ReplicationStream {
    fn spawn(conn: PgConnection, slot: &str, timers: Timers, linger: Duration) -> Self {
        let (transport, read_buf, target, tcp_fd) = conn.into_parts();
        let (reader, writer) = tokio::io::split(transport);
        let (tx, events) = mpsc::channel(QUEUE_MESSAGES);
        let queued = Arc::new(Queued::default());
        let (commands, command_rx) = mpsc::channel(1);
        let feedback = Arc::new(Feedback {
            flush: AtomicU64::new(0),
            wake: Notify::new(),
            sent: AtomicU64::new(0),
        });
        let task = StreamTask {
            reader,
            writer,
            read_buf,
            write_buf: BytesMut::with_capacity(64),
            pending: VecDeque::new(),
            tx,
            queued: queued.clone(),
            commands: command_rx,
            feedback: feedback.clone(),
            target,
            receive_timeout: timers.receive_timeout,
            last_heard: tokio::time::Instant::now(),
            pinged: false,
            silence: Box::pin(tokio::time::sleep(timers.receive_timeout / 2)),
            // Never long enough to look like silence to the watchdog.
            linger: linger::WalLinger::new(tcp_fd, linger.min(timers.receive_timeout / 4)),
        };
        let span = tracing::info_span!("replication_stream", slot = %slot);
        crate::task::spawn(
            "replication-stream",
            task.run(timers.status_interval).instrument(span),
        );
        Self {
            events,
            queued,
            feedback,
            commands,
            timers,
        }
    }

    /// The next XLogData or keepalive. `None` after the stream ended (the error that
    /// ended it, if any, was returned first).
    pub async fn recv(&mut self) -> Option<Result<ReplicationMessage, PgError>> {
        let event = self.events.recv().await;
        self.taken(event.as_ref());
        event
    }

    /// A message that is already queued, without waiting (`None`: nothing queued
    /// right now, or the stream ended — [`ReplicationStream::recv`] tells which).
    pub fn try_recv(&mut self) -> Option<Result<ReplicationMessage, PgError>> {
        let event = self.events.try_recv().ok();
        self.taken(event.as_ref());
        event
    }

    /// Give the queue's budget back for a message taken out of it.
    fn taken(&self, event: Option<&Result<ReplicationMessage, PgError>>) {
        if let Some(Ok(message)) = event {
            self.queued.taken(message);
        }
    }

    /// Confirm everything up to `lsn` as flushed. Never moves backwards: a lower value
    /// than one already confirmed is ignored. Sent with the next status update.
    pub fn confirm(&self, lsn: Lsn) {
        self.feedback.flush.fetch_max(lsn.0, Ordering::AcqRel);
    }

    /// The flush LSN that status updates currently carry.
    pub fn confirmed(&self) -> Lsn {
        Lsn(self.feedback.flush.load(Ordering::Acquire))
    }

    /// Send a status update now instead of waiting for the timer.
    pub fn send_status_now(&self) {
        self.feedback.wake.notify_one();
    }

    /// How many standby status updates the connection has sent.
    pub fn status_updates_sent(&self) -> u64 {
        self.feedback.sent.load(Ordering::Relaxed)
    }

    /// Bytes of WAL data handed over by the connection and not yet taken with
    /// [`ReplicationStream::recv`] (at most [`QUEUE_BYTES`] plus one message).
    pub fn queued_bytes(&self) -> usize {
        self.queued.bytes.load(Ordering::Acquire)
    }

    /// The interval of timer-driven status updates.
    pub fn status_interval(&self) -> Duration {
        self.timers.status_interval
    }

    /// How long the stream waits for a message from the server before it gives
    /// the connection up (see the module docs).
    pub fn receive_timeout(&self) -> Duration {
        self.timers.receive_timeout
    }

    /// Send a final status update, end the stream (CopyDone, Terminate) and close.
    pub async fn close(self) -> Result<(), PgError> {
        let (reply, done) = oneshot::channel();
        if self.commands.send(Command::Close(reply)).await.is_err() {
            return Ok(()); // the task already ended
        }
        done.await.unwrap_or(Ok(()))
    }
}

/// What woke the stream task.
enum Event {
    Command(Option<Command>),
    CallerGone,
    StatusDue,
    Forwarded,
    Room,
    Read(std::io::Result<()>),
    LingerOver,
    Silence,
}

/// The task that owns the socket while streaming.
struct StreamTask {
    reader: ReadHalf<Box<dyn Transport>>,
    writer: WriteHalf<Box<dyn Transport>>,
    read_buf: BytesMut,
    write_buf: BytesMut,
    /// Parsed messages not yet handed to the caller; the socket is not read while
    /// this is non-empty.
    pending: VecDeque<ReplicationMessage>,
    tx: mpsc::Sender<Result<ReplicationMessage, PgError>>,
    /// The bytes budget of `tx` ([`QUEUE_BYTES`]).
    queued: Arc<Queued>,
    commands: mpsc::Receiver<Command>,
    feedback: Arc<Feedback>,
    target: String,
    /// See [`Timers::receive_timeout`].
    receive_timeout: Duration,
    /// When the server was last heard from, or when the task last resumed reading.
    last_heard: tokio::time::Instant,
    /// Whether a reply was requested since `last_heard`.
    pinged: bool,
    /// The silence watchdog: one timer for the stream's life, moved only when it
    /// fires early (reads just note `last_heard`; see [`StreamTask::silence_due`]).
    silence: Pin<Box<Sleep>>,
    /// Reads gathered at live rates (see [`linger`]); its socket is the reader's.
    linger: linger::WalLinger,
}

impl StreamTask {
    async fn run(mut self, status_interval: Duration) {
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + status_interval,
            status_interval,
        );
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Bytes that arrived together with CopyBothResponse.
        if let Err(err) = self.parse_frames().await {
            let _ = self.tx.send(Err(err)).await;
            return;
        }
        let result = loop {
            let step = self.step(&mut ticker).await;
            match step {
                Ok(true) => continue,
                Ok(false) => break Ok(()),
                Err(err) => break Err(err),
            }
        };
        if let Err(err) = result {
            tracing::debug!(error = %crate::report::Report(&err), "replication stream ended");
            let _ = self.tx.send(Err(err)).await;
        }
    }

    /// One turn of the loop; `Ok(false)` ends the task.
    async fn step(&mut self, ticker: &mut tokio::time::Interval) -> Result<bool, PgError> {
        let feedback = self.feedback.clone();
        let queued = self.queued.clone();
        let has_pending = !self.pending.is_empty();
        let has_room = queued.has_room();
        let event = tokio::select! {
            biased;
            // PRIORITY 1: the caller closes the stream.
            command = self.commands.recv() => Event::Command(command),
            // PRIORITY 2: the caller is gone.
            _ = self.tx.closed() => Event::CallerGone,
            // PRIORITY 3: status updates, on request and on the timer; these must flow
            // even when the caller is not reading.
            _ = feedback.wake.notified() => Event::StatusDue,
            _ = ticker.tick() => Event::StatusDue,
            // PRIORITY 4: hand parsed messages to the caller, within the queue's
            // budget; past it, wait for the caller to take some.
            permit = self.tx.reserve(), if has_pending && has_room => match permit {
                Ok(permit) => {
                    send_front(&mut self.pending, &self.queued, permit);
                    Event::Forwarded
                }
                Err(_) => Event::CallerGone,
            },
            _ = queued.space.notified(), if has_pending && !has_room => Event::Room,
            // PRIORITY 5: read more from the server, only when nothing is queued.
            read = read_more(&mut self.reader, &mut self.read_buf), if !has_pending => Event::Read(read),
            // PRIORITY 5b: the linger is over: read what came meanwhile.
            () = self.linger.over(), if !has_pending && self.linger.lingering() => Event::LingerOver,
            // PRIORITY 6: the silence watchdog, only while reading.
            _ = self.silence.as_mut(), if !has_pending => Event::Silence,
        };
        if has_pending {
            // The socket was not read during this wait: whatever silence there was
            // is ours, not the server's.
            self.heard();
        }
        match event {
            Event::Command(Some(Command::Close(reply))) => {
                let _ = reply.send(self.finish().await);
                Ok(false)
            }
            Event::Command(None) | Event::CallerGone => Ok(false),
            Event::StatusDue => self.send_status(false).await.map(|()| true),
            Event::Forwarded | Event::Room => Ok(self.forward_ready()),
            Event::Read(read) => {
                read.map_err(|source| PgError::Io {
                    context: format!("reading replication stream from {}", self.target),
                    source,
                })?;
                self.heard();
                self.parse_frames().await?;
                // Linger only after a read that ended a transaction: a keepalive
                // alone is no reason to hold back the event after it, and the rest
                // of a transaction whose first messages came alone is read at once.
                // Reads happen only with nothing pending, so `pending` holds exactly
                // what this read brought.
                let last_wal = self.pending.iter().rev().find(|m| m.is_wal_data());
                if last_wal.is_some_and(ReplicationMessage::is_commit) {
                    self.linger.after_read();
                }
                Ok(self.forward_ready())
            }
            Event::LingerOver => {
                self.linger.end();
                Ok(true)
            }
            Event::Silence if !self.silence_due() => Ok(true),
            Event::Silence if self.pinged => Err(PgError::StreamTimeout {
                target: self.target.clone(),
                silence:
                    "no message from the server, not even a keepalive after one was requested,",
                after: self.receive_timeout,
            }),
            Event::Silence => {
                tracing::debug!(silent_for = ?self.last_heard.elapsed(), "replication stream is quiet; requesting a reply");
                self.pinged = true;
                self.silence_due();
                self.send_status(true).await.map(|()| true)
            }
        }
    }

    /// Whether the silence limit passed: half the receive timeout without a byte
    /// (then a reply is requested), all of it once one was requested (then the
    /// connection is dead). When it has not, the watchdog is moved to the limit.
    fn silence_due(&mut self) -> bool {
        let limit = if self.pinged {
            self.receive_timeout
        } else {
            self.receive_timeout / 2
        };
        let deadline = self.last_heard + limit;
        if tokio::time::Instant::now() >= deadline {
            return true;
        }
        self.silence.as_mut().reset(deadline);
        false
    }

    /// Hand every parsed message to the caller while the channel has room (in
    /// messages and in bytes), in one go (no round of the select per message).
    /// `false` when the caller is gone.
    fn forward_ready(&mut self) -> bool {
        while !self.pending.is_empty() && self.queued.has_room() {
            match self.tx.try_reserve() {
                Ok(permit) => send_front(&mut self.pending, &self.queued, permit),
                Err(mpsc::error::TrySendError::Full(())) => return true,
                Err(mpsc::error::TrySendError::Closed(())) => return false,
            }
        }
        true
    }

    /// Something arrived (or reading resumed): restart the silence clock.
    fn heard(&mut self) {
        self.last_heard = tokio::time::Instant::now();
        self.pinged = false;
    }

    /// Parse every complete frame in the read buffer; answer keepalives now. Each
    /// payload is copied out (see the module doc), so the buffer is the task's alone
    /// again once this returns and the next read reuses it.
    async fn parse_frames(&mut self) -> Result<(), PgError> {
        while let Some(backend) = parse_backend(&mut self.read_buf)? {
            let message = match backend {
                Backend::Message(Message::CopyData(body)) => {
                    parse_copy_data(Bytes::copy_from_slice(body.data()))?
                }
                Backend::Message(Message::CopyDone) => return Err(PgError::StreamEnded),
                // At server shutdown (smart/fast), once the client confirmed all it was
                // sent, the walsender ends the stream with CommandComplete "COPY 0" and
                // no CopyDone (walsender.c, WalSndDone), then exits: resume later.
                Backend::Message(Message::CommandComplete(_)) => return Err(PgError::StreamEnded),
                Backend::Message(Message::ErrorResponse(body)) => {
                    return Err(PgError::Db(
                        crate::pg::client::connection::DbError::from_fields(body.fields()),
                    ))
                }
                Backend::Message(Message::NoticeResponse(body)) => {
                    let notice = crate::pg::client::connection::DbError::from_fields(body.fields());
                    if stream_notice_is_fatal(&notice) {
                        return Err(PgError::Db(notice));
                    }
                    crate::pg::client::connection::log_notice(&notice);
                    continue;
                }
                Backend::Message(Message::ParameterStatus(_)) => continue,
                _ => {
                    return Err(unexpected("streaming", "a non-CopyData message"));
                }
            };
            if let ReplicationMessage::PrimaryKeepalive {
                reply_requested: true,
                ..
            } = message
            {
                self.send_status(false).await?;
            }
            self.pending.push_back(message);
        }
        if oversized(&self.read_buf) {
            let mut smaller = BytesMut::with_capacity(READ_CHUNK);
            smaller.extend_from_slice(&self.read_buf);
            self.read_buf = smaller;
        }
        Ok(())
    }

    /// Send a standby status update; `reply_requested` asks the server to answer
    /// with a keepalive at once.
    async fn send_status(&mut self, reply_requested: bool) -> Result<(), PgError> {
        let flush = Lsn(self.feedback.flush.load(Ordering::Acquire));
        encode_standby_status(
            flush,
            flush,
            flush,
            now_pg_micros(),
            reply_requested,
            &mut self.write_buf,
        );
        self.write_out().await?;
        self.feedback.sent.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(flush = %flush, "sent standby status update");
        Ok(())
    }

    /// Write the buffer out; a write that cannot complete within the receive
    /// timeout (the server stopped reading, or the path is black-holed) is fatal to
    /// the stream like silence is.
    async fn write_out(&mut self) -> Result<(), PgError> {
        let write = async {
            self.writer.write_all(&self.write_buf).await?;
            self.writer.flush().await
        };
        let result = tokio::time::timeout(self.receive_timeout, write).await;
        self.write_buf.clear();
        match result {
            Ok(written) => written.map_err(|source| PgError::Io {
                context: format!("writing to replication stream of {}", self.target),
                source,
            }),
            Err(_) => Err(PgError::StreamTimeout {
                target: self.target.clone(),
                silence: "a write to the server did not complete",
                after: self.receive_timeout,
            }),
        }
    }

    /// Final status update, then CopyDone and Terminate: the server records the flush
    /// position before it sees the connection end.
    async fn finish(&mut self) -> Result<(), PgError> {
        self.send_status(false).await?;
        frontend::copy_done(&mut self.write_buf);
        frontend::terminate(&mut self.write_buf);
        self.write_out().await?;
        let _ = self.writer.shutdown().await;
        Ok(())
    }
}

async fn read_more(
    reader: &mut ReadHalf<Box<dyn Transport>>,
    buf: &mut BytesMut,
) -> std::io::Result<()> {
    buf.reserve(READ_CHUNK);
    match reader.read_buf(buf).await? {
        0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
        _ => Ok(()),
    }
}

/// A notice on the replication stream that means changes are being skipped.
///
/// PostgreSQL 18 no longer fails decoding when a publication named in
/// `publication_names` is missing at a WAL position: pgoutput warns
/// (SQLSTATE `55000`, "skipped loading publication …") and goes on *without*
/// sending the
/// changes of that publication. Earlier versions raise the same condition as an
/// ERROR. Both must stop the relay before it confirms past the skipped changes,
/// so the warning is turned into the error it replaces.
fn stream_notice_is_fatal(notice: &crate::pg::client::connection::DbError) -> bool {
    notice.message.starts_with(SKIPPED_PUBLICATION)
}

/// The start of PostgreSQL 18's warning for a publication missing while decoding.
pub const SKIPPED_PUBLICATION: &str = "skipped loading publication";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skipped_publication_warning_stops_the_stream() {
        let notice = |code: &str, message: &str| crate::pg::client::connection::DbError {
            severity: "WARNING".into(),
            code: code.into(),
            message: message.into(),
            ..Default::default()
        };
        // As PostgreSQL 18.4 sends it (seen on the wire).
        assert!(stream_notice_is_fatal(&notice(
            "55000",
            "skipped loading publication \"pgoutbox\""
        )));
        assert!(!stream_notice_is_fatal(&notice(
            "25P01",
            "there is no transaction in progress"
        )));
    }

    #[test]
    fn proto_version_by_server() {
        assert_eq!(pgoutput_proto_version(130012), 1);
        assert_eq!(pgoutput_proto_version(140000), 2);
        assert_eq!(pgoutput_proto_version(150018), 3);
        assert_eq!(pgoutput_proto_version(160000), 4);
        assert_eq!(pgoutput_proto_version(180001), 4);
    }
}
