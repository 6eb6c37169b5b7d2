//! Where a session starts streaming, and why: the pure decision between the state
//! file's LSN and the slot's `confirmed_flush_lsn`.
//!
//! On PostgreSQL ≤ 16 a slot's `confirmed_flush_lsn` reaches disk only when the slot
//! is otherwise dirtied, so after a server restart the slot falls back and would
//! replay history the relay already delivered. The state file holds the LSN the relay
//! confirmed (persisted before the server heard of it), so when the file describes
//! *this* history the session starts there instead:
//!
//! ```text
//!  recorded (state file)      server (IDENTIFY_SYSTEM)        verdict
//!  none / --state-dir off     —                               Slot (NoRecord)
//!  any, --accept-slot-reset   —                               Slot (AcceptReset)
//!  system A                   system B                        Slot (OtherSystem)¹
//!  system A, timeline ?       system A, timeline t            Slot (TimelineUnknown)²
//!  system A, timeline t       system A, timeline u > t        Slot (Promoted)³
//!  system A, timeline t       system A, timeline u < t        Slot (TimelineBehind)¹
//!  system A, timeline t, P    system A, timeline t, WAL end W:
//!                               P > W                         Slot (PastWalEnd)²
//!                               P ≤ slot's confirmed C        Slot (SlotCaughtUp)
//!                               C < P ≤ W                     StateFile (start at P)
//! ```
//! ¹ refused by [`super::SlotGuard`] unless `--accept-slot-reset`.
//! ² the recorded LSN is not trusted: the file is rewritten to the slot's position.
//! ³ the slot must be present (a synchronized failover slot); followed and counted.
//!
//! Why starting at `P` is safe: PostgreSQL decodes from the slot's `restart_lsn` as
//! always but skips every transaction whose commit record starts before the requested
//! start (`SnapBuildXactNeedsSkip`), and `P` is a commit's end LSN (or an idle
//! keepalive's WAL end) the relay confirmed only after Kafka acked everything before
//! it. A transaction committed at or after `P` is sent whole, even if it began
//! earlier. A start below the slot's position is raised to it by the server, so the
//! stream starts at `max(P, C)`.
//!
//! Limit: a server restored from a file-system snapshot (no archive recovery, so the
//! timeline stays) whose new WAL has already passed `P` when the relay reconnects
//! cannot be told apart from the original history; the `P > W` rule catches it only
//! before that. Point-in-time recovery and promotion always start a new timeline.

use std::fmt;

use crate::pg::lsn::Lsn;
use crate::pg::source::replication::SystemIdentity;
use crate::state::SlotState;

/// Why a session starts at the slot's own position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotReason {
    /// No state file (first start) or `--state-dir off`.
    NoRecord,
    /// `--accept-slot-reset`: the operator takes the slot's position.
    AcceptReset,
    /// The state file belongs to another cluster (`--accept-slot-reset` only).
    OtherSystem,
    /// The state file predates recorded timelines.
    TimelineUnknown,
    /// The server was promoted: the history after the switch point differs.
    Promoted { from: u32, to: u32 },
    /// The server is on an older timeline than the relay already relayed on.
    TimelineBehind { recorded: u32, server: u32 },
    /// The recorded LSN lies past the server's WAL end.
    PastWalEnd { persisted: Lsn, wal_end: Lsn },
    /// The slot is at or past the recorded LSN: nothing to skip.
    SlotCaughtUp,
}

/// Where a session starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// START_REPLICATION at the state file's LSN, ahead of the slot's.
    StateFile { lsn: Lsn, slot: Lsn },
    /// START_REPLICATION at `0/0`: the slot's `confirmed_flush_lsn`.
    Slot(SlotReason),
}

impl Resume {
    /// The LSN to pass to START_REPLICATION (`0/0`: the slot's position).
    pub fn start_lsn(&self) -> Lsn {
        match self {
            Resume::StateFile { lsn, .. } => *lsn,
            Resume::Slot(_) => Lsn::INVALID,
        }
    }

    /// Whether the state file's LSN describes another history than the server's
    /// and must be replaced by the slot's position (with the current timeline).
    pub fn distrusts_record(&self) -> bool {
        matches!(
            self,
            Resume::Slot(
                SlotReason::TimelineUnknown
                    | SlotReason::Promoted { .. }
                    | SlotReason::TimelineBehind { .. }
                    | SlotReason::PastWalEnd { .. }
            )
        )
    }

    /// `state file` or `slot`, for the log line.
    pub fn source(&self) -> &'static str {
        match self {
            Resume::StateFile { .. } => "state file",
            Resume::Slot(_) => "slot",
        }
    }
}

impl fmt::Display for Resume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resume::StateFile { lsn, slot } => write!(
                f,
                "the slot's confirmed_flush_lsn {slot} is behind {lsn}, the position this relay confirmed on this system and timeline (PostgreSQL ≤ 16 keeps a slot's position on disk only when the slot is otherwise dirtied, so a restart moves it back); transactions committed before {lsn} were delivered and are not sent again"
            ),
            Resume::Slot(reason) => reason.fmt(f),
        }
    }
}

impl fmt::Display for SlotReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotReason::NoRecord => f.write_str("no state file to compare with"),
            SlotReason::AcceptReset => f.write_str("--accept-slot-reset: taking the slot's position"),
            SlotReason::OtherSystem => f.write_str("the state file belongs to another cluster"),
            SlotReason::TimelineUnknown => f.write_str(
                "the state file does not record a timeline (written by an older pgoutbox): its position is not trusted once; it records the timeline from now on",
            ),
            SlotReason::Promoted { from, to } => write!(
                f,
                "the server moved from timeline {from} to {to} (promoted after a failover, or a point-in-time restore): the WAL after the switch differs from what was relayed, so the slot's own position is used"
            ),
            SlotReason::TimelineBehind { recorded, server } => write!(
                f,
                "the server is on timeline {server}, older than timeline {recorded} the relay already relayed on"
            ),
            SlotReason::PastWalEnd { persisted, wal_end } => write!(
                f,
                "the state file's position {persisted} is past the server's WAL end {wal_end} (the server was restored from a backup or snapshot): its position is not trusted"
            ),
            SlotReason::SlotCaughtUp => {
                f.write_str("the slot's confirmed_flush_lsn is at or past the state file's position")
            }
        }
    }
}

/// The decision drawn in the module doc. `recorded` is the state file (`None`:
/// none, or state off); `slot_lsn` the slot's `confirmed_flush_lsn` read before
/// START_REPLICATION.
pub fn decide(
    recorded: Option<&SlotState>,
    identity: &SystemIdentity,
    slot_lsn: Lsn,
    accept_reset: bool,
) -> Resume {
    let Some(recorded) = recorded else {
        return Resume::Slot(SlotReason::NoRecord);
    };
    if accept_reset {
        return Resume::Slot(SlotReason::AcceptReset);
    }
    if recorded.system_id != identity.system_id {
        return Resume::Slot(SlotReason::OtherSystem);
    }
    let server = identity.timeline;
    let reason = match recorded.timeline {
        None => SlotReason::TimelineUnknown,
        Some(t) if t < server => SlotReason::Promoted {
            from: t,
            to: server,
        },
        Some(t) if t > server => SlotReason::TimelineBehind {
            recorded: t,
            server,
        },
        Some(_) => {
            let persisted = recorded.confirmed_lsn;
            if persisted > identity.xlogpos {
                SlotReason::PastWalEnd {
                    persisted,
                    wal_end: identity.xlogpos,
                }
            } else if persisted <= slot_lsn {
                SlotReason::SlotCaughtUp
            } else {
                return Resume::StateFile {
                    lsn: persisted,
                    slot: slot_lsn,
                };
            }
        }
    };
    Resume::Slot(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(system_id: &str, timeline: u32, wal_end: u64) -> SystemIdentity {
        SystemIdentity {
            system_id: system_id.to_owned(),
            timeline,
            xlogpos: Lsn(wal_end),
            dbname: Some("shop".into()),
        }
    }

    fn file(system_id: &str, timeline: Option<u32>, lsn: u64) -> SlotState {
        let mut state = SlotState::new(system_id, 1, "shop", "s1", Lsn(lsn));
        state.timeline = timeline;
        state
    }

    /// Every row of the table in the module doc, against a server on timeline 2 of
    /// system 7 whose WAL ends at 1000.
    #[test]
    fn decision_table() {
        use SlotReason::*;
        let same = server("7", 2, 1_000);
        let row =
            |what: &str, recorded: Option<SlotState>, slot: u64, accept: bool, expected: Resume| {
                let got = decide(recorded.as_ref(), &same, Lsn(slot), accept);
                assert_eq!(got, expected, "{what}");
                let start = match expected {
                    Resume::StateFile { lsn, .. } => lsn,
                    Resume::Slot(_) => Lsn::INVALID,
                };
                assert_eq!(got.start_lsn(), start, "{what}");
            };
        let fell_back = Resume::StateFile {
            lsn: Lsn(500),
            slot: Lsn(100),
        };
        let at_wal_end = Resume::StateFile {
            lsn: Lsn(1_000),
            slot: Lsn(100),
        };
        let t2 = |lsn| Some(file("7", Some(2), lsn));
        row("first start", None, 100, false, Resume::Slot(NoRecord));
        row("restart, slot fell back", t2(500), 100, false, fell_back);
        row(
            "state file at the server's WAL end",
            t2(1_000),
            100,
            false,
            at_wal_end,
        );
        row(
            "slot equal",
            t2(500),
            500,
            false,
            Resume::Slot(SlotCaughtUp),
        );
        row(
            "slot ahead",
            t2(500),
            600,
            false,
            Resume::Slot(SlotCaughtUp),
        );
        row(
            "accept reset",
            t2(500),
            100,
            true,
            Resume::Slot(AcceptReset),
        );
        let other = Some(file("8", Some(2), 500));
        row(
            "another cluster",
            other,
            100,
            false,
            Resume::Slot(OtherSystem),
        );
        let old = Some(file("7", None, 500));
        row("old file", old, 100, false, Resume::Slot(TimelineUnknown));
        let promoted = Resume::Slot(Promoted { from: 1, to: 2 });
        row(
            "promoted",
            Some(file("7", Some(1), 500)),
            100,
            false,
            promoted,
        );
        let behind = Resume::Slot(TimelineBehind {
            recorded: 3,
            server: 2,
        });
        row(
            "former primary",
            Some(file("7", Some(3), 500)),
            100,
            false,
            behind,
        );
        let past = Resume::Slot(PastWalEnd {
            persisted: Lsn(5_000),
            wal_end: Lsn(1_000),
        });
        row(
            "restored snapshot, WAL behind the file",
            t2(5_000),
            100,
            false,
            past,
        );
    }

    #[test]
    fn only_other_histories_distrust_the_record() {
        use SlotReason::*;
        let distrusted = [
            TimelineUnknown,
            Promoted { from: 1, to: 2 },
            TimelineBehind {
                recorded: 2,
                server: 1,
            },
            PastWalEnd {
                persisted: Lsn(2),
                wal_end: Lsn(1),
            },
        ];
        for reason in distrusted {
            assert!(Resume::Slot(reason).distrusts_record(), "{reason:?}");
        }
        for reason in [NoRecord, AcceptReset, OtherSystem, SlotCaughtUp] {
            assert!(!Resume::Slot(reason).distrusts_record(), "{reason:?}");
        }
        let resume = Resume::StateFile {
            lsn: Lsn(2),
            slot: Lsn(1),
        };
        assert!(!resume.distrusts_record());
    }

    #[test]
    fn reasons_name_the_positions_and_timelines() {
        let text = Resume::StateFile {
            lsn: Lsn(0x200),
            slot: Lsn(0x100),
        }
        .to_string();
        assert!(text.contains("0/100") && text.contains("0/200"), "{text}");
        let text = SlotReason::Promoted { from: 1, to: 2 }.to_string();
        assert!(text.contains("timeline 1 to 2"), "{text}");
        let text = SlotReason::PastWalEnd {
            persisted: Lsn(0x20),
            wal_end: Lsn(0x10),
        }
        .to_string();
        assert!(text.contains("0/20") && text.contains("0/10"), "{text}");
    }
}
