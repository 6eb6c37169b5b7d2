//! The relay's state file: the last LSN it delivered, on local disk.
//!
//! Owns where the file lives (`--state-dir`), its format, and how it is written. One
//! small TOML file per relayed slot, named after the database and the slot, holding
//! the server's system identifier and timeline, the database, the slot, the
//! delivered LSN, and the publication baseline of [`crate::safety::publication`]
//! (the slot is confirmed only as far as that watch vouched, so it may lag the
//! file's LSN by about a second):
//!
//! ```text
//!  pipeline ─ acked LSN, each tick ─▶ Checkpoint::record ─ pwrite of the LSN's field (page cache)
//!  pipeline ─ LSN to confirm ───────▶ Checkpoint::persist ─ record, then fdatasync
//!                                           │
//!                                           └─ only then ─▶ ReplicationStream::confirm ─▶ server
//! ```
//!
//! Any change besides the LSN is a whole write: temporary file, fsync, rename, fsync
//! of the directory.
//!
//! Invariants:
//! - A whole write is atomic: readers see the old file or the new one, never a mix,
//!   and a completed one survives a crash or power loss. An in-place rewrite changes
//!   only the LSN's fixed-width field and its check ([`lsn_field`]); a power loss may
//!   undo it (back to the last durable LSN) or tear it, and a torn field fails its
//!   check: the file is then refused with the fix, never read as a position.
//! - [`Checkpoint::persist`] returns only once the LSN is durable, and the caller
//!   confirms nothing that is not (debug builds assert it at every confirm); so
//!   after any crash, power loss included, the slot's `confirmed_flush_lsn` is at most
//!   the LSN in the file. A slot found *ahead* of the file was therefore moved by
//!   something other than this relay (see [`crate::safety`]).
//! - The file's LSN never passes what Kafka acked: it is a position a restart may
//!   resume from.
//! - The persisted LSN only grows within a run; only an explicit reset
//!   (`--accept-slot-reset`, adopting a slot, a new timeline) rewrites it to another
//!   value.
//! - The timeline is the one the LSN was confirmed on. A file without one (written
//!   by a pgoutbox before the timeline was recorded) parses with `timeline = None`:
//!   "unknown", which [`crate::safety`] treats like another timeline (trust the
//!   slot) and replaces with the current one at the next start.
//! - A file that does not parse is an error naming the file and the fix, never a
//!   panic and never silently replaced.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::outbox::pinned::{KeptTypes, PinnedTypes};
use crate::pg::lsn::Lsn;
use crate::pg::source::publication_state::Baseline;

/// The format version written into every file.
const VERSION: u32 = 1;

/// Problems with the state directory or file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// No default location could be derived from the environment.
    #[error("no state directory: --state-dir is not given and none of STATE_DIRECTORY, XDG_STATE_HOME, HOME is set; fix: pass --state-dir DIR (or PGOUTBOX_STATE_DIR), or --state-dir off to run without slot-reset detection")]
    NoDefaultDir,
    /// The directory could not be created.
    #[error("cannot create state directory {dir}: {error}; fix: create it writable for the relay's user, or pass another --state-dir")]
    CreateDir {
        dir: PathBuf,
        /// Shown in the message, before the fix (so not a `source`).
        error: std::io::Error,
    },
    /// The file could not be read.
    #[error("cannot read state file {path}: {error}; fix: make it readable for the relay's user")]
    Read {
        path: PathBuf,
        /// Shown in the message, before the fix (so not a `source`).
        error: std::io::Error,
    },
    /// The file could not be written.
    #[error("cannot write state file {path}: {error}; fix: make its directory writable (and not full) for the relay's user, or pass another --state-dir")]
    Write {
        path: PathBuf,
        /// Shown in the message, before the fix (so not a `source`).
        error: std::io::Error,
    },
    /// The file could not be removed (`teardown`).
    #[error("cannot remove state file {path}: {source}; fix: remove it by hand (the relay's slot is gone, so the file only makes the next run refuse)")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file exists but does not hold a valid state.
    #[error("state file {path} is corrupt ({reason}); fix: restore it, or move it away to make the relay adopt the slot's current position (the check for a slot moved behind the relay's back is then skipped once)")]
    Corrupt { path: PathBuf, reason: String },
}

/// What the file records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotState {
    /// Format version (`VERSION`).
    pub version: u32,
    /// The last LSN this relay delivered (everything before it acked): the slot is
    /// confirmed up to it once the publication watch vouched for it, never past it.
    /// Second in the file, so that its line lies in the file's first 512 bytes
    /// (one disk sector) for its in-place rewrites ([`lsn_field`]).
    #[serde(with = "lsn_text")]
    pub confirmed_lsn: Lsn,
    /// The server's system identifier (`IDENTIFY_SYSTEM`), decimal.
    pub system_id: String,
    /// The server's timeline (`IDENTIFY_SYSTEM`) when the LSN was confirmed; `None`
    /// in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// Database of the slot.
    pub database: String,
    /// Slot name.
    pub slot: String,
    /// The publication as last found unchanged, and the WAL it vouches for
    /// ([`crate::safety::publication`]); `None` in files written before it was
    /// kept (the next start records it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publication: Option<Baseline>,
    /// `--delivery exactly-once`: the watermark topic and transactional id this
    /// relay has committed at least one Kafka transaction to. A later start that
    /// finds no watermark there knows the topic lost it (deleted, re-created)
    /// instead of taking it for a first start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<WatermarkRecord>,
    /// The type oid of each mapped column of each outbox table as the relay first
    /// read it ([`crate::outbox::pinned`]): a relay restarted after an `ALTER
    /// COLUMN … TYPE` judges the new type against it. Empty in files written
    /// before the pins were kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pinned_types: KeptTypes,
}

/// Where this relay's exactly-once watermarks go ([`SlotState::watermark`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkRecord {
    /// `--watermark-topic`.
    pub topic: String,
    /// The producer's `transactional.id` (the watermark's key).
    pub transactional_id: String,
}

mod lsn_field;
mod render;

mod lsn_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::pg::lsn::Lsn;

    pub fn serialize<S: Serializer>(lsn: &Lsn, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::lsn_field::fixed(*lsn))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Lsn, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl SlotState {
    /// A state at `confirmed_lsn`, confirmed on `timeline` of system `system_id`.
    pub fn new(
        system_id: &str,
        timeline: u32,
        database: &str,
        slot: &str,
        confirmed_lsn: Lsn,
    ) -> Self {
        Self {
            version: VERSION,
            system_id: system_id.to_owned(),
            timeline: Some(timeline),
            database: database.to_owned(),
            slot: slot.to_owned(),
            confirmed_lsn,
            publication: None,
            watermark: None,
            pinned_types: KeptTypes::new(),
        }
    }

    /// The file's text: a comment saying what it is, then TOML.
    pub fn to_text(&self) -> String {
        let body = lsn_field::with_check(
            &toml::to_string(self).unwrap_or_default(),
            self.confirmed_lsn,
        );
        format!(
            "# pgoutbox run: the last WAL position this relay delivered, on disk before\n\
             # PostgreSQL is told and compared with the slot at every start.\n\
             # Do not edit; see \"Slot safety\" in the README.\n{body}"
        )
    }

    /// Parse a file's text; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        lsn_field::verify(text)?;
        let state: SlotState = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        if state.version != VERSION {
            return Err(format!(
                "format version {} is not {VERSION}, the one this pgoutbox writes",
                state.version
            ));
        }
        if state.system_id.is_empty() || !state.system_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("system_id {:?} is not a number", state.system_id));
        }
        Ok(state)
    }
}

impl fmt::Display for SlotState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slot {:?} of database {:?} on system {} ",
            self.slot, self.database, self.system_id
        )?;
        match self.timeline {
            Some(tli) => write!(f, "timeline {tli} "),
            None => f.write_str("(timeline not recorded) "),
        }?;
        write!(f, "at {}", self.confirmed_lsn)
    }
}

/// Where the state directory is: `--state-dir` (`off` disables), else systemd's
/// `$STATE_DIRECTORY` (its first entry), else `$XDG_STATE_HOME/pgoutbox`, else
/// `$HOME/.local/state/pgoutbox`. `env` looks up an environment variable.
/// `Ok(None)` means off.
pub fn resolve_dir(
    flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<PathBuf>, StateError> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if let Some(flag) = flag.map(str::trim).filter(|f| !f.is_empty()) {
        return Ok((flag != "off").then(|| PathBuf::from(flag)));
    }
    if let Some(dirs) = set("STATE_DIRECTORY") {
        // systemd joins several StateDirectory= entries with ':'.
        let first = dirs.split(':').next().unwrap_or_default();
        return Ok(Some(PathBuf::from(first)));
    }
    // The XDG spec says relative values are to be ignored.
    if let Some(xdg) = set("XDG_STATE_HOME").filter(|v| Path::new(v).is_absolute()) {
        return Ok(Some(Path::new(&xdg).join("pgoutbox")));
    }
    match set("HOME") {
        Some(home) => Ok(Some(Path::new(&home).join(".local/state/pgoutbox"))),
        None => Err(StateError::NoDefaultDir),
    }
}

/// The state directory for `flag` (`--state-dir`) and the process environment.
pub fn state_dir(flag: Option<&str>) -> Result<Option<PathBuf>, StateError> {
    resolve_dir(flag, &|name| std::env::var(name).ok())
}

/// The file name for `slot` of `database`: `<database>.<slot>.state`, with every byte
/// of the database name outside `[A-Za-z0-9_-]` written as `%XX` (slot names are
/// `[a-z0-9_]` already), so the name is unique per pair and safe on any file system.
///
/// The system identifier is deliberately *not* part of the name: a relay pointed at
/// another cluster must find the old file and notice the changed identifier.
pub fn file_name(database: &str, slot: &str) -> String {
    let mut name = String::with_capacity(database.len() + slot.len() + 8);
    for b in database.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    name.push('.');
    name.push_str(slot);
    name.push_str(".state");
    name
}

/// One state file.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The file of `slot` of `database` in `dir`; creates `dir` (mode 0700) if needed.
    pub fn open(dir: &Path, database: &str, slot: &str) -> Result<Self, StateError> {
        create_dir(dir).map_err(|error| StateError::CreateDir {
            dir: dir.to_owned(),
            error,
        })?;
        Ok(Self {
            path: dir.join(file_name(database, slot)),
        })
    }

    /// The file of `slot` of `database` in `dir`, without creating anything (for
    /// reading or removing a file that may not exist).
    pub fn at(dir: &Path, database: &str, slot: &str) -> Self {
        Self {
            path: dir.join(file_name(database, slot)),
        }
    }

    /// Remove the file (`teardown`, once the slot it records is dropped); `false`
    /// when there was none.
    pub fn remove(&self) -> Result<bool, StateError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(StateError::Remove {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The recorded state; `None` when there is no file yet.
    pub fn load(&self) -> Result<Option<SlotState>, StateError> {
        let text = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(StateError::Read {
                    path: self.path.clone(),
                    error,
                })
            }
        };
        let corrupt = |reason: String| StateError::Corrupt {
            path: self.path.clone(),
            reason,
        };
        let text = String::from_utf8(text).map_err(|_| corrupt("not UTF-8 text".into()))?;
        SlotState::parse(&text).map(Some).map_err(corrupt)
    }

    /// Replace the file atomically with `state`: write a temporary file next to it,
    /// fsync it, rename it over the old one, fsync the directory.
    pub fn write(&self, state: &SlotState) -> Result<(), StateError> {
        self.write_text(&state.to_text()).map(drop)
    }

    /// [`StateFile::write`] of a state's text ([`SlotState::to_text`]).
    fn write_text(&self, text: &str) -> Result<std::fs::File, StateError> {
        write_atomically(&self.path, text.as_bytes()).map_err(|error| self.write_error(error))
    }

    fn write_error(&self, error: std::io::Error) -> StateError {
        StateError::Write {
            path: self.path.clone(),
            error,
        }
    }
}

fn create_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Returns the new file, open for writing (its LSN's in-place rewrites).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<std::fs::File> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    // The pid keeps two processes sharing a directory off each other's temporary file.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&tmp).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(file)
    });
    let file = match written.and_then(|file| std::fs::rename(&tmp, path).map(|()| file)) {
        Ok(file) => file,
        Err(err) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(err);
        }
    };
    // The rename is only durable once the directory entry is on disk.
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(file)
}

/// The pipeline's handle on the state file: records every confirmable LSN, and makes
/// it durable before it may be sent to the server. Cloning shares the handle.
/// `disabled()` (`--state-dir off`) persists nothing.
///
/// Two kinds of write:
/// - [`Checkpoint::record`]: while only the LSN moves, its field is rewritten in
///   place in the open file ([`lsn_field`]), without fsync: a `kill -9` keeps it
///   (the page cache survives the process), a power loss may take it back to the
///   last durable LSN or leave it torn, which its check refuses at the next start.
/// - [`Checkpoint::persist`]: the LSN recorded and then durable (`fdatasync` of the
///   file after in-place rewrites; a whole write is durable by itself). Only an LSN
///   persisted this way is ever confirmed to the server, so after any crash the
///   slot's `confirmed_flush_lsn` is at most the LSN in the file.
#[derive(Debug, Clone, Default)]
pub struct Checkpoint {
    inner: Option<Arc<Shared>>,
}

#[derive(Debug)]
struct Shared {
    /// The file's path, outside the lock (for errors).
    path: PathBuf,
    persisted: Mutex<Persisted>,
}

#[derive(Debug)]
struct Persisted {
    /// Written into every write of the state ([`Checkpoint::pinning`]).
    pins: Option<PinnedTypes>,
    file: StateFile,
    /// What the file holds (in the page cache at least), with what is kept for
    /// the next write ([`Checkpoint::keep_watermark`], [`Checkpoint::keep_publication`]).
    state: SlotState,
    /// The text around the LSN, while nothing else changes.
    rendered: render::Rendered,
    /// The file as this process last wrote it whole, open, and where its LSN's
    /// field starts: while only the LSN moves, it is rewritten there.
    open: Option<(std::fs::File, u64)>,
    /// The LSN known to be on disk (fsynced): what the server may be told.
    durable: Lsn,
}

impl Persisted {
    /// `state` at `lsn`, with the pins of this moment.
    fn next(&self, lsn: Lsn) -> SlotState {
        let mut next = self.state.clone();
        next.confirmed_lsn = lsn;
        if let Some(pins) = &self.pins {
            next.pinned_types = pins.kept();
        }
        next
    }

    /// Write `next` whole (fsynced, so durable) and keep it.
    fn write(&mut self, mut next: SlotState) -> Result<(), StateError> {
        if let Some(pins) = &self.pins {
            next.pinned_types = pins.kept();
        }
        self.open = None;
        let text = self.rendered.text(&next);
        let file = self.file.write_text(&text)?;
        self.open = (self.rendered.lsn_at(&next)).map(|at| (file, at as u64));
        self.durable = next.confirmed_lsn;
        self.state = next;
        Ok(())
    }

    /// Rewrite the LSN's field in place when `next` differs from what the file
    /// holds in its LSN alone (the shape last rendered is the one written, and
    /// `state` may hold more, kept for the next write); `false` when it cannot (a
    /// whole write is due).
    fn rewrite_lsn(&mut self, next: &SlotState) -> Result<bool, StateError> {
        let Some((file, at)) = &self.open else {
            return Ok(false);
        };
        if self.rendered.lsn_at(next) != Some(*at as usize) {
            return Ok(false);
        }
        let segment = lsn_field::segment(next.confirmed_lsn);
        if let Err(error) = std::os::unix::fs::FileExt::write_all_at(file, segment.as_bytes(), *at)
        {
            self.open = None;
            return Err(self.file.write_error(error));
        }
        self.state.confirmed_lsn = next.confirmed_lsn;
        Ok(true)
    }

    /// Make what the file holds durable: `fdatasync` of the open file when it is
    /// still the one at the path; else (replaced or removed behind this process's
    /// back, or never written whole by it) a whole write.
    fn sync(&mut self) -> Result<(), StateError> {
        if let Some((file, _)) = &self.open {
            if still_at(file, &self.file.path) {
                if let Err(error) = file.sync_data() {
                    self.open = None;
                    return Err(self.file.write_error(error));
                }
                self.durable = self.state.confirmed_lsn;
                return Ok(());
            }
        }
        self.write(self.state.clone())
    }
}

impl Shared {
    /// The lock, taken back from a panicked holder (the state it guards is
    /// whole at every step).
    fn lock(&self) -> std::sync::MutexGuard<'_, Persisted> {
        self.persisted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether `file` is the file at `path` (same device and inode).
fn still_at(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

impl Checkpoint {
    /// Keep `pins` in the state file from now on, written with every later write;
    /// unless `accept_change`, first take back those the file kept
    /// ([`PinnedTypes::seed`]). `accept_change` (`--accept-type-change`) drops them
    /// instead: the types the relay reads next are pinned afresh.
    pub fn pinning(self, pins: &PinnedTypes, accept_change: bool) -> Self {
        if let Some(inner) = &self.inner {
            let mut guard = inner.lock();
            let kept = &guard.state.pinned_types;
            if !accept_change {
                pins.seed(kept);
            } else if !kept.is_empty() {
                tracing::warn!(
                    kept = ?kept,
                    "--accept-type-change: dropping the column types kept in the state file; the relay pins the types of the next rows it reads"
                );
            }
            guard.pins = Some(pins.clone());
        }
        self
    }

    /// A checkpoint that persists nothing.
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    /// A checkpoint over `file`, whose content is `state` (already on disk).
    pub fn new(file: StateFile, state: SlotState) -> Self {
        Self {
            inner: Some(Arc::new(Shared {
                path: file.path.clone(),
                persisted: Mutex::new(Persisted {
                    pins: None,
                    file,
                    state,
                    rendered: render::Rendered::default(),
                    open: None,
                    // What another process left may still be only in the page cache:
                    // made durable (written whole) before anything is confirmed.
                    durable: Lsn::INVALID,
                }),
            })),
        }
    }

    /// The LSN the file holds, durable or not yet (`None` when disabled).
    pub fn persisted(&self) -> Option<Lsn> {
        let inner = self.inner.as_ref()?;
        let guard = inner.lock();
        Some(guard.state.confirmed_lsn)
    }

    /// Write the publication baseline now (a session's start), with the rest of
    /// the state. Nothing when disabled.
    pub async fn record_publication(&self, baseline: Baseline) -> Result<(), StateError> {
        let Some(inner) = self.inner.clone() else {
            return Ok(());
        };
        let path = inner.path.clone();
        let write = move || {
            let mut guard = inner.lock();
            let mut next = guard.state.clone();
            next.publication = Some(baseline);
            guard.write(next)
        };
        blocking(write, path).await
    }

    /// Keep the publication baseline for the next write (a reading during a
    /// session: written with the next persisted LSN, not on its own).
    pub fn keep_publication(&self, baseline: Baseline) {
        if let Some(inner) = &self.inner {
            inner.lock().state.publication = Some(baseline);
        }
    }

    /// The watermark topic and id this relay has committed to, as on disk or kept
    /// for the next write (`None` when disabled or never).
    pub fn watermark(&self) -> Option<WatermarkRecord> {
        let inner = self.inner.as_ref()?;
        let guard = inner.lock();
        guard.state.watermark.clone()
    }

    /// Keep that a Kafka transaction with a watermark committed to `record`: written
    /// with the next persisted LSN (a commit is always followed by one, the slot
    /// following the watermark).
    pub fn keep_watermark(&self, record: &WatermarkRecord) {
        if let Some(inner) = &self.inner {
            let mut guard = inner.lock();
            if guard.state.watermark.as_ref() != Some(record) {
                guard.state.watermark = Some(record.clone());
            }
        }
    }

    /// Record `lsn` (when past what the file holds): in place on this thread while
    /// only the LSN moves (a `pwrite` into the page cache, no fsync); otherwise a
    /// whole write, on a blocking thread. Not durable by itself: see
    /// [`Checkpoint::persist`].
    pub async fn record(&self, lsn: Lsn) -> Result<(), StateError> {
        let Some(inner) = self.inner.clone() else {
            return Ok(());
        };
        // Never waits on this thread for a whole write under way elsewhere
        // (`record_publication` from the publication repair): a blocking thread
        // takes over then.
        let path = match inner.persisted.try_lock() {
            Ok(mut guard) => {
                if lsn <= guard.state.confirmed_lsn {
                    return Ok(());
                }
                let next = guard.next(lsn);
                if guard.rewrite_lsn(&next)? {
                    return Ok(());
                }
                inner.path.clone()
            }
            Err(_) => inner.path.clone(),
        };
        let write = move || {
            let mut guard = inner.lock();
            if lsn <= guard.state.confirmed_lsn {
                return Ok(());
            }
            let next = guard.next(lsn);
            guard.write(next)
        };
        blocking(write, path).await
    }

    /// Make sure `lsn` is durable in the file: record it unless the file already
    /// holds `lsn` or more, then fsync unless that is on disk already. The write
    /// and fsync run on a blocking thread. Returns once it is durable; on error
    /// nothing may be confirmed.
    pub async fn persist(&self, lsn: Lsn) -> Result<(), StateError> {
        let Some(inner) = self.inner.clone() else {
            return Ok(());
        };
        if lsn <= inner.lock().durable {
            return Ok(());
        }
        let path = inner.path.clone();
        let write = move || {
            let mut guard = inner.lock();
            if lsn > guard.state.confirmed_lsn {
                let next = guard.next(lsn);
                if !guard.rewrite_lsn(&next)? {
                    return guard.write(next);
                }
            }
            if lsn > guard.durable {
                guard.sync()?;
            }
            Ok(())
        };
        blocking(write, path).await
    }

    /// The LSN known to be on disk (`None` when disabled).
    pub fn durable(&self) -> Option<Lsn> {
        let inner = self.inner.as_ref()?;
        let guard = inner.lock();
        Some(guard.durable)
    }
}

/// Run a file write on a blocking thread and wait for it.
async fn blocking(
    write: impl FnOnce() -> Result<(), StateError> + Send + 'static,
    path: PathBuf,
) -> Result<(), StateError> {
    match tokio::task::spawn_blocking(write).await {
        Ok(result) => result,
        // The blocking task panicked or the runtime is shutting down: not durable.
        Err(join) => Err(StateError::Write {
            path,
            error: std::io::Error::other(join.to_string()),
        }),
    }
}

#[cfg(test)]
mod tests;
