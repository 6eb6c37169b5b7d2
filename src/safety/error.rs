//! [`SafetyError`]: every slot-safety finding, each naming the slot, the positions
//! and the recovery.

use std::path::PathBuf;

use crate::pg::lsn::Lsn;
use crate::pg::names::quote_literal;
use crate::pg::source::catalog::CatalogError;
use crate::state::StateError;

/// A finding that stops the relay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetyError {
    /// The state file is unusable.
    #[error(transparent)]
    State(#[from] StateError),
    /// A catalog query failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The publication stopped covering the outbox (a DDL behind the relay's back).
    #[error(transparent)]
    PublicationChanged(Box<super::publication::PublicationChanged>),
    /// The slot is ahead of the state file.
    #[error("replication slot \"{slot}\" is at {slot_lsn}, ahead of {persisted}, the last position this relay confirmed (state file {path}): it was advanced (pg_replication_slot_advance) or dropped and re-created behind the relay's back, so events committed between {persisted} and {slot_lsn} may never have been relayed; fix: {republish}, then start once with --accept-slot-reset; or accept the gap: start once with --accept-slot-reset")]
    SlotAdvanced {
        slot: String,
        slot_lsn: Lsn,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The slot is gone but the relay has relayed from it.
    #[error("replication slot \"{slot}\" does not exist, but this relay confirmed up to {persisted} on it (state file {path}): it was dropped, or this server is a failover target or a restored backup without it; a new slot would start at the current WAL position and skip every event committed after {persisted}, so pgoutbox does not create one; fix: if --database-url points at the wrong server, correct it; otherwise {republish}, then start once with --accept-slot-reset to create the slot")]
    SlotMissing {
        slot: String,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The server was promoted (a later timeline of the same cluster) without the slot.
    #[error("replication slot \"{slot}\" does not exist on this server, which was promoted from timeline {from} to {to} after this relay confirmed up to {persisted} on the old primary (state file {path}): no copy of the slot was kept on it (PostgreSQL 16 and older have no failover slots; on 17+ the slot lacks failover = true or the standby lacks sync_replication_slots = on), and a new slot would start at the current WAL position and skip every event committed after {persisted}, so pgoutbox does not create one; fix: {republish}, then start once with --accept-slot-reset to create the slot; to follow the next failover by itself, use failover slots (PostgreSQL 17+: --slot-failover, sync_replication_slots = on on the standby, synchronized_standby_slots on the primary) or let the HA manager keep the slot on every node (Patroni permanent slots); see \"Failover\" in the README")]
    SlotMissingAfterPromotion {
        slot: String,
        from: u32,
        to: u32,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The server is on an older timeline than the relay relayed on.
    #[error("the server is on timeline {server}, but this relay already relayed slot \"{slot}\" on timeline {recorded} of the same cluster up to {persisted} (state file {path}): --database-url points at a former primary that was not rewound after a failover, or at a backup restored from before it, whose history after the switch differs from what was relayed; fix: point --database-url at the current primary (with several hosts, add target_session_attrs=read-write); if this server is deliberately the primary again, {republish}, then start once with --accept-slot-reset")]
    TimelineBehind {
        slot: String,
        recorded: u32,
        server: u32,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The slot was invalidated: its WAL is gone.
    #[error("replication slot \"{slot}\" was invalidated ({observed}): PostgreSQL removed WAL the slot still needed (max_slot_wal_keep_size was exceeded while the relay was behind or stopped), so the events after {confirmed} can no longer be decoded from it; fix: drop it with SELECT pg_drop_replication_slot({slot_literal}), {republish}, then start once with --accept-slot-reset to create a new slot; raise max_slot_wal_keep_size (and alert on wal_status = unreserved) so it does not happen again", slot_literal = quote_literal(.slot))]
    SlotLost {
        slot: String,
        observed: String,
        confirmed: Lsn,
        republish: Box<str>,
    },
    /// The publication is gone but the relay has relayed through it.
    #[error("publication \"{publication}\" does not exist, but this relay relayed slot \"{slot}\" through it up to {persisted} (state file {path}); re-creating it silently would not help, because the slot's pending changes predate a new publication and PostgreSQL cannot decode them with it; fix: {republish}, drop the slot with SELECT pg_drop_replication_slot({slot_literal}), then start once with --accept-slot-reset to create publication and slot again", slot_literal = quote_literal(.slot))]
    PublicationMissing {
        publication: String,
        slot: String,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The server could not decode the slot because the publication is missing.
    #[error("PostgreSQL cannot decode replication slot \"{slot}\": {server}; publication \"{publication}\" was dropped (or dropped and re-created) at a WAL position the slot has not passed yet, and reconnecting cannot fix that; fix: re-create the publication if it is gone (pgoutbox setup --print-sql shows the statement), {republish}, drop the slot with SELECT pg_drop_replication_slot({slot_literal}), then start once with --accept-slot-reset", slot_literal = quote_literal(.slot))]
    PublicationGone {
        publication: String,
        slot: String,
        server: String,
        republish: Box<str>,
    },
    /// The server is another cluster than the one the state file was written for.
    #[error("the server's system identifier is {server_system_id}, but this relay relayed slot \"{slot}\" on system {recorded_system_id} up to {persisted} (state file {path}): --database-url now points at another cluster (a restored backup, a logical copy, a new server); fix: point --database-url back at the original server; if the move is deliberate, {republish} on the new server, then start once with --accept-slot-reset")]
    SystemChanged {
        slot: String,
        server_system_id: String,
        recorded_system_id: String,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
}
