//! The broker process behind a test: Apache Kafka (a KRaft node started by
//! `scripts/start-kafka.sh`) or tansu (`scripts/start-tansu.sh`), chosen by
//! `PGOUTBOX_TEST_BROKER=kafka|tansu` (default `kafka`, the broker users run).
//!
//! Clients always reach the broker through a [`Proxy`] whose port the broker
//! advertises, so a test can take "the broker" away ([`Broker::stop`]), cut or
//! black-hole its connections, and bring it back with its data intact.
//!
//! What differs between the two, and what a test may rely on:
//! - [`Broker::kill`] + [`Broker::start_again`]: Apache Kafka comes back with its
//!   topics, records and producer state (they are on disk in the node's data
//!   directory); tansu keeps everything in memory and comes back empty.
//! - Apache Kafka auto-creates a topic on first produce with 3 partitions;
//!   consumers never create topics.
//! - A JVM takes seconds to start: [`Broker::shared`] serves every test of the
//!   binary, and a test starts a broker of its own only when it stops or
//!   disturbs it.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::support::proxy::Proxy;
use crate::support::{on_exit, wait_for, wait_for_opt, WAIT};

/// Which broker implementation the tests run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Apache Kafka 4.x, KRaft, from `scripts/install-kafka.sh`.
    Kafka,
    /// tansu 0.6 (in-memory), from `scripts/install-tansu.sh`.
    Tansu,
}

impl Kind {
    /// `PGOUTBOX_TEST_BROKER` (`kafka`, the default, or `tansu`).
    pub fn from_env() -> Kind {
        match std::env::var("PGOUTBOX_TEST_BROKER").as_deref() {
            Err(_) | Ok("") | Ok("kafka") => Kind::Kafka,
            Ok("tansu") => Kind::Tansu,
            Ok(other) => panic!("PGOUTBOX_TEST_BROKER={other}: expected kafka or tansu"),
        }
    }
}

/// How long a broker may take to serve metadata after its process started: a JVM
/// on a loaded 2-core machine needs far longer than tansu.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// A broker process on a loopback port behind a [`Proxy`].
pub struct Broker {
    pub kind: Kind,
    /// The port clients use (the proxy's).
    pub port: u16,
    /// The port the broker advertises in metadata (the proxy's unless overridden).
    advertised: u16,
    /// The port the broker listens on.
    backend: u16,
    datadir: String,
    child: Mutex<Option<Child>>,
    proxy: Proxy,
    options: BrokerOptions,
}

impl Broker {
    /// The broker shared by the tests of this binary.
    pub fn shared() -> &'static Broker {
        static BROKER: OnceLock<Broker> = OnceLock::new();
        BROKER.get_or_init(Broker::start)
    }

    /// An Apache Kafka node shared by the tests of this binary that need what only
    /// Apache Kafka does: [`Broker::shared`] when that is Apache Kafka already.
    pub fn shared_kafka() -> &'static Broker {
        if Kind::from_env() == Kind::Kafka {
            return Self::shared();
        }
        static KAFKA: OnceLock<Broker> = OnceLock::new();
        KAFKA.get_or_init(|| Self::start_kafka(&[]))
    }

    /// A new broker of its own (for tests that stop it).
    pub fn start() -> Broker {
        Self::start_with(BrokerOptions::default())
    }

    /// A new Apache Kafka node of its own, whatever `PGOUTBOX_TEST_BROKER` says.
    pub fn start_kafka(properties: &[&str]) -> Broker {
        Self::start_with(BrokerOptions {
            kind: Some(Kind::Kafka),
            properties: properties.iter().map(|p| p.to_string()).collect(),
            ..BrokerOptions::default()
        })
    }

    /// A new broker of its own with `options`, serving once this returns.
    pub fn start_with(options: BrokerOptions) -> Broker {
        let broker = Self::spawned(options);
        broker.wait_ready();
        broker
    }

    /// A broker whose process was started, not yet waited for (the nodes of a
    /// KRaft cluster serve only once a quorum of them runs).
    pub(super) fn spawned(options: BrokerOptions) -> Broker {
        let backend = free_port();
        let proxy = Proxy::start(backend);
        let kind = options.kind.unwrap_or_else(Kind::from_env);
        let tag = match kind {
            Kind::Kafka => "kafka",
            Kind::Tansu => "tansu",
        };
        // Unique for the process's life: a port is free again once its broker is
        // gone, and a later broker given the same port must not find that one's
        // data (Apache Kafka reuses a formatted directory and its configuration:
        // a single node started on a dead cluster node's directory waited for its
        // quorum, "did not serve metadata within 180 s").
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let datadir = format!(
            "/tmp/pgoutbox-test-{tag}-{}-{n}-{backend}",
            std::process::id()
        );
        on_exit(&format!("rm -rf {datadir}"));
        let broker = Broker {
            kind,
            port: proxy.port,
            advertised: options.advertised_port.unwrap_or(proxy.port),
            backend,
            datadir,
            child: Mutex::new(None),
            proxy,
            options,
        };
        broker.spawn();
        broker
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&self) {
        let mut command = match self.kind {
            Kind::Tansu => {
                let mut c = Command::new(script("start-tansu.sh"));
                c.arg(self.backend.to_string())
                    .arg(&self.datadir)
                    .arg(self.advertised.to_string());
                c
            }
            Kind::Kafka => {
                let mut c = Command::new(script("start-kafka.sh"));
                c.arg("run")
                    .arg(&self.datadir)
                    .arg(self.backend.to_string())
                    .arg(self.advertised.to_string())
                    .env("KAFKA_PROPERTIES", self.options.properties.join("\n"))
                    .env("KAFKA_EXTRA_LISTENERS", self.options.listeners.join(","))
                    .env("KAFKA_FORMAT_ARGS", self.options.format_args.join("\n"));
                if let Some(heap) = &self.options.heap {
                    c.env("KAFKA_HEAP", heap);
                }
                if let Some(node) = &self.options.node {
                    c.env("KAFKA_NODE_ID", node.id.to_string())
                        .env("KAFKA_CONTROLLER_PORT", node.controller_port.to_string())
                        .env("KAFKA_VOTERS", &node.voters);
                }
                c
            }
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {:?} broker: {e}", self.kind));
        on_exit(&format!("kill -9 {} 2>/dev/null", child.id()));
        *self.child.lock().unwrap() = Some(child);
    }

    /// Wait until the broker serves: tansu accepts connections; an Apache Kafka
    /// node answers a brokers-only Metadata request on its own port (not through
    /// the proxy, which a test may hold down).
    pub fn wait_ready(&self) {
        if self.kind == Kind::Tansu {
            wait_for("tansu to accept connections", WAIT, || {
                TcpStream::connect(("127.0.0.1", self.backend)).ok()
            });
            return;
        }
        let status = Command::new(script("start-kafka.sh"))
            .args(["ready", &format!("127.0.0.1:{}", self.backend)])
            .arg(START_TIMEOUT.as_secs().to_string())
            .status()
            .expect("start-kafka.sh ready");
        if !status.success() {
            let log =
                std::fs::read_to_string(format!("{}/server.log", self.datadir)).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            panic!(
                "Apache Kafka in {} did not serve metadata within {START_TIMEOUT:?}; server.log ends:\n{}",
                self.datadir,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }

    /// Take the broker away from clients: every connection is cut, new ones are
    /// closed at once. The broker process and its data stay.
    pub fn stop(&self) {
        self.proxy.down();
    }

    /// Kill the broker process (SIGKILL): connections through the proxy end, new
    /// ones are refused. See the module doc for what [`Broker::start_again`] brings
    /// back on each kind.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start the broker process again on the same port after [`Broker::kill`],
    /// and wait until it serves.
    pub fn start_again(&self) {
        self.respawn();
        self.wait_ready();
    }

    /// Start the process again without waiting for it to serve (a cluster node
    /// serves only once a quorum runs).
    pub fn respawn(&self) {
        self.kill();
        wait_for("the old broker to release its port", WAIT, || {
            std::net::TcpListener::bind(("127.0.0.1", self.backend)).ok()
        });
        self.spawn();
    }

    /// Stop the process with SIGTERM (an Apache Kafka node shuts down in a
    /// controlled way: its leaderships move first) and wait for it to exit.
    pub fn terminate(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let exited = wait_for_opt(START_TIMEOUT, || child.try_wait().ok().flatten());
            if exited.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Run one of Apache Kafka's own command-line tools (`class` from the
    /// `kafka-tools` jar, e.g. `org.apache.kafka.tools.AclCommand`) against this
    /// node's own port (not through the proxy); panics with its output on failure.
    pub fn kafka_tool(&self, class: &str, args: &[&str]) -> String {
        assert_eq!(self.kind, Kind::Kafka, "{class} needs Apache Kafka");
        let install = Command::new(script("install-kafka.sh"))
            .output()
            .expect("scripts/install-kafka.sh");
        let dir = String::from_utf8_lossy(&install.stdout).trim().to_owned();
        let out = Command::new("java")
            .arg("-cp")
            .arg(format!("{dir}/libs/*"))
            .arg(class)
            .args(["--bootstrap-server", &format!("127.0.0.1:{}", self.backend)])
            .args(args)
            .output()
            .expect("java");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{class} {args:?} failed:\n{text}");
        text
    }

    /// Let clients reach the broker again.
    pub fn resume(&self) {
        self.proxy.up();
    }

    /// The proxy between clients and the broker, for finer faults (reset,
    /// black-hole, latency).
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.proxy.down();
        self.kill();
        // Its data is of no use to anyone now (a long test run starts dozens).
        let _ = std::fs::remove_dir_all(&self.datadir);
    }
}

/// How to start a broker of its own.
#[derive(Debug, Default, Clone)]
pub struct BrokerOptions {
    /// Advertise this port instead of the proxy's, e.g. a TLS/SASL gate in front.
    pub advertised_port: Option<u16>,
    /// This kind whatever `PGOUTBOX_TEST_BROKER` says: a test of what only Apache
    /// Kafka does (size limits, ACLs, transactions, replication) names it here.
    pub kind: Option<Kind>,
    /// Extra `server.properties` lines (Apache Kafka only).
    pub properties: Vec<String>,
    /// Membership of a multi-node KRaft cluster (Apache Kafka only).
    pub node: Option<NodeSpec>,
    /// JVM heap flags instead of `start-kafka.sh`'s default (Apache Kafka only).
    pub heap: Option<String>,
    /// More listeners, e.g. `SASL_SSL://127.0.0.1:9094` (Apache Kafka only; clients
    /// reach them directly, not through the proxy).
    pub listeners: Vec<String>,
    /// More `kafka-storage format` arguments, e.g. SCRAM users (Apache Kafka only).
    pub format_args: Vec<String>,
}

/// One node of a KRaft cluster: its id, its controller port and the voters.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub id: u32,
    pub controller_port: u16,
    /// `controller.quorum.voters`, e.g. `1@127.0.0.1:9093,2@…`.
    pub voters: String,
}

/// A free loopback port (bound and released: the caller binds it soon after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The path of one of the repository's scripts.
fn script(name: &str) -> String {
    format!("{}/scripts/{name}", env!("CARGO_MANIFEST_DIR"))
}
