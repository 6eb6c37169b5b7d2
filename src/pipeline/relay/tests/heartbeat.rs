//! Heartbeats through the relay core: never a record, timed when they are this
//! relay's, and their LSN confirmable only when nothing is open or in flight.

use super::*;
use crate::heartbeat::{Beat, PREFIX};
use crate::metrics::heartbeat::{mono_us, Identity};
use crate::pg::source::pgoutput::LogicalMessage;

fn identify(h: &Harness<'_>) {
    let state = &h.relay.metrics.heartbeat;
    state.identify(Identity {
        slot: "mine".into(),
        relay: "7-a".into(),
    });
    state.enable(Duration::from_secs(60));
}

fn heartbeat(slot: &str, lsn: u64, flags: u8) -> PgOutputMessage {
    PgOutputMessage::Message(LogicalMessage {
        xid: None,
        flags,
        lsn: Lsn(lsn),
        prefix: PREFIX.to_owned(),
        content: Beat::new(slot, "7-a", 1, mono_us()).to_content().into(),
    })
}

fn counter(h: &Harness<'_>, name: &str) -> String {
    let text = h.relay.metrics.render();
    let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
    line.unwrap_or_default().to_owned()
}

#[test]
fn an_own_heartbeat_on_a_quiet_stream_is_timed_and_confirmable_never_sent() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    identify(&h);
    h.wal(heartbeat("mine", 0x2000, 0)).unwrap();
    assert!(h.sink.sent.is_empty(), "a heartbeat never reaches kafka");
    assert_eq!(h.relay.stats().produced, 0);
    assert_eq!(h.relay.to_report(), Some(Lsn(0x2000)));
    assert!(h.relay.metrics.heartbeat.round_trip().is_some());
    assert_eq!(
        counter(&h, "pgoutbox_heartbeats_seen_total"),
        "pgoutbox_heartbeats_seen_total 1"
    );
}

#[test]
fn a_heartbeat_never_confirms_past_an_unacked_transaction() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    identify(&h);
    h.txn(&["a1"], 0x1800);
    h.wal(heartbeat("mine", 0x2000, 0)).unwrap();
    assert_eq!(h.relay.to_report(), None, "a1 is in flight");
    h.ack(0);
    assert_eq!(
        h.relay.to_report(),
        Some(Lsn(0x1800)),
        "up to a1's commit only"
    );
    h.wal(heartbeat("mine", 0x2100, 0)).unwrap();
    assert_eq!(h.relay.to_report(), Some(Lsn(0x2100)));
}

#[test]
fn a_transactional_heartbeat_inside_a_transaction_confirms_nothing() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    identify(&h);
    h.begin();
    h.wal(heartbeat("mine", 0x2000, LogicalMessage::TRANSACTIONAL))
        .unwrap();
    assert_eq!(h.relay.to_report(), None);
    h.commit(0x2100);
    assert_eq!(h.relay.to_report(), Some(Lsn(0x2100)));
    assert!(h.sink.sent.is_empty());
}

#[test]
fn another_slots_heartbeat_is_ignored_but_its_position_still_confirms() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    identify(&h);
    h.wal(heartbeat("theirs", 0x2000, 0)).unwrap();
    assert_eq!(h.relay.metrics.heartbeat.round_trip(), None, "not ours");
    assert_eq!(
        counter(&h, "pgoutbox_heartbeats_seen_total"),
        "pgoutbox_heartbeats_seen_total 0"
    );
    assert_eq!(
        counter(&h, "pgoutbox_heartbeats_foreign_total"),
        "pgoutbox_heartbeats_foreign_total 1"
    );
    assert_eq!(
        h.relay.to_report(),
        Some(Lsn(0x2000)),
        "WAL order holds whoever wrote it"
    );
    assert!(h.sink.sent.is_empty());
}
