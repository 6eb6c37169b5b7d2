//! What the relay writes to stderr: colors only where wanted (`--color`, NO_COLOR),
//! and a broker outage reported once, then summarized, instead of a line per
//! librdkafka error.

use crate::support;

use std::process::Command;

use support::{state_home, PgCluster, WAIT};

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
