//! Security of a running relay: it runs as the least-privilege role `setup
//! --print-sql` describes; its metrics endpoint is loopback-only unless exposed on
//! purpose; Kafka over SASL/SCRAM-SHA-512 + TLS works end to end (an Apache Kafka
//! node's own SASL_SSL listener) and fails clearly with a wrong CA or password; and
//! Kafka secrets never reach `config show`, logs or error messages.

use crate::support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use std::path::PathBuf;
use std::sync::OnceLock;

use support::kafka::broker::{free_port, Kind};
use support::kafka::{Broker, BrokerOptions, Reader};
use support::tls::Pki;
use support::verify::{verify, Ledger};
use support::workload::{relay_args, start_relay};
use support::{wait_for, PgCluster, Pgoutbox, TestDb, WAIT};

/// Insert `n` events of aggregate type `kind` (keys k0..k2) and record them.
fn insert_events(db: &TestDb<'_>, kind: &str, n: usize, ledger: &mut Ledger) {
    for i in 0..n {
        let id = format!("00000000-0000-4000-8000-{:012}", ledger.len() + i);
        db.psql(&format!(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('{id}', '{kind}', 'k{}', 'Happened', '{{\"i\": {i}}}')",
            i % 3
        ));
        ledger.push(id, format!("k{}", i % 3));
    }
}

// ---------------------------------------------------------------------------------
// Least privilege.

/// An administrator runs exactly what `setup --print-sql` prints (publication, slot,
/// role and grants); then `run` logs in as that role — not a superuser, no CREATE on
/// the database, no table ownership — and relays.
#[test]
fn run_relays_as_the_least_privilege_role_from_setup_print_sql() {
    let cluster = PgCluster::shared();
    let broker = Broker::shared();
    let db = cluster.fresh_db();
    let role = format!("{}_relay", db.name);
    let mut setup = Pgoutbox::spawn(&[
        "setup",
        "--print-sql",
        "--database-url",
        &db.url(),
        "--slot",
        &db.name,
        "--role",
        &role,
    ]);
    assert!(setup.wait_exit(WAIT).success(), "{}", setup.stderr());
    let sql = setup.stdout_so_far();
    let statements: Vec<&String> = sql
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("--"))
        .collect();
    eprintln!("setup --print-sql statements:\n{statements:#?}");
    assert!(statements.iter().any(|s| s.starts_with("CREATE ROLE")));
    // One statement per psql call: a slot cannot be created in a transaction that wrote.
    for statement in statements {
        db.psql(statement);
    }
    // The printed password is a placeholder the DBA replaces; force SCRAM for the role.
    db.psql(&format!(
        "ALTER ROLE \"{role}\" PASSWORD 'relay-pw'; GRANT scram_users TO \"{role}\";"
    ));
    let privileges = db.psql(&format!(
        "SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, \
                has_database_privilege('{role}', current_database(), 'CREATE'), \
                has_schema_privilege('{role}', 'public', 'CREATE'), \
                pg_has_role('{role}', (SELECT relowner FROM pg_class WHERE oid = 'outbox'::regclass), 'MEMBER') \
         FROM pg_roles WHERE rolname = '{role}'"
    ));
    assert_eq!(
        privileges, "f|f|f|t|f|f|f",
        "super, createdb, createrole, replication, CREATE on db, CREATE on schema, owns outbox"
    );

    let url = format!(
        "postgres://{role}:relay-pw@127.0.0.1:{}/{}?sslmode=disable",
        cluster.port, db.name
    );
    let brokers = broker.addr();
    let mut args = relay_args(&db, &url, &brokers);
    args.extend(["--http-addr", "off"].map(String::from));
    let relay = start_relay(&args);
    let mut ledger = Ledger::default();
    insert_events(&db, "least", 30, &mut ledger);
    let mut reader = Reader::new(&broker.addr(), &[format!("{}.least", db.name)]);
    reader.read_until("30 records", WAIT, |r| r.len() >= 30);
    let verdict = verify(&ledger, &reader.records);
    verdict.assert_no_loss();
    assert_eq!(verdict.delivered, 30, "{verdict:?}");
    // The slot moves too: confirming needs nothing beyond REPLICATION. Past the WAL
    // position of now, fixed: other tests write to the same cluster all the time, so
    // a moving `pg_current_wal_lsn()` may stay ahead of any slot.
    let written = db.psql("SELECT pg_current_wal_lsn()");
    wait_for("the slot to be confirmed by the relay role", WAIT, || {
        let active = db.psql(&format!(
            "SELECT a.usename FROM pg_replication_slots s JOIN pg_stat_activity a \
             ON a.pid = s.active_pid WHERE s.slot_name = '{}' \
             AND s.confirmed_flush_lsn >= '{written}'",
            db.name
        ));
        (active == role).then_some(())
    });
    let stderr = relay.stderr();
    assert!(!stderr.contains("permission denied"), "{stderr}");
    relay.signal("TERM");
}

// ---------------------------------------------------------------------------------
// Metrics endpoint.

/// An address of this machine that is not loopback, if it has one (a UDP "connect"
/// only asks the routing table; nothing is sent).
fn non_loopback_ip() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    Ok(out)
}

/// The `addr` field of the relay's "serving /metrics" JSON log line.
fn serving_addr(stderr: &str) -> Option<SocketAddr> {
    stderr
        .lines()
        .filter(|l| l.contains("serving /metrics"))
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["addr"].as_str()?.parse().ok())
}

#[test]
fn metrics_endpoint_defaults_to_loopback() {
    use clap::CommandFactory;
    let cli = pgoutbox::cli::Cli::command();
    let run = cli.find_subcommand("run").expect("run subcommand");
    let arg = run
        .get_arguments()
        .find(|a| a.get_id() == "http_addr")
        .expect("--http-addr");
    let default: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    assert_eq!(default, ["127.0.0.1:10737"]);
    let addr: SocketAddr = default[0].parse().unwrap();
    assert!(addr.ip().is_loopback());

    // A relay started without --http-addr (and without PGOUTBOX_HTTP_ADDR).
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let brokers = broker.addr();
    let url = db.url();
    let mut args = vec!["--log-format".to_owned(), "json".into()];
    args.extend(relay_args(&db, &url, &brokers));
    let mut relay = Pgoutbox::spawn(&args);
    let outcome = wait_for(
        "the relay to serve metrics or to fail binding",
        WAIT,
        || {
            let stderr = relay.stderr();
            if let Some(addr) = serving_addr(&stderr) {
                return Some(Ok(addr));
            }
            relay
                .child
                .try_wait()
                .ok()
                .flatten()
                .map(|_| Err(relay.stderr()))
        },
    );
    match outcome {
        Ok(bound) => {
            assert_eq!(bound, addr, "the relay binds the default address");
            let health = http_get(bound, "/healthz").expect("loopback answers");
            assert!(health.starts_with("HTTP/1.1 200"), "{health}");
            match non_loopback_ip() {
                Some(ip) => {
                    let outside = http_get(SocketAddr::new(ip, bound.port()), "/healthz");
                    assert!(
                        outside.is_err(),
                        "{ip}:{} must not answer: {outside:?}",
                        bound.port()
                    );
                    eprintln!("{ip}:{} refused as expected", bound.port());
                }
                None => eprintln!("no non-loopback address on this machine; skipped that probe"),
            }
        }
        Err(stderr) => {
            // Port 10737 is taken on this machine (another relay?): the error still
            // shows which address the default is.
            eprintln!("default port busy; the relay said:\n{stderr}");
            assert!(
                stderr.contains("cannot listen on --http-addr 127.0.0.1:10737"),
                "{stderr}"
            );
        }
    }
    relay.signal("TERM");
    let _ = relay.wait_exit(WAIT);
}

#[test]
fn metrics_on_all_interfaces_is_an_explicit_opt_in() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let brokers = broker.addr();
    let url = db.url();
    let everywhere = format!("0.0.0.0:{port}");
    let mut args = vec!["--log-format".to_owned(), "json".into()];
    args.extend(relay_args(&db, &url, &brokers));
    args.extend(["--http-addr".into(), everywhere.clone()]);
    let relay = Pgoutbox::spawn(&args);
    let bound = wait_for("the relay to serve metrics", WAIT, || {
        serving_addr(&relay.stderr())
    });
    assert_eq!(bound.to_string(), everywhere);
    let local = http_get(SocketAddr::from(([127, 0, 0, 1], port)), "/metrics").unwrap();
    assert!(local.contains("outbox_relay_latency_seconds"), "{local}");
    match non_loopback_ip() {
        Some(ip) => {
            let outside = http_get(SocketAddr::new(ip, port), "/healthz")
                .unwrap_or_else(|e| panic!("{ip}:{port} should answer when exposed: {e}"));
            assert!(outside.starts_with("HTTP/1.1 200"), "{outside}");
        }
        None => eprintln!("no non-loopback address on this machine; skipped that probe"),
    }
    relay.signal("TERM");
}

// ---------------------------------------------------------------------------------
// Kafka over SASL/SCRAM-SHA-512 and TLS, on Apache Kafka's own SASL_SSL listener:
// TLS with a test CA (a PEM key store: key and certificate chain in one file),
// the SCRAM user created when the node's storage is formatted (`--add-scram`).
// librdkafka runs its real SASL_SSL path: the TLS handshake with certificate and
// host-name verification, the SCRAM exchange, then produce/fetch.

/// The relay's SCRAM password: a canary that must never be printed.
const KAFKA_CANARY: &str = "Kafka-Canary-9d2e71";
/// A wrong password, also never to be printed.
const WRONG_CANARY: &str = "Wrong-Canary-5ab03c";
const KAFKA_USER: &str = "pgoutbox-relay";
const SCRAM: &str = "SCRAM-SHA-512";

struct SecureKafka {
    _broker: Broker,
    /// `127.0.0.1:<SASL_SSL port>`: the only address clients use.
    addr: String,
    pki: Pki,
    rogue: Pki,
}

fn secure_kafka() -> &'static SecureKafka {
    static KAFKA: OnceLock<SecureKafka> = OnceLock::new();
    KAFKA.get_or_init(|| {
        let pki = Pki::new("kafka CA");
        let cert = pki.issue("kafka", "localhost", &["127.0.0.1", "localhost"]);
        let keystore = secret_file(
            "kafka-keystore.pem",
            &format!("{}{}", cert.key_pem, cert.cert_pem),
        );
        let port = free_port();
        let broker = Broker::start_with(BrokerOptions {
            kind: Some(Kind::Kafka),
            listeners: vec![format!("SASL_SSL://127.0.0.1:{port}")],
            properties: vec![
                format!("sasl.enabled.mechanisms={SCRAM}"),
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
                 org.apache.kafka.common.security.scram.ScramLoginModule required;"
                    .to_owned(),
                "listener.name.sasl_ssl.ssl.keystore.type=PEM".to_owned(),
                format!(
                    "listener.name.sasl_ssl.ssl.keystore.location={}",
                    keystore.display()
                ),
            ],
            format_args: vec![
                "--add-scram".to_owned(),
                format!("{SCRAM}=[name={KAFKA_USER},password={KAFKA_CANARY}]"),
            ],
            ..BrokerOptions::default()
        });
        SecureKafka {
            _broker: broker,
            addr: format!("127.0.0.1:{port}"),
            pki,
            rogue: Pki::new("rogue kafka CA"),
        }
    })
}

/// A file holding `text` (a mounted secret), removed at exit.
fn secret_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("pgoutbox-sec-{}-{name}", std::process::id()));
    std::fs::write(&path, format!("{text}\n")).unwrap();
    support::on_exit(&format!("rm -f {}", path.display()));
    path
}

/// The relay's Kafka security flags (password from `password_file`, CA `ca`).
fn kafka_security(ca: &std::path::Path, password_file: &std::path::Path) -> Vec<String> {
    [
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        &format!("sasl.username={KAFKA_USER}"),
        &format!("ssl.ca.location={}", ca.display()),
    ]
    .iter()
    .flat_map(|o| ["--kafka-option".to_owned(), o.to_string()])
    .chain([
        "--kafka-sasl-password-file".to_owned(),
        password_file.display().to_string(),
    ])
    .collect()
}

fn assert_no_canary(what: &str, text: &str) {
    for canary in [KAFKA_CANARY, WRONG_CANARY] {
        assert!(!text.contains(canary), "{what} leaked {canary}:\n{text}");
    }
}

#[test]
fn relay_delivers_over_sasl_scram_and_tls_without_showing_the_password() {
    let kafka = secure_kafka();
    let db = PgCluster::shared().fresh_db();
    let password = secret_file("kafka-pw", KAFKA_CANARY);
    let url = db.url();
    let security = kafka_security(&kafka.pki.ca_file(), &password);
    let mut args = relay_args(&db, &url, &kafka.addr);
    args.extend(security.iter().cloned());
    // librdkafka's own security and configuration logging, at debug level.
    args.extend(
        [
            "--kafka-option",
            "debug=security,conf",
            "--http-addr",
            "off",
        ]
        .map(String::from),
    );
    let relay = Pgoutbox::spawn_with_env(&args, &[("RUST_LOG", "debug")]);
    relay.wait_stderr("relaying outbox to kafka", WAIT);
    let mut ledger = Ledger::default();
    insert_events(&db, "sasl", 20, &mut ledger);
    let ca = kafka.pki.ca_file();
    let reader_config = [
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", SCRAM),
        ("sasl.username", KAFKA_USER),
        ("sasl.password", KAFKA_CANARY),
        ("ssl.ca.location", ca.to_str().unwrap()),
    ];
    let mut reader =
        Reader::with_config(&kafka.addr, &[format!("{}.sasl", db.name)], &reader_config);
    reader.read_until("20 records over SASL_SSL", WAIT, |r| r.len() >= 20);
    let verdict = verify(&ledger, &reader.records);
    verdict.assert_no_loss();
    assert_eq!(verdict.delivered, 20, "{verdict:?}");
    relay.signal("TERM");
    let mut relay = relay;
    assert!(relay.wait_exit(WAIT).success(), "{}", relay.stderr());
    let stderr = relay.stderr();
    // The SCRAM exchange really happened (librdkafka's security debug log)…
    assert!(
        stderr.contains(SCRAM),
        "{}",
        &stderr[..stderr.len().min(4000)]
    );
    // …and the password never reached the log, even at debug level.
    assert_no_canary("run (RUST_LOG=debug, debug=security,conf)", &stderr);
    eprintln!(
        "relay stderr: {} lines, {} mention librdkafka's security facility",
        stderr.lines().count(),
        stderr
            .lines()
            .filter(|l| l.contains("SASL") || l.contains("SCRAM"))
            .count()
    );
}

/// Regression (issue 13 item 10): `check` took no `--kafka-option`, so a TLS/SASL
/// cluster could not be pre-checked. With `run`'s settings it reaches the cluster
/// through SASL/SCRAM over TLS; without them it fails naming the settings to check.
#[test]
fn check_reaches_a_sasl_ssl_cluster_with_the_relays_kafka_options() {
    let kafka = secure_kafka();
    let db = PgCluster::shared().fresh_db();
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    let password = secret_file("kafka-pw-check", KAFKA_CANARY);
    let url = db.url();
    let check = |extra: &[String]| {
        let mut args: Vec<String> = ["check", "--database-url", &url, "--slot", &db.name]
            .map(String::from)
            .to_vec();
        args.extend(["--brokers".to_owned(), kafka.addr.clone()]);
        args.extend(extra.iter().cloned());
        let mut p = Pgoutbox::spawn(&args);
        let status = p.wait_exit(WAIT);
        let out = p.stdout_so_far().join("\n");
        assert_no_canary("check", &out);
        assert_no_canary("check", &p.stderr());
        (status.success(), out)
    };
    let (ok, out) = check(&kafka_security(&kafka.pki.ca_file(), &password));
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("✔ kafka: {} = reachable: 1 broker(s)", kafka.addr)),
        "{out}"
    );
    let (ok, out) = check(&[]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("✘ kafka: {} = unreachable", kafka.addr))
            && out.contains("--kafka-option security.protocol="),
        "{out}"
    );
}

#[test]
fn a_wrong_kafka_ca_is_named_in_the_log() {
    let kafka = secure_kafka();
    let db = PgCluster::shared().fresh_db();
    let password = secret_file("kafka-pw-ca", KAFKA_CANARY);
    let url = db.url();
    let security = kafka_security(&kafka.rogue.ca_file(), &password);
    let mut args = relay_args(&db, &url, &kafka.addr);
    args.extend(security.iter().cloned());
    args.extend(["--http-addr", "off"].map(String::from));
    let relay = Pgoutbox::spawn(&args);
    // librdkafka's reason names the setting to fix.
    relay.wait_stderr("verify that ssl.ca.location is correctly configured", WAIT);
    let stderr = relay.stderr();
    // librdkafka's first failure line may come without the hint; one must carry
    // both the verification failure and the setting to fix.
    let line = stderr
        .lines()
        .find(|l| {
            l.contains("kafka client error")
                && l.contains("certificate verify failed")
                && l.contains("ssl.ca.location")
        })
        .unwrap_or_else(|| {
            panic!("no kafka client error naming the certificate and the setting:\n{stderr}")
        });
    eprintln!("wrong CA: {line}");
    assert_no_canary("run with a wrong CA", &stderr);
    relay.signal("TERM");
}

#[test]
fn a_wrong_kafka_password_is_a_named_sasl_failure() {
    let kafka = secure_kafka();
    let db = PgCluster::shared().fresh_db();
    let password = secret_file("kafka-pw-wrong", WRONG_CANARY);
    let url = db.url();
    let security = kafka_security(&kafka.pki.ca_file(), &password);
    let mut args = relay_args(&db, &url, &kafka.addr);
    args.extend(security.iter().cloned());
    args.extend(["--http-addr", "off"].map(String::from));
    let relay = Pgoutbox::spawn(&args);
    relay.wait_stderr("SASL authentication error", WAIT);
    let stderr = relay.stderr();
    let line = stderr
        .lines()
        .find(|l| l.contains("SASL authentication error"))
        .unwrap();
    eprintln!("wrong password: {line}");
    assert!(line.contains(SCRAM), "{line}");
    assert_no_canary("run with a wrong password", &stderr);
    relay.signal("TERM");
}

/// Every way of giving a Kafka secret — flags, environment (comma-joined), the config
/// file, the password file — ends up redacted in `config show`; a malformed option
/// holding a secret is reported without it.
#[test]
fn config_show_and_errors_redact_every_kafka_secret() {
    let canaries = [
        "canary-sasl-1",
        "canary-keypw-2",
        "canary-oauth-3",
        "canary-keystore-4",
        "canary-jaas-5",
        "canary-file-6",
        "canary,env-7",
    ];
    let file = secret_file(
        "cfg.toml",
        &format!(
            "brokers = \"b:1\"\nkafka_option = [\"sasl.jaas.config=user password={}\", \"linger.ms=7\"]",
            canaries[4]
        ),
    );
    let password_file = secret_file("kafka-pw-show", canaries[5]);
    let sasl = format!("sasl.password={}", canaries[0]);
    let key_pw = format!("ssl.key.password={}", canaries[1]);
    let oauth = format!("sasl.oauthbearer.client.secret={}", canaries[2]);
    let store = format!(
        "ssl.keystore.password={},ssl.key.location=/k.pem",
        canaries[3]
    );
    let env = format!("sasl.username=relay,sasl.password={}", canaries[6]);
    let show = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["config", "show"];
        all.extend_from_slice(args);
        let mut p = Pgoutbox::spawn_with_env(&all, env);
        let status = p.wait_exit(WAIT);
        (status, p.stdout_so_far().join("\n"), p.stderr())
    };
    let (status, out, err) = show(
        &[
            "--config",
            file.to_str().unwrap(),
            "--kafka-option",
            &sasl,
            "--kafka-option",
            &key_pw,
            "--kafka-option",
            &oauth,
            "--kafka-option",
            &store,
        ],
        &[],
    );
    assert!(status.success(), "{err}");
    eprintln!("{out}");
    for canary in canaries {
        assert!(
            !out.contains(canary) && !err.contains(canary),
            "{canary}: {out}\n{err}"
        );
    }
    for key in [
        "sasl.password",
        "ssl.key.password",
        "sasl.oauthbearer.client.secret",
        "ssl.keystore.password",
    ] {
        assert!(out.contains(&format!("{key}=[redacted]")), "{key}: {out}");
    }
    assert!(out.contains("ssl.key.location=/k.pem"), "{out}");
    // The file's kafka_option loses to the flags (flag > env > file).
    assert!(!out.contains("linger.ms=7"), "{out}");

    // Environment (comma-joined, the secret itself holds a comma) and password file.
    let (status, out, err) = show(
        &[
            "--brokers",
            "b:1",
            "--kafka-sasl-password-file",
            password_file.to_str().unwrap(),
        ],
        &[("PGOUTBOX_KAFKA_OPTION", &env)],
    );
    assert!(status.success(), "{err}");
    for canary in canaries {
        assert!(
            !out.contains(canary) && !err.contains(canary),
            "{canary}: {out}\n{err}"
        );
    }
    assert!(
        out.contains("kafka_option = [\"sasl.username=relay\", \"sasl.password=[redacted]\"]"),
        "{out}"
    );

    // A malformed option that holds a secret is refused without quoting it.
    let (status, out, err) = show(
        &[
            "--brokers",
            "b:1",
            "--kafka-option",
            "sasl.password canary-typo-8",
        ],
        &[],
    );
    assert!(!status.success());
    assert!(err.contains("invalid --kafka-option"), "{err}");
    assert!(
        !err.contains("canary-typo-8") && !out.contains("canary-typo-8"),
        "{err}"
    );
}
