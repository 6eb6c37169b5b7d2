//! How records were serialised and produced: `key.converter`, `value.converter`,
//! `header.converter` and `producer.override.*`, compared with what pgoutbox writes
//! (key as UTF-8 text, value as the payload column's text, headers as UTF-8 text).

use super::input::{is_class, Config, Notes};

pub(super) fn converters(cfg: &mut Config, notes: &mut Notes, expand_json: bool) {
    let key = converter_kind(cfg, "key.converter");
    let msg = |kind: &ConverterKind| match kind {
        ConverterKind::Absent => Err("not set, so the Connect worker's key.converter applied \
            (often JsonConverter, which quotes the key); pgoutbox writes the key as plain UTF-8 \
            text like StringConverter; check the worker: a quoted key hashes to another partition"
            .to_owned()),
        ConverterKind::String => Ok("pgoutbox writes the key as UTF-8 text, as StringConverter \
            does (same bytes, same partition)"
            .to_owned()),
        ConverterKind::Json { schemas: true } => Err("Debezium wrote each key in a {\"schema\", \
            \"payload\"} JSON envelope; pgoutbox writes the plain UTF-8 text, so keys differ \
            and hash to other partitions (per-key order across the switch-over is not kept)"
            .to_owned()),
        ConverterKind::Json { schemas: false } => Err("Debezium wrote each key as a quoted JSON \
            string; pgoutbox writes the plain UTF-8 text, so keys differ and hash to other \
            partitions (per-key order across the switch-over is not kept)"
            .to_owned()),
        ConverterKind::Other(class) => Err(format!(
            "pgoutbox writes the key as plain UTF-8 text, not in {class}'s format"
        )),
    };
    note_converter(notes, "key.converter", &key, msg(&key.kind));

    let value = converter_kind(cfg, "value.converter");
    let text = "pgoutbox writes the payload column's text as the value";
    let msg = match &value.kind {
        ConverterKind::Absent => Err(format!(
            "not set, so the Connect worker's value.converter applied; {text}, which equals \
                StringConverter, or JsonConverter with schemas.enable=false and \
                table.expand.json.payload=true; check the worker"
        )),
        ConverterKind::String if !expand_json => Ok(format!("{text}, as StringConverter does")),
        ConverterKind::String => Err(format!(
            "with table.expand.json.payload=true StringConverter printed a Connect Struct; {text}"
        )),
        ConverterKind::Json { schemas: true } => Err(format!(
            "Debezium wrapped each value in a {{\"schema\", \"payload\"}} JSON envelope; {text} \
                alone"
        )),
        ConverterKind::Json { schemas: false } if expand_json => Ok(format!(
            "{text}: the same JSON (spacing as PostgreSQL prints it), as JsonConverter with \
                schemas.enable=false and table.expand.json.payload=true does"
        )),
        ConverterKind::Json { schemas: false } => Err(format!(
            "with table.expand.json.payload=false Debezium wrote the payload as a quoted, \
                escaped JSON string; {text}, unquoted"
        )),
        ConverterKind::Other(class)
            if class.ends_with("BinaryDataConverter") || class.ends_with("ByteArrayConverter") =>
        {
            Err(format!(
                "{text}: a bytea payload arrives as PostgreSQL's \\x hex text, not as the raw \
                    bytes {class} passed on"
            ))
        }
        ConverterKind::Other(class) => Err(format!("{text}, not {class}'s format")),
    };
    note_converter(notes, "value.converter", &value, msg);

    let header = converter_kind(cfg, "header.converter");
    let msg = match &header.kind {
        ConverterKind::Absent => return,
        ConverterKind::String => Ok("pgoutbox writes header values as UTF-8 text, as this \
            converter does for strings"
            .to_owned()),
        ConverterKind::Other(class) if class.ends_with("SimpleHeaderConverter") => Ok(
            "pgoutbox writes header values as UTF-8 text, as SimpleHeaderConverter does for strings"
                .to_owned(),
        ),
        _ => Err("pgoutbox writes header values as plain UTF-8 text".to_owned()),
    };
    note_converter(notes, "header.converter", &header, msg);
}

/// How a converter serialises.
pub(super) enum ConverterKind {
    Absent,
    String,
    Json { schemas: bool },
    Other(String),
}

/// A converter setting: `<which>.converter` and its `<which>.converter.*` settings.
pub(super) struct Converter {
    class: Option<String>,
    kind: ConverterKind,
    /// Settings other than `schemas.enable`, which are not carried over.
    others: usize,
}

pub(super) fn converter_kind(cfg: &mut Config, key: &str) -> Converter {
    let class = cfg.get(key);
    let schemas_key = format!("{key}.schemas.enable");
    let settings = cfg.get_prefixed(&format!("{key}."));
    // JsonConverter's schemas.enable defaults to true.
    let schemas = match settings.iter().find(|(k, _)| *k == schemas_key) {
        Some((_, v)) => v.eq_ignore_ascii_case("true"),
        None => true,
    };
    let others = settings.iter().filter(|(k, _)| *k != schemas_key).count();
    let kind = match class.as_deref() {
        None => ConverterKind::Absent,
        Some(c) if is_class(c, "org.apache.kafka.connect.storage.StringConverter") => {
            ConverterKind::String
        }
        Some(c) if is_class(c, "org.apache.kafka.connect.json.JsonConverter") => {
            ConverterKind::Json { schemas }
        }
        Some(c) => ConverterKind::Other(c.to_owned()),
    };
    Converter {
        class,
        kind,
        others,
    }
}

pub(super) fn note_converter(
    notes: &mut Notes,
    key: &str,
    converter: &Converter,
    message: Result<String, String>,
) {
    let suffix = match converter.others {
        0 => String::new(),
        n => format!(" ({n} other {key}.* setting(s) not carried over)"),
    };
    let class = converter.class.as_deref();
    match message {
        Ok(m) => notes.translated(key, class, format!("{m}{suffix}")),
        Err(m) => notes.unsupported(key, class, format!("{m}{suffix}")),
    }
}

/// Java producer settings with the same meaning in librdkafka: (Java, librdkafka).
pub(super) const PRODUCER_EQUIVALENTS: &[(&str, &str)] = &[
    ("compression.type", "compression.type"),
    ("linger.ms", "linger.ms"),
    ("batch.size", "batch.size"),
    ("request.timeout.ms", "request.timeout.ms"),
    ("delivery.timeout.ms", "delivery.timeout.ms"),
    ("retry.backoff.ms", "retry.backoff.ms"),
    ("max.request.size", "message.max.bytes"),
    ("client.id", "client.id"),
    ("security.protocol", "security.protocol"),
    ("sasl.mechanism", "sasl.mechanisms"),
    (
        "ssl.endpoint.identification.algorithm",
        "ssl.endpoint.identification.algorithm",
    ),
];

/// `kafka_option` from `producer.override.*`.
pub(super) fn producer_overrides(cfg: &mut Config, notes: &mut Notes) -> Vec<String> {
    const PREFIX: &str = "producer.override.";
    let mut options = Vec::new();
    for (key, value) in cfg.get_prefixed(PREFIX) {
        let java = &key[PREFIX.len()..];
        if let Some((_, rd)) = PRODUCER_EQUIVALENTS.iter().find(|(j, _)| *j == java) {
            let value = match java {
                "security.protocol" => value.to_ascii_lowercase(),
                "ssl.endpoint.identification.algorithm" if value.is_empty() => "none".to_owned(),
                _ => value.clone(),
            };
            notes.translated(&key, Some(&value), format!("kafka_option {rd}={value}"));
            options.push(format!("{rd}={value}"));
            continue;
        }
        match java {
            "acks" | "enable.idempotence" | "max.in.flight.requests.per.connection" | "retries" => {
                notes.ignored(
                    &key,
                    Some(&value),
                    "pgoutbox always produces with acks=all and idempotence, which keeps per-key \
                        order through retries",
                )
            }
            "sasl.jaas.config" => notes.unsupported(
                &key,
                Some(&value),
                "Java login configuration; give librdkafka the credentials with kafka_option \
                    sasl.username=... and kafka_sasl_password_file (the password in a file)",
            ),
            j if j.starts_with("ssl.truststore.")
                || j.starts_with("ssl.keystore.")
                || j == "ssl.key.password" =>
            {
                notes.unsupported(
                    &key,
                    Some(&value),
                    "Java keystore setting; librdkafka takes PEM files: kafka_option \
                        ssl.ca.location=..., ssl.certificate.location=..., ssl.key.location=...",
                )
            }
            _ => notes.unsupported(
                &key,
                Some(&value),
                "Java producer setting not carried over; set its librdkafka equivalent with \
                    kafka_option if it matters",
            ),
        }
    }
    options
}
