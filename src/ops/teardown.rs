//! `pgoutbox teardown`: drop the replication slot, then the publication, then the
//! relay's state file of that slot.
//!
//! Owns the order and the safety rules of removal. The slot goes first — the reverse
//! of `setup` — because it is what pins WAL on the server: if dropping the
//! publication fails (it needs its owner), the disk is already safe. The state file
//! (`run`'s record of the slot's position, in the same `--state-dir`) goes last: a
//! deliberate teardown is no "slot dropped behind the relay's back", so the next
//! `run` must start afresh instead of refusing. Invariants:
//! - idempotent: what is already gone is reported as absent, not as an error;
//! - an active slot is never dropped (the error names the walsender pid): a running
//!   relay is stopped first, never cut off;
//! - only a slot that looks like the relay's — a `pgoutput` logical slot of this
//!   database — is dropped; anything else of that name is someone else's;
//! - the state file is removed only once the slot is gone, and only when it records
//!   this server (its system identifier): a file of another server — e.g. teardown
//!   aimed at a failover target that never had the slot — is kept and said so;
//! - publications killed `tail`s left behind go too, and only those: never one a
//!   running tail reads through ([`crate::tail::leftovers`] says how they are told
//!   apart).

use std::path::{Path, PathBuf};

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use crate::pg::client::conninfo::ConnInfo;
use crate::pg::lsn::Lsn;
use crate::pg::names::{quote_ident, quote_literal};
use crate::pg::source::catalog::{self, CatalogError};
use crate::state::{StateError, StateFile};

/// Why teardown stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TeardownError {
    /// A query, a slot that is not the relay's, an active slot, a missing privilege.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The state file could not be read or removed.
    #[error(transparent)]
    State(#[from] StateError),
}

/// What became of the relay's state file of the slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateCleanup {
    /// `--state-dir off`: there is none.
    Off,
    /// There was none at this path.
    Absent(PathBuf),
    /// Removed: the next `run` adopts a new slot's position.
    Removed {
        /// The file.
        path: PathBuf,
        /// The position it recorded.
        confirmed: Lsn,
    },
    /// Kept: it records another server (`recorded` ≠ `server` system identifier).
    OtherServer {
        /// The file.
        path: PathBuf,
        /// The system identifier in the file.
        recorded: String,
        /// This server's.
        server: String,
    },
}

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
    /// The relay's state file of the slot.
    pub state: StateCleanup,
    /// Publications killed `tail`s left behind, dropped now.
    pub tail_publications_dropped: Vec<String>,
}

impl TeardownOutcome {
    /// `{"slot", "slot_dropped", "publication", "publication_dropped",
    /// "state_file", "state_file_removed", "tail_publications_dropped"}`
    /// (`state_file` is null with `--state-dir off`).
    pub fn to_json(&self) -> serde_json::Value {
        let (path, removed) = match &self.state {
            StateCleanup::Off => (None, false),
            StateCleanup::Removed { path, .. } => (Some(path), true),
            StateCleanup::Absent(p) | StateCleanup::OtherServer { path: p, .. } => (Some(p), false),
        };
        serde_json::json!({
            "slot": self.slot,
            "slot_dropped": self.slot_dropped,
            "publication": self.publication,
            "publication_dropped": self.publication_dropped,
            "state_file": path.map(|p| p.display().to_string()),
            "state_file_removed": removed,
            "tail_publications_dropped": self.tail_publications_dropped,
        })
    }

    /// One line per object.
    pub fn render(&self) -> String {
        let said = |dropped| if dropped { "dropped" } else { "already absent" };
        let mut out = format!(
            "replication slot {}: {}\npublication {}: {}\n",
            self.slot,
            said(self.slot_dropped),
            self.publication,
            said(self.publication_dropped)
        );
        match &self.state {
            StateCleanup::Off => {}
            StateCleanup::Absent(path) => {
                out.push_str(&format!("state file {}: already absent\n", path.display()))
            }
            StateCleanup::Removed { path, confirmed } if !self.slot_dropped => {
                out.push_str(&format!(
                    "state file {}: removed — the slot was already gone, so events committed \
                     after {confirmed} (the last position the relay confirmed) may never have \
                     reached Kafka; see \"Slot safety\" in the README to re-publish them\n",
                    path.display()
                ))
            }
            StateCleanup::Removed { path, .. } => out.push_str(&format!(
                "state file {}: removed (the next run starts afresh)\n",
                path.display()
            )),
            StateCleanup::OtherServer {
                path,
                recorded,
                server,
            } => out.push_str(&format!(
                "state file {}: kept — it records server {recorded}, this is server {server}; \
                 it still guards that server's slot (remove it by hand if that relay is gone)\n",
                path.display()
            )),
        }
        for name in &self.tail_publications_dropped {
            out.push_str(&format!(
                "publication {name}: dropped (left behind by a killed tail)\n"
            ));
        }
        out
    }
}

/// Drop `slot` (when it exists and is inactive), then `publication` (if it exists),
/// then the state file `run` keeps of the slot in `state_dir` (`None`: `--state-dir
/// off`) when it records this server.
pub async fn teardown(
    conninfo: &ConnInfo,
    slot: &str,
    publication: &str,
    state_dir: Option<&Path>,
) -> Result<TeardownOutcome, TeardownError> {
    let client = catalog::connect(conninfo).await?;
    let slot_dropped = drop_slot(&client, slot).await?;
    let publication_dropped = drop_publication(&client, publication).await?;
    let tail_publications_dropped = crate::tail::drop_leftovers(&client)
        .await
        .map_err(|e| query_failed("dropping publications killed tails left behind".into(), e))?;
    let state = match state_dir {
        Some(dir) => clear_state(&client, StateFile::at(dir, &conninfo.dbname, slot)).await?,
        None => StateCleanup::Off,
    };
    Ok(TeardownOutcome {
        slot: slot.to_owned(),
        slot_dropped,
        publication: publication.to_owned(),
        publication_dropped,
        state,
        tail_publications_dropped,
    })
}

/// Remove `file` if it records this server (the slot is gone by now).
async fn clear_state(client: &Client, file: StateFile) -> Result<StateCleanup, TeardownError> {
    let path = file.path().to_owned();
    let Some(recorded) = file.load()? else {
        return Ok(StateCleanup::Absent(path));
    };
    let server: String = client
        .query_one(
            "SELECT system_identifier::text FROM pg_control_system()",
            &[],
        )
        .await
        .map_err(|e| query_failed("reading the server's system identifier".into(), e))?
        .get(0);
    if recorded.system_id != server {
        return Ok(StateCleanup::OtherServer {
            path,
            recorded: recorded.system_id,
            server,
        });
    }
    file.remove()?;
    tracing::info!(path = %path.display(), state = %recorded, "removed state file");
    Ok(StateCleanup::Removed {
        path,
        confirmed: recorded.confirmed_lsn,
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
            state: StateCleanup::Removed {
                path: "/var/lib/pgoutbox/shop.s.state".into(),
                confirmed: Lsn(0x16B_3748),
            },
            tail_publications_dropped: vec![],
        };
        assert_eq!(
            outcome.render(),
            "replication slot s: dropped\npublication p: already absent\n\
             state file /var/lib/pgoutbox/shop.s.state: removed (the next run starts afresh)\n"
        );
        assert_eq!(outcome.to_json()["slot_dropped"], true);
        assert_eq!(outcome.to_json()["publication_dropped"], false);
        assert_eq!(outcome.to_json()["state_file_removed"], true);
        let off = TeardownOutcome {
            state: StateCleanup::Off,
            ..outcome.clone()
        };
        assert!(!off.render().contains("state file"));
        let gone = TeardownOutcome {
            slot_dropped: false,
            ..outcome.clone()
        };
        assert!(gone
            .render()
            .contains("removed — the slot was already gone, so events committed after 0/16B3748"));
        assert_eq!(off.to_json()["state_file"], serde_json::Value::Null);
        let leftovers = TeardownOutcome {
            tail_publications_dropped: vec!["pgoutbox_tail_7_1".into()],
            ..off
        };
        assert_eq!(
            leftovers.render(),
            "replication slot s: dropped\npublication p: already absent\n\
             publication pgoutbox_tail_7_1: dropped (left behind by a killed tail)\n"
        );
        assert_eq!(
            leftovers.to_json()["tail_publications_dropped"],
            serde_json::json!(["pgoutbox_tail_7_1"])
        );
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
