//! The replication connection survives a consumer that stops reading: status
//! updates keep flowing on the timer, so `wal_sender_timeout` never fires.

use crate::support;

use std::time::Duration;

use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::source::pgoutput::{Decoder, PgOutputMessage};
use pgoutbox::pg::source::protocol::ReplicationMessage;
use pgoutbox::pg::source::replication::{ReplicationClient, QUEUE_BYTES};
use support::{wait_for, PgCluster, WAIT};

/// The relay's default `--wal-linger`: these guarantees hold while the stream
/// lingers.
const LINGER: Duration = Duration::from_millis(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_consumer_survives_a_two_second_wal_sender_timeout() {
    let db = PgCluster::shared().fresh_db();
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    // wal_sender_timeout is settable per connection (PGC_USERSET) since PostgreSQL 12.
    let url = format!("{}&options=-c%20wal_sender_timeout%3D2s", db.url());
    let info = ConnInfo::parse(&url).unwrap();
    let mut client = ReplicationClient::connect(&info).await.unwrap();
    assert_eq!(
        client.wal_sender_timeout().await.unwrap(),
        Some(Duration::from_secs(2))
    );
    let start = client.create_logical_slot("paused", true).await.unwrap();
    let mut stream = client
        .start_pgoutput("paused", start, &["pgoutbox".to_owned()], LINGER)
        .await
        .unwrap();
    assert_eq!(stream.status_interval(), Duration::from_secs(1));
    let walsender =
        db.psql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'paused'");

    // ~8 MB of WAL to decode: far more than socket buffers plus our queue hold, so
    // the walsender is blocked writing to us while we do not read.
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         SELECT 'load', g::text, 'Filled', jsonb_build_object('pad', repeat(md5(g::text), 64)) \
         FROM generate_series(1, 4000) g",
    );
    let sent_before = stream.status_updates_sent();
    tokio::time::sleep(Duration::from_secs(10)).await; // the paused consumer (the point of the test)
    let sent_during = stream.status_updates_sent() - sent_before;
    assert!(
        sent_during >= 5,
        "status updates must flow while paused, sent {sent_during}"
    );

    let mut decoder = Decoder::new();
    let mut inserts = 0;
    let deadline = tokio::time::Instant::now() + WAIT;
    while inserts < 4000 {
        let message = tokio::time::timeout_at(deadline, stream.recv())
            .await
            .expect("stream stalled")
            .expect("stream ended")
            .expect("stream failed: the connection did not survive the pause");
        if let ReplicationMessage::XLogData { data, .. } = message {
            if let PgOutputMessage::Insert(_) = decoder.decode(data).unwrap() {
                inserts += 1;
            }
        }
    }
    let after = db.psql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'paused'");
    assert_eq!(
        walsender, after,
        "the same walsender must still be serving us"
    );
    stream.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_stream_is_not_mistaken_for_a_dead_one() {
    let db = PgCluster::shared().fresh_db();
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    let url = format!("{}&options=-c%20wal_sender_timeout%3D2s", db.url());
    let info = ConnInfo::parse(&url).unwrap();
    let mut client = ReplicationClient::connect(&info).await.unwrap();
    let start = client.create_logical_slot("idle", true).await.unwrap();
    let mut stream = client
        .start_pgoutput("idle", start, &["pgoutbox".to_owned()], LINGER)
        .await
        .unwrap();
    assert_eq!(stream.receive_timeout(), Duration::from_secs(2));
    let walsender = db.psql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'idle'");

    // Nothing is written, and like the relay we confirm each keepalive's WAL end, so
    // the server has no reason of its own to talk: only the stream's requests for a
    // reply keep it from giving the connection up after 2 s of silence.
    let mut keepalives = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(message) = tokio::time::timeout_at(deadline, stream.recv()).await {
        match message.expect("stream ended") {
            Ok(ReplicationMessage::PrimaryKeepalive { wal_end, .. }) => {
                stream.confirm(wal_end);
                keepalives += 1;
            }
            Ok(_) => {}
            Err(err) => panic!("a healthy idle stream was given up: {err}"),
        }
    }
    eprintln!("idle 10 s with a 2 s receive timeout: {keepalives} keepalives");
    let after = db.psql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'idle'");
    assert_eq!(walsender, after, "the same walsender must still serve us");
    stream.close().await.unwrap();
}

/// Issue 29: a paused consumer of 100 KB rows used to find up to 1,024 of them
/// (100 MB) queued towards it, outside the relay's in-flight window. The queue stops
/// at [`QUEUE_BYTES`] (plus the message that crossed it), and reading resumes the
/// stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_consumer_of_large_rows_queues_at_most_the_bytes_budget() {
    const ROWS: usize = 40;
    const PAD: usize = 100_000;
    let db = PgCluster::shared().fresh_db();
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    let info = ConnInfo::parse(&db.url()).unwrap();
    let mut client = ReplicationClient::connect(&info).await.unwrap();
    let start = client.create_logical_slot("large", true).await.unwrap();
    let mut stream = client
        .start_pgoutput("large", start, &["pgoutbox".to_owned()], LINGER)
        .await
        .unwrap();
    // 40 rows of ~100 KB (4 MB, four times the budget), one transaction each.
    for i in 0..ROWS {
        db.psql(&format!(
            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('load', '{i}', 'Large', jsonb_build_object('pad', repeat(md5('{i}'), {})))",
            PAD / 32
        ));
    }
    wait_for("the queue to reach its bytes budget", WAIT, || {
        (stream.queued_bytes() >= QUEUE_BYTES).then_some(())
    });
    let queued = stream.queued_bytes();
    assert!(
        queued < QUEUE_BYTES + PAD + 1024,
        "{queued} bytes queued: more than the budget plus one row"
    );

    let mut decoder = Decoder::new();
    let mut inserts = 0;
    let deadline = tokio::time::Instant::now() + WAIT;
    while inserts < ROWS {
        let message = tokio::time::timeout_at(deadline, stream.recv())
            .await
            .expect("stream stalled: reading did not resume the queue")
            .expect("stream ended")
            .expect("stream failed");
        if let ReplicationMessage::XLogData { data, .. } = message {
            if let PgOutputMessage::Insert(_) = decoder.decode(data).unwrap() {
                inserts += 1;
            }
        }
    }
    assert!(
        stream.queued_bytes() < QUEUE_BYTES,
        "{}",
        stream.queued_bytes()
    );
    // One row of 2 MiB: the read buffer grows for it (and is given back once it is
    // parsed); the row arrives whole.
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('load', 'big', 'Large', jsonb_build_object('pad', repeat(md5('big'), 65536)))",
    );
    let big = loop {
        let message = tokio::time::timeout_at(deadline, stream.recv())
            .await
            .expect("stream stalled on a 2 MiB row")
            .expect("stream ended")
            .expect("stream failed");
        if let ReplicationMessage::XLogData { data, .. } = message {
            let len = data.len();
            if let PgOutputMessage::Insert(_) = decoder.decode(data).unwrap() {
                break len;
            }
        }
    };
    assert!(big > 2 << 20, "the 2 MiB row arrived as {big} bytes");
    stream.close().await.unwrap();
}
