//! Failover slots (PostgreSQL 17+): a logical slot created with `failover` is
//! copied to physical standbys that run with `sync_replication_slots = on`, so a
//! promoted standby has the relay's slot and the relay follows it
//! ([`crate::safety`]).
//!
//! Owns the version rule, the SQL that creates a slot with or without `failover`, the
//! settings a working set-up needs, and the fixes `check` prints. On PostgreSQL ≤ 16
//! there is no `failover` property: the option is a no-op there and the slot exists
//! only on the server it was created on.
//!
//! The primary must also list the standby's physical slot in
//! `synchronized_standby_slots`: otherwise the relay may receive (and confirm)
//! changes the standby has not received yet, and after a failover the synchronized
//! slot points past the new primary's WAL — those events were delivered but never
//! happened there. See
//! <https://www.postgresql.org/docs/17/logicaldecoding-explanation.html#LOGICALDECODING-REPLICATION-SLOTS-SYNCHRONIZATION>.

use crate::pg::names::{quote_ident, quote_literal};

/// First server version with failover slots (`server_version_num`).
pub const MIN_VERSION_NUM: i32 = 170000;

/// Whether a server of `version_num` has failover slots.
pub fn supported(version_num: i32) -> bool {
    version_num >= MIN_VERSION_NUM
}

/// The statement creating `slot` for pgoutput: with the `failover` argument
/// (`pg_create_logical_replication_slot(name, plugin, temporary, twophase,
/// failover)`) on a server that has it and when `failover` is wanted, else the
/// two-argument form every version accepts.
pub fn create_slot_sql(slot: &str, failover: bool, version_num: i32) -> String {
    format!("SELECT {}", create_slot_call(slot, failover, version_num))
}

/// The function call of [`create_slot_sql`] alone (for `PERFORM`).
pub fn create_slot_call(slot: &str, failover: bool, version_num: i32) -> String {
    let extra = if failover && supported(version_num) {
        ", false, false, true"
    } else {
        ""
    };
    format!(
        "pg_create_logical_replication_slot({}, 'pgoutput'{extra})",
        quote_literal(slot)
    )
}

/// How to turn `failover` on for an existing slot: a replication command (there is
/// no SQL function for it), run while no relay holds the slot. `url` is the relay's
/// connection string without its password ([`crate::pg::client::conninfo::ConnInfo::redacted`]).
pub fn enable_fix(slot: &str, url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!(
        "stop the relay, then run over a replication connection: psql \"{url}{sep}replication=database\" -c 'ALTER_REPLICATION_SLOT {} ( FAILOVER true )'; on each standby set sync_replication_slots = on, hot_standby_feedback = on, primary_slot_name and a dbname in primary_conninfo; or pass --slot-failover false to keep the slot on this server only",
        quote_ident(slot)
    )
}

/// How to set `synchronized_standby_slots` on the primary.
pub fn standby_slots_fix() -> &'static str {
    "ALTER SYSTEM SET synchronized_standby_slots = '<physical slot of each failover standby>'; SELECT pg_reload_conf(); (without it the relay can confirm changes a standby has not received, and after a failover the synchronized slot points past the new primary's WAL)"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failover_argument_only_on_17_and_when_wanted() {
        let with = "SELECT pg_create_logical_replication_slot('s', 'pgoutput', false, false, true)";
        let without = "SELECT pg_create_logical_replication_slot('s', 'pgoutput')";
        assert_eq!(create_slot_sql("s", true, 170000), with);
        assert_eq!(create_slot_sql("s", true, 180001), with);
        assert_eq!(create_slot_sql("s", false, 170000), without);
        assert_eq!(create_slot_sql("s", true, 160009), without);
        assert_eq!(
            create_slot_sql("it's", false, 150000),
            "SELECT pg_create_logical_replication_slot('it''s', 'pgoutput')"
        );
    }

    #[test]
    fn fixes_name_the_slot_and_the_connection() {
        let fix = enable_fix("s1", "postgres://app@db:5432/shop?sslmode=require");
        let psql = "psql \"postgres://app@db:5432/shop?sslmode=require&replication=database\"";
        assert!(fix.contains(psql), "{fix}");
        let alter = "ALTER_REPLICATION_SLOT \"s1\" ( FAILOVER true )";
        assert!(fix.contains(alter), "{fix}");
        assert!(fix.contains("--slot-failover false"), "{fix}");
        let bare = enable_fix("s", "postgres://app@db/shop");
        assert!(
            bare.contains("postgres://app@db/shop?replication=database"),
            "{bare}"
        );
        assert!(standby_slots_fix().contains("synchronized_standby_slots"));
    }
}
