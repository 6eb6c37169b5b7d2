//! W3C Trace Context propagation (`--trace-context`): where a row keeps the
//! producer's trace context, and the `traceparent` / `tracestate` headers it becomes.
//!
//! The field is a column, or a path of keys into a JSON column (`payload.meta`,
//! `headers`). The value found there is one of:
//! - a `traceparent` string (`00-<32 hex>-<16 hex>-<2 hex>`), as text or a JSON string;
//! - a JSON object with a `traceparent` key and optionally a `tracestate` key (a
//!   headers column, or an object inside the payload);
//! - Java properties text with those keys (`traceparent=00-…`), the form Debezium's
//!   `tracing.span.context.field` column holds.
//!
//! Invariants: a row never stops the relay for its trace context — a malformed one
//! is reported ([`Extracted::problem`]) and the record goes out without the header
//! (an invalid `tracestate` alone drops only `tracestate`, as the W3C recommendation
//! says); the values are passed on unchanged (whitespace around them trimmed); no
//! JSON tree is built: a path is followed through the JSON text, skipping the rest.
//! See <https://www.w3.org/TR/trace-context/>.
//!
//! Files: `mod.rs` the field, the extraction and its outcome; `w3c.rs` the format
//! checks; `seek.rs` the JSON walk.

use std::fmt;

use bytes::Bytes;
use serde::de::DeserializeSeed;

use self::seek::{Seek, Value};

/// Header name of the trace parent.
pub const TRACEPARENT: &str = "traceparent";
/// Header name of the vendor trace state.
pub const TRACESTATE: &str = "tracestate";

/// Where a row keeps its trace context: a column and a path of JSON keys in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceField {
    /// The column.
    pub column: String,
    /// Keys into the column's JSON, outermost first (empty: the column itself).
    pub keys: Vec<String>,
}

impl TraceField {
    /// `column` or `column.key.key…`; `None` for an empty text (propagation off).
    pub fn parse(spec: &str) -> Result<Option<Self>, TraceError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Ok(None);
        }
        let mut parts = spec.split('.').map(str::trim);
        let column = parts.next().unwrap_or_default().to_owned();
        let keys: Vec<String> = parts.map(str::to_owned).collect();
        if column.is_empty() || keys.iter().any(String::is_empty) {
            return Err(TraceError::Field(spec.to_owned()));
        }
        Ok(Some(Self { column, keys }))
    }
}

impl fmt::Display for TraceField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.column)?;
        self.keys.iter().try_for_each(|k| write!(f, ".{k}"))
    }
}

/// Why a row's trace context is not (wholly) propagated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// A `--trace-context` that does not parse.
    #[error("invalid --trace-context {0:?}: expected COLUMN or COLUMN.KEY[.KEY…] (keys into a JSON column), e.g. traceparent, headers or payload.meta.traceparent")]
    Field(String),
    /// A `traceparent` value that is not W3C trace context.
    #[error("traceparent {value:?} is not W3C trace context ({why}); expected 00-<32 lowercase hex>-<16 lowercase hex>-<2 hex>")]
    Traceparent {
        /// The value, cut to 80 characters.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A `tracestate` value that is not W3C trace context.
    #[error("tracestate {value:?} is not W3C trace context ({why}); it is left out, traceparent is sent")]
    Tracestate {
        /// The value, cut to 80 characters.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The field holds JSON of the wrong shape, or text that is not JSON.
    #[error("the trace context field holds {0}; expected a traceparent string, or an object with a traceparent key")]
    Shape(String),
}

/// What one row's trace-context field yields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extracted {
    /// The `traceparent` header value, when valid.
    pub traceparent: Option<Bytes>,
    /// The `tracestate` header value, when valid and a traceparent goes with it.
    pub tracestate: Option<Bytes>,
    /// What was malformed, if anything.
    pub problem: Option<TraceError>,
}

/// How a row's trace context went, for the `pgoutbox_trace_context_total` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// traceparent (and tracestate, if any) sent.
    Propagated,
    /// The row has none (NULL column, missing key, JSON null).
    Absent,
    /// Malformed: no header sent.
    Invalid,
    /// traceparent sent, a malformed tracestate left out.
    TracestateDropped,
}

impl Outcome {
    /// Every outcome, in metric order.
    pub const ALL: [Outcome; 4] = [
        Outcome::Propagated,
        Outcome::Absent,
        Outcome::Invalid,
        Outcome::TracestateDropped,
    ];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Propagated => "propagated",
            Outcome::Absent => "absent",
            Outcome::Invalid => "invalid",
            Outcome::TracestateDropped => "tracestate-dropped",
        }
    }
}

impl Extracted {
    /// The counter this row adds to.
    pub fn outcome(&self) -> Outcome {
        match (&self.traceparent, &self.problem) {
            (Some(_), None) => Outcome::Propagated,
            (Some(_), Some(_)) => Outcome::TracestateDropped,
            (None, None) => Outcome::Absent,
            (None, Some(_)) => Outcome::Invalid,
        }
    }
}

/// The trace context in `raw` (the column's text, `None` for SQL NULL), following
/// `keys` into its JSON.
pub fn extract(raw: Option<&Bytes>, keys: &[String]) -> Extracted {
    let Some(raw) = raw else {
        return Extracted::default();
    };
    let found = if keys.is_empty() {
        top_level(raw)
    } else {
        json(raw, keys)
    };
    match found {
        Ok((None, _)) => Extracted::default(),
        Ok((Some(parent), state)) => validated(parent, state),
        Err(problem) => Extracted {
            problem: Some(problem),
            ..Extracted::default()
        },
    }
}

type Found = (Option<Bytes>, Option<Bytes>);

/// A whole column: JSON (`{…}` or `"…"`), properties text, or the bare value.
fn top_level(raw: &Bytes) -> Result<Found, TraceError> {
    let text = raw.trim_ascii();
    match text.first() {
        None => Ok((None, None)),
        Some(b'{' | b'"') => json(raw, &[]),
        _ if is_properties(text) => Ok(properties(text)),
        _ => Ok((Some(raw.slice_ref(text)), None)),
    }
}

/// Whether some line is `traceparent=` / `traceparent:` (Java properties).
fn is_properties(text: &[u8]) -> bool {
    text.split(|b| *b == b'\n')
        .any(|line| property(line).is_some_and(|(k, _)| k == TRACEPARENT.as_bytes()))
}

fn property(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let line = line.trim_ascii();
    if line.first().map_or(true, |b| matches!(b, b'#' | b'!')) {
        return None;
    }
    let at = line.iter().position(|b| matches!(b, b'=' | b':'))?;
    Some((line[..at].trim_ascii(), line[at + 1..].trim_ascii()))
}

fn properties(text: &[u8]) -> Found {
    let mut found: Found = (None, None);
    for (key, value) in text.split(|b| *b == b'\n').filter_map(property) {
        let value = Some(unescape(value)).filter(|v| !v.is_empty());
        match key {
            b"traceparent" => found.0 = value,
            b"tracestate" => found.1 = value,
            _ => {}
        }
    }
    found
}

/// A properties value without Java's escapes: `Properties.store` writes `=` `:`
/// `#` `!` in values as `\=` `\:` `\#` `\!` (a tracestate `rojo=1` as `rojo\=1`).
fn unescape(value: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.iter();
    while let Some(&b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match bytes.next() {
            Some(b't') => out.push(b'\t'),
            Some(b'n') => out.push(b'\n'),
            Some(&next) => out.push(next),
            None => {}
        }
    }
    Bytes::from(out)
}

/// Follow `keys` through the JSON text `raw`; the value there is a string or a carrier object.
fn json(raw: &[u8], keys: &[String]) -> Result<Found, TraceError> {
    let mut de = serde_json::Deserializer::from_slice(raw);
    let value = Seek { keys }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| TraceError::Shape(format!("JSON it cannot read ({e})")))?;
    let bytes = |s: Option<String>| s.map(Bytes::from).filter(|b| !b.trim_ascii().is_empty());
    match value {
        Value::Nothing => Ok((None, None)),
        Value::Text(s) => Ok((bytes(Some(s)), None)),
        Value::Carrier(parent, state) => Ok((bytes(parent), bytes(state))),
        Value::Other(what) => Err(TraceError::Shape(format!("a JSON {what}"))),
    }
}

/// Validate both values: an invalid traceparent drops both, an invalid tracestate itself.
fn validated(parent: Bytes, state: Option<Bytes>) -> Extracted {
    let parent = parent.slice_ref(parent.trim_ascii());
    if let Err(why) = check_traceparent(&parent) {
        return Extracted {
            problem: Some(TraceError::Traceparent {
                value: shown(&parent),
                why,
            }),
            ..Extracted::default()
        };
    }
    let state = state.map(|s| s.slice_ref(s.trim_ascii()));
    match state.as_deref().map(check_tracestate) {
        Some(Err(why)) => Extracted {
            traceparent: Some(parent),
            tracestate: None,
            problem: Some(TraceError::Tracestate {
                value: shown(state.as_deref().unwrap_or_default()),
                why,
            }),
        },
        _ => Extracted {
            traceparent: Some(parent),
            tracestate: state,
            problem: None,
        },
    }
}

fn shown(value: &[u8]) -> String {
    String::from_utf8_lossy(value).chars().take(80).collect()
}

mod seek;
mod w3c;

pub use w3c::{check_traceparent, check_tracestate};

#[cfg(test)]
mod tests;
