//! Checks of the objects the relay reads: the outbox tables, the publication and the
//! replication slot.
//!
//! Owns the rules that tie them together: a publication must publish inserts of every
//! outbox table under the table's own name (so partitioned tables need
//! `publish_via_partition_root`, or the relay — which routes by `schema.name` — sees
//! only partitions and stops at their rows) with every mapped column, and no other
//! table (the relay would stop at its first row); a slot must be a
//! persistent `pgoutput` slot of this database whose WAL is still there.

use tokio_postgres::Client;

use super::server::Facts;
use super::{Check, CheckInput};
use crate::pg::names::TableName;
use crate::pg::names::{quote_ident, quote_literal};
use crate::pg::source::catalog::{create_publication_sql, CatalogError, SlotInfo};

/// An outbox table that exists.
#[derive(Debug, Clone)]
pub(super) struct FoundTable {
    pub(super) name: TableName,
    partitioned: bool,
}

/// `table`, `columns` and `select_privilege` for each outbox table; returns the
/// tables that exist (the publication checks need them).
pub(super) async fn table_checks(
    client: &Client,
    input: &CheckInput,
    role: &str,
    checks: &mut Vec<Check>,
) -> Vec<FoundTable> {
    let mut found = Vec::new();
    for table in &input.tables {
        let object = table.to_string();
        let row = client
            .query_opt(
                "SELECT c.relkind::text, has_table_privilege(c.oid, 'SELECT'), \
                        ARRAY(SELECT a.attname::text FROM pg_attribute a \
                              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                              ORDER BY a.attnum) \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&table.schema, &table.name],
            )
            .await;
        let row = match row {
            Ok(Some(row)) => row,
            Ok(None) => {
                checks.push(Check::fail(
                    "table",
                    object,
                    "missing",
                    "create it (see sql/outbox.sql) or pass the right --table",
                ));
                continue;
            }
            Err(err) => {
                checks.push(Check::query_failed("table", object, &err));
                continue;
            }
        };
        let (relkind, select, attnames): (String, bool, Vec<String>) =
            (row.get(0), row.get(1), row.get(2));
        let partitioned = relkind == "p";
        if relkind != "r" && !partitioned {
            checks.push(Check::fail(
                "table",
                object,
                format!("not a table (pg_class.relkind = {relkind}); only tables are published"),
                "pass the outbox table itself with --table",
            ));
            continue;
        }
        checks.push(Check::pass(
            "table",
            &object,
            if partitioned {
                "exists (partitioned)"
            } else {
                "exists"
            },
        ));
        if let Some(missing) = missing_columns(&input.columns, &attnames) {
            checks.push(Check::fail(
                "columns",
                &object,
                format!(
                    "missing {} (has {})",
                    missing.join(", "),
                    attnames.join(", ")
                ),
                "add the columns (see sql/outbox.sql) or map each field to an existing column \
                 (--id-column, --key-column, --event-type-column, --payload-column, \
                 --timestamp-column, --route-by-field, --aggregate-type-column)",
            ));
        } else if !input.columns.is_empty() {
            checks.push(Check::pass(
                "columns",
                &object,
                format!("has {}", input.columns.join(", ")),
            ));
        }
        checks.push(if select {
            Check::pass("select_privilege", &object, format!("granted to {role}"))
        } else {
            Check::fail(
                "select_privilege",
                &object,
                format!("not granted to {role}"),
                format!(
                    "GRANT SELECT ON {} TO {};",
                    table.quoted(),
                    quote_ident(role)
                ),
            )
        });
        found.push(FoundTable {
            name: table.clone(),
            partitioned,
        });
    }
    found
}

/// The mapped columns `have` lacks, in mapping order, or `None` when none.
fn missing_columns(wanted: &[String], have: &[String]) -> Option<Vec<String>> {
    let mut missing: Vec<String> = Vec::new();
    for column in wanted {
        if !have.contains(column) && !missing.contains(column) {
            missing.push(column.clone());
        }
    }
    (!missing.is_empty()).then_some(missing)
}

/// `publication` when it does not exist: `run` creates it when its role may (a
/// superuser, or the owner of every outbox table with CREATE on the database), so
/// that passes with a note; otherwise it fails with the SQL for an owner to run.
async fn missing_publication(client: &Client, input: &CheckInput, facts: &Facts) -> Check {
    let name = input.publication.as_str();
    let quoted: Vec<String> = input.tables.iter().map(TableName::quoted).collect();
    let may_create = client
        .query_one(
            "SELECT coalesce(bool_and(c.oid IS NOT NULL), true) \
                 AND ((SELECT rolsuper FROM pg_roles WHERE rolname = session_user) \
                      OR (has_database_privilege(current_database(), 'CREATE') \
                          AND coalesce(bool_and(pg_has_role(c.relowner, 'USAGE')), \
                                       cardinality($1::text[]) = 0))) \
             FROM unnest($1::text[]) AS t(q) LEFT JOIN pg_class c ON c.oid = to_regclass(t.q)",
            &[&quoted],
        )
        .await;
    let sql = create_publication_sql(name, &input.tables);
    match may_create.map(|row| row.get::<_, Option<bool>>(0).unwrap_or(false)) {
        Ok(true) => Check::pass(
            "publication",
            name,
            format!(
                "missing — `pgoutbox run` (or `setup`) will create it: {} may create a \
                 publication of the outbox tables",
                facts.role
            ),
        ),
        Ok(false) => Check::fail(
            "publication",
            name,
            format!(
                "missing, and `run` cannot create it: every outbox table must exist, and {} \
                 must own them all and have CREATE on the database (or be a superuser)",
                facts.role
            ),
            format!(
                "{sql}; (run by an owner of the tables, or by {} once it owns them)",
                facts.role
            ),
        ),
        Err(err) => Check::query_failed("publication", name, &err),
    }
}

/// `publication`, `publication_operations`, `publication_partition_root`,
/// `publication_tables`, `publication_other_tables` and `publication_columns`
/// (PostgreSQL 15+, failures only).
pub(super) async fn publication_checks(
    client: &Client,
    input: &CheckInput,
    facts: &Facts,
    tables: &[FoundTable],
    checks: &mut Vec<Check>,
) {
    let name = input.publication.as_str();
    let ident = quote_ident(name);
    let row = client
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot \
             FROM pg_publication WHERE pubname = $1",
            &[&name],
        )
        .await;
    let row = match row {
        Ok(Some(row)) => row,
        Ok(None) => return checks.push(missing_publication(client, input, facts).await),
        Err(err) => return checks.push(Check::query_failed("publication", name, &err)),
    };
    checks.push(Check::pass("publication", name, "exists"));
    checks.push(super::layout::check(client, input).await);
    let ops: [(bool, &str); 4] = [
        (row.get(0), "insert"),
        (row.get(1), "update"),
        (row.get(2), "delete"),
        (row.get(3), "truncate"),
    ];
    checks.push(operations_check(name, &ops));
    let via_root: bool = row.get(4);
    let partitioned: Vec<String> = tables
        .iter()
        .filter(|t| t.partitioned)
        .map(|t| t.name.to_string())
        .collect();
    if !partitioned.is_empty() {
        checks.push(if via_root {
            Check::pass(
                "publication_partition_root",
                name,
                "publish_via_partition_root = true",
            )
        } else {
            Check::fail(
                "publication_partition_root",
                name,
                format!(
                    "publish_via_partition_root = false: rows of {} are published under each \
                     partition's name, which the relay does not map (it stops at them)",
                    partitioned.join(", ")
                ),
                format!("ALTER PUBLICATION {ident} SET (publish_via_partition_root = true);"),
            )
        });
    }
    // With publish_via_partition_root off, pg_publication_tables lists the partitions,
    // not the root, so coverage of a partitioned table is only judged once that is fixed.
    let judged: Vec<&FoundTable> = tables
        .iter()
        .filter(|t| via_root || !t.partitioned)
        .collect();
    if judged.is_empty() {
        return;
    }
    // attnames (PostgreSQL 15+) lists the published columns: a column list or a
    // generated column (not published before 18) can leave a mapped column out.
    let sql = if facts.version_num >= 150000 {
        "SELECT schemaname::text, tablename::text, attnames::text[] \
         FROM pg_publication_tables WHERE pubname = $1"
    } else {
        "SELECT schemaname::text, tablename::text, NULL::text[] \
         FROM pg_publication_tables WHERE pubname = $1"
    };
    let rows = match client.query(sql, &[&name]).await {
        Ok(rows) => rows,
        Err(err) => return checks.push(Check::query_failed("publication_tables", name, &err)),
    };
    let published: Vec<(TableName, Option<Vec<String>>)> = rows
        .iter()
        .map(|r| {
            let table = TableName {
                schema: r.get(0),
                name: r.get(1),
            };
            (table, r.get(2))
        })
        .collect();
    // Without publish_via_partition_root the partitions are listed, and the
    // partition-root failure above already says what to do about them.
    if via_root || partitioned.is_empty() {
        checks.push(other_tables_check(name, &input.tables, &published));
    }
    let missing: Vec<&TableName> = judged
        .iter()
        .map(|t| &t.name)
        .filter(|t| !published.iter().any(|(p, _)| p == *t))
        .collect();
    checks.push(if missing.is_empty() {
        let list: Vec<String> = judged.iter().map(|t| t.name.to_string()).collect();
        Check::pass(
            "publication_tables",
            name,
            format!("includes {}", list.join(", ")),
        )
    } else {
        let shown: Vec<String> = missing.iter().map(|t| t.to_string()).collect();
        let quoted: Vec<String> = missing.iter().map(|t| t.quoted()).collect();
        Check::fail(
            "publication_tables",
            name,
            format!("does not include {}", shown.join(", ")),
            format!("ALTER PUBLICATION {ident} ADD TABLE {};", quoted.join(", ")),
        )
    });
    for (table, attnames) in &published {
        let Some(attnames) = attnames else { continue };
        if !judged.iter().any(|t| t.name == *table) {
            continue;
        }
        if let Some(lacking) = missing_columns(&input.columns, attnames) {
            checks.push(Check::fail(
                "publication_columns",
                table.to_string(),
                format!(
                    "publication {name} publishes {} but not {}",
                    attnames.join(", "),
                    lacking.join(", ")
                ),
                format!(
                    "publish every column: ALTER PUBLICATION {ident} DROP TABLE {t}; \
                     ALTER PUBLICATION {ident} ADD TABLE {t}; (a generated column must become \
                     a regular column)",
                    t = table.quoted()
                ),
            ));
        }
    }
}

/// `publication_other_tables`: the publication publishes no table besides the outbox
/// tables. The relay stops at the first change of any other one (its rows would
/// be confirmed without being sent), so this is a failure.
fn other_tables_check(
    name: &str,
    outbox: &[TableName],
    published: &[(TableName, Option<Vec<String>>)],
) -> Check {
    let others: Vec<&TableName> = published
        .iter()
        .map(|(t, _)| t)
        .filter(|t| !outbox.contains(t))
        .collect();
    if others.is_empty() {
        return Check::pass("publication_other_tables", name, "none");
    }
    let shown: Vec<String> = others.iter().map(|t| t.to_string()).collect();
    let quoted: Vec<String> = others.iter().map(|t| t.quoted()).collect();
    Check::fail(
        "publication_other_tables",
        name,
        format!(
            "also publishes {}, not among the outbox tables (--table); `pgoutbox run` stops \
             at its first row rather than confirm it unsent",
            shown.join(", ")
        ),
        format!(
            "relay it too (add --table {}), or stop publishing it — if `pgoutbox run` already \
             stopped at its rows, first pass those as its message says — with: ALTER PUBLICATION {} DROP TABLE {};",
            shown.join(" --table "),
            quote_ident(name),
            quoted.join(", ")
        ),
    )
}

fn operations_check(name: &str, ops: &[(bool, &str)]) -> Check {
    let published: Vec<&str> = ops
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, op)| *op)
        .collect();
    let insert_only = format!(
        "ALTER PUBLICATION {} SET (publish = 'insert');",
        quote_ident(name)
    );
    match published.as_slice() {
        ["insert"] => Check::pass("publication_operations", name, "insert only"),
        [first, ..] if *first == "insert" => Check::pass(
            "publication_operations",
            name,
            format!(
                "publishes {} (all but inserts are decoded by the server and ignored by the relay)",
                published.join(", ")
            ),
        )
        .suggest(insert_only),
        _ => Check::fail(
            "publication_operations",
            name,
            format!(
                "does not publish inserts (publishes: {})",
                if published.is_empty() {
                    "nothing".to_owned()
                } else {
                    published.join(", ")
                }
            ),
            insert_only,
        ),
    }
}

/// `slot` and `slot_wal_status`, from the lookup made before the headroom checks.
pub(super) fn slot_checks(
    slot: &str,
    database: &str,
    info: Result<Option<SlotInfo>, CatalogError>,
    checks: &mut Vec<Check>,
) {
    let info = match info {
        Ok(Some(info)) => info,
        Ok(None) => {
            return checks.push(Check::pass(
                "slot",
                slot,
                "missing — `pgoutbox setup` or `run` creates it",
            ))
        }
        Err(err) => {
            return checks.push(Check::fail(
                "slot",
                slot,
                format!("lookup failed: {err}"),
                "run the check as the role the relay uses; if the error persists, see the PostgreSQL server log",
            ))
        }
    };
    let drop_it = format!("SELECT pg_drop_replication_slot({});", quote_literal(slot));
    let plugin = info.plugin.as_deref().unwrap_or("none");
    if info.slot_type != "logical" || plugin != "pgoutput" {
        return checks.push(Check::fail(
            "slot",
            slot,
            format!(
                "{} slot with plugin {plugin}, not a pgoutput logical slot",
                info.slot_type
            ),
            format!("choose another --slot, or if nothing uses this one drop it: {drop_it}"),
        ));
    }
    let slot_db = info.database.as_deref().unwrap_or("");
    if slot_db != database {
        return checks.push(Check::fail(
            "slot",
            slot,
            format!("pgoutput slot of database {slot_db}, not {database}"),
            "choose another --slot for this database (slot names are cluster-wide)",
        ));
    }
    let state = match info.active_pid {
        Some(pid) if info.active => format!("active (walsender pid {pid})"),
        _ => "inactive".to_owned(),
    };
    if info.temporary {
        return checks.push(Check::fail(
            "slot",
            slot,
            format!("temporary slot, {state}: it disappears with the session that made it"),
            "end that session (stop `pgoutbox tail`) or choose another --slot",
        ));
    }
    checks.push(Check::pass(
        "slot",
        slot,
        format!("pgoutput logical slot, {state}"),
    ));
    if let Some(status) = info.wal_status.as_deref() {
        let confirmed = info
            .confirmed_flush_lsn
            .map_or_else(|| "unknown".to_owned(), |l| l.to_string());
        checks.push(wal_status_check(slot, status, &confirmed, &drop_it));
    }
}

/// One `tail_publication` per publication a killed `tail` left behind (none when
/// there is none): harmless to the relay (`ok`), with the SQL that drops it.
pub(super) async fn tail_leftover_checks(client: &Client) -> Vec<Check> {
    match crate::tail::leftovers(client).await {
        Ok(names) => names
            .iter()
            .map(|name| {
                Check::pass(
                    "tail_publication",
                    name,
                    "left behind by a killed `pgoutbox tail` (no tail holds a slot of its name); \
                     the next tail or `pgoutbox teardown` drops it",
                )
                .suggest(format!("{};", crate::tail::drop_sql(name)))
            })
            .collect(),
        Err(err) => vec![Check::query_failed(
            "tail_publication",
            "pgoutbox_tail_*",
            &err,
        )],
    }
}

fn wal_status_check(slot: &str, status: &str, confirmed: &str, drop_it: &str) -> Check {
    match status {
        "lost" => Check::fail(
            "slot_wal_status",
            slot,
            format!(
                "lost: the server removed WAL the slot still needed (max_slot_wal_keep_size), \
                 so it can never stream again; confirmed_flush_lsn = {confirmed}"
            ),
            format!(
                "stop the relay, then {drop_it} and `pgoutbox setup` to create it anew. The new \
                 slot starts at the then-current WAL position: events committed after \
                 {confirmed} and before it was created are never streamed, and must be \
                 re-published from the outbox table (rows already deleted from it are gone). \
                 Raise max_slot_wal_keep_size so it does not happen again"
            ),
        ),
        "unreserved" => Check::pass(
            "slot_wal_status",
            slot,
            "unreserved: WAL the slot needs is beyond max_slot_wal_keep_size and is removed \
             at the next checkpoint (the slot becomes lost) unless the relay catches up first",
        )
        .suggest("start the relay now (or let it catch up), or raise max_slot_wal_keep_size"),
        "extended" => Check::pass(
            "slot_wal_status",
            slot,
            "extended: the slot retains more WAL than max_wal_size (within max_slot_wal_keep_size)",
        ),
        other => Check::pass("slot_wal_status", slot, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn missing_columns_in_mapping_order_without_duplicates() {
        let have = strings(&["id", "payload"]);
        assert_eq!(missing_columns(&strings(&["id", "payload"]), &have), None);
        assert_eq!(
            missing_columns(&strings(&["key", "id", "ts", "key"]), &have),
            Some(strings(&["key", "ts"]))
        );
        assert_eq!(missing_columns(&[], &have), None);
    }

    #[test]
    fn operations() {
        let c = operations_check(
            "p",
            &[
                (true, "insert"),
                (false, "update"),
                (false, "delete"),
                (false, "truncate"),
            ],
        );
        assert!(c.ok && c.fix.is_none());
        let c = operations_check(
            "p",
            &[
                (true, "insert"),
                (true, "update"),
                (true, "delete"),
                (false, "truncate"),
            ],
        );
        assert!(c.ok);
        assert!(
            c.observed.starts_with("publishes insert, update, delete"),
            "{c:?}"
        );
        assert_eq!(
            c.fix.as_deref(),
            Some("ALTER PUBLICATION \"p\" SET (publish = 'insert');")
        );
        let c = operations_check(
            "p",
            &[
                (false, "insert"),
                (true, "update"),
                (false, "delete"),
                (false, "truncate"),
            ],
        );
        assert!(!c.ok);
        assert_eq!(c.observed, "does not publish inserts (publishes: update)");
        let c = operations_check("p", &[(false, "insert"), (false, "update")]);
        assert_eq!(c.observed, "does not publish inserts (publishes: nothing)");
    }

    fn slot(active: bool) -> SlotInfo {
        SlotInfo {
            name: "s".into(),
            plugin: Some("pgoutput".into()),
            slot_type: "logical".into(),
            database: Some("shop".into()),
            active,
            active_pid: active.then_some(42),
            temporary: false,
            restart_lsn: Some("0/10".parse().unwrap()),
            confirmed_flush_lsn: Some("0/20".parse().unwrap()),
            wal_status: Some("reserved".into()),
            failover: None,
            synced: None,
        }
    }

    fn run(info: SlotInfo) -> Vec<Check> {
        let mut checks = Vec::new();
        slot_checks("s", "shop", Ok(Some(info)), &mut checks);
        checks
    }

    #[test]
    fn healthy_slot() {
        let checks = run(slot(true));
        assert_eq!(checks.len(), 2);
        assert!(checks.iter().all(|c| c.ok));
        assert_eq!(
            checks[0].observed,
            "pgoutput logical slot, active (walsender pid 42)"
        );
        assert_eq!(checks[1].observed, "reserved");
        assert_eq!(
            run(slot(false))[0].observed,
            "pgoutput logical slot, inactive"
        );
        let mut checks = Vec::new();
        slot_checks("s", "shop", Ok(None), &mut checks);
        assert!(checks[0].ok);
        assert!(checks[0].observed.starts_with("missing"));
    }

    #[test]
    fn wrong_slots() {
        let physical = SlotInfo {
            slot_type: "physical".into(),
            plugin: None,
            database: None,
            ..slot(false)
        };
        let checks = run(physical);
        assert_eq!(checks.len(), 1);
        assert!(!checks[0].ok);
        assert!(checks[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("SELECT pg_drop_replication_slot('s');"));
        let other_db = run(SlotInfo {
            database: Some("other".into()),
            ..slot(false)
        });
        assert_eq!(
            other_db[0].observed,
            "pgoutput slot of database other, not shop"
        );
        let temporary = run(SlotInfo {
            temporary: true,
            ..slot(true)
        });
        assert!(!temporary[0].ok);
    }

    #[test]
    fn lost_slot_fix_is_precise() {
        let checks = run(SlotInfo {
            wal_status: Some("lost".into()),
            ..slot(false)
        });
        let lost = &checks[1];
        assert!(!lost.ok);
        assert!(lost.observed.contains("confirmed_flush_lsn = 0/20"));
        let fix = lost.fix.as_deref().unwrap();
        for needle in [
            "SELECT pg_drop_replication_slot('s');",
            "pgoutbox setup",
            "committed after 0/20",
            "re-published from the outbox table",
            "max_slot_wal_keep_size",
        ] {
            assert!(fix.contains(needle), "{needle:?} not in {fix}");
        }
        let unreserved = &run(SlotInfo {
            wal_status: Some("unreserved".into()),
            ..slot(false)
        })[1];
        assert!(unreserved.ok && unreserved.fix.is_some());
    }
}
