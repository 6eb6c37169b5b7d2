//! Authentication over TLS against a real server: SCRAM-SHA-256-PLUS channel binding
//! (prefer / require / disable, an interceptor caught, a SHA-384 certificate) and
//! client-certificate (`cert`) authentication, including `pgoutbox run` end to end.
//! Both connections are exercised: the replication connection (our own protocol
//! code) and the catalog connection (tokio-postgres with our TLS connector).

use crate::support;

use std::sync::OnceLock;

use pgoutbox::pg::client::channel_binding::tls_server_end_point;
use pgoutbox::pg::client::connection::PgError;
use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::source::catalog;
use pgoutbox::pg::source::replication::ReplicationClient;
use support::kafka::{Broker, Reader};
use support::tls::{uses_tls, Issued, Pki, Terminator};
use support::verify::{verify, Ledger};
use support::workload::{relay_args, start_relay};
use support::{PgCluster, Pgoutbox, TestDb, WAIT};

/// Members of `cert_users` log in with a client certificate (TLS only), members of
/// `md5_users` with md5 (TLS only), members of `scram_users` with SCRAM over TLS or
/// plain TCP; everyone else is trusted.
const HBA: &str = "\
local all all trust
hostssl all +cert_users 127.0.0.1/32 cert
hostssl replication +cert_users 127.0.0.1/32 cert
hostssl all +md5_users 127.0.0.1/32 md5
hostssl replication +md5_users 127.0.0.1/32 md5
host all +scram_users 127.0.0.1/32 scram-sha-256
host replication +scram_users 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
";

struct Setup {
    cluster: PgCluster,
    pki: Pki,
    server: Issued,
    /// A CA the server does not trust, for wrong client certificates.
    rogue: Pki,
}

/// A TLS cluster with server certificate `server` (valid for `localhost`) and
/// `ssl_ca_file` = the CA of `pki`, so it verifies client certificates from it.
fn tls_cluster(pki: &Pki, server: &Issued) -> PgCluster {
    let mut options = server.server_options();
    options.conf.push("ssl_ca_file = 'root.crt'".into());
    options
        .files
        .push(("root.crt".into(), pki.ca_pem().into_bytes()));
    options.hba = Some(HBA.into());
    let cluster = PgCluster::start(options);
    cluster.psql("postgres", "CREATE ROLE cert_users NOLOGIN");
    cluster
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let pki = Pki::new("tls auth CA");
        let server = pki.issue("server", "localhost", &["localhost"]);
        Setup {
            cluster: tls_cluster(&pki, &server),
            pki,
            server,
            rogue: Pki::new("rogue CA"),
        }
    })
}

/// A LOGIN REPLICATION role `<prefix>_<db>` in group `group` (SCRAM password `pw`
/// unless md5 is asked for).
fn role(db: &TestDb<'_>, prefix: &str, group: &str, password: Option<&str>) -> String {
    let name = format!("{prefix}_{}", db.name);
    let encryption = if group == "md5_users" {
        "md5"
    } else {
        "scram-sha-256"
    };
    let password = password.map_or(String::new(), |p| format!(" PASSWORD '{p}'"));
    db.psql(&format!(
        "SET password_encryption = '{encryption}'; \
         CREATE ROLE {name} LOGIN REPLICATION{password}; GRANT {group} TO {name};"
    ));
    name
}

/// `postgres://user:pw@host:port/db?sslmode=…&sslrootcert=<ca>&<extra>`.
fn url(cluster: &PgCluster, user: &str, db: &str, sslmode: &str, extra: &str) -> String {
    format!(
        "postgres://{user}@localhost:{}/{db}?sslmode={sslmode}&sslrootcert={}{extra}",
        cluster.port,
        setup().pki.ca_file().display()
    )
}

fn info(url: &str) -> ConnInfo {
    ConnInfo::parse_with_env(url, &|_| None).unwrap()
}

async fn replication(url: &str) -> Result<ReplicationClient, PgError> {
    ReplicationClient::connect(&info(url)).await
}

/// Both connections log in (replication and catalog), over TLS.
async fn both_connect(url: &str) {
    let mut client = replication(url)
        .await
        .unwrap_or_else(|e| panic!("replication connection {url}: {e}"));
    assert!(uses_tls(&mut client).await, "{url}");
    let catalog = catalog::connect(&info(url))
        .await
        .unwrap_or_else(|e| panic!("catalog connection {url}: {e}"));
    let ssl: bool = catalog
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "{url}");
}

#[tokio::test]
async fn scram_over_tls_logs_in_with_channel_binding_prefer_and_require() {
    let s = setup();
    let db = s.cluster.fresh_db();
    let user = role(&db, "scram", "scram_users", Some("pw"));
    for cb in ["", "&channel_binding=prefer", "&channel_binding=require"] {
        let with_password = format!("{user}:pw");
        both_connect(&url(
            &s.cluster,
            &with_password,
            &db.name,
            "verify-full",
            cb,
        ))
        .await;
        both_connect(&url(&s.cluster, &with_password, &db.name, "require", cb)).await;
    }
    // This server's certificate is ECDSA P-256/SHA-256: the binding is SHA-256.
    assert_eq!(tls_server_end_point(s.server.der()).unwrap().len(), 32);
}

/// A TLS interceptor holding a certificate the client trusts (same CA, right host
/// name) passes verify-full. Only channel binding notices: the server hashes its own
/// certificate, the client hashes the interceptor's.
#[tokio::test]
async fn an_interceptor_with_a_trusted_certificate_is_caught_by_channel_binding() {
    let s = setup();
    let db = s.cluster.fresh_db();
    let user = role(&db, "mitm", "scram_users", Some("pw"));
    let forged = s
        .pki
        .issue("interceptor", "localhost", &["localhost", "127.0.0.1"]);
    let interceptor = Terminator::postgres_interceptor(&forged, s.cluster.port, &s.pki.ca_file());
    let via = |cb: &str| {
        format!(
            "postgres://{user}:pw@localhost:{}/{}?sslmode=verify-full&sslrootcert={}&channel_binding={cb}",
            interceptor.port,
            db.name,
            s.pki.ca_file().display()
        )
    };
    // Premise: without binding the interceptor is invisible.
    let mut client = replication(&via("disable"))
        .await
        .expect("channel_binding=disable logs in through the interceptor");
    assert!(uses_tls(&mut client).await);
    catalog::connect(&info(&via("disable")))
        .await
        .expect("catalog connection through the interceptor without binding");

    for cb in ["prefer", "require"] {
        let err = replication(&via(cb))
            .await
            .err()
            .unwrap_or_else(|| panic!("channel_binding={cb}: login through an interceptor"));
        let text = err.to_string();
        eprintln!("replication, channel_binding={cb}: {text}");
        assert_eq!(err.code(), Some("28000"), "{text}");
        assert!(text.contains("channel binding check failed"), "{text}");
        assert!(text.contains("terminates TLS"), "{text}");
        assert!(!err.is_transient(), "must not be retried: {text}");
        assert!(!text.contains("pw@"), "{text}");

        let err = catalog::connect(&info(&via(cb)))
            .await
            .err()
            .unwrap_or_else(|| {
                panic!("catalog, channel_binding={cb}: login through an interceptor")
            });
        let text = err.to_string();
        eprintln!("catalog, channel_binding={cb}: {text}");
        assert!(text.contains("channel binding check failed"), "{text}");
        assert!(text.contains("terminates TLS"), "{text}");
        assert!(!err.is_transient(), "must not be retried: {text}");
    }
}

#[tokio::test]
async fn channel_binding_require_without_tls_fails_before_sending_a_password() {
    let s = setup();
    let db = s.cluster.fresh_db();
    let user = role(&db, "plain", "scram_users", Some("pw"));
    let url = format!(
        "postgres://{user}:pw@127.0.0.1:{}/{}?sslmode=disable&channel_binding=require",
        s.cluster.port, db.name
    );
    let err = replication(&url).await.err().expect("must refuse");
    let text = err.to_string();
    eprintln!("replication: {text}");
    assert!(
        text.contains("channel_binding=require needs an encrypted connection"),
        "{text}"
    );
    assert!(text.contains("sslmode=require"), "{text}");
    assert!(!err.is_transient(), "{text}");

    let err = catalog::connect(&info(&url))
        .await
        .expect_err("must refuse");
    let text = err.to_string();
    eprintln!("catalog: {text}");
    assert!(
        text.contains("channel_binding=require needs an encrypted connection"),
        "{text}"
    );
    assert!(!err.is_transient(), "{text}");

    // What a user sees from the binary.
    let mut tail = Pgoutbox::spawn(&["tail", "--database-url", &url]);
    assert!(!tail.wait_exit(WAIT).success());
    let stderr = tail.stderr();
    assert!(
        stderr.contains("channel_binding=require needs an encrypted connection"),
        "{stderr}"
    );
    assert!(!stderr.contains(":pw@"), "{stderr}");
}

#[tokio::test]
async fn channel_binding_require_refuses_methods_that_cannot_bind() {
    let s = setup();
    let db = s.cluster.fresh_db();
    let md5 = role(&db, "md5", "md5_users", Some("pw"));
    let md5_url = url(
        &s.cluster,
        &format!("{md5}:pw"),
        &db.name,
        "verify-full",
        "&channel_binding=require",
    );
    let err = replication(&md5_url).await.err().expect("md5 cannot bind");
    let text = err.to_string();
    eprintln!("md5: {text}");
    assert!(text.contains("asks for md5 authentication"), "{text}");
    assert!(text.contains("no password was sent"), "{text}");
    assert!(!err.is_transient());
    let err = catalog::connect(&info(&md5_url)).await.expect_err("md5");
    eprintln!("md5, catalog: {err}");
    assert!(err.to_string().contains("channel_binding=require"), "{err}");
    // Sanity: the same user logs in when binding is only preferred.
    both_connect(&url(
        &s.cluster,
        &format!("{md5}:pw"),
        &db.name,
        "verify-full",
        "&channel_binding=prefer",
    ))
    .await;

    // trust: the server never asks for a password, so nothing is bound.
    let trust_url = url(
        &s.cluster,
        "postgres",
        &db.name,
        "verify-full",
        "&channel_binding=require",
    );
    let err = replication(&trust_url)
        .await
        .err()
        .expect("trust cannot bind");
    assert!(
        err.to_string()
            .contains("asks for no password (trust or cert) authentication"),
        "{err}"
    );
}

/// RFC 5929: a certificate signed with SHA-384 binds with SHA-384, not SHA-256; a
/// wrong choice would make PostgreSQL reject the login. (The signature algorithm is
/// the issuer's: a P-384 CA signs with ecdsa-with-SHA384.)
#[tokio::test]
async fn a_sha384_server_certificate_binds_with_sha384() {
    let pki = Pki::with_algorithm("p384 CA", &rcgen::PKCS_ECDSA_P384_SHA384);
    let server = pki.issue_with(
        "server384",
        "localhost",
        &["localhost"],
        &rcgen::PKCS_ECDSA_P384_SHA384,
    );
    assert_eq!(tls_server_end_point(server.der()).unwrap().len(), 48);
    let cluster = tls_cluster(&pki, &server);
    let db = cluster.fresh_db();
    let user = role(&db, "scram384", "scram_users", Some("pw"));
    let url = format!(
        "postgres://{user}:pw@localhost:{}/{}?sslmode=verify-full&sslrootcert={}&channel_binding=require",
        cluster.port,
        db.name,
        pki.ca_file().display()
    );
    both_connect(&url).await;
    cluster.stop("fast");
}

// ---------------------------------------------------------------------------------
// Client certificates.

/// A `cert_users` role (no password at all) and a client certificate with CN = it.
fn cert_user(db: &TestDb<'_>, pki: &Pki, prefix: &str) -> (String, Issued) {
    let name = role(db, prefix, "cert_users", None);
    let issued = pki.issue(&name, &name, &[]);
    (name, issued)
}

fn with_cert(issued: &Issued) -> String {
    format!(
        "&sslcert={}&sslkey={}",
        issued.cert_file.display(),
        issued.key_file.display()
    )
}

#[test]
fn run_relays_as_a_certificate_user_with_verify_full() {
    let s = setup();
    let broker = Broker::shared();
    let db = s.cluster.fresh_db();
    let (user, issued) = cert_user(&db, &s.pki, "relay");
    // An administrator prepares publication, slot and grants (psql -c runs one
    // transaction; a slot cannot be created in one that wrote).
    db.psql(&format!(
        "CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert'); \
         GRANT USAGE ON SCHEMA public TO {user}; GRANT SELECT ON outbox TO {user};"
    ));
    db.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
        db.name
    ));
    let url = url(
        &s.cluster,
        &user,
        &db.name,
        "verify-full",
        &with_cert(&issued),
    );
    let mut args = relay_args(&db, &url, &broker.addr());
    args.extend(["--http-addr", "off"].map(String::from));
    let relay = start_relay(&args);
    let mut ledger = Ledger::default();
    for i in 0..20 {
        let id = format!("00000000-0000-4000-8000-{i:012}");
        db.psql(&format!(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('{id}', 'cert', 'k{}', 'Signed', '{{}}')",
            i % 3
        ));
        ledger.push(id, format!("k{}", i % 3));
    }
    let mut reader = Reader::new(&broker.addr(), &[format!("{}.cert", db.name)]);
    reader.read_until("20 records", WAIT, |r| r.len() >= 20);
    let verdict = verify(&ledger, &reader.records);
    verdict.assert_no_loss();
    assert_eq!(verdict.duplicated_total, 0, "{verdict:?}");
    // Both of the relay's sessions are TLS, authenticated by the certificate.
    let sessions = db.psql(&format!(
        "SELECT count(*) FILTER (WHERE s.ssl AND s.client_dn = '/CN={user}'), count(*) \
         FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename = '{user}'"
    ));
    eprintln!("relay sessions (cert-authenticated TLS | all): {sessions}");
    let (cert_tls, all) = sessions.split_once('|').unwrap();
    assert_eq!(
        cert_tls, all,
        "every session of the relay uses the certificate"
    );
    assert!(all.parse::<u32>().unwrap() >= 1, "{sessions}");
    relay.signal("TERM");
}

#[tokio::test]
async fn missing_or_wrong_client_certificates_fail_clearly() {
    let s = setup();
    let db = s.cluster.fresh_db();
    let (user, issued) = cert_user(&db, &s.pki, "certy");

    // No certificate at all: the server refuses (28000) and we say what to set.
    let bare = url(&s.cluster, &user, &db.name, "verify-full", "");
    let err = replication(&bare).await.err().expect("needs a certificate");
    let text = err.to_string();
    eprintln!("no certificate: {text}");
    assert_eq!(err.code(), Some("28000"), "{text}");
    assert!(text.contains("sslcert and sslkey"), "{text}");
    assert!(!err.is_transient());
    let err = catalog::connect(&info(&bare)).await.expect_err("catalog");
    assert!(err.to_string().contains("sslcert and sslkey"), "{err}");
    assert!(!err.is_transient());

    // A certificate from a CA the server does not trust: a TLS alert, definite.
    let rogue = s.rogue.issue(&format!("rogue-{user}"), &user, &[]);
    let wrong = url(
        &s.cluster,
        &user,
        &db.name,
        "verify-full",
        &with_cert(&rogue),
    );
    let err = replication(&wrong)
        .await
        .err()
        .expect("untrusted client certificate");
    let text = err.to_string();
    eprintln!("untrusted certificate: {text}");
    assert!(text.contains("rejected the client certificate"), "{text}");
    assert!(
        !err.is_transient(),
        "a certificate problem must not be retried: {text}"
    );
    let err = catalog::connect(&info(&wrong)).await.expect_err("catalog");
    eprintln!("untrusted certificate, catalog: {err}");
    assert!(
        err.to_string().contains("rejected the client certificate"),
        "{err}"
    );
    assert!(!err.is_transient(), "{err}");

    // A valid certificate for another user: CN mismatch.
    let (_other, other_cert) = cert_user(&db, &s.pki, "other");
    let mismatch = url(
        &s.cluster,
        &user,
        &db.name,
        "verify-full",
        &with_cert(&other_cert),
    );
    let err = replication(&mismatch).await.err().expect("CN mismatch");
    let text = err.to_string();
    eprintln!("CN of another user: {text}");
    assert!(text.contains("certificate authentication failed"), "{text}");
    assert!(text.contains("CN must be the user name"), "{text}");

    // sslcert without sslkey is a configuration error, not "no client certificate".
    let half = url(
        &s.cluster,
        &user,
        &db.name,
        "verify-full",
        &format!("&sslcert={}", issued.cert_file.display()),
    );
    let err = replication(&half)
        .await
        .err()
        .expect("half a client certificate");
    assert!(
        err.to_string().contains("sslcert is set but sslkey is not"),
        "{err}"
    );
    // And the right certificate works, on both connections.
    both_connect(&url(
        &s.cluster,
        &user,
        &db.name,
        "verify-full",
        &with_cert(&issued),
    ))
    .await;
}
