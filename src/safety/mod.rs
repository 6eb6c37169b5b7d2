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

pub mod resume;

use std::path::PathBuf;

use tokio_postgres::Client;

use crate::pg::catalog::{self, CatalogError, SlotInfo};
use crate::pg::connection::PgError;
use crate::pg::lsn::Lsn;
use crate::pg::replication::{quote_literal, SystemIdentity};
use crate::state::{Checkpoint, SlotState, StateError, StateFile};

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
}

/// A finding that stops the relay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetyError {
    /// The state file is unusable.
    #[error(transparent)]
    State(#[from] StateError),
    /// A catalog query failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The slot is ahead of the state file.
    #[error("replication slot \"{slot}\" is at {slot_lsn}, ahead of {persisted}, the last position this relay confirmed (state file {path}): it was advanced (pg_replication_slot_advance) or dropped and re-created behind the relay's back, so events committed between {persisted} and {slot_lsn} may never have been relayed; fix: {republish}, then start once with --accept-slot-reset; or accept the gap: start once with --accept-slot-reset")]
    SlotAdvanced {
        slot: String,
        slot_lsn: Lsn,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The slot is gone but the relay has relayed from it.
    #[error("replication slot \"{slot}\" does not exist, but this relay confirmed up to {persisted} on it (state file {path}): it was dropped, or this server is a failover target or a restored backup without it; a new slot would start at the current WAL position and skip every event committed after {persisted}, so pgoutbox does not create one; fix: if --database-url points at the wrong server, correct it; otherwise {republish}, then start once with --accept-slot-reset to create the slot")]
    SlotMissing {
        slot: String,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The server was promoted (a later timeline of the same cluster) without the slot.
    #[error("replication slot \"{slot}\" does not exist on this server, which was promoted from timeline {from} to {to} after this relay confirmed up to {persisted} on the old primary (state file {path}): no copy of the slot was kept on it (PostgreSQL 16 and older have no failover slots; on 17+ the slot lacks failover = true or the standby lacks sync_replication_slots = on), and a new slot would start at the current WAL position and skip every event committed after {persisted}, so pgoutbox does not create one; fix: {republish}, then start once with --accept-slot-reset to create the slot; to follow the next failover by itself, use failover slots (PostgreSQL 17+: --slot-failover, sync_replication_slots = on on the standby, synchronized_standby_slots on the primary) or let the HA manager keep the slot on every node (Patroni permanent slots); see \"Failover\" in the README")]
    SlotMissingAfterPromotion {
        slot: String,
        from: u32,
        to: u32,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The server is on an older timeline than the relay relayed on.
    #[error("the server is on timeline {server}, but this relay already relayed slot \"{slot}\" on timeline {recorded} of the same cluster up to {persisted} (state file {path}): --database-url points at a former primary that was not rewound after a failover, or at a backup restored from before it, whose history after the switch differs from what was relayed; fix: point --database-url at the current primary (with several hosts, add target_session_attrs=read-write); if this server is deliberately the primary again, {republish}, then start once with --accept-slot-reset")]
    TimelineBehind {
        slot: String,
        recorded: u32,
        server: u32,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The slot was invalidated: its WAL is gone.
    #[error("replication slot \"{slot}\" was invalidated ({observed}): PostgreSQL removed WAL the slot still needed (max_slot_wal_keep_size was exceeded while the relay was behind or stopped), so the events after {confirmed} can no longer be decoded from it; fix: drop it with SELECT pg_drop_replication_slot({slot_literal}), {republish}, then start once with --accept-slot-reset to create a new slot; raise max_slot_wal_keep_size (and alert on wal_status = unreserved) so it does not happen again", slot_literal = quote_literal(.slot))]
    SlotLost {
        slot: String,
        observed: String,
        confirmed: Lsn,
        republish: Box<str>,
    },
    /// The publication is gone but the relay has relayed through it.
    #[error("publication \"{publication}\" does not exist, but this relay relayed slot \"{slot}\" through it up to {persisted} (state file {path}); re-creating it silently would not help, because the slot's pending changes predate a new publication and PostgreSQL cannot decode them with it; fix: {republish}, drop the slot with SELECT pg_drop_replication_slot({slot_literal}), then start once with --accept-slot-reset to create publication and slot again", slot_literal = quote_literal(.slot))]
    PublicationMissing {
        publication: String,
        slot: String,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
    /// The server could not decode the slot because the publication is missing.
    #[error("PostgreSQL cannot decode replication slot \"{slot}\": {server}; publication \"{publication}\" was dropped (or dropped and re-created) at a WAL position the slot has not passed yet, and reconnecting cannot fix that; fix: re-create the publication if it is gone (pgoutbox setup --print-sql shows the statement), {republish}, drop the slot with SELECT pg_drop_replication_slot({slot_literal}), then start once with --accept-slot-reset", slot_literal = quote_literal(.slot))]
    PublicationGone {
        publication: String,
        slot: String,
        server: String,
        republish: Box<str>,
    },
    /// The server is another cluster than the one the state file was written for.
    #[error("the server's system identifier is {server_system_id}, but this relay relayed slot \"{slot}\" on system {recorded_system_id} up to {persisted} (state file {path}): --database-url now points at another cluster (a restored backup, a logical copy, a new server); fix: point --database-url back at the original server; if the move is deliberate, {republish} on the new server, then start once with --accept-slot-reset")]
    SystemChanged {
        slot: String,
        server_system_id: String,
        recorded_system_id: String,
        persisted: Lsn,
        path: PathBuf,
        republish: Box<str>,
    },
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
        let current = SlotState::new(
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
        file.write(&current)?;
        Ok(Checkpoint::new(file, current))
    }

    /// A definite explanation for a server error met while starting or streaming,
    /// when it is one of the slot-safety conditions.
    pub fn explain(&self, err: &PgError) -> Option<SafetyError> {
        let PgError::Db(db) = err else { return None };
        match db.code.as_str() {
            NOT_IN_PREREQUISITE_STATE if db.message.contains("replication slot") => {
                Some(SafetyError::SlotLost {
                    slot: self.slot.clone(),
                    observed: db.to_string(),
                    confirmed: self.last_known(),
                    republish: self.republish.clone(),
                })
            }
            UNDEFINED_OBJECT if db.message.contains("publication") => {
                Some(SafetyError::PublicationGone {
                    publication: self.publication.clone(),
                    slot: self.slot.clone(),
                    server: db.to_string(),
                    republish: self.republish.clone(),
                })
            }
            _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::connection::DbError;

    fn identity(system_id: &str) -> SystemIdentity {
        on_timeline(system_id, 1)
    }

    fn on_timeline(system_id: &str, timeline: u32) -> SystemIdentity {
        SystemIdentity {
            system_id: system_id.to_owned(),
            timeline,
            xlogpos: Lsn(1 << 40),
            dbname: Some("shop".into()),
        }
    }

    impl SlotGuard {
        /// What `run` does around START_REPLICATION, minus the server: decide from
        /// the file and the slot's position before the start, then check after it.
        fn start(
            &mut self,
            identity: &SystemIdentity,
            slot_lsn: Lsn,
        ) -> Result<Checkpoint, SafetyError> {
            let recorded = self.recorded()?;
            let resume = resume::decide(recorded.as_ref(), identity, slot_lsn, self.accept_reset);
            if let Some(recorded) = &recorded {
                self.check_history(recorded, identity, true, &resume)?;
            }
            self.after_start(identity, slot_lsn, &resume)
        }
    }

    fn guard(dir: Option<PathBuf>, accept: bool) -> SlotGuard {
        let cfg = SafetyConfig {
            state_dir: dir,
            accept_slot_reset: accept,
        };
        SlotGuard::open(&cfg, "shop", "s1", "pub", "outbox", "created_at").unwrap()
    }

    /// Assert `text` contains every one of `needles`.
    fn mentions(text: &str, needles: &[&str]) {
        for needle in needles {
            assert!(text.contains(needle), "{needle}: {text}");
        }
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pgoutbox-safety-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn recorded(dir: &std::path::Path) -> Lsn {
        StateFile::open(dir, "shop", "s1")
            .unwrap()
            .load()
            .unwrap()
            .unwrap()
            .confirmed_lsn
    }

    #[test]
    fn first_start_adopts_then_a_slot_ahead_is_refused() {
        let dir = temp_dir("ahead");
        let mut g = guard(Some(dir.clone()), false);
        assert!(g.may_create().unwrap());
        let cp = g.start(&identity("1"), Lsn(100)).unwrap();
        assert_eq!(cp.persisted(), Some(Lsn(100)));
        assert!(!g.may_create().unwrap(), "history exists now");
        // Behind or equal: a crash or a normal restart.
        g.start(&identity("1"), Lsn(90)).unwrap();
        g.start(&identity("1"), Lsn(100)).unwrap();
        let err = g.start(&identity("1"), Lsn(200)).unwrap_err();
        assert!(matches!(err, SafetyError::SlotAdvanced { .. }), "{err}");
        let text = err.to_string();
        mentions(
            &text,
            &[
                "\"s1\"",
                "0/C8",
                "0/64",
                "--accept-slot-reset",
                "shop.s1.state",
            ],
        );
        assert_eq!(recorded(&dir), Lsn(100), "a refusal leaves the file alone");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn accept_applies_once_and_standby_takeover_adopts() {
        let dir = temp_dir("accept");
        guard(Some(dir.clone()), false)
            .start(&identity("1"), Lsn(100))
            .unwrap();
        let mut g = guard(Some(dir.clone()), true);
        g.start(&identity("1"), Lsn(200)).unwrap();
        assert_eq!(recorded(&dir), Lsn(200), "rewritten to the slot");
        assert!(
            g.start(&identity("1"), Lsn(300)).is_err(),
            "the flag applied to one start only"
        );
        g.note_standby();
        g.start(&identity("1"), Lsn(300)).unwrap();
        assert_eq!(recorded(&dir), Lsn(300));
        assert!(
            g.start(&identity("1"), Lsn(400)).is_err(),
            "a takeover is forgiven once, not forever"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn recorded_state(dir: &std::path::Path) -> SlotState {
        StateFile::open(dir, "shop", "s1")
            .unwrap()
            .load()
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_promoted_server_with_the_slot_is_followed_and_the_file_takes_its_timeline() {
        let dir = temp_dir("promoted");
        let mut g = guard(Some(dir.clone()), false);
        g.start(&on_timeline("1", 1), Lsn(500)).unwrap();
        assert_eq!(recorded_state(&dir).timeline, Some(1));
        // The synchronized slot on the new primary lags the old one: not a finding.
        let cp = g.start(&on_timeline("1", 2), Lsn(300)).unwrap();
        let state = recorded_state(&dir);
        assert_eq!((state.timeline, state.confirmed_lsn), (Some(2), Lsn(300)));
        assert_eq!(
            cp.persisted(),
            Some(Lsn(300)),
            "the old timeline's 0/1F4 is not trusted"
        );
        // Next start on the same timeline resumes from the file again.
        let recorded = g.recorded().unwrap();
        let resume = resume::decide(recorded.as_ref(), &on_timeline("1", 2), Lsn(100), false);
        assert_eq!(
            resume,
            Resume::StateFile {
                lsn: Lsn(300),
                slot: Lsn(100)
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_old_file_without_timeline_trusts_the_slot_once() {
        let dir = temp_dir("untimed");
        let file = StateFile::open(&dir, "shop", "s1").unwrap();
        let mut old = SlotState::new("1", 1, "shop", "s1", Lsn(500));
        old.timeline = None;
        file.write(&old).unwrap();
        let mut g = guard(Some(dir.clone()), false);
        let cp = g.start(&on_timeline("1", 1), Lsn(300)).unwrap();
        assert_eq!(cp.persisted(), Some(Lsn(300)));
        assert_eq!(recorded_state(&dir).timeline, Some(1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_slot_ahead_is_refused_on_a_new_timeline_too() {
        let dir = temp_dir("promoted-ahead");
        let mut g = guard(Some(dir.clone()), false);
        g.start(&on_timeline("1", 1), Lsn(500)).unwrap();
        let err = g.start(&on_timeline("1", 2), Lsn(900)).unwrap_err();
        assert!(matches!(err, SafetyError::SlotAdvanced { .. }), "{err}");
        assert_eq!(
            recorded_state(&dir).timeline,
            Some(1),
            "a refusal leaves the file alone"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn promotion_without_the_slot_and_a_former_primary_are_findings() {
        let dir = temp_dir("findings");
        let mut g = guard(Some(dir.clone()), false);
        g.start(&on_timeline("1", 2), Lsn(500)).unwrap();
        let recorded = g.recorded().unwrap().unwrap();
        let check = |identity: &SystemIdentity, has_slot: bool| {
            let resume = resume::decide(Some(&recorded), identity, Lsn(0), false);
            g.check_history(&recorded, identity, has_slot, &resume)
        };
        let missing = check(&on_timeline("1", 3), false).unwrap_err();
        assert!(
            matches!(missing, SafetyError::SlotMissingAfterPromotion { .. }),
            "{missing}"
        );
        let text = missing.to_string();
        mentions(
            &text,
            &[
                "timeline 2 to 3",
                "0/1F4",
                "--accept-slot-reset",
                "Patroni",
                "--slot-failover",
                "synchronized_standby_slots",
            ],
        );
        let same = check(&on_timeline("1", 2), false).unwrap_err();
        assert!(matches!(same, SafetyError::SlotMissing { .. }), "{same}");
        let behind = check(&on_timeline("1", 1), true).unwrap_err();
        assert!(
            matches!(behind, SafetyError::TimelineBehind { .. }),
            "{behind}"
        );
        let text = behind.to_string();
        mentions(
            &text,
            &[
                "timeline 1",
                "timeline 2",
                "former primary",
                "target_session_attrs=read-write",
            ],
        );
        check(&on_timeline("1", 3), true).unwrap();
        let stranger = check(&on_timeline("9", 3), true).unwrap_err();
        assert!(
            matches!(stranger, SafetyError::SystemChanged { .. }),
            "{stranger}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn state_off_checks_nothing_and_writes_nothing() {
        let mut g = guard(None, false);
        assert!(g.may_create().unwrap());
        let cp = g.start(&identity("1"), Lsn(100)).unwrap();
        assert_eq!(cp.persisted(), None);
        g.start(&identity("2"), Lsn(1)).unwrap();
    }

    #[test]
    fn server_errors_that_are_slot_safety_findings() {
        let g = guard(None, false);
        let db = |code: &str, message: &str| {
            PgError::Db(DbError {
                severity: "ERROR".into(),
                code: code.into(),
                message: message.into(),
                ..DbError::default()
            })
        };
        let lost = g
            .explain(&db(
                "55000",
                "can no longer get changes from replication slot \"s1\"",
            ))
            .unwrap()
            .to_string();
        assert!(lost.contains("was invalidated"), "{lost}");
        assert!(lost.contains("pg_drop_replication_slot('s1')"), "{lost}");
        let gone = g
            .explain(&db("42704", "publication \"pub\" does not exist"))
            .unwrap()
            .to_string();
        assert!(gone.contains("publication \"pub\""), "{gone}");
        assert!(gone.contains("--accept-slot-reset"), "{gone}");
        assert!(g.explain(&db("57P01", "terminating connection")).is_none());
        assert!(g
            .explain(&db("42704", "type \"x\" does not exist"))
            .is_none());
        assert!(g.explain(&PgError::StreamEnded).is_none());
    }
}
