//! The `layout` check: whether re-creating an outbox table (DROP + CREATE, or a
//! rename swap) keeps the relay going or stops it until the publication is fixed.
//!
//! A table listed in a `FOR TABLE` publication leaves it when dropped, and a new
//! table of the same name is not in it: the publication watch then stops `run`
//! (no row is lost, but the relay waits for an operator). Layouts that survive a
//! recreate: `FOR ALL TABLES`, `FOR TABLES IN SCHEMA` (PostgreSQL 15+), or the
//! republish trigger (`pgoutbox setup --republish-trigger`, an event trigger that
//! adds the new table in the transaction that creates it). Never a failure: the
//! relay is safe either way; the check says which behaviour to expect and the fix.

use tokio_postgres::Client;

use super::{Check, CheckInput};
use crate::pg::names::quote_ident;
use crate::pg::source::republish;

/// The layout of `input.publication` (which exists) for its outbox tables.
pub(super) async fn check(client: &Client, input: &CheckInput) -> Check {
    let name = input.publication.as_str();
    if input.tables.is_empty() {
        return Check::pass(
            "layout",
            name,
            "no outbox table (messages only): nothing to re-create",
        );
    }
    let trigger = republish::trigger_name(name);
    let listed: Vec<String> = input.tables.iter().map(|t| t.quoted()).collect();
    let row = client
        .query_one(
            "SELECT p.puballtables, \
                    (SELECT evtenabled <> 'D' FROM pg_event_trigger WHERE evtname = $2), \
                    (SELECT count(*) FROM pg_publication_rel r \
                     WHERE r.prpubid = p.oid AND r.prrelid = ANY ( \
                       SELECT to_regclass(t) FROM unnest($3::text[]) AS t)) \
             FROM pg_publication p WHERE p.pubname = $1",
            &[&name, &trigger, &listed],
        )
        .await;
    let row = match row {
        Ok(row) => row,
        Err(err) => return Check::query_failed("layout", name, &err),
    };
    let (all_tables, trigger_on, by_name): (bool, Option<bool>, i64) =
        (row.get(0), row.get(1), row.get(2));
    if all_tables {
        return Check::pass(
            "layout",
            name,
            "FOR ALL TABLES: a re-created outbox table is published from its creation",
        );
    }
    if trigger_on == Some(true) {
        return Check::pass(
            "layout",
            name,
            format!(
                "republish trigger {trigger:?}: a re-created outbox table is added to the \
                 publication in the transaction that creates it"
            ),
        );
    }
    let fix = format!(
        "pgoutbox setup --republish-trigger (as a superuser) adds a re-created outbox table \
         to {} in the same transaction; or publish the outbox's schema (PostgreSQL 15+, \
         superuser: CREATE PUBLICATION … FOR TABLES IN SCHEMA …); or migrate with the \
         README's recipe (\"Changing the outbox table while the relay runs\")",
        quote_ident(name)
    );
    if by_name == 0 {
        return Check::pass(
            "layout",
            name,
            "the outbox tables are published by their schema: a re-created table is \
             published from its creation (a table renamed away inside the schema stays \
             published: move it out of the schema, or the relay stops at its next row)",
        );
    }
    let observed = match trigger_on {
        Some(false) => format!(
            "the republish trigger {trigger:?} is disabled: a DROP + CREATE or a rename swap \
             of an outbox table stops the relay (nothing is lost) until the publication is fixed"
        ),
        _ => "the outbox tables are listed in the publication: a DROP + CREATE or a rename \
              swap of one stops the relay (nothing is lost) until the publication is fixed"
            .to_owned(),
    };
    Check::pass("layout", name, observed).suggest(fix)
}
