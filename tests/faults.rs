//! Fault injection: `pgoutbox run` under continuous load while its own process,
//! PostgreSQL, the broker link or a second relay misbehave. Nothing may be lost.
//!
//! Every scenario ends the same way ([`conclude`]): the [`Writer`] stops (its
//! ledger holds every committed event in commit order, transactions in doubt
//! resolved against the outbox table), a [`Reader`] reads the topics from the
//! beginning, and the verifier must find lost = 0, unexpected = 0, reordered = 0 with
//! every committed event delivered. Duplicates are allowed (at-least-once) and counted.
//!
//! Figures, printed as one `FIGURES` line per scenario:
//! - **recovery time**: from the end of the fault (replacement relay spawned,
//!   PostgreSQL started again, broker link restored, active relay killed for a
//!   takeover) until the slot's `confirmed_flush_lsn` passes the value it had when
//!   the fault began — the first moment new progress is durable. The load never
//!   stops, so there is always something to confirm.
//! - **peak retained WAL**: the highest `pg_current_wal_lsn() - restart_lsn` of the
//!   slot over all samples taken during the scenario.
//!
//! The default suite runs short forms; `PGOUTBOX_LONG=1` runs the same tests with
//! the sizes of [`Scale::long`].

use crate::support;

use std::cell::RefCell;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use support::kafka::{Broker, Reader};
use support::verify::{acks_in, audit_acks, explain_lost, verify, Ack, Verdict};
use support::workload::{
    http_get, read_acked, read_all, spawn_run_audited, start_run_audited, topics, Monitor, Writer,
    WriterConfig,
};
use support::{ClusterOptions, PgCluster, Pgoutbox, Rng, TestDb, WAIT};

/// Aggregate types the writer uses (one topic each).
pub(crate) const TYPES: &[&str] = &["order", "payment"];

/// Sizes of the scenarios.
struct Scale {
    /// Relay kill -9 cycles.
    kill_cycles: usize,
    /// Every n-th kill cycle kills during a transaction of `big_rows` events.
    big_every: usize,
    big_rows: usize,
    /// PostgreSQL stops per mode (fast, immediate).
    pg_stops: usize,
    /// Broker outages, in seconds.
    outages: &'static [u64],
    /// Standby takeovers.
    takeovers: usize,
    /// Writer pause between transactions (1–20 events each).
    pause: Duration,
}

impl Scale {
    fn short() -> Scale {
        Scale {
            kill_cycles: 20,
            big_every: 5,
            big_rows: 20_000,
            pg_stops: 2,
            outages: &[10],
            takeovers: 2,
            pause: Duration::from_millis(20),
        }
    }

    fn long() -> Scale {
        Scale {
            kill_cycles: 200,
            big_every: 20,
            big_rows: 20_000,
            pg_stops: 10,
            outages: &[60, 150],
            takeovers: 10,
            pause: Duration::from_millis(20),
        }
    }

    fn get() -> Scale {
        if std::env::var("PGOUTBOX_LONG").as_deref() == Ok("1") {
            Scale::long()
        } else {
            Scale::short()
        }
    }
}

fn writer(db: &TestDb<'_>, seed: u64, scale: &Scale) -> Writer {
    Writer::spawn(WriterConfig {
        url: db.url(),
        seed,
        types: TYPES.to_vec(),
        keys: 50,
        max_rows: 20,
        rollbacks: true,
        pause: scale.pause,
    })
}

/// Wait until the relay confirmed something (so the topics exist), then open a reader.
pub(crate) fn first_progress(
    db: &TestDb<'_>,
    broker: &str,
    relay: &Pgoutbox,
    monitor: &mut Monitor,
) -> Reader {
    let start = monitor.wait_sample().confirmed;
    monitor.wait_confirmed_past("the relay's first confirmation", start, WAIT, || {
        log_tail(relay)
    });
    Reader::new(broker, &topics(db, TYPES))
}

/// Wait until one of two relays on the same slot stands by. Normally the newcomer
/// (`standby`) does; but if the active relay's session was interrupted just then
/// (a stall or a transient error ends a session and gives the slot back for the
/// back-off), the newcomer may take the slot and the old relay stand by: that is
/// a legitimate handover, as long as the old relay said why its session ended.
/// Then the two are swapped and the reason returned; a relay that lost its slot
/// without a logged interruption fails the test. `mark` is the length of the
/// active relay's log before the newcomer was spawned.
fn settle_roles(active: &mut Pgoutbox, mark: usize, standby: &mut Pgoutbox) -> Option<String> {
    let took = support::wait_for_opt(WAIT, || {
        if standby.stderr().contains("standing by") {
            Some(false)
        } else if standby.stderr().contains("relaying outbox to kafka") {
            Some(true)
        } else {
            None
        }
    });
    match took {
        Some(false) => None,
        Some(true) => {
            let log = active.stderr();
            let since = log.get(mark..).unwrap_or_default();
            // Or the session was already over when the newcomer came: it ended after
            // the active relay's last session start and was not started again by
            // `mark` (the back-off was under way).
            let before = log.get(..mark).unwrap_or_default();
            let ended_before = before
                .rfind("relaying outbox to kafka")
                .and_then(|start| {
                    before[start..]
                        .lines()
                        .find(|l| l.contains("replication session interrupted"))
                })
                .map(str::to_owned);
            let why = since
                .lines()
                .find(|l| l.contains(" WARN ") || l.contains("stalled"))
                .map(str::to_owned)
                .or(ended_before);
            let Some(why) = why else {
                panic!(
                    "the new relay took the slot while the active one held it, and the \
                     active relay logged no interruption:\nactive:\n{}\nnewcomer:\n{}",
                    warnings(&log),
                    warnings(&standby.stderr())
                );
            };
            support::wait_for("the old active relay to stand by", WAIT, || {
                let log = active.stderr();
                log.get(mark..)
                    .is_some_and(|l| l.contains("standing by"))
                    .then_some(())
            });
            std::mem::swap(active, standby);
            Some(format!(
                "the active relay's session ended ({why}), the newcomer took the slot"
            ))
        }
        None => panic!(
            "neither relay stood by within {WAIT:?}:\nactive:\n{}\nnewcomer:\n{}",
            warnings(&active.stderr()),
            warnings(&standby.stderr())
        ),
    }
}

/// A relay's log without the per-record TRACE lines of the ack journal.
fn warnings(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.contains(" TRACE ")).collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    let rank = (sorted.len() as f64 * q).ceil() as usize;
    sorted.get(rank.max(1) - 1).copied()
}

/// The last lines of the relay's log, for failure messages.
pub(crate) fn log_tail(relay: &Pgoutbox) -> String {
    let log = relay.stderr();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The last lines of the server log of a private cluster.
fn pg_log_tail(cluster: &PgCluster) -> String {
    let log = cluster.datadir.parent().unwrap().join("postgres.log");
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Wait until the slot's `confirmed_flush_lsn` passes both `before` (sampled
/// before PostgreSQL stop #`n` in `mode`) and its value right after the start:
/// PostgreSQL 17+ writes the slot at the shutdown checkpoint, so the restarted
/// slot may already be past `before` with no relay session yet, and only a relay
/// streaming from the restarted server moves it further. Returns how long it
/// took, failing with both logs on timeout.
pub(crate) fn progress_after_restart(
    monitor: &mut Monitor,
    before: u64,
    (mode, n): (&str, usize),
    relay: &Pgoutbox,
    cluster: &PgCluster,
) -> Duration {
    let after = monitor.wait_sample().confirmed;
    monitor.wait_confirmed_past(
        &format!("progress after `pg_ctl stop -m {mode}` #{n}"),
        before.max(after),
        WAIT * 2,
        || format!("{}\nPostgreSQL:\n{}", log_tail(relay), pg_log_tail(cluster)),
    )
}

/// Stop the writer, read everything, verify, print the figures, assert no loss.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conclude(
    scenario: &str,
    writer: Writer,
    reader: &mut Reader,
    relay: &Pgoutbox,
    acks: &[Ack],
    monitor: &mut Monitor,
    recoveries: &mut [Duration],
    note: &str,
) -> Verdict {
    let (ledger, stats) = writer.finish();
    let complete = read_all(reader, &ledger, WAIT * 10);
    // Every ack of every relay of the run (killed ones included), and the current
    // relay's up to now: each acked offset must be read back with its record.
    let mut acks = acks.to_vec();
    acks.extend(acks_in(&relay.stderr()));
    read_acked(reader, &acks, WAIT);
    reader.settle(Duration::from_secs(2));
    let verdict = verify(&ledger, &reader.records);
    let audit = audit_acks(&acks, &reader.records);
    if verdict.lost > 0 {
        eprintln!(
            "{scenario}: {}",
            explain_lost(&ledger, &reader.records, &acks, 10)
        );
    }
    monitor.sample();
    recoveries.sort();
    let ms = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{} ms", d.as_millis()));
    eprintln!(
        "FIGURES {scenario}: written={} delivered={} lost={} unexpected={} reordered={} \
         duplicated_total={} duplicated_max_copies={} recovery_p50={} recovery_max={} \
         (n={}) peak_retained_wal={:.1} MB writer={stats:?} acks_audited={} {note}",
        verdict.committed,
        verdict.delivered,
        verdict.lost,
        verdict.unexpected,
        verdict.reordered,
        verdict.duplicated_total,
        verdict.duplicated_max,
        ms(percentile(recoveries, 0.5)),
        ms(recoveries.last().copied()),
        recoveries.len(),
        monitor.peak_retained as f64 / (1 << 20) as f64,
        audit.acked,
    );
    if verdict.lost + verdict.reordered + verdict.unexpected > 0 {
        // What the relay said about it: its warnings and errors.
        let said: Vec<String> = relay
            .stderr()
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .map(str::to_owned)
            .collect();
        eprintln!(
            "{scenario}: the relay's warnings and errors:\n{}",
            said.join("\n")
        );
    }
    audit.assert_clean();
    assert!(
        complete,
        "{scenario}: not every committed event arrived: {verdict:?}\nrelay:\n{}",
        log_tail(relay)
    );
    verdict.assert_no_loss();
    assert_eq!(verdict.lost, 0);
    assert!(verdict.committed > 0);
    verdict
}

/// Where a kill cycle pulls the trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillPoint {
    /// A random delay (0–2 s) after the relay made progress again.
    Random,
    /// As soon as `confirmed_flush_lsn` moves (a status update just landed).
    AfterStatus,
    /// 0–1.5 s after spawning, without waiting for progress (startup, catch-up).
    Startup,
    /// Once the consumer saw part of a large transaction.
    BigTxn,
}

fn kill_point(cycle: usize, scale: &Scale) -> KillPoint {
    if cycle % scale.big_every == scale.big_every - 1 {
        return KillPoint::BigTxn;
    }
    [
        KillPoint::Random,
        KillPoint::AfterStatus,
        KillPoint::Startup,
    ][cycle % 3]
}

/// Block until `confirmed_flush_lsn` changes.
fn wait_status_update(monitor: &mut Monitor) {
    let before = monitor.wait_sample().confirmed;
    // Polled every 2 ms: the kill that follows should land right after the update.
    support::poll_for(WAIT, Duration::from_millis(2), || {
        monitor
            .sample()
            .is_some_and(|s| s.confirmed != before)
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no status update within {WAIT:?}"));
}

/// Wait until `reader` holds at least one record of `ids`; returns how many it holds.
fn wait_part_of(reader: &mut Reader, ids: &HashSet<String>) -> usize {
    let seen = RefCell::new((0, 0));
    reader.read_until(
        "the first record of the large transaction",
        WAIT * 2,
        |records| {
            let (checked, found) = &mut *seen.borrow_mut();
            *found += records[*checked..]
                .iter()
                .filter(|r| ids.contains(&r.id()))
                .count();
            *checked = records.len();
            *found > 0
        },
    );
    let found = seen.borrow().1;
    found
}

#[test]
fn relay_kill_9_cycles_under_load_lose_nothing() {
    let scale = Scale::get();
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let mut monitor = Monitor::new(&db);
    let mut relay = start_run_audited(&db, &broker, &[]);
    let mut acks = Vec::new();
    let writer = writer(&db, 1, &scale);
    let mut reader = first_progress(&db, &broker, &relay, &mut monitor);
    let mut rng = Rng::new(42);
    let mut recoveries = Vec::new();
    let (mut big, mut big_mid) = (0, 0);
    for cycle in 0..scale.kill_cycles {
        match kill_point(cycle, &scale) {
            KillPoint::Random => reader.settle(Duration::from_millis(rng.range(0, 2000))),
            KillPoint::AfterStatus => wait_status_update(&mut monitor),
            KillPoint::Startup => reader.settle(Duration::from_millis(rng.range(0, 1500))),
            KillPoint::BigTxn => {
                let ids = writer.big_transaction(scale.big_rows);
                let seen = wait_part_of(&mut reader, &ids);
                big += 1;
                big_mid += usize::from(seen < ids.len());
            }
        }
        relay.signal("KILL");
        relay.wait_exit(WAIT);
        acks.extend(acks_in(&relay.stderr()));
        let before = monitor.wait_inactive().confirmed;
        relay = spawn_run_audited(&db, &broker, &[]);
        if kill_point(cycle + 1, &scale) != KillPoint::Startup {
            recoveries.push(monitor.wait_confirmed_past(
                &format!("progress after kill #{}", cycle + 1),
                before,
                WAIT * 2,
                || log_tail(&relay),
            ));
        }
    }
    let note = format!(
        "kills={} during_large_txn={big_mid}/{big} ({}-event transactions)",
        scale.kill_cycles, scale.big_rows
    );
    conclude(
        "relay kill -9",
        writer,
        &mut reader,
        &relay,
        &acks,
        &mut monitor,
        &mut recoveries,
        &note,
    );
}

#[test]
fn postgres_fast_and_immediate_stop_mid_stream_then_start() {
    let scale = Scale::get();
    let cluster = PgCluster::start(ClusterOptions::default());
    let db = cluster.fresh_db();
    let broker = Broker::shared().addr();
    let mut monitor = Monitor::new(&db);
    let mut relay = start_run_audited(&db, &broker, &[]);
    let writer = writer(&db, 2, &scale);
    let mut reader = first_progress(&db, &broker, &relay, &mut monitor);
    let mut rng = Rng::new(43);
    let mut recoveries = Vec::new();
    // How far confirmed_flush_lsn fell back across a restart (PostgreSQL < 17 does
    // not write a slot's confirmed position at the shutdown checkpoint).
    let mut regressed = 0;
    for round in 0..scale.pg_stops * 2 {
        let mode = ["fast", "immediate"][round % 2];
        reader.settle(Duration::from_millis(rng.range(200, 2000)));
        let before = monitor.wait_sample().confirmed;
        cluster.stop(mode);
        std::thread::sleep(Duration::from_millis(rng.range(0, 3000))); // the outage
        cluster.start_again();
        let after = monitor.wait_sample().confirmed;
        regressed = regressed.max(before.saturating_sub(after));
        recoveries.push(progress_after_restart(
            &mut monitor,
            before,
            (mode, round + 1),
            &relay,
            &cluster,
        ));
        assert!(
            relay.child.try_wait().unwrap().is_none(),
            "the relay exited instead of reconnecting:\n{}",
            log_tail(&relay)
        );
    }
    let sessions = relay.stderr().matches("relaying outbox to kafka").count();
    assert!(
        sessions > scale.pg_stops * 2,
        "the relay must have resumed by itself after each stop ({sessions} sessions)"
    );
    let note = format!(
        "stops={} (fast and immediate alternating) relay_sessions={sessions} \
         slot_fell_back_at_restart_max={regressed} bytes",
        scale.pg_stops * 2
    );
    conclude(
        "postgres stop/start",
        writer,
        &mut reader,
        &relay,
        &[],
        &mut monitor,
        &mut recoveries,
        &note,
    );
    relay.signal("TERM");
    relay.wait_exit(WAIT);
}

#[test]
fn broker_outage_under_load_holds_the_slot_then_drains() {
    let scale = Scale::get();
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start();
    let mut monitor = Monitor::new(&db);
    let relay = start_run_audited(&db, &broker.addr(), &[]);
    let writer = writer(&db, 3, &scale);
    let mut reader = first_progress(&db, &broker.addr(), &relay, &mut monitor);
    let mut recoveries = Vec::new();
    let mut notes = Vec::new();
    for &secs in scale.outages {
        drop(reader); // the test's consumer would only retry against the cut link
        broker.stop();
        // Whatever commits after this point cannot have been acked by the broker.
        let cut = monitor.wait_sample().current;
        let committed_at_cut = writer.committed();
        let mut highest = 0;
        let outage = Duration::from_secs(secs);
        support::hold_for(Instant::now(), outage, Duration::from_millis(200), || {
            if let Some(s) = monitor.sample() {
                assert!(
                    s.confirmed <= cut,
                    "slot confirmed {} past {cut}, the WAL position when the broker went away",
                    s.confirmed
                );
                highest = highest.max(s.confirmed);
            }
        });
        let unacked = writer.committed() - committed_at_cut;
        assert!(
            unacked > 0,
            "the writer must keep writing during the outage"
        );
        broker.resume();
        recoveries.push(monitor.wait_confirmed_past(
            &format!("the slot to move past the {secs} s outage"),
            cut,
            WAIT * 3,
            || log_tail(&relay),
        ));
        notes.push(format!(
            "outage {secs} s: {unacked} events written while cut, confirmed stayed at or \
             below the cut (closest: {} bytes below)",
            cut - highest
        ));
        reader = Reader::new(&broker.addr(), &topics(&db, TYPES));
    }
    conclude(
        "broker outage",
        writer,
        &mut reader,
        &relay,
        &[],
        &mut monitor,
        &mut recoveries,
        &notes.join("; "),
    );
}

#[test]
fn second_run_on_the_same_slot_stands_by_then_takes_over_after_kill_9() {
    let scale = Scale::get();
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let mut monitor = Monitor::new(&db);
    let mut active = start_run_audited(&db, &broker, &[]);
    let mut acks = Vec::new();
    let writer = writer(&db, 4, &scale);
    let mut reader = first_progress(&db, &broker, &active, &mut monitor);
    let mut takeovers = Vec::new();
    let mut streaming = Vec::new();
    let mut swaps = Vec::new();
    for round in 0..scale.takeovers {
        let mark = active.stderr().len();
        let mut standby = spawn_run_audited(&db, &broker, &[]);
        let swapped = settle_roles(&mut active, mark, &mut standby);
        // What the standby logged before it stood by (all of it, when the roles
        // were swapped: it streamed until its session was interrupted).
        let standing_since = standby.stderr().len();
        if let Some(why) = &swapped {
            swaps.push(format!("round {round}: {why}"));
        }
        // Let the active relay deliver a while with the standby waiting; from the
        // second round on long enough for the standby's retry back-off to reach its
        // 5 s cap, so the takeover figures include the worst case.
        if round > 0 {
            reader.settle(Duration::from_secs(8));
        }
        let now = monitor.wait_sample().current;
        monitor.wait_confirmed_past("the active relay to deliver", now, WAIT, || {
            log_tail(&active)
        });
        if swapped.is_none() {
            let metrics = http_get(&standby, "/metrics");
            assert!(
                !metrics.contains("outbox_events_published_total{"),
                "the standby published records while the first relay held the slot:\n{metrics}"
            );
        }
        let since = standby.stderr();
        assert!(
            !since[standing_since..].contains("relaying outbox to kafka"),
            "the standby streamed while the other relay held the slot:\n{}",
            warnings(&since)
        );
        if round == 0 && swaps.is_empty() {
            // Before any kill, every delivered event arrived exactly once: nobody
            // but the active relay delivered (unless an interrupted session handed
            // the slot over, which resends its window).
            let prefix = writer.ledger_snapshot();
            assert!(
                read_all(&mut reader, &prefix, WAIT * 2),
                "events before the kill"
            );
            let v = verify(&prefix, &reader.records);
            assert_eq!(
                (v.lost, v.duplicated_total),
                (0, 0),
                "two relays delivered: {v:?}"
            );
        }
        active.signal("KILL");
        let killed = Instant::now();
        active.wait_exit(WAIT);
        acks.extend(acks_in(&active.stderr()));
        let before = monitor.wait_sample().confirmed;
        standby.wait_stderr("relaying outbox to kafka", WAIT);
        streaming.push(killed.elapsed());
        monitor.wait_confirmed_past("the standby to confirm progress", before, WAIT, || {
            log_tail(&standby)
        });
        takeovers.push(killed.elapsed());
        active = standby;
    }
    streaming.sort();
    let note = format!(
        "takeovers={} (recovery = kill to slot progress by the standby); \
         kill to standby streaming p50={:?} max={:?}; handovers without a kill: {}",
        scale.takeovers,
        percentile(&streaming, 0.5).unwrap(),
        streaming.last().unwrap(),
        if swaps.is_empty() {
            "none".to_owned()
        } else {
            swaps.join("; ")
        }
    );
    conclude(
        "standby takeover",
        writer,
        &mut reader,
        &active,
        &acks,
        &mut monitor,
        &mut takeovers,
        &note,
    );
}
