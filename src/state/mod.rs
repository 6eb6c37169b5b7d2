//! The relay's state file: the last LSN it confirmed to PostgreSQL, on local disk.
//!
//! Owns where the file lives (`--state-dir`), its format, and how it is written. One
//! small TOML file per relayed slot, named after the database and the slot, holding
//! the server's system identifier and timeline, the database, the slot, the
//! delivered LSN, and the publication baseline of [`crate::safety::publication`]
//! (the slot is confirmed only as far as that watch vouched, so it may lag the
//! file's LSN by about a second):
//!
//! ```text
//!  pipeline ─ confirmable LSN ─▶ Checkpoint::persist ─ write tmp, fsync, rename, fsync dir
//!                                       │
//!                                       └─ only then ─▶ ReplicationStream::confirm ─▶ server
//! ```
//!
//! Invariants:
//! - A write is atomic: readers see the old file or the new one, never a mix, and a
//!   completed write survives a crash or power loss (file and directory are fsynced).
//! - [`Checkpoint::persist`] returns only once the LSN is on disk, and the caller
//!   confirms nothing it did not persist first; so after any crash the slot's
//!   `confirmed_flush_lsn` is at most the LSN in the file. A slot found *ahead* of the
//!   file was therefore moved by something other than this relay (see
//!   [`crate::safety`]).
//! - The persisted LSN only grows within a run; only an explicit reset
//!   (`--accept-slot-reset`, adopting a slot, a new timeline) rewrites it to another
//!   value.
//! - The timeline is the one the LSN was confirmed on. A file without one (written
//!   by a pgoutbox before the timeline was recorded) parses with `timeline = None`:
//!   "unknown", which [`crate::safety`] treats like another timeline (trust the
//!   slot) and replaces with the current one at the next start.
//! - A file that does not parse is an error naming the file and the fix, never a
//!   panic and never silently replaced.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

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
    /// The last LSN this relay delivered (everything before it acked): the slot is
    /// confirmed up to it once the publication watch vouched for it, never past it.
    #[serde(with = "lsn_text")]
    pub confirmed_lsn: Lsn,
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

mod lsn_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::pg::lsn::Lsn;

    pub fn serialize<S: Serializer>(lsn: &Lsn, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&lsn.to_string())
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
        }
    }

    /// The file's text: a comment saying what it is, then TOML.
    pub fn to_text(&self) -> String {
        let body = toml::to_string(self).unwrap_or_default();
        format!(
            "# pgoutbox run: the last WAL position this relay confirmed to PostgreSQL, written\n\
             # before the server hears of it and compared with the slot at every start.\n\
             # Do not edit; see \"Slot safety\" in the README.\n{body}"
        )
    }

    /// Parse a file's text; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
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
        write_atomically(&self.path, state.to_text().as_bytes()).map_err(|error| {
            StateError::Write {
                path: self.path.clone(),
                error,
            }
        })
    }
}

fn create_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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
        file.sync_all()
    });
    if let Err(err) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err);
    }
    // The rename is only durable once the directory entry is on disk.
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// The pipeline's handle on the state file: persists a confirmable LSN before it may
/// be sent to the server. Cloning shares the handle. `disabled()` (`--state-dir off`)
/// persists nothing.
#[derive(Debug, Clone, Default)]
pub struct Checkpoint {
    inner: Option<Arc<Mutex<Persisted>>>,
}

#[derive(Debug)]
struct Persisted {
    file: StateFile,
    state: SlotState,
}

impl Checkpoint {
    /// A checkpoint that persists nothing.
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    /// A checkpoint over `file`, whose content is `state` (already on disk).
    pub fn new(file: StateFile, state: SlotState) -> Self {
        Self {
            inner: Some(Arc::new(Mutex::new(Persisted { file, state }))),
        }
    }

    /// The LSN on disk (`None` when disabled).
    pub fn persisted(&self) -> Option<Lsn> {
        let inner = self.inner.as_ref()?;
        let guard = inner.lock().unwrap_or_else(|e| e.into_inner());
        Some(guard.state.confirmed_lsn)
    }

    /// Write the publication baseline now (a session's start), with the rest of
    /// the state. Nothing when disabled.
    pub async fn record_publication(&self, baseline: Baseline) -> Result<(), StateError> {
        let Some(inner) = self.inner.clone() else {
            return Ok(());
        };
        let path = inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .file
            .path
            .clone();
        let write = move || {
            let mut guard = inner.lock().unwrap_or_else(|e| e.into_inner());
            let mut next = guard.state.clone();
            next.publication = Some(baseline);
            guard.file.write(&next)?;
            guard.state = next;
            Ok(())
        };
        blocking(write, path).await
    }

    /// Keep the publication baseline for the next write (a reading during a
    /// session: written with the next persisted LSN, not on its own).
    pub fn keep_publication(&self, baseline: Baseline) {
        if let Some(inner) = &self.inner {
            inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .state
                .publication = Some(baseline);
        }
    }

    /// The watermark topic and id this relay has committed to, as on disk or kept
    /// for the next write (`None` when disabled or never).
    pub fn watermark(&self) -> Option<WatermarkRecord> {
        let inner = self.inner.as_ref()?;
        let guard = inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.state.watermark.clone()
    }

    /// Keep that a Kafka transaction with a watermark committed to `record`: written
    /// with the next persisted LSN (a commit is always followed by one, the slot
    /// following the watermark).
    pub fn keep_watermark(&self, record: &WatermarkRecord) {
        if let Some(inner) = &self.inner {
            let mut guard = inner.lock().unwrap_or_else(|e| e.into_inner());
            if guard.state.watermark.as_ref() != Some(record) {
                guard.state.watermark = Some(record.clone());
            }
        }
    }

    /// Make sure `lsn` is covered by what is on disk: write it unless the file already
    /// holds `lsn` or more. The write (fsyncs included) runs on a blocking thread.
    /// Returns once it is durable; on error nothing may be confirmed.
    pub async fn persist(&self, lsn: Lsn) -> Result<(), StateError> {
        let Some(inner) = self.inner.clone() else {
            return Ok(());
        };
        let path = {
            let guard = inner.lock().unwrap_or_else(|e| e.into_inner());
            guard.file.path.clone()
        };
        let write = move || {
            let mut guard = inner.lock().unwrap_or_else(|e| e.into_inner());
            if lsn <= guard.state.confirmed_lsn {
                return Ok(());
            }
            let mut next = guard.state.clone();
            next.confirmed_lsn = lsn;
            guard.file.write(&next)?;
            guard.state = next;
            Ok(())
        };
        blocking(write, path).await
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
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pgoutbox-state-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn sample(lsn: u64) -> SlotState {
        SlotState::new("7351234567890123456", 1, "shop", "pgoutbox", Lsn(lsn))
    }

    #[tokio::test]
    async fn a_kept_watermark_is_written_with_the_next_lsn_and_read_back() {
        let dir = temp_dir("watermark");
        let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
        file.write(&sample(10)).unwrap();
        let checkpoint = Checkpoint::new(file.clone(), sample(10));
        assert_eq!(checkpoint.watermark(), None);
        let record = WatermarkRecord {
            topic: "pgoutbox.offsets".into(),
            transactional_id: "pgoutbox-7-shop-pgoutbox".into(),
        };
        checkpoint.keep_watermark(&record);
        assert_eq!(
            file.load().unwrap().unwrap().watermark,
            None,
            "not on its own"
        );
        checkpoint.persist(Lsn(20)).await.unwrap();
        let on_disk = file.load().unwrap().unwrap();
        assert_eq!(on_disk.watermark.as_ref(), Some(&record));
        assert_eq!(SlotState::parse(&on_disk.to_text()).unwrap(), on_disk);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn timeline_is_written_and_a_file_without_one_still_parses_as_unknown() {
        let text = sample(42).to_text();
        assert!(text.contains("timeline = 1"), "{text}");
        assert_eq!(SlotState::parse(&text).unwrap().timeline, Some(1));
        // What pgoutbox wrote before the timeline was recorded.
        let old = "version = 1\nsystem_id = \"7351234567890123456\"\ndatabase = \"shop\"\n\
                   slot = \"pgoutbox\"\nconfirmed_lsn = \"0/2A\"\n";
        let parsed = SlotState::parse(old).unwrap();
        assert_eq!(parsed.timeline, None);
        assert_eq!(parsed.confirmed_lsn, Lsn(42));
        assert!(
            parsed.to_string().contains("timeline not recorded"),
            "{parsed}"
        );
        assert!(
            !parsed.to_text().contains("timeline"),
            "unknown stays unknown"
        );
    }

    #[test]
    fn write_then_load_round_trips_and_leaves_no_temporary_file() {
        let dir = temp_dir("roundtrip").join("nested");
        let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
        assert_eq!(file.load().unwrap(), None, "no file yet");
        file.write(&sample(0x16_B374_D848)).unwrap();
        file.write(&sample(0x17_0000_0000)).unwrap();
        assert_eq!(file.load().unwrap(), Some(sample(0x17_0000_0000)));
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["shop.pgoutbox.state".to_owned()]);
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(text.contains("confirmed_lsn = \"17/0\""), "{text}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let dir = temp_dir("failed");
        let file = StateFile::open(&dir, "shop", "s").unwrap();
        file.write(&sample(100)).unwrap();
        // A directory where the temporary file would go makes the write fail before
        // the rename.
        let tmp = dir.join(format!(".shop.s.state.{}.tmp", std::process::id()));
        std::fs::create_dir(&tmp).unwrap();
        let err = file.write(&sample(200)).unwrap_err();
        assert!(matches!(err, StateError::Write { .. }), "{err}");
        assert!(err.to_string().contains("shop.s.state"), "{err}");
        assert_eq!(file.load().unwrap(), Some(sample(100)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_files_are_clear_errors_not_panics() {
        let dir = temp_dir("corrupt");
        let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
        let good = sample(42).to_text();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("garbage", b"\x00\xff\xfe not toml".to_vec()),
            ("truncated", good.as_bytes()[..good.len() / 2].to_vec()),
            ("bad lsn", good.replace("\"0/2A\"", "\"zz\"").into_bytes()),
            (
                "future version",
                good.replace("version = 1", "version = 9").into_bytes(),
            ),
            ("unknown key", format!("{good}extra = 1\n").into_bytes()),
            (
                "bad timeline",
                good.replace("timeline = 1", "timeline = -1").into_bytes(),
            ),
            (
                "bad system id",
                good.replace("7351234567890123456", "x").into_bytes(),
            ),
        ];
        for (what, bytes) in cases {
            std::fs::write(file.path(), &bytes).unwrap();
            let err = file.load().expect_err(what).to_string();
            assert!(err.contains("is corrupt"), "{what}: {err}");
            assert!(
                err.contains(&file.path().display().to_string()),
                "{what}: {err}"
            );
            assert!(err.contains("fix:"), "{what}: {err}");
        }
        std::fs::write(file.path(), good).unwrap();
        assert_eq!(file.load().unwrap(), Some(sample(42)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_names_are_unique_and_safe() {
        assert_eq!(file_name("shop", "pgoutbox"), "shop.pgoutbox.state");
        assert_eq!(file_name("a/b", "s"), "a%2Fb.s.state");
        assert_eq!(file_name("a.b", "s"), "a%2Eb.s.state");
        assert_eq!(file_name("..", "s"), "%2E%2E.s.state");
        assert_ne!(file_name("a%2Fb", "s"), file_name("a/b", "s"));
        assert_eq!(file_name("Ü", "s"), "%C3%9C.s.state");
    }

    #[test]
    fn default_directory_follows_systemd_then_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let all = env(&[
            ("STATE_DIRECTORY", "/var/lib/pgoutbox:/var/lib/other"),
            ("XDG_STATE_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(
            resolve_dir(Some("/d"), &all).unwrap(),
            Some(PathBuf::from("/d"))
        );
        assert_eq!(resolve_dir(Some("off"), &all).unwrap(), None);
        assert_eq!(
            resolve_dir(None, &all).unwrap(),
            Some(PathBuf::from("/var/lib/pgoutbox"))
        );
        let xdg = env(&[("XDG_STATE_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(
            resolve_dir(None, &xdg).unwrap(),
            Some(PathBuf::from("/x/pgoutbox"))
        );
        let relative_xdg = env(&[("XDG_STATE_HOME", "rel"), ("HOME", "/h")]);
        assert_eq!(
            resolve_dir(None, &relative_xdg).unwrap(),
            Some(PathBuf::from("/h/.local/state/pgoutbox"))
        );
        let err = resolve_dir(None, &env(&[])).unwrap_err().to_string();
        assert!(err.contains("--state-dir"), "{err}");
    }

    #[tokio::test]
    async fn checkpoint_writes_only_forward_and_disabled_writes_nothing() {
        let dir = temp_dir("checkpoint");
        let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
        file.write(&sample(100)).unwrap();
        let cp = Checkpoint::new(file.clone(), sample(100));
        cp.persist(Lsn(50)).await.unwrap();
        assert_eq!(file.load().unwrap(), Some(sample(100)), "never backwards");
        cp.persist(Lsn(300)).await.unwrap();
        assert_eq!(file.load().unwrap(), Some(sample(300)));
        assert_eq!(cp.persisted(), Some(Lsn(300)));
        Checkpoint::disabled().persist(Lsn(1)).await.unwrap();
        assert_eq!(Checkpoint::disabled().persisted(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Cost of one persist (write + 2 fsyncs + rename) on this machine's temp
    /// directory: `cargo test --lib state::tests::persist_cost -- --ignored --nocapture`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a measurement, not a test"]
    async fn persist_cost() {
        let dir = std::env::var("PGOUTBOX_STATE_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| temp_dir("cost"));
        let file = StateFile::open(&dir, "shop", "pgoutbox").unwrap();
        file.write(&sample(1)).unwrap();
        let cp = Checkpoint::new(file, sample(1));
        let mut samples = Vec::new();
        for i in 2..202u64 {
            let start = std::time::Instant::now();
            cp.persist(Lsn(i)).await.unwrap();
            samples.push(start.elapsed());
        }
        samples.sort();
        eprintln!(
            "persist in {}: p50 {:?} p99 {:?} max {:?} (200 writes)",
            dir.display(),
            samples[100],
            samples[198],
            samples[199]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
