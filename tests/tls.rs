//! TLS to PostgreSQL with a CA generated in the test: verify-full succeeds with the
//! right CA and host name, fails clearly on a host-name mismatch or an unknown CA;
//! verify-ca skips the host name; both connections (replication + catalog) use it.

use crate::support;

use std::path::PathBuf;
use std::sync::OnceLock;

use pgoutbox::pg::client::connection::PgError;
use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::source::replication::ReplicationClient;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use support::tls::uses_tls;
use support::{ClusterOptions, PgCluster, Pgoutbox, WAIT};

/// pg_hba.conf of a server that accepts TLS sessions only: a session proves TLS.
const HOSTSSL_ONLY: &str = "\
local all all trust
hostssl all all 127.0.0.1/32 trust
hostssl replication all 127.0.0.1/32 trust
";

struct Pki {
    cluster: PgCluster,
    ca_file: PathBuf,
    other_ca_file: PathBuf,
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    (params.self_signed(&key).unwrap(), key)
}

/// One TLS-enabled cluster for this binary; its server certificate is valid for
/// `localhost` only, and pg_hba.conf accepts TCP connections only over TLS
/// (`hostssl`), so every successful connection below is proven encrypted.
fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let (ca_cert, ca_key) = ca("pgoutbox test CA");
        let (other_ca, _) = ca("some other CA");
        let server_key = KeyPair::generate().unwrap();
        let mut server = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        server
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let server_cert = server.signed_by(&server_key, &ca_cert, &ca_key).unwrap();
        let cluster = PgCluster::start(ClusterOptions {
            hba: Some(HOSTSSL_ONLY.into()),
            ..support::tls::server_options(&server_cert.pem(), &server_key.serialize_pem())
        });
        let dir = std::env::temp_dir().join(format!("pgoutbox-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.crt");
        let other_ca_file = dir.join("other-ca.crt");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        std::fs::write(&other_ca_file, other_ca.pem()).unwrap();
        support::on_exit(&format!("rm -rf {}", dir.display()));
        Pki {
            cluster,
            ca_file,
            other_ca_file,
        }
    })
}

fn url(host: &str, mode: &str, ca: &std::path::Path, db: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/{db}?sslmode={mode}&sslrootcert={}",
        pki().cluster.port,
        ca.display()
    )
}

async fn connect(url: &str) -> Result<ReplicationClient, PgError> {
    ReplicationClient::connect(&ConnInfo::parse(url).unwrap()).await
}

#[tokio::test]
async fn verify_full_with_the_right_ca_and_host_succeeds() {
    let pki = pki();
    let mut client = connect(&url("localhost", "verify-full", &pki.ca_file, "postgres"))
        .await
        .expect("verify-full against localhost");
    assert!(uses_tls(&mut client).await);
}

#[tokio::test]
async fn verify_full_rejects_a_host_name_mismatch() {
    let pki = pki();
    let err = connect(&url("127.0.0.1", "verify-full", &pki.ca_file, "postgres"))
        .await
        .err()
        .expect("certificate is for localhost, not 127.0.0.1");
    let text = err.to_string();
    assert!(
        text.contains("TLS handshake with 127.0.0.1 failed"),
        "{text}"
    );
    assert!(text.contains("not valid for name"), "{text}");
    assert!(
        !err.is_transient(),
        "a certificate problem must not be retried forever"
    );
}

#[tokio::test]
async fn verify_full_rejects_an_unknown_ca() {
    let pki = pki();
    let err = connect(&url(
        "localhost",
        "verify-full",
        &pki.other_ca_file,
        "postgres",
    ))
    .await
    .err()
    .expect("server certificate is not signed by the other CA");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
}

#[tokio::test]
async fn verify_ca_skips_the_host_name_and_require_encrypts() {
    let pki = pki();
    let mut client = connect(&url("127.0.0.1", "verify-ca", &pki.ca_file, "postgres"))
        .await
        .expect("verify-ca ignores the host name");
    assert!(uses_tls(&mut client).await);
    let mut client = connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=require",
        pki.cluster.port
    ))
    .await
    .expect("require without a root certificate encrypts without verifying");
    assert!(uses_tls(&mut client).await);
}

#[test]
fn verify_ca_without_a_root_certificate_names_the_fix() {
    let info = ConnInfo::parse_with_env(
        "postgres://postgres@localhost:1/postgres?sslmode=verify-full",
        &|_| None,
    )
    .unwrap();
    let err = pgoutbox::pg::client::tls::client_config(&info).expect_err("needs a CA");
    assert!(err.to_string().contains("sslrootcert"), "{err}");
}

#[test]
fn tail_streams_over_verify_full_on_both_connections() {
    let pki = pki();
    let db = pki.cluster.fresh_db();
    let url = url("localhost", "verify-full", &pki.ca_file, &db.name);
    let mut tail = Pgoutbox::spawn(&["tail", "--database-url", &url, "--limit", "1"]);
    tail.wait_stderr("tailing outbox", WAIT);
    db.psql("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('tls', '1', 'Secured', '{}')");
    let line = tail.take_lines(1, WAIT).remove(0);
    assert!(line.contains("\"topic\":\"outbox.event.tls\""), "{line}");
    assert!(tail.wait_exit(WAIT).success(), "{}", tail.stderr());
}

#[tokio::test]
async fn plain_connections_are_refused_by_this_cluster() {
    // Guards the premise above: without TLS the server says no.
    let err = connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        pki().cluster.port
    ))
    .await
    .err()
    .expect("hostssl-only cluster must refuse plain TCP");
    assert_eq!(err.code(), Some("28000"), "{err}");
}

/// `sslnegotiation=direct` against PostgreSQL 17: TLS from the first byte (ALPN
/// `postgresql`, no SSLRequest) on the replication and the SQL connection. Its
/// pg_hba.conf accepts only `hostssl`, so a session proves TLS; and the same setting
/// against this file's PostgreSQL of the system version (no direct TLS before 17)
/// fails, which proves no SSLRequest was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tls_negotiation_on_postgresql_17() {
    let direct_pki = support::tls::Pki::new("direct tls");
    let server = direct_pki.issue("direct-server", "localhost", &["localhost"]);
    let options = ClusterOptions {
        bindir: Some(support::pg17_bindir()),
        hba: Some(HOSTSSL_ONLY.into()),
        ..server.server_options()
    };
    let cluster = tokio::task::spawn_blocking(move || PgCluster::start(options))
        .await
        .unwrap();
    let direct = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}\
         &sslnegotiation=direct",
        cluster.port,
        direct_pki.ca_file().display()
    );
    let mut repl = connect(&direct)
        .await
        .expect("direct TLS, replication connection");
    assert!(uses_tls(&mut repl).await);
    let client = pgoutbox::pg::source::catalog::connect(&ConnInfo::parse(&direct).unwrap())
        .await
        .expect("direct TLS, SQL connection");
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl);
    let old = pki();
    let before_17 = format!(
        "{}&sslnegotiation=direct",
        url("localhost", "verify-full", &old.ca_file, "postgres")
    );
    let version = old.cluster.psql("postgres", "SHOW server_version_num");
    if version.parse::<u32>().unwrap() < 170000 {
        assert!(
            connect(&before_17).await.is_err(),
            "a server before 17 cannot accept direct TLS"
        );
    }
}

/// `hostaddr` gives the address to connect to, and `host` stays the name the
/// certificate is checked against: a name that does not resolve at all still
/// connects (no DNS lookup) and then fails the verify-full name check, naming it.
#[tokio::test]
async fn hostaddr_connects_by_address_and_verifies_the_host_name() {
    let pki = pki();
    let by_address = format!(
        "{}&hostaddr=127.0.0.1",
        url("localhost", "verify-full", &pki.ca_file, "postgres")
    );
    let mut client = connect(&by_address).await.expect("localhost via 127.0.0.1");
    assert!(uses_tls(&mut client).await);
    pgoutbox::pg::source::catalog::connect(&ConnInfo::parse(&by_address).unwrap())
        .await
        .expect("the SQL connection, localhost via 127.0.0.1");
    let unresolvable = format!(
        "{}&hostaddr=127.0.0.1",
        url("db.invalid", "verify-full", &pki.ca_file, "postgres")
    );
    let err = connect(&unresolvable)
        .await
        .err()
        .expect("the certificate is for localhost, not db.invalid");
    let text = err.to_string();
    assert!(
        text.contains("TLS handshake with db.invalid failed"),
        "{text}"
    );
    assert!(text.contains("not valid for name"), "{text}");
}

/// Regression (issue 13): `sslrootcert=system` used rustls' bundled Mozilla roots, not
/// the operating system's store as libpq does. It now reads the OS store, whose
/// location OpenSSL's variables override (`SSL_CERT_FILE`): a private CA installed
/// there is trusted, another one is not, and `system` implies verify-full.
#[test]
fn sslrootcert_system_trusts_the_os_store_and_implies_verify_full() {
    let pki = pki();
    let db = pki.cluster.fresh_db();
    let system = |host: &str| {
        format!(
            "postgres://postgres@{host}:{}/{}?sslrootcert=system",
            pki.cluster.port, db.name
        )
    };
    // The store is this one file; SSL_CERT_DIR is an empty directory, so whatever CAs
    // the machine has do not count.
    let empty = std::env::temp_dir().join(format!("pgoutbox-no-certs-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let empty = empty.to_str().unwrap().to_owned();
    let trusted = pki.ca_file.to_str().unwrap();
    let other = pki.other_ca_file.to_str().unwrap();
    let store = |file| [("SSL_CERT_FILE", file), ("SSL_CERT_DIR", empty.as_str())];

    let url = system("localhost");
    let args = ["tail", "--database-url", &url, "--limit", "1"];
    let mut tail = Pgoutbox::spawn_with_env(&args, &store(trusted));
    tail.wait_stderr("tailing outbox", WAIT);
    db.psql("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('sys', '1', 'Trusted', '{}')");
    let line = tail.take_lines(1, WAIT).remove(0);
    assert!(line.contains("\"topic\":\"outbox.event.sys\""), "{line}");
    assert!(tail.wait_exit(WAIT).success(), "{}", tail.stderr());

    // verify-full is implied: the certificate names localhost, not 127.0.0.1.
    let url = system("127.0.0.1");
    let mut tail = Pgoutbox::spawn_with_env(&["tail", "--database-url", &url], &store(trusted));
    assert!(!tail.wait_exit(WAIT).success());
    assert!(
        tail.stderr().contains("not valid for name"),
        "{}",
        tail.stderr()
    );

    // Another CA in the store: the server is not trusted.
    let url = system("localhost");
    let mut tail = Pgoutbox::spawn_with_env(&["tail", "--database-url", &url], &store(other));
    assert!(!tail.wait_exit(WAIT).success());
    assert!(tail.stderr().contains("UnknownIssuer"), "{}", tail.stderr());
}

#[test]
fn sslrootcert_system_refuses_a_mode_that_skips_the_host_name() {
    for mode in ["require", "verify-ca", "prefer"] {
        let err = ConnInfo::parse_with_env(
            &format!("postgres://u@localhost/db?sslmode={mode}&sslrootcert=system"),
            &|_| None,
        )
        .expect_err("weak sslmode with system roots");
        let text = err.to_string();
        assert!(
            text.contains(&format!("sslmode={mode} (from the connection string)")),
            "{text}"
        );
        assert!(text.contains("fix: use sslmode=verify-full"), "{text}");
    }
    let err = ConnInfo::parse_with_env("postgres://u@localhost/db?sslrootcert=system", &|k| {
        (k == "PGSSLMODE").then(|| "prefer".to_owned())
    })
    .expect_err("PGSSLMODE=prefer with system roots");
    assert!(
        err.to_string().contains("environment variable PGSSLMODE"),
        "{err}"
    );
    let info = ConnInfo::parse_with_env("postgres://u@localhost/db?sslrootcert=system", &|_| None)
        .unwrap();
    assert_eq!(
        info.sslmode,
        pgoutbox::pg::client::conninfo::SslMode::VerifyFull
    );
}
