//! Authentication of the replication connection against a real server:
//! SCRAM-SHA-256, md5, trust, and clear, fast errors for a wrong password.

use crate::support;

use std::time::{Duration, Instant};

use pgoutbox::pg::client::connection::PgError;
use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::source::replication::ReplicationClient;
use support::{PgCluster, Pgoutbox, TestDb, WAIT};

/// Create a LOGIN REPLICATION role whose password is stored (and checked) with `method`.
fn user(db: &TestDb<'_>, method: &str, password: &str) -> String {
    let name = format!("{method}_{}", db.name);
    let encryption = if method == "md5" {
        "md5"
    } else {
        "scram-sha-256"
    };
    db.psql(&format!(
        "SET password_encryption = '{encryption}'; \
         CREATE ROLE {name} LOGIN REPLICATION PASSWORD '{password}'; \
         GRANT {method}_users TO {name};"
    ));
    name
}

fn url(db: &TestDb<'_>, user: &str, password: &str) -> String {
    format!(
        "postgres://{user}:{password}@127.0.0.1:{}/{}?sslmode=disable",
        db.cluster.port, db.name
    )
}

async fn connect(url: &str) -> Result<ReplicationClient, PgError> {
    ReplicationClient::connect(&ConnInfo::parse(url).unwrap()).await
}

#[tokio::test]
async fn scram_sha_256_user_connects_and_identifies() {
    let db = PgCluster::shared().fresh_db();
    let name = user(&db, "scram", "s3cr3t p@ss/word");
    let encoded = "s3cr3t%20p%40ss%2Fword";
    let mut client = connect(&url(&db, &name, encoded))
        .await
        .expect("scram login");
    let id = client.identify_system().await.unwrap();
    assert_eq!(id.dbname.as_deref(), Some(db.name.as_str()));
    assert!(id.xlogpos.0 > 0);
    let stored = db.psql(&format!(
        "SELECT left(rolpassword, 13) FROM pg_authid WHERE rolname = '{name}'"
    ));
    assert_eq!(
        stored, "SCRAM-SHA-256",
        "the role must really be a SCRAM role"
    );
}

#[tokio::test]
async fn md5_user_connects() {
    let db = PgCluster::shared().fresh_db();
    let name = user(&db, "md5", "m5pass");
    let mut client = connect(&url(&db, &name, "m5pass"))
        .await
        .expect("md5 login");
    client.identify_system().await.unwrap();
    let stored = db.psql(&format!(
        "SELECT left(rolpassword, 3) FROM pg_authid WHERE rolname = '{name}'"
    ));
    assert_eq!(stored, "md5");
}

#[tokio::test]
async fn wrong_password_is_a_clear_error_not_a_hang() {
    let db = PgCluster::shared().fresh_db();
    for method in ["scram", "md5"] {
        let name = user(&db, method, "right");
        let started = Instant::now();
        let err = match connect(&url(&db, &name, "wrong")).await {
            Ok(_) => panic!("{method}: wrong password accepted"),
            Err(e) => e,
        };
        assert!(
            started.elapsed() < WAIT,
            "{method}: took {:?}",
            started.elapsed()
        );
        assert_eq!(err.code(), Some("28P01"), "{method}: {err}");
        let text = err.to_string();
        assert!(
            text.contains("password authentication failed"),
            "{method}: {text}"
        );
        assert!(
            text.contains(&name),
            "{method}: error should name the user: {text}"
        );
        assert!(
            !text.contains("wrong"),
            "{method}: error must not echo the password: {text}"
        );
        assert!(!err.is_transient(), "a wrong password must not be retried");
    }
}

#[tokio::test]
async fn missing_password_says_where_to_put_it() {
    let db = PgCluster::shared().fresh_db();
    let name = user(&db, "scram", "pw");
    let info = ConnInfo::parse_with_env(
        &format!(
            "postgres://{name}@127.0.0.1:{}/{}?sslmode=disable",
            db.cluster.port, db.name
        ),
        &|_| None,
    )
    .unwrap();
    let err = ReplicationClient::connect(&info)
        .await
        .err()
        .expect("must fail");
    let text = err.to_string();
    assert!(text.contains("none was given"), "{text}");
    assert!(text.contains("PGPASSWORD"), "{text}");
}

#[test]
fn tail_reports_wrong_password_and_exits_nonzero() {
    let db = PgCluster::shared().fresh_db();
    let name = user(&db, "scram", "right");
    let url = url(&db, &name, "wrong");
    let mut tail = Pgoutbox::spawn(&["tail", "--database-url", &url]);
    let status = tail.wait_exit(WAIT);
    assert!(!status.success());
    let stderr = tail.stderr();
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
    assert!(!stderr.contains(":wrong@"), "{stderr}");
}

#[tokio::test]
async fn unreachable_port_fails_fast_with_the_target_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let err = connect(&format!(
        "postgres://u@127.0.0.1:{port}/db?sslmode=disable&connect_timeout=5"
    ))
    .await
    .err()
    .expect("nothing listens there");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
    assert!(err.is_transient());
}

/// The password file is looked up for each host on its own, as libpq does: the first
/// host (unreachable) has a line with another password; the host that answers gets
/// its own line, on the replication and the SQL connection alike.
#[tokio::test]
async fn password_file_lines_apply_per_host() {
    let db = PgCluster::shared().fresh_db();
    let name = user(&db, "scram", "right-one");
    let port = db.cluster.port;
    let file = support::temp_dir("pgpass").join("pgpass");
    std::fs::write(
        &file,
        format!("127.0.0.1:1:*:{name}:wrong-one\n127.0.0.1:{port}:*:{name}:right-one\n"),
    )
    .unwrap();
    let conn = format!(
        "host=127.0.0.1,127.0.0.1 port=1,{port} user={name} dbname={} sslmode=disable",
        db.name
    );
    let passfile = file.display().to_string();
    let env = move |key: &str| (key == "PGPASSFILE").then(|| passfile.clone());
    let info = ConnInfo::parse_with_env(&conn, &env).unwrap();
    let mut client = ReplicationClient::connect(&info)
        .await
        .expect("the second host's own password");
    client.identify_system().await.unwrap();
    pgoutbox::pg::source::catalog::connect(&info)
        .await
        .expect("the SQL connection with the second host's own password");
}
