//! Security of a running relay: it runs as the least-privilege role `setup
//! --print-sql` describes; its metrics endpoint is loopback-only unless exposed on
//! purpose; Kafka over SASL/SCRAM + TLS works end to end (tansu behind a TLS
//! terminator) and fails clearly with a wrong CA or password; and Kafka secrets never
//! reach `config show`, logs or error messages.

mod support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use support::kafka::{Broker, Reader};
use support::verify::{verify, Ledger};
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

fn run_args<'a>(
    url: &'a str,
    brokers: &'a str,
    db: &'a TestDb<'_>,
    template: &'a str,
) -> Vec<&'a str> {
    vec![
        "run",
        "--database-url",
        url,
        "--brokers",
        brokers,
        "--slot",
        &db.name,
        "--topic-template",
        template,
    ]
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
    let template = format!("{}.${{routedByValue}}", db.name);
    let brokers = broker.addr();
    let mut args = run_args(&url, &brokers, &db, &template);
    args.extend(["--http-addr", "off"]);
    let relay = Pgoutbox::spawn(&args);
    relay.wait_stderr("relaying outbox to kafka", WAIT);
    let mut ledger = Ledger::default();
    insert_events(&db, "least", 30, &mut ledger);
    let mut reader = Reader::new(&broker.addr(), &[format!("{}.least", db.name)]);
    reader.read_until("30 records", WAIT, |r| r.len() >= 30);
    let verdict = verify(&ledger, &reader.records);
    verdict.assert_no_loss();
    assert_eq!(verdict.delivered, 30, "{verdict:?}");
    // The slot moves too: confirming needs nothing beyond REPLICATION.
    wait_for("the slot to be confirmed by the relay role", WAIT, || {
        let active = db.psql(&format!(
            "SELECT a.usename FROM pg_replication_slots s JOIN pg_stat_activity a \
             ON a.pid = s.active_pid WHERE s.slot_name = '{}' \
             AND s.confirmed_flush_lsn >= pg_current_wal_lsn()",
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
    assert_eq!(default, ["127.0.0.1:9187"]);
    let addr: SocketAddr = default[0].parse().unwrap();
    assert!(addr.ip().is_loopback());

    // A relay started without --http-addr (and without PGOUTBOX_HTTP_ADDR).
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let brokers = broker.addr();
    let template = format!("{}.${{routedByValue}}", db.name);
    let url = db.url();
    let mut args = vec!["--log-format", "json"];
    args.extend(run_args(&url, &brokers, &db, &template));
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
            // Port 9187 is taken on this machine (another relay?): the error still
            // shows which address the default is.
            eprintln!("default port busy; the relay said:\n{stderr}");
            assert!(
                stderr.contains("cannot listen on --http-addr 127.0.0.1:9187"),
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
    let template = format!("{}.${{routedByValue}}", db.name);
    let url = db.url();
    let everywhere = format!("0.0.0.0:{port}");
    let mut args = vec!["--log-format", "json"];
    args.extend(run_args(&url, &brokers, &db, &template));
    args.extend(["--http-addr", &everywhere]);
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
