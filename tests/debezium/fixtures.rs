//! The golden fixtures and pgoutbox's encoding of the same rows.
//!
//! A row goes through the same steps as in the relay (`pipeline::relay`): column
//! mapping → record → header placements → poison checks → converters. The
//! configuration is the TOML `config import-debezium` writes for the fixture's
//! connector, read the way `--config` reads it (each key is a flag).

use std::collections::BTreeMap;

use base64::Engine as _;
use bytes::Bytes;
use clap::Parser as _;
use pgoutbox::cli::{Cli, Command};
use pgoutbox::outbox::invalid::{self, Invalid};
use pgoutbox::outbox::record::KafkaRecord;
use pgoutbox::outbox::tables::TableSpec;
use pgoutbox::pg::source::pgoutput::{
    ColumnValue, Relation, RelationColumn, ReplicaIdentity, TupleData,
};
use pgoutbox::run::RunConfig;
use serde_json::Value;

/// Partitions of the golden topics.
pub const PARTITIONS: u32 = 6;

/// `created_at` of every golden row, ms since the Unix epoch (2026-12-01 10:00:00Z).
pub const CREATED_AT_MS: i64 = 1_796_119_200_000;
/// 2000-01-01 (PostgreSQL's epoch) in Unix milliseconds.
const PG_EPOCH_UNIX_MS: i64 = 946_684_800_000;

/// Debezium's context headers, which pgoutbox does not write.
pub const CONTEXT_HEADERS: [&str; 4] = [
    "__debezium.context.connectorLogicalName",
    "__debezium.context.taskId",
    "__debezium.context.connectorName",
    "__debezium.context.runId",
];

/// A fixture file, parsed.
pub fn load(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/debezium/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One golden row.
#[derive(Debug, Clone)]
pub struct Row {
    pub label: String,
    pub table: String,
    /// Column → PostgreSQL text (None = NULL).
    pub columns: BTreeMap<String, Option<String>>,
}

/// The rows of `rows.json` and each table's payload type and NOT NULL columns.
pub fn rows() -> (Vec<Row>, Value) {
    let doc = load("rows.json");
    let rows = doc["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| Row {
            label: r["label"].as_str().expect("label").to_owned(),
            table: r["table"].as_str().expect("table").to_owned(),
            columns: r["columns"]
                .as_object()
                .expect("columns")
                .iter()
                .map(|(k, v)| (k.clone(), column_text(v)))
                .collect(),
        })
        .collect();
    (rows, doc["tables"].clone())
}

fn column_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            let g = &o["generate"];
            let count = usize::try_from(g["count"].as_u64().expect("count")).expect("count");
            Some(format!(
                "{}{}{}",
                g["prefix"].as_str().expect("prefix"),
                g["repeat"].as_str().expect("repeat").repeat(count),
                g["suffix"].as_str().expect("suffix")
            ))
        }
        other => panic!("unexpected column value {other}"),
    }
}

/// The run configuration `config import-debezium` makes of `connector`, read as
/// `--config` reads the TOML (every key a flag; brokers and state are dummies).
pub fn imported(connector: &Value) -> RunConfig {
    let imported = pgoutbox::config::debezium::import(&connector.to_string()).expect("import");
    let table: toml::Table = imported.toml.parse().expect("imported TOML");
    let mut args = vec!["pgoutbox".to_owned(), "run".to_owned()];
    for (key, value) in &table {
        let flag = format!("--{}", key.replace('_', "-"));
        match value {
            toml::Value::Array(items) => {
                for item in items {
                    args.push(flag.clone());
                    args.push(item.as_str().expect("string item").to_owned());
                }
            }
            toml::Value::Boolean(true) => args.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::String(s) => args.extend([flag, s.clone()]),
            other => args.extend([flag, other.to_string()]),
        }
    }
    args.extend(["--state-dir".to_owned(), "off".to_owned()]);
    let cli = Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let Command::Run(run) = cli.command else {
        panic!("not a run command")
    };
    pgoutbox::config::run(&run, &Default::default()).expect("imported configuration")
}

/// The relation PostgreSQL sends for a golden table.
pub fn relation(table: &str, tables: &Value) -> Relation {
    let (schema, name) = table.split_once('.').expect("schema.table");
    let oid = |column: &str| match column_type(tables, table, column) {
        "jsonb" => 3802,
        "int8" => 20,
        "uuid" => 2950,
        _ => 25,
    };
    let columns = [
        ("ord", 23),
        ("id", 2950),
        ("aggregate_type", 25),
        ("aggregate_id", oid("aggregate_id")),
        ("event_type", 25),
        ("tenant", oid("tenant")),
        ("payload", oid("payload")),
        ("created_at", 1184),
    ];
    Relation {
        xid: None,
        id: 1,
        namespace: schema.to_owned(),
        name: name.to_owned(),
        replica_identity: ReplicaIdentity::Default,
        columns: columns
            .iter()
            .map(|(n, oid)| RelationColumn {
                flags: 0,
                name: (*n).to_owned(),
                type_oid: *oid,
                type_modifier: -1,
            })
            .collect(),
    }
}

/// The PostgreSQL type of a golden column (`rows.json` lists those not `text`).
pub fn column_type<'a>(tables: &'a Value, table: &str, column: &str) -> &'a str {
    tables[table][column].as_str().unwrap_or("text")
}

/// The table's spec in `cfg`, with its NOT NULL columns as `run` reads them from
/// the catalog when a converter writes schemas.
pub fn spec(cfg: &RunConfig, table: &str, tables: &Value) -> TableSpec {
    let mut spec = cfg
        .pipeline
        .tables
        .iter()
        .find(|s| s.table.to_string() == table)
        .unwrap_or_else(|| panic!("{table} not imported"))
        .clone();
    if cfg.pipeline.format.writes_schemas() {
        spec.mapping.not_null = tables[table]["not_null"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().expect("name").to_owned())
                    .collect()
            })
            .unwrap_or_default();
    }
    spec
}

/// What pgoutbox makes of `row`: the record as it would be sent (converters
/// applied even to a poison row, to compare its bytes) and the poison cause.
pub fn encode(
    cfg: &RunConfig,
    spec: &TableSpec,
    mapping: &pgoutbox::outbox::event::ResolvedMapping,
    row: &Row,
) -> (KafkaRecord, Option<Invalid>) {
    let t = |s: &str| ColumnValue::Text(Bytes::from(s.to_owned()));
    let value = |name: &str| match row.columns.get(name).cloned().flatten() {
        Some(s) => t(&s),
        None => ColumnValue::Null,
    };
    let tuple = TupleData(vec![
        t("0"),
        value("id"),
        value("aggregate_type"),
        value("aggregate_id"),
        value("event_type"),
        value("tenant"),
        value("payload"),
        t("2026-12-01 10:00:00+00"),
    ]);
    let event = mapping.event(&tuple);
    // The stamp as the imported `record_timestamp` makes it, for a row committed
    // at its `created_at` (the golden rows' fixed value): the bytes are what these
    // comparisons are about; `relay` checks the real stamp of a real commit.
    let committed_at = (CREATED_AT_MS - PG_EPOCH_UNIX_MS) * 1000;
    let stamp = cfg
        .pipeline
        .record_timestamp
        .millis(event.timestamp.as_deref(), committed_at);
    let mut record = KafkaRecord::from_event(&event, &spec.template, stamp);
    record.placed = mapping.headers(&event);
    let invalid = invalid::check(&record, mapping.payload_unchecked());
    cfg.pipeline.format.encode(&mut record, &event, mapping);
    (record, invalid)
}

/// Base64 of a fixture field, decoded (None for JSON null).
pub fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    v.as_str().map(|s| {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("base64")
    })
}

/// A golden record's headers in order, but Debezium's context headers (which
/// pgoutbox does not write): name and value (`None`: a null value).
pub fn golden_headers(golden: &Value) -> Vec<(String, Option<Vec<u8>>)> {
    golden["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| {
            let name = h["name"].as_str().expect("name").to_owned();
            (name, bytes_of(&h["value"]))
        })
        .filter(|(n, _)| !CONTEXT_HEADERS.contains(&n.as_str()))
        .collect()
}

/// Kafka's Java default partitioner for a keyed record: murmur2 (seed 0x9747b28c),
/// sign bit cleared, modulo the partition count.
pub fn java_partition(key: &[u8], partitions: u32) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ u32::try_from(key.len()).expect("key length");
    let chunks = key.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    (h & 0x7fff_ffff) % partitions
}
