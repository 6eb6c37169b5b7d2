//! Byte comparisons with Debezium's golden records, one test per configuration:
//! (a) StringConverter, (b) JsonConverter without schemas, (c) JsonConverter with
//! schemas (set explicitly, and left to the worker's default), each with
//! `event_type:header:eventType`, with an envelope placement, and with
//! `table.expand.json.payload=true`.
//!
//! Every golden record is compared field by field; what may differ is asserted by
//! name, so a new difference fails the test:
//! - headers: Debezium's four `__debezium.context.*` headers (pgoutbox has none);
//! - timestamp: Debezium's processing time against pgoutbox's `created_at`;
//! - poison rows: pgoutbox stops by default on a NULL/empty key and a text payload
//!   that is not JSON (their bytes are still compared: a delivering policy sends
//!   exactly Debezium's);
//! - rows on which Debezium fails the task (expansion with JsonConverter): listed.

use std::collections::{BTreeMap, BTreeSet};

use pgoutbox::outbox::connect::EnvelopeCache;
use serde_json::Value;

use super::fixtures::{self, java_partition, Row, CONTEXT_HEADERS, CREATED_AT_MS, PARTITIONS};

/// What a comparison found.
#[derive(Debug, Default)]
struct Outcome {
    /// Rows compared, and those whose field differs, by field.
    compared: usize,
    differs: BTreeMap<&'static str, Vec<String>>,
    /// Rows pgoutbox stops on by default, with the cause.
    poison: BTreeSet<(String, &'static str)>,
    /// Rows Debezium failed the task on (no golden bytes).
    debezium_failed: BTreeSet<String>,
}

fn compare(name: &str) -> Outcome {
    let doc = fixtures::load(&format!("{name}.json"));
    let cfg = fixtures::imported(&doc["connector"]);
    let (rows, tables) = fixtures::rows();
    let per_row = doc["engine_run"] == "per-row";
    let mut out = Outcome::default();
    for failure in doc["task_failures"].as_array().expect("task_failures") {
        out.debezium_failed
            .insert(failure["row"].as_str().expect("row").to_owned());
    }
    let mut mappings = BTreeMap::new();
    // Debezium's envelope schema cache lives as long as its task (one engine per
    // row in per-row fixtures) and is shared by the tables.
    let mut cache = EnvelopeCache::default();
    for golden in doc["records"].as_array().expect("records") {
        let label = golden["row"].as_str().expect("row");
        let row = rows.iter().find(|r| r.label == label).expect("golden row");
        if golden.get("converter_error").is_some() {
            out.debezium_failed.insert(label.to_owned());
            continue;
        }
        let spec = fixtures::spec(&cfg, &row.table, &tables);
        let relation = fixtures::relation(&row.table, &tables);
        if per_row {
            mappings.clear();
            cache = EnvelopeCache::default();
        }
        let mapping = mappings.entry(row.table.clone()).or_insert_with(|| {
            let resolved = spec.mapping.resolve(&relation).expect("mapping");
            resolved.with_envelope_cache(&cache)
        });
        let (record, invalid) = fixtures::encode(&cfg, &spec, mapping, row);
        if let Some(invalid) = invalid {
            out.poison.insert((label.to_owned(), invalid.cause.name()));
        }
        check_record(&mut out, row, golden, &record);
    }
    out
}

fn check_record(
    out: &mut Outcome,
    row: &Row,
    golden: &Value,
    record: &pgoutbox::outbox::record::KafkaRecord,
) {
    out.compared += 1;
    let mut differ = |field: &'static str, same: bool| {
        if !same {
            out.differs
                .entry(field)
                .or_default()
                .push(row.label.clone());
        }
    };
    differ("topic", golden["topic"] == record.topic.as_str());
    let key = fixtures::bytes_of(&golden["key"]);
    differ("key", key.as_deref() == record.key.as_deref());
    // Partition: Java's murmur2 over pgoutbox's key bytes against the golden.
    let ours = record.key.as_deref().map(|k| java_partition(k, PARTITIONS));
    differ(
        "partition",
        golden["partition"].as_u64() == ours.map(u64::from),
    );
    differ("value", same_value(golden, record.value.as_deref()));
    let theirs = fixtures::golden_headers(golden);
    let mut ours = vec![("id".to_owned(), record.id.as_deref().map(<[u8]>::to_vec))];
    ours.extend(
        record
            .placed
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_deref().map(<[u8]>::to_vec))),
    );
    differ("headers", theirs == ours);
    differ("timestamp", record.timestamp_ms == CREATED_AT_MS);
    assert!(
        golden["timestamp_ms"].as_i64().expect("timestamp") > CREATED_AT_MS,
        "Debezium stamps its processing time, after created_at"
    );
}

fn same_value(golden: &Value, ours: Option<&[u8]>) -> bool {
    if golden.get("value_sha256").is_none() {
        return fixtures::bytes_of(&golden["value"]).as_deref() == ours;
    }
    // A large value: its length and both ends.
    let Some(ours) = ours else { return false };
    let head = fixtures::bytes_of(&golden["value_head"]).expect("head");
    let tail = fixtures::bytes_of(&golden["value_tail"]).expect("tail");
    golden["value_len"].as_u64() == u64::try_from(ours.len()).ok()
        && ours.starts_with(&head)
        && ours.ends_with(&tail)
}

/// Every golden record has Debezium's context headers, which pgoutbox lacks.
fn assert_context_headers(name: &str) {
    let doc = fixtures::load(&format!("{name}.json"));
    for golden in doc["records"].as_array().expect("records") {
        let names: Vec<&str> = golden["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|h| h["name"].as_str().expect("name"))
            .collect();
        assert_eq!(&names[..4], CONTEXT_HEADERS, "{name}");
    }
}

const POISON: [(&str, &str); 4] = [
    ("empty-key", "null-key"),
    ("null-key", "null-key"),
    ("text-controls", "invalid-json"),
    ("text-not-json", "invalid-json"),
];

/// Identical topic, partition, key, value and headers (but the context headers)
/// for every row; the timestamp is `created_at`, not Debezium's processing time.
fn assert_identical(name: &str, debezium_failed: &[&str]) {
    let out = compare(name);
    assert_context_headers(name);
    let poison: BTreeSet<(String, &str)> =
        POISON.iter().map(|(r, c)| ((*r).to_owned(), *c)).collect();
    assert_eq!(out.poison, poison, "{name}: rows pgoutbox stops on");
    assert_eq!(
        out.debezium_failed,
        debezium_failed.iter().map(|r| (*r).to_owned()).collect(),
        "{name}: rows Debezium fails the task on"
    );
    let timestamps = out.differs.get("timestamp").map_or(0, Vec::len);
    assert_eq!(timestamps, 0, "{name}: pgoutbox stamps created_at");
    assert!(
        out.compared >= 30,
        "{name}: only {} rows compared",
        out.compared
    );
    assert_eq!(
        out.differs,
        BTreeMap::new(),
        "{name}: fields that differ, by row"
    );
}

#[test]
fn a_string_converter_with_a_header_placement_is_byte_identical() {
    assert_identical("header.string", &[]);
}

#[test]
fn b_json_converter_without_schemas_is_byte_identical() {
    assert_identical("header.json", &[]);
}

#[test]
fn c_json_converter_with_schemas_is_byte_identical() {
    assert_identical("header.json-schemas", &[]);
}

#[test]
fn c_worker_default_converters_are_byte_identical() {
    assert_identical("header.worker-default", &[]);
}

#[test]
fn envelope_placement_is_byte_identical_under_every_converter() {
    for c in ["string", "json", "json-schemas", "worker-default"] {
        assert_identical(&format!("envelope.{c}"), &[]);
    }
}

/// Rows whose expansion Debezium turns into a task failure under JsonConverter:
/// a top-level array, a number beyond 64 bits, an array of objects whose field
/// changes type. pgoutbox delivers them un-expanded instead.
const EXPAND_FAILS: [&str; 4] = ["exp-big-int", "exp-obj-conflict", "numbers", "top-array"];

#[test]
fn expanded_payloads_are_byte_identical_under_string_converter() {
    assert_identical("header-expand.string", &[]);
}

#[test]
fn expanded_payloads_are_byte_identical_under_json_converters() {
    for c in ["json", "json-schemas", "worker-default"] {
        assert_identical(&format!("header-expand.{c}"), &EXPAND_FAILS);
    }
}

#[test]
fn expanded_payloads_in_an_envelope_are_byte_identical() {
    // Debezium fails these rows even under StringConverter: the envelope's payload
    // field keeps the struct schema the failed expansion inferred.
    for c in ["string", "json", "json-schemas", "worker-default"] {
        assert_identical(&format!("envelope-expand.{c}"), &EXPAND_FAILS);
    }
}

#[test]
fn java_murmur2_matches_the_goldens_known_partitions() {
    // Keys and partitions straight from header.string.json (Java's partitioner).
    let doc = fixtures::load("header.string.json");
    let mut checked = 0;
    for golden in doc["records"].as_array().expect("records") {
        let (Some(key), Some(p)) = (
            fixtures::bytes_of(&golden["key"]),
            golden["partition"].as_u64(),
        ) else {
            continue;
        };
        assert_eq!(u64::from(java_partition(&key, PARTITIONS)), p, "{key:?}");
        checked += 1;
    }
    assert!(checked > 30);
}

#[test]
fn debezium_fails_the_task_on_a_null_route_value() {
    let doc = fixtures::load("null-route.json");
    assert_eq!(doc["records"], Value::Array(vec![]));
    let error = doc["engine_error"].as_str().expect("an engine error");
    assert!(error.contains("NullPointerException"), "{error}");
}
