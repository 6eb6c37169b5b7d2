//! The Connect schema Debezium's PostgreSQL connector gives a column, and its JSON
//! form as `JsonConverter` (schemas enabled) writes it.
//!
//! Owns the column-type table and the field order of a schema object: `type`, then
//! `fields` / `items`, `optional`, `name`, `version`, then `field` when it is a
//! struct field. Invariant: only types whose PostgreSQL text output is also the
//! Connect value are supported ([`ColumnType::of`] returns `None` for the rest), so a
//! value is never written in a form Debezium would not have produced.

/// What a column is, as far as the record format is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// `text`, `varchar`, `bpchar`, `name`, `citext`-like: a plain string.
    Text,
    /// `uuid`: a string named `io.debezium.data.Uuid`.
    Uuid,
    /// `json`, `jsonb`: a string named `io.debezium.data.Json`.
    Json,
    /// `int2`: Connect `int16`, a JSON number.
    Int16,
    /// `int4`: Connect `int32`, a JSON number.
    Int32,
    /// `int8`: Connect `int64`, a JSON number.
    Int64,
}

impl ColumnType {
    /// The type of a column with type oid `oid`, if pgoutbox can write it.
    pub fn of(oid: u32) -> Option<Self> {
        Some(match oid {
            25 | 1043 | 1042 | 19 => Self::Text,
            2950 => Self::Uuid,
            114 | 3802 => Self::Json,
            21 => Self::Int16,
            23 => Self::Int32,
            20 => Self::Int64,
            _ => return None,
        })
    }

    /// Whether the JSON value is a number (the text as is) rather than a string.
    pub fn is_number(self) -> bool {
        matches!(self, Self::Int16 | Self::Int32 | Self::Int64)
    }

    fn connect_type(self) -> &'static str {
        match self {
            Self::Text | Self::Uuid | Self::Json => "string",
            Self::Int16 => "int16",
            Self::Int32 => "int32",
            Self::Int64 => "int64",
        }
    }

    fn logical_name(self) -> Option<&'static str> {
        match self {
            Self::Uuid => Some("io.debezium.data.Uuid"),
            Self::Json => Some("io.debezium.data.Json"),
            _ => None,
        }
    }
}

/// The schema of one column: its type and whether it may be NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSchema {
    /// The column's type.
    pub kind: ColumnType,
    /// `optional` in the schema: the column is not `NOT NULL`.
    pub optional: bool,
}

impl ColumnSchema {
    /// Append the schema object; `field` names it inside a struct.
    pub fn push_json(&self, out: &mut Vec<u8>, field: Option<&str>) {
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(self.kind.connect_type().as_bytes());
        out.extend_from_slice(b"\",\"optional\":");
        out.extend_from_slice(if self.optional { b"true" } else { b"false" });
        if let Some(name) = self.kind.logical_name() {
            out.extend_from_slice(b",\"name\":\"");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\",\"version\":1");
        }
        push_field(out, field);
        out.push(b'}');
    }
}

/// Append `,"field":"<name>"` when `field` is given (names are JSON-escaped).
pub fn push_field(out: &mut Vec<u8>, field: Option<&str>) {
    if let Some(field) = field {
        out.extend_from_slice(b",\"field\":");
        super::jackson::push_string(out, field.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(schema: ColumnSchema, field: Option<&str>) -> String {
        let mut out = Vec::new();
        schema.push_json(&mut out, field);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn schemas_match_debezium_field_order() {
        let jsonb = ColumnSchema {
            kind: ColumnType::of(3802).unwrap(),
            optional: true,
        };
        assert_eq!(
            json(jsonb, None),
            r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}"#
        );
        let text = ColumnSchema {
            kind: ColumnType::Text,
            optional: false,
        };
        assert_eq!(
            json(text, Some("tenant")),
            r#"{"type":"string","optional":false,"field":"tenant"}"#
        );
        assert_eq!(ColumnType::of(16), None, "bool is not supported");
    }
}
