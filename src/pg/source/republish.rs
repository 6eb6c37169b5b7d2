//! The republish trigger: a layout in which a re-created outbox table is added to
//! the publication in the same transaction that creates it, so none of its rows
//! goes unpublished and the relay goes on (`pgoutbox setup --republish-trigger`).
//!
//! Owns the SQL of the event trigger and its function, and how `check` finds them.
//! The trigger fires at the end of `CREATE TABLE`, `CREATE TABLE AS`, `SELECT INTO`
//! and `ALTER TABLE` (a rename swap: `ALTER TABLE outbox_new RENAME TO outbox`)
//! and adds each configured outbox table that exists and is not published by the
//! publication (`pg_publication_tables`: listed, by schema, or all tables) with
//! `ALTER PUBLICATION … ADD TABLE`. In the same transaction: the table's
//! `pg_class` row and its `pg_publication_rel` row get the same xmin, which the
//! publication watch ([`crate::safety::publication`]) reads as "published from its
//! creation" and adopts.
//!
//! Invariants: the function is `SECURITY DEFINER` (owned by whoever installs it,
//! a superuser: creating event triggers needs one), so an application role that
//! re-creates the table needs no right on the publication; it adds only what
//! `ALTER PUBLICATION … ADD TABLE` accepts (a permanent plain or partitioned
//! table, to a publication that lists tables), in the DDL's own (sub)transaction —
//! no exception block, whose subtransaction would give the `pg_publication_rel`
//! row another xmin than the table's, which the watch could no longer tell from a
//! later ADD; should the ADD fail anyway, the DDL fails with it and nothing is
//! half-done; installing is idempotent (`CREATE OR REPLACE`, the trigger dropped
//! and re-created).

use crate::pg::names::{quote_ident, quote_literal, TableName};

/// PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes.
const MAX_IDENT: usize = 63;

/// The event trigger's name for `publication` (also its function's name).
pub fn trigger_name(publication: &str) -> String {
    let mut name = format!("pgoutbox_republish_{publication}");
    while name.len() > MAX_IDENT {
        name.pop();
    }
    name
}

/// The statements that install the trigger for `publication` and `tables`.
pub fn install_sql(publication: &str, tables: &[TableName]) -> Vec<String> {
    let name = trigger_name(publication);
    let function = format!("public.{}", quote_ident(&name));
    let list: Vec<String> = tables.iter().map(|t| quote_literal(&t.quoted())).collect();
    let publication_literal = quote_literal(publication);
    vec![
        format!(
            "CREATE OR REPLACE FUNCTION {function}() RETURNS event_trigger \
             LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgoutbox$\n\
             DECLARE\n  t text;\n\
             BEGIN\n\
             \x20 FOREACH t IN ARRAY ARRAY[{list}]::text[] LOOP\n\
             \x20   IF EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = to_regclass(t)\n\
             \x20              AND c.relkind IN ('r', 'p') AND c.relpersistence = 'p')\n\
             \x20      AND EXISTS (SELECT 1 FROM pg_publication\n\
             \x20              WHERE pubname = {publication_literal} AND NOT puballtables)\n\
             \x20      AND NOT EXISTS (SELECT 1 FROM pg_publication_tables\n\
             \x20        WHERE pubname = {publication_literal}\n\
             \x20          AND format('%I.%I', schemaname, tablename)::regclass = to_regclass(t)) THEN\n\
             \x20     EXECUTE format('ALTER PUBLICATION %I ADD TABLE %s', {publication_literal}, t);\n\
             \x20     RAISE NOTICE 'pgoutbox: added % to publication %', t, {publication_literal};\n\
             \x20   END IF;\n\
             \x20 END LOOP;\n\
             END\n$pgoutbox$;",
            list = list.join(", "),
        ),
        format!("DROP EVENT TRIGGER IF EXISTS {};", quote_ident(&name)),
        format!(
            "CREATE EVENT TRIGGER {} ON ddl_command_end \
             WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE') \
             EXECUTE FUNCTION {function}();",
            quote_ident(&name)
        ),
    ]
}

/// The query `check` asks: whether the trigger exists and is enabled (one row,
/// one boolean; no row: not installed). `$1` is [`trigger_name`].
pub const INSTALLED_SQL: &str = "SELECT evtenabled <> 'D' FROM pg_event_trigger WHERE evtname = $1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trigger_adds_each_configured_table_in_the_ddls_transaction() {
        let tables = [TableName::parse("public.outbox").unwrap()];
        let sql = install_sql("pgoutbox", &tables);
        assert_eq!(sql.len(), 3);
        assert!(
            sql[0]
                .starts_with("CREATE OR REPLACE FUNCTION public.\"pgoutbox_republish_pgoutbox\"()"),
            "{}",
            sql[0]
        );
        assert!(sql[0].contains("SECURITY DEFINER"), "{}", sql[0]);
        assert!(
            sql[0].contains("ARRAY['\"public\".\"outbox\"']"),
            "{}",
            sql[0]
        );
        assert!(
            !sql[0].contains("EXCEPTION"),
            "no subtransaction: {}",
            sql[0]
        );
        assert!(sql[2].contains(
            "WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE')"
        ));
    }

    #[test]
    fn a_long_publication_name_keeps_the_name_within_the_identifier_limit() {
        let long = "p".repeat(80);
        assert_eq!(trigger_name(&long).len(), MAX_IDENT);
    }
}
