//! Network faults between the relay and its servers, injected by a TCP proxy the
//! test controls ([`support::proxy::Proxy`]), one link at a time:
//!
//! - the PostgreSQL link: `--database-url` points at a proxy in front of a private
//!   cluster with `wal_sender_timeout = 5s` (catalog and replication connections
//!   both go through it; the test's writer and checks connect directly);
//! - the Kafka link: the broker's own proxy ([`Broker::proxy`]), on a broker of the
//!   test's own.
//!
//! Per link: connection reset mid-stream, black-hole, added latency, and a flow that
//! a middlebox silently forgets. Every scenario runs under continuous writes and
//! ends with the verifier (lost = 0, unexpected = 0, reordered = 0, everything
//! arrived); on the Kafka link the slot must also stay below the events written
//! during the fault for as long as it lasts. Recovery times and duplicate counts
//! are printed (`--nocapture`), never asserted. The relay logs every ack
//! (`verify::ACK_LOG`): a lost event is explained by where it was acked, and every
//! acked offset must be read back with its record.
//!
//! Long forms (minute-long black-holes, librdkafka's default request timeout) run
//! with `PGOUTBOX_LONG=1`.

use crate::support;

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pgoutbox::pg::lsn::Lsn;
use support::kafka::{Broker, Reader};
use support::proxy::Proxy;
use support::verify::{acks_in, audit_acks, explain_lost, verify, Ledger, Verdict, ACK_LOG};
use support::workload::{confirmed, current_lsn, uuid, wait_confirmed};
use support::{wait_for, ClusterOptions, PgCluster, Pgoutbox, Rng, TestDb, WAIT};

/// The server's `wal_sender_timeout` in the private cluster.
const WAL_SENDER_TIMEOUT: Duration = Duration::from_secs(5);
const TYPES: [&str; 2] = ["order", "payment"];

fn long_forms() -> bool {
    std::env::var("PGOUTBOX_LONG").is_ok_and(|v| v == "1")
}

/// A private cluster whose walsenders give up after 5 s without a reply.
fn cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        PgCluster::start(ClusterOptions {
            conf: vec![format!(
                "wal_sender_timeout = '{}s'",
                WAL_SENDER_TIMEOUT.as_secs()
            )],
            ..ClusterOptions::default()
        })
    })
}

/// `pgoutbox run` for `db` (slot and topic prefix named after it) reaching
/// PostgreSQL at `pg_port`, plus `extra`; waits until it streams.
fn start_relay(db: &TestDb<'_>, pg_port: u16, broker: &str, extra: &[&str]) -> Pgoutbox {
    let url = format!(
        "postgres://postgres@127.0.0.1:{pg_port}/{}?sslmode=disable",
        db.name
    );
    let args = support::workload::run_args_via(db, &url, broker, extra);
    let relay = Pgoutbox::spawn_with_env(&args, &[ACK_LOG]);
    relay.wait_stderr("relaying outbox to kafka", WAIT);
    relay
}

/// How many replication sessions the relay started so far.
fn sessions(relay: &Pgoutbox) -> usize {
    relay.stderr().matches("relaying outbox to kafka").count()
}

/// Continuous writes on a thread of their own, straight to PostgreSQL (never
/// through a proxy): transactions of 1–5 events over 10 keys, a short pause
/// between them, until stopped or `max` events. Committed events enter the ledger
/// in commit order (one writer, so commit order is the order of `COMMIT`s).
struct Load {
    ledger: Arc<Mutex<Ledger>>,
    /// The writer stops by itself after this many events.
    max: usize,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(db: &TestDb<'_>, seed: u64, max: usize) -> Load {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s, url) = (ledger.clone(), stop.clone(), db.url());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .expect("writer connects");
                tokio::spawn(conn);
                let mut rng = Rng::new(seed);
                let mut n = 0;
                while !s.load(Ordering::SeqCst) && n < max {
                    let rows = rng.range(1, 5) as usize;
                    let mut sql = String::from("BEGIN;");
                    let mut batch = Vec::new();
                    for _ in 0..rows {
                        let (id, key) = (uuid(&mut rng), format!("key-{}", rng.range(0, 9)));
                        let t = TYPES[rng.range(0, 1) as usize];
                        sql.push_str(&format!(
                            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
                             VALUES ('{id}', '{t}', '{key}', 'Happened', '{{\"n\": {n}}}');"
                        ));
                        batch.push((id, key));
                        n += 1;
                    }
                    sql.push_str("COMMIT;");
                    client.batch_execute(&sql).await.expect("writer commits");
                    l.lock().unwrap().committed.extend(batch);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        });
        Load {
            ledger,
            max,
            stop,
            thread: Some(thread),
        }
    }

    fn committed(&self) -> usize {
        self.ledger.lock().unwrap().len()
    }

    /// Wait until `more` events beyond those committed now are committed.
    fn wait_more(&self, more: usize) {
        let target = self.committed() + more;
        assert!(
            target <= self.max,
            "the writer stops at {} events, so {target} will never be committed: raise the load's bound",
            self.max
        );
        wait_for(&format!("{target} committed events"), WAIT, || {
            (self.committed() >= target).then_some(())
        });
    }

    /// Stop writing; the ledger of everything committed.
    fn finish(&mut self) -> Ledger {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("writer thread");
        }
        self.ledger.lock().unwrap().clone()
    }
}

/// Read every event of `ledger` back, compare, print and assert no loss.
fn read_and_verify(
    scenario: &str,
    db: &TestDb<'_>,
    broker: &Broker,
    ledger: &Ledger,
    relay: &Pgoutbox,
) -> Verdict {
    let topics: Vec<String> = TYPES.iter().map(|t| format!("{}.{t}", db.name)).collect();
    let mut reader = Reader::new(&broker.addr(), &topics);
    // Incremental: (records looked at, ids still missing).
    let progress: RefCell<(usize, HashSet<&str>)> = RefCell::new((
        0,
        ledger.committed.iter().map(|(id, _)| id.as_str()).collect(),
    ));
    let complete = reader.try_read_until(WAIT * 2, |records| {
        let (seen, missing) = &mut *progress.borrow_mut();
        for r in &records[*seen..] {
            missing.remove(r.id().as_str());
        }
        *seen = records.len();
        missing.is_empty()
    });
    reader.settle(Duration::from_secs(1));
    let verdict = verify(ledger, &reader.records);
    eprintln!(
        "{scenario}: committed {} delivered {} lost {} duplicated {} (max copies {}) reordered {} sessions {}",
        verdict.committed,
        verdict.delivered,
        verdict.lost,
        verdict.duplicated_total,
        verdict.duplicated_max,
        verdict.reordered,
        sessions(relay)
    );
    let acks = acks_in(&relay.stderr());
    if verdict.lost > 0 {
        eprintln!(
            "{scenario}: {}",
            explain_lost(ledger, &reader.records, &acks, 10)
        );
    }
    audit_acks(&acks, &reader.records).assert_clean();
    assert!(
        complete,
        "{scenario}: not every event arrived: {verdict:?}\nrelay (acks left out):\n{}",
        relay
            .stderr()
            .lines()
            .filter(|l| !l.contains("TRACE acked"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    verdict.assert_no_loss();
    verdict
}

// ---------------------------------------------------------------- the proxy itself

/// A loopback echo server; returns its port.
fn echo_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut s);
            });
        }
    });
    port
}

fn echo_once(s: &mut std::net::TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Write};
    s.write_all(msg)?;
    let mut buf = vec![0; msg.len()];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

#[test]
fn proxy_faults_do_what_they_say() {
    use std::io::Read;
    use std::net::TcpStream;
    let proxy = Proxy::start(echo_server());
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        s
    };
    let mut a = connect();
    assert_eq!(echo_once(&mut a, b"ping").unwrap(), b"ping");

    // reset: the client sees ECONNRESET, not an orderly EOF; new connections work.
    assert_eq!(proxy.reset(), 1);
    let mut buf = [0u8; 8];
    let err = wait_for("the reset to reach the client", WAIT, || {
        match a.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            other => Some(other),
        }
    });
    assert_eq!(
        err.map_err(|e| e.kind()).unwrap_err(),
        std::io::ErrorKind::ConnectionReset
    );
    let mut b = connect();
    assert_eq!(echo_once(&mut b, b"again").unwrap(), b"again");

    // black-hole: silence both ways (no EOF, no error), then the held bytes arrive.
    proxy.blackhole(true);
    let mut c = connect(); // accepted while black-holed
    let err = echo_once(&mut b, b"held").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
    proxy.blackhole(false);
    b.set_read_timeout(Some(WAIT)).unwrap();
    let mut held = [0u8; 4];
    b.read_exact(&mut held).unwrap();
    assert_eq!(&held, b"held");
    assert_eq!(echo_once(&mut c, b"late").unwrap(), b"late");

    // black-hole of the live flows: they stay silent, a new one works.
    assert!(proxy.blackhole_live() >= 2);
    let err = echo_once(&mut c, b"gone").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
    let mut d = connect();
    assert_eq!(echo_once(&mut d, b"fresh").unwrap(), b"fresh");

    // latency: a round trip crosses the proxy twice, so takes at least 2 × d.
    proxy.latency(Duration::from_millis(100));
    d.set_read_timeout(Some(WAIT)).unwrap();
    let start = Instant::now();
    assert_eq!(echo_once(&mut d, b"slow").unwrap(), b"slow");
    let rtt = start.elapsed();
    eprintln!("proxy latency 100 ms: echo round trip {rtt:?}");
    assert!(rtt >= Duration::from_millis(200), "round trip {rtt:?}");
}

// ------------------------------------------------------------ a relay under load

/// Which link the test breaks.
enum Faulty {
    /// A proxy of the test's own between the relay and PostgreSQL; the shared broker.
    Postgres(Proxy),
    /// The proxy of a broker of the test's own; PostgreSQL reached directly.
    Kafka(Box<Broker>),
}

/// A test database, continuous writes, and a relay whose PostgreSQL or Kafka link
/// runs through a proxy the test controls.
struct Link {
    db: TestDb<'static>,
    faulty: Faulty,
    load: Load,
    relay: Pgoutbox,
}

impl Link {
    fn postgres(seed: u64) -> Link {
        let proxy = Proxy::start(cluster().port);
        let port = proxy.port;
        Self::start(Faulty::Postgres(proxy), port, seed, &[])
    }

    fn kafka(seed: u64, extra: &[&str]) -> Link {
        Self::start(
            Faulty::Kafka(Box::new(Broker::start())),
            cluster().port,
            seed,
            extra,
        )
    }

    fn start(faulty: Faulty, pg_port: u16, seed: u64, extra: &[&str]) -> Link {
        let db = cluster().fresh_db();
        let broker = match &faulty {
            Faulty::Postgres(_) => Broker::shared().addr(),
            Faulty::Kafka(broker) => broker.addr(),
        };
        let relay = start_relay(&db, pg_port, &broker, extra);
        // Bounded writes: enough for the long forms' 75 s outages at the writer's
        // pace (up to ~500 events/s here) plus the events written around them.
        let max = if long_forms() { 200_000 } else { 30_000 };
        let load = Load::start(&db, seed, max);
        load.wait_more(200);
        Link {
            db,
            faulty,
            load,
            relay,
        }
    }

    fn proxy(&self) -> &Proxy {
        match &self.faulty {
            Faulty::Postgres(proxy) => proxy,
            Faulty::Kafka(broker) => broker.proxy(),
        }
    }

    fn broker(&self) -> &Broker {
        match &self.faulty {
            Faulty::Postgres(_) => Broker::shared(),
            Faulty::Kafka(broker) => broker,
        }
    }

    /// Let `more` events be committed, then return the WAL position: past the
    /// commit of each of them.
    fn written(&self, more: usize) -> Lsn {
        self.load.wait_more(more);
        current_lsn(&self.db)
    }

    /// Hold a fault until `outage` after `since` while asserting the slot stays below
    /// `lsn` (events committed after the fault began, which cannot have been acked).
    /// Checked at least once, and once more after the outage's end (even when writing
    /// the events took longer than the outage), all before the caller lifts it.
    fn hold_below(&self, lsn: Lsn, outage: Duration, since: Instant) {
        let checks = support::hold_for(since, outage, Duration::from_millis(200), || {
            let confirmed = confirmed(&self.db);
            assert!(
                confirmed < lsn,
                "slot confirmed {confirmed} ≥ {lsn}: past events Kafka cannot have acked"
            );
        });
        eprintln!("slot checked {checks} times during the outage");
    }

    /// Let the load go on for `more` events, stop it, check the slot catches up and
    /// verify what Kafka holds.
    fn finish(mut self, scenario: &str, more: usize) -> Verdict {
        self.load.wait_more(more);
        let ledger = self.load.finish();
        let end = current_lsn(&self.db);
        let catch_up = wait_confirmed(&self.db, end, &self.relay, WAIT * 2);
        eprintln!("{scenario}: slot confirmed the last commit {catch_up:?} after the load stopped");
        read_and_verify(scenario, &self.db, self.broker(), &ledger, &self.relay)
    }
}

// ------------------------------------------------------------ the PostgreSQL link

#[test]
fn pg_link_reset_mid_stream_loses_nothing() {
    let link = Link::postgres(1);
    let before = sessions(&link.relay);
    let cut = link.proxy().reset();
    let start = Instant::now();
    let at = link.written(50); // committed after the reset
    wait_for("the relay to start a new session", WAIT, || {
        (sessions(&link.relay) > before).then_some(())
    });
    let resumed = start.elapsed();
    let confirmed_after = wait_confirmed(&link.db, at, &link.relay, WAIT);
    eprintln!(
        "pg reset ({cut} connections): new session after {resumed:?}, slot past the reset point after {confirmed_after:?}"
    );
    link.finish("pg reset", 500);
}

#[test]
fn pg_link_blackhole_beyond_wal_sender_timeout_is_noticed() {
    let link = Link::postgres(2);
    link.proxy().blackhole(true);
    let start = Instant::now();
    let at = link.written(50); // committed during the black-hole
                               // Nothing reaches the relay, not even a FIN once the server gives up on its
                               // side after wal_sender_timeout: only the relay's own receive timeout tells it.
    link.relay.wait_stderr("presumed dead", WAIT);
    let noticed = start.elapsed();
    // Keep it up until the server dropped its side too (its wal_sender_timeout).
    wait_for("the server to release the slot", WAIT, || {
        let active = link.db.psql(&format!(
            "SELECT active FROM pg_replication_slots WHERE slot_name = '{}'",
            link.db.name
        ));
        (active == "f").then_some(())
    });
    // The outage itself: twice the server's timeout (a minute in the long form).
    let outage = if long_forms() {
        Duration::from_secs(60)
    } else {
        WAL_SENDER_TIMEOUT * 2
    };
    std::thread::sleep(outage.saturating_sub(start.elapsed()));
    link.proxy().blackhole(false);
    let outage = start.elapsed();
    let recovered = wait_confirmed(&link.db, at, &link.relay, WAIT);
    eprintln!(
        "pg black-hole {outage:?} (wal_sender_timeout {WAL_SENDER_TIMEOUT:?}): relay noticed after {noticed:?}, slot past the black-hole point {recovered:?} after it lifted"
    );
    link.finish("pg black-hole", 500);
}

#[test]
fn pg_link_silently_dropped_flow_is_replaced() {
    let link = Link::postgres(3);
    let dropped = link.proxy().blackhole_live();
    let at = link.written(50); // committed after the flow was dropped
                               // The old flow never carries another byte (a NAT or load balancer forgot it);
                               // new connections work. The relay must give up on the old one by itself.
    let recovered = wait_confirmed(&link.db, at, &link.relay, WAIT);
    eprintln!(
        "pg dropped flow ({dropped} connections, wal_sender_timeout {WAL_SENDER_TIMEOUT:?}): slot past the drop point after {recovered:?}"
    );
    link.finish("pg dropped flow", 500);
}

#[test]
fn pg_link_latency_under_load() {
    let link = Link::postgres(4);
    link.proxy().latency(Duration::from_millis(50));
    let start = Instant::now();
    link.load.wait_more(3_000);
    let written = start.elapsed();
    let at = current_lsn(&link.db);
    let caught_up = wait_confirmed(&link.db, at, &link.relay, WAIT);
    eprintln!(
        "pg latency 50 ms: 3,000 events written in {written:?}, slot confirmed them {caught_up:?} later"
    );
    link.finish("pg latency 50 ms", 200);
}

// ----------------------------------------------------------------- the Kafka link

#[test]
fn kafka_link_reset_mid_stream_loses_nothing() {
    let link = Link::kafka(11, &[]);
    let cut = link.proxy().reset();
    let start = Instant::now();
    let at = link.written(50); // committed after the reset
    wait_confirmed(&link.db, at, &link.relay, WAIT);
    eprintln!(
        "kafka reset ({cut} connections): slot past the reset point {:?} after the reset",
        start.elapsed()
    );
    link.finish("kafka reset", 500);
}

#[test]
fn kafka_link_blackhole_holds_the_slot_and_recovers() {
    let link = Link::kafka(12, &[]);
    link.proxy().blackhole(true);
    let start = Instant::now();
    let at = link.written(50); // committed during the black-hole
                               // Longer than librdkafka's request timeout (socket.timeout.ms, 60 s) in the long form.
    let outage = Duration::from_secs(if long_forms() { 75 } else { 10 });
    link.hold_below(at, outage, start);
    link.proxy().blackhole(false);
    let lifted = Instant::now();
    let recovered = wait_confirmed(&link.db, at, &link.relay, WAIT * 2);
    eprintln!(
        "kafka black-hole {:?}: slot stayed below the events written meanwhile; past them {recovered:?} after it lifted",
        lifted - start
    );
    link.finish("kafka black-hole", 500);
}

#[test]
fn kafka_link_silently_dropped_flow_is_replaced() {
    // librdkafka notices a dead connection by its request timeout; the short form
    // lowers it from the default 60 s (the long form keeps the default).
    let timeout_ms = if long_forms() { "60000" } else { "10000" };
    let option = format!("socket.timeout.ms={timeout_ms}");
    let link = Link::kafka(13, &["--kafka-option", &option]);
    let dropped = link.proxy().blackhole_live();
    let start = Instant::now();
    let at = link.written(50); // committed after the flows were dropped
    wait_confirmed(&link.db, at, &link.relay, WAIT * 2);
    eprintln!(
        "kafka dropped flows ({dropped} connections, socket.timeout.ms={timeout_ms}): slot past the drop point {:?} after the drop",
        start.elapsed()
    );
    link.finish("kafka dropped flows", 500);
}

#[test]
fn kafka_link_latency_under_load() {
    let link = Link::kafka(14, &[]);
    link.proxy().latency(Duration::from_millis(50));
    let start = Instant::now();
    let at = link.written(3_000);
    let written = start.elapsed();
    let caught_up = wait_confirmed(&link.db, at, &link.relay, WAIT);
    eprintln!(
        "kafka latency 50 ms: 3,000 events written in {written:?}, slot confirmed them {caught_up:?} later"
    );
    link.finish("kafka latency 50 ms", 200);
}
