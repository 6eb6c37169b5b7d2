//! The relay itself with an imported Debezium configuration: the golden rows go
//! into PostgreSQL, `pgoutbox run --config <imported TOML>` relays them to tansu
//! (topics of 6 partitions), a consumer reads them back, and every record is
//! compared with Debezium's: topic, partition (as the broker stored it), key,
//! value, headers in order (but Debezium's `__debezium.context.*`), and the
//! timestamp the imported `record_timestamp` gives (`created_at` when the connector
//! named a timestamp column, else the commit time; Debezium stamps its processing
//! time).
//!
//! Configurations: (a) StringConverter, (b) JsonConverter without schemas, (c) the
//! worker default (JsonConverter with schemas), each with
//! `event_type:header:eventType`; the envelope placement and expanded payloads
//! under (c).
//!
//! Rows left out: those pgoutbox stops on by default (NULL/empty key, a text
//! payload that is not JSON), the 1.03 MB payload (above librdkafka's default
//! message.max.bytes), which are compared byte for byte in `golden` instead, and
//! rows Debezium failed the task on (no golden record).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;
use serde_json::Value;

use super::fixtures::{self, Row, CREATED_AT_MS};
use crate::support::kafka::{Broker, Consumed, Reader};
use crate::support::workload::start_relay;
use crate::support::{temp_dir, PgCluster, WAIT};

const LEFT_OUT: [&str; 5] = [
    "null-key",
    "empty-key",
    "text-not-json",
    "text-controls",
    "big-payload",
];

const TOPICS: [&str; 3] = [
    "outbox.event.order",
    "outbox.event.customer",
    "outbox.event.invoice",
];

async fn create_topics(brokers: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client");
    let topics: Vec<NewTopic<'_>> = TOPICS
        .iter()
        .map(|t| NewTopic::new(t, 6, TopicReplication::Fixed(1)))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin
        .create_topics(&topics, &options)
        .await
        .expect("create topics")
    {
        result.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
}

async fn insert_rows(db: &crate::support::TestDb<'_>, rows: &[Row], tables: &Value) {
    let client = db.client().await;
    for (ord, row) in rows.iter().enumerate() {
        let t = |column: &str| fixtures::column_type(tables, &row.table, column);
        let sql = format!(
            "INSERT INTO {} (ord, id, aggregate_type, aggregate_id, event_type, tenant, payload) \
             VALUES ($1::text::int, $2::text::uuid, $3, $4::text::{}, $5, $6::text::{}, \
             $7::text::{})",
            row.table,
            t("aggregate_id"),
            t("tenant"),
            t("payload")
        );
        let c = |name: &str| row.columns.get(name).cloned().flatten();
        let ord = ord.to_string();
        client
            .execute(
                &sql,
                &[
                    &ord,
                    &c("id"),
                    &c("aggregate_type"),
                    &c("aggregate_id"),
                    &c("event_type"),
                    &c("tenant"),
                    &c("payload"),
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("insert {}: {e}", row.label));
    }
}

/// Relay the golden rows with the configuration imported from fixture `name` and
/// compare every record read back with Debezium's.
async fn relay_matches_debezium(name: &str) {
    let doc = fixtures::load(&format!("{name}.json"));
    let (rows, tables) = fixtures::rows();
    // Rows Debezium failed the task on have no golden bytes.
    let failed = |label: &str| {
        doc["records"]
            .as_array()
            .expect("records")
            .iter()
            .any(|r| r["row"] == label && r.get("converter_error").is_some())
    };
    let rows: Vec<Row> = rows
        .into_iter()
        .filter(|r| !LEFT_OUT.contains(&r.label.as_str()) && !failed(&r.label))
        .collect();
    let db = PgCluster::shared().fresh_db();
    // The golden tables instead of the harness's default outbox.
    db.psql(&format!(
        "DROP TABLE IF EXISTS public.outbox; {}",
        tables_sql()
    ));
    let broker = Broker::start();
    create_topics(&broker.addr()).await;

    let imported =
        pgoutbox::config::debezium::import(&doc["connector"].to_string()).expect("import");
    let dir = temp_dir("debezium-relay");
    let config = dir.join("imported.toml");
    std::fs::write(&config, &imported.toml).expect("write config");
    let args: Vec<String> = [
        "run",
        "--config",
        config.to_str().expect("path"),
        "--database-url",
        &db.url(),
        "--brokers",
        &broker.addr(),
        "--slot",
        &db.name,
        "--publication",
        &db.name,
        "--http-addr",
        "127.0.0.1:0",
        "--state-dir",
        "off",
    ]
    .map(String::from)
    .to_vec();
    let relay = start_relay(&args);
    let before = unix_ms();
    insert_rows(&db, &rows, &tables).await;
    let stamps = if imported.toml.contains("record_timestamp = \"commit\"") {
        Stamps::CommitBetween(before, unix_ms())
    } else {
        Stamps::CreatedAt
    };

    let topics: Vec<String> = TOPICS.iter().map(|t| (*t).to_owned()).collect();
    let mut reader = Reader::new(&broker.addr(), &topics);
    reader.read_until("every golden row", WAIT * 2, |r| r.len() >= rows.len());
    reader.settle(Duration::from_secs(1));
    // Seen once under load: every row twice (the relay resent the stream after a
    // session ended); its warnings say why.
    let warnings = || {
        let log = relay.stderr();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
        lines.join("\n")
    };
    assert_eq!(
        reader.records.len(),
        rows.len(),
        "one record per row; the relay's warnings:\n{}",
        warnings()
    );
    for row in &rows {
        let id = row.columns["id"].as_deref().expect("id");
        let ours = reader
            .records
            .iter()
            .find(|r| r.id() == id)
            .unwrap_or_else(|| panic!("{}: not delivered", row.label));
        let golden = golden_record(&doc, &row.label);
        assert_same(name, &row.label, golden, ours, stamps);
    }
}

fn tables_sql() -> String {
    fixtures::load("rows.json")["schema_sql"]
        .as_str()
        .expect("schema_sql")
        .to_owned()
}

fn golden_record<'a>(doc: &'a Value, label: &str) -> &'a Value {
    doc["records"]
        .as_array()
        .expect("records")
        .iter()
        .find(|r| r["row"] == label)
        .unwrap_or_else(|| panic!("no golden record for {label}"))
}

fn assert_same(name: &str, label: &str, golden: &Value, ours: &Consumed, stamps: Stamps) {
    let what = format!("{name}, row {label}");
    assert_eq!(golden["topic"], ours.topic.as_str(), "{what}: topic");
    assert_eq!(
        golden["partition"].as_i64(),
        Some(i64::from(ours.partition)),
        "{what}: partition"
    );
    assert_eq!(fixtures::bytes_of(&golden["key"]), ours.key, "{what}: key");
    assert_eq!(
        fixtures::bytes_of(&golden["value"]),
        ours.value,
        "{what}: value"
    );
    let theirs = fixtures::golden_headers(golden);
    assert_eq!(theirs, ours.header_list, "{what}: headers");
    let stamp = ours.timestamp.expect("a timestamp");
    match stamps {
        Stamps::CreatedAt => assert_eq!(stamp, CREATED_AT_MS, "{what}: timestamp = created_at"),
        Stamps::CommitBetween(from, to) => assert!(
            (from..=to).contains(&stamp),
            "{what}: timestamp {stamp} = the commit time, within the test's [{from}, {to}]"
        ),
    }
}

/// What the imported `record_timestamp` makes the records' timestamps.
#[derive(Clone, Copy)]
enum Stamps {
    CreatedAt,
    /// Unix ms: the rows were committed in this window.
    CommitBetween(i64, i64),
}

fn unix_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(now.expect("clock").as_millis()).expect("ms")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_worker_default_converters_relayed_match_debezium() {
    relay_matches_debezium("header.worker-default").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_json_converter_relayed_matches_debezium() {
    relay_matches_debezium("header.json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_converter_relayed_matches_debezium() {
    relay_matches_debezium("header.string").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_with_schemas_relayed_matches_debezium() {
    // One envelope schema per payload schema for the whole session, across tables.
    relay_matches_debezium("envelope.json-schemas").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expanded_payloads_with_schemas_relayed_match_debezium() {
    relay_matches_debezium("header-expand.json-schemas").await;
}
