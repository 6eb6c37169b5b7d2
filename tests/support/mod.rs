//! Test harness: a private PostgreSQL cluster per test process, a fresh database per
//! test, and helpers to run the `pgoutbox` binary and wait for conditions.
//!
//! The cluster uses the server binaries of `pg_config --bindir` (or
//! `PGOUTBOX_TEST_PG_BINDIR`), runs as user `postgres` when the tests run as root
//! (initdb refuses root), lives in a fresh `mktemp -d` directory, listens on a free
//! loopback port with `wal_level=logical`, and is stopped and deleted by a watchdog
//! process when the test binary exits. Nothing here depends on a system cluster.
//!
//! Sharing: every test of the process uses [`PgCluster::shared`] at the same time as
//! the others (of every module). So a test keeps to its own [`TestDb`] and names the
//! cluster-wide objects it makes (slots, roles) after it, and never measures the
//! cluster as a whole: counts of slots or walsenders, or a slot against a moving
//! `pg_current_wal_lsn()` (take the position once, then wait for the slot to pass
//! it). A test that needs other settings, TLS files or a server it stops starts its
//! own with [`PgCluster::start`].
//!
//! Authentication layout (pg_hba.conf): members of role `md5_users` must use md5,
//! members of `scram_users` must use scram-sha-256, everyone else is trusted on
//! 127.0.0.1, so auth tests create a user and grant it one of those roles.

pub mod kafka;
pub mod proxy;
pub mod standby;
pub use standby::pg_bindir;
pub mod tls;
pub mod verify;
pub mod workload;

mod config_show;
pub use config_show::config_show_line;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Generous default timeout for conditions: CI machines are shared and loaded.
pub const WAIT: Duration = Duration::from_secs(60);

/// How often [`wait_for`] and [`wait_until_eq`] look again.
const POLL: Duration = Duration::from_millis(50);

/// Poll `condition` every `every` until it returns `Some`, or `None` once `timeout`
/// has passed: every bounded wait of the tests goes through here (or its async twin
/// [`poll_for_async`]). `condition` runs at least once, and once more after the
/// timeout has passed before this gives up.
pub fn poll_for<T>(
    timeout: Duration,
    every: Duration,
    mut condition: impl FnMut() -> Option<T>,
) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = condition() {
            return Some(v);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// [`poll_for`] for conditions that await (sleeps without blocking the runtime).
pub async fn poll_for_async<T>(
    timeout: Duration,
    every: Duration,
    mut condition: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = condition().await {
            return Some(v);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// Poll `condition` until it returns `Some`, or panic after `timeout` with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, condition: impl FnMut() -> Option<T>) -> T {
    wait_for_opt(timeout, condition)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// [`poll_for`] at the usual pace, for a caller that acts on the timeout itself.
pub fn wait_for_opt<T>(timeout: Duration, condition: impl FnMut() -> Option<T>) -> Option<T> {
    poll_for(timeout, POLL, condition)
}

/// Hold an invariant for a period: run `check` (which asserts) every `every` until
/// `period` has passed since `since`. Do-while: `check` runs at least once however
/// late this is called, and the last run comes after the period ended, so the whole
/// period is covered. Returns how many times `check` ran.
pub fn hold_for(
    since: Instant,
    period: Duration,
    every: Duration,
    mut check: impl FnMut(),
) -> usize {
    let mut checks = 0;
    loop {
        check();
        checks += 1;
        let left = period.saturating_sub(since.elapsed());
        if left.is_zero() {
            return checks;
        }
        std::thread::sleep(every.min(left));
    }
}

/// Poll `current` until it equals `expected`; on timeout fail showing both.
pub fn wait_until_eq<T: PartialEq + std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    expected: &T,
    mut current: impl FnMut() -> T,
) {
    let mut last = None;
    let reached = poll_for(timeout, POLL, || {
        let now = current();
        let done = (&now == expected).then_some(());
        last = Some(now);
        done
    });
    if reached.is_none() {
        let last = last.expect("polled at least once");
        assert_eq!(
            &last, expected,
            "timed out after {timeout:?} waiting for {what}"
        );
    }
}

fn is_root() -> bool {
    // SAFETY-free check: `id -u` avoids a libc dependency.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("PGOUTBOX_TEST_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    let out = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("pg_config not found: install PostgreSQL server binaries (see .ci/run)");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The major version of the server binaries in `dir` (`postgres --version`).
pub fn major_version(dir: &Path) -> u32 {
    let out = Command::new(dir.join("postgres"))
        .arg("--version")
        .output()
        .expect("postgres --version");
    let text = String::from_utf8_lossy(&out.stdout);
    // "postgres (PostgreSQL) 17.10"
    text.split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no version in {text:?}"))
}

/// Server binaries of PostgreSQL 17 or later, for tests of what only 17+ has
/// (failover slots): the harness's own when they are 17+, else PostgreSQL 17 from
/// `scripts/install-postgres.sh 17` (cached after the first install), so such a
/// test runs for real on every machine instead of passing on the wrong version.
pub fn pg17_bindir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let own = bindir();
        if major_version(&own) >= 17 {
            return own;
        }
        let dir = pg_bindir(17);
        assert!(
            major_version(&dir) >= 17,
            "{} is not PostgreSQL 17+",
            dir.display()
        );
        dir
    })
    .clone()
}

/// Build a command that runs as the `postgres` OS user when we are root.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.arg("-u").arg("postgres").arg("--").arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// Extra settings for a cluster.
#[derive(Default, Clone)]
pub struct ClusterOptions {
    /// Lines appended to postgresql.conf.
    pub conf: Vec<String>,
    /// Files written into the data directory before start (name, contents).
    pub files: Vec<(String, Vec<u8>)>,
    /// Replaces the default pg_hba.conf when set.
    pub hba: Option<String>,
    /// Server binaries; default: PGOUTBOX_TEST_PG_BINDIR, else `pg_config --bindir`
    /// (another major: [`pg_bindir`]).
    pub bindir: Option<PathBuf>,
}

/// A running private cluster.
pub struct PgCluster {
    pub port: u16,
    pub datadir: PathBuf,
    pub bindir: PathBuf,
}

impl PgCluster {
    /// A private cluster of PostgreSQL `major` (a test of version-specific behaviour),
    /// started off the async runtime's worker threads.
    pub async fn of_major(major: u32) -> PgCluster {
        tokio::task::spawn_blocking(move || {
            PgCluster::start(ClusterOptions {
                bindir: Some(pg_bindir(major)),
                ..ClusterOptions::default()
            })
        })
        .await
        .unwrap()
    }

    /// The cluster shared by all tests of this binary (started on first use).
    pub fn shared() -> &'static PgCluster {
        static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
        CLUSTER.get_or_init(|| PgCluster::start(ClusterOptions::default()))
    }

    /// Start a new cluster (stopped and removed when the test process exits).
    pub fn start(options: ClusterOptions) -> PgCluster {
        // Serialize initdb runs: two at once on a 2-core box only slows both.
        static START: Mutex<()> = Mutex::new(());
        let _guard = START.lock().unwrap_or_else(|e| e.into_inner());
        let bindir = options.bindir.clone().unwrap_or_else(bindir);
        let dir = Command::new("mktemp")
            .args(["-d", "/tmp/pgoutbox-test-pg.XXXXXX"])
            .output()
            .expect("mktemp");
        let root = PathBuf::from(String::from_utf8_lossy(&dir.stdout).trim());
        let datadir = root.join("data");
        if is_root() {
            run_ok(Command::new("chown").arg("postgres:postgres").arg(&root));
        }
        run_ok(
            as_postgres(&bindir.join("initdb"))
                .arg("-D")
                .arg(&datadir)
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ]),
        );
        let port = free_port();
        let mut conf = vec![
            "listen_addresses = '127.0.0.1'".to_owned(),
            format!("port = {port}"),
            format!("unix_socket_directories = '{}'", root.display()),
            "wal_level = logical".into(),
            // Every test of the process has its own slot on the shared cluster, and
            // most leave it behind when they end: room for all of them. The tests of
            // every module run at once (as many as the machine has cores), each with
            // a relay, a writer and psql sessions.
            "max_wal_senders = 60".into(),
            "max_replication_slots = 250".into(),
            "max_connections = 200".into(),
            "fsync = off".into(),
            "synchronous_commit = on".into(),
            "shared_buffers = 64MB".into(),
            "password_encryption = 'scram-sha-256'".into(),
            "logging_collector = off".into(),
        ];
        conf.extend(options.conf.iter().cloned());
        let default_hba = "\
local all all trust
host all +md5_users 127.0.0.1/32 md5
host replication +md5_users 127.0.0.1/32 md5
host all +scram_users 127.0.0.1/32 scram-sha-256
host replication +scram_users 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
";
        let mut files = vec![
            (
                "postgresql.auto.conf".to_owned(),
                (conf.join("\n") + "\n").into_bytes(),
            ),
            (
                "pg_hba.conf".to_owned(),
                options
                    .hba
                    .clone()
                    .unwrap_or_else(|| default_hba.to_owned())
                    .into_bytes(),
            ),
        ];
        files.extend(options.files.iter().cloned());
        for (name, contents) in &files {
            write_as_postgres(&datadir.join(name), contents);
        }
        let log = root.join("postgres.log");
        run_ok(
            as_postgres(&bindir.join("pg_ctl"))
                .arg("-D")
                .arg(&datadir)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "120", "start"]),
        );
        spawn_watchdog(&bindir, &datadir, &root);
        let cluster = PgCluster {
            port,
            datadir,
            bindir,
        };
        cluster.psql(
            "postgres",
            "CREATE ROLE md5_users NOLOGIN; CREATE ROLE scram_users NOLOGIN;",
        );
        cluster
    }

    /// `postgres://postgres@127.0.0.1:port/db?sslmode=disable`.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable",
            self.port
        )
    }

    /// Run SQL through psql as the superuser; panics on error; returns unaligned output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = self.psql_output(db, sql);
        assert!(
            out.status.success(),
            "psql failed for {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
    }

    /// Run SQL through psql as the superuser (stop at the first error) and return
    /// whatever happened, for tests that expect a failure.
    pub fn psql_output(&self, db: &str, sql: &str) -> std::process::Output {
        Command::new(self.psql_bin())
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", "postgres", "-d", db])
            .arg("-c")
            .arg(sql)
            .output()
            .expect("psql")
    }

    /// The psql client to use. Server-only builds (e.g. PGOUTBOX_TEST_PG_BINDIR from
    /// an embedded-postgres package) have none: any psql speaks to any server version.
    pub fn psql_bin(&self) -> PathBuf {
        let psql = self.bindir.join("psql");
        if psql.exists() {
            psql
        } else {
            PathBuf::from("psql")
        }
    }

    /// A fresh, empty database with the default outbox table.
    pub fn fresh_db(&self) -> TestDb<'_> {
        // Unique across every cluster of this test process, not per cluster: the
        // relay's state file is named after database and slot, so two clusters
        // handing out the same name would look like one database that moved to
        // another cluster (and slot safety rightly refuses to go on).
        static DATABASES: AtomicU32 = AtomicU32::new(0);
        let n = DATABASES.fetch_add(1, Ordering::SeqCst);
        let name = format!("t{}_{n}", std::process::id());
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        let outbox =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/outbox.sql"))
                .expect("sql/outbox.sql");
        self.psql(&name, &outbox);
        TestDb {
            cluster: self,
            name,
        }
    }

    /// Stop the server (`mode`: smart, fast, immediate). A smart or fast shutdown
    /// also waits for logical walsenders until their client confirmed everything.
    pub fn stop(&self, mode: &str) {
        run_ok(
            as_postgres(&self.bindir.join("pg_ctl"))
                .arg("-D")
                .arg(&self.datadir)
                .args(["-w", "-t", "120", "-m", mode, "stop"]),
        );
    }

    /// Start the server again after [`PgCluster::stop`] (same data directory, port
    /// and log file); returns once it accepts connections (crash recovery included).
    pub fn start_again(&self) {
        let log = self
            .datadir
            .parent()
            .expect("the data directory lives in the cluster's directory")
            .join("postgres.log");
        run_ok(
            as_postgres(&self.bindir.join("pg_ctl"))
                .arg("-D")
                .arg(&self.datadir)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "120", "start"]),
        );
    }
}

impl PgCluster {
    /// Give the server a new timeline the way a failover does, on its own data
    /// directory: stop it (fast), start it as a standby without a primary
    /// (`standby.signal`), then `pg_ctl promote`. Same system identifier, the next
    /// timeline, its replication slots kept as they were on disk. Returns once it
    /// accepts writes.
    pub fn promote_in_place(&self) {
        self.stop("fast");
        write_as_postgres(&self.datadir.join("standby.signal"), b"");
        self.start_again();
        run_ok(
            as_postgres(&self.bindir.join("pg_ctl"))
                .arg("-D")
                .arg(&self.datadir)
                .args(["-w", "-t", "120", "promote"]),
        );
        wait_until_eq(
            "the promoted server to accept writes",
            WAIT,
            &"f".to_owned(),
            || self.psql("postgres", "SELECT pg_is_in_recovery()"),
        );
    }

    /// The server's current timeline (a checkpoint first: a promotion does not
    /// wait for one, and the control file shows the last checkpoint's).
    pub fn timeline(&self) -> u32 {
        self.psql("postgres", "CHECKPOINT");
        self.psql(
            "postgres",
            "SELECT timeline_id FROM pg_control_checkpoint()",
        )
        .parse()
        .expect("a timeline number")
    }
}

/// One database of the cluster.
pub struct TestDb<'a> {
    pub cluster: &'a PgCluster,
    pub name: String,
}

impl TestDb<'_> {
    /// The server's `server_version_num` (e.g. 170010).
    pub fn server_version_num(&self) -> u32 {
        self.psql("SHOW server_version_num")
            .parse()
            .expect("a server_version_num")
    }

    /// Connection URL as superuser.
    pub fn url(&self) -> String {
        self.cluster.url(&self.name)
    }

    /// Run SQL via psql; returns unaligned, tuples-only output.
    pub fn psql(&self, sql: &str) -> String {
        self.cluster.psql(&self.name, sql)
    }

    /// An async tokio-postgres client (runs on the calling test's runtime).
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("connect test client");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }

    /// `SELECT slot_name, … FROM pg_replication_slots` as text, for before/after comparisons.
    pub fn slots_snapshot(&self) -> String {
        // Not restart_lsn itself: while a walsender decodes an existing slot,
        // PostgreSQL moves restart_lsn forward on its own whenever it decodes a
        // running-xacts record below the slot's confirmed_flush_lsn (see
        // LogicalIncreaseRestartDecodingForSlot in logical.c), with no confirmation
        // from the client. It never passes confirmed_flush_lsn, which is what a
        // client that confirms nothing leaves exactly as it was.
        self.psql(
            "SELECT slot_name, plugin, slot_type, database, temporary, confirmed_flush_lsn, \
             restart_lsn <= confirmed_flush_lsn AS restart_not_past_confirmed \
             FROM pg_replication_slots WHERE database = current_database() ORDER BY slot_name",
        )
    }
}

fn run_ok(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write_as_postgres(path: &Path, contents: &[u8]) {
    std::fs::write(path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    if is_root() {
        run_ok(Command::new("chown").arg("postgres:postgres").arg(path));
    }
    run_ok(Command::new("chmod").arg("600").arg(path));
}

/// A detached shell that stops the cluster and deletes its directory once this test
/// process is gone (Rust test binaries have no global teardown hook).
fn spawn_watchdog(bindir: &Path, datadir: &Path, root: &Path) {
    let pg_ctl = bindir.join("pg_ctl");
    let runuser = if is_root() {
        "runuser -u postgres -- "
    } else {
        ""
    };
    on_exit(&format!(
        "{runuser}{} -D {} -m immediate stop; rm -rf {}",
        pg_ctl.display(),
        datadir.display(),
        root.display()
    ));
}

/// Run the shell command `cleanup` once this test process has exited, from a
/// detached background shell (double fork: the shell we wait for exits at once).
pub fn on_exit(cleanup: &str) {
    let script = format!(
        "(while kill -0 {pid} 2>/dev/null; do sleep 1; done; {cleanup}) </dev/null >/dev/null 2>&1 &",
        pid = std::process::id(),
    );
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .status()
        .expect("spawn watchdog");
    assert!(status.success(), "watchdog shell failed");
}

/// A fresh directory removed when this test process exits.
pub fn temp_dir(tag: &str) -> PathBuf {
    let out = Command::new("mktemp")
        .args(["-d", &format!("/tmp/pgoutbox-test-{tag}.XXXXXX")])
        .output()
        .expect("mktemp");
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(dir.is_dir(), "mktemp -d gave {}", dir.display());
    on_exit(&format!("rm -rf {}", dir.display()));
    dir
}

/// The XDG_STATE_HOME of every `pgoutbox` this test process starts (the default
/// `--state-dir` is `$XDG_STATE_HOME/pgoutbox`).
pub fn state_home() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| temp_dir("state-home"))
}

/// A running `pgoutbox` process whose stdout lines are collected by a thread.
pub struct Pgoutbox {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    stderr: std::sync::Arc<Mutex<String>>,
    /// The pipe readers; joined once the process exited, so stdout and stderr are
    /// complete when `wait_exit` returns.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Pgoutbox {
    /// Start `pgoutbox <args>` with a clean PGOUTBOX_* environment.
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Pgoutbox {
        Self::spawn_with_env(args, &[])
    }

    /// Start `pgoutbox <args>` with a clean PG*/PGOUTBOX_* environment plus `env`.
    pub fn spawn_with_env<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> Pgoutbox {
        let mut cmd = Self::command(args, env);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn pgoutbox");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        let out_reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::sync::Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err_pipe = child.stderr.take().expect("stderr");
        let err_reader = std::thread::spawn(move || {
            for line in BufReader::new(err_pipe).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&line);
                s.push('\n');
            }
        });
        Pgoutbox {
            child,
            lines,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    /// `pgoutbox <args>` with a clean PG*/PGOUTBOX_* environment plus `env`, for a
    /// test that wires its standard streams itself.
    pub fn command<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgoutbox"));
        cmd.args(args);
        for (key, _) in std::env::vars() {
            if key.starts_with("PGOUTBOX_") || key.starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        cmd.env("HOME", "/nonexistent"); // no ~/.pgpass of the machine running the tests
                                         // State files of `run` go to a directory of this test process, not the
                                         // machine's, and never meet those of an earlier run.
        cmd.env_remove("STATE_DIRECTORY");
        cmd.env("XDG_STATE_HOME", state_home());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Collect exactly `n` stdout lines, waiting up to `timeout` overall.
    pub fn take_lines(&mut self, n: usize, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => out.push(line),
                Err(_) => panic!(
                    "got {} of {n} lines within {timeout:?}; stderr:\n{}",
                    out.len(),
                    self.stderr()
                ),
            }
        }
        out
    }

    /// Wait until stderr contains `needle` (e.g. a startup log line); on timeout
    /// fail showing stderr.
    pub fn wait_stderr(&self, needle: &str, timeout: Duration) {
        poll_for(timeout, POLL, || {
            self.stderr().contains(needle).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "timed out after {timeout:?} waiting for {needle:?} on pgoutbox's stderr:\n{}",
                self.stderr()
            )
        });
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every stdout line received so far (non-blocking).
    pub fn stdout_so_far(&mut self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// Wait for the process to exit; returns its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let status = wait_for("pgoutbox to exit", timeout, || {
            self.child.try_wait().ok().flatten()
        });
        // The pipes reach EOF when the process is gone; read them to the end.
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        status
    }

    /// The exit status if pgoutbox has exited (without waiting).
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Send a signal by name (`TERM`, `INT`, `KILL`, `STOP`, `CONT`).
    pub fn signal(&self, name: &str) {
        run_ok(
            Command::new("kill")
                .arg(format!("-{name}"))
                .arg(self.child.id().to_string()),
        );
    }
}

impl Drop for Pgoutbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deterministic pseudo-random numbers (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

#[cfg(test)]
mod tests;
