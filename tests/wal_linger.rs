//! `--wal-linger` (issue 29): the replication stream reads the first event after a
//! quiet spell at once, gathers what follows until the linger is over, and reads a
//! burst of 16 KiB at once whatever the linger. Asserted on the mechanism, with a
//! linger far longer than any wait here, so a loaded machine cannot blur it.

use crate::support;

use std::time::Duration;

use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::source::pgoutput::{ColumnValue, Decoder, PgOutputMessage};
use pgoutbox::pg::source::protocol::ReplicationMessage;
use pgoutbox::pg::source::replication::{ReplicationClient, ReplicationStream};
use support::{PgCluster, WAIT};

/// Far longer than [`SOON`] plus the test's own steps: anything read before it is
/// over was read by the first-read rule or the low-water mark, not by the timer.
const LINGER: Duration = Duration::from_secs(300);
/// What "at once" allows a loaded machine.
const SOON: Duration = Duration::from_secs(30);

/// The aggregate ids of the inserts read within `within`, until `want` were read.
async fn inserts(
    stream: &mut ReplicationStream,
    decoder: &mut Decoder,
    want: usize,
    within: Duration,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + within;
    let mut ids = Vec::new();
    while ids.len() < want {
        let Ok(message) = tokio::time::timeout_at(deadline, stream.recv()).await else {
            break;
        };
        let message = message.expect("stream ended").expect("stream failed");
        if let ReplicationMessage::XLogData { data, .. } = message {
            if let PgOutputMessage::Insert(insert) = decoder.decode(data).unwrap() {
                // aggregate_id, the outbox table's third column.
                match &insert.tuple.columns()[2] {
                    ColumnValue::Text(id) => ids.push(String::from_utf8_lossy(id).into_owned()),
                    other => panic!("aggregate_id as {other:?}"),
                }
            }
        }
    }
    ids
}

/// A fresh database with an insert-only publication of the outbox, and a stream
/// of slot `slot` lingering for `linger`. The database is returned to keep it.
/// The session's `wal_sender_timeout` is 30 minutes: the stream caps a linger at a
/// quarter of it, and [`LINGER`] must apply as given, or a burst read at the end
/// of a capped linger (15 s with the default 60 s) would pass for one read at once.
async fn lingering_stream(
    slot: &str,
    linger: Duration,
) -> (support::TestDb<'static>, ReplicationStream) {
    let db = PgCluster::shared().fresh_db();
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    let url = format!("{}&options=-c%20wal_sender_timeout%3D30min", db.url());
    let info = ConnInfo::parse(&url).unwrap();
    let mut client = ReplicationClient::connect(&info).await.unwrap();
    let start = client.create_logical_slot(slot, true).await.unwrap();
    let stream = client
        .start_pgoutput(slot, start, &["pgoutbox".to_owned()], linger)
        .await
        .unwrap();
    (db, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_event_is_read_at_once_the_next_after_the_linger_or_with_a_burst() {
    let (db, mut stream) = lingering_stream("linger", LINGER).await;
    let mut decoder = Decoder::new();
    let insert = |id: &str, pad: usize| {
        db.psql(&format!(
            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('linger', '{id}', 'Lingered', jsonb_build_object('pad', repeat('x', {pad})))"
        ))
    };

    // A quiet stream: the first event is read as it arrives.
    insert("first", 10);
    assert_eq!(
        inserts(&mut stream, &mut decoder, 1, SOON).await,
        ["first"],
        "the first event after a quiet spell must be read at once"
    );
    // The stream now lingers: small events wait (for LINGER, far beyond this wait).
    insert("second", 10);
    insert("third", 10);
    let early = inserts(&mut stream, &mut decoder, 1, Duration::from_secs(2)).await;
    assert!(
        early.is_empty(),
        "read {early:?} while lingering: small events must wait for the linger"
    );
    // A burst past the low-water mark (16 KiB) is read at once, with what waited
    // before it, in order.
    insert("burst", 40_000);
    assert_eq!(
        inserts(&mut stream, &mut decoder, 3, SOON).await,
        ["second", "third", "burst"],
        "a 40 KB event must be read at once (SO_RCVLOWAT), after what waited"
    );
    stream.close().await.unwrap();
}

/// With no linger the stream reads every event as it arrives (the setting `0`
/// and the `tail` command).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_linger_reads_every_event_as_it_arrives() {
    let (db, mut stream) = lingering_stream("eager", Duration::ZERO).await;
    let mut decoder = Decoder::new();
    for id in ["one", "two", "three"] {
        db.psql(&format!(
            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('linger', '{id}', 'Eager', '{{}}')"
        ));
        assert_eq!(
            inserts(&mut stream, &mut decoder, 1, WAIT).await,
            [id],
            "each event is read as it arrives"
        );
    }
    stream.close().await.unwrap();
}

/// `--wal-linger` from the flag, the environment and the config file, shown by
/// `config show` (flag > env > file > default 2 ms).
#[test]
fn wal_linger_comes_from_flag_env_and_the_config_file() {
    let dir = support::temp_dir("linger-config");
    let file = dir.join("pgoutbox.toml");
    std::fs::write(&file, "brokers = \"b:1\"\nwal_linger = \"5ms\"\n").unwrap();
    let show =
        |args: &[&str], env: &[(&str, &str)]| support::config_show_line(args, env, "wal_linger");
    assert_eq!(show(&["--brokers", "b:1"], &[]), "wal_linger = \"2ms\"");
    assert_eq!(
        show(&["--brokers", "b:1", "--wal-linger", "0"], &[]),
        "wal_linger = \"0s\""
    );
    assert_eq!(
        show(&["--brokers", "b:1"], &[("PGOUTBOX_WAL_LINGER", "10ms")]),
        "wal_linger = \"10ms\""
    );
    let file = file.to_str().unwrap();
    assert_eq!(show(&["--config", file], &[]), "wal_linger = \"5ms\"");
    assert_eq!(
        show(&["--config", file, "--wal-linger", "1ms"], &[]),
        "wal_linger = \"1ms\""
    );
}

/// A linger past a second is refused before anything connects, naming the fix.
#[test]
fn a_linger_past_a_second_is_refused() {
    let mut p = support::Pgoutbox::spawn(&[
        "run",
        "--database-url",
        "postgres://x@127.0.0.1:1/db",
        "--brokers",
        "b:1",
        "--wal-linger",
        "5s",
    ]);
    let status = p.wait_exit(support::WAIT);
    assert!(!status.success());
    let err = p.stderr();
    assert!(
        err.contains("--wal-linger 5s is longer than 1s") && err.contains("the default is 2ms"),
        "{err}"
    );
}

/// An event that arrives while the stream lingers is read when the linger is over,
/// with nothing else arriving: lowering the mark must wake the stream by itself
/// (else the last events of a burst would wait for the next one, or for a
/// keepalive tens of seconds later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_event_of_a_burst_is_read_when_the_linger_ends() {
    const SHORT: Duration = Duration::from_secs(1);
    let (db, mut stream) = lingering_stream("burst_end", SHORT).await;
    let mut decoder = Decoder::new();
    let insert = |id: &str| {
        db.psql(&format!(
            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('linger', '{id}', 'Lingered', '{{}}')"
        ))
    };
    insert("first");
    assert_eq!(inserts(&mut stream, &mut decoder, 1, SOON).await, ["first"]);
    let first_read = tokio::time::Instant::now();
    insert("last");
    assert_eq!(
        inserts(&mut stream, &mut decoder, 1, SOON).await,
        ["last"],
        "the event that came during the linger must be read when it ends"
    );
    let waited = first_read.elapsed();
    assert!(
        waited >= SHORT.mul_f64(0.9),
        "read {waited:?} after the first: before the {SHORT:?} linger was over"
    );
    stream.close().await.unwrap();
}
