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

use std::fmt;

use bytes::Bytes;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

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

fn is_lower_hex(s: &[u8]) -> bool {
    s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The W3C `traceparent` rules: `version-traceid-parentid-flags`, lowercase hex,
/// version `ff` forbidden, all-zero ids forbidden; version 00 is exactly 55
/// characters, a later version may append `-…` fields (passed on unchanged).
pub fn check_traceparent(v: &[u8]) -> Result<(), &'static str> {
    if v.len() < 55 {
        return Err("shorter than 55 characters");
    }
    let (version, trace_id, parent_id, flags) = (&v[0..2], &v[3..35], &v[36..52], &v[53..55]);
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return Err("fields are not separated by '-' at the W3C positions");
    }
    if ![version, trace_id, parent_id, flags]
        .into_iter()
        .all(is_lower_hex)
    {
        return Err("a field is not lowercase hex");
    }
    if version == b"ff" {
        return Err("version ff is forbidden");
    }
    if version == b"00" && v.len() != 55 {
        return Err("version 00 is exactly 55 characters");
    }
    if v.len() > 55 && v[55] != b'-' {
        return Err("a later version's extra fields must follow a '-'");
    }
    if trace_id.iter().all(|b| *b == b'0') {
        return Err("the trace id is all zeros");
    }
    if parent_id.iter().all(|b| *b == b'0') {
        return Err("the parent id is all zeros");
    }
    Ok(())
}

/// The W3C `tracestate` rules: at most 32 comma-separated `key=value` members
/// (empty members allowed); keys `[a-z][a-z0-9_*/-]{0,255}` or `tenant@system`;
/// values 1-256 printable ASCII characters except `,` and `=`, not ending in a space.
pub fn check_tracestate(v: &[u8]) -> Result<(), &'static str> {
    let mut members = 0;
    for member in v.split(|b| *b == b',') {
        let member = member.trim_ascii();
        if member.is_empty() {
            continue;
        }
        members += 1;
        let Some(eq) = member.iter().position(|b| *b == b'=') else {
            return Err("a member is not key=value");
        };
        let (key, value) = (&member[..eq], &member[eq + 1..]);
        if !is_tracestate_key(key) {
            return Err("a key is not [a-z][a-z0-9_*/-]{0,255} or tenant@system");
        }
        let printable = value
            .iter()
            .all(|b| (0x20..=0x7e).contains(b) && *b != b',' && *b != b'=');
        if value.is_empty() || value.len() > 256 || !printable || value.ends_with(b" ") {
            return Err("a value is not 1-256 printable characters without ',' or '='");
        }
    }
    if members > 32 {
        return Err("more than 32 members");
    }
    Ok(())
}

fn is_tracestate_key(key: &[u8]) -> bool {
    let part_ok = |s: &[u8], first_digit_ok: bool, max: usize| {
        let body = |b: &u8| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/');
        match s.first() {
            Some(b'a'..=b'z') => {}
            Some(b'0'..=b'9') if first_digit_ok => {}
            _ => return false,
        }
        s.len() <= max && s.iter().all(body)
    };
    match key.iter().position(|b| *b == b'@') {
        None => part_ok(key, false, 256),
        Some(at) => part_ok(&key[..at], true, 241) && part_ok(&key[at + 1..], false, 14),
    }
}

/// What a JSON path leads to.
enum Value {
    Nothing,
    Text(String),
    Carrier(Option<String>, Option<String>),
    Other(&'static str),
}

/// Follows `keys` through JSON without building it; at the end of the path reads a
/// string or a carrier object.
struct Seek<'k> {
    keys: &'k [String],
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Seek<'_> {
    fn scalar(&self, what: &'static str) -> Value {
        if self.keys.is_empty() {
            Value::Other(what)
        } else {
            Value::Nothing
        }
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(match self.keys {
            [] => Value::Text(v.to_owned()),
            _ => Value::Nothing,
        })
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Nothing)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(self.scalar("boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(self.scalar("number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(self.scalar("number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(self.scalar("number"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.scalar("array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Some((first, rest)) = self.keys.split_first() else {
            return carrier(map);
        };
        let mut found = Value::Nothing;
        while let Some(hit) = map.next_key_seed(KeyOf(&[first.as_str()]))? {
            match hit {
                Some(_) => found = map.next_value_seed(Seek { keys: rest })?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// An object at the end of the path: its `traceparent` and `tracestate` strings.
fn carrier<'de, A: MapAccess<'de>>(mut map: A) -> Result<Value, A::Error> {
    let (mut parent, mut state) = (None, None);
    while let Some(hit) = map.next_key_seed(KeyOf(&[TRACEPARENT, TRACESTATE]))? {
        match hit {
            Some(0) => parent = map.next_value::<Option<String>>()?,
            Some(_) => state = map.next_value::<Option<String>>()?,
            None => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(Value::Carrier(parent, state))
}

/// Reads an object key and tells which of the wanted names it is, without allocating.
struct KeyOf<'a>(&'a [&'a str]);

impl<'de> DeserializeSeed<'de> for KeyOf<'_> {
    type Value = Option<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyOf<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

#[cfg(test)]
mod tests;
