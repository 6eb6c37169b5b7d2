//! Checks of the relay's own settings, which need no PostgreSQL connection: each
//! table's topic template, and the brokers reached with the settings `run` uses.
//!
//! Invariant: a template `run` would refuse at start-up fails here with the same
//! words ([`TopicTemplate::parse`]); the broker check builds the very producer
//! configuration `run` builds (defaults plus `--kafka-option`), so a TLS or SASL
//! cluster is checked as `run` will reach it, and no secret value appears in a
//! verdict.

use std::time::Duration;

use rdkafka::producer::{BaseProducer, Producer};

use super::{Check, TemplateInput};
use crate::kafka::config::{producer_config, KafkaOptions, Scrubber};
use crate::outbox::routing::TopicTemplate;

/// How long the broker check waits for cluster metadata.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// `topic_template` of one table: the fixed text must be able to be part of a
/// Kafka topic name, with no placeholder but `${routedByValue}`.
pub(super) fn template_check(input: &TemplateInput) -> Check {
    let object = input.table.to_string();
    match TopicTemplate::parse(&input.template) {
        Ok(_) => Check::pass("topic_template", object, format!("{:?}", input.template)),
        Err(err) => {
            let text = err.to_string();
            let (problem, fix) = text.split_once("; fix: ").unwrap_or((&text, ""));
            Check::fail(
                "topic_template",
                object,
                format!("{:?} ({}): {problem}", input.template, input.origin),
                format!("{fix} (run refuses to start with this template)"),
            )
        }
    }
}

/// Ask the brokers for cluster metadata through a producer configured like `run`'s
/// (a real round trip, so DNS, TCP, TLS and authentication all take part).
pub(super) async fn kafka_check(brokers: &str, options: &KafkaOptions) -> Check {
    let fix = "check --brokers and the network path (DNS, firewall), and the TLS/SASL \
               settings (--kafka-option security.protocol=…, sasl.*, ssl.*)";
    let config = match producer_config(brokers, options) {
        Ok(config) => config,
        Err(err) => return Check::fail("kafka", brokers, err.to_string(), fix),
    };
    let scrubber = Scrubber::new(&config);
    // fetch_metadata blocks for up to KAFKA_TIMEOUT.
    let mut config = config;
    let result = tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = config.set("client.id", "pgoutbox-check").create()?;
        let metadata = producer.client().fetch_metadata(None, KAFKA_TIMEOUT)?;
        Ok::<_, rdkafka::error::KafkaError>((metadata.brokers().len(), metadata.topics().len()))
    })
    .await;
    match result {
        Ok(Ok((brokers_seen, topics))) => Check::pass(
            "kafka",
            brokers,
            format!("reachable: {brokers_seen} broker(s), {topics} topic(s)"),
        ),
        Ok(Err(err)) => Check::fail(
            "kafka",
            brokers,
            scrubber.scrub(&format!("unreachable within {KAFKA_TIMEOUT:?}: {err}")),
            fix,
        ),
        Err(err) => Check::fail("kafka", brokers, format!("check task failed: {err}"), fix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::names::TableName;

    fn input(template: &str) -> TemplateInput {
        TemplateInput {
            table: TableName::parse("public.outbox").unwrap(),
            template: template.into(),
            origin: "--topic-template".into(),
        }
    }

    /// Regression (issue 13 item 9): `check` passed both templates with exit 0.
    #[test]
    fn bad_templates_fail_with_the_fix() {
        let check = template_check(&input("orders/${routedByValue}"));
        assert!(!check.ok);
        assert_eq!(check.name, "topic_template");
        assert_eq!(check.object, "public.outbox");
        assert_eq!(
            check.observed,
            "\"orders/${routedByValue}\" (--topic-template): '/' (character 7) cannot be part \
             of a Kafka topic name, which allows only a-z A-Z 0-9 . _ -"
        );
        assert_eq!(
            check.fix.as_deref(),
            Some("e.g. orders.${routedByValue} (run refuses to start with this template)")
        );
        let check = template_check(&input("outbox.${routedbyvalue}"));
        assert!(!check.ok);
        assert!(check
            .fix
            .as_deref()
            .is_some_and(|f| f.starts_with("did you mean ${routedByValue}?")));
        assert!(template_check(&input("outbox.event.${routedByValue}")).ok);
    }
}
