//! Kafka side of the harness: the broker a test runs against ([`broker`]:
//! Apache Kafka by default, tansu with `PGOUTBOX_TEST_BROKER=tansu`), a
//! multi-node Apache Kafka cluster ([`cluster`]) and the verifier's consumer
//! ([`reader`]).

pub mod broker;
pub mod cluster;
pub mod reader;

pub use broker::{Broker, BrokerOptions};
pub use cluster::KafkaCluster;
pub use reader::{Consumed, Reader};
