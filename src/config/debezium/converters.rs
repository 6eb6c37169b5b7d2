//! How records were serialised: `key.converter`, `value.converter`,
//! `header.converter` and `producer.override.*`, translated into pgoutbox's
//! `key_converter` / `value_converter` (StringConverter → `string`, JsonConverter →
//! `json` or `json-schemas`). A converter the connector does not set is the Connect
//! worker's: Kafka's default worker configuration is JsonConverter with
//! `schemas.enable=true`, which the import assumes and says so.

use super::input::{is_class, Config, Notes};
use crate::outbox::connect::Converter as Format;

/// The converters the TOML gets.
pub(super) struct Converters {
    pub(super) key: Format,
    pub(super) value: Format,
}

pub(super) fn converters(cfg: &mut Config, notes: &mut Notes, expand_json: bool) -> Converters {
    let key = converter_kind(cfg, "key.converter");
    let key_converter = chosen(&key.kind);
    let msg = match &key.kind {
        ConverterKind::Other(class) => Err(format!(
            "pgoutbox cannot write {class}'s format; key_converter = \"string\" writes the \
                column's text, so keys differ and hash to other partitions"
        )),
        kind => Ok(format!(
            "{}key_converter = \"{}\": the same key bytes, so the same partitions",
            worker_default(kind),
            key_converter.name()
        )),
    };
    note_converter(notes, "key.converter", &key, msg);

    let value = converter_kind(cfg, "value.converter");
    let value_converter = chosen(&value.kind);
    let msg = match &value.kind {
        ConverterKind::Other(class) => Err(format!(
            "pgoutbox cannot write {class}'s format; value_converter = \"string\" writes the \
                payload column's text{}",
            if class.ends_with("ByteArrayConverter") || class.ends_with("BinaryDataConverter") {
                " (a bytea payload arrives as PostgreSQL's \\x hex text)"
            } else {
                ""
            }
        )),
        kind => Ok(format!(
            "{}value_converter = \"{}\"{}",
            worker_default(kind),
            value_converter.name(),
            if expand_json {
                ", with expand_json_payload (see README: migration)"
            } else {
                ""
            }
        )),
    };
    note_converter(notes, "value.converter", &value, msg);

    let header = converter_kind(cfg, "header.converter");
    let msg = match &header.kind {
        ConverterKind::Absent => Ok(
            "the Connect worker's default SimpleHeaderConverter wrote each header as the \
            column's text, as pgoutbox does"
                .to_owned(),
        ),
        ConverterKind::String => Ok("pgoutbox writes header values as the column's text, as \
            this converter does for strings"
            .to_owned()),
        ConverterKind::Other(class) if class.ends_with("SimpleHeaderConverter") => Ok(
            "pgoutbox writes header values as the column's text, as SimpleHeaderConverter does \
                for strings"
                .to_owned(),
        ),
        _ => Err(
            "pgoutbox writes header values as the column's text (SimpleHeaderConverter), \
            not in this converter's format"
                .to_owned(),
        ),
    };
    note_converter(notes, "header.converter", &header, msg);
    Converters {
        key: key_converter,
        value: value_converter,
    }
}

/// pgoutbox's converter for a connector's; `string` where it has no equivalent.
fn chosen(kind: &ConverterKind) -> Format {
    match kind {
        ConverterKind::String | ConverterKind::Other(_) => Format::String,
        ConverterKind::Json { schemas: false } => Format::Json,
        ConverterKind::Json { schemas: true } | ConverterKind::Absent => Format::JsonSchemas,
    }
}

fn worker_default(kind: &ConverterKind) -> &'static str {
    match kind {
        ConverterKind::Absent => {
            "the Connect worker's converter applied, assumed to be Kafka's default, \
                JsonConverter with schemas.enable=true (if your worker sets another, add it to \
                the connector configuration and import again): "
        }
        _ => "",
    }
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
