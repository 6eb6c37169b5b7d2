//! Where an exactly-once relay must not go on, it stops with the fix: a watermark
//! that cannot belong to the stream (another system, past the branch point of a
//! promotion), a lost or uncompacted watermark topic, a mode a source cannot give;
//! and `check` and `tail` say which mode is in force.

use super::*;

/// One record, acked.
fn produce_one(brokers: &str, topic: &str, key: &str, value: &str) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    producer
        .send(BaseRecord::to(topic).key(key).payload(value))
        .expect("queued");
    producer.flush(WAIT).expect("acked");
}

#[test]
fn a_watermark_of_another_database_system_stops_the_relay() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let id = format!("test-{}", db.name);
    // The topic (compacted, as the relay would create it) holds a watermark for
    // this relay's id, written by another cluster.
    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--create",
            "--topic",
            &watermark_topic(&db),
            "--partitions",
            "1",
            "--config",
            "cleanup.policy=compact",
        ],
    );
    let foreign = serde_json::json!({
        "system_id": "1", "timeline": 1, "database": "other", "slot": "other",
        "commit_lsn": "0/1000", "end_lsn": "0/1008"
    });
    produce_one(
        &broker.addr(),
        &watermark_topic(&db),
        &id,
        &foreign.to_string(),
    );
    let (status, stderr) = eos_until_exit(&db, broker, &["--transactional-id", &id]);
    assert_eq!(status, Some(5), "{stderr}");
    assert!(
        stderr.contains("written for database system 1") && stderr.contains("--transactional-id"),
        "the stop names the watermark's system and the fix: {stderr}"
    );
}

/// `replay` sends rows again on purpose, outside any Kafka transaction: it refuses
/// exactly-once with the reason, from the flag and from the environment twin `run`
/// shares, and sends nothing.
#[test]
fn replay_refuses_exactly_once_with_the_reason() {
    let db = PgCluster::shared().fresh_db();
    let url = db.url();
    let base = [
        "replay",
        "--database-url",
        url.as_str(),
        "--all",
        "--dry-run",
    ];
    let flag: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--delivery", "exactly-once"])
        .collect();
    for (args, env) in [
        (flag, Vec::new()),
        (base.to_vec(), vec![("PGOUTBOX_DELIVERY", "exactly-once")]),
    ] {
        let mut replay = Pgoutbox::spawn_with_env(&args, &env);
        let status = replay.wait_exit(WAIT);
        let stderr = replay.stderr();
        assert_eq!(status.code(), Some(2), "{env:?}: {stderr}");
        assert!(
            stderr.contains("pgoutbox replay is at-least-once only")
                && stderr.contains("--delivery at-least-once"),
            "{stderr}"
        );
        assert!(replay.stdout_so_far().is_empty(), "nothing sent");
    }
}

/// `pgoutbox run` with `extra` is refused as a usage error (exit 2) saying `why`.
fn run_refused(db: &TestDb<'_>, extra: &[&str], why: &str) {
    let mut relay = Pgoutbox::spawn(&run_args(db, "127.0.0.1:1", extra));
    let status = relay.wait_exit(WAIT);
    let stderr = relay.stderr();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(why), "{stderr}");
}

#[test]
fn poll_mode_refuses_exactly_once_with_the_reason() {
    let db = PgCluster::shared().fresh_db();
    let args = eos_args(&db, &["--source", "poll"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_refused(&db, &args, "--delivery exactly-once needs --source logical");
}

#[test]
fn accept_watermark_reset_without_exactly_once_is_refused() {
    let db = PgCluster::shared().fresh_db();
    run_refused(
        &db,
        &["--accept-watermark-reset"],
        "--accept-watermark-reset applies only with --delivery exactly-once",
    );
}

#[test]
fn a_watermark_topic_that_is_not_compacted_stops_the_relay_with_the_command() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    // Created by hand with the broker's default cleanup.policy (delete): retention
    // would one day delete the newest watermark of an idle relay.
    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--create",
            "--topic",
            &watermark_topic(&db),
            "--partitions",
            "1",
        ],
    );
    let (status, stderr) = eos_until_exit(&db, broker, &[]);
    assert_ne!(status, Some(0), "{stderr}");
    assert!(
        stderr.contains("cleanup.policy=delete")
            && stderr.contains("--add-config cleanup.policy=compact"),
        "the stop names the policy and the kafka-configs command: {stderr}"
    );
    assert!(
        !stderr.contains("relaying outbox to kafka"),
        "nothing streamed before the stop: {stderr}"
    );
}

#[test]
fn check_and_tail_say_which_delivery_mode_is_in_force() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let topic = watermark_topic(&db);
    let url = db.url();
    let addr = broker.addr();
    let check = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "--database-url",
            url.as_str(),
            "--slot",
            db.name.as_str(),
        ];
        args.extend_from_slice(extra);
        let mut p = Pgoutbox::spawn(&args);
        let status = p.wait_exit(WAIT);
        (status, p.stdout_so_far().join("\n"))
    };
    let line = |out: &str, name: &str| {
        out.lines()
            .find(|l| l.contains(&format!(" {name}: ")))
            .unwrap_or_else(|| panic!("no {name} line:\n{out}"))
            .to_owned()
    };
    // The default says so.
    let (_, out) = check(&[]);
    let mode = line(&out, "delivery");
    assert!(
        mode.starts_with("✔ delivery: --delivery at-least-once = at-least-once"),
        "{out}"
    );
    assert!(!out.contains("watermark_topic"), "{out}");
    // Exactly-once names the derived transactional id and looks at the topic
    // without creating it.
    let eos = [
        "--delivery",
        "exactly-once",
        "--watermark-topic",
        topic.as_str(),
        "--brokers",
        addr.as_str(),
    ];
    let (_, out) = check(&eos);
    let mode = line(&out, "delivery");
    let system_id = db.psql("SELECT system_identifier FROM pg_control_system()");
    let derived = format!(
        "transactional.id pgoutbox-{system_id}-{}-{}",
        db.name, db.name
    );
    assert!(
        mode.contains("exactly-once") && mode.contains(&derived),
        "{mode}"
    );
    let wm = line(&out, "watermark_topic");
    assert!(
        wm.starts_with(&format!("✔ watermark_topic: {topic} = does not exist yet"))
            && wm.contains("cleanup.policy=compact"),
        "{wm}"
    );
    // check only reads: the topic is still missing.
    let (_, again) = check(&eos);
    assert!(line(&again, "watermark_topic").contains("does not exist yet"));
    // A topic with retention fails with the kafka-configs command.
    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &["--create", "--topic", &topic, "--partitions", "1"],
    );
    let (status, out) = check(&eos);
    let wm = line(&out, "watermark_topic");
    assert!(!status.success(), "{out}");
    assert!(
        wm.starts_with(&format!(
            "✘ watermark_topic: {topic} = cleanup.policy=delete"
        )) && wm.contains("--add-config cleanup.policy=compact"),
        "{wm}"
    );
    // tail says which mode run would be in with the same flags.
    let mut tail = Pgoutbox::spawn(&[
        "tail",
        "--database-url",
        &url,
        "--delivery",
        "exactly-once",
        "--watermark-topic",
        &topic,
    ]);
    tail.wait_stderr("tailing outbox", WAIT);
    let stderr = tail.stderr();
    let started = stderr
        .lines()
        .find(|l| l.contains("tailing outbox"))
        .unwrap();
    assert!(
        started.contains("delivery=exactly-once") && started.contains(&topic),
        "{started}"
    );
    tail.signal("TERM");
    tail.wait_exit(WAIT);
}

/// After a promotion the relay reads the server's timeline history: its own
/// watermark from timeline 1 (before the switch point) leads to timeline 2 and the
/// events of both arrive once; a watermark of timeline 1 that ends past the switch
/// point (transactions a promoted standby never received) stops the relay, even
/// though the new timeline's WAL has grown past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_promotion_a_watermark_past_the_branch_point_stops_the_relay() {
    let cluster = PgCluster::start(support::ClusterOptions::default());
    let db = cluster.fresh_db();
    let broker = Broker::shared_kafka();
    let id = format!("test-{}", db.name);
    let mut relay = start_eos(&db, broker, &["--transactional-id", &id]);
    let mut ledger = Ledger::default();
    write(&db, 21, &mut ledger, 20).await;
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    relay.signal("TERM");
    relay.wait_exit(WAIT);

    cluster.promote_in_place();
    assert_eq!(cluster.timeline(), 2);
    write(&db, 22, &mut ledger, 20).await;
    let mut relay = start_eos(&db, broker, &["--transactional-id", &id]);
    relay.wait_stderr(
        "exactly-once: resuming after the newest committed watermark",
        WAIT,
    );
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    let verdict = read_all(broker, &db, &ledger);
    assert_exactly_once("across a promotion", &verdict);
    relay.signal("TERM");
    relay.wait_exit(WAIT);

    // Timeline 1 ended at the switch point; a watermark of timeline 1 past it
    // (but below the new WAL end) names WAL this server does not have.
    let history = db.psql("SELECT pg_read_file('pg_wal/00000002.history')");
    let switch: pgoutbox::pg::lsn::Lsn = history
        .split_whitespace()
        .nth(1)
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no switch point in {history:?}"));
    let past = |bytes: u64| pgoutbox::pg::lsn::Lsn::from(u64::from(switch) + bytes).to_string();
    assert!(u64::from(current_lsn(&db)) > u64::from(switch) + 64);
    let system_id = db.psql("SELECT system_identifier FROM pg_control_system()");
    let forged = serde_json::json!({
        "system_id": system_id, "timeline": 1, "database": db.name, "slot": db.name,
        "commit_lsn": past(8), "end_lsn": past(64)
    });
    produce_one(
        &broker.addr(),
        &watermark_topic(&db),
        &id,
        &forged.to_string(),
    );
    let (status, stderr) = eos_until_exit(&db, broker, &["--transactional-id", &id]);
    assert_eq!(status, Some(5), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "past {switch} where this server's timeline 2 branched off it"
        )),
        "the stop names the branch point: {stderr}"
    );
    assert!(!stderr.contains("relaying outbox to kafka"), "{stderr}");
}

/// The state file records where the relay committed watermarks, so a topic deleted
/// behind its back is a stop with the fix, not a silent restart from the slot;
/// `--accept-watermark-reset` goes on once, and nothing arrives twice after a clean
/// stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_watermark_topic_stops_the_relay_until_the_reset_is_accepted() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let id = format!("test-{}", db.name);
    let topic = watermark_topic(&db);
    let mut relay = start_eos(&db, broker, &["--transactional-id", &id]);
    let mut ledger = Ledger::default();
    write(&db, 31, &mut ledger, 20).await;
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    relay.signal("TERM");
    relay.wait_exit(WAIT);

    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &["--delete", "--topic", &topic],
    );
    support::wait_for("the watermark topic to be gone", WAIT, || {
        let listed = broker.kafka_tool("org.apache.kafka.tools.TopicCommand", &["--list"]);
        (!listed.lines().any(|l| l.trim() == topic)).then_some(())
    });
    let (status, stderr) = eos_until_exit(&db, broker, &["--transactional-id", &id]);
    assert_eq!(status, Some(5), "{stderr}");
    assert!(
        stderr.contains("holds no watermark for transactional id")
            && stderr.contains("--accept-watermark-reset"),
        "the stop says what was lost and the fix: {stderr}"
    );
    assert!(!stderr.contains("relaying outbox to kafka"), "{stderr}");

    let mut relay = start_eos(
        &db,
        broker,
        &["--transactional-id", &id, "--accept-watermark-reset"],
    );
    assert!(relay.stderr().contains("--accept-watermark-reset"));
    write(&db, 32, &mut ledger, 20).await;
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    let verdict = read_all(broker, &db, &ledger);
    assert_exactly_once("after an accepted watermark reset", &verdict);
    relay.signal("TERM");
    relay.wait_exit(WAIT);
    // The new topic holds the watermark again: a plain restart goes on.
    let mut relay = start_eos(&db, broker, &["--transactional-id", &id]);
    relay.wait_stderr(
        "exactly-once: resuming after the newest committed watermark",
        WAIT,
    );
    relay.signal("TERM");
    relay.wait_exit(WAIT);
}
