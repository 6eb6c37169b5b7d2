//! Value types for naming things in PostgreSQL, shared by both halves of `pg` and by
//! the rest of the relay (`outbox`, `tail`, `poll`, `ops`, `main`): [`TableName`], a
//! schema-qualified table, and the quoting of identifiers and literals for SQL and
//! replication commands.
//!
//! A leaf: it imports nothing from `pg` (checked by the layering test in
//! `pg/mod.rs`). Invariant: quoting doubles every embedded quote, so a quoted name
//! or literal is always one token, whatever the user wrote.

use std::fmt;

/// Quote an identifier for SQL or a replication command (`"name"`, embedded quotes doubled).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quote a string literal (`'text'`, embedded quotes doubled).
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A schema-qualified table name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    /// Schema (default `public`).
    pub schema: String,
    /// Table.
    pub name: String,
}

impl TableName {
    /// Parse `schema.table` or `table` (schema `public`). Names are taken literally
    /// (case-sensitive), as they appear in `pg_class`; surrounding double quotes are removed.
    pub fn parse(text: &str) -> Option<Self> {
        let unquote = |s: &str| {
            let s = s.trim();
            let s = s
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .unwrap_or(s);
            (!s.is_empty()).then(|| s.to_owned())
        };
        match text.split_once('.') {
            Some((schema, name)) => Some(Self {
                schema: unquote(schema)?,
                name: unquote(name)?,
            }),
            None => Some(Self {
                schema: "public".to_owned(),
                name: unquote(text)?,
            }),
        }
    }

    /// `"schema"."name"` for SQL.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        assert_eq!(
            TableName::parse("outbox").unwrap(),
            TableName {
                schema: "public".into(),
                name: "outbox".into()
            }
        );
        let t = TableName::parse("sales.\"Order Outbox\"").unwrap();
        assert_eq!(t.name, "Order Outbox");
        assert_eq!(t.quoted(), "\"sales\".\"Order Outbox\"");
        assert!(TableName::parse("").is_none());
        assert!(TableName::parse("a.").is_none());
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
