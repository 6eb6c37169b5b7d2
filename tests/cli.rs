//! The binary's operator surface: exit statuses, errors said once, closed pipes,
//! JSON logs, completions, man pages.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::mpsc::TryRecvError;

use crate::support;

use support::kafka::Broker;
use support::workload::start_run;
use support::{wait_for, PgCluster, Pgoutbox, WAIT};

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

/// `pgoutbox <args>` run to its end: (exit code, stdout, stderr).
fn exit_of(args: &[&str]) -> (Option<i32>, String, String) {
    let mut p = Pgoutbox::spawn(args);
    let code = p.wait_exit(WAIT).code();
    (code, p.stdout_so_far().join("\n"), p.stderr())
}

/// The `error:` line of `stderr`, checked to say each cause once: no
/// `: `-separated clause of it comes back later in the line.
fn error_said_once(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line:\n{stderr}"));
    let clauses: Vec<&str> = line["error: ".len()..].split(": ").collect();
    for (i, clause) in clauses.iter().enumerate() {
        let rest = clauses[i + 1..].join(": ");
        assert!(
            !rest.contains(clause),
            "{clause:?} is printed twice in:\n{line}"
        );
    }
    line.to_owned()
}

#[test]
fn wrapped_errors_say_each_cause_once() {
    let refused = "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=5";
    let file = std::env::temp_dir().join(format!("pgoutbox-no-such-{}", std::process::id()));
    let file = file.display().to_string();
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["status", "--database-url", refused],
            1,
            "cannot connect to postgres://u@127.0.0.1:1/db",
        ),
        (
            &["tail", "--database-url", refused],
            1,
            "tail failed: cannot connect to",
        ),
        (
            &["status", "--database-url", "postgres://u@[bad/db"],
            2,
            "invalid --database-url / PGOUTBOX_DATABASE_URL: invalid connection string",
        ),
        (
            &[
                "status",
                "--database-url",
                refused,
                "--database-password-file",
                &file,
            ],
            2,
            "cannot read --database-password-file",
        ),
        (&["--config", &file, "status"], 2, "cannot read config file"),
    ];
    for (args, code, says) in cases {
        let (got, _, err) = exit_of(args);
        let line = error_said_once(&err);
        assert!(line.contains(says), "{args:?}: {line}");
        assert_eq!(got, Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line\n{err}");
    }
}

#[test]
fn exit_statuses_follow_one_documented_scheme() {
    // Usage and configuration errors: 2, whoever finds them (clap or pgoutbox).
    for args in [
        &["run", "--no-such-flag"][..],
        &["run", "--database-url", "postgres://u@h/db"],
        &["teardown", "--database-url", "postgres://u@h/db"],
        &["status", "--slot", "Not-A-Slot"],
        &["man", "no-such-command"],
    ] {
        let (code, _, err) = exit_of(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
    }
    let db = PgCluster::shared().fresh_db();
    let url = db.url();
    let slot = db.name.clone();
    // A check failure that `run` cannot fix either: 3.
    let (code, out, err) = exit_of(&["check", "--database-url", &url, "--table", "public.no_such"]);
    assert_eq!(code, Some(3), "{out}\n{err}");
    // A slot that does not exist: 3, and the output still says so.
    let (code, out, err) = exit_of(&["status", "--database-url", &url, "--slot", &slot]);
    assert_eq!(code, Some(3), "{out}\n{err}");
    assert!(out.contains("does not exist"), "{out}");
    assert!(
        err.contains(&format!("replication slot {slot:?} does not exist; fix:")),
        "{err}"
    );
    let (code, _, err) = exit_of(&["setup", "--database-url", &url, "--slot", &slot]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = exit_of(&["status", "--database-url", &url, "--slot", &slot]);
    assert_eq!(code, Some(0), "{out}\n{err}");
}

#[test]
fn help_and_readme_document_the_exit_statuses() {
    let (code, help, _) = exit_of(&["--help"]);
    assert_eq!(code, Some(0));
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    for status in pgoutbox::exit::Status::ALL {
        let line = format!("{:>3}  {}", status.code(), status.meaning());
        assert!(help.contains(&line), "--help lacks {line:?}:\n{help}");
        assert!(readme.contains(&line), "README.md lacks {line:?}");
    }
}

/// A stdout whose reader is already gone: every write fails with EPIPE, the way
/// `pgoutbox … | head` ends for the writer, without a race against `head`.
fn gone_reader() -> (UnixStream, Stdio) {
    let (reader, writer) = UnixStream::pair().expect("socketpair");
    (reader, Stdio::from(std::os::fd::OwnedFd::from(writer)))
}

fn assert_quiet_sigpipe_exit(what: &str, output: &std::process::Output) {
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(!err.contains("error:"), "{what}: {err}");
    assert_eq!(output.status.code(), Some(141), "{what}: {err}");
}

#[test]
fn a_closed_stdout_ends_one_shot_commands_quietly() {
    let json = std::env::temp_dir().join(format!("pgoutbox-pipe-{}.json", std::process::id()));
    std::fs::write(
        &json,
        r#"{"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "db", "database.port": "5432", "database.user": "relay",
            "database.dbname": "shop", "topic.prefix": "shop", "plugin.name": "pgoutput",
            "table.include.list": "public.outbox", "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter"}"#,
    )
    .unwrap();
    let json = json.display().to_string();
    for args in [
        &["completions", "bash"][..],
        &["man"],
        &["config", "import-debezium", &json],
        &["config", "show", "--brokers", "k:9092"],
        &["setup", "--print-sql"],
    ] {
        let (reader, stdout) = gone_reader();
        drop(reader);
        let output = Pgoutbox::command(args, &[])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .output()
            .expect("run pgoutbox");
        assert_quiet_sigpipe_exit(&format!("{args:?}"), &output);
    }
}

#[test]
fn status_watch_ends_quietly_when_its_reader_leaves() {
    let db = PgCluster::shared().fresh_db();
    let url = db.url();
    let (reader, stdout) = gone_reader();
    let mut child = Pgoutbox::command(
        &[
            "status",
            "--database-url",
            &url,
            "--slot",
            &db.name,
            "--watch",
            "1",
        ],
        &[],
    )
    .stdin(Stdio::null())
    .stdout(stdout)
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn pgoutbox");
    // Read the first refresh, then leave like `head -1` does.
    let mut first = String::new();
    BufReader::new(&reader).read_line(&mut first).unwrap();
    assert!(first.contains(&db.name), "{first}");
    drop(reader);
    let exited = support::poll_for(WAIT, std::time::Duration::from_millis(50), || {
        child.try_wait().expect("try_wait")
    });
    if exited.is_none() {
        let _ = child.kill();
        panic!("status --watch still runs {WAIT:?} after its reader left");
    }
    let output = child.wait_with_output().expect("pgoutbox exits");
    assert_quiet_sigpipe_exit("status --watch", &output);
}

/// Every stderr line of a `--log-format json` process is a JSON object.
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect()
}

#[test]
fn json_logs_end_with_a_json_error_and_carry_numbers() {
    // An error found once logging runs (no brokers): the last line is JSON too.
    let (code, _, err) = exit_of(&[
        "run",
        "--log-format",
        "json",
        "--database-url",
        "postgres://u@127.0.0.1:1/db",
    ]);
    assert_eq!(code, Some(2), "{err}");
    let lines = json_lines(&err);
    let last = lines.last().expect("an error line");
    assert_eq!(last["level"], "ERROR", "{err}");
    assert_eq!(last["exit_code"], 2, "{err}");
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("no Kafka brokers given; fix:")),
        "{err}"
    );

    // The periodic progress line: latencies are numbers, never `Some(…)`.
    let db = PgCluster::shared().fresh_db();
    let relay = start_run(&db, &Broker::shared().addr(), &["--log-format", "json"]);
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('order', '1', 'Created', '{}')",
    );
    let progress = wait_for("a progress line after the first ack", WAIT, || {
        json_lines(&relay.stderr())
            .into_iter()
            .find(|l| l["message"] == "progress" && l["acked"].as_u64() >= Some(1))
    });
    for field in [
        "latency_p50_ms",
        "latency_p99_ms",
        "in_kafka_p50_ms",
        "in_kafka_p99_ms",
    ] {
        assert!(progress[field].is_f64(), "{field}: {progress}");
    }
    assert!(!progress.to_string().contains("Some("), "{progress}");
}

/// `man` listed pgoutbox-run(1) … in SEE ALSO-like sections while no such page
/// existed: now `man --out-dir` writes every page a page refers to, and `man run`
/// prints one.
#[test]
fn every_man_page_a_page_refers_to_exists() {
    let dir = support::temp_dir("man");
    let dir_arg = dir.display().to_string();
    let (code, _, err) = exit_of(&["man", "--out-dir", &dir_arg]);
    assert_eq!(code, Some(0), "{err}");
    let pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(pages.contains(&"pgoutbox.1".to_owned()), "{pages:?}");
    let reference = regex::Regex::new(r"(pgoutbox(?:\\-[a-z]+)+)\(1\)").unwrap();
    let mut referenced = 0;
    for page in &pages {
        let roff = std::fs::read_to_string(dir.join(page)).unwrap();
        for cap in reference.captures_iter(&roff) {
            let name = cap[1].replace("\\-", "-");
            assert!(
                pages.contains(&format!("{name}.1")),
                "{page} refers to {name}(1), which was not written: {pages:?}"
            );
            referenced += 1;
        }
    }
    assert!(referenced >= 8, "the top page lists the subcommands");
    assert!(!pages.iter().any(|p| p.contains("help")), "{pages:?}");
    let (code, out, err) = exit_of(&["man", "config", "show"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(".TH pgoutbox-config-show 1"), "{out}");
}

/// Help lines ran to 400 characters: wrapped at the terminal width, 100 at most.
#[test]
fn help_is_wrapped_to_100_columns() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["tail", "--help"],
        &["check", "--help"],
        &["config", "show", "--help"],
    ] {
        let (code, out, _) = exit_of(args);
        assert_eq!(code, Some(0), "{args:?}");
        for line in out.lines() {
            assert!(
                line.chars().count() <= 100,
                "{args:?}: {} characters: {line}",
                line.chars().count()
            );
        }
    }
}

/// `pgoutbox tail | head -1`: the event after the reader left ends tail quietly.
#[test]
fn tail_ends_quietly_when_its_reader_leaves() {
    let db = PgCluster::shared().fresh_db();
    let url = db.url();
    let (reader, stdout) = gone_reader();
    let mut child = Pgoutbox::command(&["tail", "--database-url", &url], &[])
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pgoutbox");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    wait_for("tail to start", WAIT, || {
        log.extend(lines.try_iter().map(|l| l + "\n"));
        log.contains("tailing outbox").then_some(())
    });
    let insert = "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
                  VALUES ('order', '1', 'Created', '{}')";
    db.psql(insert);
    let mut first = String::new();
    BufReader::new(&reader).read_line(&mut first).unwrap();
    assert!(first.contains("Created"), "{first}");
    drop(reader);
    db.psql(insert);
    let status = wait_for("tail to exit", WAIT, || child.try_wait().ok().flatten());
    // Everything tail wrote: its stderr up to EOF (the reader thread then ends and
    // the channel disconnects).
    wait_for("the end of tail's stderr", WAIT, || loop {
        match lines.try_recv() {
            Ok(line) => log.extend([line, "\n".into()]),
            Err(TryRecvError::Empty) => break None,
            Err(TryRecvError::Disconnected) => break Some(()),
        }
    });
    assert!(
        !log.contains("panicked") && !log.contains("error:"),
        "{log}"
    );
    assert_eq!(status.code(), Some(141), "{log}");
}
