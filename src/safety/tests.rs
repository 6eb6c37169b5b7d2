//! Unit tests of [`super::SlotGuard`]: the decisions around START_REPLICATION
//! against a real state file, without a server.

use super::*;
use crate::pg::client::connection::DbError;

fn identity(system_id: &str) -> SystemIdentity {
    on_timeline(system_id, 1)
}

fn on_timeline(system_id: &str, timeline: u32) -> SystemIdentity {
    SystemIdentity {
        system_id: system_id.to_owned(),
        timeline,
        xlogpos: Lsn(1 << 40),
        dbname: Some("shop".into()),
    }
}

impl SlotGuard {
    /// What `run` does around START_REPLICATION, minus the server: decide from
    /// the file and the slot's position before the start, then check after it.
    fn start(
        &mut self,
        identity: &SystemIdentity,
        slot_lsn: Lsn,
    ) -> Result<Checkpoint, SafetyError> {
        let recorded = self.recorded()?;
        let resume = resume::decide(recorded.as_ref(), identity, slot_lsn, self.accept_reset);
        if let Some(recorded) = &recorded {
            self.check_history(recorded, identity, true, &resume)?;
        }
        self.after_start(identity, slot_lsn, &resume)
    }
}

fn guard(dir: Option<PathBuf>, accept: bool) -> SlotGuard {
    let cfg = SafetyConfig {
        state_dir: dir,
        accept_slot_reset: accept,
        accept_publication_change: false,
        accept_type_change: false,
        publication_repair: false,
    };
    SlotGuard::open(&cfg, "shop", "s1", "pub", "outbox", "created_at").unwrap()
}

/// Assert `text` contains every one of `needles`.
fn mentions(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle}: {text}");
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgoutbox-safety-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn recorded(dir: &std::path::Path) -> Lsn {
    StateFile::open(dir, "shop", "s1")
        .unwrap()
        .load()
        .unwrap()
        .unwrap()
        .confirmed_lsn
}

#[test]
fn first_start_adopts_then_a_slot_ahead_is_refused() {
    let dir = temp_dir("ahead");
    let mut g = guard(Some(dir.clone()), false);
    assert!(g.may_create().unwrap());
    let cp = g.start(&identity("1"), Lsn(100)).unwrap();
    assert_eq!(cp.persisted(), Some(Lsn(100)));
    assert!(!g.may_create().unwrap(), "history exists now");
    // Behind or equal: a crash or a normal restart.
    g.start(&identity("1"), Lsn(90)).unwrap();
    g.start(&identity("1"), Lsn(100)).unwrap();
    let err = g.start(&identity("1"), Lsn(200)).unwrap_err();
    assert!(matches!(err, SafetyError::SlotAdvanced { .. }), "{err}");
    let text = err.to_string();
    mentions(
        &text,
        &[
            "\"s1\"",
            "0/C8",
            "0/64",
            "--accept-slot-reset",
            "shop.s1.state",
        ],
    );
    assert_eq!(recorded(&dir), Lsn(100), "a refusal leaves the file alone");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn accept_applies_once_and_standby_takeover_adopts() {
    let dir = temp_dir("accept");
    guard(Some(dir.clone()), false)
        .start(&identity("1"), Lsn(100))
        .unwrap();
    let mut g = guard(Some(dir.clone()), true);
    g.start(&identity("1"), Lsn(200)).unwrap();
    assert_eq!(recorded(&dir), Lsn(200), "rewritten to the slot");
    assert!(
        g.start(&identity("1"), Lsn(300)).is_err(),
        "the flag applied to one start only"
    );
    g.note_standby();
    g.start(&identity("1"), Lsn(300)).unwrap();
    assert_eq!(recorded(&dir), Lsn(300));
    assert!(
        g.start(&identity("1"), Lsn(400)).is_err(),
        "a takeover is forgiven once, not forever"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn recorded_state(dir: &std::path::Path) -> SlotState {
    StateFile::open(dir, "shop", "s1")
        .unwrap()
        .load()
        .unwrap()
        .unwrap()
}

#[test]
fn a_promoted_server_with_the_slot_is_followed_and_the_file_takes_its_timeline() {
    let dir = temp_dir("promoted");
    let mut g = guard(Some(dir.clone()), false);
    g.start(&on_timeline("1", 1), Lsn(500)).unwrap();
    assert_eq!(recorded_state(&dir).timeline, Some(1));
    // The synchronized slot on the new primary lags the old one: not a finding.
    let cp = g.start(&on_timeline("1", 2), Lsn(300)).unwrap();
    let state = recorded_state(&dir);
    assert_eq!((state.timeline, state.confirmed_lsn), (Some(2), Lsn(300)));
    assert_eq!(
        cp.persisted(),
        Some(Lsn(300)),
        "the old timeline's 0/1F4 is not trusted"
    );
    // Next start on the same timeline resumes from the file again.
    let recorded = g.recorded().unwrap();
    let resume = resume::decide(recorded.as_ref(), &on_timeline("1", 2), Lsn(100), false);
    assert_eq!(
        resume,
        Resume::StateFile {
            lsn: Lsn(300),
            slot: Lsn(100)
        }
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_old_file_without_timeline_trusts_the_slot_once() {
    let dir = temp_dir("untimed");
    let file = StateFile::open(&dir, "shop", "s1").unwrap();
    let mut old = SlotState::new("1", 1, "shop", "s1", Lsn(500));
    old.timeline = None;
    file.write(&old).unwrap();
    let mut g = guard(Some(dir.clone()), false);
    let cp = g.start(&on_timeline("1", 1), Lsn(300)).unwrap();
    assert_eq!(cp.persisted(), Some(Lsn(300)));
    assert_eq!(recorded_state(&dir).timeline, Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_slot_ahead_is_refused_on_a_new_timeline_too() {
    let dir = temp_dir("promoted-ahead");
    let mut g = guard(Some(dir.clone()), false);
    g.start(&on_timeline("1", 1), Lsn(500)).unwrap();
    let err = g.start(&on_timeline("1", 2), Lsn(900)).unwrap_err();
    assert!(matches!(err, SafetyError::SlotAdvanced { .. }), "{err}");
    assert_eq!(
        recorded_state(&dir).timeline,
        Some(1),
        "a refusal leaves the file alone"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn promotion_without_the_slot_and_a_former_primary_are_findings() {
    let dir = temp_dir("findings");
    let mut g = guard(Some(dir.clone()), false);
    g.start(&on_timeline("1", 2), Lsn(500)).unwrap();
    let recorded = g.recorded().unwrap().unwrap();
    let check = |identity: &SystemIdentity, has_slot: bool| {
        let resume = resume::decide(Some(&recorded), identity, Lsn(0), false);
        g.check_history(&recorded, identity, has_slot, &resume)
    };
    let missing = check(&on_timeline("1", 3), false).unwrap_err();
    assert!(
        matches!(missing, SafetyError::SlotMissingAfterPromotion { .. }),
        "{missing}"
    );
    let text = missing.to_string();
    mentions(
        &text,
        &[
            "timeline 2 to 3",
            "0/1F4",
            "--accept-slot-reset",
            "Patroni",
            "--slot-failover",
            "synchronized_standby_slots",
        ],
    );
    let same = check(&on_timeline("1", 2), false).unwrap_err();
    assert!(matches!(same, SafetyError::SlotMissing { .. }), "{same}");
    let behind = check(&on_timeline("1", 1), true).unwrap_err();
    assert!(
        matches!(behind, SafetyError::TimelineBehind { .. }),
        "{behind}"
    );
    let text = behind.to_string();
    mentions(
        &text,
        &[
            "timeline 1",
            "timeline 2",
            "former primary",
            "target_session_attrs=read-write",
        ],
    );
    check(&on_timeline("1", 3), true).unwrap();
    let stranger = check(&on_timeline("9", 3), true).unwrap_err();
    assert!(
        matches!(stranger, SafetyError::SystemChanged { .. }),
        "{stranger}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn state_off_checks_nothing_and_writes_nothing() {
    let mut g = guard(None, false);
    assert!(g.may_create().unwrap());
    let cp = g.start(&identity("1"), Lsn(100)).unwrap();
    assert_eq!(cp.persisted(), None);
    g.start(&identity("2"), Lsn(1)).unwrap();
}

#[test]
fn server_errors_that_are_slot_safety_findings() {
    let g = guard(None, false);
    let db = |code: &str, message: &str| {
        PgError::Db(DbError {
            severity: "ERROR".into(),
            code: code.into(),
            message: message.into(),
            ..DbError::default()
        })
    };
    let lost = g
        .explain(&db(
            "55000",
            "can no longer get changes from replication slot \"s1\"",
        ))
        .unwrap()
        .to_string();
    assert!(lost.contains("was invalidated"), "{lost}");
    assert!(lost.contains("pg_drop_replication_slot('s1')"), "{lost}");
    let gone = g
        .explain(&db("42704", "publication \"pub\" does not exist"))
        .unwrap()
        .to_string();
    assert!(gone.contains("publication \"pub\""), "{gone}");
    assert!(gone.contains("--accept-slot-reset"), "{gone}");
    // PostgreSQL 18 warns and skips instead (replication::stream_notice_is_fatal).
    let skipped = g
        .explain(&db("55000", "skipped loading publication \"pub\""))
        .unwrap()
        .to_string();
    assert!(skipped.contains("publication \"pub\""), "{skipped}");
    assert!(skipped.contains("--accept-slot-reset"), "{skipped}");
    assert!(g.explain(&db("57P01", "terminating connection")).is_none());
    assert!(g
        .explain(&db("42704", "type \"x\" does not exist"))
        .is_none());
    assert!(g.explain(&PgError::StreamEnded).is_none());
}
