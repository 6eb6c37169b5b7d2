//! A PostgreSQL 17 primary with a streaming physical standby that synchronizes
//! failover slots, for the failover and `target_session_attrs` tests.
//!
//! ```text
//!  primary (17) ── physical slot PHYSICAL_SLOT ──▶ standby (17): standby.signal,
//!   synchronized_standby_slots = PHYSICAL_SLOT     primary_conninfo (with dbname),
//!   (logical walsenders never send what the        primary_slot_name, hot_standby_feedback,
//!    standby has not flushed)                      sync_replication_slots = on
//! ```
//!
//! The server binaries come from `scripts/install-postgres.sh 17` (cached; CI runs it
//! through [`super::pg17_bindir`]). That build has no `pg_basebackup`, so the standby is a
//! copy of the primary's data directory taken while the primary is stopped cleanly —
//! the same files a base backup would give, without the backup machinery. Both
//! servers are stopped and deleted when the test process exits, like any
//! [`PgCluster`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::{
    as_postgres, free_port, run_ok, spawn_watchdog, wait_for, write_as_postgres, ClusterOptions,
    PgCluster, WAIT,
};

/// The standby's physical slot on the primary (also its `application_name`).
pub const PHYSICAL_SLOT: &str = "failover_standby";

/// The bindir of PostgreSQL `major` (13–18) from `scripts/install-postgres.sh`, which
/// installs the pinned build on first use and then answers from its cache.
pub fn pg_bindir(major: u32) -> PathBuf {
    static DIRS: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());
    let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, dir)) = dirs.iter().find(|(m, _)| *m == major) {
        return dir.clone();
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install-postgres.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(major.to_string())
        .output()
        .expect("run scripts/install-postgres.sh");
    assert!(
        out.status.success(),
        "scripts/install-postgres.sh {major} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let dir = PathBuf::from(text.lines().last().unwrap_or_default().trim());
    dirs.push((major, dir.clone()));
    dir
}

/// A running primary and its standby.
pub struct Pair {
    pub primary: PgCluster,
    pub standby: PgCluster,
}

impl Pair {
    /// Start a PostgreSQL 17 primary and a standby streaming from it.
    pub fn start() -> Pair {
        let primary = PgCluster::start(ClusterOptions {
            bindir: Some(super::pg17_bindir()),
            ..ClusterOptions::default()
        });
        primary.psql(
            "postgres",
            &format!("SELECT pg_create_physical_replication_slot('{PHYSICAL_SLOT}')"),
        );
        primary.psql(
            "postgres",
            &format!("ALTER SYSTEM SET synchronized_standby_slots = '{PHYSICAL_SLOT}'"),
        );
        primary.stop("fast");
        let standby = copy_as_standby(&primary);
        primary.start_again();
        wait_for("the standby to stream from the primary", WAIT * 2, || {
            let state = primary.psql(
                "postgres",
                &format!(
                    "SELECT state FROM pg_stat_replication WHERE application_name = '{PHYSICAL_SLOT}'"
                ),
            );
            (state == "streaming").then_some(())
        });
        Pair { primary, standby }
    }

    /// Both servers in one URL, the primary first, as an HA client writes it.
    pub fn url(&self, db: &str, target_session_attrs: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?sslmode=disable\
             &target_session_attrs={target_session_attrs}&connect_timeout=2",
            self.primary.port, self.standby.port
        )
    }

    /// Wait until the logical slot `slot` is synchronized to the standby and
    /// persisted there (`synced`, not `temporary`), at or past `lsn` if given.
    pub fn wait_slot_synced(&self, slot: &str) {
        wait_for(
            &format!("slot {slot} synchronized to the standby"),
            WAIT * 3,
            || {
                // A running-xacts record lets the standby's copy reach a consistent
                // point sooner (the slot sync worker waits for one).
                self.primary
                    .psql("postgres", "SELECT pg_log_standby_snapshot()");
                let row = self.standby.psql(
                    "postgres",
                    &format!(
                        "SELECT synced AND NOT temporary FROM pg_replication_slots \
                         WHERE slot_name = '{slot}'"
                    ),
                );
                (row == "t").then_some(())
            },
        );
    }

    /// `pg_ctl promote` the standby and wait until it accepts writes.
    pub fn promote(&self) {
        run_ok(
            as_postgres(&self.standby.bindir.join("pg_ctl"))
                .arg("-D")
                .arg(&self.standby.datadir)
                .args(["-w", "-t", "120", "promote"]),
        );
        wait_for("the promoted standby to accept writes", WAIT, || {
            let ro = self.standby.psql("postgres", "SELECT pg_is_in_recovery()");
            (ro == "f").then_some(())
        });
    }
}

/// A standby from the stopped `primary`'s data directory: its own port and socket
/// directory, no copied slots, and the settings of the module doc.
fn copy_as_standby(primary: &PgCluster) -> PgCluster {
    let out = Command::new("mktemp")
        .args(["-d", "/tmp/pgoutbox-test-pg-standby.XXXXXX"])
        .output()
        .expect("mktemp");
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let datadir = root.join("data");
    run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(&primary.datadir)
            .arg(&datadir),
    );
    run_ok(
        Command::new("chown")
            .arg("-R")
            .arg("--reference")
            .arg(&primary.datadir)
            .arg(&root),
    );
    // The primary's own slots stay with it: a copied physical slot would hold WAL
    // on the standby for nothing once it is promoted.
    remove_slots(&datadir);
    let port = free_port();
    let conf = standby_conf(primary, port, &root);
    let auto = datadir.join("postgresql.auto.conf");
    let mut contents = std::fs::read(&auto).expect("the copied postgresql.auto.conf");
    contents.extend_from_slice(conf.as_bytes());
    write_as_postgres(&auto, &contents);
    write_as_postgres(&datadir.join("standby.signal"), b"");
    run_ok(
        as_postgres(&primary.bindir.join("pg_ctl"))
            .arg("-D")
            .arg(&datadir)
            .arg("-l")
            .arg(root.join("postgres.log"))
            .args(["-w", "-t", "120", "start"]),
    );
    spawn_watchdog(&primary.bindir, &datadir, &root);
    PgCluster {
        port,
        datadir,
        bindir: primary.bindir.clone(),
    }
}

/// The settings appended to the copy (later lines win over the primary's).
fn standby_conf(primary: &PgCluster, port: u16, root: &Path) -> String {
    [
        format!("port = {port}"),
        format!("unix_socket_directories = '{}'", root.display()),
        format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres dbname=postgres \
             application_name={PHYSICAL_SLOT}'",
            primary.port
        ),
        format!("primary_slot_name = '{PHYSICAL_SLOT}'"),
        "hot_standby = on".into(),
        "hot_standby_feedback = on".into(),
        "sync_replication_slots = on".into(),
        // Only the primary waits for the standby; once promoted, this server has no
        // standby of its own to wait for.
        "synchronized_standby_slots = ''".into(),
    ]
    .map(|line| line + "\n")
    .concat()
}

fn remove_slots(datadir: &Path) {
    let slots = datadir.join("pg_replslot");
    for entry in std::fs::read_dir(&slots).expect("pg_replslot").flatten() {
        std::fs::remove_dir_all(entry.path()).expect("remove a copied slot");
    }
}
