//! What a replication stream holds while its caller is slow: the queue towards the
//! caller, bounded in messages ([`QUEUE_MESSAGES`]) and in bytes of WAL data
//! ([`QUEUE_BYTES`], one message at least whatever its size), and the socket read
//! buffer ([`READ_CHUNK`], given back after a larger message: [`READ_BUF_KEEP`]).
//!
//! Invariant: the bytes counted in [`Queued`] are exactly the WAL data of the
//! messages in the channel — added when one is handed over ([`send_front`]), taken
//! off when the caller receives it ([`Queued::taken`]) — and the task is woken when
//! the caller brings the queue back under the budget.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;
use tokio::sync::{mpsc, Notify};

use super::ReplicationMessage;
use crate::pg::client::connection::PgError;

/// Messages queued towards the caller before the task stops handing over (and so
/// stops reading the socket).
pub const QUEUE_MESSAGES: usize = 1024;
/// Bytes of WAL data queued towards the caller before the task stops handing over:
/// a backlog of 100 KB rows would otherwise queue [`QUEUE_MESSAGES`] of them
/// (100 MB) outside the relay's in-flight window. 1 MiB is still thousands of
/// small rows, so a backlog of those is bounded by the message count as before.
pub const QUEUE_BYTES: usize = 1 << 20;
/// Bytes requested per socket read.
pub(super) const READ_CHUNK: usize = 128 * 1024;
/// A read buffer grown past this (for one message larger than [`READ_CHUNK`]) is
/// replaced by a [`READ_CHUNK`] one once that message was parsed.
pub(super) const READ_BUF_KEEP: usize = 4 * READ_CHUNK;

/// The bytes budget of the queue towards the caller ([`QUEUE_BYTES`]).
#[derive(Default)]
pub(super) struct Queued {
    /// WAL data bytes of the messages in the channel ([`queued_size`]).
    pub(super) bytes: AtomicUsize,
    /// Wakes the task when the caller took the queue back under the budget.
    pub(super) space: Notify,
}

impl Queued {
    /// Whether the task may hand over another message.
    pub(super) fn has_room(&self) -> bool {
        self.bytes.load(Ordering::Acquire) < QUEUE_BYTES
    }

    /// The caller took `message`: wake the task if that made room.
    pub(super) fn taken(&self, message: &ReplicationMessage) {
        let size = queued_size(message);
        if size == 0 {
            return;
        }
        let before = self.bytes.fetch_sub(size, Ordering::AcqRel);
        if before >= QUEUE_BYTES && before - size < QUEUE_BYTES {
            self.space.notify_one();
        }
    }
}

/// What a message counts against [`QUEUE_BYTES`]: its WAL data.
pub(super) fn queued_size(message: &ReplicationMessage) -> usize {
    match message {
        ReplicationMessage::XLogData { data, .. } => data.len(),
        ReplicationMessage::PrimaryKeepalive { .. } => 0,
    }
}

/// Whether the read buffer grew past [`READ_BUF_KEEP`] for a large message that is
/// parsed now: what is left (the start of the next frame, whose length the header
/// may already tell) fits in [`READ_CHUNK`]. A large frame still arriving keeps it.
pub(super) fn oversized(buf: &BytesMut) -> bool {
    let next_frame = match buf.get(..5) {
        Some(head) => usize::try_from(u32::from_be_bytes([head[1], head[2], head[3], head[4]]))
            .map_or(usize::MAX, |len| len.saturating_add(1)),
        None => buf.len(),
    };
    buf.capacity() > READ_BUF_KEEP && buf.len() <= READ_CHUNK && next_frame <= READ_CHUNK
}

/// Hand the oldest parsed message over, counting it against the queue's budget.
pub(super) fn send_front(
    pending: &mut VecDeque<ReplicationMessage>,
    queued: &Queued,
    permit: mpsc::Permit<'_, Result<ReplicationMessage, PgError>>,
) {
    if let Some(message) = pending.pop_front() {
        queued
            .bytes
            .fetch_add(queued_size(&message), Ordering::AcqRel);
        permit.send(Ok(message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grown_read_buffer_is_given_back_once_its_large_frame_is_parsed() {
        let frame_head = |len: u32| {
            let mut b = BytesMut::with_capacity(2 * READ_BUF_KEEP);
            b.extend_from_slice(b"d");
            b.extend_from_slice(&len.to_be_bytes());
            b
        };
        // The start of a small frame: give the large buffer back.
        assert!(oversized(&frame_head(300)));
        assert!(oversized(&BytesMut::with_capacity(2 * READ_BUF_KEEP)));
        // A large frame still arriving keeps the buffer it needs.
        assert!(!oversized(&frame_head(1 << 20)));
        // A buffer of the usual size is kept whatever it holds.
        let mut usual = BytesMut::with_capacity(READ_CHUNK);
        usual.extend_from_slice(&[b'd', 0, 0, 1, 0]);
        assert!(!oversized(&usual));
    }
}
