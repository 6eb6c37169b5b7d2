//! A multi-node Apache Kafka cluster on loopback: N combined broker+controller
//! KRaft nodes (the controller quorum is all of them), each behind its own
//! [`Proxy`] like a single [`Broker`]. Replication between the nodes goes through
//! the proxies too (a node advertises its proxy), so taking a node's proxy down
//! partitions it from clients *and* from its peers; the controller listeners are
//! direct, so the quorum survives a proxy outage but not the death of a majority.
//!
//! Topics get replication factor N by default, `min.insync.replicas` N−1: with
//! `acks=all` a record is acked once N−1 nodes hold it.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

use super::broker::{free_port, Broker, BrokerOptions, Kind, NodeSpec};
use crate::support::{wait_for, WAIT};

/// JVM heap per node: three nodes and the tests fit a 2-core, 24 GB machine.
const NODE_HEAP: &str = "-Xms128m -Xmx512m";

pub struct KafkaCluster {
    /// Node `i` has node id `i + 1`.
    pub nodes: Vec<Broker>,
}

impl KafkaCluster {
    /// Start `n` nodes and wait until every one serves metadata.
    pub fn start(n: usize, properties: &[&str]) -> KafkaCluster {
        let controller_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let voters = controller_ports
            .iter()
            .enumerate()
            .map(|(i, port)| format!("{}@127.0.0.1:{port}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut lines: Vec<String> = [
            format!("default.replication.factor={n}"),
            format!("min.insync.replicas={}", n.saturating_sub(1).max(1)),
            format!("offsets.topic.replication.factor={n}"),
            format!("transaction.state.log.replication.factor={n}"),
            format!(
                "transaction.state.log.min.isr={}",
                n.saturating_sub(1).max(1)
            ),
            format!("share.coordinator.state.topic.replication.factor={n}"),
            // A node that died is out of the ISR after this long without fetching.
            "replica.lag.time.max.ms=10000".to_owned(),
        ]
        .into();
        lines.extend(properties.iter().map(|p| p.to_string()));
        let nodes: Vec<Broker> = controller_ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                Broker::spawned(BrokerOptions {
                    kind: Some(Kind::Kafka),
                    properties: lines.clone(),
                    node: Some(NodeSpec {
                        id: i as u32 + 1,
                        controller_port: *port,
                        voters: voters.clone(),
                    }),
                    heap: Some(NODE_HEAP.to_owned()),
                    ..BrokerOptions::default()
                })
            })
            .collect();
        for node in &nodes {
            node.wait_ready();
        }
        let cluster = KafkaCluster { nodes };
        wait_for(
            &format!("all {n} nodes in the cluster's metadata"),
            WAIT,
            || (cluster.metadata_brokers() == n).then_some(()),
        );
        cluster
    }

    /// Every node's client address, comma-separated (bootstrap servers).
    pub fn addrs(&self) -> String {
        self.nodes
            .iter()
            .map(Broker::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node with `id` (1-based).
    pub fn node(&self, id: i32) -> &Broker {
        &self.nodes[usize::try_from(id - 1).expect("node ids start at 1")]
    }

    fn client(&self) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", self.addrs())
            .create()
            .expect("metadata client")
    }

    fn metadata_brokers(&self) -> usize {
        self.client()
            .fetch_metadata(None, Duration::from_secs(5))
            .map(|md| md.brokers().len())
            .unwrap_or(0)
    }

    /// Wait until every partition of `topic` has all `n` replicas in sync: what an
    /// operator waits for before taking the next node down (a node restarted
    /// catches up first; taking another down before then can leave a partition
    /// whose last in-sync replica is down, offline until that very node returns).
    pub fn wait_in_sync(&self, topic: &str) {
        let n = self.nodes.len();
        let client = self.client();
        wait_for(
            &format!("every replica of {topic} in sync"),
            WAIT * 3,
            || {
                let md = client
                    .fetch_metadata(Some(topic), Duration::from_secs(5))
                    .ok()?;
                let t = md.topics().iter().find(|t| t.name() == topic)?;
                (!t.partitions().is_empty() && t.partitions().iter().all(|p| p.isr().len() == n))
                    .then_some(())
            },
        );
    }

    /// The leader of every partition of `topic` (partition id → node id), once
    /// every partition has one.
    pub fn leaders(&self, topic: &str) -> Vec<(i32, i32)> {
        let client = self.client();
        wait_for(&format!("leaders of {topic}"), WAIT, || {
            let md = client
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .ok()?;
            let t = md.topics().iter().find(|t| t.name() == topic)?;
            let leaders: Vec<(i32, i32)> = t
                .partitions()
                .iter()
                .map(|p| (p.id(), p.leader()))
                .collect();
            (!leaders.is_empty() && leaders.iter().all(|(_, l)| *l > 0)).then_some(leaders)
        })
    }
}
