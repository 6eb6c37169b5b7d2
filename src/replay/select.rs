//! Which rows a replay sends: [`Selection`] (`--from`, `--to`, `--id`, `--all`),
//! validated before anything connects.
//!
//! Invariants: a selection always says what it selects — no selector at all is an
//! error, so a replay never sends a whole table by accident (`--all` says so
//! explicitly); `--since-lsn` is refused with the reason (a row carries no WAL
//! position, so nothing can honour it); a time is either an age (`2h`, resolved
//! against the server's clock) or text PostgreSQL reads as a `timestamptz` (RFC 3339;
//! without an offset, UTC), resolved once by the server so the bounds a replay
//! prints are exactly the ones it used.

use std::time::Duration;

/// A selection that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectionError {
    /// Nothing selected.
    #[error("replay needs a selector, so a whole table is never re-sent by accident; fix: pass --from/--to TIME (e.g. --from 2h), --id ID[,ID…], or --all for every row")]
    NoSelector,
    /// `--since-lsn`.
    #[error("cannot replay --since-lsn {0}: an outbox row carries no WAL position (PostgreSQL keeps no LSN of the transaction that inserted a row, and the WAL of committed changes is recycled once the slot confirmed it), so no row can be selected by LSN; fix: select by time on the timestamp column (--from/--to) or by event id (--id)")]
    SinceLsn(String),
    /// `--from` / `--to` that is empty.
    #[error("invalid --{flag} {value:?}: expected RFC 3339 (2026-12-01T10:00:00Z) or an age (90m, 2h, 3days)")]
    Time {
        /// `from` or `to`.
        flag: &'static str,
        /// As given.
        value: String,
    },
    /// No outbox table (e.g. an outbox of logical decoding messages only).
    #[error("replay re-sends rows still in an outbox table, and no table is given; events sent as logical decoding messages (no table) cannot be replayed: they live only in the WAL, which is recycled once the slot confirmed them; fix: pass the outbox table with --table schema.table")]
    NoTable,
    /// An empty `--id`.
    #[error(
        "invalid --id: an empty event id; fix: pass ids separated by commas, without empty items"
    )]
    EmptyId,
}

/// One end of a time range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeBound {
    /// This long before the server's `now()`.
    Ago(Duration),
    /// A time as text, read by PostgreSQL as `timestamptz` (with `TimeZone` UTC).
    At(String),
}

impl TimeBound {
    /// `2h`, `90m`, `3days`, `2h ago` → [`TimeBound::Ago`]; anything else is left to
    /// PostgreSQL, which names what it cannot read.
    pub fn parse(flag: &'static str, text: &str) -> Result<Self, SelectionError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SelectionError::Time {
                flag,
                value: text.to_owned(),
            });
        }
        let age = text.strip_suffix(" ago").unwrap_or(text);
        Ok(match humantime::parse_duration(age) {
            Ok(d) => TimeBound::Ago(d),
            Err(_) => TimeBound::At(text.to_owned()),
        })
    }
}

/// The rows to replay, as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Timestamp column at or after this.
    pub from: Option<TimeBound>,
    /// Timestamp column before this.
    pub to: Option<TimeBound>,
    /// Only these event ids (text as given; compared after a cast to the id column's type).
    pub ids: Vec<String>,
    /// Every row (narrowed by the others when given).
    pub all: bool,
}

/// The raw selectors of the command line.
#[derive(Debug, Clone, Default)]
pub struct RawSelection<'a> {
    /// `--from`.
    pub from: Option<&'a str>,
    /// `--to`.
    pub to: Option<&'a str>,
    /// `--id`, split.
    pub ids: &'a [String],
    /// `--all`.
    pub all: bool,
    /// `--since-lsn`.
    pub since_lsn: Option<&'a str>,
}

impl Selection {
    /// Validate the selectors.
    pub fn parse(raw: &RawSelection<'_>) -> Result<Self, SelectionError> {
        if let Some(lsn) = raw.since_lsn {
            return Err(SelectionError::SinceLsn(lsn.to_owned()));
        }
        let ids: Vec<String> = raw.ids.iter().map(|i| i.trim().to_owned()).collect();
        if ids.iter().any(String::is_empty) {
            return Err(SelectionError::EmptyId);
        }
        let selection = Selection {
            from: raw.from.map(|t| TimeBound::parse("from", t)).transpose()?,
            to: raw.to.map(|t| TimeBound::parse("to", t)).transpose()?,
            ids,
            all: raw.all,
        };
        if !selection.all && !selection.has_time() && selection.ids.is_empty() {
            return Err(SelectionError::NoSelector);
        }
        Ok(selection)
    }

    /// Whether a time range narrows it (the timestamp column must then exist).
    pub fn has_time(&self) -> bool {
        self.from.is_some() || self.to.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: RawSelection<'_>) -> Result<Selection, SelectionError> {
        Selection::parse(&raw)
    }

    #[test]
    fn nothing_selected_is_refused_with_the_fix() {
        let err = parse(RawSelection::default()).unwrap_err();
        assert_eq!(err, SelectionError::NoSelector);
        assert!(err.to_string().contains("--all"), "{err}");
    }

    #[test]
    fn since_lsn_is_refused_with_the_reason() {
        let raw = RawSelection {
            since_lsn: Some("0/16B3748"),
            all: true,
            ..Default::default()
        };
        let err = parse(raw).unwrap_err().to_string();
        assert!(
            err.contains("0/16B3748") && err.contains("no WAL position"),
            "{err}"
        );
        assert!(err.contains("--from/--to") && err.contains("--id"), "{err}");
    }

    #[test]
    fn ages_and_times() {
        assert_eq!(
            TimeBound::parse("from", "2h").unwrap(),
            TimeBound::Ago(Duration::from_secs(7200))
        );
        assert_eq!(
            TimeBound::parse("from", "90m ago").unwrap(),
            TimeBound::Ago(Duration::from_secs(5400))
        );
        assert_eq!(
            TimeBound::parse("to", " 2026-12-01T10:00:00Z ").unwrap(),
            TimeBound::At("2026-12-01T10:00:00Z".into())
        );
        assert!(TimeBound::parse("to", " ").is_err());
    }

    #[test]
    fn ids_alone_select_and_empty_ids_are_refused() {
        let ids = vec!["a".to_owned(), " b ".to_owned()];
        let s = parse(RawSelection {
            ids: &ids,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.ids, vec!["a", "b"]);
        assert!(!s.has_time());
        let ids = vec!["a".to_owned(), String::new()];
        let raw = RawSelection {
            ids: &ids,
            ..Default::default()
        };
        assert_eq!(parse(raw).unwrap_err(), SelectionError::EmptyId);
    }

    #[test]
    fn a_time_bound_alone_selects() {
        let s = parse(RawSelection {
            to: Some("2026-12-01 10:00:00+01"),
            ..Default::default()
        })
        .unwrap();
        assert!(s.has_time() && !s.all && s.from.is_none());
    }
}
