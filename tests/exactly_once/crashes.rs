//! Crashes of the relay under exactly-once: kill -9 at random points and at each
//! named step of a Kafka transaction's life (`PGOUTBOX_FAILPOINT`, each proven hit
//! by the line the relay prints), and a zombie (paused, fenced by its successor,
//! resumed): a read_committed reader then sees every event once.

use super::*;

/// Crashes per named step: 20 in the default suite, 200 with `PGOUTBOX_LONG=1`.
fn rounds() -> usize {
    if std::env::var("PGOUTBOX_LONG").as_deref() == Ok("1") {
        200
    } else {
        20
    }
}

/// Crash the relay `kills` times while events are written — by kill -9 after a
/// random while, or at the `failpoint` step (proven hit: the relay prints it) —
/// restarting it each time, then check what a read_committed reader gets.
async fn crash_and_resume(scenario: &str, seed: u64, kills: usize, failpoint: Option<&str>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let mut ledger = Ledger::default();
    let mut rng = Rng::new(seed);
    let mut hit = 0;
    // A set-up step is reached once per session: crash at its first pass, with the
    // writer already writing. The slot must exist before anything is written (rows
    // committed before it are never decoded): a first relay creates it.
    let at_start = failpoint.is_some_and(|step| step.contains("init-transactions"));
    if at_start {
        let mut first = start_eos(&db, broker, &[]);
        first.signal("TERM");
        first.wait_exit(WAIT);
    }
    // A crash during `init_transactions` needs a transaction for it to abort: a
    // relay crashed right before its commit leaves one open, each round.
    let during_init = failpoint == Some("during-init-transactions");
    // A step that depends on timing can be passed without a hit (the relay says
    // "missed": `init_transactions` returned before its watchdog fired); such a
    // round ends with a kill -9 instead and is run again, so `kills` crashes are
    // still proven hits. Bounded, so a step that is never hit fails the test.
    let mut missed = 0;
    let mut round = 0;
    while if failpoint.is_some() {
        hit < kills
    } else {
        round < kills
    } {
        assert!(
            missed <= kills,
            "{scenario}: the failpoint was missed {missed} times in {round} rounds"
        );
        let nth = if at_start { 1 } else { 1 + round % 3 };
        let stop = Arc::new(AtomicBool::new(false));
        let mut writing = None;
        if during_init {
            let args = eos_args(&db, &[]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut setter = Pgoutbox::spawn_with_env(
                &run_args(&db, &broker.addr(), &args),
                &[("PGOUTBOX_FAILPOINT", "before-kafka-commit:1")],
            );
            setter.wait_stderr("relaying outbox to kafka", WAIT);
            writing = Some(writer(&db, seed + round as u64, stop.clone()).await);
            setter.wait_stderr("failpoint before-kafka-commit hit", WAIT);
            setter.wait_exit(WAIT);
        }
        let env: Vec<(&str, String)> = failpoint
            .map(|step| ("PGOUTBOX_FAILPOINT", format!("{step}:{nth}")))
            .into_iter()
            .collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let args = eos_args(&db, &[]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut relay = Pgoutbox::spawn_with_env(&run_args(&db, &broker.addr(), &args), &env);
        if !at_start {
            relay.wait_stderr("relaying outbox to kafka", WAIT);
        }
        let writing = match writing {
            Some(writing) => writing,
            None => writer(&db, seed + round as u64, stop.clone()).await,
        };
        match failpoint {
            Some(step) => {
                let (hit_line, missed_line) = (
                    format!("failpoint {step} hit"),
                    format!("failpoint {step} missed"),
                );
                support::wait_for(&format!("{hit_line:?} or {missed_line:?}"), WAIT, || {
                    let said = relay.stderr();
                    (said.contains(&hit_line) || said.contains(&missed_line)).then_some(())
                });
                if relay.stderr().contains(&hit_line) {
                    hit += 1;
                } else {
                    missed += 1;
                    relay.signal("KILL");
                }
            }
            None => {
                let after = Duration::from_millis(rng.range(200, 1_500));
                tokio::time::sleep(after).await;
                relay.signal("KILL");
            }
        }
        relay.wait_exit(WAIT);
        stop.store(true, Ordering::Relaxed);
        ledger.committed.extend(writing.await.unwrap().committed);
        round += 1;
    }
    // A last relay finishes the stream.
    let relay = start_eos(&db, broker, &[]);
    write(&db, seed + 1_000, &mut ledger, 20).await;
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &relay, WAIT * 2);
    let verdict = read_all(broker, &db, &ledger);
    eprintln!("{scenario}: {round} crashes ({hit} at the failpoint, {missed} after it was missed)");
    assert_exactly_once(scenario, &verdict);
    if failpoint.is_some() {
        assert_eq!(hit, kills, "crashes at the failpoint");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_init_transactions_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash before init_transactions",
        400,
        rounds(),
        Some("before-init-transactions"),
    )
    .await;
}

/// A crash while `init_transactions` runs, each time with an open transaction
/// (left by a relay crashed right before its commit) that the coordinator is
/// aborting: the next relay's call finishes the abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_init_transactions_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash during init_transactions",
        600,
        rounds(),
        Some("during-init-transactions"),
    )
    .await;
}

/// `init_transactions` aborts what the previous producer left open; a crash right
/// after it (before the watermark is read) leaves nothing half-done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_right_after_init_transactions_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash after init_transactions",
        500,
        rounds(),
        Some("after-init-transactions"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_sends_nothing_twice() {
    crash_and_resume("exactly-once kill -9", 100, rounds(), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_kafka_commit_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash before the commit",
        200,
        rounds(),
        Some("before-kafka-commit"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_kafka_commit_and_the_slot_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash after the commit",
        300,
        rounds(),
        Some("after-kafka-commit"),
    )
    .await;
}

/// A zombie: relay A stops (SIGSTOP, raised by a failpoint right before its
/// commit, so it is paused holding an open Kafka transaction with records and a
/// watermark in it); its walsender is ended (as `wal_sender_timeout` would);
/// relay B takes the slot and fences A's transactional id. Resumed (SIGCONT), A
/// goes on to commit — a write — is fenced, says so and stops; a read_committed
/// reader sees nothing A's open transaction held, and every event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_relay_is_fenced_and_nothing_it_wrote_is_visible() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let mut ledger = Ledger::default();
    let args = eos_args(&db, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut zombie = Pgoutbox::spawn_with_env(
        &run_args(&db, &broker.addr(), &args),
        &[("PGOUTBOX_FAILPOINT", "before-kafka-commit:2:stop")],
    );
    zombie.wait_stderr("relaying outbox to kafka", WAIT);
    // A first Kafka transaction commits; the second one is where A stops.
    write(&db, 700, &mut ledger, 20).await;
    wait_confirmed(&db, current_lsn(&db), &zombie, WAIT * 2);
    write(&db, 703, &mut ledger, 20).await;
    zombie.wait_stderr("failpoint before-kafka-commit hit", WAIT);
    // Stopped with its transaction open: its records went out, none committed.
    let successor = Pgoutbox::spawn(&run_args(&db, &broker.addr(), &args));
    successor.wait_stderr("standing by", WAIT);
    db.psql(&format!(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
         WHERE slot_name = '{}' AND active_pid IS NOT NULL",
        db.name
    ));
    successor.wait_stderr(
        "exactly-once: resuming after the newest committed watermark",
        WAIT,
    );
    write(&db, 701, &mut ledger, 40).await;
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &successor, WAIT * 2);
    zombie.signal("CONT");
    let status = zombie.wait_exit(WAIT);
    let log = zombie.stderr();
    assert!(
        log.contains("this relay was fenced"),
        "the resumed zombie must be told it was fenced (status {status:?}):\n{log}"
    );
    assert_ne!(
        status.code(),
        Some(0),
        "a fenced relay exits non-zero:\n{log}"
    );
    let fenced = log
        .lines()
        .filter(|l| l.contains("fenced"))
        .collect::<Vec<_>>();
    eprintln!("the zombie's end ({status:?}):\n{}", fenced.join("\n"));
    write(&db, 702, &mut ledger, 10).await;
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &successor, WAIT * 2);
    let verdict = read_all(broker, &db, &ledger);
    assert_exactly_once("exactly-once zombie", &verdict);
}

/// Logical decoding messages are covered like rows: each transaction holds rows
/// and transactional messages, and a non-transactional message follows it
/// (`--message-non-transactional relay`: it counts as a unit of its own, its LSN
/// the watermark's when it is the last one in a Kafka transaction). kill -9 three
/// times mid-stream; a read_committed reader gets every row and message once, in
/// order per key. (PostgreSQL 13 streams no messages: there, the refusal.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_and_messages_across_kill_9_arrive_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    if crate::messages::refused_before_14(&db, &broker.addr()) {
        return;
    }
    crate::messages::load_helper(&db);
    let extra = ["--message-non-transactional", "relay"];
    // The first relay creates the slot before anything is written (rows committed
    // before it are never decoded).
    let mut relay = start_eos(&db, broker, &extra);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writing = {
        let (ledger, stop, client) = (ledger.clone(), stop.clone(), db.client().await);
        tokio::spawn(async move {
            let row = "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
                       VALUES ('order', $1, 'Row', '{}') RETURNING id::text";
            let message = "SELECT outbox_emit_message('order', $1, 'Message', '{}')::text";
            let loose = "WITH e AS (SELECT gen_random_uuid() AS id) \
                         SELECT pg_logical_emit_message(false, 'pgoutbox', jsonb_build_object( \
                           'id', e.id, 'aggregate_type', 'order', 'aggregate_id', $1::text, \
                           'event_type', 'Loose', 'payload', '{}'::jsonb, 'created_at', now())::text)::text, \
                         e.id::text FROM e";
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("key-{}", n % 10);
                n += 1;
                let mut batch = Vec::new();
                client.batch_execute("BEGIN").await.unwrap();
                for sql in [row, message, row, message] {
                    let id: String = client.query_one(sql, &[&key]).await.unwrap().get(0);
                    batch.push((id, key.clone()));
                }
                client.batch_execute("COMMIT").await.unwrap();
                ledger.lock().unwrap().committed.extend(batch);
                let id: String = client.query_one(loose, &[&key]).await.unwrap().get(1);
                ledger.lock().unwrap().committed.push((id, key));
            }
        })
    };
    let mut rng = Rng::new(900);
    let mut said = Vec::new();
    for _ in 0..3 {
        let after = Duration::from_millis(rng.range(500, 2_000));
        tokio::time::sleep(after).await;
        relay.signal("KILL");
        relay.wait_exit(WAIT);
        said.push(format!(
            "killed with {} events committed\n{}",
            ledger.lock().unwrap().len(),
            relay.stderr()
        ));
        relay = start_eos(&db, broker, &extra);
    }
    stop.store(true, Ordering::Relaxed);
    writing.await.unwrap();
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT * 2);
    let ledger = ledger.lock().unwrap().clone();
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    let ids: HashSet<&str> = ledger.committed.iter().map(|(id, _)| id.as_str()).collect();
    reader.try_read_until(WAIT * 2, |records| {
        let got: HashSet<String> = records.iter().map(|r| r.id()).collect();
        ids.iter().all(|id| got.contains(*id))
    });
    reader.settle(Duration::from_secs(2));
    let verdict = verify(&ledger, &reader.records);
    let loose = reader
        .records
        .iter()
        .filter(|r| r.header("event_type").as_deref() == Some("Loose"))
        .count();
    eprintln!(
        "{loose} non-transactional messages among {} records",
        reader.records.len()
    );
    assert!(loose > 0, "no non-transactional message was relayed");
    if verdict.lost > 0 {
        said.push(relay.stderr());
        for (n, log) in said.iter().enumerate() {
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.contains("exactly-once:") || l.contains("WARN") || l.contains("ERROR")
                })
                .collect();
            eprintln!("relay {n}:\n{}", lines.join("\n"));
        }
        let got: HashSet<String> = reader.records.iter().map(|r| r.id()).collect();
        let lost: Vec<usize> = (ledger.committed.iter().enumerate())
            .filter(|(_, (id, _))| !got.contains(id))
            .map(|(i, _)| i)
            .collect();
        eprintln!("lost at ledger positions {lost:?}");
        for id in &verdict.lost_sample {
            let row = db.psql(&format!(
                "SELECT count(*) FROM outbox WHERE id::text = '{id}'"
            ));
            eprintln!(
                "lost {id}: {}",
                if row == "1" { "a row" } else { "a message" }
            );
        }
    }
    assert_exactly_once("exactly-once rows and messages", &verdict);
}
