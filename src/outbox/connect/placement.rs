//! `--placement column:header|envelope[:alias]`: Debezium's
//! `table.fields.additional.placement`, one item.
//!
//! Owns the syntax and its errors. Invariant: a parsed placement has a non-empty
//! column and alias; the alias defaults to the column name, as in Debezium.

use std::fmt;
use std::sync::Arc;

/// Where a column goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A record header named after the alias.
    Header,
    /// A field of the value: the value becomes `{"payload": …, <alias>: …}`.
    Envelope,
}

/// One placed column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The outbox column.
    pub column: String,
    /// Header or envelope field.
    pub place: Place,
    /// Header or field name (shared by every record, so an `Arc`).
    pub alias: Arc<str>,
}

/// A placement that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --placement {item:?}: {why}; fix: write column:header[:alias] or column:envelope[:alias], e.g. event_type:header:eventType")]
pub struct PlacementError {
    /// The item as given.
    pub item: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Placement {
    /// Parse `column:header|envelope[:alias]` (spaces around parts are ignored).
    pub fn parse(item: &str) -> Result<Self, PlacementError> {
        let err = |why| PlacementError {
            item: item.to_owned(),
            why,
        };
        let mut parts = item.split(':').map(str::trim);
        let column = parts.next().unwrap_or_default();
        let place = parts
            .next()
            .ok_or_else(|| err("no placement after the column"))?;
        let alias = parts.next().unwrap_or(column);
        if parts.next().is_some() {
            return Err(err("more than three parts"));
        }
        if column.is_empty() || alias.is_empty() {
            return Err(err("empty column or alias"));
        }
        let place = match place {
            "header" => Place::Header,
            "envelope" => Place::Envelope,
            "partition" => return Err(err(
                "placement partition is not supported: pgoutbox partitions by the key (murmur2)",
            )),
            _ => return Err(err("the placement must be header or envelope")),
        };
        if place == Place::Envelope && alias == "payload" {
            return Err(err("the envelope field payload holds the payload itself"));
        }
        Ok(Self {
            column: column.to_owned(),
            place,
            alias: Arc::from(alias),
        })
    }

    /// Parse a list; the single item `none` is the empty list.
    pub fn parse_list(items: &[String]) -> Result<Vec<Self>, PlacementError> {
        if let [only] = items {
            if only.trim() == "none" {
                return Ok(Vec::new());
            }
        }
        items
            .iter()
            .filter(|i| !i.trim().is_empty())
            .map(|i| Self::parse(i))
            .collect()
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = match self.place {
            Place::Header => "header",
            Place::Envelope => "envelope",
        };
        write!(f, "{}:{place}:{}", self.column, self.alias)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_debezium_syntax() {
        let p = Placement::parse("type:header:eventType").unwrap();
        assert_eq!(
            (p.column.as_str(), p.place, &*p.alias),
            ("type", Place::Header, "eventType")
        );
        let p = Placement::parse(" tenant : envelope ").unwrap();
        assert_eq!((&*p.alias, p.place), ("tenant", Place::Envelope));
        assert_eq!(p.to_string(), "tenant:envelope:tenant");
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        for bad in [
            "type",
            "type:body",
            "type:partition",
            ":header",
            "a:header:b:c",
            "x:envelope:payload",
        ] {
            let err = Placement::parse(bad).unwrap_err();
            assert!(err.to_string().contains("fix:"), "{err}");
        }
    }

    #[test]
    fn none_is_the_empty_list() {
        assert!(Placement::parse_list(&["none".into()]).unwrap().is_empty());
        let list = Placement::parse_list(&["a:header".into(), "b:envelope:c".into()]).unwrap();
        assert_eq!(list.len(), 2);
    }
}
