//! What became of a record: [`Delivery`], and the classification of librdkafka's
//! error codes into what the pipeline needs to know of a failure.
//!
//! The rules (each pinned by a unit test below, named after it):
//! - *permanent* ([`is_permanent`]): the record can never be delivered as is — too
//!   large, topic invalid, unknown or unauthorized, cluster unauthorized, refused
//!   as invalid (record, acks, argument) or by a broker policy, or librdkafka's
//!   `Fatal`. The relay stops and does not confirm.
//! - every other code is *transient* (timeouts, transport, a broker not yet
//!   reachable): the relay reconnects and the record is sent again.
//! - *too large* ([`is_too_large`]) is the one permanent refusal a dead letter can
//!   stand in for: only then is the record's key and `event_type` kept.
//!
//! Invariant: [`DeliveryError`]s are built in one place (`delivery_error`), so the
//! code, the scrubbed reason and the permanence can never disagree.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Headers;

use crate::kafka::config::Scrubber;

/// The outcome of one record.
#[derive(Debug)]
pub struct Delivery {
    /// The tag given to [`KafkaSink::send`].
    pub tag: usize,
    /// Bytes the record counted in flight ([`KafkaRecord::size`]).
    pub size: usize,
    /// Acked, or why not.
    pub result: Result<(), DeliveryError>,
    /// How long librdkafka had the record: from the hand-over to this report being
    /// served (its queue, `linger.ms`, the request, the broker, the response). The
    /// Kafka share of commit → ack. `None` for a record librdkafka never took.
    pub in_kafka: Option<std::time::Duration>,
    /// Where an acked record was written: [`placement`] of its topic and partition;
    /// `0` when not known (a failure).
    pub placement: u64,
}

/// A hash of `topic` and `partition` that tells partitions apart (FNV-1a over the
/// topic's bytes, then the partition's): the in-flight window counts the
/// partitions written to with it. Never `0` (which stands for "not known").
pub fn placement(topic: &str, partition: i32) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in topic.bytes().chain(partition.to_le_bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash.max(1)
}

/// A record librdkafka could not deliver.
#[derive(Debug, Clone, thiserror::Error)]
#[error("kafka did not accept event {event_id} for topic {topic:?}: {reason} ({code:?}){}", fix_for(*code))]
pub struct DeliveryError {
    /// librdkafka's error code.
    pub code: RDKafkaErrorCode,
    /// Its description.
    pub reason: String,
    /// Destination topic.
    pub topic: String,
    /// The `id` header of the record.
    pub event_id: String,
    /// Whether retrying the same record can never succeed.
    pub permanent: bool,
    /// The refused record's key and `event_type` header, kept for a dead letter
    /// when the broker refused the record's size (`None` otherwise).
    pub refused: Option<Box<RefusedRecord>>,
}

/// What a dead letter needs of a record the broker refused.
#[derive(Debug, Clone)]
pub struct RefusedRecord {
    /// Record key.
    pub key: Option<bytes::Bytes>,
    /// Header `event_type`.
    pub event_type: Option<bytes::Bytes>,
}

impl DeliveryError {
    /// Whether the record was refused for its size (by librdkafka or the broker).
    pub fn is_too_large(&self) -> bool {
        is_too_large(self.code)
    }
}

/// Whether a Kafka error code means "this record is too large".
pub fn is_too_large(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize
    )
}

pub(super) fn fix_for(code: RDKafkaErrorCode) -> &'static str {
    use RDKafkaErrorCode as E;
    match code {
        E::MessageSizeTooLarge | E::InvalidMessageSize => {
            "; fix: raise the broker's message.max.bytes (and --kafka-option message.max.bytes=…), or make the payload smaller"
        }
        E::TopicAuthorizationFailed => "; fix: grant the relay's principal WRITE on the topic",
        E::UnknownTopicOrPartition | E::UnknownTopic => {
            "; fix: create the topic, or enable auto.create.topics.enable on the brokers"
        }
        E::InvalidTopic => "; fix: change --topic-template so it yields a legal topic name (an UPDATE of the row changes nothing: the relay reads the row as it was inserted)",
        _ => "",
    }
}

/// Whether a Kafka error code means the record can never be delivered as is.
pub fn is_permanent(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as E;
    matches!(
        code,
        E::MessageSizeTooLarge
            | E::InvalidMessageSize
            | E::MessageBatchTooLarge
            | E::TopicAuthorizationFailed
            | E::ClusterAuthorizationFailed
            | E::UnknownTopicOrPartition
            | E::UnknownTopic
            | E::InvalidTopic
            | E::InvalidRecord
            | E::PolicyViolation
            | E::InvalidRequiredAcks
            | E::Fatal
            | E::InvalidArgument
    )
}

/// Whether `code` says another producer with this relay's transactional id took
/// over (exactly-once): this producer is a zombie and must write nothing more.
/// librdkafka raises `_FENCED` as its fatal error; the broker answers
/// `PRODUCER_FENCED` (or, before KIP-588, `INVALID_PRODUCER_EPOCH`).
pub fn is_fence(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as E;
    matches!(
        code,
        E::Fenced | E::ProducerFenced | E::InvalidProducerEpoch
    )
}

/// A record's key and `event_type` header value: what a dead letter of a size
/// refusal keeps.
pub(super) type Refusable<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// The [`DeliveryError`] for `err` on a record of `topic`: the one place its code,
/// scrubbed reason and permanence are derived. `refusable` is the record's key and
/// `event_type` header, kept (copied) for a dead letter when `err` is a size
/// refusal; `None` when the caller still holds the whole record.
pub(super) fn delivery_error(
    scrubber: &Scrubber,
    err: &KafkaError,
    topic: String,
    event_id: String,
    refusable: Option<Refusable<'_>>,
) -> DeliveryError {
    let code = err.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
    let copy = |b: Option<&[u8]>| b.map(bytes::Bytes::copy_from_slice);
    DeliveryError {
        code,
        reason: scrubber.scrub(&err.to_string()),
        topic,
        event_id,
        permanent: is_permanent(code),
        refused: refusable
            .filter(|_| is_too_large(code))
            .map(|(key, event_type)| {
                Box::new(RefusedRecord {
                    key: copy(key),
                    event_type: copy(event_type),
                })
            }),
    }
}

/// The value of the first header called `name` (`None` also for a null value).
pub(super) fn header_value<'a, H: Headers>(headers: &'a H, name: &str) -> Option<&'a [u8]> {
    headers.iter().find(|h| h.key == name).and_then(|h| h.value)
}

#[cfg(test)]
mod tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as E};
    use rdkafka::ClientConfig;

    use super::*;

    /// Refusals of the record itself: its size, by librdkafka or the broker.
    const SIZE: [E; 3] = [
        E::MessageSizeTooLarge,
        E::InvalidMessageSize,
        E::MessageBatchTooLarge,
    ];
    /// Refusals of the principal on the topic or the cluster.
    const AUTHORIZATION: [E; 2] = [E::TopicAuthorizationFailed, E::ClusterAuthorizationFailed];
    /// The topic is missing or its name illegal.
    const TOPIC: [E; 3] = [E::UnknownTopicOrPartition, E::UnknownTopic, E::InvalidTopic];
    /// The broker or librdkafka refused the record or the request as malformed, or
    /// the producer itself is broken.
    const REFUSED: [E; 5] = [
        E::InvalidRecord,
        E::PolicyViolation,
        E::InvalidRequiredAcks,
        E::Fatal,
        E::InvalidArgument,
    ];
    /// Trouble on the way: timeouts, transport, leadership moving, too few replicas,
    /// a full queue, the generic failure.
    const TRANSIENT: [E; 13] = [
        E::MessageTimedOut,
        E::RequestTimedOut,
        E::BrokerTransportFailure,
        E::AllBrokersDown,
        E::LeaderNotAvailable,
        E::NotLeaderForPartition,
        E::NetworkException,
        E::NotEnoughReplicas,
        E::NotEnoughReplicasAfterAppend,
        E::QueueFull,
        E::NotCoordinator,
        E::Fail,
        E::Unknown,
    ];

    fn error(code: E) -> DeliveryError {
        delivery_error(
            &Scrubber::default(),
            &KafkaError::MessageProduction(code),
            "orders".into(),
            "ev-1".into(),
            Some((Some(b"key-1"), Some(b"OrderCreated"))),
        )
    }

    #[test]
    fn size_refusals_are_permanent() {
        for code in SIZE {
            assert!(is_permanent(code), "{code:?}");
        }
    }

    #[test]
    fn only_record_size_refusals_are_too_large_not_a_batch_refusal() {
        assert!(is_too_large(E::MessageSizeTooLarge));
        assert!(is_too_large(E::InvalidMessageSize));
        // A batch refusal is permanent but not the record's own size: no dead letter.
        assert!(!is_too_large(E::MessageBatchTooLarge));
        for code in AUTHORIZATION
            .into_iter()
            .chain(TOPIC)
            .chain(REFUSED)
            .chain(TRANSIENT)
        {
            assert!(!is_too_large(code), "{code:?}");
        }
    }

    #[test]
    fn topic_and_cluster_authorization_refusals_are_permanent() {
        for code in AUTHORIZATION {
            assert!(is_permanent(code), "{code:?}");
        }
    }

    #[test]
    fn sasl_and_transactional_id_refusals_are_transient() {
        // Not in the permanent list: a failed login is a connection problem
        // (credentials may be rotated while the relay retries); a refused
        // transactional id is a transactional call's error, said with its ACL
        // (`TxnError::NotAuthorized`), never a record's.
        for code in [
            E::SaslAuthenticationFailed,
            E::Authentication,
            E::TransactionalIdAuthorizationFailed,
        ] {
            assert!(!is_permanent(code), "{code:?}");
        }
    }

    #[test]
    fn fencing_is_told_apart_from_every_other_error() {
        for code in [E::Fenced, E::ProducerFenced, E::InvalidProducerEpoch] {
            assert!(is_fence(code), "{code:?}");
        }
        for code in SIZE
            .into_iter()
            .chain(AUTHORIZATION)
            .chain(TOPIC)
            .chain(REFUSED)
            .chain(TRANSIENT)
        {
            assert!(!is_fence(code), "{code:?}");
        }
    }

    #[test]
    fn unknown_or_invalid_topics_are_permanent() {
        for code in TOPIC {
            assert!(is_permanent(code), "{code:?}");
        }
    }

    #[test]
    fn invalid_records_policy_violations_and_fatal_errors_are_permanent() {
        for code in REFUSED {
            assert!(is_permanent(code), "{code:?}");
        }
    }

    #[test]
    fn timeouts_transport_and_leadership_errors_are_transient() {
        for code in TRANSIENT {
            assert!(!is_permanent(code), "{code:?}");
        }
    }

    #[test]
    fn the_idempotence_sequence_error_is_not_a_record_refusal() {
        // OUT_OF_ORDER_SEQUENCE_NUMBER ends the producer through `fatal_error` and
        // `renew`, not by refusing the record for good.
        assert!(!is_permanent(E::OutOfOrderSequenceNumber));
        assert!(!is_permanent(E::DuplicateSequenceNumber));
    }

    #[test]
    fn a_delivery_error_takes_its_permanence_from_its_code() {
        for code in SIZE
            .into_iter()
            .chain(AUTHORIZATION)
            .chain(TOPIC)
            .chain(REFUSED)
        {
            assert!(error(code).permanent, "{code:?}");
        }
        for code in TRANSIENT {
            assert!(!error(code).permanent, "{code:?}");
        }
    }

    #[test]
    fn an_error_without_a_code_is_a_transient_fail() {
        let err = delivery_error(
            &Scrubber::default(),
            &KafkaError::Canceled,
            "orders".into(),
            "ev-1".into(),
            None,
        );
        assert_eq!(err.code, E::Fail);
        assert!(!err.permanent);
    }

    #[test]
    fn only_a_size_refusal_keeps_the_key_and_event_type_for_a_dead_letter() {
        let refused = error(E::MessageSizeTooLarge).refused.expect("kept");
        assert_eq!(refused.key.as_deref(), Some(&b"key-1"[..]));
        assert_eq!(refused.event_type.as_deref(), Some(&b"OrderCreated"[..]));
        assert!(error(E::MessageSizeTooLarge).is_too_large());
        for code in [
            E::MessageBatchTooLarge,
            E::TopicAuthorizationFailed,
            E::MessageTimedOut,
        ] {
            assert!(error(code).refused.is_none(), "{code:?}");
        }
        // The caller still holds the whole record: nothing is copied.
        let err = delivery_error(
            &Scrubber::default(),
            &KafkaError::MessageProduction(E::MessageSizeTooLarge),
            "orders".into(),
            "ev-1".into(),
            None,
        );
        assert!(err.refused.is_none());
    }

    #[test]
    fn each_permanent_refusal_a_user_can_fix_names_the_fix() {
        let text = |code| error(code).to_string();
        assert!(text(E::MessageSizeTooLarge).contains("fix: raise the broker's message.max.bytes"));
        assert!(text(E::InvalidMessageSize).contains("fix: raise the broker's message.max.bytes"));
        assert!(
            text(E::TopicAuthorizationFailed).contains("fix: grant the relay's principal WRITE")
        );
        assert!(text(E::UnknownTopicOrPartition).contains("fix: create the topic"));
        assert!(text(E::UnknownTopic).contains("fix: create the topic"));
        assert!(text(E::InvalidTopic).contains("fix: change --topic-template"));
        for code in [E::ClusterAuthorizationFailed, E::MessageTimedOut] {
            assert!(!text(code).contains("fix:"), "{code:?}");
        }
        let full = text(E::UnknownTopic);
        assert!(
            full.starts_with("kafka did not accept event ev-1 for topic \"orders\": "),
            "{full}"
        );
    }

    #[test]
    fn the_reason_is_scrubbed_of_secret_values() {
        let mut config = ClientConfig::new();
        config.set("sasl.password", "canary-123");
        let scrubber = Scrubber::new(&config);
        let err = delivery_error(
            &scrubber,
            &KafkaError::ClientCreation("login with canary-123 failed".into()),
            "orders".into(),
            "ev-1".into(),
            None,
        );
        assert!(!err.reason.contains("canary-123"), "{}", err.reason);
        assert!(err.reason.contains("[redacted]"), "{}", err.reason);
    }
}
