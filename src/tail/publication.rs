//! The publication tail reads through, and leaving the database as tail found it.
//!
//! pgoutput needs a publication. When the configured one exists, tail reads through
//! it (after checking it covers the outbox tables) and never alters it. When it does
//! not, tail creates a *temporary* publication of the outbox tables under a name of
//! its own, `pgoutbox_tail_<pid>_<nanos>` ([`is_tail_name`]), and drops it when it
//! ends — at the limit, on SIGINT/SIGTERM, on a closed stdout and on an error.
//!
//! Why a name of its own rather than the configured one: a `run` started while tail
//! runs would adopt a publication named like its own and lose it when tail drops it;
//! nothing else uses tail's private name.
//!
//! A killed tail (SIGKILL, crash) cannot drop its publication, so each publication
//! carries a sign of life: a temporary replication slot of exactly its name, held by
//! tail's catalog session. That slot is created *before* the publication and goes
//! only when the session ends, after tail dropped the publication (or when tail
//! died): a publication of tail's name with no slot of that name is a leftover
//! ([`leftovers`]), one with the slot belongs to a tail that runs. The next tail and
//! `pgoutbox teardown` drop leftovers ([`drop_leftovers`]); `pgoutbox check` reports
//! them. The slot is physical and reserves no WAL (`immediately_reserve = false`):
//! it holds nothing back on the server, it only says "alive".
//!
//! ```text
//!  catalog session: slot N (temporary, physical, no WAL) ─▶ CREATE PUBLICATION N
//!      … tail streams through N (its logical slot has a name of its own) …
//!  end: DROP PUBLICATION N ─▶ session closes ─▶ slot N goes
//!  SIGKILL: session closes ─▶ slot N goes, publication N stays ─▶ a leftover
//! ```
//!
//! Invariants: tail drops a publication it created in this process, and others
//! only when they are leftovers by the rule above — never one whose tail still runs;
//! a drop that fails is logged with the exact SQL to run; dropped leftovers are named
//! in a log line.

use tokio_postgres::Client;

use crate::pg::client::conninfo::ConnInfo;
use crate::pg::names::quote_ident;
use crate::pg::source::catalog::{self, create_publication_sql, describe, CatalogError};
use crate::pg::source::SourceConfig;

/// What every name tail generates starts with.
const PREFIX: &str = "pgoutbox_tail_";

/// A name for tail's temporary slot or publication: unique per process and moment.
pub(super) fn temporary_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{PREFIX}{}_{nanos}", std::process::id())
}

/// Whether `name` is one [`temporary_name`] generates: `pgoutbox_tail_`, digits,
/// `_`, digits, nothing else.
pub fn is_tail_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('_'))
        .is_some_and(|(pid, nanos)| digits(pid) && digits(nanos))
}

/// The publications of this database killed tails left behind: a name tail
/// generates and no replication slot of that name (see the module docs), sorted.
pub async fn leftovers(client: &Client) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT p.pubname::text FROM pg_publication p \
             WHERE p.pubname LIKE 'pgoutbox\\_tail\\_%' \
             AND NOT EXISTS (SELECT 1 FROM pg_replication_slots s WHERE s.slot_name = p.pubname) \
             ORDER BY 1",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|name| is_tail_name(name))
        .collect())
}

/// Drop the [`leftovers`]; returns those dropped, named in a log line. One that
/// cannot be dropped (another owner) is logged with the SQL to run and skipped.
pub async fn drop_leftovers(client: &Client) -> Result<Vec<String>, tokio_postgres::Error> {
    let mut dropped = Vec::new();
    for name in leftovers(client).await? {
        let sql = drop_sql(&name);
        match client.batch_execute(&sql).await {
            Ok(()) => dropped.push(name),
            Err(err) => tracing::warn!(
                publication = %name,
                error = %describe(&err),
                "cannot drop a publication a killed tail left behind; fix: run {sql};"
            ),
        }
    }
    if !dropped.is_empty() {
        tracing::info!(
            publications = %dropped.join(", "),
            "dropped publications left behind by killed tails"
        );
    }
    Ok(dropped)
}

/// `DROP PUBLICATION IF EXISTS "name"`.
pub fn drop_sql(name: &str) -> String {
    format!("DROP PUBLICATION IF EXISTS {}", quote_ident(name))
}

/// The publication of one tail.
#[derive(Debug)]
pub(super) struct TailPublication {
    /// Its name.
    pub name: String,
    /// When tail created it (and must drop it): the catalog session holding the
    /// slot of its name, open until the publication is dropped.
    session: Option<Client>,
}

/// The configured publication when it exists; else a temporary one tail creates
/// (after dropping the [`leftovers`]), kept alive by `client`'s session. A role that
/// may not create one gets the SQL for the configured publication.
pub(super) async fn prepare(
    client: Client,
    source: &SourceConfig,
) -> Result<TailPublication, CatalogError> {
    let configured = &source.publication;
    if catalog::publication_exists(&client, configured).await? {
        catalog::ensure_publication(&client, configured, &source.tables).await?;
        return Ok(TailPublication {
            name: configured.clone(),
            session: None,
        });
    }
    if let Err(err) = drop_leftovers(&client).await {
        tracing::warn!(error = %describe(&err), "cannot look for publications killed tails left behind");
    }
    let name = temporary_name();
    // The sign of life first: no moment when the publication exists without it.
    client
        .query(
            "SELECT pg_create_physical_replication_slot($1, false, true)",
            &[&name],
        )
        .await
        .map_err(|error| CatalogError::Query {
            context: format!(
                "creating temporary slot {name} (the sign of life of tail's publication)"
            ),
            error,
        })?;
    match catalog::ensure_publication(&client, &name, &source.tables).await {
        Ok(_) => {}
        Err(CatalogError::PublicationPermission { role, reason, .. }) => {
            return Err(CatalogError::PublicationPermission {
                role,
                publication: configured.clone(),
                reason,
                sql: create_publication_sql(configured, &source.tables),
            })
        }
        Err(other) => return Err(other),
    }
    tracing::info!(
        publication = %configured,
        temporary = %name,
        "publication does not exist: tail reads through a temporary publication of the outbox tables and drops it when it ends"
    );
    Ok(TailPublication {
        name,
        session: Some(client),
    })
}

impl TailPublication {
    /// Drop the publication if tail created it (a failure is logged with the SQL),
    /// then end the session: its slot goes last.
    pub(super) async fn release(self, conninfo: &ConnInfo) {
        let Some(session) = self.session else {
            return;
        };
        let sql = drop_sql(&self.name);
        let dropped = if session.is_closed() {
            // The session, and the slot with it, is gone: a new one drops it.
            match catalog::connect(conninfo).await {
                Ok(client) => client.batch_execute(&sql).await.map_err(|e| describe(&e)),
                Err(err) => Err(err.to_string()),
            }
        } else {
            session.batch_execute(&sql).await.map_err(|e| describe(&e))
        };
        match dropped {
            Ok(()) => tracing::info!(publication = %self.name, "dropped the temporary publication"),
            Err(error) => tracing::warn!(
                publication = %self.name,
                error = %error,
                "cannot drop the temporary publication tail created; fix: run {sql};"
            ),
        }
        drop(session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_names_are_recognised_strictly() {
        assert!(is_tail_name(&temporary_name()));
        assert!(is_tail_name("pgoutbox_tail_1_0"));
        for other in [
            "pgoutbox",
            "pgoutbox_tail_",
            "pgoutbox_tail_1",
            "pgoutbox_tail_1_",
            "pgoutbox_tail__1",
            "pgoutbox_tail_1_2_3",
            "pgoutbox_tail_mine",
            "pgoutbox_tail_1_2x",
            "pgoutbox_tail_-1_2",
            "xpgoutbox_tail_1_2",
            "pgoutbox_tail_1_2 ",
            "pgoutbox_tail_١_٢",
        ] {
            assert!(!is_tail_name(other), "{other:?}");
        }
    }
}
