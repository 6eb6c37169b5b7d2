//! The publication watch: the slot is never confirmed past WAL written after a DDL
//! that stopped outbox rows from being decoded, and that DDL stops the relay.
//!
//! PostgreSQL decodes a row only while its table is published with `insert` and
//! its row filter passes it. `DROP TABLE` + `CREATE TABLE` (the publication loses
//! the old table and never had the new one), `ALTER PUBLICATION … DROP TABLE` /
//! `SET TABLE` without it / `SET (publish = …)` without insert, a row filter, or the
//! publication dropped and re-created: each streams nothing and errors nothing, so
//! a relay that only reads the stream confirms past the lost rows with every signal
//! green. The watch compares the catalog ([`publication_state`]) with a baseline the
//! state file keeps, so a relay restarted after the DDL does not adopt it:
//!
//! ```text
//!  start: read catalog ─ compare with the state file's baseline ─┬─ same/harmless → baseline, vouched = its WAL
//!                                                                 └─ changed → stop (unless --accept-publication-change)
//!  session: confirm would pass `vouched` ─ (≤ 1 per second) read catalog ─ compare ─┬─ same → vouched = its WAL
//!                                                                                    └─ changed → stop, counted, /readyz
//! ```
//!
//! Invariants:
//! - The slot is confirmed to `L` only when a reading that began after `L` was
//!   written ([`Observed::wal`] ≥ `L`) found the baseline unchanged; the state
//!   file's delivered position still moves with every ack, so a kill -9 resends no
//!   more than before.
//! - A difference is judged for good, not by what is now published: every DDL that
//!   breaks decoding leaves a new OID or row version (see [`publication_state`]),
//!   so a table dropped from the publication and re-added between two readings, or
//!   `publish` flipped and set back, still stops the relay.
//! - Harmless differences are adopted with a log line: a table re-created under a
//!   `FOR ALL TABLES` or schema publication (published from its creation) or
//!   re-created and added to the publication in one transaction (its `pg_class`
//!   and `pg_publication_rel` rows have the same xmin), a
//!   catalog row frozen by VACUUM (its xmin reads 2), publish actions that keep
//!   `insert`.
//! - A stop names the publication, each table and change (OIDs, actions, filter),
//!   the LSN and time window since the last reading that found it unchanged, and
//!   the fix.
//! - Repair ([`crate::safety::repair`], `--publication-repair on`, PostgreSQL
//!   14+): when the only change is an outbox table re-created and not published,
//!   the session's watch re-adds it and emits the rows written to it meanwhile into
//!   the WAL, then adopts the table as the repair left it; nothing is vouched for
//!   while it runs, and a failed repair stops the relay with the finding.
//!
//! Residual race, documented: a DDL whose commit record is in WAL before the WAL
//! position is read but which is not yet visible to the catalog snapshot taken
//! right after (the microseconds between a commit's WAL flush and its end in the
//! proc array) is seen by the next reading, about a second later, which stops the
//! relay naming the window; a row lost that way would have to commit inside those
//! microseconds too.
//!
//! [`publication_state`]: crate::pg::source::publication_state

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_postgres::Client;

use crate::pg::lsn::Lsn;
use crate::pg::names::{quote_ident, TableName};
use crate::pg::source::catalog::CatalogError;
use crate::pg::source::publication_state::{
    self, Baseline, Member, Observed, PublicationState, TableState, FROZEN_XMIN,
};

/// The least time between two readings during a session.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long a reading during a session may take before the session ends (a
/// catalog connection cut off by the network answers nothing).
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the reading at the end of a session may take: the slot then stays
/// where the last reading left it.
const END_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How a reading compares with the baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing that matters changed; the notes say what was adopted (logged).
    Unchanged { adopted: Vec<String> },
    /// Rows may have stopped being decoded: each line names a table or the
    /// publication and what changed.
    Changed(Vec<String>),
}

/// Compare a reading with the baseline (see the module doc for what is harmless).
pub fn compare(publication: &str, before: &PublicationState, now: &PublicationState) -> Verdict {
    let mut changed = Vec::new();
    let mut adopted = Vec::new();
    let ident = quote_ident(publication);
    match (before.oid, now.oid) {
        (_, None) => changed.push(format!("publication {ident} no longer exists")),
        (Some(was), Some(is)) if was != is => changed.push(format!(
            "publication {ident} was dropped and re-created (OID {was} → {is})"
        )),
        _ => {}
    }
    if changed.is_empty() {
        publication_row(&ident, before, now, &mut changed, &mut adopted);
        // By name: the relay's table list may have changed since the baseline (a
        // table added to it has no baseline yet and is taken as it is).
        for is in &now.tables {
            if let Some(was) = before.tables.iter().find(|was| was.table == is.table) {
                table(&ident, was, is, &mut changed, &mut adopted);
            }
        }
    }
    if changed.is_empty() {
        Verdict::Unchanged { adopted }
    } else {
        Verdict::Changed(changed)
    }
}

/// The publication's own row: its actions and its row version.
fn publication_row(
    ident: &str,
    before: &PublicationState,
    now: &PublicationState,
    changed: &mut Vec<String>,
    adopted: &mut Vec<String>,
) {
    let inserts = |p: &PublicationState| p.publish.split(", ").any(|a| a == "insert");
    if !inserts(now) {
        changed.push(format!(
            "publication {ident} no longer publishes inserts (publish = '{}', was '{}')",
            now.publish, before.publish
        ));
    } else if before.row_version != now.row_version && now.row_version != FROZEN_XMIN {
        if before.publish == now.publish {
            changed.push(format!(
                "publication {ident} was altered (its pg_publication row changed from xmin {} to {}) with the same publish = '{}' now: if inserts were switched off and on again, rows written in between were not decoded",
                before.row_version, now.row_version, now.publish
            ));
        } else {
            adopted.push(format!(
                "publication {ident} now publishes '{}' (was '{}'), inserts still included",
                now.publish, before.publish
            ));
        }
    }
}

/// One outbox table: its OID, how it is published, its row filter.
fn table(
    ident: &str,
    was: &TableState,
    is: &TableState,
    changed: &mut Vec<String>,
    adopted: &mut Vec<String>,
) {
    let name = &is.table;
    let oid = |o: Option<u32>| o.map_or_else(|| "none".to_owned(), |o| o.to_string());
    if is.member == Member::None {
        let why = match is.oid {
            None => "no longer exists".to_owned(),
            Some(o) if Some(o) != was.oid => {
                format!(
                    "was re-created (OID {} → {o}) and is not published",
                    oid(was.oid)
                )
            }
            Some(_) => "was removed from the publication".to_owned(),
        };
        changed.push(format!(
            "outbox table {name} {why} (it was {} {ident})",
            was.member.describe()
        ));
        return;
    }
    if let Some(filter) = &is.row_filter {
        if was.row_filter.as_ref() != Some(filter) || was.member_oid != is.member_oid {
            changed.push(format!(
                "outbox table {name} is published by {ident} with a row filter WHERE {filter} (was {}): rows it excludes are not decoded",
                was.row_filter
                    .as_deref()
                    .map_or_else(|| "none".to_owned(), |f| format!("WHERE {f}"))
            ));
            return;
        }
    }
    let recreated = was.oid.is_some() && was.oid != is.oid;
    let holder_changed = was.member != is.member || was.member_oid != is.member_oid;
    match is.member {
        Member::Table if recreated && is.member_by.is_some() && is.member_by == is.created_by => {
            adopted.push(format!(
                "outbox table {name} was re-created (OID {} → {}) and added to {ident} in the same transaction (xmin {}), so none of its rows went unpublished",
                oid(was.oid),
                oid(is.oid),
                is.member_by.as_deref().unwrap_or_default()
            ))
        }
        Member::Table if recreated => changed.push(format!(
            "outbox table {name} was re-created (OID {} → {}) and added to {ident} again (pg_publication_rel row {} → {}): rows written to it before it was added were not decoded",
            oid(was.oid),
            oid(is.oid),
            oid(was.member_oid),
            oid(is.member_oid)
        )),
        Member::Table if holder_changed => changed.push(format!(
            "outbox table {name} was removed from {ident} and added again (pg_publication_rel row {} → {}): rows written while it was out were not decoded (an ALTER PUBLICATION … SET TABLE that only changed its column list looks the same)",
            oid(was.member_oid),
            oid(is.member_oid)
        )),
        Member::Schema if holder_changed => changed.push(format!(
            "outbox table {name}'s schema was removed from {ident} and added again (pg_publication_namespace row {} → {}): rows written while it was out were not decoded",
            oid(was.member_oid),
            oid(is.member_oid)
        )),
        Member::Schema | Member::AllTables if recreated || holder_changed => adopted.push(format!(
            "outbox table {name} was re-created (OID {} → {}); it is {}, so its rows were published from its creation",
            oid(was.oid),
            oid(is.oid),
            is.member.describe()
        )),
        _ => {}
    }
}

/// The finding that stops the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicationChanged {
    pub publication: String,
    /// What changed, one line per table or the publication.
    pub changes: Vec<String>,
    /// The last reading that found the publication unchanged: WAL before this was
    /// decoded as published, and the time.
    pub since_lsn: Lsn,
    pub since: String,
    /// The reading that found the change.
    pub until_lsn: Lsn,
    pub until: String,
    /// The outbox tables, for the fix.
    pub tables: Vec<TableName>,
}

impl std::fmt::Display for PublicationChanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ident = quote_ident(&self.publication);
        write!(
            f,
            "the publication stopped covering the outbox: {}; rows committed between {} ({}) and {} ({}) may not have been decoded, and the slot was not confirmed past {}; fix: ",
            self.changes.join("; "),
            self.since_lsn,
            self.since,
            self.until_lsn,
            self.until,
            self.since_lsn
        )?;
        let tables: Vec<String> = self.tables.iter().map(TableName::quoted).collect();
        if self.publication_gone() {
            return write!(
                f,
                "the slot cannot decode its pending changes with another publication of that name: re-publish the events of the window (see \"Slot safety\" in the README), drop the slot (SELECT pg_drop_replication_slot(…)), make sure {ident} publishes {list} with publish = 'insert', and start the relay once with --accept-slot-reset, which creates the slot",
                list = tables.join(", "),
            );
        }
        write!(
            f,
            "make the publication cover the outbox again (BEGIN; ALTER PUBLICATION {ident} DROP TABLE {list}; ALTER PUBLICATION {ident} ADD TABLE {list}; COMMIT; — drop only what is still listed —, or ALTER PUBLICATION {ident} SET (publish = 'insert'), or CREATE PUBLICATION {ident} FOR TABLE {list} WITH (publish = 'insert')), then re-publish the rows of the window still in the table: pgoutbox replay --from '{}' --to '{}' with the relay's source and routing options (start --from earlier to cover transactions that ran longer; consumers drop duplicates by the id header), then start the relay once with --accept-publication-change; see \"Changing the outbox table while the relay runs\" in the README",
            self.since,
            self.until,
            list = tables.join(", "),
        )
    }
}

impl PublicationChanged {
    /// Whether the publication itself was dropped or re-created (not a table of it).
    pub fn publication_gone(&self) -> bool {
        self.changes.iter().any(|c| {
            c.starts_with("publication ")
                && (c.contains("no longer exists") || c.contains("re-created"))
        })
    }
}

impl std::error::Error for PublicationChanged {}

/// The session's side of the watch: when to read the catalog, what the last
/// reading vouched for, and the reading in progress.
pub struct PublicationWatch {
    /// What a reading reads, shared with the task of the reading in progress.
    target: Arc<Target>,
    baseline: Baseline,
    /// When the last reading started.
    last_start: Option<Instant>,
    reading: Option<JoinHandle<Result<Outcome, WatchError>>>,
    /// The publication was found gone (said once).
    gone_said: bool,
    /// Repair a re-created, unpublished outbox table (see the module doc).
    repair: bool,
    /// The change a repair in progress answers (reported if the repair fails).
    repairing: Option<Box<PublicationChanged>>,
    /// Read at once, whatever the cadence (the start found a change to repair).
    read_first: bool,
    /// Where a repair is recorded before it commits.
    checkpoint: crate::state::Checkpoint,
}

/// What a task of the watch came back with.
enum Outcome {
    /// A reading.
    Read(Observed),
    /// A repair, the reading right after it, and the baseline with the repair
    /// recorded.
    Repaired(Vec<super::repair::Repaired>, Observed, Baseline),
    /// A repair that did not happen, and why.
    RepairFailed(String),
}

impl std::fmt::Debug for PublicationWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicationWatch")
            .field("publication", &self.target.publication)
            .field("vouched", &self.baseline.vouched_lsn)
            .finish_non_exhaustive()
    }
}

/// A reading that did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// The catalog query failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The task reading it ended without an answer.
    #[error("reading publication {publication} and its outbox tables: {reason}")]
    Task { publication: String, reason: String },
}

impl WatchError {
    /// Whether a new session may get an answer (a lost connection, a timeout).
    pub fn is_transient(&self) -> bool {
        match self {
            WatchError::Catalog(e) => e.is_transient(),
            WatchError::Task { .. } => true,
        }
    }
}

/// What a finished reading means for the session.
pub enum Reading {
    /// The baseline moved: the slot may be confirmed up to its `vouched_lsn`.
    Vouched(Baseline),
    /// The relay must stop.
    Changed(Box<PublicationChanged>),
    /// A repair started: nothing is vouched for until it ends.
    Repairing,
    /// The publication itself is gone or was re-created: nothing is vouched for,
    /// and the stream's own error at its next change (the slot cannot decode past
    /// the drop) stops the relay with the slot-safety finding and its fix.
    PublicationGone,
}

/// The connection, the server's version and the objects a reading reads.
struct Target {
    client: Client,
    version: i32,
    publication: String,
    tables: Vec<TableName>,
}

impl Target {
    /// One reading, given up after `limit`.
    async fn read(&self, limit: Duration) -> Result<Observed, WatchError> {
        let read =
            publication_state::read(&self.client, &self.publication, &self.tables, self.version);
        tokio::time::timeout(limit, read)
            .await
            .map_err(|_| WatchError::Task {
                publication: self.publication.clone(),
                reason: format!("no answer within {}s", limit.as_secs()),
            })?
            .map_err(WatchError::from)
    }
}

impl PublicationWatch {
    /// The watch of a session whose start found `baseline` (a reading the caller
    /// compared with the state file's) on a server of `version`.
    pub fn new(
        client: Client,
        version: i32,
        publication: &str,
        tables: &[TableName],
        baseline: Baseline,
    ) -> Self {
        Self {
            target: Arc::new(Target {
                client,
                version,
                publication: publication.to_owned(),
                tables: tables.to_vec(),
            }),
            baseline,
            last_start: None,
            reading: None,
            gone_said: false,
            repair: false,
            repairing: None,
            read_first: false,
            checkpoint: crate::state::Checkpoint::disabled(),
        }
    }

    /// Repair re-created, unpublished outbox tables (`--publication-repair on`, on
    /// PostgreSQL 14+: the caller checks the version); `now`: the start found one,
    /// so the first reading comes at once.
    pub fn repairing(
        mut self,
        repair: bool,
        now: bool,
        checkpoint: crate::state::Checkpoint,
    ) -> Self {
        self.repair = repair;
        self.read_first = repair && now;
        self.checkpoint = checkpoint;
        self
    }

    /// WAL before this was vouched for.
    pub fn vouched(&self) -> Lsn {
        self.baseline.vouched_lsn
    }

    /// Whether a reading is in progress.
    pub fn reading(&self) -> bool {
        self.reading.is_some()
    }

    /// Start a reading when `wanted` lies past what is vouched for, none is in
    /// progress and the last began [`CHECK_EVERY`] ago or more.
    pub fn want(&mut self, wanted: Lsn, now: Instant) {
        if std::mem::take(&mut self.read_first) && self.reading.is_none() {
            self.last_start = Some(now);
            let target = self.target.clone();
            self.reading = Some(tokio::spawn(async move {
                target.read(READ_TIMEOUT).await.map(Outcome::Read)
            }));
            return;
        }
        if wanted <= self.vouched() {
            return;
        }
        let due = self
            .last_start
            .map_or(true, |last| now.duration_since(last) >= CHECK_EVERY);
        if self.reading.is_none() && due {
            self.last_start = Some(now);
            let target = self.target.clone();
            self.reading = Some(tokio::spawn(async move {
                target.read(READ_TIMEOUT).await.map(Outcome::Read)
            }));
        }
    }

    /// Wait for the reading in progress (pending forever when there is none).
    pub async fn finished(&mut self) -> Result<Reading, WatchError> {
        let Some(handle) = self.reading.as_mut() else {
            return std::future::pending().await;
        };
        let result = handle.await;
        self.reading = None;
        let outcome = match result {
            Ok(outcome) => outcome?,
            Err(join) => {
                return Err(WatchError::Task {
                    publication: self.target.publication.clone(),
                    reason: join.to_string(),
                })
            }
        };
        Ok(self.outcome(outcome))
    }

    /// What a task's outcome means.
    fn outcome(&mut self, outcome: Outcome) -> Reading {
        match outcome {
            Outcome::Read(observed) => self.judge(&observed),
            Outcome::Repaired(done, observed, baseline) => {
                self.repairing = None;
                self.baseline = baseline;
                for repaired in &done {
                    tracing::info!(
                        publication = %self.target.publication,
                        table = %repaired.table,
                        rows = repaired.rows,
                        writers_waited_ms = repaired.waited.as_millis() as u64,
                        writers_held_ms = repaired.held.as_millis() as u64,
                        "repaired: the re-created outbox table is published again, and the rows written to it before are sent from the WAL, in the stream's order"
                    );
                }
                self.judge(&observed)
            }
            Outcome::RepairFailed(why) => {
                let mut changed = self.repairing.take().expect("a repair was running");
                changed.changes.push(format!("the repair failed: {why}"));
                Reading::Changed(changed)
            }
        }
    }

    /// Read now and wait (the end of a session: vouch for what was delivered).
    pub async fn read_now(&mut self) -> Result<Reading, WatchError> {
        if self.repairing.is_some() {
            // A repair holds a transaction on the connection: let it end (its lock
            // timeout bounds it), never abort it half-way.
            return self.finished().await;
        }
        if let Some(handle) = self.reading.take() {
            handle.abort();
        }
        let observed = self.target.read(END_READ_TIMEOUT).await?;
        Ok(self.judge(&observed))
    }

    fn judge(&mut self, observed: &Observed) -> Reading {
        if observed.state.oid != self.baseline.state.oid {
            if !self.gone_said {
                self.gone_said = true;
                tracing::warn!(
                    publication = %self.target.publication,
                    vouched = %self.baseline.vouched_lsn,
                    "the publication was dropped (or dropped and re-created): the slot is not confirmed past {}, and the stream stops the relay at its next change",
                    self.baseline.vouched_lsn
                );
            }
            return Reading::PublicationGone;
        }
        match judge(
            &self.target.publication,
            &self.target.tables,
            &self.baseline,
            observed,
        ) {
            Ok(baseline) => {
                self.baseline = baseline.clone();
                Reading::Vouched(baseline)
            }
            Err(changed) => {
                let tables: Vec<(String, u32)> = match self.repair {
                    true => super::repair::repairable(&self.baseline.state, &observed.state)
                        .into_iter()
                        .filter_map(|name| {
                            let t = observed.state.tables.iter().find(|t| t.table == name)?;
                            Some((name.to_owned(), t.oid?))
                        })
                        .collect(),
                    false => Vec::new(),
                };
                if tables.is_empty() {
                    return Reading::Changed(changed);
                }
                tracing::warn!(
                    publication = %self.target.publication,
                    "{}; repairing (--publication-repair on)",
                    changed.changes.join("; ")
                );
                self.repairing = Some(changed);
                let (target, checkpoint) = (self.target.clone(), self.checkpoint.clone());
                let mut baseline = self.baseline.clone();
                self.reading = Some(tokio::spawn(async move {
                    use super::repair;
                    let mut done = Vec::new();
                    for (table, oid) in tables {
                        let prepared =
                            match repair::prepare(&target.client, &target.publication, &table, oid)
                                .await
                            {
                                Ok(prepared) => prepared,
                                Err(err) => return Ok(Outcome::RepairFailed(err.to_string())),
                            };
                        // Durable before the commit: a later start adopts the
                        // relay's own ADD TABLE (see repair's module doc).
                        baseline.repairs.push(prepared.record.clone());
                        if let Err(err) = checkpoint.record_publication(baseline.clone()).await {
                            repair::rollback(&target.client).await;
                            let why = format!("recording it in the state file: {err}");
                            return Ok(Outcome::RepairFailed(why));
                        }
                        match repair::commit(&target.client, prepared).await {
                            Ok(repaired) => done.push(repaired),
                            Err(err) => return Ok(Outcome::RepairFailed(err.to_string())),
                        }
                    }
                    let observed = target.read(READ_TIMEOUT).await?;
                    Ok(Outcome::Repaired(done, observed, baseline))
                }));
                Reading::Repairing
            }
        }
    }
}

/// The baseline after `observed`, or the finding: shared by the start and the
/// session.
pub fn judge(
    publication: &str,
    tables: &[TableName],
    baseline: &Baseline,
    observed: &Observed,
) -> Result<Baseline, Box<PublicationChanged>> {
    // A table this relay re-added itself (a repair recorded before its commit)
    // is taken as the repair left it.
    let mut before = baseline.state.clone();
    for repair in &baseline.repairs {
        let found = observed.state.tables.iter().find(|t| {
            t.table == repair.table
                && t.oid == Some(repair.oid)
                && t.member == Member::Table
                && t.member_oid == Some(repair.member_oid)
        });
        if let (Some(found), Some(was)) = (
            found,
            before.tables.iter_mut().find(|t| t.table == repair.table),
        ) {
            tracing::info!(publication, table = %repair.table, "the outbox table as this relay's repair left it; adopted");
            *was = found.clone();
        }
    }
    match compare(publication, &before, &observed.state) {
        Verdict::Unchanged { adopted } => {
            for note in adopted {
                tracing::info!(publication, "{note}; adopted");
            }
            Ok(Baseline::of(observed))
        }
        Verdict::Changed(changes) => Err(Box::new(PublicationChanged {
            publication: publication.to_owned(),
            changes,
            since_lsn: baseline.vouched_lsn,
            since: baseline.checked_at.clone(),
            until_lsn: observed.wal,
            until: observed.at.clone(),
            tables: tables.to_vec(),
        })),
    }
}

#[cfg(test)]
#[path = "publication_tests.rs"]
mod tests;
