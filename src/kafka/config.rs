//! Producer configuration.
//!
//! Owns the librdkafka settings that make delivery safe, and the rule for user
//! overrides. Invariants:
//! - `enable.idempotence=true` and `acks=all`: a retry never duplicates or reorders
//!   within a partition, and an ack means every in-sync replica has the record.
//! - `message.timeout.ms=0` (infinite): an outage is waited out by librdkafka's own
//!   retries instead of failing records, which would force a reconnect and resend.
//! - `partitioner=murmur2_random`: the same partition as the Java client for the same
//!   key, so consumers written against Debezium see identical placement.
//! - Users may override anything with `--kafka-option`, except that turning
//!   idempotence off or weakening acks is refused: it would break the per-key order and
//!   "acked = durable" promises the LSN confirmation rests on.
//!
//! See <https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md>.

use rdkafka::ClientConfig;

/// A `--kafka-option` that would break the delivery guarantees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--kafka-option {key}={value} is not allowed: {why}; fix: remove it (pgoutbox sets {key}={required})")]
pub struct UnsafeOption {
    /// Option name.
    pub key: String,
    /// Value given.
    pub value: String,
    /// What it would break.
    pub why: &'static str,
    /// The value pgoutbox uses.
    pub required: &'static str,
}

/// Settings applied before user options, as (key, value).
pub const DEFAULTS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("message.timeout.ms", "0"),
    ("partitioner", "murmur2_random"),
    ("client.id", "pgoutbox"),
    // The pipeline bounds what it hands over; keep librdkafka's own queue in line
    // with that so memory stays bounded even if the pipeline's cap is raised.
    ("queue.buffering.max.kbytes", "131072"),
    ("queue.buffering.max.messages", "200000"),
    ("linger.ms", "5"),
    ("compression.type", "lz4"),
];

/// Build the librdkafka configuration: defaults, then user `options`.
pub fn producer_config(
    brokers: &str,
    options: &[(String, String)],
) -> Result<ClientConfig, UnsafeOption> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (k, v) in DEFAULTS {
        config.set(*k, *v);
    }
    for (key, value) in options {
        check_option(key, value)?;
        config.set(key, value);
    }
    Ok(config)
}

fn check_option(key: &str, value: &str) -> Result<(), UnsafeOption> {
    let refuse = |why, required| {
        Err(UnsafeOption {
            key: key.to_owned(),
            value: value.to_owned(),
            why,
            required,
        })
    };
    match (key, value.to_ascii_lowercase().as_str()) {
        ("enable.idempotence", v) if v != "true" => refuse(
            "without idempotence a retry can duplicate or reorder records of one key",
            "true",
        ),
        ("acks" | "request.required.acks", v) if v != "all" && v != "-1" => refuse(
            "an ack from fewer than all in-sync replicas can be lost, and the slot would already be confirmed past it",
            "all",
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_safe_and_overridable() {
        let cfg = producer_config(
            "b:9092",
            &[
                ("linger.ms".into(), "20".into()),
                ("acks".into(), "-1".into()),
            ],
        )
        .unwrap();
        assert_eq!(cfg.get("enable.idempotence"), Some("true"));
        assert_eq!(cfg.get("partitioner"), Some("murmur2_random"));
        assert_eq!(cfg.get("linger.ms"), Some("20"));
        assert_eq!(cfg.get("bootstrap.servers"), Some("b:9092"));
    }

    #[test]
    fn weakening_options_are_refused_with_the_fix() {
        let err = producer_config("b", &[("acks".into(), "1".into())]).unwrap_err();
        assert!(err.to_string().contains("pgoutbox sets acks=all"), "{err}");
        assert!(producer_config("b", &[("enable.idempotence".into(), "false".into())]).is_err());
    }
}
