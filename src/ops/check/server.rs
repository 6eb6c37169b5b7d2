//! Server-wide checks: version, `wal_level`, slot and walsender headroom, the role's
//! attributes, and `max_slot_wal_keep_size`.
//!
//! Owns the one query that reads every server setting the checks need, so the
//! verdicts are pure functions of [`Facts`] (unit-tested without a server).

use tokio_postgres::Client;

use super::Check;
use crate::pg::names::quote_ident;

/// Oldest supported server: `pg_replication_slots.wal_status` exists since 13.
const MIN_VERSION_NUM: i32 = 130000;

/// Appended to the `wal_level` fix: the way out when the setting is out of reach.
pub(super) const POLL_HINT: &str = "or, where wal_level cannot be changed (managed \
     server, no restart), relay by polling the table instead: `pgoutbox check --source poll` \
     lists what that mode needs, then `pgoutbox setup --source poll` and `run --source poll`";

/// `server_version`: 13 or later (both modes; the logical mode reads
/// `pg_replication_slots.wal_status`).
pub(super) fn version_check(facts: &Facts) -> Check {
    if facts.version_num >= MIN_VERSION_NUM {
        Check::pass("server_version", "server", &facts.version)
    } else {
        Check::fail(
            "server_version",
            "server",
            &facts.version,
            "upgrade to PostgreSQL 13 or later (pgoutbox needs pg_replication_slots.wal_status)",
        )
    }
}

/// Server settings and usage read in one query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Facts {
    /// The login role (`session_user`): the one whose attributes admit a replication
    /// connection.
    pub role: String,
    pub database: String,
    pub version_num: i32,
    pub version: String,
    pub wal_level: String,
    pub max_slots: i64,
    pub used_slots: i64,
    pub max_senders: i64,
    pub used_senders: i64,
    /// `None` before PostgreSQL 13.
    pub max_slot_wal_keep_size: Option<String>,
    /// `None` before PostgreSQL 17.
    pub synchronized_standby_slots: Option<String>,
}

pub(super) async fn facts(client: &Client) -> Result<Facts, tokio_postgres::Error> {
    // pg_stat_replication has one row per walsender process, logical ones included,
    // and shows the rows (if not their details) to every role.
    let row = client
        .query_one(
            "SELECT session_user::text, current_database()::text, \
                    current_setting('server_version_num')::int, current_setting('server_version'), \
                    current_setting('wal_level'), \
                    current_setting('max_replication_slots')::bigint, \
                    (SELECT count(*) FROM pg_replication_slots), \
                    current_setting('max_wal_senders')::bigint, \
                    (SELECT count(*) FROM pg_stat_replication), \
                    current_setting('max_slot_wal_keep_size', true), \
                    current_setting('synchronized_standby_slots', true)",
            &[],
        )
        .await?;
    Ok(Facts {
        role: row.get(0),
        database: row.get(1),
        version_num: row.get(2),
        version: row.get(3),
        wal_level: row.get(4),
        max_slots: row.get(5),
        used_slots: row.get(6),
        max_senders: row.get(7),
        used_senders: row.get(8),
        max_slot_wal_keep_size: row.get(9),
        synchronized_standby_slots: row.get(10),
    })
}

/// A value to suggest for a setting that ran out: double it, and at least one more
/// than is in use.
fn raised(max: i64, used: i64) -> i64 {
    (max * 2).max(used + 1)
}

/// `server_version`, `wal_level`, `max_replication_slots`, `max_wal_senders`.
///
/// Headroom: a slot is needed only when ours does not exist yet; a walsender only
/// when ours is not already streaming (an active slot means the relay holds one).
pub(super) fn server_checks(facts: &Facts, slot_exists: bool, slot_active: bool) -> Vec<Check> {
    let mut checks = vec![version_check(facts)];
    checks.push(if facts.wal_level == "logical" {
        Check::pass("wal_level", "server", &facts.wal_level)
    } else {
        Check::fail(
            "wal_level",
            "server",
            &facts.wal_level,
            format!("{}; {POLL_HINT}", crate::pg::source::catalog::WAL_LEVEL_FIX),
        )
    });

    let free_slots = facts.max_slots - facts.used_slots;
    let observed = format!("{} of {} in use", facts.used_slots, facts.max_slots);
    checks.push(if free_slots > 0 || slot_exists {
        Check::pass("max_replication_slots", "server", observed)
    } else {
        Check::fail(
            "max_replication_slots",
            "server",
            format!("{observed}, none free for the relay's slot"),
            format!(
                "ALTER SYSTEM SET max_replication_slots = {}; then restart PostgreSQL \
                 (or drop an unused slot: SELECT pg_drop_replication_slot(slot_name) \
                 FROM pg_replication_slots WHERE …)",
                raised(facts.max_slots, facts.used_slots)
            ),
        )
    });

    let free_senders = facts.max_senders - facts.used_senders;
    let observed = format!("{} of {} in use", facts.used_senders, facts.max_senders);
    checks.push(if free_senders > 0 || slot_active {
        Check::pass("max_wal_senders", "server", observed)
    } else {
        Check::fail(
            "max_wal_senders",
            "server",
            format!("{observed}, none free for the relay's replication connection"),
            format!(
                "ALTER SYSTEM SET max_wal_senders = {}; then restart PostgreSQL",
                raised(facts.max_senders, facts.used_senders)
            ),
        )
    });
    checks
}

/// `role_replication` and `role_login` for the login role.
pub(super) async fn role_checks(client: &Client, role: &str) -> Vec<Check> {
    // Amazon RDS / Aurora grant replication through membership in rds_replication
    // instead of the REPLICATION attribute. CASE keeps pg_has_role from being
    // evaluated (and failing) where that role does not exist.
    let row = client
        .query_one(
            "SELECT r.rolsuper, r.rolreplication, r.rolcanlogin, \
                    CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rds_replication') \
                         THEN pg_has_role(r.oid, 'rds_replication', 'member') ELSE false END \
             FROM pg_roles r WHERE r.rolname = session_user",
            &[],
        )
        .await;
    let row = match row {
        Ok(row) => row,
        Err(err) => return vec![Check::query_failed("role_replication", role, &err)],
    };
    let (superuser, replication, login, rds) = (row.get(0), row.get(1), row.get(2), row.get(3));
    role_verdicts(role, superuser, replication, login, rds)
}

fn role_verdicts(
    role: &str,
    superuser: bool,
    replication: bool,
    login: bool,
    rds: bool,
) -> Vec<Check> {
    let ident = quote_ident(role);
    let replication = match (superuser, replication, rds) {
        (true, _, _) => Check::pass("role_replication", role, "superuser"),
        (_, true, _) => Check::pass("role_replication", role, "REPLICATION"),
        (_, _, true) => Check::pass("role_replication", role, "member of rds_replication"),
        _ => Check::fail(
            "role_replication",
            role,
            "NOREPLICATION",
            format!(
                "ALTER ROLE {ident} REPLICATION; (on Amazon RDS: GRANT rds_replication TO {ident};)"
            ),
        ),
    };
    let login = if login {
        Check::pass("role_login", role, "LOGIN")
    } else {
        Check::fail(
            "role_login",
            role,
            "NOLOGIN",
            format!("ALTER ROLE {ident} LOGIN;"),
        )
    };
    vec![replication, login]
}

/// `max_slot_wal_keep_size`: informational, always `ok`.
pub(super) fn keep_size_check(facts: &Facts) -> Option<Check> {
    let value = facts.max_slot_wal_keep_size.as_deref()?;
    Some(if value.trim() == "-1" {
        Check::pass(
            "max_slot_wal_keep_size",
            "server",
            "-1 (unlimited: while the relay is stopped or behind, the slot keeps WAL \
             without bound, until the disk fills)",
        )
        .suggest(
            "ALTER SYSTEM SET max_slot_wal_keep_size = '50GB'; SELECT pg_reload_conf(); \
             (size it to the WAL written during the longest relay outage to survive, below \
             the free disk space: a slot further behind is invalidated, wal_status = lost)",
        )
    } else {
        Check::pass(
            "max_slot_wal_keep_size",
            "server",
            format!("{value} (a slot further behind than this is invalidated: wal_status = lost)"),
        )
    })
}

/// Whether `run`'s end-to-end heartbeat can work here: informational, always `ok`.
pub(super) fn heartbeat_check(facts: &Facts) -> Check {
    let supported = i64::from(facts.version_num) >= i64::from(crate::heartbeat::MIN_SERVER_VERSION);
    if supported {
        return Check::pass(
            "heartbeat",
            "server",
            "logical decoding messages reach the stream: run emits a heartbeat every \
             --heartbeat-interval (default 10s) and /readyz fails when none comes back",
        );
    }
    Check::pass(
        "heartbeat",
        "server",
        format!(
            "off on PostgreSQL {}: its pgoutput has no `messages` option, so run cannot prove \
             the stream alive (/readyz judges the connections only)",
            facts.version
        ),
    )
    .suggest("upgrade to PostgreSQL 14 or later for the end-to-end heartbeat")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            role: "app".into(),
            database: "shop".into(),
            version_num: 150018,
            version: "15.18".into(),
            wal_level: "logical".into(),
            max_slots: 10,
            used_slots: 3,
            max_senders: 10,
            used_senders: 2,
            max_slot_wal_keep_size: Some("-1".into()),
            synchronized_standby_slots: None,
        }
    }

    fn by_name<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn healthy_server() {
        let checks = server_checks(&facts(), false, false);
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        assert_eq!(
            by_name(&checks, "max_replication_slots").observed,
            "3 of 10 in use"
        );
    }

    #[test]
    fn wal_level_and_version() {
        let f = Facts {
            wal_level: "replica".into(),
            version_num: 120015,
            version: "12.15".into(),
            ..facts()
        };
        let checks = server_checks(&f, false, false);
        let wal = by_name(&checks, "wal_level");
        assert!(!wal.ok);
        assert_eq!(wal.observed, "replica");
        let fix = wal.fix.as_deref().unwrap();
        assert!(fix.starts_with("ALTER SYSTEM SET wal_level = logical"));
        assert!(fix.contains("--source poll"), "{fix}");
        assert!(!fix.contains('\n'), "one line: {fix}");
        assert!(!by_name(&checks, "server_version").ok);
    }

    #[test]
    fn slot_headroom_counts_our_slot() {
        let full = Facts {
            used_slots: 10,
            used_senders: 10,
            ..facts()
        };
        let checks = server_checks(&full, false, false);
        let slots = by_name(&checks, "max_replication_slots");
        assert!(!slots.ok);
        assert!(
            slots
                .fix
                .as_deref()
                .unwrap()
                .starts_with("ALTER SYSTEM SET max_replication_slots = 20;"),
            "{slots:?}"
        );
        let senders = by_name(&checks, "max_wal_senders");
        assert!(!senders.ok);
        assert!(senders
            .fix
            .as_deref()
            .unwrap()
            .starts_with("ALTER SYSTEM SET max_wal_senders = 20;"));
        // Our slot already exists: it needs no new one; it is streaming: its
        // walsender is one of those counted.
        let checks = server_checks(&full, true, true);
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        assert_eq!(raised(0, 0), 1);
        assert_eq!(raised(4, 9), 10);
    }

    #[test]
    fn role_attributes() {
        let checks = role_verdicts("app", false, false, false, false);
        assert_eq!(
            checks[0].fix.as_deref(),
            Some("ALTER ROLE \"app\" REPLICATION; (on Amazon RDS: GRANT rds_replication TO \"app\";)")
        );
        assert_eq!(checks[1].fix.as_deref(), Some("ALTER ROLE \"app\" LOGIN;"));
        assert!(checks.iter().all(|c| !c.ok));
        for (sup, repl, rds, observed) in [
            (true, false, false, "superuser"),
            (false, true, false, "REPLICATION"),
            (false, false, true, "member of rds_replication"),
        ] {
            let c = &role_verdicts("app", sup, repl, true, rds)[0];
            assert!(c.ok);
            assert_eq!(c.observed, observed);
        }
    }

    #[test]
    fn heartbeat_is_informational_and_off_before_14() {
        let on = heartbeat_check(&facts());
        assert!(on.ok && on.fix.is_none(), "{on:?}");
        assert!(on
            .observed
            .starts_with("logical decoding messages reach the stream"));
        let off = heartbeat_check(&Facts {
            version_num: 130_023,
            version: "13.23".into(),
            ..facts()
        });
        assert!(off.ok, "informational: {off:?}");
        assert!(
            off.observed.starts_with("off on PostgreSQL 13.23: "),
            "{off:?}"
        );
        assert!(off.fix.as_deref().unwrap().contains("PostgreSQL 14"));
    }

    #[test]
    fn keep_size_is_informational() {
        let unlimited = keep_size_check(&facts()).unwrap();
        assert!(unlimited.ok);
        assert!(unlimited.observed.contains("without bound"));
        assert!(unlimited
            .fix
            .as_deref()
            .unwrap()
            .contains("max_slot_wal_keep_size"));
        let bounded = keep_size_check(&Facts {
            max_slot_wal_keep_size: Some("10GB".into()),
            ..facts()
        })
        .unwrap();
        assert!(bounded.ok && bounded.fix.is_none());
        assert!(bounded.observed.starts_with("10GB"));
        assert!(keep_size_check(&Facts {
            max_slot_wal_keep_size: None,
            ..facts()
        })
        .is_none());
    }
}
