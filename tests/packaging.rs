//! Packaging checks that need no server: `docker-compose.yml`, the `Dockerfile`, the
//! systemd example in `deploy/` and the README agree with the CLI (every `PGOUTBOX_*`
//! name is a real environment twin of a flag) and with each other (the relay's brokers
//! are Kafka's advertised listener, stop timeouts outlast the SIGTERM drain, the binary
//! path is the same everywhere).
//!
//! There is no Docker engine on the build machines, so the files are parsed, not run.
//! `systemd-analyze verify` runs only in the `#[ignore]`d test at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use pgoutbox::cli::Cli;
use pgoutbox::pg::conninfo::{ConnInfo, Host};
use serde_yaml_ng::Value;

// ---------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------

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

/// `PGOUTBOX_[A-Z0-9_]+` words in `text`. Placeholders such as `PGOUTBOX_<NAME>` or
/// `PGOUTBOX_*` (nothing name-like after the prefix) are not names and are skipped.
fn pgoutbox_names(text: &str) -> BTreeSet<String> {
    const PREFIX: &str = "PGOUTBOX_";
    let bytes = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut from = 0;
    while let Some(pos) = text[from..].find(PREFIX) {
        let start = from + pos;
        let mut end = start + PREFIX.len();
        from = end;
        let word_start = start == 0 || {
            let prev = bytes[start - 1];
            !(prev.is_ascii_alphanumeric() || prev == b'_')
        };
        while end < bytes.len()
            && (bytes[end].is_ascii_uppercase()
                || bytes[end].is_ascii_digit()
                || bytes[end] == b'_')
        {
            end += 1;
        }
        let name = text[start..end].trim_end_matches('_');
        if word_start && name.len() > PREFIX.len() {
            out.insert(name.to_owned());
        }
    }
    out
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
                    argv.push(format!("--{long}"));
                }
            }
            _ => {
                argv.push(format!("--{long}"));
                argv.push(value.clone());
            }
        }
    }
    if let Err(e) = Cli::try_parse_from(&argv) {
        panic!("{origin}: `{}` does not parse:\n{e}", argv.join(" "));
    }

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

// ---------------------------------------------------------------------------------
// docker-compose.yml
// ---------------------------------------------------------------------------------

fn compose() -> Value {
    serde_yaml_ng::from_str(&read("docker-compose.yml")).expect("docker-compose.yml is valid YAML")
}

fn service<'a>(compose: &'a Value, name: &str) -> &'a Value {
    compose
        .get("services")
        .and_then(|s| s.get(name))
        .unwrap_or_else(|| panic!("docker-compose.yml has no service {name:?}"))
}

/// A scalar as Compose reads it (numbers and booleans in `environment` are strings to it).
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => panic!("expected a scalar, got {other:?}"),
    }
}

/// `environment:` in map form or list form (`- KEY=value`).
fn environment(service: &Value) -> BTreeMap<String, String> {
    match service.get("environment") {
        None => BTreeMap::new(),
        Some(Value::Mapping(m)) => m.iter().map(|(k, v)| (scalar(k), scalar(v))).collect(),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| {
                let item = scalar(item);
                let (k, v) = item.split_once('=').unwrap_or((item.as_str(), ""));
                (k.to_owned(), v.to_owned())
            })
            .collect(),
        Some(other) => panic!("environment must be a map or a list, got {other:?}"),
    }
}

/// `command:` in list form or string form, as words.
fn command_words(service: &Value) -> Vec<String> {
    match service.get("command") {
        None => Vec::new(),
        Some(Value::Sequence(items)) => items.iter().map(scalar).collect(),
        Some(v) => scalar(v).split_whitespace().map(str::to_owned).collect(),
    }
}

/// Image name without registry-less tag: `apache/kafka:3.9.0` → `apache/kafka`.
fn image_name(service: &Value) -> String {
    let image = scalar(service.get("image").expect("service has an image"));
    let image = image.split('@').next().unwrap();
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name.to_owned(),
        _ => image.to_owned(),
    }
}

#[test]
fn compose_postgres_has_logical_wal_and_the_outbox_table() {
    let compose = compose();
    let pg = service(&compose, "postgres");
    let name = image_name(pg);
    assert!(
        name == "postgres" || name.ends_with("/postgres"),
        "postgres service runs image {name:?}, expected the postgres image"
    );
    let command = command_words(pg).join(" ");
    assert!(
        command.contains("wal_level=logical"),
        "postgres command must set wal_level=logical, is {command:?}"
    );

    // The init script: ./sql/outbox.sql mounted into /docker-entrypoint-initdb.d/ as *.sql
    // (the image's entrypoint only runs *.sql, *.sql.gz and *.sh from there).
    let volumes = pg
        .get("volumes")
        .and_then(Value::as_sequence)
        .expect("postgres service has volumes");
    let mounts: Vec<(String, String)> = volumes
        .iter()
        .map(|v| match v {
            Value::Mapping(_) => (
                scalar(v.get("source").expect("long-form volume has a source")),
                scalar(v.get("target").expect("long-form volume has a target")),
            ),
            v => {
                let s = scalar(v);
                let mut parts = s.splitn(3, ':');
                (
                    parts.next().unwrap_or_default().to_owned(),
                    parts.next().unwrap_or_default().to_owned(),
                )
            }
        })
        .collect();
    let (source, target) = mounts
        .iter()
        .find(|(source, _)| source.trim_start_matches("./") == "sql/outbox.sql")
        .unwrap_or_else(|| panic!("./sql/outbox.sql is not mounted: {mounts:?}"));
    assert!(
        source.starts_with("./"),
        "{source}: a bind mount needs a ./ path"
    );
    assert!(repo().join("sql/outbox.sql").is_file());
    assert!(
        target.starts_with("/docker-entrypoint-initdb.d/") && target.ends_with(".sql"),
        "sql/outbox.sql is mounted at {target:?}, not as a *.sql in /docker-entrypoint-initdb.d/"
    );
    // The table the relay reads by default is the one the init script creates.
    let sql = read("sql/outbox.sql");
    let relay_env = environment(service(&compose, "pgoutbox"));
    let table = relay_env
        .get("PGOUTBOX_TABLE")
        .cloned()
        .unwrap_or_else(|| cli_default("run", "PGOUTBOX_TABLE"));
    for table in table.split(',') {
        assert!(
            sql.contains(&format!("CREATE TABLE IF NOT EXISTS {table} "))
                || sql.contains(&format!("CREATE TABLE {table} ")),
            "the relay reads {table}, which sql/outbox.sql does not create"
        );
    }
}

#[test]
fn compose_kafka_is_kraft_without_zookeeper() {
    let compose = compose();
    let kafka = service(&compose, "kafka");
    assert_eq!(image_name(kafka), "apache/kafka");
    let env = environment(kafka);
    let roles: BTreeSet<&str> = env
        .get("KAFKA_PROCESS_ROLES")
        .expect("KAFKA_PROCESS_ROLES is set (KRaft)")
        .split(',')
        .map(str::trim)
        .collect();
    assert!(
        roles.contains("broker") && roles.contains("controller"),
        "a single KRaft node must be broker and controller, roles are {roles:?}"
    );
    assert!(env.contains_key("KAFKA_CONTROLLER_QUORUM_VOTERS"));
    assert!(env.contains_key("KAFKA_CONTROLLER_LISTENER_NAMES"));

    // No ZooKeeper service, image or setting anywhere (comments may still mention it).
    let services = compose
        .get("services")
        .and_then(Value::as_mapping)
        .expect("services");
    for (name, svc) in services {
        let name = scalar(name);
        let image = svc.get("image").map(scalar).unwrap_or_default();
        let env = environment(svc);
        let settings = env.iter().map(|(k, v)| format!("{k}={v}"));
        for text in [name.clone(), image].into_iter().chain(settings) {
            assert!(
                !text.to_lowercase().contains("zookeeper"),
                "service {name}: {text:?}; the demo is KRaft-only"
            );
        }
    }
}

#[test]
fn compose_pgoutbox_builds_here_and_waits_for_healthy_dependencies() {
    let compose = compose();
    let relay = service(&compose, "pgoutbox");
    let build = relay.get("build").expect("pgoutbox service has build:");
    let context = match build {
        Value::Mapping(_) => build
            .get("context")
            .map(scalar)
            .unwrap_or_else(|| ".".into()),
        v => scalar(v),
    };
    assert!(
        context == "." || context == "./",
        "build context {context:?}, expected ."
    );
    if let Some(file) = build.get("dockerfile") {
        assert_eq!(scalar(file), "Dockerfile");
    }
    assert_eq!(
        command_words(relay).first().map(String::as_str),
        Some("run")
    );

    let depends = relay
        .get("depends_on")
        .and_then(Value::as_mapping)
        .expect("pgoutbox depends_on in long form (with conditions)");
    for dep in ["postgres", "kafka"] {
        let condition = depends
            .get(dep)
            .and_then(|d| d.get("condition"))
            .map(scalar)
            .unwrap_or_else(|| panic!("pgoutbox does not depend on {dep} with a condition"));
        assert_eq!(condition, "service_healthy", "pgoutbox → {dep}");
    }
    // service_healthy needs a healthcheck on the dependency, or `up` fails.
    for (dep, cond) in depends {
        let dep = scalar(dep);
        if cond.get("condition").map(scalar).as_deref() == Some("service_healthy") {
            let test = service(&compose, &dep)
                .get("healthcheck")
                .and_then(|h| h.get("test"))
                .unwrap_or_else(|| panic!("{dep} is waited on as healthy but has no healthcheck"));
            assert!(!matches!(test, Value::Null));
        }
    }
}

#[test]
fn compose_relay_env_is_a_valid_run_configuration() {
    let compose = compose();
    let relay = service(&compose, "pgoutbox");
    parse_as_cli(
        &command_words(relay),
        &environment(relay),
        "docker-compose.yml service pgoutbox",
    );

    // The usage lines in the header comment run the same CLI.
    let text = read("docker-compose.yml");
    let env = environment(relay);
    for line in text.lines().filter(|l| l.trim_start().starts_with('#')) {
        if let Some((_, rest)) = line.split_once("docker compose run --rm pgoutbox ") {
            let words: Vec<String> = rest
                .split('#')
                .next()
                .unwrap()
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            let sub = subcommand(&words[0]);
            let env: BTreeMap<String, String> = env
                .iter()
                .filter(|(k, _)| arg_by_env(&sub, k).is_some())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            parse_as_cli(
                &words,
                &env,
                &format!("docker-compose.yml comment {line:?}"),
            );
        }
    }
}

#[test]
fn compose_brokers_point_at_kafkas_advertised_listener() {
    let compose = compose();
    let kafka_env = environment(service(&compose, "kafka"));
    let controller_names: BTreeSet<&str> = kafka_env
        .get("KAFKA_CONTROLLER_LISTENER_NAMES")
        .map(|s| s.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let protocols: BTreeMap<&str, &str> = kafka_env
        .get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP")
        .map(|s| {
            s.split(',')
                .filter_map(|p| p.trim().split_once(':'))
                .collect()
        })
        .unwrap_or_default();
    let listener_ports: BTreeMap<String, String> = kafka_env
        .get("KAFKA_LISTENERS")
        .expect("KAFKA_LISTENERS is set")
        .split(',')
        .filter_map(|l| {
            let (name, addr) = l.trim().split_once("://")?;
            Some((name.to_owned(), addr.rsplit_once(':')?.1.to_owned()))
        })
        .collect();

    // host:port clients may bootstrap from: advertised, not the controller listener,
    // plaintext (the relay sets no security.protocol in the demo), and bound.
    let mut advertised = BTreeSet::new();
    for listener in kafka_env
        .get("KAFKA_ADVERTISED_LISTENERS")
        .expect("KAFKA_ADVERTISED_LISTENERS is set")
        .split(',')
    {
        let (name, addr) = listener.trim().split_once("://").expect("NAME://host:port");
        if controller_names.contains(name) {
            continue;
        }
        let protocol = protocols.get(name).copied().unwrap_or(name);
        assert_eq!(protocol, "PLAINTEXT", "advertised listener {name}");
        let port = addr.rsplit_once(':').expect("host:port").1;
        assert_eq!(
            listener_ports.get(name).map(String::as_str),
            Some(port),
            "advertised listener {name} ({addr}) is not bound by KAFKA_LISTENERS on that port"
        );
        advertised.insert(addr.to_owned());
    }
    // The advertised host must be a name the relay's container can resolve: the service.
    for addr in &advertised {
        let host = addr.rsplit_once(':').unwrap().0;
        let hostname = service(&compose, "kafka").get("hostname").map(scalar);
        assert!(
            host == "kafka" || hostname.as_deref() == Some(host),
            "kafka advertises {addr}, a host other containers cannot resolve"
        );
    }

    let relay_env = environment(service(&compose, "pgoutbox"));
    let brokers = relay_env
        .get("PGOUTBOX_BROKERS")
        .expect("pgoutbox service sets PGOUTBOX_BROKERS");
    for broker in brokers.split(',').map(str::trim) {
        assert!(
            advertised.contains(broker),
            "PGOUTBOX_BROKERS has {broker:?}; kafka advertises {advertised:?}"
        );
    }
}

#[test]
fn compose_database_url_points_at_the_postgres_service() {
    let compose = compose();
    let pg = service(&compose, "postgres");
    let pg_env = environment(pg);
    let relay_env = environment(service(&compose, "pgoutbox"));
    let url = relay_env
        .get("PGOUTBOX_DATABASE_URL")
        .expect("pgoutbox service sets PGOUTBOX_DATABASE_URL");
    // No environment: only what the URL itself says.
    let info = ConnInfo::parse_with_env(url, &|_| None).expect("PGOUTBOX_DATABASE_URL parses");
    assert_eq!(info.hosts.len(), 1);
    assert_eq!(info.hosts[0].host, Host::Tcp("postgres".into()));
    let command = command_words(pg);
    let port = command
        .iter()
        .find_map(|w| w.strip_prefix("port="))
        .map_or(5432, |p| p.parse().unwrap());
    assert_eq!(info.hosts[0].port, port, "postgres listens on {port}");
    assert_eq!(Some(&info.user), pg_env.get("POSTGRES_USER"));
    assert_eq!(Some(&info.dbname), pg_env.get("POSTGRES_DB"));
    assert_eq!(
        info.password
            .as_ref()
            .map(|p| p.expose().to_owned())
            .as_ref(),
        pg_env.get("POSTGRES_PASSWORD"),
        "the URL's password is not POSTGRES_PASSWORD"
    );
}

#[test]
fn compose_stop_grace_outlasts_the_drain() {
    let compose = compose();
    let relay = service(&compose, "pgoutbox");
    let drain = parse_duration(
        &environment(relay)
            .get("PGOUTBOX_DRAIN_TIMEOUT")
            .cloned()
            .unwrap_or_else(|| cli_default("run", "PGOUTBOX_DRAIN_TIMEOUT")),
    );
    // Docker's default is 10s, then SIGKILL.
    let grace = relay
        .get("stop_grace_period")
        .map_or(Duration::from_secs(10), |v| parse_duration(&scalar(v)));
    assert!(
        grace > drain,
        "stop_grace_period {grace:?} does not outlast the SIGTERM drain ({drain:?})"
    );
    if let Some(signal) = relay.get("stop_signal") {
        assert_eq!(scalar(signal), "SIGTERM");
    }
}

// ---------------------------------------------------------------------------------
// Every PGOUTBOX_* name anywhere in the packaging is a real env twin
// ---------------------------------------------------------------------------------

#[test]
fn every_pgoutbox_name_is_a_cli_env_twin() {
    let known = cli_env_names();
    // The walk must see the flags the packaging relies on, or it proves nothing.
    for name in ["PGOUTBOX_DATABASE_URL", "PGOUTBOX_BROKERS", "PGOUTBOX_SLOT"] {
        assert!(
            known.contains(name),
            "{name} not found in the CLI: {known:?}"
        );
    }
    let mut unknown = Vec::new();
    for file in [
        "docker-compose.yml",
        "Dockerfile",
        "deploy/pgoutbox.service",
        "deploy/pgoutbox.env.example",
        "README.md",
    ] {
        for name in pgoutbox_names(&read(file)) {
            if !known.contains(&name) {
                unknown.push(format!("{file}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "PGOUTBOX_* names the CLI does not read:\n  {}\nknown: {known:?}",
        unknown.join("\n  ")
    );
}

#[test]
fn pgoutbox_name_scanner() {
    let names = pgoutbox_names(
        "`PGOUTBOX_SLOT`, PGOUTBOX_<NAME>, PGOUTBOX_*, XPGOUTBOX_NO, PGOUTBOX_DRAIN_TIMEOUT=1s",
    );
    let expected: BTreeSet<String> = ["PGOUTBOX_SLOT", "PGOUTBOX_DRAIN_TIMEOUT"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, expected);
}

// ---------------------------------------------------------------------------------
// Dockerfile
// ---------------------------------------------------------------------------------

#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

#[derive(Debug)]
struct Stage {
    image: String,
    name: Option<String>,
    instructions: Vec<Instruction>,
}

/// Dockerfile → stages: comment lines dropped (also inside continuations, as Docker
/// does), `\` continuations joined, instructions split at `FROM`.
fn dockerfile_stages(text: &str) -> Vec<Stage> {
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part.trim_end());
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    assert!(current.is_empty(), "Dockerfile ends inside a continuation");

    let mut stages: Vec<Stage> = Vec::new();
    for line in logical {
        let (keyword, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
        let keyword = keyword.to_uppercase();
        let args = args.trim().to_owned();
        if keyword == "FROM" {
            let words: Vec<&str> = args
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                [_] => None,
                other => panic!("FROM {other:?}: expected `FROM image [AS name]`"),
            };
            stages.push(Stage {
                image: words[0].to_owned(),
                name,
                instructions: Vec::new(),
            });
        } else {
            stages
                .last_mut()
                .unwrap_or_else(|| panic!("{keyword} before the first FROM"))
                .instructions
                .push(Instruction { keyword, args });
        }
    }
    stages
}

impl Stage {
    fn all<'a>(&'a self, keyword: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.instructions
            .iter()
            .filter(move |i| i.keyword == keyword)
            .map(|i| i.args.as_str())
    }

    fn last<'a>(&'a self, keyword: &'a str) -> Option<&'a str> {
        self.all(keyword).last()
    }
}

/// Exec (JSON) form of ENTRYPOINT/CMD, or `None` for the shell form.
fn exec_form(args: &str) -> Option<Vec<String>> {
    serde_json::from_str(args).ok()
}

/// `COPY`/`ADD` arguments → (`--from` value, sources, destination).
fn copy_parts(args: &str) -> (Option<String>, Vec<String>, String) {
    let mut from = None;
    let mut rest = args.trim();
    while let Some(flagged) = rest.strip_prefix("--") {
        let (flag, after) = flagged
            .split_once(char::is_whitespace)
            .unwrap_or((flagged, ""));
        if let Some(stage) = flag.strip_prefix("from=") {
            from = Some(stage.to_owned());
        }
        rest = after.trim_start();
    }
    let mut words: Vec<String> =
        exec_form(rest).unwrap_or_else(|| rest.split_whitespace().map(str::to_owned).collect());
    assert!(
        words.len() >= 2,
        "COPY {args}: needs a source and a destination"
    );
    let dest = words.pop().unwrap();
    (from, words, dest)
}

/// Debian codename in an image tag (`rust:1-bookworm` → `bookworm`).
fn debian_release(image: &str) -> Option<&'static str> {
    ["buster", "bullseye", "bookworm", "trixie", "forky"]
        .into_iter()
        .find(|r| image.contains(r))
}

/// A `.dockerignore` pattern (Go `filepath.Match` syntax, `*` and `?` only here)
/// matching `path` or one of its parent directories.
fn dockerignore_excludes(pattern: &str, path: &str) -> bool {
    fn matches(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => {
                matches(&p[1..], s) || (!s.is_empty() && s[0] != b'/' && matches(p, &s[1..]))
            }
            (Some(b'?'), Some(c)) if *c != b'/' => matches(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => matches(&p[1..], &s[1..]),
            _ => false,
        }
    }
    let pattern = pattern
        .trim()
        .trim_start_matches("./")
        .trim_end_matches('/');
    let path = path.trim_start_matches("./").trim_end_matches('/');
    let mut prefix = String::new();
    for part in path.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        if matches(pattern.as_bytes(), prefix.as_bytes()) {
            return true;
        }
    }
    false
}

#[test]
fn dockerfile_is_multi_stage_locked_non_root_and_execs_the_binary() {
    let stages = dockerfile_stages(&read("Dockerfile"));
    assert!(
        stages.len() >= 2,
        "expected a multi-stage build, got {} FROM",
        stages.len()
    );
    let last = stages.last().unwrap();
    let builders = &stages[..stages.len() - 1];

    // Built with the committed lock file, in release mode.
    let build = builders
        .iter()
        .flat_map(|s| s.all("RUN"))
        .find(|r| r.contains("cargo build") || r.contains("cargo install"))
        .expect("a build stage runs cargo build");
    assert!(build.contains("--locked"), "`{build}` without --locked");
    assert!(build.contains("--release"), "`{build}` without --release");

    // The final stage runs as a non-root user.
    let user = last.last("USER").expect("the final stage sets USER");
    let user_name = user.split(':').next().unwrap().trim();
    assert!(
        !matches!(user_name, "root" | "0" | ""),
        "the final stage runs as {user:?}"
    );
    if user_name.parse::<u32>().is_err() {
        assert!(
            last.all("RUN")
                .any(|r| (r.contains("useradd") || r.contains("adduser")) && r.contains(user_name)),
            "USER {user_name} is never created in the final stage"
        );
    }

    // ENTRYPOINT execs the binary directly (exec form: it is PID 1 and gets SIGTERM).
    let entrypoint = last
        .last("ENTRYPOINT")
        .expect("the final stage sets ENTRYPOINT");
    let entrypoint = exec_form(entrypoint).unwrap_or_else(|| {
        panic!("ENTRYPOINT {entrypoint} is in shell form: SIGTERM would not reach pgoutbox")
    });
    assert_eq!(entrypoint, vec![BINARY_PATH.to_owned()]);
    if let Some(signal) = last.last("STOPSIGNAL") {
        assert!(matches!(signal, "SIGTERM" | "15"), "STOPSIGNAL {signal}");
    }

    // …and that binary is the one the build stage produced.
    let (from, sources, dest) = last
        .all("COPY")
        .map(copy_parts)
        .find(|(from, _, dest)| {
            from.is_some()
                && (dest == BINARY_PATH || dest.trim_end_matches('/') == "/usr/local/bin")
        })
        .expect("the final stage copies the binary from a build stage");
    let from = from.unwrap();
    let stage = builders
        .iter()
        .find(|s| s.name.as_deref() == Some(from.as_str()))
        .unwrap_or_else(|| panic!("COPY --from={from}: no earlier stage of that name"));
    assert_eq!(sources.len(), 1);
    let workdir = stage.last("WORKDIR").unwrap_or("/");
    let expected = format!("{}/target/release/pgoutbox", workdir.trim_end_matches('/'));
    assert_eq!(sources[0], expected, "copied to {dest}");

    // Build and runtime images share the Debian release: the binary links glibc and
    // libz dynamically.
    let build_release = debian_release(&stage.image);
    let run_release = debian_release(&last.image);
    assert!(
        build_release.is_some() && build_release == run_release,
        "build image {} and runtime image {} are not the same Debian release",
        stage.image,
        last.image
    );
}

#[test]
fn dockerfile_copies_existing_paths_that_the_context_keeps() {
    let stages = dockerfile_stages(&read("Dockerfile"));
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap_or_default();
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .collect();

    let mut copied = BTreeSet::new();
    for stage in &stages {
        for args in stage.all("COPY").chain(stage.all("ADD")) {
            let (from, sources, _) = copy_parts(args);
            if from.is_some() {
                continue;
            }
            for source in sources {
                assert!(
                    !source.contains(['*', '?', '[']),
                    "COPY {source}: globs are not checked by this test"
                );
                let path: PathBuf = repo().join(source.trim_start_matches("./"));
                assert!(
                    path.exists(),
                    "COPY {source}: no such path in the repository"
                );
                for pattern in &patterns {
                    assert!(
                        !dockerignore_excludes(pattern, &source),
                        "COPY {source}: .dockerignore {pattern:?} keeps it out of the context"
                    );
                }
                copied.insert(
                    source
                        .trim_start_matches("./")
                        .trim_end_matches('/')
                        .to_owned(),
                );
            }
        }
    }
    // What `cargo build --locked` needs.
    let mut needed = vec!["Cargo.toml", "Cargo.lock", "src"];
    if repo().join("build.rs").exists() {
        needed.push("build.rs");
    }
    for path in needed {
        assert!(
            copied.contains(path),
            "the Dockerfile does not COPY {path}: {copied:?}"
        );
    }
}

#[test]
fn dockerignore_matching() {
    assert!(dockerignore_excludes("target", "target"));
    assert!(dockerignore_excludes("target/", "target/release/x"));
    assert!(dockerignore_excludes("*.log", "a.log"));
    assert!(!dockerignore_excludes("*.log", "src/a.log"));
    assert!(!dockerignore_excludes("target", "src"));
    assert!(!dockerignore_excludes("src/*.rs", "src"));
    assert!(dockerignore_excludes("src/*.rs", "src/main.rs"));
}

// ---------------------------------------------------------------------------------
// deploy/: systemd unit and environment file
// ---------------------------------------------------------------------------------

/// Unit file → section → key → values (keys may repeat). `#`/`;` comment lines and
/// `\` continuations as systemd reads them.
fn unit_sections(text: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut sections: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut section: Option<String> = None;
    let mut pending = String::new();
    for (number, line) in text.lines().enumerate() {
        let number = number + 1;
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with(['#', ';'])) {
            continue;
        }
        if pending.is_empty() && trimmed.starts_with('[') {
            let name = trimmed
                .strip_prefix('[')
                .and_then(|s| s.strip_suffix(']'))
                .unwrap_or_else(|| panic!("line {number}: malformed section header {trimmed:?}"));
            assert!(
                !sections.contains_key(name),
                "line {number}: section [{name}] twice"
            );
            sections.insert(name.to_owned(), BTreeMap::new());
            section = Some(name.to_owned());
            continue;
        }
        if let Some(part) = trimmed.strip_suffix('\\') {
            pending.push_str(part.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        let entry = std::mem::take(&mut pending);
        let (key, value) = entry
            .split_once('=')
            .unwrap_or_else(|| panic!("line {number}: expected Key=Value, got {entry:?}"));
        let key = key.trim();
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric()),
            "line {number}: bad key {key:?}"
        );
        let section = section
            .as_ref()
            .unwrap_or_else(|| panic!("line {number}: {key}= before any [Section]"));
        sections
            .get_mut(section)
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .push(value.trim().to_owned());
    }
    assert!(pending.is_empty(), "the unit ends inside a continuation");
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

fn unit() -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    unit_sections(&read("deploy/pgoutbox.service"))
}

/// The single value of `key` in `[Service]`.
fn service_value(unit: &BTreeMap<String, BTreeMap<String, Vec<String>>>, key: &str) -> String {
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
    assert_eq!(unit["Service"]["ExecStart"], vec!["/bin/a b"]);
    assert_eq!(unit["Service"]["EnvironmentFile"], vec!["/a", "-/b"]);
    assert_eq!(unit["Service"]["CapabilityBoundingSet"], vec![""]);
}

/// `systemd-analyze verify` on the unit as shipped and with the commented credential
/// alternative enabled, with ExecStart pointed at the freshly built binary (verify
/// checks that it exists). Opt-in (`cargo test --test packaging -- --ignored`): it
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
