//! Slot safety: refuse to relay from a slot that moved behind the relay's back, and
//! choose where a session starts.
//!
//! Owns the checks `run` makes before every replication session, against the state
//! file of [`crate::state`], and the start position ([`resume`]):
//!
//! ```text
//!  state file ───────────┐                     ┌─ slot invalidated (lost)   → SlotLost
//!  IDENTIFY_SYSTEM ──────┼─ before START_REPLICATION ─┼─ system identifier changed → SystemChanged
//!  pg_replication_slots ─┘                     ├─ older timeline than relayed → TimelineBehind
//!                                              ├─ slot missing, promoted    → SlotMissingAfterPromotion
//!                                              ├─ slot missing              → SlotMissing
//!                                              ├─ publication missing       → PublicationMissing
//!                                              └─ otherwise → Resume: state file's LSN or the slot's
//!  START_REPLICATION at that LSN (the slot is now ours, nobody else can move it)
//!  pg_replication_slots ── after ──┬─ confirmed_flush_lsn > file       → SlotAdvanced
//!                                  ├─ no file yet                      → adopt the slot's LSN
//!                                  ├─ other timeline, untrusted LSN    → rewrite with the slot's LSN
//!                                  └─ otherwise                        → Checkpoint for the session
//! ```
//!
//! Invariants: each finding is a definite error (the process exits non-zero) naming
//! the slot, the positions and the recovery; nothing is created or moved silently
//! while a state file exists. `--accept-slot-reset` lets one start go past a finding
//! deliberately — logging the exact skipped range and rewriting the file — except a
//! lost slot, which must be dropped by the operator first. A slot that moved while
//! another process held it (this relay stood by, then took over) is adopted with a
//! warning: the other holder is taken to be a relay on the same slot. A promoted
//! server (same system identifier, a later timeline) that has the slot — a
//! synchronized failover slot (PostgreSQL 17+) or one kept by the HA manager — is
//! followed from the slot's own position; without the slot it is a finding.
//!
//! Files: `mod.rs` the checks ([`SlotGuard`]), `error.rs` the findings
//! ([`SafetyError`]), [`resume`] where a session starts, `tests.rs` their unit tests.

mod error;
pub mod publication;
pub mod repair;
pub mod resume;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use tokio_postgres::Client;

use crate::pg::client::connection::PgError;
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::catalog::{self, SlotInfo};
use crate::pg::source::publication_state::{Baseline, Observed};
use crate::pg::source::replication::SystemIdentity;
use crate::state::{Checkpoint, SlotState, StateError, StateFile};

pub use error::SafetyError;
pub use resume::{Resume, SlotReason};

/// SQLSTATE `object_not_in_prerequisite_state`: reading an invalidated slot.
const NOT_IN_PREREQUISITE_STATE: &str = "55000";
/// SQLSTATE `undefined_object`: e.g. a publication pgoutput cannot find.
const UNDEFINED_OBJECT: &str = "42704";

/// What the checks need from the configuration.
#[derive(Debug, Clone)]
pub struct SafetyConfig {
    /// Directory of the state file; `None`: `--state-dir off`.
    pub state_dir: Option<PathBuf>,
    /// `--accept-slot-reset`: go past one finding at this start.
    pub accept_slot_reset: bool,
    /// `--accept-publication-change`: adopt the publication as it is at this start.
    pub accept_publication_change: bool,
    /// `--accept-type-change`: drop the column types kept in the state file.
    pub accept_type_change: bool,
    /// `--publication-repair on`: re-add a re-created outbox table and send its
    /// rows ([`repair`]).
    pub publication_repair: bool,
}

/// The checks of one `run` process; keeps what must survive reconnects.
#[derive(Debug)]
pub struct SlotGuard {
    /// `None`: `--state-dir off`.
    file: Option<StateFile>,
    slot: String,
    database: String,
    publication: String,
    /// `--accept-slot-reset`, until the first session starts.
    accept_reset: bool,
    /// `--accept-publication-change`, until a start used it.
    accept_publication: bool,
    /// `--accept-type-change`, until the first session starts.
    accept_type_change: bool,
    /// `--publication-repair on`.
    repair: bool,
    /// The slot was held by another process since the last session started.
    stood_by: bool,
    /// How to re-publish events, for messages.
    republish: Box<str>,
}

impl SlotGuard {
    /// The guard for `slot` of `database`; creates the state directory, warns when
    /// the state is off. `table`/`timestamp_column` only shape the recovery hint.
    pub fn open(
        cfg: &SafetyConfig,
        database: &str,
        slot: &str,
        publication: &str,
        table: &str,
        timestamp_column: &str,
    ) -> Result<Self, SafetyError> {
        let file = match &cfg.state_dir {
            Some(dir) => Some(StateFile::open(dir, database, slot)?),
            None => {
                tracing::warn!(
                    slot,
                    "--state-dir off: a slot that is advanced, dropped and re-created, or moved to another server will not be detected; events skipped that way are lost silently"
                );
                None
            }
        };
        if let Some(file) = &file {
            tracing::info!(path = %file.path().display(), "state file");
        }
        Ok(Self {
            file,
            slot: slot.to_owned(),
            database: database.to_owned(),
            publication: publication.to_owned(),
            accept_reset: cfg.accept_slot_reset,
            accept_publication: cfg.accept_publication_change,
            accept_type_change: cfg.accept_type_change,
            repair: cfg.publication_repair,
            stood_by: false,
            republish: Box::from(format!(
                "re-publish the missed events from the outbox table if they are still there (keeping their ids: WITH r AS (DELETE FROM {table} WHERE {timestamp_column} >= '<time of the last event seen in Kafka>' RETURNING *) INSERT INTO {table} SELECT * FROM r; see \"Slot safety\" in the README)"
            )),
        })
    }

    /// The recorded state, read from disk now (another relay sharing the directory
    /// may have written it).
    fn recorded(&self) -> Result<Option<SlotState>, StateError> {
        match &self.file {
            Some(file) => file.load(),
            None => Ok(None),
        }
    }

    /// Whether `run` may create a missing publication or slot at startup: only when
    /// the relay has no history with them (no state file, or state off) or the
    /// operator passed `--accept-slot-reset`.
    pub fn may_create(&self) -> Result<bool, SafetyError> {
        Ok(self.accept_reset || self.recorded()?.is_none())
    }

    /// Whether the state file keeps a publication baseline (the session's check
    /// then judges the publication against it).
    pub fn watches_publication(&self) -> Result<bool, SafetyError> {
        Ok(!self.accept_reset && self.recorded()?.is_some_and(|s| s.publication.is_some()))
    }

    /// START_REPLICATION found the slot held by another process: this relay stands
    /// by, and that process may move the slot meanwhile.
    pub fn note_standby(&mut self) {
        self.stood_by = true;
    }

    /// The checks before START_REPLICATION: system identifier, timeline,
    /// publication, slot presence and validity. `slot` is its `pg_replication_slots`
    /// row. Returns where the session starts.
    pub async fn before_start(
        &self,
        client: &Client,
        identity: &SystemIdentity,
        slot: Option<&SlotInfo>,
    ) -> Result<Resume, SafetyError> {
        if let Some(info) = slot {
            if info.wal_status.as_deref() == Some("lost") {
                return Err(self.lost("wal_status = lost".to_owned(), info));
            }
        }
        let recorded = self.recorded()?;
        let slot_lsn = slot
            .and_then(|s| s.confirmed_flush_lsn)
            .unwrap_or(Lsn::INVALID);
        let resume = resume::decide(recorded.as_ref(), identity, slot_lsn, self.accept_reset);
        let Some(recorded) = recorded else {
            return Ok(resume);
        };
        self.check_history(&recorded, identity, slot.is_some(), &resume)?;
        let path = self.path();
        if !catalog::publication_exists(client, &self.publication).await? {
            return Err(SafetyError::PublicationMissing {
                publication: self.publication.clone(),
                slot: self.slot.clone(),
                persisted: recorded.confirmed_lsn,
                path,
                republish: self.republish.clone(),
            });
        }
        Ok(resume)
    }

    /// The findings that need no query: another cluster, an older timeline, the
    /// slot missing (`has_slot`).
    fn check_history(
        &self,
        recorded: &SlotState,
        identity: &SystemIdentity,
        has_slot: bool,
        resume: &Resume,
    ) -> Result<(), SafetyError> {
        let path = self.path();
        if recorded.system_id != identity.system_id && !self.accept_reset {
            return Err(SafetyError::SystemChanged {
                slot: self.slot.clone(),
                server_system_id: identity.system_id.clone(),
                recorded_system_id: recorded.system_id.clone(),
                persisted: recorded.confirmed_lsn,
                path,
                republish: self.republish.clone(),
            });
        }
        if let Resume::Slot(SlotReason::TimelineBehind {
            recorded: t,
            server,
        }) = *resume
        {
            return Err(SafetyError::TimelineBehind {
                slot: self.slot.clone(),
                recorded: t,
                server,
                persisted: recorded.confirmed_lsn,
                path,
                republish: self.republish.clone(),
            });
        }
        if !has_slot {
            return Err(self.missing(recorded, identity, path));
        }
        Ok(())
    }

    /// The finding for a missing slot: after a promotion when the server is on a
    /// later timeline of the recorded cluster.
    fn missing(
        &self,
        recorded: &SlotState,
        identity: &SystemIdentity,
        path: PathBuf,
    ) -> SafetyError {
        match recorded.timeline {
            Some(from) if from < identity.timeline && recorded.system_id == identity.system_id => {
                SafetyError::SlotMissingAfterPromotion {
                    slot: self.slot.clone(),
                    from,
                    to: identity.timeline,
                    persisted: recorded.confirmed_lsn,
                    path,
                    republish: self.republish.clone(),
                }
            }
            _ => SafetyError::SlotMissing {
                slot: self.slot.clone(),
                persisted: recorded.confirmed_lsn,
                path,
                republish: self.republish.clone(),
            },
        }
    }

    /// The publication check of a start, before START_REPLICATION: `observed`
    /// compared with the baseline the state file keeps ([`publication`]). Returns
    /// the session's baseline: `observed` (or the recorded one with what is
    /// harmless adopted); a change stops the relay unless
    /// `--accept-publication-change` adopts it, once.
    pub fn publication_start(
        &mut self,
        identity: &SystemIdentity,
        observed: &Observed,
        tables: &[TableName],
    ) -> Result<(Baseline, bool), SafetyError> {
        // A baseline of another cluster (let through by --accept-slot-reset) says
        // nothing about this one's catalog.
        let recorded = self
            .recorded()?
            .filter(|s| s.system_id == identity.system_id);
        let Some(baseline) = recorded.and_then(|s| s.publication) else {
            tracing::info!(publication = %self.publication, wal = %observed.wal, "no publication baseline recorded yet: taking the publication as it is now");
            return Ok((Baseline::of(observed), false));
        };
        match publication::judge(&self.publication, tables, &baseline, observed) {
            Ok(next) => Ok((next, false)),
            // Repaired by the session once it holds the slot (a standby never
            // touches the publication): its watch reads at once.
            Err(changed)
                if self.repair
                    && !repair::repairable(&baseline.state, &observed.state).is_empty() =>
            {
                tracing::warn!(
                    publication = %self.publication,
                    "found at start: {}; repairing once the stream starts (--publication-repair on)",
                    changed.changes.join("; ")
                );
                Ok((baseline, true))
            }
            Err(changed) if std::mem::take(&mut self.accept_publication) => {
                tracing::warn!(
                    publication = %self.publication,
                    "--accept-publication-change: adopting the publication as it is now, after this change: {changed}"
                );
                Ok((Baseline::of(observed), false))
            }
            Err(changed) => Err(SafetyError::PublicationChanged(changed)),
        }
    }

    /// The check after START_REPLICATION succeeded (the slot is held by this relay,
    /// so `slot_lsn`, its confirmed_flush_lsn, can no longer move under it). `resume`
    /// is what [`SlotGuard::before_start`] decided. Returns the session's checkpoint.
    pub fn after_start(
        &mut self,
        identity: &SystemIdentity,
        slot_lsn: Lsn,
        resume: &Resume,
    ) -> Result<Checkpoint, SafetyError> {
        let Some(file) = self.file.clone() else {
            return Ok(Checkpoint::disabled());
        };
        let accept = std::mem::take(&mut self.accept_reset);
        let stood_by = std::mem::take(&mut self.stood_by);
        let mut current = SlotState::new(
            &identity.system_id,
            identity.timeline,
            &self.database,
            &self.slot,
            slot_lsn,
        );
        let Some(recorded) = file.load()? else {
            file.write(&current)?;
            tracing::info!(slot = %self.slot, lsn = %slot_lsn, path = %file.path().display(), "no state file yet: adopting the slot's position");
            return Ok(Checkpoint::new(file, current));
        };
        let persisted = recorded.confirmed_lsn;
        if recorded.system_id != identity.system_id {
            // before_start let this through only with --accept-slot-reset.
            tracing::warn!(
                slot = %self.slot,
                recorded_system_id = %recorded.system_id,
                server_system_id = %identity.system_id,
                from = %persisted,
                to = %slot_lsn,
                "--accept-slot-reset: relaying from another cluster than before; events not relayed on the old one are not relayed"
            );
        } else if slot_lsn > persisted {
            if accept {
                tracing::warn!(
                    slot = %self.slot,
                    from = %persisted,
                    to = %slot_lsn,
                    "--accept-slot-reset: skipping the WAL from {persisted} to {slot_lsn}; events committed in that range are not relayed"
                );
            } else if stood_by {
                tracing::warn!(
                    slot = %self.slot,
                    from = %persisted,
                    to = %slot_lsn,
                    "the slot moved from {persisted} to {slot_lsn} while another process held it; adopting its position (taken over from another relay)"
                );
            } else {
                return Err(SafetyError::SlotAdvanced {
                    slot: self.slot.clone(),
                    slot_lsn,
                    persisted,
                    path: file.path().to_owned(),
                    republish: self.republish.clone(),
                });
            }
        } else if resume.distrusts_record() || recorded.timeline != Some(identity.timeline) {
            // Another (or an unknown) history: the recorded LSN says nothing about
            // this server's WAL. From now on the file follows the slot on this one.
            tracing::info!(
                slot = %self.slot,
                recorded = %recorded,
                timeline = identity.timeline,
                lsn = %slot_lsn,
                "state file rewritten to the slot's position on the server's timeline"
            );
        } else {
            if accept {
                tracing::info!(slot = %self.slot, "--accept-slot-reset: the slot matches the state file; nothing to accept");
            }
            return Ok(Checkpoint::new(file, recorded));
        }
        if recorded.system_id == identity.system_id {
            // The same database's tables: their kept column types still hold.
            current.pinned_types = recorded.pinned_types;
        }
        file.write(&current)?;
        Ok(Checkpoint::new(file, current))
    }

    /// `--accept-type-change`, for the first session only (later sessions of the
    /// process judge against what it pinned itself).
    pub fn take_accept_type_change(&mut self) -> bool {
        std::mem::take(&mut self.accept_type_change)
    }

    /// A definite explanation for a server error met while starting or streaming,
    /// when it is one of the slot-safety conditions.
    pub fn explain(&self, err: &PgError) -> Option<SafetyError> {
        let PgError::Db(db) = err else { return None };
        match db.code.as_str() {
            // PostgreSQL 18 warns and skips instead of failing (see
            // replication::stream_notice_is_fatal); it is the same condition.
            _ if db
                .message
                .starts_with(crate::pg::source::replication::SKIPPED_PUBLICATION) =>
            {
                Some(self.publication_gone(db))
            }
            NOT_IN_PREREQUISITE_STATE if db.message.contains("replication slot") => {
                Some(SafetyError::SlotLost {
                    slot: self.slot.clone(),
                    observed: db.to_string(),
                    confirmed: self.last_known(),
                    republish: self.republish.clone(),
                })
            }
            UNDEFINED_OBJECT if db.message.contains("publication") => {
                Some(self.publication_gone(db))
            }
            _ => None,
        }
    }

    fn publication_gone(&self, db: &crate::pg::client::connection::DbError) -> SafetyError {
        SafetyError::PublicationGone {
            publication: self.publication.clone(),
            slot: self.slot.clone(),
            server: db.to_string(),
            republish: self.republish.clone(),
        }
    }

    fn lost(&self, observed: String, info: &SlotInfo) -> SafetyError {
        SafetyError::SlotLost {
            slot: self.slot.clone(),
            observed,
            confirmed: info
                .confirmed_flush_lsn
                .unwrap_or_else(|| self.last_known()),
            republish: self.republish.clone(),
        }
    }

    fn last_known(&self) -> Lsn {
        self.recorded()
            .ok()
            .flatten()
            .map_or(Lsn::INVALID, |s| s.confirmed_lsn)
    }

    fn path(&self) -> PathBuf {
        self.file
            .as_ref()
            .map(|f| f.path().to_owned())
            .unwrap_or_default()
    }
}
