//! `deploy/`: the systemd unit runs `pgoutbox run` as an unprivileged, hardened service
//! that restarts on failure and gives the SIGTERM drain time to finish; the environment
//! file next to it is a valid `run` configuration that keeps the password out.
//!
//! The unit is parsed by `systemd-unit-edit` (systemd.syntax(7): sections, repeated
//! keys, `\` continuations, `#`/`;` comments); [`unit_sections`] only flattens it. One
//! difference from systemd is known: a comment line inside a continued line, which
//! systemd skips, is a parse error here (loud, never a misread).
//!
//! The environment file keeps a small hand parser, [`env_file`]: systemd reads it by
//! its own rules (no `export`, a `#` after a value is part of the value), which the
//! dotenv crates do not follow.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use pgoutbox::pg::client::conninfo::ConnInfo;
use systemd_unit_edit::SystemdUnit;

use super::{cli_default, cli_env_names, parse_as_cli, parse_duration, read, BINARY_PATH};

/// Unit file: section → key → values in file order.
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// A unit file as systemd reads it. Keys may repeat; an empty assignment (`Key=`,
/// which resets a list in systemd) is kept as an empty value. A section given twice
/// is refused (systemd would merge them; here it is a mistake).
fn unit_sections(text: &str) -> Unit {
    let parsed = SystemdUnit::from_str(text).unwrap_or_else(|e| panic!("unit file: {e}"));
    let mut sections = Unit::new();
    for section in parsed.sections() {
        let number = section.line() + 1;
        let name = section
            .name()
            .unwrap_or_else(|| panic!("line {number}: section without a name"));
        assert!(
            !sections.contains_key(&name),
            "line {number}: section [{name}] twice"
        );
        let keys = sections.entry(name).or_default();
        // Comment and blank lines are entries without a key.
        for entry in section.entries() {
            let Some(key) = entry.key() else { continue };
            assert!(
                !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric()),
                "line {}: bad key {key:?}",
                entry.line() + 1
            );
            let value = entry.value().unwrap_or_default();
            keys.entry(key).or_default().push(value.trim().to_owned());
        }
    }
    sections
}

/// `KEY=value` lines of an environment file (comment lines skipped).
fn env_file(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("line {}: expected KEY=value, got {line:?}", number + 1));
        assert!(
            !value.contains(" #"),
            "line {}: systemd keeps `#…` after a value as part of it: {line:?}",
            number + 1
        );
        assert!(
            out.insert(key.trim().to_owned(), value.trim().to_owned())
                .is_none(),
            "line {}: {key} twice",
            number + 1
        );
    }
    out
}

fn unit() -> Unit {
    unit_sections(&read("deploy/pgoutbox.service"))
}

/// The single value of `key` in `[Service]`.
fn service_value(unit: &Unit, key: &str) -> String {
    let values = unit["Service"]
        .get(key)
        .unwrap_or_else(|| panic!("[Service] has no {key}="));
    assert_eq!(
        values.len(),
        1,
        "[Service] {key}= given {} times",
        values.len()
    );
    values[0].clone()
}

#[test]
fn systemd_unit_runs_the_relay_with_restart_and_a_drain_sized_stop() {
    let unit = unit();
    for section in ["Unit", "Service", "Install"] {
        assert!(unit.contains_key(section), "no [{section}] section");
    }
    for (key, value) in [
        ("Type", "simple"),
        ("ExecStart", "/usr/local/bin/pgoutbox run"),
        ("Restart", "on-failure"),
        ("RestartSec", "2"),
        ("KillSignal", "SIGTERM"),
        ("TimeoutStopSec", "45"),
    ] {
        assert_eq!(service_value(&unit, key), value, "[Service] {key}=");
    }
    // Exits a restart would meet again wait for an operator instead of looping.
    let operator: Vec<String> = pgoutbox::exit::Status::NEEDS_OPERATOR
        .iter()
        .map(|s| s.code().to_string())
        .collect();
    assert_eq!(
        service_value(&unit, "RestartPreventExitStatus"),
        operator.join(" "),
        "[Service] RestartPreventExitStatus="
    );
    let env_files: Vec<&str> = unit["Service"]["EnvironmentFile"]
        .iter()
        .map(|f| f.trim_start_matches('-'))
        .collect();
    assert!(
        env_files.contains(&"/etc/pgoutbox/pgoutbox.env"),
        "EnvironmentFile= {env_files:?}"
    );

    // A dedicated, unprivileged identity.
    let dynamic = unit["Service"].get("DynamicUser").map(|v| v[0].as_str());
    let user = unit["Service"].get("User").map(|v| v[0].as_str());
    assert!(
        dynamic == Some("yes") || user.is_some_and(|u| !matches!(u, "root" | "0")),
        "the unit needs DynamicUser=yes or a dedicated User="
    );

    // The stop timeout outlasts the drain (the env file may change the drain).
    let env = env_file(&read("deploy/pgoutbox.env.example"));
    let drain = parse_duration(
        &env.get("PGOUTBOX_DRAIN_TIMEOUT")
            .cloned()
            .unwrap_or_else(|| cli_default("run", "PGOUTBOX_DRAIN_TIMEOUT")),
    );
    let stop = parse_duration(&service_value(&unit, "TimeoutStopSec"));
    assert!(stop > drain, "TimeoutStopSec {stop:?} vs drain {drain:?}");

    // Same binary path as the container image.
    let exec = service_value(&unit, "ExecStart");
    let binary = exec
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches(['@', '-', ':', '+', '!']);
    assert_eq!(binary, BINARY_PATH);
}

#[test]
fn systemd_unit_is_hardened() {
    let unit = unit();
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
    ] {
        assert_eq!(service_value(&unit, key), value, "[Service] {key}=");
    }
    let families: BTreeSet<String> = service_value(&unit, "RestrictAddressFamilies")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let expected: BTreeSet<String> = ["AF_INET", "AF_INET6", "AF_UNIX"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(families, expected);
}

#[test]
fn env_example_is_a_valid_run_configuration_without_secrets() {
    let env = env_file(&read("deploy/pgoutbox.env.example"));
    for key in [
        "PGOUTBOX_DATABASE_URL",
        "PGOUTBOX_BROKERS",
        "PGOUTBOX_SLOT",
        "RUST_LOG",
    ] {
        assert!(
            env.contains_key(key),
            "deploy/pgoutbox.env.example lacks {key}"
        );
    }
    let known = cli_env_names();
    for key in env.keys() {
        assert!(
            known.contains(key) || key == "RUST_LOG",
            "deploy/pgoutbox.env.example sets {key}, which pgoutbox does not read"
        );
    }
    // The password stays out of this (world-readable) file.
    let info = ConnInfo::parse_with_env(&env["PGOUTBOX_DATABASE_URL"], &|_| None)
        .expect("PGOUTBOX_DATABASE_URL parses");
    assert!(
        info.password.is_none(),
        "the example URL carries a password"
    );

    // The unit's command line with these settings is a valid `run`.
    let unit = unit();
    let exec = service_value(&unit, "ExecStart");
    let args: Vec<String> = exec.split_whitespace().skip(1).map(str::to_owned).collect();
    parse_as_cli(
        &args,
        &env,
        "deploy/pgoutbox.service + pgoutbox.env.example",
    );
}

#[test]
fn unit_parser_reads_continuations_and_repeats() {
    let unit = unit_sections(
        "# c\n[Unit]\nDescription=x\n\n[Service]\nExecStart=/bin/a \\\n  b\nEnvironmentFile=/a\nEnvironmentFile=-/b\nCapabilityBoundingSet=\n",
    );
    // systemd joins a continued line with spaces and splits ExecStart= into words;
    // the words are what counts (the parser keeps the spaces as written).
    let exec: Vec<&str> = unit["Service"]["ExecStart"]
        .iter()
        .flat_map(|v| v.split_whitespace())
        .collect();
    assert_eq!(unit["Service"]["ExecStart"].len(), 1);
    assert_eq!(exec, vec!["/bin/a", "b"]);
    assert_eq!(unit["Service"]["EnvironmentFile"], vec!["/a", "-/b"]);
    assert_eq!(unit["Service"]["CapabilityBoundingSet"], vec![""]);
}

#[test]
#[should_panic(expected = "section [Service] twice")]
fn unit_parser_refuses_a_repeated_section() {
    unit_sections("[Service]\nType=simple\n[Service]\nRestart=on-failure\n");
}

/// The known difference from systemd (see the module doc), kept loud.
#[test]
#[should_panic(expected = "unit file")]
fn unit_parser_refuses_a_comment_inside_a_continuation() {
    unit_sections("[Service]\nExecStart=/bin/a \\\n# skipped by systemd\nb\n");
}

#[test]
fn env_file_parser_reads_assignments() {
    let env = env_file("# settings\n; also a comment\n\n  PGOUTBOX_SLOT = outbox  \nRUST_LOG=info,pgoutbox=debug\nEMPTY=\n");
    let expected: BTreeMap<String, String> = [
        ("PGOUTBOX_SLOT", "outbox"),
        ("RUST_LOG", "info,pgoutbox=debug"),
        ("EMPTY", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(env, expected);
}

#[test]
#[should_panic(expected = "line 1: systemd keeps `#…` after a value as part of it")]
fn env_file_parser_refuses_a_trailing_comment() {
    env_file("PGOUTBOX_SLOT=outbox # the slot\n");
}

#[test]
#[should_panic(expected = "line 2: PGOUTBOX_SLOT twice")]
fn env_file_parser_refuses_a_repeated_key() {
    env_file("PGOUTBOX_SLOT=a\nPGOUTBOX_SLOT=b\n");
}

/// `systemd-analyze verify` on the unit as shipped and with the commented credential
/// alternative enabled, with ExecStart pointed at the freshly built binary (verify
/// checks that it exists). Opt-in (`cargo test --test main packaging:: -- --ignored`): it
/// depends on the host's systemd, and does nothing where `systemd-analyze` is absent.
#[test]
#[ignore = "needs systemd-analyze on the host"]
fn systemd_analyze_verify() {
    let found = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("systemd-analyze not found; nothing verified");
        return;
    }
    let shipped = read("deploy/pgoutbox.service");
    let with_credential = shipped
        .replace("#   LoadCredential=", "LoadCredential=")
        .replace("#   Environment=PGPASSFILE=", "Environment=PGPASSFILE=");
    assert_ne!(
        shipped, with_credential,
        "the credential alternative is gone from the unit"
    );

    let dir = std::env::temp_dir().join(format!("pgoutbox-packaging-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (variant, text) in [("shipped", &shipped), ("credential", &with_credential)] {
        let unit_path = dir.join("pgoutbox.service");
        std::fs::write(
            &unit_path,
            text.replace(BINARY_PATH, env!("CARGO_BIN_EXE_pgoutbox")),
        )
        .unwrap();
        let out = std::process::Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit_path)
            .output()
            .expect("run systemd-analyze verify");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Warnings (unknown keys, bad values) keep exit status 0; count those about our unit.
        let ours: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("pgoutbox.service"))
            .collect();
        assert!(
            out.status.success() && ours.is_empty(),
            "{variant}: systemd-analyze verify: {}\n{stderr}",
            out.status
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
