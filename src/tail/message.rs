//! Logical decoding messages in `tail`: an outbox message (`--message-prefix`,
//! transactional) is shown like a row, op `message`, source `message.<prefix>`.
//!
//! Invariants: the same record path as `run`
//! ([`Messages::build`](crate::pipeline::relay::message::Messages::build)): a bad
//! message is shown as the poison event `run` sees (`bad-message`, with what
//! `--on-invalid` does and the dead letter it sends); a non-transactional one is
//! a WARN that `run` ignores it by default; other prefixes (the heartbeat's
//! included) are passed silently.

use std::io::Write;

use super::format::{Outcome, TailEvent};
use super::{TailError, TailState};
use crate::outbox::invalid::Origin;
use crate::outbox::message::{MessageRow, MESSAGE_NAMESPACE};
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::LogicalMessage;
use crate::pipeline::record::{self, Built};

impl TailState<'_> {
    /// Show `message` (at `lsn`) when it is an outbox event.
    pub(super) fn on_message(
        &mut self,
        message: &LogicalMessage,
        lsn: Lsn,
        out: &mut dyn Write,
    ) -> Result<(), TailError> {
        let cfg = &self.cfg.pipeline.messages;
        if !cfg.accepts(&message.prefix) {
            return Ok(());
        }
        if message.flags & LogicalMessage::TRANSACTIONAL == 0 {
            tracing::warn!(prefix = %message.prefix, lsn = %lsn, "non-transactional message with an outbox prefix: `run` ignores it (counted) unless --message-non-transactional relay");
            return Ok(());
        }
        // `run`'s record path (and poison diagnosis) for the message…
        let commit_time = self.txn.commit_time;
        let pipeline = &self.cfg.pipeline;
        let (_, built) = self
            .messages
            .build(pipeline, &self.metrics, message, commit_time);
        // …and the row it carries, for the event fields (none when it is not one).
        let event = MessageRow::parse(&message.content, &message.prefix, &cfg.mapping.payload)
            .and_then(|row| Ok(row.resolve(&cfg.mapping)?.event(&row.tuple)))
            .unwrap_or_default();
        let source = TableName {
            schema: MESSAGE_NAMESPACE.into(),
            name: message.prefix.clone(),
        };
        let origin = Origin {
            table: Some(format!("message with prefix {:?}", message.prefix)),
            lsn: Some(message.lsn.to_string()),
        };
        let decided;
        let outcome = match &built {
            Built::Send(record) => Outcome::Send(record),
            Built::Poison(record, invalid) => {
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
            commit_lsn: self.txn.commit_lsn,
            xid: self.txn.xid,
            commit_time,
            table: &source,
            op: "message",
            event: &event,
            template: &cfg.template,
            outcome,
        };
        super::print(self.cfg, &mut self.printed, &line, out)
    }
}
