//! Logical decoding messages in `tail`: an outbox message (`--message-prefix`,
//! transactional) is shown like a row, op `message`, source `message.<prefix>`.
//!
//! Invariants: the same content parser and mapping as `run`
//! ([`crate::outbox::message`]); a message `run` would not relay is never shown as
//! an event: a bad one is a WARN saying what `run` would do (stop, or
//! `--on-invalid bad-message`), a non-transactional one a WARN that `run` ignores it
//! by default; other prefixes (the heartbeat's included) are passed silently.

use std::io::Write;

use super::format::TailEvent;
use super::{TailError, TailState};
use crate::outbox::message::{MessageRow, MESSAGE_NAMESPACE};
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::LogicalMessage;

impl TailState<'_> {
    /// Show `message` (at `lsn`) when it is an outbox event.
    pub(super) fn on_message(
        &mut self,
        message: &LogicalMessage,
        lsn: Lsn,
        out: &mut dyn Write,
    ) -> Result<(), TailError> {
        let cfg = &self.cfg.messages;
        if !cfg.accepts(&message.prefix) {
            return Ok(());
        }
        if message.flags & LogicalMessage::TRANSACTIONAL == 0 {
            tracing::warn!(prefix = %message.prefix, lsn = %lsn, "non-transactional message with an outbox prefix: `run` ignores it (counted) unless --message-non-transactional relay");
            return Ok(());
        }
        let parsed = MessageRow::parse(&message.content, &message.prefix, &cfg.mapping.payload)
            .and_then(|row| Ok((row.resolve(&cfg.mapping)?, row)));
        let (mapping, row) = match parsed {
            Ok(parsed) => parsed,
            Err(err) => {
                tracing::warn!(prefix = %message.prefix, lsn = %lsn, error = %err, "bad-message: not shown; `run` stops on it (or applies --on-invalid bad-message)");
                return Ok(());
            }
        };
        let event = mapping.event(&row.tuple);
        let source = TableName {
            schema: MESSAGE_NAMESPACE.into(),
            name: message.prefix.clone(),
        };
        let line = TailEvent {
            lsn,
            commit_lsn: self.txn.commit_lsn,
            xid: self.txn.xid,
            commit_time: self.txn.commit_time,
            table: &source,
            op: "message",
            event: &event,
            template: &cfg.template,
        };
        super::print(self.cfg, &mut self.printed, &line, out)
    }
}
