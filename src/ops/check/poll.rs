//! Checks of what poll mode (`--source poll`) needs on each outbox table: the
//! `published_at` column, the partial index on unpublished rows, the ordering column
//! (`--poll-order-by`), the privileges to claim and mark rows, and the NOTIFY
//! trigger that wakes the relay.
//!
//! Owns the rules: with `--poll-mark published-at` the column must be a nullable
//! `timestamptz` (NULL = not yet published) with a valid index `WHERE published_at IS
//! NULL` (else every poll scans the published history), and the role needs UPDATE on
//! it; with `--poll-mark delete` it needs DELETE plus UPDATE on some column (`SELECT …
//! FOR UPDATE` requires it). A missing NOTIFY trigger is a caveat, not a failure: the
//! relay still works, with latency up to the poll interval. The verdicts are pure
//! functions of [`PollFacts`], read in one query per table.

use tokio_postgres::Client;

use super::objects::FoundTable;
use super::{Check, CheckInput, PollMark};
use crate::pg::names::quote_ident;
use crate::pg::names::TableName;

/// The column poll mode marks published rows in.
pub const PUBLISHED_COLUMN: &str = "published_at";

/// What the relay will do: the mark, the ordering column, as which role.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wanted<'a> {
    pub mark: PollMark,
    pub order_by: &'a str,
    pub role: &'a str,
}

/// What the catalog says about one table, for poll mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PollFacts {
    /// `format_type` of `published_at`; `None` when the column is missing.
    pub column_type: Option<String>,
    /// Whether `published_at` is `NOT NULL`.
    pub not_null: bool,
    /// Names of valid indexes whose predicate is `published_at IS NULL`.
    pub indexes: Vec<String>,
    /// Names of enabled INSERT triggers whose function mentions NOTIFY.
    pub notify_triggers: Vec<String>,
    /// UPDATE on `published_at` (on the table when the column is missing).
    pub update_column: bool,
    /// DELETE on the table.
    pub delete: bool,
    /// UPDATE on at least one column (what `SELECT … FOR UPDATE` needs).
    pub update_any: bool,
    /// Whether the `--poll-order-by` column exists.
    pub order_column: bool,
}

const FACTS_SQL: &str = "\
SELECT (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
          WHERE a.attrelid = c.oid AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped), \
       coalesce((SELECT a.attnotnull FROM pg_attribute a \
          WHERE a.attrelid = c.oid AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped), false), \
       ARRAY(SELECT i.indexrelid::regclass::text FROM pg_index i \
          WHERE i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NOT NULL \
            AND pg_get_expr(i.indpred, i.indrelid) = '(' || quote_ident($2) || ' IS NULL)' \
          ORDER BY 1), \
       ARRAY(SELECT t.tgname::text FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid \
          WHERE t.tgrelid = c.oid AND NOT t.tgisinternal AND t.tgenabled <> 'D' \
            AND (t.tgtype & 4) <> 0 AND p.prosrc ILIKE '%notify%' ORDER BY 1), \
       CASE WHEN EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                           AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped) \
            THEN has_column_privilege(c.oid, $2, 'UPDATE') \
            ELSE has_table_privilege(c.oid, 'UPDATE') END, \
       has_table_privilege(c.oid, 'DELETE'), \
       has_any_column_privilege(c.oid, 'UPDATE'), \
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                 AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped) \
FROM pg_class c WHERE c.oid = to_regclass($1)";

async fn facts(
    client: &Client,
    table: &TableName,
    order_by: &str,
) -> Result<PollFacts, tokio_postgres::Error> {
    let row = client
        .query_one(FACTS_SQL, &[&table.quoted(), &PUBLISHED_COLUMN, &order_by])
        .await?;
    Ok(PollFacts {
        column_type: row.get(0),
        not_null: row.get(1),
        indexes: row.get(2),
        notify_triggers: row.get(3),
        update_column: row.get(4),
        delete: row.get(5),
        update_any: row.get(6),
        order_column: row.get(7),
    })
}

/// The poll-mode checks of every table that exists.
pub(super) async fn poll_checks(
    client: &Client,
    input: &CheckInput,
    wanted: &Wanted<'_>,
    tables: &[FoundTable],
    checks: &mut Vec<Check>,
) {
    let id_column = input.columns.first().map_or("id", String::as_str);
    for found in tables {
        let table = &found.name;
        match facts(client, table, wanted.order_by).await {
            Ok(f) => checks.extend(verdicts(table, wanted, id_column, &f)),
            Err(err) => checks.push(Check::query_failed(
                "poll_privileges",
                table.to_string(),
                &err,
            )),
        }
    }
}

/// The fix that installs everything poll mode wants on a table.
fn setup_hint(table: &TableName) -> String {
    format!(
        "`pgoutbox setup --source poll --table {table}` installs it; \
         with --print-sql it prints the SQL for a DBA instead"
    )
}

/// `published_at`, `unpublished_index` (published mark only), `poll_order`,
/// `poll_privileges`, `notify_trigger`.
pub(super) fn verdicts(
    table: &TableName,
    wanted: &Wanted<'_>,
    id_column: &str,
    f: &PollFacts,
) -> Vec<Check> {
    let mut checks = Vec::new();
    if wanted.mark == PollMark::Published {
        checks.push(column_check(table, f));
        checks.push(index_check(table, wanted.order_by, f));
    }
    checks.push(order_check(table, wanted.order_by, f));
    checks.push(privilege_check(table, wanted, id_column, f));
    checks.push(trigger_check(table, f));
    checks
}

fn order_check(table: &TableName, order_by: &str, f: &PollFacts) -> Check {
    let object = table.to_string();
    if f.order_column {
        return Check::pass("poll_order", object, format!("{order_by} exists"));
    }
    Check::fail(
        "poll_order",
        object,
        format!("no column {order_by} to claim rows in order of (--poll-order-by)"),
        format!(
            "for the default seq (a bigint identity column): {}; or name an existing \
             increasing column with --poll-order-by",
            setup_hint(table)
        ),
    )
}

fn column_check(table: &TableName, f: &PollFacts) -> Check {
    let object = table.to_string();
    let col = quote_ident(PUBLISHED_COLUMN);
    let quoted = table.quoted();
    match &f.column_type {
        None => Check::fail(
            "published_at",
            object,
            "missing (poll mode marks a published row by setting it)",
            format!(
                "ALTER TABLE {quoted} ADD COLUMN {col} timestamptz; or: {}",
                setup_hint(table)
            ),
        ),
        Some(t) if t != "timestamp with time zone" => Check::fail(
            "published_at",
            object,
            format!("{PUBLISHED_COLUMN} is {t}, not timestamptz"),
            format!("ALTER TABLE {quoted} ALTER COLUMN {col} TYPE timestamptz;"),
        ),
        Some(_) if f.not_null => Check::fail(
            "published_at",
            object,
            format!("{PUBLISHED_COLUMN} is NOT NULL, so no row can be unpublished (NULL)"),
            format!("ALTER TABLE {quoted} ALTER COLUMN {col} DROP NOT NULL;"),
        ),
        Some(_) => Check::pass(
            "published_at",
            object,
            format!("{PUBLISHED_COLUMN} timestamptz, nullable"),
        ),
    }
}

fn index_check(table: &TableName, order_by: &str, f: &PollFacts) -> Check {
    let object = table.to_string();
    if f.indexes.is_empty() {
        Check::fail(
            "unpublished_index",
            object,
            format!(
                "no valid index WHERE {PUBLISHED_COLUMN} IS NULL: every poll would scan \
                 the published rows too"
            ),
            format!(
                "CREATE INDEX CONCURRENTLY ON {} ({}) WHERE {} IS NULL; or: {}",
                table.quoted(),
                quote_ident(order_by),
                quote_ident(PUBLISHED_COLUMN),
                setup_hint(table)
            ),
        )
    } else {
        Check::pass(
            "unpublished_index",
            object,
            format!(
                "{} (WHERE {PUBLISHED_COLUMN} IS NULL)",
                f.indexes.join(", ")
            ),
        )
    }
}

fn privilege_check(
    table: &TableName,
    wanted: &Wanted<'_>,
    id_column: &str,
    f: &PollFacts,
) -> Check {
    let object = table.to_string();
    let role = wanted.role;
    let (quoted, who) = (table.quoted(), quote_ident(role));
    match wanted.mark {
        PollMark::Published if f.update_column => Check::pass(
            "poll_privileges",
            object,
            format!("{role} may UPDATE {PUBLISHED_COLUMN}"),
        ),
        PollMark::Published => Check::fail(
            "poll_privileges",
            object,
            format!("{role} may not UPDATE {PUBLISHED_COLUMN} (poll mode marks rows with it)"),
            format!(
                "GRANT UPDATE ({}) ON {quoted} TO {who};",
                quote_ident(PUBLISHED_COLUMN)
            ),
        ),
        PollMark::Delete if f.delete && f.update_any => Check::pass(
            "poll_privileges",
            object,
            format!("{role} may DELETE, and UPDATE a column (for SELECT … FOR UPDATE)"),
        ),
        PollMark::Delete => {
            let mut missing = Vec::new();
            let mut grants = Vec::new();
            if !f.delete {
                missing.push("DELETE (--poll-mark delete deletes published rows)");
                grants.push(format!("GRANT DELETE ON {quoted} TO {who};"));
            }
            if !f.update_any {
                missing.push("UPDATE on any column (SELECT … FOR UPDATE needs it)");
                grants.push(format!(
                    "GRANT UPDATE ({}) ON {quoted} TO {who};",
                    quote_ident(id_column)
                ));
            }
            Check::fail(
                "poll_privileges",
                object,
                format!("{role} lacks {}", missing.join(" and ")),
                grants.join(" "),
            )
        }
    }
}

fn trigger_check(table: &TableName, f: &PollFacts) -> Check {
    let object = table.to_string();
    if f.notify_triggers.is_empty() {
        Check::pass(
            "notify_trigger",
            object,
            "none: the relay still works, but wakes only every poll interval \
             (latency up to the poll interval instead of milliseconds)",
        )
        .suggest(setup_hint(table))
    } else {
        Check::pass(
            "notify_trigger",
            object,
            format!("{} (INSERT, NOTIFY)", f.notify_triggers.join(", ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> PollFacts {
        PollFacts {
            column_type: Some("timestamp with time zone".into()),
            not_null: false,
            indexes: vec!["outbox_unpublished_idx".into()],
            notify_triggers: vec!["outbox_notify".into()],
            update_column: true,
            delete: false,
            update_any: true,
            order_column: true,
        }
    }

    fn table() -> TableName {
        TableName::parse("public.outbox").unwrap()
    }

    fn run(mark: PollMark, f: &PollFacts) -> Vec<Check> {
        let wanted = Wanted {
            mark,
            order_by: "seq",
            role: "relay",
        };
        verdicts(&table(), &wanted, "id", f)
    }

    #[test]
    fn everything_present_passes() {
        let checks = run(PollMark::Published, &good());
        let names: Vec<_> = checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "published_at",
                "unpublished_index",
                "poll_order",
                "poll_privileges",
                "notify_trigger"
            ]
        );
        assert!(checks.iter().all(|c| c.ok && c.fix.is_none()), "{checks:?}");
    }

    #[test]
    fn each_missing_piece_fails_with_its_fix() {
        let missing = run(
            PollMark::Published,
            &PollFacts {
                column_type: None,
                indexes: vec![],
                update_column: false,
                ..good()
            },
        );
        assert!(!missing[0].ok);
        assert!(missing[0].fix.as_deref().unwrap().starts_with(
            "ALTER TABLE \"public\".\"outbox\" ADD COLUMN \"published_at\" timestamptz;"
        ));
        assert!(!missing[1].ok);
        assert!(missing[1].fix.as_deref().unwrap().starts_with(
            "CREATE INDEX CONCURRENTLY ON \"public\".\"outbox\" (\"seq\") \
             WHERE \"published_at\" IS NULL;"
        ));
        let order = &run(
            PollMark::Published,
            &PollFacts {
                order_column: false,
                ..good()
            },
        )[2];
        assert!(!order.ok);
        assert_eq!(
            order.observed,
            "no column seq to claim rows in order of (--poll-order-by)"
        );
        assert!(order.fix.as_deref().unwrap().contains("--poll-order-by"));
        assert_eq!(
            missing[3].fix.as_deref(),
            Some("GRANT UPDATE (\"published_at\") ON \"public\".\"outbox\" TO \"relay\";")
        );
        let not_null = &run(
            PollMark::Published,
            &PollFacts {
                not_null: true,
                ..good()
            },
        )[0];
        assert!(!not_null.ok);
        assert!(not_null.fix.as_deref().unwrap().ends_with("DROP NOT NULL;"));
        let wrong_type = &run(
            PollMark::Published,
            &PollFacts {
                column_type: Some("boolean".into()),
                ..good()
            },
        )[0];
        assert_eq!(
            wrong_type.observed,
            "published_at is boolean, not timestamptz"
        );
    }

    #[test]
    fn delete_mark_needs_delete_and_an_update_column_but_no_published_at() {
        let bare = PollFacts {
            column_type: None,
            indexes: vec![],
            update_any: false,
            ..good()
        };
        let checks = run(PollMark::Delete, &bare);
        assert_eq!(checks.len(), 3);
        assert_eq!(checks[1].name, "poll_privileges");
        assert!(!checks[1].ok);
        assert_eq!(
            checks[1].fix.as_deref(),
            Some(
                "GRANT DELETE ON \"public\".\"outbox\" TO \"relay\"; \
                 GRANT UPDATE (\"id\") ON \"public\".\"outbox\" TO \"relay\";"
            )
        );
        let granted = PollFacts {
            delete: true,
            update_any: true,
            ..bare
        };
        assert!(run(PollMark::Delete, &granted)[1].ok);
    }

    #[test]
    fn missing_trigger_is_a_caveat_not_a_failure() {
        let c = &run(
            PollMark::Published,
            &PollFacts {
                notify_triggers: vec![],
                ..good()
            },
        )[4];
        assert!(c.ok);
        assert!(c.observed.contains("poll interval"));
        assert!(c.fix.as_deref().unwrap().contains("setup --source poll"));
    }
}
