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
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::support::proxy::Proxy;
use crate::support::{on_exit, wait_for, WAIT};

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
}

impl Broker {
    /// The broker shared by the tests of this binary.
    pub fn shared() -> &'static Broker {
        static BROKER: OnceLock<Broker> = OnceLock::new();
        BROKER.get_or_init(Broker::start)
    }

    /// A new broker of its own (for tests that stop it).
    pub fn start() -> Broker {
        Self::start_with(BrokerOptions::default())
    }

    /// A new broker of its own with `options`.
    pub fn start_with(options: BrokerOptions) -> Broker {
        let backend = free_port();
        let proxy = Proxy::start(backend);
        let kind = Kind::from_env();
        let tag = match kind {
            Kind::Kafka => "kafka",
            Kind::Tansu => "tansu",
        };
        let datadir = format!("/tmp/pgoutbox-test-{tag}-{}-{backend}", std::process::id());
        on_exit(&format!("rm -rf {datadir}"));
        let broker = Broker {
            kind,
            port: proxy.port,
            advertised: options.advertised_port.unwrap_or(proxy.port),
            backend,
            datadir,
            child: Mutex::new(None),
            proxy,
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
                    .arg(self.advertised.to_string());
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
        match self.kind {
            Kind::Tansu => {
                wait_for("tansu to accept connections", WAIT, || {
                    TcpStream::connect(("127.0.0.1", self.backend)).ok()
                });
            }
            Kind::Kafka => self.wait_ready(),
        }
    }

    /// Wait until the node answers a brokers-only Metadata request on its own
    /// port (not through the proxy, which a test may hold down).
    fn wait_ready(&self) {
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

    /// Start the broker process again on the same port after [`Broker::kill`].
    pub fn start_again(&self) {
        self.kill();
        wait_for("the old broker to release its port", WAIT, || {
            std::net::TcpListener::bind(("127.0.0.1", self.backend)).ok()
        });
        self.spawn();
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
    }
}

/// How to start a broker of its own.
#[derive(Debug, Default, Clone, Copy)]
pub struct BrokerOptions {
    /// Advertise this port instead of the proxy's, e.g. a TLS/SASL gate in front.
    pub advertised_port: Option<u16>,
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
