//! How an outbox row becomes a Kafka record: the column mapping and topic rules
//! (`RoutingArgs`, each flag with its Debezium alias from [`super::router_keys`]),
//! the value format and converters, and the record policies of `run` (non-transactional
//! messages, updates on the outbox, record timestamp).
//!
//! Raw flags only, as clap parses them; `crate::config` validates them.

use clap::{Args, ValueEnum};

use super::router_keys as keys;

/// How rows become records. Debezium Outbox Event Router option names are accepted
/// as flag aliases (e.g. `--table.field.event.key`).
#[derive(Debug, Clone, Args)]
pub struct RoutingArgs {
    /// Column whose value fills ${routedByValue} in the topic template.
    #[arg(
        long,
        alias = keys::ROUTE_BY_FIELD.debezium,
        env = "PGOUTBOX_ROUTE_BY_FIELD",
        default_value = keys::ROUTE_BY_FIELD.default,
        value_name = "COLUMN"
    )]
    pub route_by_field: String,

    /// Topic name template, Debezium syntax.
    #[arg(
        long,
        alias = keys::TOPIC_TEMPLATE.debezium,
        env = "PGOUTBOX_TOPIC_TEMPLATE",
        default_value = keys::TOPIC_TEMPLATE.default,
        value_name = "TEMPLATE"
    )]
    pub topic_template: String,

    /// Column holding the event id (record header `id`).
    #[arg(
        long,
        alias = keys::ID_COLUMN.debezium,
        env = "PGOUTBOX_ID_COLUMN",
        default_value = keys::ID_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub id_column: String,

    /// Column holding the record key.
    #[arg(
        long,
        alias = keys::KEY_COLUMN.debezium,
        env = "PGOUTBOX_KEY_COLUMN",
        default_value = keys::KEY_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub key_column: String,

    /// Column holding the event type (record header `event_type`).
    #[arg(
        long,
        alias = keys::EVENT_TYPE_COLUMN.debezium,
        env = "PGOUTBOX_EVENT_TYPE_COLUMN",
        default_value = keys::EVENT_TYPE_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub event_type_column: String,

    /// Column holding the record value.
    #[arg(
        long,
        alias = keys::PAYLOAD_COLUMN.debezium,
        env = "PGOUTBOX_PAYLOAD_COLUMN",
        default_value = keys::PAYLOAD_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub payload_column: String,

    /// Column holding the record timestamp (the commit time is used when absent or NULL).
    #[arg(
        long,
        alias = keys::TIMESTAMP_COLUMN.debezium,
        env = "PGOUTBOX_TIMESTAMP_COLUMN",
        default_value = keys::TIMESTAMP_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub timestamp_column: String,

    /// Propagate W3C trace context: the column (or COLUMN.KEY[.KEY…], keys into a
    /// JSON column such as the payload or a headers column) whose value becomes the
    /// record headers `traceparent` and `tracestate`. The value there may be a
    /// traceparent string, a JSON object with `traceparent` (and `tracestate`) keys,
    /// or Debezium's properties text (`traceparent=…`). A NULL or missing value sends
    /// no header; a malformed one is logged, counted
    /// (pgoutbox_trace_context_total) and left out — the event is still sent.
    /// Examples: --trace-context traceparent, --trace-context headers,
    /// --trace-context payload.meta.traceparent. Off when unset.
    #[arg(
        long,
        alias = keys::TRACE_CONTEXT.debezium,
        env = "PGOUTBOX_TRACE_CONTEXT",
        value_name = "COLUMN[.KEY…]"
    )]
    pub trace_context: Option<String>,

    /// Column reported as `aggregate_type` by tail.
    #[arg(
        long,
        env = "PGOUTBOX_AGGREGATE_TYPE_COLUMN",
        default_value = "aggregate_type",
        value_name = "COLUMN"
    )]
    pub aggregate_type_column: String,
}

/// How records are serialised: the headers and the Kafka Connect converters of a
/// Debezium connector, for consumers that must not tell the difference.
#[derive(Debug, Clone, Args)]
pub struct FormatArgs {
    /// Put a column in a record header or in the value's envelope, Debezium's
    /// table.fields.additional.placement: `COLUMN:header[:ALIAS]` or
    /// `COLUMN:envelope[:ALIAS]` (the value becomes {"payload": …, ALIAS: …}).
    /// Repeatable (or comma-separated). Without it the event type column goes to
    /// header `event_type`; once given, exactly the listed columns are placed
    /// (`none`: no header but `id`, as Debezium without placements), e.g.
    /// --placement event_type:header:eventType.
    #[arg(
        long = "placement",
        alias = "table.fields.additional.placement",
        env = "PGOUTBOX_PLACEMENT",
        value_delimiter = ',',
        value_name = "COLUMN:PLACE[:ALIAS]"
    )]
    pub placements: Vec<String>,

    /// How the key is serialised, as Kafka Connect's key.converter: `string`
    /// (StringConverter: the column's text), `json` (JsonConverter with
    /// schemas.enable=false: a quoted JSON string, which hashes to another partition)
    /// or `json-schemas` (JsonConverter with schemas, the Connect worker's default:
    /// {"schema":…,"payload":…}).
    #[arg(long, env = "PGOUTBOX_KEY_CONVERTER", value_enum, default_value_t = ConverterArg::String)]
    pub key_converter: ConverterArg,

    /// How the value is serialised, as Kafka Connect's value.converter (see
    /// --key-converter). `json` writes a jsonb payload as a JSON string
    /// ("{\"a\": 1}"); with --expand-json-payload as the JSON itself.
    #[arg(long, env = "PGOUTBOX_VALUE_CONVERTER", value_enum, default_value_t = ConverterArg::String)]
    pub value_converter: ConverterArg,

    /// Debezium's table.expand.json.payload: a JSON-object payload becomes a Connect
    /// struct (compact JSON without null fields and empty arrays, with an inferred
    /// schema under json-schemas); other payloads stay as they are.
    #[arg(
        long,
        alias = "table.expand.json.payload",
        env = "PGOUTBOX_EXPAND_JSON_PAYLOAD"
    )]
    pub expand_json_payload: bool,

    /// Debezium's topic.prefix (the connector's logical name); only names the
    /// Connect schema of an envelope value under json-schemas:
    /// LOGICAL_NAME.schema.table.route.Value.
    #[arg(
        long,
        env = "PGOUTBOX_LOGICAL_NAME",
        default_value = "pgoutbox",
        value_name = "NAME"
    )]
    pub logical_name: String,
}

/// A Kafka Connect converter (`--key-converter`, `--value-converter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConverterArg {
    /// StringConverter.
    String,
    /// JsonConverter, schemas.enable=false.
    Json,
    /// JsonConverter, schemas.enable=true (the Connect worker's default).
    JsonSchemas,
}

/// What becomes of a row on its way to Kafka beyond its mapping: the poison-row
/// policy, the dead-letter topic and the record time. The same for `run` and
/// `replay`, so a replayed row meets the same rules.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// What to do with a poison row: `fail` (stop before it, the default), `dlq`
    /// (write it to --dlq-topic with the reason in headers) or `skip` (log and count).
    /// `POLICY` sets every cause, `CAUSE=POLICY` one of: null-key (key column NULL or
    /// empty), invalid-topic, null-route (route-by column NULL or empty: the topic
    /// would be the template's bare prefix, e.g. `outbox.event.`), too-large,
    /// invalid-json, missing-column, type-changed (a mapped column's new type would
    /// change the records' shape), bad-message (a logical decoding message that is
    /// not an outbox event object). `null-key=deliver` sends keyless rows as they
    /// are, as Debezium does: NULL → a null Kafka key (spread over partitions, no
    /// per-key order), empty → empty key bytes (one fixed partition). Repeatable,
    /// applied in order, e.g. `--on-invalid dlq --on-invalid missing-column=fail`.
    #[arg(
        long,
        env = "PGOUTBOX_ON_INVALID",
        value_delimiter = ',',
        value_name = "[CAUSE=]fail|dlq|skip|deliver"
    )]
    pub on_invalid: Vec<String>,

    /// The time each record carries: `column` (the timestamp column, e.g.
    /// created_at; the commit time when it is absent, NULL or unparseable),
    /// `commit` (the transaction's commit time) or `processing` (when pgoutbox read
    /// the row, as Debezium stamps it; a record resent after a restart gets a new
    /// time). For the broker's append time, set the topic's
    /// message.timestamp.type=LogAppendTime instead.
    #[arg(long, env = "PGOUTBOX_RECORD_TIMESTAMP", value_enum, default_value_t = RecordTimestampArg::Column)]
    pub record_timestamp: RecordTimestampArg,

    /// Dead-letter topic for `--on-invalid dlq`.
    #[arg(
        long,
        env = "PGOUTBOX_DLQ_TOPIC",
        default_value = crate::outbox::invalid::DEFAULT_DLQ_TOPIC,
        value_name = "TOPIC"
    )]
    pub dlq_topic: String,
}

/// `--message-non-transactional` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NonTransactionalArg {
    /// Count and warn; not relayed.
    Ignore,
    /// Relay as a unit of its own.
    Relay,
}

/// `--on-update` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnUpdateArg {
    /// Skip silently.
    Ignore,
    /// Skip with a warning.
    Warn,
    /// Stop the relay.
    Fail,
}

/// `--record-timestamp` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordTimestampArg {
    /// The timestamp column, else the commit time.
    Column,
    /// The transaction's commit time.
    Commit,
    /// When pgoutbox read the row (Debezium's default).
    Processing,
}
