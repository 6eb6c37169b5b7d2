//! A broker's authorization refusal, said as an operator needs it: the relay's
//! principal, the resource it lacks a right on, and the `kafka-acls` command that
//! grants it ([`NotAuthorized`]).
//!
//! Invariant: a refusal of the relay's rights is never a poison row (no
//! `--on-invalid` policy applies; the relay stops before the record and confirms
//! nothing past it), and the message never shows a secret.
//!
//! The principal is what the broker's default principal builder derives: `User:`
//! and the SASL user name (PLAIN, SCRAM), the client certificate's subject for
//! mutual TLS (not known here: said as such), `User:ANONYMOUS` otherwise. Since
//! Kafka 3.0 (KIP-679) an idempotent producer needs WRITE on the topics it writes
//! (InitProducerId is allowed by WRITE on any topic); IDEMPOTENT_WRITE on the
//! cluster is only needed by older brokers.

use rdkafka::error::RDKafkaErrorCode;

use super::config::KafkaOptions;

/// The relay's principal as the broker names it, from its Kafka settings.
pub fn principal(options: &KafkaOptions) -> String {
    let protocol = options
        .plain("security.protocol")
        .unwrap_or("plaintext")
        .to_ascii_lowercase();
    match (protocol.as_str(), options.plain("sasl.username")) {
        ("sasl_plaintext" | "sasl_ssl", Some(user)) => format!("User:{user}"),
        ("ssl", _) => "User:<the subject of the relay's client certificate>".to_owned(),
        _ => "User:ANONYMOUS".to_owned(),
    }
}

/// Whether `code` refuses the relay's rights (not the record).
pub fn is_authorization(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as E;
    matches!(
        code,
        E::TopicAuthorizationFailed
            | E::ClusterAuthorizationFailed
            | E::TransactionalIdAuthorizationFailed
            | E::GroupAuthorizationFailed
    )
}

/// The broker refused the relay's principal a right.
#[derive(Debug, Clone, thiserror::Error)]
#[error("kafka refused {principal} access to {resource}: {reason} ({code:?}); nothing was confirmed past the refused record; fix: grant it, e.g. `{command}`, and restart (since Kafka 3.0 WRITE on a topic lets an idempotent producer start; brokers before 3.0 also need IDEMPOTENT_WRITE on the cluster)")]
pub struct NotAuthorized {
    /// The relay's principal, e.g. `User:relay`.
    pub principal: String,
    /// What it was refused on, e.g. `topic "outbox.event.order"`.
    pub resource: String,
    /// librdkafka's code.
    pub code: RDKafkaErrorCode,
    /// librdkafka's reason (scrubbed).
    pub reason: String,
    /// The `kafka-acls.sh` command that grants the right.
    pub command: String,
}

impl NotAuthorized {
    /// The refusal of `resource`, fixed by WRITE and DESCRIBE on `target` (the
    /// `kafka-acls.sh` arguments naming it).
    fn granting(
        principal: String,
        bootstrap: &str,
        code: RDKafkaErrorCode,
        reason: String,
        (resource, target): (String, String),
    ) -> Self {
        let command = format!(
            "kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal {principal} --operation Write --operation Describe {target}"
        );
        Self {
            principal,
            resource,
            code,
            reason,
            command,
        }
    }

    /// A refusal with `code` on `topic` (`None`: a cluster-level refusal, e.g. of
    /// InitProducerId, which names no topic: the ACL offered then covers every
    /// topic starting with `prefix`, the topic template's fixed text), for the
    /// relay reaching `brokers`.
    pub fn new(
        options: &KafkaOptions,
        brokers: &str,
        code: RDKafkaErrorCode,
        reason: String,
        topic: Option<&str>,
        prefix: &str,
    ) -> Self {
        let principal = principal(options);
        let bootstrap = brokers.split(',').next().unwrap_or(brokers);
        let (resource, target) = match topic {
            Some(topic) => (format!("topic {topic:?}"), format!("--topic {topic}")),
            None if !prefix.is_empty() => (
                "the cluster (the idempotent producer's InitProducerId)".to_owned(),
                format!("--resource-pattern-type prefixed --topic {prefix}"),
            ),
            None => (
                "the cluster (the idempotent producer's InitProducerId)".to_owned(),
                "--topic TOPIC (each topic the relay writes)".to_owned(),
            ),
        };
        Self::granting(principal, bootstrap, code, reason, (resource, target))
    }
}

impl NotAuthorized {
    /// A refusal with `code` of the exactly-once producer with transactional id
    /// `id`: a refused transactional id needs WRITE and DESCRIBE on it; any other
    /// code met by a transactional call (a topic added to the transaction) is
    /// said as the topics' refusal.
    pub fn transactional(
        options: &KafkaOptions,
        brokers: &str,
        code: RDKafkaErrorCode,
        reason: String,
        id: &str,
    ) -> Self {
        let principal = principal(options);
        let bootstrap = brokers.split(',').next().unwrap_or(brokers);
        let (resource, target) = if code == RDKafkaErrorCode::TransactionalIdAuthorizationFailed {
            (
                format!("transactional id {id:?} (--delivery exactly-once)"),
                format!("--transactional-id {id}"),
            )
        } else {
            (
                format!("a topic of the transaction of {id:?}"),
                "--topic TOPIC (each topic the relay writes, and the watermark topic)".to_owned(),
            )
        };
        Self::granting(principal, bootstrap, code, reason, (resource, target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_transactional_id_gets_the_transactional_id_acl() {
        let sasl = options(&["security.protocol=SASL_SSL,sasl.username=relay"]);
        let err = NotAuthorized::transactional(
            &sasl,
            "k1:9092",
            RDKafkaErrorCode::TransactionalIdAuthorizationFailed,
            "Transactional Id authorization failed".into(),
            "pgoutbox-1-app-s",
        );
        let text = err.to_string();
        assert!(
            text.contains("access to transactional id \"pgoutbox-1-app-s\""),
            "{text}"
        );
        assert!(
            text.contains("--allow-principal User:relay --operation Write --operation Describe --transactional-id pgoutbox-1-app-s"),
            "{text}"
        );
    }

    fn options(raw: &[&str]) -> KafkaOptions {
        KafkaOptions::parse(raw).unwrap()
    }

    #[test]
    fn the_principal_is_the_sasl_user_or_anonymous() {
        let sasl = options(&["security.protocol=SASL_SSL,sasl.username=relay"]);
        assert_eq!(principal(&sasl), "User:relay");
        assert_eq!(principal(&options(&[])), "User:ANONYMOUS");
        let plain_with_user = options(&["sasl.username=relay"]);
        assert_eq!(principal(&plain_with_user), "User:ANONYMOUS");
        assert!(principal(&options(&["security.protocol=ssl"])).contains("certificate"));
    }

    #[test]
    fn a_topic_refusal_names_the_principal_the_topic_and_the_acl_command() {
        let sasl = options(&["security.protocol=SASL_PLAINTEXT,sasl.username=relay"]);
        let err = NotAuthorized::new(
            &sasl,
            "k1:9092,k2:9092",
            RDKafkaErrorCode::TopicAuthorizationFailed,
            "Broker: Topic authorization failed".into(),
            Some("outbox.event.order"),
            "outbox.event.",
        );
        let text = err.to_string();
        assert!(
            text.starts_with("kafka refused User:relay access to topic \"outbox.event.order\""),
            "{text}"
        );
        assert!(
            text.contains("kafka-acls.sh --bootstrap-server k1:9092 --add --allow-principal User:relay --operation Write --operation Describe --topic outbox.event.order"),
            "{text}"
        );
    }

    #[test]
    fn a_cluster_refusal_offers_the_acl_for_every_topic_of_the_template() {
        let err = NotAuthorized::new(
            &options(&["security.protocol=SASL_SSL,sasl.username=relay"]),
            "k1:9092",
            RDKafkaErrorCode::ClusterAuthorizationFailed,
            "Failed to acquire idempotence PID".into(),
            None,
            "outbox.event.",
        );
        let text = err.to_string();
        assert!(text.contains("access to the cluster"), "{text}");
        assert!(
            text.contains("--operation Write --operation Describe --resource-pattern-type prefixed --topic outbox.event."),
            "{text}"
        );
    }

    #[test]
    fn rights_are_not_records() {
        assert!(is_authorization(RDKafkaErrorCode::TopicAuthorizationFailed));
        assert!(is_authorization(
            RDKafkaErrorCode::ClusterAuthorizationFailed
        ));
        assert!(!is_authorization(RDKafkaErrorCode::MessageSizeTooLarge));
    }
}
