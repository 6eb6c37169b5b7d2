//! The publication tail reads through, and leaving the database as tail found it.
//!
//! pgoutput needs a publication. When the configured one exists, tail reads through
//! it (after checking it covers the outbox tables) and never alters it. When it does
//! not, tail creates a *temporary* publication of the outbox tables under a name of
//! its own (`pgoutbox_tail_<pid>_<nanos>`, like its temporary slot) and drops it when
//! it ends — at the limit, on SIGINT/SIGTERM, on a closed stdout and on an error.
//!
//! Why a name of its own rather than the configured one: a `run` started while tail
//! runs would adopt a publication named like its own and lose it when tail drops it;
//! nothing else uses tail's private name.
//!
//! Invariants: tail drops only a publication it created in this process; a drop
//! that fails is logged with the exact SQL to run. Only a killed tail (SIGKILL,
//! crash) leaves its publication behind, and its name says whose it is.

use crate::pg::client::conninfo::ConnInfo;
use crate::pg::names::quote_ident;
use crate::pg::source::catalog::{self, create_publication_sql, CatalogError};
use crate::pg::source::SourceConfig;

/// The publication of one tail.
#[derive(Debug)]
pub(super) struct TailPublication {
    /// Its name.
    pub name: String,
    /// Whether tail created it (and must drop it).
    temporary: bool,
}

/// The configured publication when it exists; else a temporary one tail creates. A
/// role that may not create one gets the SQL for the configured publication.
pub(super) async fn prepare(
    client: &tokio_postgres::Client,
    source: &SourceConfig,
) -> Result<TailPublication, CatalogError> {
    let configured = &source.publication;
    if catalog::publication_exists(client, configured).await? {
        catalog::ensure_publication(client, configured, &source.tables).await?;
        return Ok(TailPublication {
            name: configured.clone(),
            temporary: false,
        });
    }
    let name = super::temporary_name();
    match catalog::ensure_publication(client, &name, &source.tables).await {
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
        temporary: true,
    })
}

impl TailPublication {
    /// Drop the publication if tail created it; a failure is logged with the SQL.
    pub(super) async fn release(self, conninfo: &ConnInfo) {
        if !self.temporary {
            return;
        }
        let sql = format!("DROP PUBLICATION IF EXISTS {}", quote_ident(&self.name));
        let dropped = match catalog::connect(conninfo).await {
            Ok(client) => client.batch_execute(&sql).await.map_err(|e| e.to_string()),
            Err(err) => Err(err.to_string()),
        };
        match dropped {
            Ok(()) => tracing::info!(publication = %self.name, "dropped the temporary publication"),
            Err(error) => tracing::warn!(
                publication = %self.name,
                error = %error,
                "cannot drop the temporary publication tail created; fix: run {sql};"
            ),
        }
    }
}
