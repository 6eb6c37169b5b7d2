//! End-to-end tests of the importer: whole connector configurations in, TOML and
//! notes out (each step's own cases sit at the bottom of its file).

use super::*;
use crate::pg::client::conninfo::{ConnInfo, Host, SslMode};

const PASSWORD: &str = "Tr0ub4dor&3-canary";

/// A connector as `GET /connectors/orders-outbox` returns it.
const REALISTIC: &str = r#"{
  "name": "orders-outbox",
  "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "name": "orders-outbox",
    "tasks.max": "1",
    "database.hostname": "orders-db.internal",
    "database.port": "5433",
    "database.user": "debezium@orders",
    "database.password": "Tr0ub4dor&3-canary",
    "database.dbname": "orders db",
    "database.sslmode": "require",
    "database.sslrootcert": "/etc/ssl/certs/rds-ca.pem",
    "topic.prefix": "orders",
    "plugin.name": "pgoutput",
    "slot.name": "orders_outbox",
    "publication.name": "orders_outbox_pub",
    "publication.autocreate.mode": "filtered",
    "table.include.list": "public.order_outbox,public\\.payment_outbox",
    "snapshot.mode": "initial",
    "heartbeat.interval.ms": "10000",
    "tombstones.on.delete": "false",
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
    "transforms": "outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "transforms.outbox.table.field.event.id": "event_id",
    "transforms.outbox.table.field.event.key": "aggregate_id",
    "transforms.outbox.table.field.event.type": "event_type",
    "transforms.outbox.table.field.event.payload": "body",
    "transforms.outbox.table.field.event.timestamp": "occurred_at",
    "transforms.outbox.route.by.field": "aggregate_type",
    "transforms.outbox.route.topic.replacement": "orders.${routedByValue}.events",
    "transforms.outbox.table.expand.json.payload": "true",
    "transforms.outbox.table.fields.additional.placement": "event_type:header:eventType",
    "producer.override.compression.type": "lz4"
  },
  "tasks": [{"connector": "orders-outbox", "task": 0}],
  "type": "source"
}"#;

/// The settings the realistic connector becomes (everything after the header).
const REALISTIC_BODY: &str = r#"# PostgreSQL
database_url = "postgres://debezium%40orders@orders-db.internal:5433/orders%20db?sslmode=require&sslrootcert=/etc/ssl/certs/rds-ca.pem"
# database password: set PGOUTBOX_DATABASE_PASSWORD_FILE or PGPASSWORD
slot = "orders_outbox"
publication = "orders_outbox_pub"
table = ["public.order_outbox", "public.payment_outbox"]

# Kafka: a connector configuration does not name the brokers (the Connect worker does)
brokers = "CHANGE-ME:9092"  # the Connect worker's bootstrap.servers
kafka_option = ["compression.type=lz4"]  # from producer.override.*

# Outbox Event Router "outbox" (transforms.outbox.*)
route_by_field = "aggregate_type"
aggregate_type_column = "aggregate_type"
topic_template = "orders.${routedByValue}.events"
id_column = "event_id"
key_column = "aggregate_id"
event_type_column = "event_type"
payload_column = "body"
timestamp_column = "occurred_at"
placement = ["event_type:header:eventType"]  # table.fields.additional.placement

# Kafka Connect converters (key.converter, value.converter)
key_converter = "string"
value_converter = "json"
expand_json_payload = true  # table.expand.json.payload
logical_name = "orders"  # topic.prefix

# Rows Debezium handled its own way (see the notes on stderr)
on_invalid = ["null-key=deliver"]  # rows with a NULL or empty key are delivered (null / empty Kafka key), as Debezium did
record_timestamp = "column"  # timestamp_column, as Debezium did
# trace_context = "tracingspancontext"  # if the outbox has Debezium's tracing column: sends its W3C trace context as headers traceparent/tracestate
"#;

/// The smallest connector Debezium accepts with an Outbox Event Router.
fn minimal(extra: &str) -> String {
    format!(
        r#"{{"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "db", "database.user": "app", "database.dbname": "shop",
            "table.include.list": "public.outbox",
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter"{extra}}}"#
    )
}

fn note<'a>(imported: &'a Imported, key: &str) -> &'a Note {
    imported
        .notes
        .iter()
        .find(|n| n.key == key)
        .unwrap_or_else(|| panic!("no note for {key}: {:#?}", imported.notes))
}

/// The TOML parsed by the `toml` crate, as `--config` reads it.
fn parse_toml(text: &str) -> toml::Table {
    text.parse()
        .unwrap_or_else(|e| panic!("invalid TOML: {e}\n{text}"))
}

fn s(v: &str) -> toml::Value {
    toml::Value::String(v.to_owned())
}

fn arr(items: &[&str]) -> toml::Value {
    toml::Value::Array(items.iter().map(|v| s(v)).collect())
}

#[test]
fn realistic_connector_becomes_the_expected_toml() {
    let imported = import(REALISTIC).unwrap();
    let toml = &imported.toml;
    let body = &toml[toml.find("# PostgreSQL").unwrap()..];
    assert_eq!(body, REALISTIC_BODY, "\n{toml}");
    assert!(toml.starts_with(
        "# pgoutbox configuration generated by `pgoutbox config import-debezium` from \
            Debezium connector \"orders-outbox\".\n"
    ));
    // The header lists what behaves differently, each with its reason.
    assert!(toml.contains("\n#   snapshot.mode = initial\n#     pgoutbox never snapshots"));
    // Placements are carried over; Debezium's context headers are not.
    assert!(!toml.contains("#   transforms.outbox.table.fields.additional.placement"));
    assert!(toml.contains("\n#   extended.headers.enabled (not set)\n"));
    assert!(toml.contains("__debezium.context.runId"));
    assert!(!toml.contains("#   plugin.name"), "pgoutput is honoured");

    let map = parse_toml(toml);
    assert_eq!(map["slot"], s("orders_outbox"));
    assert_eq!(
        map["table"],
        arr(&["public.order_outbox", "public.payment_outbox"])
    );
    assert_eq!(map["brokers"], s("CHANGE-ME:9092"));
}

#[test]
fn every_key_written_is_a_config_file_key() {
    let known = crate::config::file::key_to_env();
    for json in [REALISTIC.to_owned(), minimal("")] {
        for key in parse_toml(&import(&json).unwrap().toml).keys() {
            assert!(known.contains_key(key), "{key} is not a --config key");
        }
    }
}

#[test]
fn realistic_connector_notes() {
    let imported = import(REALISTIC).unwrap();
    let kind = |key: &str| note(&imported, key).kind;
    assert_eq!(kind("plugin.name"), NoteKind::Translated);
    assert_eq!(kind("key.converter"), NoteKind::Translated);
    // JsonConverter, schemas.enable=false, table.expand.json.payload=true: same JSON.
    assert_eq!(kind("value.converter"), NoteKind::Translated);
    assert_eq!(kind("snapshot.mode"), NoteKind::Unsupported);
    assert_eq!(
        kind("transforms.outbox.table.fields.additional.placement"),
        NoteKind::Translated
    );
    assert_eq!(kind("extended.headers.enabled"), NoteKind::Unsupported);
    assert_eq!(kind("heartbeat.interval.ms"), NoteKind::Ignored);
    assert_eq!(kind("tasks.max"), NoteKind::Ignored);
    assert_eq!(kind("topic.prefix"), NoteKind::Translated);
    assert_eq!(
        kind("producer.override.compression.type"),
        NoteKind::Translated
    );
    let password = note(&imported, "database.password");
    assert_eq!(password.kind, NoteKind::Translated);
    assert_eq!(password.value, REDACTED);
    assert!(password.message.contains("PGOUTBOX_DATABASE_PASSWORD_FILE"));
    // Every input key is noted, but for those read without a remark.
    let root: Value = serde_json::from_str(REALISTIC).unwrap();
    let silent = [
        "name",
        "connector.class",
        "transforms",
        "transforms.outbox.type",
        "value.converter.schemas.enable",
    ];
    for key in root["config"].as_object().unwrap().keys() {
        assert!(
            silent.contains(&key.as_str()) || imported.notes.iter().any(|n| &n.key == key),
            "no note for {key}"
        );
    }
    assert!(!imported.notes.iter().any(|n| n.key == "name"));
    let rendered = render_notes(&imported.notes);
    assert!(rendered.starts_with("behaves differently under pgoutbox"));
    assert!(rendered.contains("  snapshot.mode = \"initial\": pgoutbox never snapshots"));
}

#[test]
fn password_never_leaves_the_input() {
    let flat: Value = serde_json::from_str::<Value>(REALISTIC).unwrap()["config"].clone();
    for input in [REALISTIC.to_owned(), flat.to_string()] {
        let imported = import(&input).unwrap();
        assert!(!imported.toml.contains(PASSWORD), "{}", imported.toml);
        assert!(!imported.toml.contains("Tr0ub4dor"));
        let rendered = render_notes(&imported.notes);
        assert!(!rendered.contains("Tr0ub4dor"), "{rendered}");
        assert!(!format!("{:?}", imported.notes).contains("Tr0ub4dor"));
    }
    // Nor does an error about another key.
    let bad = REALISTIC.replace("\"5433\"", "\"54x\"");
    let err = import(&bad).unwrap_err();
    assert!(!err.to_string().contains("Tr0ub4dor"));
    assert!(!format!("{err:?}").contains("Tr0ub4dor"));
}

#[test]
fn other_secrets_are_redacted_in_notes() {
    let imported = import(&minimal(
        r#", "producer.override.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"hunter2\";",
           "database.sslpassword": "hunter2", "some.api.token": "hunter2""#,
    ))
    .unwrap();
    assert!(!imported.toml.contains("hunter2"), "{}", imported.toml);
    assert!(!render_notes(&imported.notes).contains("hunter2"));
    assert_eq!(
        note(&imported, "producer.override.sasl.jaas.config").kind,
        NoteKind::Unsupported
    );
}

#[test]
fn database_url_round_trips_through_conninfo() {
    let imported = import(REALISTIC).unwrap();
    let url = parse_toml(&imported.toml)["database_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let info = ConnInfo::parse_with_env(&url, &|_| None).unwrap();
    assert_eq!(info.user, "debezium@orders");
    assert_eq!(info.dbname, "orders db");
    assert_eq!(info.hosts[0].host, Host::Tcp("orders-db.internal".into()));
    assert_eq!(info.hosts[0].port, 5433);
    assert_eq!(info.sslmode, SslMode::Require);
    assert_eq!(
        info.sslrootcert.as_deref(),
        Some(std::path::Path::new("/etc/ssl/certs/rds-ca.pem"))
    );
}

#[test]
fn minimal_connector_writes_debezium_defaults() {
    let imported = import(&minimal("")).unwrap();
    let map = parse_toml(&imported.toml);
    assert_eq!(map["database_url"], s("postgres://app@db:5432/shop"));
    // Debezium's column names, not pgoutbox's snake-case defaults.
    assert_eq!(map["route_by_field"], s("aggregatetype"));
    assert_eq!(map["aggregate_type_column"], s("aggregatetype"));
    assert_eq!(map["key_column"], s("aggregateid"));
    assert_eq!(map["event_type_column"], s("type"));
    assert_eq!(map["id_column"], s("id"));
    assert_eq!(map["payload_column"], s("payload"));
    assert_eq!(map["topic_template"], s("outbox.event.${routedByValue}"));
    assert!(!map.contains_key("timestamp_column"));
    assert!(!map.contains_key("kafka_option"));
    assert!(imported.toml.contains(
        "key_column = \"aggregateid\"  # Debezium default; pgoutbox's own is aggregate_id\n"
    ));
    // Debezium's default plugin is decoderbufs: its slot cannot be reused.
    assert_eq!(map["slot"], s("pgoutbox"));
    assert_eq!(map["publication"], s("pgoutbox"));
    assert_eq!(note(&imported, "plugin.name").kind, NoteKind::Unsupported);
    let slot = note(&imported, "slot.name");
    assert_eq!(slot.kind, NoteKind::Unsupported);
    assert!(slot
        .message
        .contains("pg_drop_replication_slot('debezium')"));
    // Converters left to the worker: Kafka's worker default, said so.
    let key = note(&imported, "key.converter");
    assert_eq!(key.value, NOT_SET);
    assert_eq!(key.kind, NoteKind::Translated);
    assert!(key.message.contains("schemas.enable=true"), "{key}");
    assert_eq!(map["key_converter"], s("json-schemas"));
    assert_eq!(map["value_converter"], s("json-schemas"));
    // Without placements Debezium sent header id only.
    assert_eq!(map["placement"], arr(&["none"]));
}

#[test]
fn pgoutput_connector_reuses_debezium_slot_and_publication_defaults() {
    let imported = import(&minimal(r#", "plugin.name": "pgoutput""#)).unwrap();
    let map = parse_toml(&imported.toml);
    assert_eq!(map["slot"], s("debezium"));
    assert_eq!(map["publication"], s("dbz_publication"));
    assert_eq!(note(&imported, "slot.name").kind, NoteKind::Translated);
}

#[test]
fn flat_config_and_simple_class_names_are_accepted() {
    let json = minimal(r#", "name": "flat""#)
        .replace(POSTGRES_CONNECTOR, "PostgresConnector")
        .replace(EVENT_ROUTER, "EventRouter");
    let imported = import(&json).unwrap();
    assert!(imported.toml.contains("from Debezium connector \"flat\"."));
}

#[test]
fn errors_name_the_problem_and_the_fix() {
    let err = import("{not json").unwrap_err();
    assert!(matches!(err, ImportError::NotJson { line: 1, .. }), "{err}");
    assert!(err.to_string().contains("fix:"));

    let err = import("[1, 2]").unwrap_err();
    assert_eq!(
        err.to_string(),
        "the connector configuration is a JSON array, not an object; fix: pass {\"name\": \
            ..., \"config\": {...}} (GET /connectors/<name>) or the config object itself"
    );
    let err = import(r#"{"name": "x", "config": "oops"}"#).unwrap_err();
    assert!(err.to_string().starts_with("\"config\" is a JSON string"));

    let err = import(&minimal("").replace(
        POSTGRES_CONNECTOR,
        "io.debezium.connector.mysql.MySqlConnector",
    ))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "connector.class is \"io.debezium.connector.mysql.MySqlConnector\", not the Debezium \
            PostgreSQL connector; fix: import a connector whose connector.class is \
            io.debezium.connector.postgresql.PostgresConnector (pgoutbox reads PostgreSQL \
            only)"
    );
    let err = import(r#"{"database.hostname": "db"}"#).unwrap_err();
    assert!(matches!(err, ImportError::MissingClass));

    let err = import(&minimal("").replace(r#""database.hostname": "db", "#, "")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "database.hostname is missing; fix: import the complete connector configuration \
            (Debezium requires database.hostname)"
    );
    let err = import(&minimal(r#", "database.port": "0""#)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "database.port is \"0\": expected an integer from 1 to 65535; fix: correct \
            database.port in the connector configuration"
    );
    let err = import(&minimal(r#", "database.sslmode": "verify""#)).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("database.sslmode is \"verify\": expected one of disable"));
}

#[test]
fn connector_without_event_router_is_refused() {
    let json = minimal("").replace(EVENT_ROUTER, "io.debezium.transforms.ExtractNewRecordState");
    let err = import(&json).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no Outbox Event Router (io.debezium.transforms.outbox.EventRouter) among the \
            connector's transforms (outbox (io.debezium.transforms.ExtractNewRecordState)); \
            without it Debezium publishes change events to one topic per table, which \
            pgoutbox does not do; fix: import the connector that applies the Outbox Event \
            Router to the outbox table"
    );
    let json = minimal("").replace(r#""transforms": "outbox","#, "");
    let err = import(&json).unwrap_err();
    assert!(err.to_string().contains("transforms (none)"), "{err}");
}

#[test]
fn other_transforms_are_reported_not_applied() {
    let imported = import(&minimal(
        r#", "transforms": "outbox,rename", "transforms.rename.type": "org.apache.kafka.connect.transforms.RegexRouter",
           "transforms.rename.regex": "(.*)", "transforms.rename.replacement": "x.$1",
           "transforms.stale.type": "org.apache.kafka.connect.transforms.InsertField$Value""#,
    ))
    .unwrap();
    let rename = note(&imported, "transforms.rename.type");
    assert_eq!(rename.kind, NoteKind::Unsupported);
    assert!(
        rename.message.contains("2 setting(s)"),
        "{}",
        rename.message
    );
    assert!(!imported
        .notes
        .iter()
        .any(|n| n.key == "transforms.rename.regex"));
    assert_eq!(
        note(&imported, "transforms.stale.type").kind,
        NoteKind::Ignored
    );
}

#[test]
fn topic_replacement_with_quotes_and_backslashes_is_escaped() {
    // JSON `q\"uo\\\\te` is the Java replacement q"uo\\te: `\\` quotes one backslash.
    let imported = import(&minimal(
        r#", "transforms.outbox.route.topic.replacement": "q\"uo\\\\te.${routedByValue}""#,
    ))
    .unwrap();
    assert!(
        imported
            .toml
            .contains("topic_template = \"q\\\"uo\\\\te.${routedByValue}\"\n"),
        "{}",
        imported.toml
    );
    assert_eq!(
        parse_toml(&imported.toml)["topic_template"],
        s("q\"uo\\te.${routedByValue}")
    );
    // Kafka would reject such topic names; the importer says so.
    let topic = note(&imported, "transforms.outbox.route.topic.replacement");
    assert!(imported
        .notes
        .iter()
        .any(|n| n.key == topic.key && n.kind == NoteKind::Unsupported));
}

#[test]
fn every_value_survives_escaping() {
    let nasty = "a\"b\\c\nd\te\u{1}f\u{7f}g\u{85}h é";
    let json = serde_json::json!({
        "connector.class": POSTGRES_CONNECTOR,
        "name": nasty,
        "database.hostname": "db", "database.user": "app", "database.dbname": "shop",
        "slot.name": nasty, "plugin.name": "pgoutput",
        "table.include.list": "public.outbox",
        "transforms": "outbox",
        "transforms.outbox.type": EVENT_ROUTER,
        "transforms.outbox.table.field.event.payload": nasty,
        "unknown.key": nasty,
    });
    let imported = import(&json.to_string()).unwrap();
    let map = parse_toml(&imported.toml);
    assert_eq!(map["slot"], s(nasty));
    assert_eq!(map["payload_column"], s(nasty));
}

#[test]
fn include_regexes_are_reported_not_guessed() {
    let imported = import(&minimal(r#", "table.include.list": "public.outbox_.*""#)).unwrap();
    assert_eq!(
        parse_toml(&imported.toml)["table"],
        arr(&["CHANGE-ME.outbox"])
    );
    assert_eq!(
        note(&imported, "table.include.list").kind,
        NoteKind::Unsupported
    );
}

#[test]
fn config_provider_references_become_placeholders() {
    let imported = import(&minimal("").replace(
        r#""database.hostname": "db""#,
        r#""database.hostname": "${file:/opt/kafka/db.properties:host}", "database.password": "${file:/opt/kafka/db.properties:password}""#,
    ))
    .unwrap();
    let map = parse_toml(&imported.toml);
    assert_eq!(map["database_url"], s("postgres://app@CHANGE-ME:5432/shop"));
    assert!(!imported.toml.contains("db.properties:password"));
}

#[test]
fn ipv6_hosts_are_bracketed() {
    let imported = import(&minimal("").replace(r#""db""#, r#""::1""#)).unwrap();
    let url = parse_toml(&imported.toml)["database_url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(url, "postgres://app@[::1]:5432/shop");
    let info = ConnInfo::parse_with_env(&url, &|_| None).unwrap();
    assert_eq!(info.hosts[0].host, Host::Tcp("::1".into()));
}

#[test]
fn converters_become_key_and_value_converters() {
    let json_keys = import(&minimal(
        r#", "key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "false",
           "value.converter": "org.apache.kafka.connect.json.JsonConverter""#,
    ))
    .unwrap();
    let map = parse_toml(&json_keys.toml);
    assert_eq!(map["key_converter"], s("json"));
    // JsonConverter's own schemas.enable default is true.
    assert_eq!(map["value_converter"], s("json-schemas"));
    assert_eq!(note(&json_keys, "key.converter").kind, NoteKind::Translated);
    assert_eq!(
        note(&json_keys, "value.converter").kind,
        NoteKind::Translated
    );

    let strings = import(&minimal(
        r#", "value.converter": "org.apache.kafka.connect.storage.StringConverter""#,
    ))
    .unwrap();
    assert_eq!(note(&strings, "value.converter").kind, NoteKind::Translated);
    assert_eq!(parse_toml(&strings.toml)["value_converter"], s("string"));

    let avro = import(&minimal(
        r#", "value.converter": "io.confluent.connect.avro.AvroConverter""#,
    ))
    .unwrap();
    let value = note(&avro, "value.converter");
    assert_eq!(value.kind, NoteKind::Unsupported);
    assert!(value.message.contains("AvroConverter"), "{value}");
    assert_eq!(parse_toml(&avro.toml)["value_converter"], s("string"));
}

#[test]
fn placements_are_carried_over_and_partition_is_not() {
    let imported = import(&minimal(
        r#", "transforms.outbox.table.fields.additional.placement": "type:header:eventType,tenant:envelope,region:partition""#,
    ))
    .unwrap();
    let map = parse_toml(&imported.toml);
    assert_eq!(
        map["placement"],
        arr(&["type:header:eventType", "tenant:envelope"])
    );
    let partition = imported
        .notes
        .iter()
        .find(|n| n.value == "region:partition")
        .expect("a note for the partition placement");
    assert_eq!(partition.kind, NoteKind::Unsupported);
}

#[test]
fn unknown_keys_are_reported() {
    let imported = import(&minimal(r#", "frobnicate.level": "11""#)).unwrap();
    let n = note(&imported, "frobnicate.level");
    assert_eq!(n.kind, NoteKind::Unsupported);
    assert!(imported.toml.contains("#   frobnicate.level = 11\n"));
}
