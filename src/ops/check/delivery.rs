//! The delivery checks: `delivery` says which mode `run` would be in with the same
//! flags (always, as a passing check), and `watermark_topic` (exactly-once, only
//! with brokers) looks at the compacted topic the watermarks go to — without
//! creating it, and never touching the transactional id (initialising it would
//! fence a running relay).

use std::time::Duration;

use super::Check;
use crate::kafka::config::KafkaOptions;
use crate::kafka::watermark::{self, TopicState};
use crate::pipeline::exactly_once::{self, ExactlyOnceConfig};

/// How long the broker may take to describe the watermark topic.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The mode in force; `transactional_id` is the derived id when the server's
/// identity could be read.
pub(super) fn mode_check(cfg: Option<&ExactlyOnceConfig>, transactional_id: Option<&str>) -> Check {
    let object = if cfg.is_some() {
        "--delivery exactly-once"
    } else {
        "--delivery at-least-once"
    };
    Check::pass(
        "delivery",
        object,
        exactly_once::describe(cfg, transactional_id),
    )
}

/// Whether the watermark topic exists and is compacted.
pub(super) async fn watermark_check(
    brokers: &str,
    options: &KafkaOptions,
    cfg: &ExactlyOnceConfig,
) -> Check {
    let topic = cfg.watermark_topic.as_str();
    let config = watermark::reader_config(brokers, options);
    let create = format!(
        "kafka-topics.sh --bootstrap-server {brokers} --create --topic {topic} \
         --partitions 1 --config cleanup.policy=compact"
    );
    match watermark::inspect_topic(&config, topic, DESCRIBE_TIMEOUT).await {
        Ok(TopicState::Compacted) => {
            Check::pass("watermark_topic", topic, "exists, cleanup.policy=compact")
        }
        Ok(TopicState::Missing) => Check::pass(
            "watermark_topic",
            topic,
            "does not exist yet: run creates it (compacted, 1 partition) on its first start \
             where its principal may create topics",
        )
        .suggest(format!(
            "to create it yourself (and grant the relay READ and WRITE on it): {create}"
        )),
        Ok(TopicState::NotCompacted(policy)) => Check::fail(
            "watermark_topic",
            topic,
            format!(
                "cleanup.policy={policy}: retention would delete the newest watermark of an \
                 idle relay, and a restart could no longer tell what Kafka holds"
            ),
            format!(
                "kafka-configs.sh --bootstrap-server {brokers} --alter --entity-type topics \
                 --entity-name {topic} --add-config cleanup.policy=compact"
            ),
        ),
        Ok(TopicState::Undescribed(why)) => Check::pass(
            "watermark_topic",
            topic,
            format!("the broker would not describe it ({why}); run checks it when it starts"),
        )
        .suggest("grant the relay's principal DESCRIBE_CONFIGS on the topic so check can see it"),
        Err(err) => Check::fail(
            "watermark_topic",
            topic,
            crate::report::render(&err),
            format!("check --brokers and the relay's rights on the topic; to create it: {create}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_check_names_the_flag_and_passes() {
        let least = mode_check(None, None);
        assert!(least.ok);
        assert_eq!(least.object, "--delivery at-least-once");
        let cfg = ExactlyOnceConfig {
            watermark_topic: "pgoutbox.offsets".into(),
            transactional_id: None,
            interval: Duration::from_millis(100),
            accept_reset: false,
        };
        let exact = mode_check(Some(&cfg), Some("pgoutbox-7-app-s"));
        assert!(exact.ok);
        assert_eq!(exact.object, "--delivery exactly-once");
        assert!(exact.observed.contains("pgoutbox-7-app-s"), "{exact:?}");
    }
}
