//! The binary's operator surface: `check` exit codes, JSON logs, completions, man page.

use crate::support;

use support::{PgCluster, Pgoutbox, WAIT};

fn run_to_end(args: &[&str]) -> (bool, String, String) {
    let mut p = Pgoutbox::spawn(args);
    let ok = p.wait_exit(WAIT).success();
    (ok, p.stdout_so_far().join("\n"), p.stderr())
}

#[test]
fn check_exits_zero_on_a_correct_setup_and_non_zero_naming_the_fix() {
    let db = PgCluster::shared().fresh_db();
    let url = db.url();
    let slot = db.name.clone();
    // No publication yet, but `run` creates it (the role owns the table): a note, not
    // a failure (issue 13 item 10).
    let (ok, out, err) = run_to_end(&["check", "--database-url", &url, "--slot", &slot]);
    assert!(ok, "no publication yet, run creates it: {out}\n{err}");
    assert!(
        out.contains("will create it") && !out.contains('✘'),
        "{out}"
    );
    // A missing table is nothing `run` can fix.
    let (ok, out, err) = run_to_end(&[
        "check",
        "--database-url",
        &url,
        "--slot",
        &slot,
        "--table",
        "public.nope",
    ]);
    assert!(!ok, "missing table: {out}\n{err}");
    assert!(
        out.contains("✘ table: public.nope = missing") && out.contains("sql/outbox.sql"),
        "{out}"
    );
    let (ok, _, err) = run_to_end(&["setup", "--database-url", &url, "--slot", &slot]);
    assert!(ok, "{err}");
    let (ok, out, err) = run_to_end(&["check", "--database-url", &url, "--slot", &slot, "--json"]);
    assert!(ok, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("check --json prints JSON");
    assert_eq!(report["ok"], true, "{out}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let mut p = Pgoutbox::spawn(&[
        "run",
        "--log-format",
        "json",
        "--database-url",
        "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=2",
        "--brokers",
        "127.0.0.1:1",
        "--http-addr",
        "off",
    ]);
    p.wait_stderr("cannot reach PostgreSQL", WAIT);
    p.signal("TERM");
    assert!(
        p.wait_exit(WAIT).success(),
        "SIGTERM while retrying exits 0"
    );
    let err = p.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("cannot reach PostgreSQL"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["level"], "WARN", "{line}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("127.0.0.1:1"),
        "{line}"
    );
}

#[test]
fn completions_and_man_page_come_from_the_cli_definition() {
    let (ok, out, _) = run_to_end(&["completions", "bash"]);
    assert!(
        ok && out.contains("pgoutbox") && out.contains("complete"),
        "{out}"
    );
    let (ok, out, _) = run_to_end(&["man"]);
    assert!(ok && out.contains(".TH pgoutbox"), "{out}");
}
