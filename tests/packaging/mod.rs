//! Packaging checks that need no server: `docker-compose.yml`, the `Dockerfile` (and
//! `.dockerignore`), the systemd example in `deploy/` and the README agree with the CLI
//! (every `PGOUTBOX_*` name is a real environment twin of a flag) and with each other
//! (the relay's brokers are Kafka's advertised listener, stop timeouts outlast the
//! SIGTERM drain, the binary path is the same everywhere).
//!
//! There is no Docker engine on the build machines, so the files are parsed, not run.
//! `systemd-analyze verify` runs only in the `#[ignore]`d test in [`systemd`].
//!
//! # Layout
//! - this file: what every artifact is checked against — repository paths, the CLI's
//!   environment names and defaults, [`parse_as_cli`] (is this a configuration the
//!   binary accepts?), durations as systemd and Compose write them;
//! - [`compose`]: `docker-compose.yml` (parsed with `serde_yaml_ng`);
//! - [`dockerfile`]: the `Dockerfile` (parsed with `parse-dockerfile`);
//! - [`dockerignore`]: the `.dockerignore` matcher (patterns compiled with `globset`);
//! - [`kubernetes`]: `deploy/kubernetes/` (kustomize base; schemas checked with the
//!   `kubernetes-validate` PyPI package, PromQL parsed with `promql-parser`);
//! - [`systemd`]: `deploy/pgoutbox.service` (parsed with `systemd-unit-edit`) and
//!   `deploy/pgoutbox.env.example` (a small hand parser: systemd's environment-file
//!   rules are not dotenv's);
//! - [`names`]: every `PGOUTBOX_*` name in the packaging and the README.
//!
//! Nothing here uses `tests/support`: no server, no shared state between tests.

mod compose;
mod dockerfile;
mod dockerignore;
mod kubernetes;
mod names;
mod systemd;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use pgoutbox::cli::Cli;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Where the images and the unit install the binary.
const BINARY_PATH: &str = "/usr/local/bin/pgoutbox";

/// Every environment name the CLI reads, over all subcommands (nested ones too).
fn cli_env_names() -> BTreeSet<String> {
    fn walk(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        for arg in cmd.get_arguments() {
            if let Some(env) = arg.get_env() {
                out.insert(env.to_string_lossy().into_owned());
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(&built_cli(), &mut out);
    out
}

/// The CLI definition with global flags propagated into the subcommands.
fn built_cli() -> clap::Command {
    let mut cli = Cli::command();
    cli.build();
    cli
}

/// The subcommand `name` of the CLI (global flags included).
fn subcommand(name: &str) -> clap::Command {
    built_cli()
        .find_subcommand(name)
        .unwrap_or_else(|| panic!("the CLI has no subcommand {name:?}"))
        .clone()
}

/// The default of the flag whose environment twin is `env` in subcommand `sub`.
fn cli_default(sub: &str, env: &str) -> String {
    let cmd = subcommand(sub);
    let arg = arg_by_env(&cmd, env).unwrap_or_else(|| panic!("`{sub}` has no flag for {env}"));
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        defaults.len(),
        1,
        "{env}: one default expected, got {defaults:?}"
    );
    defaults.into_iter().next().unwrap()
}

fn arg_by_env<'a>(cmd: &'a clap::Command, env: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments()
        .find(|a| a.get_env().is_some_and(|e| e == env))
}

/// Checks that `pgoutbox <sub_args…>` with the `PGOUTBOX_*` variables of `env` is a
/// configuration the binary accepts, in two ways:
///
/// * every variable is turned into the flag whose env twin it is, and the command
///   line is parsed by the real CLI definition: each name must be read by that
///   subcommand and each value must pass the flag's value parser (env values go
///   through the same parsers and `value_delimiter` as flags; passing flags instead of
///   setting the process environment keeps the parallel tests independent);
/// * the built binary runs `setup --print-sql` with only the variables `setup` reads
///   (connection string, tables, publication, slot): it validates them as every
///   subcommand does and prints SQL without connecting.
fn parse_as_cli(sub_args: &[String], env: &BTreeMap<String, String>, origin: &str) {
    let sub = sub_args
        .first()
        .unwrap_or_else(|| panic!("{origin}: no subcommand"));
    let cmd = subcommand(sub);
    let mut argv: Vec<String> = vec!["pgoutbox".into()];
    argv.extend(sub_args.iter().cloned());
    for (name, value) in env.iter().filter(|(k, _)| k.starts_with("PGOUTBOX_")) {
        let arg = arg_by_env(&cmd, name).unwrap_or_else(|| {
            panic!("{origin}: {name} is not read by `pgoutbox {sub}` (no flag has that env twin)")
        });
        argv.extend(env_as_flag(arg, name, value, origin));
    }
    if let Err(e) = Cli::try_parse_from(&argv) {
        panic!("{origin}: `{}` does not parse:\n{e}", argv.join(" "));
    }
    setup_accepts(env, origin);
}

/// The command-line words that say what `name=value` says through the environment.
fn env_as_flag(arg: &clap::Arg, name: &str, value: &str, origin: &str) -> Vec<String> {
    let long = arg
        .get_long()
        .unwrap_or_else(|| panic!("{origin}: the flag for {name} has no long name"));
    match arg.get_action() {
        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse => {
            let on = matches!(
                value.to_ascii_lowercase().as_str(),
                "true" | "yes" | "on" | "1"
            );
            let off = matches!(
                value.to_ascii_lowercase().as_str(),
                "false" | "no" | "off" | "0" | ""
            );
            assert!(on || off, "{origin}: {name}={value:?} is not a boolean");
            if on == matches!(arg.get_action(), clap::ArgAction::SetTrue) {
                vec![format!("--{long}")]
            } else {
                Vec::new()
            }
        }
        _ => vec![format!("--{long}"), value.to_owned()],
    }
}

/// The built binary validates the variables of `env` that `setup` reads.
fn setup_accepts(env: &BTreeMap<String, String>, origin: &str) {
    let setup = subcommand("setup");
    let mut binary = std::process::Command::new(env!("CARGO_BIN_EXE_pgoutbox"));
    // No inherited PG*/PGOUTBOX_* variables, no HOME (no ~/.pgpass): only `env` counts.
    binary.env_clear().args(["setup", "--print-sql"]);
    for (name, value) in env {
        if arg_by_env(&setup, name).is_some() {
            binary.env(name, value);
        }
    }
    let out = binary.output().expect("run the pgoutbox binary");
    assert!(
        out.status.success(),
        "{origin}: `pgoutbox setup --print-sql` refuses these settings ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A duration as systemd or Compose writes it: bare seconds or humantime (`45s`, `1m30s`).
fn parse_duration(text: &str) -> Duration {
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Duration::from_secs(secs);
    }
    humantime::parse_duration(text).unwrap_or_else(|e| panic!("duration {text:?}: {e}"))
}
