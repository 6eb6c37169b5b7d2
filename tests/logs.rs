//! What the relay writes to stderr: colors only where wanted (`--color`, NO_COLOR),
//! and a broker outage reported once, then summarized, instead of a line per
//! librdkafka error.

use crate::support;

use std::process::Command;

use support::kafka::Broker;
use support::workload::{http_get, start_run};
use support::{state_home, wait_for, PgCluster, WAIT};

/// Run `pgoutbox <args>` on a pseudo-terminal (util-linux `script`), with `env`
/// added to a clean environment; returns everything it wrote (stdout and stderr
/// share the terminal).
fn on_a_terminal(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut line = String::from(env!("CARGO_BIN_EXE_pgoutbox"));
    for arg in args {
        line.push_str(&format!(" '{}'", arg.replace('\'', r"'\''")));
    }
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"]);
    for (key, _) in std::env::vars() {
        if key.starts_with("PGOUTBOX_") || key.starts_with("PG") || key == "NO_COLOR" {
            cmd.env_remove(key);
        }
    }
    cmd.env("HOME", "/nonexistent")
        .env("XDG_STATE_HOME", state_home())
        .env("TERM", "xterm");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .expect("util-linux `script` runs a command on a pseudo-terminal");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const ESC: char = '\u{1b}';

/// Regression (issue 13 item 7): NO_COLOR was ignored on a terminal, so every log
/// line carried ANSI escapes.
#[test]
fn no_color_and_color_never_keep_a_terminal_log_plain() {
    let db = PgCluster::shared().fresh_db();
    let url = db.url();
    let tail = ["tail", "--database-url", url.as_str(), "--limit", "0"];
    let logged = |text: &str| {
        assert!(text.contains("tail finished"), "{text}");
    };
    // The pseudo-terminal is a terminal: colors by default.
    let colored = on_a_terminal(&tail, &[]);
    logged(&colored);
    assert!(colored.contains(ESC), "{colored:?}");
    for env in [
        &[("NO_COLOR", "1")][..],
        &[("PGOUTBOX_COLOR", "never")][..],
        &[("TERM", "dumb")][..],
    ] {
        let plain = on_a_terminal(&tail, env);
        logged(&plain);
        assert!(!plain.contains(ESC), "{env:?}: {plain:?}");
    }
    let mut never = tail.to_vec();
    never.extend(["--color", "never"]);
    let plain = on_a_terminal(&never, &[]);
    logged(&plain);
    assert!(!plain.contains(ESC), "{plain:?}");
    // `always` colors even a pipe, and beats NO_COLOR.
    let mut always = tail.to_vec();
    always.extend(["--color", "always"]);
    let mut p = support::Pgoutbox::spawn_with_env(&always, &[("NO_COLOR", "1")]);
    assert!(p.wait_exit(WAIT).success());
    let piped = p.stderr();
    logged(&piped);
    assert!(piped.contains(ESC), "{piped:?}");
}

/// `pgoutbox_kafka_client_errors_total` of `relay`.
fn client_errors(relay: &support::Pgoutbox) -> u64 {
    let metrics = http_get(relay, "/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("pgoutbox_kafka_client_errors_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no kafka client error counter in:\n{metrics}"))
}

/// The relay's log lines about the brokers.
fn kafka_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("kafka client error") || l.contains("kafka brokers"))
        .collect()
}

/// Regression (issue 13 item 6): with the broker unreachable the relay wrote ~140
/// lines in 5 s (librdkafka's AllBrokersDown twice every 50 ms). Now hundreds of
/// client errors (counted in the metric) leave a handful of lines.
#[test]
fn an_unreachable_broker_is_logged_once_not_per_retry() {
    let db = PgCluster::shared().fresh_db();
    // Nothing listens on this port: every connection attempt is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let relay = start_run(&db, &format!("127.0.0.1:{port}"), &[]);
    wait_for("200 kafka client errors", WAIT * 2, || {
        (client_errors(&relay) >= 200).then_some(())
    });
    let stderr = relay.stderr();
    let lines = kafka_lines(&stderr);
    // The connection failure, its transport error, the outage; a summary a minute
    // if this machine is slow.
    assert!(
        lines.len() <= 6,
        "{} lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert_eq!(
        stderr.matches("kafka brokers unreachable").count(),
        1,
        "{stderr}"
    );
}

/// The outage ends with one line saying so, with the count of what was not logged.
#[test]
fn a_broker_outage_is_said_once_and_its_end_too() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start();
    let relay = start_run(&db, &broker.addr(), &[]);
    broker.stop();
    relay.wait_stderr("kafka brokers unreachable", WAIT);
    broker.resume();
    relay.wait_stderr("kafka brokers reachable again", WAIT);
    let stderr = relay.stderr();
    assert_eq!(
        stderr.matches("kafka brokers unreachable").count(),
        1,
        "{stderr}"
    );
    let back: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("kafka brokers reachable again"))
        .collect();
    assert_eq!(back.len(), 1, "{stderr}");
    assert!(back[0].contains("errors_suppressed="), "{}", back[0]);
    let lines = kafka_lines(&stderr);
    assert!(
        lines.len() <= 8,
        "{} lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
}
