//! What only a real Apache Kafka broker does, each against a node of its own
//! (always Apache Kafka, whatever `PGOUTBOX_TEST_BROKER` says): it keeps producer
//! state across a restart, refuses to create topics when told not to, and
//! enforces a topic's `max.message.bytes` and ACLs.
//!
//! Every test checks the slot as well as the log: a refusal must never be
//! confirmed past (the row stays deliverable once the operator fixes the cause).

use crate::support;

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;

use pgoutbox::pg::lsn::Lsn;
use support::kafka::broker::{free_port, Kind};
use support::kafka::{Broker, BrokerOptions, Reader};
use support::verify::{acks_in, audit_acks, verify};
use support::workload::{
    current_lsn, read_acked, read_all, slot_lsn, spawn_run, start_run, start_run_audited, topics,
    Writer, WriterConfig,
};
use support::{wait_for, PgCluster, TestDb, WAIT};

const STALL_LINE: &str = "no kafka ack for the oldest in-flight record";

/// Create `topic` (1 partition) with `config` entries.
async fn create_topic(brokers: &str, topic: &str, config: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client");
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
    for (k, v) in config {
        new = new.set(k, v);
    }
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin
        .create_topics([&new], &options)
        .await
        .expect("create topic")
    {
        result.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
}

/// One outbox row of aggregate type `kind` with a JSON string payload of `len`
/// characters; returns the WAL position just after its commit.
fn insert_row(db: &TestDb<'_>, kind: &str, id: &str, len: usize) -> Lsn {
    db.psql(&format!(
        "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('{id}', '{kind}', 'k1', 'Created', to_jsonb(repeat('x', {len})))"
    ));
    current_lsn(db)
}

#[test]
fn a_broker_restart_under_load_loses_nothing_and_does_not_stall() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start_kafka(&[]);
    let relay = start_run_audited(&db, &broker.addr(), &[]);
    let writer = Writer::spawn(WriterConfig {
        url: db.url(),
        seed: 2601,
        types: vec!["order"],
        keys: 10,
        max_rows: 10,
        rollbacks: true,
        pause: Duration::from_millis(5),
    });
    let topic = topics(&db, &["order"]);
    let mut reader = Reader::new(&broker.addr(), &topic);
    reader.read_until("records before the restart", WAIT, |r| r.len() >= 300);
    broker.kill();
    broker.start_again();
    let at = writer.committed();
    wait_for("events written after the restart", WAIT, || {
        (writer.committed() > at + 300).then_some(())
    });
    let (ledger, _) = writer.finish();
    assert!(
        read_all(&mut reader, &ledger, WAIT * 3),
        "not every event arrived after the broker restart; relay:\n{}",
        relay.stderr()
    );
    let log = relay.stderr();
    let acks = acks_in(&log);
    read_acked(&mut reader, &acks, WAIT);
    let verdict = verify(&ledger, &reader.records);
    let audit = audit_acks(&acks, &reader.records);
    eprintln!(
        "FIGURES broker kill -9 and restart under load: {verdict:?}; acks audited {}",
        audit.acked
    );
    verdict.assert_no_loss();
    audit.assert_clean();
    // Apache Kafka keeps producer state on disk: the idempotent producer goes on
    // under its producer id, with no UNKNOWN_PRODUCER_ID loop and no stall.
    assert!(
        !log.contains("UNKNOWN_PRODUCER_ID") && !log.contains("UnknownProducerId"),
        "{log}"
    );
    assert!(!log.contains(STALL_LINE), "{log}");
}

/// An operator's mistake, not a poison row: `--on-invalid skip` must not drop good
/// events because their topic was not created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_without_auto_create_stops_naming_it_and_confirms_nothing() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start_kafka(&["auto.create.topics.enable=false"]);
    let mut relay = start_run(&db, &broker.addr(), &["--on-invalid", "skip"]);
    let before = slot_lsn(&db, "confirmed_flush_lsn");
    let written = insert_row(&db, "nowhere", "00000000-0000-0000-0000-000000000001", 10);
    let status = relay.wait_exit(WAIT * 2);
    let log = relay.stderr();
    let topic = format!("{}.nowhere", db.name);
    assert!(!status.success(), "{log}");
    assert!(log.contains(&topic), "names the topic: {log}");
    assert!(
        log.contains("auto.create.topics.enable") && log.contains("create the topic"),
        "gives the fix: {log}"
    );
    assert!(!log.contains("poison row"), "not the poison policy: {log}");
    let confirmed = slot_lsn(&db, "confirmed_flush_lsn");
    assert!(
        confirmed < written,
        "the slot was confirmed to {confirmed} past the row (written up to {written}; before {before})"
    );
    // Once the topic exists the same row goes out.
    create_topic(&broker.addr(), &topic, &[]).await;
    let _relay = start_run(&db, &broker.addr(), &[]);
    let mut reader = Reader::new(&broker.addr(), &[topic]);
    reader.read_until("the row after the topic was created", WAIT, |r| {
        r.len() == 1
    });
}

/// A topic's own limit below the broker's: the broker refuses the record after
/// the producer took it, so the report names the record, not its change; the
/// poison row still says where its transaction lies in the WAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_a_smaller_max_message_bytes_makes_the_row_too_large_poison_with_its_lsn() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let topic = format!("{}.small", db.name);
    create_topic(&broker.addr(), &topic, &[("max.message.bytes", "10000")]).await;
    let mut relay = start_run(&db, &broker.addr(), &[]);
    let before = current_lsn(&db);
    let written = insert_row(&db, "small", "00000000-0000-0000-0000-0000000000b1", 20_000);
    let status = relay.wait_exit(WAIT * 2);
    let log = relay.stderr();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("poison row (too-large) in public.outbox"),
        "{log}"
    );
    assert!(!log.contains("an unknown LSN"), "{log}");
    let at = log
        .split("the row is in the transaction whose first outbox change is at ")
        .nth(1)
        .and_then(|rest| rest.split([' ', ';', ')']).next())
        .unwrap_or_else(|| panic!("no LSN in the stop message: {log}"));
    let at = support::workload::parse_lsn(at);
    assert!(
        before <= at && at <= written,
        "{before} <= {at} <= {written}"
    );
    assert!(
        slot_lsn(&db, "confirmed_flush_lsn") < written,
        "slot past the row"
    );

    // The dead-letter policy moves past it, in its transaction's place.
    let dlq = format!("{}.dlq", db.name);
    let args = ["--on-invalid", "too-large=dlq", "--dlq-topic", &dlq];
    let relay = start_run(&db, &broker.addr(), &args);
    insert_row(&db, "small", "00000000-0000-0000-0000-0000000000b2", 10);
    let mut reader = Reader::new(&broker.addr(), std::slice::from_ref(&dlq));
    assert!(
        reader.try_read_until(WAIT, |r| !r.is_empty()),
        "no dead letter; the relay's log:\n{}",
        relay.stderr()
    );
    assert_eq!(
        reader.records[0].header("id").as_deref(),
        Some("00000000-0000-0000-0000-0000000000b1")
    );
    assert_eq!(
        reader.records[0].header("pgoutbox.dlq.lsn"),
        Some(at.to_string())
    );
    let mut reader = Reader::new(&broker.addr(), &[topic]);
    assert!(
        reader.try_read_until(WAIT, |r| !r.is_empty()),
        "the row after the dead letter did not arrive; the relay's log:\n{}",
        relay.stderr()
    );
    assert_eq!(
        reader.records[0].id(),
        "00000000-0000-0000-0000-0000000000b2"
    );
}

/// An Apache Kafka node with KRaft's `StandardAuthorizer`: the relay comes in
/// over SASL/PLAIN as `User:relay`, with no ACL until a test adds one; the
/// plaintext listener (the test's own admin and reader) and the controllers are
/// `ANONYMOUS`, super users.
struct AclBroker {
    broker: Broker,
    /// The SASL listener, for the relay.
    brokers: String,
    password: String,
}

impl AclBroker {
    fn start() -> AclBroker {
        let sasl = free_port();
        let jaas = "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
                    org.apache.kafka.common.security.plain.PlainLoginModule required \
                    user_relay=\"relay-secret\";";
        let broker = Broker::start_with(BrokerOptions {
            kind: Some(Kind::Kafka),
            listeners: vec![format!("SASL_PLAINTEXT://127.0.0.1:{sasl}")],
            properties: [
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users=User:ANONYMOUS",
                "allow.everyone.if.no.acl.found=false",
                "sasl.enabled.mechanisms=PLAIN",
                jaas,
            ]
            .map(String::from)
            .to_vec(),
            ..BrokerOptions::default()
        });
        let password = support::temp_dir("acl").join("password");
        std::fs::write(&password, "relay-secret\n").unwrap();
        AclBroker {
            broker,
            brokers: format!("127.0.0.1:{sasl}"),
            password: password.display().to_string(),
        }
    }

    /// The relay's Kafka options for `User:relay`.
    fn relay_args(&self) -> Vec<String> {
        [
            "--kafka-option",
            "security.protocol=SASL_PLAINTEXT",
            "--kafka-option",
            "sasl.mechanism=PLAIN",
            "--kafka-option",
            "sasl.username=relay",
            "--kafka-sasl-password-file",
            &self.password,
        ]
        .map(String::from)
        .to_vec()
    }

    /// Allow `User:relay` `operations` on `resource` (`kafka-acls` arguments).
    fn allow(&self, operations: &[&str], resource: &[&str]) {
        let mut args = vec!["--add", "--allow-principal", "User:relay"];
        for op in operations {
            args.extend(["--operation", op]);
        }
        args.extend(resource);
        self.broker
            .kafka_tool("org.apache.kafka.tools.AclCommand", &args);
    }
}

/// KRaft's `StandardAuthorizer`: the relay's principal (SASL/PLAIN user `relay`)
/// has no ACL on its topic. The relay stops naming the principal, the resource and
/// the `kafka-acls` command that fixes it, confirms nothing past the row, and
/// delivers it once the ACL exists. `--on-invalid skip` does not apply: a refusal
/// of the relay's rights is not a poison row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_without_write_on_its_topic_stops_naming_the_principal_and_the_acl() {
    let db = PgCluster::shared().fresh_db();
    let acl = AclBroker::start();
    let broker = &acl.broker;
    let topic = format!("{}.acl", db.name);
    create_topic(&broker.addr(), &topic, &[]).await;
    let brokers = acl.brokers.clone();
    let mut args = acl.relay_args();
    args.extend(["--on-invalid", "skip"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Streaming (its slot exists) before the row is written: librdkafka's fatal
    // InitProducerId refusal comes first, the relay meets it with the row.
    let mut relay = start_run(&db, &brokers, &args);
    let written = insert_row(&db, "acl", "00000000-0000-0000-0000-0000000000a1", 10);
    let exited = support::wait_for_opt(WAIT * 2, || relay.child.try_wait().ok().flatten());
    assert!(
        exited.is_some(),
        "the relay did not stop:\n{}",
        relay.stderr()
    );
    let status = relay.wait_exit(WAIT);
    let log = relay.stderr();
    eprintln!("without an ACL: {}", log.lines().last().unwrap_or_default());
    assert!(!status.success(), "{log}");
    assert!(log.contains("User:relay"), "names the principal: {log}");
    // The refusal comes either at the idempotent producer's InitProducerId (the
    // cluster: the ACL offered covers the template's topics, `<db>.`) or at the
    // record (its topic), depending on which request reaches the broker first.
    assert!(
        log.contains(&topic)
            || log.contains(&format!(
                "--resource-pattern-type prefixed --topic {}.",
                db.name
            )),
        "names the topic or the template's topics: {log}"
    );
    assert!(
        log.contains("kafka-acls") && log.contains("--operation Write"),
        "gives the ACL to add: {log}"
    );
    assert!(!log.contains("poison row"), "not the poison policy: {log}");
    assert!(
        slot_lsn(&db, "confirmed_flush_lsn") < written,
        "slot past the row"
    );

    acl.allow(&["Write", "Describe"], &["--topic", &topic]);
    let _relay = spawn_run(&db, &brokers, &args);
    let mut reader = Reader::new(&broker.addr(), &[topic]);
    reader.read_until("the row once the ACL exists", WAIT, |r| r.len() == 1);
}

/// Exactly-once needs WRITE and DESCRIBE on the relay's transactional id. With
/// every right on its topics (the watermark topic among them) but none on the
/// id, the relay stops at `init_transactions` — not a retry loop — naming the
/// principal, the id and the `kafka-acls --transactional-id` command, confirming
/// nothing past the row; with that ACL added, the row arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exactly_once_relay_refused_its_transactional_id_stops_with_the_acl() {
    let db = PgCluster::shared().fresh_db();
    let acl = AclBroker::start();
    let topic = format!("{}.txn", db.name);
    create_topic(&acl.broker.addr(), &topic, &[]).await;
    let prefix = format!("{}.", db.name);
    acl.allow(
        &["All"],
        &["--resource-pattern-type", "prefixed", "--topic", &prefix],
    );
    let mut args = acl.relay_args();
    args.extend(crate::exactly_once::eos_args(&db, &[]));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut relay = spawn_run(&db, &acl.brokers, &args);
    // The row after the slot exists (rows before it are never decoded).
    relay.wait_stderr("created replication slot", WAIT);
    let written = insert_row(&db, "txn", "00000000-0000-0000-0000-0000000000b1", 10);
    let status = relay.wait_exit(WAIT * 2);
    let log = relay.stderr();
    let said = log.lines().last().unwrap_or_default().to_owned();
    eprintln!("without rights on the transactional id: {said}");
    assert!(!status.success(), "{log}");
    let id = format!(
        "pgoutbox-{}-{}-{}",
        db.psql("SELECT system_identifier FROM pg_control_system()"),
        db.name,
        db.name
    );
    assert!(
        said.contains("User:relay") && said.contains(&format!("transactional id \"{id}\"")),
        "names the principal and the id: {said}"
    );
    assert!(
        said.contains(&format!(
            "--operation Write --operation Describe --transactional-id {id}"
        )),
        "gives the ACL to add: {said}"
    );
    assert!(
        slot_lsn(&db, "confirmed_flush_lsn") < written,
        "slot past the row"
    );
    acl.allow(&["Write", "Describe"], &["--transactional-id", &id]);
    let _relay = spawn_run(&db, &acl.brokers, &args);
    let mut reader = Reader::new(&acl.broker.addr(), &[topic]);
    reader.read_until("the row once the ACL exists", WAIT, |r| r.len() == 1);
    reader.settle(Duration::from_secs(1));
    assert_eq!(reader.records.len(), 1, "the row once");
}
