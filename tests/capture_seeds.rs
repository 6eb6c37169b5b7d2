//! Captures real pgoutput messages from the server as fuzz seeds.
//!
//! Not part of the suite (it writes into `fuzz/corpus/`): run it when the decoder
//! learns new messages, and commit the corpus:
//! `cargo test --test main capture_seeds -- --ignored`.

use crate::support;

use std::time::Duration;

use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::source::protocol::ReplicationMessage;
use pgoutbox::pg::source::replication::ReplicationClient;
use support::PgCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes fuzz/corpus; run by hand"]
async fn capture_pgoutput_seeds() {
    let db = PgCluster::shared().fresh_db();
    // A publication of everything, so updates, deletes and truncates are captured too.
    db.psql(
        "CREATE TYPE mood AS ENUM ('ok', 'meh'); \
         CREATE TABLE other (id int primary key, m mood, t text, b bytea); \
         ALTER TABLE other REPLICA IDENTITY FULL; \
         CREATE PUBLICATION everything FOR ALL TABLES;",
    );
    let info = ConnInfo::parse(&db.url()).unwrap();
    let mut client = ReplicationClient::connect(&info).await.unwrap();
    let start = client.create_logical_slot("seeds", true).await.unwrap();
    let mut stream = client
        .start_pgoutput(
            "seeds",
            start,
            &["everything".to_owned()],
            std::time::Duration::ZERO,
        )
        .await
        .unwrap();
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES \
           ('order', 'ü-1', 'Created', '{\"a\": [1, 2.5, null], \"s\": \"😀\"}'); \
         BEGIN; \
           INSERT INTO other VALUES (1, 'ok', 'text', '\\x00ff'), (2, NULL, repeat('x', 5000), NULL); \
           UPDATE other SET t = 'changed' WHERE id = 1; \
           UPDATE other SET id = 3 WHERE id = 2; \
           DELETE FROM other WHERE id = 1; \
           SELECT pg_logical_emit_message(true, 'pgoutbox', 'transactional'); \
         COMMIT; \
         SELECT pg_logical_emit_message(false, 'pgoutbox', 'non-transactional'); \
         TRUNCATE other; \
         ALTER TABLE outbox ADD COLUMN extra int; \
         INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, extra) VALUES ('o', '2', 'T', '{}', 7);",
    );
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let decode_dir = corpus.join("pgoutput_decode");
    let framing_dir = corpus.join("copydata_framing");
    std::fs::create_dir_all(&decode_dir).unwrap();
    std::fs::create_dir_all(&framing_dir).unwrap();
    let mut stream_bytes = vec![64u8]; // chunk size selector for the framing target
    let mut count = 0;
    while let Ok(Some(Ok(message))) =
        tokio::time::timeout(Duration::from_secs(5), stream.recv()).await
    {
        let ReplicationMessage::XLogData {
            wal_start,
            wal_end,
            server_time,
            data,
        } = message
        else {
            continue;
        };
        let mut seed = vec![0u8];
        seed.extend_from_slice(&data);
        std::fs::write(
            decode_dir.join(format!("real-{count:03}-{}", char::from(data[0]))),
            &seed,
        )
        .unwrap();
        // The same message as it travelled: CopyData('w' header + payload).
        let body_len = u32::try_from(4 + 25 + data.len()).unwrap();
        stream_bytes.push(b'd');
        stream_bytes.extend_from_slice(&body_len.to_be_bytes());
        stream_bytes.push(b'w');
        stream_bytes.extend_from_slice(&wal_start.0.to_be_bytes());
        stream_bytes.extend_from_slice(&wal_end.0.to_be_bytes());
        stream_bytes.extend_from_slice(&server_time.to_be_bytes());
        stream_bytes.extend_from_slice(&data);
        count += 1;
    }
    std::fs::write(framing_dir.join("real-stream"), &stream_bytes).unwrap();
    assert!(count >= 15, "captured only {count} messages");
    stream.close().await.unwrap();
}
