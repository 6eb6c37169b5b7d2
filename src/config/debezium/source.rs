//! Where the outbox lives: `connector.class`, the transforms (finding the Outbox Event
//! Router), `plugin.name`, the `database.*` connection, the slot and publication, and
//! `table.include.list`.
//!
//! Invariant: the database password is noted as redacted and never written; a slot is
//! reused only when the connector decoded it with pgoutput.

use std::fmt::Write as _;

use crate::pg::client::conninfo::{percent_encode, SslMode};

use super::input::{is_class, list, resolved, Config, Notes};
use super::{Entry, ImportError, EVENT_ROUTER, PLACEHOLDER, POSTGRES_CONNECTOR};

pub(super) fn connector_class(cfg: &mut Config) -> Result<(), ImportError> {
    match cfg.get("connector.class") {
        None => Err(ImportError::MissingClass),
        Some(class) if is_class(&class, POSTGRES_CONNECTOR) || class == "Postgres" => Ok(()),
        Some(value) => Err(ImportError::WrongConnector { value }),
    }
}

/// The name of the (first) Outbox Event Router; every other transform is noted.
pub(super) fn event_router(cfg: &mut Config, notes: &mut Notes) -> Result<String, ImportError> {
    let names = cfg.get("transforms").map(|v| list(&v)).unwrap_or_default();
    let mut router: Option<String> = None;
    let mut found = Vec::new();
    for name in &names {
        let type_key = format!("transforms.{name}.type");
        let ty = cfg.get(&type_key);
        found.push(format!("{name} ({})", ty.as_deref().unwrap_or("no type")));
        let is_router = ty.as_deref().is_some_and(|t| is_class(t, EVENT_ROUTER));
        if is_router && router.is_none() {
            router = Some(name.clone());
            continue;
        }
        let settings = cfg.get_prefixed(&format!("transforms.{name}."));
        let message = if is_router {
            "a second Outbox Event Router; pgoutbox routes every outbox table with one mapping, \
                the first router's"
                .to_owned()
        } else {
            // The type key was read above; the rest are its settings.
            let count = settings.len().saturating_sub(usize::from(ty.is_some()));
            format!(
                "pgoutbox applies only the Outbox Event Router; transform {name:?} and its \
                    {count} setting(s) are not applied, so records may differ from the \
                    connector's"
            )
        };
        notes.unsupported(&type_key, ty.as_deref(), message);
    }
    router.ok_or_else(|| ImportError::NoEventRouter {
        found: if found.is_empty() {
            "none".to_owned()
        } else {
            found.join(", ")
        },
    })
}

/// Notes `plugin.name`; returns the plugin when it is not pgoutput.
pub(super) fn plugin(cfg: &mut Config, notes: &mut Notes) -> Option<String> {
    const KEY: &str = "plugin.name";
    match cfg.get(KEY) {
        Some(p) if p == "pgoutput" => {
            notes.translated(
                KEY,
                Some(&p),
                "pgoutbox decodes pgoutput too, so the connector's slot can be reused (see \
                    slot.name)",
            );
            None
        }
        Some(p) => {
            notes.unsupported(
                KEY,
                Some(&p),
                format!(
                    "not honoured: pgoutbox always decodes with pgoutput (built into PostgreSQL \
                        10+), so the connector's {p} slot cannot be reused (see slot.name)"
                ),
            );
            Some(p)
        }
        None => {
            notes.unsupported(
                KEY,
                None,
                "Debezium's default is decoderbufs; pgoutbox always decodes with pgoutput, so \
                    the connector's decoderbufs slot cannot be reused (see slot.name)",
            );
            Some("decoderbufs".to_owned())
        }
    }
}

// ---------------------------------------------------------------------------
// PostgreSQL

/// `database_url` from the `database.*` keys; the password is noted, never written.
pub(super) fn database_url(cfg: &mut Config, notes: &mut Notes) -> Result<String, ImportError> {
    let mut required = |cfg: &mut Config, key: &'static str, part: &str| {
        let value = resolved(cfg, notes, key).ok_or(ImportError::Missing { key })?;
        notes.translated(key, Some(&value), format!("database_url {part}"));
        Ok::<_, ImportError>(value)
    };
    let host = required(cfg, "database.hostname", "host")?;
    let user = required(cfg, "database.user", "user")?;
    let dbname = required(cfg, "database.dbname", "database name")?;

    let port = match resolved(cfg, notes, "database.port") {
        None => "5432".to_owned(),
        Some(p) if p == PLACEHOLDER => p,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => {
                notes.translated("database.port", Some(&p), "database_url port");
                n.to_string()
            }
            _ => {
                return Err(ImportError::InvalidValue {
                    key: "database.port",
                    value: p,
                    expected: "an integer from 1 to 65535",
                })
            }
        },
    };

    let mut query: Vec<(&str, String)> = Vec::new();
    if let Some(mode) = resolved(cfg, notes, "database.sslmode") {
        let lower = mode.to_ascii_lowercase();
        // Debezium's `database.sslmode` shares libpq's values (in any case).
        if mode != PLACEHOLDER && SslMode::from_libpq(&lower).is_none() {
            return Err(ImportError::InvalidValue {
                key: "database.sslmode",
                value: mode,
                expected: SslMode::EXPECTED,
            });
        }
        notes.translated("database.sslmode", Some(&mode), "database_url ?sslmode=");
        query.push(("sslmode", lower));
    }
    for (key, param) in [
        ("database.sslrootcert", "sslrootcert"),
        ("database.sslcert", "sslcert"),
        ("database.sslkey", "sslkey"),
    ] {
        if let Some(path) = resolved(cfg, notes, key) {
            notes.translated(
                key,
                Some(&path),
                format!("database_url ?{param}= (a PEM file path on the host running pgoutbox)"),
            );
            query.push((param, path));
        }
    }

    if let Some(password) = cfg.get("database.password") {
        notes.translated(
            "database.password",
            Some(&password),
            "not written to the TOML: give it to pgoutbox through \
            PGOUTBOX_DATABASE_PASSWORD_FILE, PGPASSWORD or ~/.pgpass",
        );
    }
    if let Some(p) = cfg.get("database.sslpassword") {
        notes.unsupported(
            "database.sslpassword",
            Some(&p),
            "pgoutbox reads unencrypted PEM client keys only; decrypt the key (openssl pkey -in \
                key.pem -out plain.pem) and keep it private",
        );
    }

    let mut url = format!("postgres://{}@", percent_encode(&user, b""));
    if host.contains(':') {
        let _ = write!(url, "[{}]", percent_encode(&host, b":"));
    } else {
        url.push_str(&percent_encode(&host, b""));
    }
    let _ = write!(url, ":{port}/{}", percent_encode(&dbname, b""));
    for (i, (param, value)) in query.iter().enumerate() {
        let _ = write!(
            url,
            "{}{param}={}",
            if i == 0 { '?' } else { '&' },
            percent_encode(value, b"/")
        );
    }
    Ok(url)
}

/// `slot` and `publication`: the connector's own when it used pgoutput (so pgoutbox
/// resumes where it stopped), fresh ones otherwise.
pub(super) fn slot_and_publication(
    cfg: &mut Config,
    notes: &mut Notes,
    other_plugin: Option<&str>,
) -> (Entry, Entry) {
    let slot_value = resolved(cfg, notes, "slot.name");
    let dbz_slot = slot_value.clone().unwrap_or_else(|| "debezium".to_owned());
    let pub_value = resolved(cfg, notes, "publication.name");
    autocreate_mode(cfg, notes);

    if let Some(plugin) = other_plugin {
        notes.unsupported(
            "slot.name",
            slot_value.as_deref(),
            format!(
                "the connector's slot {dbz_slot:?} decodes with {plugin}, which pgoutbox cannot \
                    read; the TOML names a new slot \"pgoutbox\": create it with `pgoutbox \
                    setup` while the connector still runs, stop the connector, then start \
                    pgoutbox (events in between arrive twice, none is lost); afterwards drop \
                    the old slot: SELECT pg_drop_replication_slot('{dbz_slot}')"
            ),
        );
        if let Some(p) = &pub_value {
            notes.ignored(
                "publication.name",
                Some(p),
                "only used with plugin.name=pgoutput; the new slot gets a new publication \
                    \"pgoutbox\" (FOR TABLE the outbox tables, publish = 'insert')",
            );
        }
        let slot = Entry::with(
            "pgoutbox".to_owned(),
            format!("new pgoutput slot; the connector's {dbz_slot:?} is a {plugin} slot"),
        );
        let publication = Entry::with(
            "pgoutbox".to_owned(),
            "created by pgoutbox for the outbox tables",
        );
        return (slot, publication);
    }

    let slot_msg = "slot: pgoutbox resumes the connector's slot at its confirmed_flush_lsn; stop \
        the connector first (a slot has one reader); events the connector sent after its last \
        offset flush are sent again (at-least-once), none is lost";
    let slot = match &slot_value {
        Some(s) => {
            notes.translated("slot.name", Some(s), slot_msg);
            Entry::plain(s.clone())
        }
        None => {
            notes.translated(
                "slot.name",
                None,
                format!("Debezium's default \"debezium\" → {slot_msg}"),
            );
            Entry::with("debezium".to_owned(), "Debezium default slot.name")
        }
    };
    let pub_msg = "publication: kept with the slot it was decoded with; pgoutbox checks that it \
        covers the outbox tables and creates it (FOR TABLE ..., publish = 'insert') when missing";
    let publication = match &pub_value {
        Some(p) => {
            notes.translated("publication.name", Some(p), pub_msg);
            Entry::plain(p.clone())
        }
        None => {
            notes.translated(
                "publication.name",
                None,
                format!("Debezium's default \"dbz_publication\" → {pub_msg}"),
            );
            Entry::with(
                "dbz_publication".to_owned(),
                "Debezium default publication.name",
            )
        }
    };
    (slot, publication)
}

pub(super) fn autocreate_mode(cfg: &mut Config, notes: &mut Notes) {
    const KEY: &str = "publication.autocreate.mode";
    let Some(mode) = cfg.get(KEY) else { return };
    let created =
        "pgoutbox creates a missing publication for the outbox tables only (publish = 'insert')";
    match mode.as_str() {
        "filtered" => notes.translated(KEY, Some(&mode), format!("{created}, as filtered does")),
        "all_tables" | "no_tables" => notes.ignored(
            KEY,
            Some(&mode),
            format!(
                "{created}; an existing publication is used as it is (with FOR ALL TABLES, \
                    changes of other tables are decoded and skipped)"
            ),
        ),
        "disabled" => notes.unsupported(
            KEY,
            Some(&mode),
            format!(
                "{created} instead of failing; review it first with `pgoutbox setup --print-sql`"
            ),
        ),
        _ => notes.unsupported(KEY, Some(&mode), format!("unknown mode; {created}")),
    }
}

// ---------------------------------------------------------------------------
// Tables

/// `table` from `table.include.list`: literal names translated, real regexes noted.
pub(super) fn tables(cfg: &mut Config, notes: &mut Notes) -> Entry<Vec<String>> {
    let include = resolved(cfg, notes, "table.include.list");
    let whitelist = cfg.get("table.whitelist");
    let (key, patterns) = match (&include, &whitelist) {
        (Some(v), Some(w)) => {
            notes.ignored(
                "table.whitelist",
                Some(w),
                "deprecated name; table.include.list wins",
            );
            ("table.include.list", v.clone())
        }
        (Some(v), None) => ("table.include.list", v.clone()),
        (None, Some(w)) => ("table.whitelist", w.clone()),
        (None, None) => {
            notes.unsupported(
                "table.include.list",
                None,
                format!(
                    "the connector captured every table; pgoutbox reads only the outbox tables \
                        it is given: replace {PLACEHOLDER}.outbox in table with them"
                ),
            );
            return Entry::with(
                vec![format!("{PLACEHOLDER}.outbox")],
                "the outbox tables, as schema.table",
            );
        }
    };
    let mut tables = Vec::new();
    for pattern in list(&patterns) {
        match literal_table(&pattern) {
            Some(table) => {
                notes.translated(key, Some(&pattern), format!("table {table:?}"));
                if !tables.contains(&table) {
                    tables.push(table);
                }
            }
            None => notes.unsupported(
                key,
                Some(&pattern),
                "a regular expression (or not schema.table); pgoutbox takes literal schema.table \
                    names: add every outbox table it matches to table",
            ),
        }
    }
    if tables.is_empty() {
        return Entry::with(
            vec![format!("{PLACEHOLDER}.outbox")],
            format!("{key} has no literal schema.table name"),
        );
    }
    Entry::plain(tables)
}

/// The literal `schema.table` a Debezium include pattern means, when it is one:
/// `public.outbox`, `public\.outbox`, `^public\.outbox$`. Debezium matches patterns
/// against the whole `schema.table`, so a bare `outbox` matches nothing and is not one.
pub(super) fn literal_table(pattern: &str) -> Option<String> {
    let p = pattern.strip_prefix('^').unwrap_or(pattern);
    let p = match p.strip_suffix('$') {
        Some(rest) if !rest.ends_with('\\') => rest,
        _ => p,
    };
    let mut parts = vec![String::new()];
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        match c {
            // In a Java regex a backslash before a letter or digit is a class or a
            // back-reference; before anything else it quotes that character.
            '\\' => match chars.next()? {
                '.' => parts.push(String::new()),
                e if e.is_alphanumeric() => return None,
                e => parts.last_mut()?.push(e),
            },
            '.' => parts.push(String::new()),
            c if c.is_alphanumeric() || c == '_' || c == '-' => parts.last_mut()?.push(c),
            _ => return None,
        }
    }
    match parts.as_slice() {
        [schema, table] if !schema.is_empty() && !table.is_empty() => {
            Some(format!("{schema}.{table}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_patterns_translate_only_literal_names() {
        assert_eq!(
            literal_table("public.outbox").as_deref(),
            Some("public.outbox")
        );
        assert_eq!(
            literal_table("public\\.outbox").as_deref(),
            Some("public.outbox")
        );
        assert_eq!(
            literal_table("^inventory\\.outbox_events$").as_deref(),
            Some("inventory.outbox_events")
        );
        assert_eq!(literal_table("public.outbox.*"), None);
        assert_eq!(literal_table("public\\.outbox_\\d+"), None);
        assert_eq!(literal_table("public.(a|b)"), None);
        assert_eq!(literal_table("outbox"), None);
    }
}
