//! `docker-compose.yml`: the demo stack (PostgreSQL with logical WAL and the outbox
//! table, single-node KRaft Kafka, the relay built from this repository) is wired so
//! that `docker compose up` works: the relay's settings are a valid `run`, it reaches
//! the services by the names and ports they really use, and it outlives its drain.
//!
//! The file is read with `serde_yaml_ng`; the helpers below only interpret the Compose
//! shapes (map or list `environment`, string or list `command`, short or long volumes).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pgoutbox::pg::client::conninfo::{ConnInfo, Host};
use serde_yaml_ng::Value;

use super::{arg_by_env, cli_default, parse_as_cli, parse_duration, read, repo, subcommand};

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

/// `volumes:` as (source, target) pairs, short form (`./a:/b[:ro]`) or long form.
fn volume_mounts(service: &Value) -> Vec<(String, String)> {
    let volumes = service
        .get("volumes")
        .and_then(Value::as_sequence)
        .expect("postgres service has volumes");
    volumes
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
        .collect()
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
    let mounts = volume_mounts(pg);
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

/// The `host:port`s Kafka's clients may bootstrap from: advertised, not the controller
/// listener, plaintext (the relay sets no security.protocol in the demo), and bound
/// (each one is checked on the way).
fn client_listeners(kafka_env: &BTreeMap<String, String>) -> BTreeSet<String> {
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
    advertised
}

#[test]
fn compose_brokers_point_at_kafkas_advertised_listener() {
    let compose = compose();
    let kafka_env = environment(service(&compose, "kafka"));
    let advertised = client_listeners(&kafka_env);
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

/// `restart: on-failure` restarted a relay stopped before a poison row forever (exit 4
/// every time). Compose cannot skip exit codes, so the restarts must be capped:
/// `on-failure:N` with a small N — never `always`, `unless-stopped` or an unbounded
/// `on-failure`.
#[test]
fn compose_relay_restarts_are_capped_so_a_poison_row_does_not_crash_loop() {
    let compose = compose();
    let relay = service(&compose, "pgoutbox");
    let policy = relay.get("restart").map(scalar).unwrap_or_default();
    let retries = policy
        .strip_prefix("on-failure:")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("restart: {policy:?}, expected on-failure:N"));
    assert!(
        (1..=5).contains(&retries),
        "restart: {policy}: a poison row would be retried {retries} times"
    );
}

/// The relay's metrics are reachable from outside its container: it listens on every
/// interface of the container, on the port it publishes.
#[test]
fn compose_relay_metrics_are_reachable_from_outside_the_container() {
    let compose = compose();
    let relay = service(&compose, "pgoutbox");
    let addr: std::net::SocketAddr = environment(relay)
        .get("PGOUTBOX_HTTP_ADDR")
        .expect("PGOUTBOX_HTTP_ADDR is set: the default (loopback) is unreachable from outside")
        .parse()
        .expect("an ip:port");
    assert!(
        addr.ip().is_unspecified(),
        "{addr}: listen on every interface"
    );
    let default: std::net::SocketAddr = cli_default("run", "PGOUTBOX_HTTP_ADDR").parse().unwrap();
    assert_eq!(addr.port(), default.port(), "the relay's default port");
    let published: Vec<String> = relay
        .get("ports")
        .and_then(Value::as_sequence)
        .expect("ports published")
        .iter()
        .map(scalar)
        .collect();
    assert!(
        published
            .iter()
            .any(|p| p.ends_with(&format!(":{}", addr.port()))),
        "container port {} published: {published:?}",
        addr.port()
    );
}

/// The healthcheck runs in the runtime image (bash, no curl) and follows `/readyz`:
/// run it, on this machine, against the relay's real endpoint.
#[tokio::test]
async fn compose_relay_healthcheck_follows_readyz() {
    use pgoutbox::metrics::{Metrics, Role};
    let compose = compose();
    let relay = service(&compose, "pgoutbox");
    let test: Vec<String> = relay["healthcheck"]["test"]
        .as_sequence()
        .expect("healthcheck test in exec form")
        .iter()
        .map(scalar)
        .collect();
    assert_eq!(test[0], "CMD");
    let port = environment(relay)["PGOUTBOX_HTTP_ADDR"]
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let metrics = std::sync::Arc::new(Metrics::default());
    let token = tokio_util::sync::CancellationToken::new();
    let mut tasks = pgoutbox::task::Tasks::new();
    let local = pgoutbox::http::serve(
        "127.0.0.1:0".parse().unwrap(),
        metrics.clone(),
        token.clone(),
        &mut tasks,
    )
    .await
    .unwrap();
    // The same command, pointed at this test's endpoint.
    let words: Vec<String> = test[1..]
        .iter()
        .map(|w| {
            w.replace(
                &format!("/127.0.0.1/{port}"),
                &format!("/127.0.0.1/{}", local.port()),
            )
        })
        .collect();
    assert_ne!(words, test[1..], "the command names 127.0.0.1:{port}");
    let healthy = || async {
        let words = words.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(&words[0])
                .args(&words[1..])
                .status()
                .expect("run the healthcheck")
                .success()
        })
        .await
        .unwrap()
    };
    assert!(!healthy().await, "connecting: unhealthy");
    metrics.set_producer_connected(true);
    metrics.set_role(Role::Standby);
    assert!(healthy().await, "a standby able to take over is healthy");
    metrics.set_role(Role::Active);
    assert!(!healthy().await, "active without replication: unhealthy");
    metrics.set_replication_connected(true);
    assert!(healthy().await, "active and connected: healthy");
    token.cancel();
    tasks.join(std::time::Duration::from_secs(30)).await;
}
