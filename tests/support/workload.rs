//! Running the relay under a write load: start `pgoutbox run` for a test database,
//! write outbox events while recording the committed ones in a [`Ledger`], and watch
//! the replication slot.
//!
//! - [`write_events`]: a fixed number of events on the caller's connection (any
//!   error fails the test).
//! - [`Writer`]: continuous load on a thread of its own that survives PostgreSQL
//!   going away. Invariant: an event enters the ledger only once its transaction is
//!   known to be committed — a COMMIT whose outcome is unknown (connection lost) is
//!   resolved after reconnecting by looking its ids up in the outbox table, before
//!   any later transaction is written, so the ledger stays in commit order.
//! - [`Monitor`]: samples `pg_replication_slots` on its own connection, tolerates the
//!   server being down, and keeps the peak retained WAL it saw.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use pgoutbox::pg::lsn::Lsn;

use super::kafka::Reader;
use super::verify::{self, Ledger};
use super::{poll_for, wait_for, Pgoutbox, Rng, TestDb, WAIT};

/// A random version-4 UUID as text.
pub fn uuid(rng: &mut Rng) -> String {
    let (a, b) = (rng.next_u64(), rng.next_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// The `pgoutbox run` arguments for `db` (slot and topic prefix named after the
/// database), plus `extra`.
pub fn run_args(db: &TestDb<'_>, broker: &str, extra: &[&str]) -> Vec<String> {
    run_args_via(db, &db.url(), broker, extra)
}

/// [`run_args`] reaching PostgreSQL at `url` (e.g. through a test proxy).
pub fn run_args_via(db: &TestDb<'_>, url: &str, broker: &str, extra: &[&str]) -> Vec<String> {
    let mut args = relay_args(db, url, broker);
    args.extend(["--http-addr", "127.0.0.1:0"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The `pgoutbox run` arguments every relay of a test has: PostgreSQL at `url`, the
/// slot and the topic prefix named after `db`; no `--http-addr`, for tests of the
/// HTTP endpoint's own choice (the others use [`run_args`]).
pub fn relay_args(db: &TestDb<'_>, url: &str, broker: &str) -> Vec<String> {
    [
        "run",
        "--database-url",
        url,
        "--brokers",
        broker,
        "--slot",
        &db.name,
        "--topic-template",
        &format!("{}.${{routedByValue}}", db.name),
    ]
    .map(String::from)
    .to_vec()
}

/// Start `pgoutbox run` for `db` without waiting for anything.
pub fn spawn_run(db: &TestDb<'_>, broker: &str, extra: &[&str]) -> Pgoutbox {
    Pgoutbox::spawn(&run_args(db, broker, extra))
}

/// Start `pgoutbox run` for `db` and wait until it streams.
pub fn start_run(db: &TestDb<'_>, broker: &str, extra: &[&str]) -> Pgoutbox {
    start_relay(&run_args(db, broker, extra))
}

/// [`start_run`] logging every delivery report it gets ([`verify::ACK_LOG`]), for an
/// audit of the broker's acks against what a consumer reads ([`verify::audit_acks`]).
pub fn start_run_audited(db: &TestDb<'_>, broker: &str, extra: &[&str]) -> Pgoutbox {
    let relay = spawn_run_audited(db, broker, extra);
    relay.wait_stderr("relaying outbox to kafka", WAIT);
    relay
}

/// [`spawn_run`] logging every delivery report it gets (see [`start_run_audited`]).
pub fn spawn_run_audited(db: &TestDb<'_>, broker: &str, extra: &[&str]) -> Pgoutbox {
    Pgoutbox::spawn_with_env(&run_args(db, broker, extra), &[verify::ACK_LOG])
}

/// Start `pgoutbox <args>` (a `run`, e.g. from [`run_args_via`]) and wait until it
/// streams.
pub fn start_relay(args: &[String]) -> Pgoutbox {
    let relay = Pgoutbox::spawn(args);
    relay.wait_stderr("relaying outbox to kafka", WAIT);
    relay
}

/// [`start_relay`] logging every delivery report (see [`start_run_audited`]).
pub fn start_relay_audited(args: &[String]) -> Pgoutbox {
    let relay = Pgoutbox::spawn_with_env(args, &[verify::ACK_LOG]);
    relay.wait_stderr("relaying outbox to kafka", WAIT);
    relay
}

/// The topics `start_run` routes the aggregate `types` of `db` to.
pub fn topics(db: &TestDb<'_>, types: &[&str]) -> Vec<String> {
    types.iter().map(|t| format!("{}.{t}", db.name)).collect()
}

/// A column of `db`'s slot (`confirmed_flush_lsn`, `restart_lsn`); `0/0` while the
/// slot or the column is unset.
pub fn slot_lsn(db: &TestDb<'_>, column: &str) -> Lsn {
    let text = db.psql(&format!(
        "SELECT {column} FROM pg_replication_slots WHERE slot_name = '{}'",
        db.name
    ));
    if text.is_empty() {
        return Lsn::INVALID;
    }
    parse_lsn(&text)
}

/// `db`'s slot's `confirmed_flush_lsn` (`0/0` while unset).
pub fn confirmed(db: &TestDb<'_>) -> Lsn {
    slot_lsn(db, "confirmed_flush_lsn")
}

/// Wait until `db`'s slot confirms `lsn` (at or past it); returns how long that
/// took. On timeout fail showing where the slot is and the relay's log.
pub fn wait_confirmed(db: &TestDb<'_>, lsn: Lsn, relay: &Pgoutbox, timeout: Duration) -> Duration {
    let start = Instant::now();
    poll_for(timeout, Duration::from_millis(50), || {
        (confirmed(db) >= lsn).then(|| start.elapsed())
    })
    .unwrap_or_else(|| {
        panic!(
            "slot {} did not confirm {lsn} within {timeout:?} (at {}); relay:\n{}",
            db.name,
            confirmed(db),
            relay.stderr()
        )
    })
}

/// The server's current WAL write position: at or past the commit of everything
/// committed so far.
pub fn current_lsn(db: &TestDb<'_>) -> Lsn {
    parse_lsn(&db.psql("SELECT pg_current_wal_lsn()"))
}

/// An LSN as psql prints a `pg_lsn`.
pub fn parse_lsn(text: &str) -> Lsn {
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("an LSN from the server: {e}"))
}

/// The relay's `/metrics` text.
pub fn metrics(relay: &Pgoutbox) -> String {
    http_get(relay, "/metrics")
}

/// The unlabelled metric `name` in the relay's `/metrics`, if it is shown.
pub fn metric(relay: &Pgoutbox, name: &str) -> Option<f64> {
    metric_in(&metrics(relay), name)
}

/// The unlabelled metric `name` in a `/metrics` text, if it is shown.
pub fn metric_in(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The relay's HTTP endpoint, as its startup log gives it.
pub fn http_addr(relay: &Pgoutbox) -> String {
    wait_for("the relay to log its metrics address", WAIT, || {
        relay
            .stderr()
            .lines()
            .find(|l| l.contains("serving /metrics"))
            .and_then(|l| l.split("addr=").nth(1))
            .map(|a| a.split_whitespace().next().unwrap_or_default().to_owned())
    })
}

/// GET `path` from the relay's HTTP endpoint (address taken from its startup log).
pub fn http_get(relay: &Pgoutbox, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = http_addr(relay);
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The shape of a write load: aggregate types, number of distinct keys,
/// transaction size 1..=max_rows, and whether rollbacks are mixed in.
#[derive(Clone)]
pub struct Workload<'a> {
    pub types: &'a [&'a str],
    pub keys: u64,
    pub max_rows: u64,
    pub rollbacks: bool,
}

/// One transaction of `rows` events (numbered from `first`): its SQL and the
/// (id, key) pairs it commits, in insertion order. With `w.rollbacks`, a few rows
/// inserted under a savepoint that is rolled back are mixed in.
fn transaction(
    rng: &mut Rng,
    w: &Workload<'_>,
    rows: usize,
    first: usize,
) -> (String, Vec<(String, String)>) {
    let mut sql = String::from("BEGIN;");
    let mut batch = Vec::with_capacity(rows);
    for n in first..first + rows {
        let id = uuid(rng);
        let key = format!("key-{}", rng.range(0, w.keys - 1));
        let t = w.types[rng.range(0, w.types.len() as u64 - 1) as usize];
        sql.push_str(&format!(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES \
             ('{id}', '{t}', '{key}', 'Happened', '{{\"n\": {n}, \"key\": \"{key}\"}}');"
        ));
        batch.push((id, key));
        if w.rollbacks && rng.range(0, 19) == 0 {
            sql.push_str(&format!(
                "SAVEPOINT s; INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
                 VALUES ('{}', '{t}', 'ghost', 'RolledBack', '{{}}'); ROLLBACK TO SAVEPOINT s;",
                uuid(rng)
            ));
        }
    }
    sql.push_str("COMMIT;");
    (sql, batch)
}

/// A whole transaction that is rolled back (its event must never appear).
fn rolled_back(rng: &mut Rng) -> String {
    format!(
        "BEGIN; INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('{}', 'order', 'ghost', 'RolledBack', '{{}}'); ROLLBACK;",
        uuid(rng)
    )
}

/// Insert `n` events following `w`, recording the committed ones in `ledger`.
pub async fn write_events(
    client: &tokio_postgres::Client,
    rng: &mut Rng,
    ledger: &mut Ledger,
    w: &Workload<'_>,
    n: usize,
) {
    let mut written = 0;
    while written < n {
        let rows = (rng.range(1, w.max_rows) as usize).min(n - written);
        let (sql, batch) = transaction(rng, w, rows, written);
        written += rows;
        client.batch_execute(&sql).await.unwrap();
        ledger.committed.extend(batch);
        if w.rollbacks && rng.range(0, 9) == 0 {
            client.batch_execute(&rolled_back(rng)).await.unwrap();
        }
    }
}

/// Poll `reader` until it holds every event of `ledger` (true) or `timeout` passes.
/// Incremental, so it stays cheap with hundreds of thousands of records.
pub fn read_all(reader: &mut Reader, ledger: &Ledger, timeout: Duration) -> bool {
    let missing: std::cell::RefCell<(usize, HashSet<&str>)> = std::cell::RefCell::new((
        0,
        ledger.committed.iter().map(|(id, _)| id.as_str()).collect(),
    ));
    reader.try_read_until(timeout, |records| {
        let mut m = missing.borrow_mut();
        let (seen, missing) = &mut *m;
        for r in &records[*seen..] {
            missing.remove(r.id().as_str());
        }
        *seen = records.len();
        missing.is_empty()
    })
}

/// Read on until every offset the relay logged an ack for was read, or `timeout`
/// passed: [`verify::audit_acks`] then compares what is there.
pub fn read_acked(reader: &mut Reader, acks: &[verify::Ack], timeout: Duration) -> bool {
    let places: HashSet<(&str, i32, i64)> = acks
        .iter()
        .filter(|a| a.offset >= 0)
        .map(|a| (a.topic.as_str(), a.partition, a.offset))
        .collect();
    reader.try_read_until(timeout, |records| {
        let read: HashSet<(&str, i32, i64)> = records
            .iter()
            .map(|c| (c.topic.as_str(), c.partition, c.offset))
            .collect();
        places.is_subset(&read)
    })
}

/// What a [`Writer`] went through.
#[derive(Debug, Default, Clone)]
pub struct WriterStats {
    /// Transactions that failed because the connection was lost.
    pub interrupted: usize,
    /// Of those, found committed after reconnecting (their events are in the ledger).
    pub in_doubt_committed: usize,
    /// Of those, found not committed (their events are not in the ledger).
    pub in_doubt_absent: usize,
}

/// Settings of a [`Writer`].
#[derive(Clone)]
pub struct WriterConfig {
    pub url: String,
    pub seed: u64,
    pub types: Vec<&'static str>,
    pub keys: u64,
    pub max_rows: u64,
    pub rollbacks: bool,
    /// Pause between transactions: keeps the load independent of machine speed.
    pub pause: Duration,
}

struct Shared {
    ledger: Mutex<Ledger>,
    stats: Mutex<WriterStats>,
    stop: AtomicBool,
    /// A request for one large transaction: its size and where to send its ids.
    big: Mutex<Option<(usize, mpsc::Sender<HashSet<String>>)>>,
}

/// Continuous outbox writes on a thread of its own (see the module doc).
pub struct Writer {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    /// Start writing.
    pub fn spawn(cfg: WriterConfig) -> Writer {
        let shared = Arc::new(Shared {
            ledger: Mutex::default(),
            stats: Mutex::default(),
            stop: AtomicBool::new(false),
            big: Mutex::new(None),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(write_loop(cfg, s))
            })
            .unwrap();
        Writer {
            shared,
            thread: Some(thread),
        }
    }

    /// Events committed so far.
    pub fn committed(&self) -> usize {
        self.shared.ledger.lock().unwrap().len()
    }

    /// The events committed so far, in commit order.
    pub fn ledger_snapshot(&self) -> Ledger {
        self.shared.ledger.lock().unwrap().clone()
    }

    /// Make the next transaction `rows` events long; returns its ids once it is
    /// about to be sent (it may still fail; then its ids never enter the ledger).
    pub fn big_transaction(&self, rows: usize) -> HashSet<String> {
        let (tx, rx) = mpsc::channel();
        *self.shared.big.lock().unwrap() = Some((rows, tx));
        rx.recv_timeout(WAIT)
            .expect("the writer to start the large transaction")
    }

    /// Stop, resolve a transaction in doubt, and hand over the ledger.
    pub fn finish(mut self) -> (Ledger, WriterStats) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("writer thread panicked");
        }
        let ledger = self.shared.ledger.lock().unwrap().clone();
        let stats = self.shared.stats.lock().unwrap().clone();
        (ledger, stats)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

async fn connect(url: &str) -> Option<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Some(client)
}

/// Whether an error means the connection (or the server) went away, so the
/// transaction's outcome is unknown; anything else is a bug in the test.
fn connection_lost(client: &tokio_postgres::Client, err: &tokio_postgres::Error) -> bool {
    client.is_closed()
        || err.as_db_error().is_none()
        || err
            .code()
            .is_some_and(|c| c.code().starts_with("57") || c.code().starts_with("08"))
}

async fn write_loop(cfg: WriterConfig, shared: Arc<Shared>) {
    let w = Workload {
        types: &cfg.types,
        keys: cfg.keys,
        max_rows: cfg.max_rows,
        rollbacks: cfg.rollbacks,
    };
    let mut rng = Rng::new(cfg.seed);
    let mut client: Option<tokio_postgres::Client> = None;
    let mut in_doubt: Option<Vec<(String, String)>> = None;
    let mut written = 0;
    // Down: retry connecting. Once stopped, only as long as a transaction is in doubt.
    let mut down_since: Option<Instant> = None;
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        if stopping && in_doubt.is_none() {
            return;
        }
        let Some(c) = client.as_ref().filter(|c| !c.is_closed()) else {
            client = connect(&cfg.url).await;
            if client.is_none() {
                let since = *down_since.get_or_insert_with(Instant::now);
                assert!(
                    since.elapsed() < WAIT * 5,
                    "writer: PostgreSQL unreachable for {:?}",
                    since.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            continue;
        };
        down_since = None;
        if let Some(batch) = in_doubt.take() {
            if !resolve(c, batch.clone(), &shared).await {
                in_doubt = Some(batch); // lost the connection again: ask again later
                client = None;
            }
            continue;
        }
        if stopping {
            return;
        }
        let big = shared.big.lock().unwrap().take();
        let rows = match &big {
            Some((rows, _)) => *rows,
            None => rng.range(1, w.max_rows) as usize,
        };
        let (sql, batch) = transaction(&mut rng, &w, rows, written);
        written += rows;
        if let Some((_, tx)) = big {
            let _ = tx.send(batch.iter().map(|(id, _)| id.clone()).collect());
        }
        match c.batch_execute(&sql).await {
            Ok(()) => shared.ledger.lock().unwrap().committed.extend(batch),
            Err(err) => {
                assert!(connection_lost(c, &err), "writer: unexpected error: {err}");
                shared.stats.lock().unwrap().interrupted += 1;
                in_doubt = Some(batch);
                client = None;
                continue;
            }
        }
        if w.rollbacks && rng.range(0, 9) == 0 {
            // Nothing to record either way; a failure surfaces on the next statement.
            let _ = c.batch_execute(&rolled_back(&mut rng)).await;
        }
        tokio::time::sleep(cfg.pause).await;
    }
}

/// Decide a transaction whose COMMIT outcome is unknown by looking for its ids:
/// all there → committed (into the ledger), none → never happened. `false` if the
/// question could not be asked (connection lost again).
async fn resolve(
    client: &tokio_postgres::Client,
    batch: Vec<(String, String)>,
    shared: &Shared,
) -> bool {
    let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
    let found: i64 = match client
        .query_one(
            "SELECT count(*) FROM outbox WHERE id = ANY($1::text[]::uuid[])",
            &[&ids],
        )
        .await
    {
        Ok(row) => row.get(0),
        Err(_) => return false,
    };
    let mut stats = shared.stats.lock().unwrap();
    if found == 0 {
        stats.in_doubt_absent += 1;
    } else {
        assert_eq!(
            found as usize,
            ids.len(),
            "a transaction was partly committed: {found} of {} rows",
            ids.len()
        );
        stats.in_doubt_committed += 1;
        shared.ledger.lock().unwrap().committed.extend(batch);
    }
    true
}

/// One sample of the slot, positions in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotSample {
    pub confirmed: u64,
    pub restart: u64,
    pub current: u64,
    /// Whether a walsender holds the slot.
    pub active: bool,
}

/// Samples a slot over a connection of its own (see the module doc).
pub struct Monitor {
    url: String,
    slot: String,
    rt: tokio::runtime::Runtime,
    client: Option<tokio_postgres::Client>,
    /// Highest `pg_current_wal_lsn() - restart_lsn` seen, in bytes.
    pub peak_retained: u64,
}

impl Monitor {
    /// Watch the slot named after `db` (as `start_run` names it).
    pub fn new(db: &TestDb<'_>) -> Monitor {
        Monitor {
            url: db.url(),
            slot: db.name.clone(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            client: None,
            peak_retained: 0,
        }
    }

    /// The slot now; `None` while the server cannot be reached (or no slot yet).
    pub fn sample(&mut self) -> Option<SlotSample> {
        if !self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            self.client = self.rt.block_on(connect(&self.url));
        }
        let client = self.client.as_ref()?;
        let row = self
            .rt
            .block_on(client.query_opt(
                "SELECT (confirmed_flush_lsn - '0/0')::float8, (restart_lsn - '0/0')::float8, \
                        (pg_current_wal_lsn() - '0/0')::float8, active \
                 FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            ))
            .ok()??;
        let lsn = |i: usize| row.get::<_, Option<f64>>(i).unwrap_or(0.0) as u64;
        let s = SlotSample {
            confirmed: lsn(0),
            restart: lsn(1),
            current: lsn(2),
            active: row.get(3),
        };
        self.peak_retained = self.peak_retained.max(s.current.saturating_sub(s.restart));
        Some(s)
    }

    /// Wait for a sample (the server may be restarting).
    pub fn wait_sample(&mut self) -> SlotSample {
        wait_for("a sample of the replication slot", WAIT, || self.sample())
    }

    /// Wait until no walsender holds the slot.
    pub fn wait_inactive(&mut self) -> SlotSample {
        wait_for("the slot to be released", WAIT, || {
            self.sample().filter(|s| !s.active)
        })
    }

    /// Wait until `confirmed_flush_lsn` passes `lsn`; returns how long it took, or
    /// `None` after `timeout`.
    pub fn confirmed_past(&mut self, lsn: u64, timeout: Duration) -> Option<Duration> {
        let start = Instant::now();
        poll_for(timeout, Duration::from_millis(20), || {
            self.sample()
                .is_some_and(|s| s.confirmed > lsn)
                .then(|| start.elapsed())
        })
    }

    /// [`Monitor::confirmed_past`], failing the test with `what` and `log` on timeout.
    pub fn wait_confirmed_past(
        &mut self,
        what: &str,
        lsn: u64,
        timeout: Duration,
        log: impl FnOnce() -> String,
    ) -> Duration {
        match self.confirmed_past(lsn, timeout) {
            Some(took) => took,
            None => panic!(
                "timed out after {timeout:?} waiting for {what} (confirmed_flush_lsn past {lsn}; \
                 slot now: {:?})\n{}",
                self.sample(),
                log()
            ),
        }
    }
}
