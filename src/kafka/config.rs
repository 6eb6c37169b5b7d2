//! Producer configuration.
//!
//! Owns the librdkafka settings that make delivery safe, the rule for user
//! overrides, and the handling of secret settings. Invariants:
//! - `enable.idempotence=true` and `acks=all`: a retry never duplicates or reorders
//!   within a partition, and an ack means every in-sync replica has the record.
//! - `message.timeout.ms=0` (infinite): an outage is waited out by librdkafka's own
//!   retries instead of failing records, which would force a reconnect and resend.
//! - `enable.gapless.guarantee=true`: a record the broker fails for good (a
//!   size refusal, an epoch it no longer takes) stops the producer instead of
//!   letting the records behind it through under a bumped epoch; the relay then
//!   resends from the slot with a new producer, so a key's events never overtake
//!   one that failed (without it: reordered 9 of 400 in
//!   `mock_kafka::a_record_failed_for_good_never_lets_later_ones_of_its_key_overtake_it`).
//! - `partitioner=murmur2_random`: the same partition as the Java client for the same
//!   key, so consumers written against Debezium see identical placement.
//! - `message.max.bytes=1048588`, the broker's default: every record a default
//!   broker accepts leaves the relay (librdkafka's own 1,000,000 refused some).
//! - Users may override anything with `--kafka-option`, except that turning
//!   idempotence or the gapless guarantee off, or weakening acks, is refused: it
//!   would break the per-key order and "acked = durable" promises the LSN
//!   confirmation rests on.
//! - The value of a secret setting ([`is_secret`]: `sasl.password`, `*.password`,
//!   `ssl.key.pem`, `*secret*`, …) lives only in a [`Secret`]: `Debug` and
//!   [`KafkaOptions::redacted`] print `[redacted]`, and [`Scrubber`] removes it from
//!   any text librdkafka produces before that text is logged or returned in an error.
//!
//! Several options can share one `--kafka-option` / `PGOUTBOX_KAFKA_OPTION` value,
//! comma-separated; a comma only starts a new option when `key=` follows it, so
//! `debug=broker,topic` and a password containing a comma stay whole.
//!
//! See <https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md>.

use std::fmt;

use rdkafka::ClientConfig;

use crate::secret::Secret;

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

/// A `--kafka-option` that does not parse. Never holds text that may be a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionError {
    /// A bare word that looks like a property name, without `=value`.
    #[error("invalid --kafka-option {0:?}: expected key=value, e.g. linger.ms=10")]
    NoValue(String),
    /// Text that is not shaped like `key=value`; not shown, as it may be a secret.
    #[error("invalid --kafka-option (text not shown, it may hold a secret): expected key=value, e.g. linger.ms=10; give the SASL password with --kafka-sasl-password-file")]
    Withheld,
    /// A setting that would weaken delivery.
    #[error(transparent)]
    Unsafe(#[from] UnsafeOption),
    /// A feature this build of librdkafka leaves out on purpose.
    #[error("--kafka-option {key}={value} is not supported: {why}; fix: {fix}")]
    Unsupported {
        /// Option name.
        key: String,
        /// Value given.
        value: String,
        /// Why the build has no support for it.
        why: &'static str,
        /// What to use instead.
        fix: &'static str,
    },
}

/// Settings applied before user options, as (key, value).
pub const DEFAULTS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("message.timeout.ms", "0"),
    ("enable.gapless.guarantee", "true"),
    ("partitioner", "murmur2_random"),
    ("client.id", "pgoutbox"),
    // The pipeline bounds what it hands over; keep librdkafka's own queue in line
    // with that so memory stays bounded even if the pipeline's cap is raised.
    ("queue.buffering.max.kbytes", "131072"),
    ("queue.buffering.max.messages", "200000"),
    // Chosen by measurement (bench/run.sh live, 1,000 inserts/s): linger 5 ms put
    // p50 commit→ack at 6.9 ms, 3 ms above the decode floor; 1 ms put it at 2.9 ms.
    // A backlog still fills whole batches (the queue is never empty).
    ("linger.ms", "1"),
    // lz4 cost ~2,200 instructions per record in the relay (callgrind, 100-row
    // transactions), ~15 % of its CPU; compress at the topic or set
    // --kafka-option compression.type=lz4 where bandwidth matters more.
    ("compression.type", "none"),
    // Every record a broker with Kafka's default limit takes must leave the relay.
    // librdkafka refuses a record up front when 36 bytes of worst-case record
    // framing + key + value + headers exceed message.max.bytes (default 1,000,000:
    // a 1,030,000-byte payload was refused, which Debezium's Java producer, whose
    // max.request.size is 1,048,576, delivers). The broker's message.max.bytes
    // (1,048,588) bounds a whole record batch — its 61-byte header plus the
    // records — so anything it accepts passes this check, and anything larger is
    // refused by the broker in its turn. batch.size stays at librdkafka's
    // 1,000,000, under the broker limit: several records are only batched up to
    // it, and a single larger record goes alone.
    ("message.max.bytes", MESSAGE_MAX_BYTES),
];

/// The broker's default `message.max.bytes` (Kafka 1 MiB + 12 bytes of log
/// overhead), pgoutbox's default limit for one record.
pub const MESSAGE_MAX_BYTES: &str = "1048588";

/// Whether the value of configuration key `key` (librdkafka's, or a Kafka Connect /
/// Debezium one) is a credential: passwords and passphrases, secrets, tokens,
/// credentials, JAAS/OAUTHBEARER configuration, inline private keys.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("passphrase")
        || key.contains("credential")
        || key.contains("secret")
        || key.contains("token")
        || key.contains("jaas")
        || key.contains("private.key")
        || key == "ssl.key.pem"
        || key == "ssl_key"
        || key == "sasl.oauthbearer.config"
}

/// Removes the secret values of a librdkafka configuration from text (librdkafka's
/// log lines and error messages), replacing each by `[redacted]`.
#[derive(Clone, Default)]
pub struct Scrubber {
    secrets: Vec<Secret>,
}

impl Scrubber {
    /// A scrubber for the secret settings of `config`.
    pub fn new(config: &ClientConfig) -> Self {
        // `config_map()` masks the values librdkafka knows to be sensitive; `get`
        // returns what was set.
        let secrets = config
            .config_map()
            .keys()
            .filter(|key| is_secret(key))
            .filter_map(|key| config.get(key))
            .filter(|value| !value.is_empty())
            .map(Secret::from)
            .collect();
        Scrubber { secrets }
    }

    /// `text` without any secret value.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            out = out.replace(secret.expose(), "[redacted]");
        }
        out
    }
}

#[derive(Clone, PartialEq, Eq)]
enum Value {
    Plain(String),
    Secret(Secret),
}

impl Value {
    fn new(key: &str, value: String) -> Self {
        if is_secret(key) {
            Value::Secret(Secret::from(value))
        } else {
            Value::Plain(value)
        }
    }

    fn expose(&self) -> &str {
        match self {
            Value::Plain(v) => v,
            Value::Secret(s) => s.expose(),
        }
    }
}

/// The user's librdkafka settings, in order; secret values are [`Secret`]s.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaOptions {
    items: Vec<(String, Value)>,
}

impl KafkaOptions {
    /// The options every client of the relay needs — brokers' addresses aside:
    /// connection, security and diagnostics settings (`security.*`, `ssl.*`,
    /// `sasl.*`, `socket.*`, …), not the producer's own, which a consumer or admin
    /// client would warn about. As (key, value), secrets exposed: for a client's
    /// configuration only.
    pub fn connection_options(&self) -> impl Iterator<Item = (&str, &str)> {
        const SHARED: &[&str] = &[
            "security.",
            "ssl.",
            "sasl.",
            "socket.",
            "broker.",
            "enable.ssl",
            "reconnect.",
            "api.version",
            "debug",
            "connections.",
            "metadata.",
            "topic.metadata",
        ];
        self.items
            .iter()
            .filter(|(key, _)| SHARED.iter().any(|p| key.starts_with(p)))
            .map(|(key, value)| (key.as_str(), value.expose()))
    }

    /// Parse `--kafka-option` values (each may hold several comma-separated options)
    /// and refuse the ones that would weaken delivery.
    pub fn parse<S: AsRef<str>>(raw: &[S]) -> Result<Self, OptionError> {
        let mut options = KafkaOptions::default();
        for text in raw {
            for part in split_options(text.as_ref()) {
                let Some((key, value)) = part.split_once('=').filter(|(k, _)| is_key(k.trim()))
                else {
                    let word = part.trim();
                    return Err(if is_key(word) {
                        OptionError::NoValue(word.to_owned())
                    } else {
                        OptionError::Withheld
                    });
                };
                let (key, value) = (key.trim(), value.trim());
                check_option(key, value)?;
                check_supported(key, value)?;
                options.set(key, Value::new(key, value.to_owned()));
            }
        }
        Ok(options)
    }

    /// The value of a setting that is not a secret (`None` for a secret or unset).
    pub fn plain(&self, key: &str) -> Option<&str> {
        self.items.iter().find_map(|(k, v)| match v {
            Value::Plain(v) if k == key => Some(v.as_str()),
            _ => None,
        })
    }

    /// Set `key` to a secret (e.g. `sasl.password` from a file), replacing any value.
    pub fn set_secret(&mut self, key: &str, value: Secret) {
        self.set(key, Value::Secret(value));
    }

    fn set(&mut self, key: &str, value: Value) {
        match self.items.iter_mut().find(|(k, _)| k == key) {
            Some((_, slot)) => *slot = value,
            None => self.items.push((key.to_owned(), value)),
        }
    }

    /// The settings with secret values shown as `[redacted]`, for display.
    pub fn redacted(&self) -> Vec<(String, String)> {
        self.items
            .iter()
            .map(|(k, v)| {
                let shown = match v {
                    Value::Plain(text) => text.clone(),
                    Value::Secret(_) => "[redacted]".to_owned(),
                };
                (k.clone(), shown)
            })
            .collect()
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl fmt::Debug for KafkaOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.redacted()).finish()
    }
}

/// Split one raw value at the commas that start another `key=` option.
fn split_options(raw: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, _) in raw.match_indices(',') {
        let next = raw[i + 1..].trim_start();
        let starts_option = next
            .split_once('=')
            .is_some_and(|(key, _)| is_key(key.trim_end()));
        if starts_option {
            parts.push(&raw[start..i]);
            start = i + 1;
        }
    }
    parts.push(&raw[start..]);
    // Stray separators (" , ", a trailing comma) are not options.
    parts
        .into_iter()
        .filter(|p| !p.trim().trim_matches(',').trim().is_empty())
        .collect()
}

/// A librdkafka property name: `linger.ms`, `sasl.mechanism`, `ssl_key`.
fn is_key(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text.len() <= 100
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Build the librdkafka configuration: defaults, then user `options`.
pub fn producer_config(
    brokers: &str,
    options: &KafkaOptions,
) -> Result<ClientConfig, UnsafeOption> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (k, v) in DEFAULTS {
        config.set(*k, *v);
    }
    for (key, value) in &options.items {
        check_option(key, value.expose())?;
        config.set(key, value.expose());
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
        ("enable.gapless.guarantee", v) if v != "true" => refuse(
            "without it a record failed for good lets the records behind it through, and the resend from the slot puts it after them: a key's events out of order",
            "true",
        ),
        ("acks" | "request.required.acks", v) if v != "all" && v != "-1" => refuse(
            "an ack from fewer than all in-sync replicas can be lost, and the slot would already be confirmed past it",
            "all",
        ),
        _ => Ok(()),
    }
}

/// Refuse what this librdkafka build leaves out, before librdkafka's own
/// "no provider for SASL mechanism" at producer creation.
fn check_supported(key: &str, value: &str) -> Result<(), OptionError> {
    let is = |v: &str| value.eq_ignore_ascii_case(v);
    let why = match key {
        "sasl.mechanism" | "sasl.mechanisms" if is("GSSAPI") => {
            "pgoutbox's librdkafka is built without Kerberos (SASL/GSSAPI needs Cyrus SASL \
             and Kerberos libraries on every host that builds or runs it, which the \
             self-contained build leaves out)"
        }
        "sasl.oauthbearer.method" if is("oidc") => {
            "pgoutbox's librdkafka is built without libcurl, which it needs to fetch OIDC \
             tokens itself"
        }
        _ => return Ok(()),
    };
    Err(OptionError::Unsupported {
        key: key.to_owned(),
        value: value.to_owned(),
        why,
        fix: "use sasl.mechanism=SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN over \
              security.protocol=SASL_SSL, or TLS client certificates \
              (security.protocol=SSL with ssl.certificate.location and ssl.key.location)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gssapi_and_oidc_are_refused_with_the_alternatives() {
        for (raw, why) in [
            ("sasl.mechanism=GSSAPI", "Kerberos"),
            ("sasl.mechanisms=gssapi", "Kerberos"),
            ("sasl.oauthbearer.method=OIDC", "libcurl"),
        ] {
            let err = KafkaOptions::parse(&[raw]).unwrap_err().to_string();
            assert!(
                err.contains(&format!("--kafka-option {raw} is not supported")),
                "{err}"
            );
            assert!(err.contains(why), "{err}");
            assert!(
                err.contains("fix: use sasl.mechanism=SCRAM-SHA-512"),
                "{err}"
            );
        }
        for fine in [
            "sasl.mechanism=SCRAM-SHA-256",
            "sasl.mechanism=PLAIN",
            "sasl.oauthbearer.method=default",
        ] {
            assert!(KafkaOptions::parse(&[fine]).is_ok(), "{fine}");
        }
    }

    fn options(raw: &[&str]) -> KafkaOptions {
        KafkaOptions::parse(raw).unwrap()
    }

    #[test]
    fn defaults_are_safe_and_overridable() {
        let cfg = producer_config("b:9092", &options(&["linger.ms=20", "acks=-1"])).unwrap();
        assert_eq!(cfg.get("enable.idempotence"), Some("true"));
        assert_eq!(cfg.get("enable.gapless.guarantee"), Some("true"));
        assert_eq!(cfg.get("partitioner"), Some("murmur2_random"));
        assert_eq!(cfg.get("linger.ms"), Some("20"));
        assert_eq!(cfg.get("bootstrap.servers"), Some("b:9092"));
        assert_eq!(cfg.get("message.max.bytes"), Some("1048588"));
        let cfg = producer_config("b", &options(&["message.max.bytes=10485760"])).unwrap();
        assert_eq!(cfg.get("message.max.bytes"), Some("10485760"));
    }

    #[test]
    fn weakening_options_are_refused_with_the_fix() {
        let err = KafkaOptions::parse(&["acks=1"]).unwrap_err();
        assert!(err.to_string().contains("pgoutbox sets acks=all"), "{err}");
        assert!(KafkaOptions::parse(&["enable.idempotence=false"]).is_err());
        assert!(KafkaOptions::parse(&["enable.gapless.guarantee=false"]).is_err());
    }

    #[test]
    fn commas_split_only_before_another_key() {
        // (A secret containing ",key=" would be cut there: such passwords belong in
        // --kafka-sasl-password-file.)
        let o = options(&["linger.ms=10, debug=broker,topic,msg ,sasl.password=a,b=c,d"]);
        let shown = o.redacted();
        assert_eq!(
            shown,
            [
                ("linger.ms".to_owned(), "10".to_owned()),
                ("debug".to_owned(), "broker,topic,msg".to_owned()),
                ("sasl.password".to_owned(), "[redacted]".to_owned()),
                ("b".to_owned(), "c,d".to_owned()),
            ]
        );
        let cfg = producer_config("b", &options(&["sasl.password=p,w d", "x.y=1"])).unwrap();
        assert_eq!(cfg.get("sasl.password"), Some("p,w d"));
        assert_eq!(cfg.get("x.y"), Some("1"));
        // The later value of a key wins; a file-given secret replaces the option.
        let mut o = options(&["linger.ms=1", "linger.ms=2", "sasl.password=old"]);
        o.set_secret("sasl.password", Secret::from("new"));
        let cfg = producer_config("b", &o).unwrap();
        assert_eq!(cfg.get("linger.ms"), Some("2"));
        assert_eq!(cfg.get("sasl.password"), Some("new"));
    }

    #[test]
    fn secrets_are_recognised_and_never_shown() {
        for key in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.config",
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "sasl.oauthbearer.assertion.private.key.pem",
            "ssl.key.pem",
            "sasl.jaas.config",
            "SASL.PASSWORD",
        ] {
            assert!(is_secret(key), "{key}");
        }
        for key in [
            "sasl.username",
            "ssl.ca.location",
            "ssl.key.location",
            "linger.ms",
        ] {
            assert!(!is_secret(key), "{key}");
        }
        let o = options(&[
            "sasl.username=relay",
            "sasl.password=canary-123",
            "ssl.key.password=canary-456",
        ]);
        let debug = format!("{o:?}");
        assert!(!debug.contains("canary"), "{debug}");
        assert!(debug.contains("\"sasl.username\": \"relay\""), "{debug}");
        let cfg = producer_config("b", &o).unwrap();
        assert_eq!(
            Scrubber::new(&cfg).scrub("auth failed for relay with canary-123 / canary-456"),
            "auth failed for relay with [redacted] / [redacted]"
        );
    }

    #[test]
    fn malformed_options_never_echo_what_may_be_a_secret() {
        assert_eq!(
            KafkaOptions::parse(&["linger.ms"]).unwrap_err(),
            OptionError::NoValue("linger.ms".into())
        );
        let err = KafkaOptions::parse(&["sasl.password hunter2"]).unwrap_err();
        assert_eq!(err, OptionError::Withheld);
        assert!(!err.to_string().contains("hunter2"));
        assert_eq!(
            KafkaOptions::parse(&["=x"]).unwrap_err(),
            OptionError::Withheld
        );
        assert!(options(&["", " , "]).is_empty());
    }
}
