//! Failover checks (PostgreSQL 17+): whether the relay's slot is a failover slot,
//! and whether the primary holds logical walsenders back for its standbys
//! (`synchronized_standby_slots`). Pure verdicts over what `check` already read.
//!
//! Neither finding stops the relay (`ok = true` with the fix as a suggestion): a slot
//! without failover works until a failover, which then fails closed
//! ([`crate::safety`]); without `synchronized_standby_slots` a failover may leave the
//! synchronized slot past the new primary's WAL. On PostgreSQL ≤ 16 one line says
//! there are no failover slots and where the README explains the options.

use super::Check;
use crate::pg::source::catalog::SlotInfo;
use crate::pg::source::failover;

/// What the failover checks look at.
pub(super) struct FailoverInput<'a> {
    pub version_num: i32,
    /// `synchronized_standby_slots` (`None` before 17).
    pub standby_slots: Option<&'a str>,
    pub slot: &'a str,
    /// The connection string without its password, for the printed fix.
    pub url: &'a str,
    /// The slot, when it exists.
    pub info: Option<&'a SlotInfo>,
    /// `--slot-failover`.
    pub wanted: bool,
}

/// `slot_failover` and `synchronized_standby_slots`.
pub(super) fn failover_checks(input: &FailoverInput<'_>) -> Vec<Check> {
    if !failover::supported(input.version_num) {
        return vec![Check::pass(
            "slot_failover",
            input.slot,
            "not available before PostgreSQL 17: the slot exists only on this server, so a failover loses it and the relay stops (fails closed) on the promoted server",
        )
        .suggest("see \"Failover\" in the README: let the HA manager keep the slot on every node (Patroni permanent slots), or recover with --accept-slot-reset after republishing")];
    }
    if !input.wanted {
        return vec![Check::pass(
            "slot_failover",
            input.slot,
            "off (--slot-failover false): the slot is not copied to standbys",
        )];
    }
    vec![slot_check(input), standby_slots_check(input)]
}

fn slot_check(input: &FailoverInput<'_>) -> Check {
    let name = "slot_failover";
    match input.info {
        None => Check::pass(
            name,
            input.slot,
            "the slot does not exist yet; setup or run creates it with failover = true",
        ),
        Some(info) if info.failover == Some(true) => {
            let synced = if info.synced == Some(true) {
                " (this server holds a synchronized copy: it is a standby, or was promoted from one)"
            } else {
                ""
            };
            Check::pass(name, input.slot, format!("failover = true{synced}"))
        }
        Some(_) => Check::pass(
            name,
            input.slot,
            "failover = false: standbys do not get a copy, so after a failover the relay stops on the promoted server (fails closed)",
        )
        .suggest(failover::enable_fix(input.slot, input.url)),
    }
}

fn standby_slots_check(input: &FailoverInput<'_>) -> Check {
    let name = "synchronized_standby_slots";
    match input.standby_slots.map(str::trim) {
        Some(value) if !value.is_empty() => Check::pass(name, "server", value),
        _ => Check::pass(
            name,
            "server",
            "empty: logical walsenders do not wait for the standbys, so a synchronized slot may be ahead of the WAL a standby received",
        )
        .suggest(failover::standby_slots_fix()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(failover: Option<bool>) -> SlotInfo {
        SlotInfo {
            name: "s".into(),
            plugin: Some("pgoutput".into()),
            slot_type: "logical".into(),
            database: Some("shop".into()),
            active: false,
            active_pid: None,
            temporary: false,
            restart_lsn: None,
            confirmed_flush_lsn: None,
            wal_status: Some("reserved".into()),
            failover,
            synced: failover.map(|_| false),
        }
    }

    fn input<'a>(
        version_num: i32,
        info: Option<&'a SlotInfo>,
        standby: Option<&'a str>,
    ) -> FailoverInput<'a> {
        FailoverInput {
            version_num,
            standby_slots: standby,
            slot: "s",
            url: "postgres://app@db/shop?sslmode=prefer",
            info,
            wanted: true,
        }
    }

    #[test]
    fn before_17_one_line_points_at_the_readme() {
        let info = slot(None);
        let checks = failover_checks(&input(160004, Some(&info), None));
        assert_eq!(checks.len(), 1);
        assert!(checks[0].ok);
        assert!(checks[0]
            .observed
            .contains("not available before PostgreSQL 17"));
        assert!(checks[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("Patroni permanent slots"));
    }

    #[test]
    fn on_17_the_slot_and_the_setting_with_their_fixes() {
        let off = slot(Some(false));
        let checks = failover_checks(&input(170004, Some(&off), Some("")));
        let [slot_check, standby] = &checks[..] else {
            panic!("{checks:?}")
        };
        assert!(
            slot_check.observed.starts_with("failover = false"),
            "{slot_check:?}"
        );
        assert!(slot_check
            .fix
            .as_deref()
            .unwrap()
            .contains("ALTER_REPLICATION_SLOT \"s\" ( FAILOVER true )"));
        assert!(standby.observed.starts_with("empty"), "{standby:?}");
        assert!(standby
            .fix
            .as_deref()
            .unwrap()
            .starts_with("ALTER SYSTEM SET synchronized_standby_slots"));
        assert!(checks.iter().all(|c| c.ok), "warnings, not failures");

        let on = slot(Some(true));
        let checks = failover_checks(&input(170004, Some(&on), Some("standby1")));
        assert_eq!(checks[0].observed, "failover = true");
        assert_eq!(checks[1].observed, "standby1");
        assert!(checks.iter().all(|c| c.fix.is_none()), "{checks:?}");

        let missing = failover_checks(&input(170004, None, Some("sb")));
        assert!(missing[0]
            .observed
            .contains("creates it with failover = true"));
    }

    #[test]
    fn turned_off_says_so_without_a_fix() {
        let off = slot(Some(false));
        let mut i = input(180000, Some(&off), Some(""));
        i.wanted = false;
        let checks = failover_checks(&i);
        assert_eq!(checks.len(), 1);
        assert!(checks[0].observed.contains("--slot-failover false"));
        assert!(checks[0].fix.is_none());
    }
}
