//! A server's timeline history (`TIMELINE_HISTORY`, the `<tli>.history` file):
//! which earlier timelines lead to the current one and where each branched off.
//!
//! A position written on timeline *t* belongs to the current timeline's WAL only if
//! *t* is the current one, or *t* is in the history and the position is at or
//! before *t*'s switch point; WAL that *t* wrote past its switch point was never
//! part of this server's history (another branch, or WAL a promoted standby had
//! not received). See
//! <https://www.postgresql.org/docs/current/protocol-replication.html> and
//! `src/backend/access/transam/timeline.c` for the file format.
//!
//! Invariants: parsing is pure and never panics; comment and blank lines are
//! skipped; a line that does not parse makes the whole history an error (a
//! half-read history would let a foreign position pass).

use crate::pg::client::connection::PgError;
use crate::pg::lsn::Lsn;
use crate::pg::source::replication::ReplicationClient;

/// One earlier timeline: it ended at `switchpoint`, where the next one began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineSwitch {
    /// The earlier timeline.
    pub timeline: u32,
    /// The first LSN that is not on it (the next timeline starts here).
    pub switchpoint: Lsn,
}

/// `TIMELINE_HISTORY timeline` on a walsender connection (before it streams): the
/// earlier timelines that lead to `timeline` and where each ended; empty for
/// timeline 1, which has no history file.
pub async fn read(
    client: &mut ReplicationClient,
    timeline: u32,
) -> Result<Vec<TimelineSwitch>, PgError> {
    if timeline <= 1 {
        return Ok(Vec::new());
    }
    let unexpected = |what: String| PgError::Unexpected {
        context: "TIMELINE_HISTORY".to_owned(),
        what,
    };
    let rows = client
        .simple_query(&format!("TIMELINE_HISTORY {timeline}"))
        .await?;
    let content = rows
        .first()
        .and_then(|row| row.get("content"))
        .ok_or_else(|| unexpected("no content".to_owned()))?;
    parse(content).map_err(unexpected)
}

/// Parse a history file's text (`parentTLI<TAB>switchpoint<TAB>reason` lines).
pub fn parse(text: &str) -> Result<Vec<TimelineSwitch>, String> {
    let mut switches = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let timeline = fields.next().and_then(|t| t.parse().ok());
        let switchpoint = fields.next().and_then(|l| l.parse().ok());
        match (timeline, switchpoint) {
            (Some(timeline), Some(switchpoint)) => switches.push(TimelineSwitch {
                timeline,
                switchpoint,
            }),
            _ => return Err(format!("unreadable timeline history line {line:?}")),
        }
    }
    Ok(switches)
}

/// Where `timeline` ended in `history`: `None` when it is not an ancestor.
pub fn switchpoint_of(history: &[TimelineSwitch], timeline: u32) -> Option<Lsn> {
    history
        .iter()
        .find(|s| s.timeline == timeline)
        .map(|s| s.switchpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_file_parses_with_its_comments_and_reasons() {
        let text = "1\t0/3000158\tno recovery target specified\n\n\
                    # a comment\n2\t0/5000000\tat restore point \"x\"\n";
        let history = parse(text).unwrap();
        assert_eq!(
            history,
            [
                TimelineSwitch {
                    timeline: 1,
                    switchpoint: "0/3000158".parse().unwrap()
                },
                TimelineSwitch {
                    timeline: 2,
                    switchpoint: "0/5000000".parse().unwrap()
                },
            ]
        );
        assert_eq!(
            switchpoint_of(&history, 2),
            Some("0/5000000".parse().unwrap())
        );
        assert_eq!(switchpoint_of(&history, 7), None);
    }

    #[test]
    fn a_line_that_does_not_parse_fails_the_whole_history() {
        assert!(parse("1\tnot-an-lsn\treason\n").is_err());
        assert!(parse("x\t0/1\n").is_err());
        assert_eq!(parse(""), Ok(vec![]));
    }
}
