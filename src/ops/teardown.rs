//! `pgoutbox teardown`: drop the replication slot, then the publication.
//!
//! Owns the order and the safety rules of removal. The slot goes first — the reverse
//! of `setup` — because it is what pins WAL on the server: if dropping the
//! publication fails (it needs its owner), the disk is already safe. Invariants:
//! - idempotent: what is already gone is reported as absent, not as an error;
//! - an active slot is never dropped (the error names the walsender pid): a running
//!   relay is stopped first, never cut off;
//! - only a slot that looks like the relay's — a `pgoutput` logical slot of this
//!   database — is dropped; anything else of that name is someone else's.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use crate::pg::catalog::{self, CatalogError};
use crate::pg::conninfo::ConnInfo;
use crate::pg::replication::{quote_ident, quote_literal};

/// What teardown did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownOutcome {
    /// Slot name.
    pub slot: String,
    /// Whether the slot was dropped now (`false`: it did not exist).
    pub slot_dropped: bool,
    /// Publication name.
    pub publication: String,
    /// Whether the publication was dropped now (`false`: it did not exist).
    pub publication_dropped: bool,
}

impl TeardownOutcome {
    /// `{"slot", "slot_dropped", "publication", "publication_dropped"}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "slot": self.slot,
            "slot_dropped": self.slot_dropped,
            "publication": self.publication,
            "publication_dropped": self.publication_dropped,
        })
    }

    /// One line per object.
    pub fn render(&self) -> String {
        let said = |dropped| if dropped { "dropped" } else { "already absent" };
        format!(
            "replication slot {}: {}\npublication {}: {}\n",
            self.slot,
            said(self.slot_dropped),
            self.publication,
            said(self.publication_dropped)
        )
    }
}

/// Drop `slot` (when it exists and is inactive), then `publication` (if it exists).
pub async fn teardown(
    conninfo: &ConnInfo,
    slot: &str,
    publication: &str,
) -> Result<TeardownOutcome, CatalogError> {
    let client = catalog::connect(conninfo).await?;
    let slot_dropped = drop_slot(&client, slot).await?;
    let publication_dropped = drop_publication(&client, publication).await?;
    Ok(TeardownOutcome {
        slot: slot.to_owned(),
        slot_dropped,
        publication: publication.to_owned(),
        publication_dropped,
    })
}

async fn drop_slot(client: &Client, slot: &str) -> Result<bool, CatalogError> {
    let Some(info) = catalog::slot_info(client, slot).await? else {
        return Ok(false);
    };
    catalog::check_slot_kind(&info)?;
    catalog::check_slot_database(client, &info).await?;
    if let (true, Some(pid)) = (info.active, info.active_pid) {
        return Err(CatalogError::SlotActive {
            slot: slot.to_owned(),
            pid,
        });
    }
    let sql = format!("SELECT pg_drop_replication_slot({})", quote_literal(slot));
    match client.batch_execute(&sql).await {
        Ok(()) => {
            tracing::info!(slot, "dropped replication slot");
            Ok(true)
        }
        // Dropped by someone else since the lookup.
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_OBJECT) => Ok(false),
        // A walsender acquired it since the lookup.
        Err(e) if e.code() == Some(&SqlState::OBJECT_IN_USE) => {
            match catalog::slot_info(client, slot)
                .await?
                .and_then(|again| again.active_pid)
            {
                Some(pid) => Err(CatalogError::SlotActive {
                    slot: slot.to_owned(),
                    pid,
                }),
                None => Err(query_failed(format!("dropping replication slot {slot}"), e)),
            }
        }
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            Err(permission(client, format!("replication slot {slot:?}"), e, sql).await)
        }
        Err(e) => Err(query_failed(format!("dropping replication slot {slot}"), e)),
    }
}

async fn drop_publication(client: &Client, publication: &str) -> Result<bool, CatalogError> {
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| query_failed(format!("looking up publication {publication}"), e))?
        .is_some();
    if !exists {
        return Ok(false);
    }
    let sql = format!("DROP PUBLICATION IF EXISTS {}", quote_ident(publication));
    match client.batch_execute(&sql).await {
        Ok(()) => {
            tracing::info!(publication, "dropped publication");
            Ok(true)
        }
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            Err(permission(client, format!("publication {publication:?}"), e, sql).await)
        }
        Err(e) => Err(query_failed(
            format!("dropping publication {publication}"),
            e,
        )),
    }
}

fn query_failed(context: String, error: tokio_postgres::Error) -> CatalogError {
    CatalogError::Query { context, error }
}

async fn permission(
    client: &Client,
    object: String,
    err: tokio_postgres::Error,
    sql: String,
) -> CatalogError {
    let role = client
        .query_one("SELECT current_user::text", &[])
        .await
        .map(|r| r.get(0))
        .unwrap_or_default();
    CatalogError::DropPermission {
        role,
        object,
        reason: err
            .as_db_error()
            .map(|d| d.message().to_owned())
            .unwrap_or_else(|| err.to_string()),
        sql: format!("{sql};"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_and_json() {
        let outcome = TeardownOutcome {
            slot: "s".into(),
            slot_dropped: true,
            publication: "p".into(),
            publication_dropped: false,
        };
        assert_eq!(
            outcome.render(),
            "replication slot s: dropped\npublication p: already absent\n"
        );
        assert_eq!(outcome.to_json()["slot_dropped"], true);
        assert_eq!(outcome.to_json()["publication_dropped"], false);
    }

    #[test]
    fn active_slot_error_names_pid_and_fix() {
        let err = CatalogError::SlotActive {
            slot: "s".into(),
            pid: 77,
        };
        assert_eq!(
            err.to_string(),
            "replication slot \"s\" is active (walsender pid 77); fix: stop the relay first \
             (or end that session: SELECT pg_terminate_backend(77))"
        );
    }
}
