//! The exactly-once watermark: the source position that travels *inside* each Kafka
//! transaction, as one record of a compacted topic (`--watermark-topic`, key = the
//! relay's transactional id), so the records of a PostgreSQL transaction and the
//! news that they were sent commit or abort together.
//!
//! ```text
//!  Kafka transaction: [rows of PG txns T1..Tn] + watermark{commit_lsn(Tn), end_lsn(Tn)} ─ commit
//!  restart: init_transactions (fences, finishes the last one) ─▶ read_newest(read_committed)
//!           ─▶ judge(against the server) ─▶ skip every PG txn with commit LSN ≤ commit_lsn
//! ```
//!
//! Invariants: a watermark is read only with `isolation.level=read_committed` and only
//! after `init_transactions` returned (the previous producer's transaction is then
//! committed or aborted, never pending); the newest watermark of a key is the last
//! one in offset order of its partition (a compacted topic keeps at least that
//! one); a watermark ahead of the slot is normal (a crash between the Kafka commit
//! and the slot's confirmation) — it is refused ([`Mismatch`]) only when it cannot
//! belong to this stream: another system identifier, a later timeline than the
//! server's, an earlier timeline that is not in the server's timeline history or
//! that it wrote past the point where the server's history branched off it, or an
//! LSN past the server's WAL end. Never a silent start from zero: a
//! missing topic is created (or the error names the command), an unreadable one
//! stops.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::kafka::config::{KafkaOptions, Scrubber};
use crate::pg::lsn::Lsn;
use crate::pg::source::timeline::{self, TimelineSwitch};

/// One watermark: where the stream was when its Kafka transaction was written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watermark {
    /// The database cluster's system identifier.
    pub system_id: String,
    /// Its timeline when the transaction was written.
    pub timeline: u32,
    /// The database.
    pub database: String,
    /// The replication slot.
    pub slot: String,
    /// Commit LSN of the last PostgreSQL transaction in the Kafka transaction: every
    /// transaction with a commit LSN at or below it is in Kafka.
    pub commit_lsn: Lsn,
    /// Its end LSN: how far the slot may be confirmed once the Kafka transaction
    /// committed.
    pub end_lsn: Lsn,
}

impl Watermark {
    /// The record value (JSON, readable with any console consumer).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a watermark always serializes")
    }

    /// A record value back; `None` for anything else (never trusted half-read).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }

    /// Whether this watermark can belong to the stream of a server with
    /// `system_id`, on `timeline` (reached through `history`, the server's
    /// timeline history), whose WAL ends at `wal_end`. A watermark of an earlier
    /// timeline must name an ancestor and end at or before that ancestor's switch
    /// point: WAL it wrote past there is not in this server's history (a sibling
    /// branch, or transactions a promoted standby never received), and skipping up
    /// to it would skip real events of the new timeline.
    pub fn judge(
        &self,
        system_id: &str,
        timeline: u32,
        history: &[TimelineSwitch],
        wal_end: Lsn,
    ) -> Result<(), Mismatch> {
        if self.system_id != system_id {
            return Err(Mismatch::OtherSystem {
                found: self.system_id.clone(),
                server: system_id.to_owned(),
            });
        }
        if self.timeline > timeline {
            return Err(Mismatch::LaterTimeline {
                found: self.timeline,
                server: timeline,
            });
        }
        if self.timeline < timeline {
            match timeline::switchpoint_of(history, self.timeline) {
                None => {
                    return Err(Mismatch::NotAnAncestor {
                        found: self.timeline,
                        server: timeline,
                    })
                }
                Some(switchpoint) if self.end_lsn > switchpoint => {
                    return Err(Mismatch::PastBranchPoint {
                        found: self.timeline,
                        end_lsn: self.end_lsn,
                        switchpoint,
                        server: timeline,
                    })
                }
                Some(_) => {}
            }
        }
        if self.end_lsn > wal_end {
            return Err(Mismatch::PastWalEnd {
                end_lsn: self.end_lsn,
                wal_end,
            });
        }
        Ok(())
    }
}

/// A watermark that cannot belong to this stream: resuming after it would skip
/// events, starting without it would duplicate them. The relay stops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// Written for another database cluster.
    #[error(
        "the newest watermark was written for database system {found}, this server is {server}"
    )]
    OtherSystem { found: String, server: String },
    /// Written on a timeline this server has not reached (a restored or older copy).
    #[error(
        "the newest watermark was written on timeline {found}, this server is on timeline {server}"
    )]
    LaterTimeline { found: u32, server: u32 },
    /// Written on a timeline that is not in this server's history.
    #[error(
        "the newest watermark was written on timeline {found}, which is not in the history of this server's timeline {server}"
    )]
    NotAnAncestor { found: u32, server: u32 },
    /// Written on an ancestor timeline, but past the point where this server's
    /// history left it: those transactions are not in this server's WAL.
    #[error(
        "the newest watermark was written on timeline {found} up to {end_lsn}, past {switchpoint} where this server's timeline {server} branched off it"
    )]
    PastBranchPoint {
        found: u32,
        end_lsn: Lsn,
        switchpoint: Lsn,
        server: u32,
    },
    /// Past what this server ever wrote (a restore, or a failover to a standby that
    /// had not received it).
    #[error("the newest watermark is at {end_lsn}, past this server's WAL end {wal_end}")]
    PastWalEnd { end_lsn: Lsn, wal_end: Lsn },
}

/// Reading or creating the watermark topic failed.
#[derive(Debug, thiserror::Error)]
pub enum WatermarkError {
    /// The topic does not exist and could not be created.
    #[error("watermark topic {topic:?} does not exist and could not be created: {reason}; fix: create it, e.g. `kafka-topics.sh --bootstrap-server BROKER --create --topic {topic} --partitions 1 --config cleanup.policy=compact`, and grant the relay's principal READ and WRITE on it")]
    Missing { topic: String, reason: String },
    /// The topic exists but is not compacted: old watermarks would be deleted by
    /// retention, the newest with them once the relay is idle long enough.
    #[error("watermark topic {topic:?} has cleanup.policy={policy}; fix: `kafka-configs.sh --bootstrap-server BROKER --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact`")]
    NotCompacted { topic: String, policy: String },
    /// The topic holds no watermark for this relay although its state file says
    /// it committed some there: the topic was deleted or re-created. Resuming from
    /// the slot would send again what Kafka committed past the slot's position.
    #[error("watermark topic {topic:?} holds no watermark for transactional id {transactional_id:?}, but this relay's state file says it committed Kafka transactions with watermarks there: the topic was deleted or re-created, so the relay can no longer tell which PostgreSQL transactions after the slot's position {slot_confirmed} are in Kafka; fix: if the topic was moved, point --watermark-topic at it; to accept that read_committed consumers may see the transactions committed after {slot_confirmed} again (none after a clean stop, at most about one --transaction-interval of them after a crash), start once with --accept-watermark-reset")]
    Lost {
        topic: String,
        transactional_id: String,
        slot_confirmed: Lsn,
    },
    /// The broker did not answer in time, or refused the read.
    #[error("cannot read watermark topic {topic:?}: {reason}")]
    Read { topic: String, reason: String },
}

/// What a client that only reads or administers needs of the relay's settings:
/// the brokers and the connection and security options (no producer settings,
/// which a consumer would warn about).
pub fn reader_config(brokers: &str, options: &KafkaOptions) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    config.set("client.id", "pgoutbox-watermark");
    for (key, value) in options.connection_options() {
        config.set(key, value);
    }
    config
}

/// The newest watermark of `key` in `topic`, read with `read_committed`; `None`
/// when the topic holds none for the key. Fails if the topic is missing.
pub fn read_newest(
    config: &ClientConfig,
    topic: &str,
    key: &str,
    timeout: Duration,
) -> Result<Option<Watermark>, WatermarkError> {
    let scrubber = Scrubber::new(config);
    let read_err = |err: &KafkaError| WatermarkError::Read {
        topic: topic.to_owned(),
        reason: scrubber.scrub(&err.to_string()),
    };
    let mut config = config.clone();
    config
        .set("group.id", "pgoutbox-watermark-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest");
    let consumer: BaseConsumer = config.create().map_err(|e| read_err(&e))?;
    let deadline = Instant::now() + timeout;
    let partitions = partitions_of(&consumer, topic, timeout).map_err(|e| read_err(&e))?;
    let Some(partitions) = partitions else {
        return Err(WatermarkError::Missing {
            topic: topic.to_owned(),
            reason: "not in the cluster's metadata".to_owned(),
        });
    };
    // Where each partition ends: read up to there (for read_committed, the stable
    // offset: the producer's last transaction was finished by init_transactions).
    let mut ends = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for p in partitions {
        let left = deadline.saturating_duration_since(Instant::now());
        let (low, high) = consumer
            .fetch_watermarks(topic, p, left)
            .map_err(|e| read_err(&e))?;
        if high > low {
            ends.insert(p, high);
            assignment
                .add_partition_offset(topic, p, Offset::Beginning)
                .map_err(|e| read_err(&e))?;
        }
    }
    if ends.is_empty() {
        return Ok(None);
    }
    consumer.assign(&assignment).map_err(|e| read_err(&e))?;
    let mut newest: Option<(i32, i64, Watermark)> = None;
    while !ends.is_empty() {
        if Instant::now() >= deadline {
            return Err(WatermarkError::Read {
                topic: topic.to_owned(),
                reason: format!("not read to its end within {timeout:?}"),
            });
        }
        // Partitions whose position reached their end are done (control records
        // and aborted records move the position without being returned).
        let positions = consumer.position().map_err(|e| read_err(&e))?;
        for elem in positions.elements() {
            if let (Offset::Offset(at), Some(end)) = (elem.offset(), ends.get(&elem.partition())) {
                if at >= *end {
                    ends.remove(&elem.partition());
                }
            }
        }
        let Some(polled) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = polled.map_err(|e| read_err(&e))?;
        if message.key() != Some(key.as_bytes()) {
            continue;
        }
        let Some(watermark) = message.payload().and_then(Watermark::decode) else {
            continue;
        };
        if replaces(
            newest.as_ref(),
            &watermark,
            message.partition(),
            message.offset(),
        ) {
            newest = Some((message.partition(), message.offset(), watermark));
        }
    }
    Ok(newest.map(|(_, _, w)| w))
}

/// Whether `candidate` (at `partition`, `offset`) is newer than `current`: within
/// a partition the later offset; across partitions (the topic's partition count
/// changed, so the key moved) the higher commit LSN.
fn replaces(
    current: Option<&(i32, i64, Watermark)>,
    candidate: &Watermark,
    partition: i32,
    offset: i64,
) -> bool {
    match current {
        None => true,
        Some((p, o, _)) if *p == partition => offset > *o,
        Some((_, _, w)) => candidate.commit_lsn > w.commit_lsn,
    }
}

/// The partitions of `topic`, `None` when the cluster does not know it.
fn partitions_of(
    consumer: &BaseConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<Option<Vec<i32>>, KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match found.error() {
        None => Ok(Some(found.partitions().iter().map(|p| p.id()).collect())),
        Some(code) if RDKafkaErrorCode::from(code) == RDKafkaErrorCode::UnknownTopicOrPartition => {
            Ok(None)
        }
        Some(code) => Err(KafkaError::MetadataFetch(code.into())),
    }
}

/// Create `topic` compacted (one partition, the brokers' default replication)
/// unless it exists; an existing topic must be compacted.
pub async fn ensure_topic(
    config: &ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Result<(), WatermarkError> {
    let scrubber = Scrubber::new(config);
    let missing = |reason: String| WatermarkError::Missing {
        topic: topic.to_owned(),
        reason: scrubber.scrub(&reason),
    };
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| missing(e.to_string()))?;
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact");
    let created = admin
        .create_topics([&new], &options)
        .await
        .map_err(|e| missing(e.to_string()))?;
    match created.first() {
        Some(Ok(_)) => {
            tracing::info!(
                topic,
                "created the watermark topic (compacted, 1 partition)"
            );
            Ok(())
        }
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => {
            let not_compacted = |policy| WatermarkError::NotCompacted {
                topic: topic.to_owned(),
                policy,
            };
            match describe(&admin, topic, &options, &scrubber).await? {
                // Not allowed to describe it: the relay cannot tell; reading it will.
                TopicState::Compacted | TopicState::Undescribed(_) => Ok(()),
                TopicState::NotCompacted(policy) => Err(not_compacted(policy)),
                // Said to exist, described without a policy.
                TopicState::Missing => Err(not_compacted(String::new())),
            }
        }
        Some(Err((_, code))) => Err(missing(format!("{code:?}"))),
        None => Err(missing("no answer for the topic".to_owned())),
    }
}

/// What `check` sees of the watermark topic; it never creates the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicState {
    /// It exists and is compacted.
    Compacted,
    /// It does not exist (`run` creates it on its first start where allowed).
    Missing,
    /// It exists with this `cleanup.policy`.
    NotCompacted(String),
    /// The broker would not describe it (e.g. no DESCRIBE_CONFIGS right), with why.
    Undescribed(String),
}

/// Look at `topic` without changing anything: whether it exists and is compacted.
pub async fn inspect_topic(
    config: &ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Result<TopicState, WatermarkError> {
    let scrubber = Scrubber::new(config);
    let read = |reason: String| WatermarkError::Read {
        topic: topic.to_owned(),
        reason: scrubber.scrub(&reason),
    };
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| read(e.to_string()))?;
    let options = AdminOptions::new().request_timeout(Some(timeout));
    describe(&admin, topic, &options, &scrubber).await
}

/// What DescribeConfigs says of `topic`'s `cleanup.policy`.
async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    options: &AdminOptions,
    scrubber: &Scrubber,
) -> Result<TopicState, WatermarkError> {
    let read = |reason: String| WatermarkError::Read {
        topic: topic.to_owned(),
        reason: scrubber.scrub(&reason),
    };
    let described = admin
        .describe_configs([&rdkafka::admin::ResourceSpecifier::Topic(topic)], options)
        .await
        .map_err(|e| read(e.to_string()))?;
    Ok(match described.into_iter().next() {
        // Apache Kafka 4.1 describes a topic it does not know as a resource
        // without entries (no error); a topic that exists always lists its
        // cleanup.policy, the default included.
        Some(Ok(resource)) => match resource.get("cleanup.policy") {
            None => TopicState::Missing,
            Some(entry) => {
                let policy = entry.value.clone().unwrap_or_default();
                if policy.split(',').any(|p| p.trim() == "compact") {
                    TopicState::Compacted
                } else {
                    TopicState::NotCompacted(policy)
                }
            }
        },
        Some(Err(RDKafkaErrorCode::UnknownTopicOrPartition)) => TopicState::Missing,
        Some(Err(code)) => TopicState::Undescribed(format!("{code:?}")),
        None => TopicState::Undescribed("no answer for the topic".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watermark() -> Watermark {
        Watermark {
            system_id: "7301234567890123456".into(),
            timeline: 2,
            database: "app".into(),
            slot: "pgoutbox".into(),
            commit_lsn: "0/16B3748".parse().unwrap(),
            end_lsn: "0/16B3780".parse().unwrap(),
        }
    }

    #[test]
    fn a_watermark_reads_back_as_written_and_anything_else_is_not_one() {
        let w = watermark();
        let bytes = w.encode();
        assert_eq!(Watermark::decode(&bytes), Some(w));
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains("\"commit_lsn\":\"0/16B3748\""), "{text}");
        assert_eq!(Watermark::decode(b"{\"system_id\":\"1\"}"), None);
        assert_eq!(Watermark::decode(b"not json"), None);
    }

    #[test]
    fn a_watermark_ahead_of_the_slot_is_fine_one_of_another_stream_is_not() {
        let w = watermark();
        let end: Lsn = "0/2000000".parse().unwrap();
        let sys = "7301234567890123456";
        assert_eq!(w.judge(sys, 2, &[], end), Ok(()));
        // A later timeline of the same system that branched off timeline 2 after
        // the watermark (a promotion that kept its WAL) still leads here.
        let later = [switch(1, "0/1000000"), switch(2, "0/1800000")];
        assert_eq!(w.judge(sys, 3, &later, end), Ok(()));
        assert!(matches!(
            w.judge("7309999999999999999", 2, &[], end),
            Err(Mismatch::OtherSystem { .. })
        ));
        assert!(matches!(
            w.judge(sys, 1, &[], end),
            Err(Mismatch::LaterTimeline {
                found: 2,
                server: 1
            })
        ));
        let short: Lsn = "0/1000000".parse().unwrap();
        let err = w.judge(sys, 2, &[], short).unwrap_err();
        assert!(matches!(err, Mismatch::PastWalEnd { .. }));
        assert!(err.to_string().contains("0/16B3780"), "{err}");
    }

    fn switch(timeline: u32, at: &str) -> TimelineSwitch {
        TimelineSwitch {
            timeline,
            switchpoint: at.parse().unwrap(),
        }
    }

    /// A promoted standby that had not received the watermark's transactions: its
    /// timeline 3 branched off timeline 2 before the watermark's end. Once its WAL
    /// grew past that end, only the history tells the watermark is not its own.
    #[test]
    fn a_watermark_past_the_branch_point_or_off_the_history_is_refused() {
        let w = watermark(); // timeline 2, end 0/16B3780
        let sys = "7301234567890123456";
        let end: Lsn = "0/9000000".parse().unwrap();
        let branched_early = [switch(1, "0/1000000"), switch(2, "0/1600000")];
        let err = w.judge(sys, 3, &branched_early, end).unwrap_err();
        assert_eq!(
            err,
            Mismatch::PastBranchPoint {
                found: 2,
                end_lsn: "0/16B3780".parse().unwrap(),
                switchpoint: "0/1600000".parse().unwrap(),
                server: 3
            }
        );
        assert!(err.to_string().contains("branched off"), "{err}");
        // Exactly at the switch point: every transaction it names is shared.
        let at_end = [switch(2, "0/16B3780")];
        assert_eq!(w.judge(sys, 3, &at_end, end), Ok(()));
        // A sibling: timeline 4's history goes 1 → 3 → 4, never through 2.
        let sibling = [switch(1, "0/1000000"), switch(3, "0/2000000")];
        assert_eq!(
            w.judge(sys, 4, &sibling, end),
            Err(Mismatch::NotAnAncestor {
                found: 2,
                server: 4
            })
        );
    }

    #[test]
    fn the_reader_takes_connection_settings_and_leaves_producer_ones() {
        let options = KafkaOptions::parse(&[
            "security.protocol=SASL_SSL",
            "sasl.username=relay",
            "linger.ms=5",
            "acks=all",
        ])
        .unwrap();
        let config = reader_config("b:9092", &options);
        assert_eq!(config.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(config.get("sasl.username"), Some("relay"));
        assert_eq!(config.get("linger.ms"), None);
        assert_eq!(config.get("acks"), None);
        assert_eq!(config.get("bootstrap.servers"), Some("b:9092"));
    }
}
