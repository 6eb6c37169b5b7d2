//! The relay core's side of the end-to-end heartbeat ([`crate::heartbeat`]): a
//! message with the heartbeat prefix is timed (when it is this relay's) and, being
//! non-transactional, moves the confirmable position on a quiet database.
//!
//! Invariants: a heartbeat never reaches the sink and never counts as an event; its
//! LSN is confirmable only like a keepalive's WAL end — no transaction open and
//! nothing in flight ([`AckTracker::confirm_idle`](super::AckTracker::confirm_idle)),
//! so it never passes an unacked record.

use super::Relay;
use crate::heartbeat;
use crate::pg::source::pgoutput::LogicalMessage;

impl Relay<'_> {
    /// A message with the heartbeat prefix.
    pub(super) fn on_heartbeat(&mut self, message: &LogicalMessage) {
        heartbeat::returned(&self.metrics, message);
        // A non-transactional message arrives outside Begin/Commit, in WAL order:
        // with nothing open or in flight, nothing before it is undelivered. Without
        // this a database whose only writes are heartbeats would see its slot move
        // only on the walsender's keepalives.
        if self.txn.is_none() && !message.transactional() {
            self.deliver.confirm_idle(message.lsn);
        }
    }
}
