//! Kafka side of the harness: the broker a test runs against ([`broker`]:
//! Apache Kafka by default, tansu with `PGOUTBOX_TEST_BROKER=tansu`), a
//! multi-node Apache Kafka cluster ([`cluster`]), the verifier's consumer
//! ([`reader`]) and Apache Kafka's own Java consumer as a second opinion
//! ([`java_reader`]).

pub mod broker;
pub mod cluster;
pub mod java_reader;
pub mod reader;

pub use broker::{Broker, BrokerOptions};
pub use cluster::KafkaCluster;
pub use reader::{Consumed, Reader};
