//! The Outbox Event Router's options (`transforms.<name>.*`) → pgoutbox's column
//! mapping and topic template.
//!
//! Invariant: a column Debezium leaves at its default is written explicitly under
//! Debezium's name, so the existing table routes as it did.

use crate::outbox::routing::{
    is_valid_topic, TopicTemplate, DEFAULT_TOPIC_TEMPLATE, ROUTED_BY_VALUE,
};

use super::input::{list, resolved, Config, Notes};
use super::{Entry, PLACEHOLDER};
use crate::cli::router_keys::{self as keys, RouterKey};
use crate::outbox::connect::{Place, Placement};

/// Debezium's `route.topic.regex` default: the whole route value is group 1.
const DEFAULT_TOPIC_REGEX: &str = "(?<routedByValue>.*)";

/// The column mapping and topic template.
pub(super) struct Routing {
    pub(super) route_by: Entry,
    pub(super) topic_template: Entry,
    pub(super) id: Entry,
    pub(super) key: Entry,
    pub(super) event_type: Entry,
    pub(super) payload: Entry,
    pub(super) timestamp: Option<Entry>,
    pub(super) expand_json: bool,
    /// `placement` items (`none` when Debezium placed no column).
    pub(super) placements: Vec<String>,
}

pub(super) fn routing(cfg: &mut Config, notes: &mut Notes, router: &str) -> Routing {
    let k = |option: &str| format!("transforms.{router}.{option}");
    let mut column = |cfg: &mut Config, option: &RouterKey, toml: &str| {
        let key = k(option.debezium);
        let ours = option.default;
        let dbz = option.debezium_default.unwrap_or(ours);
        match resolved(cfg, notes, &key) {
            Some(v) => {
                notes.translated(&key, Some(&v), toml.to_owned());
                Entry::plain(v)
            }
            None if dbz == ours => {
                notes.translated(&key, None, format!("Debezium's default {dbz:?} → {toml}"));
                Entry::with(dbz.to_owned(), "Debezium default")
            }
            None => {
                notes.translated(
                    &key,
                    None,
                    format!(
                        "Debezium's default {dbz:?} → {toml}, written out because pgoutbox's own \
                            default is {ours:?}"
                    ),
                );
                Entry::with(
                    dbz.to_owned(),
                    format!("Debezium default; pgoutbox's own is {ours}"),
                )
            }
        }
    };
    let route_by = column(
        cfg,
        &keys::ROUTE_BY_FIELD,
        "route_by_field and aggregate_type_column",
    );
    let id = column(cfg, &keys::ID_COLUMN, "id_column (header id)");
    let key = column(cfg, &keys::KEY_COLUMN, "key_column (record key)");
    let event_type = column(
        cfg,
        &keys::EVENT_TYPE_COLUMN,
        "event_type_column (placed in a header only when a placement names it)",
    );
    let payload = column(cfg, &keys::PAYLOAD_COLUMN, "payload_column (record value)");

    let ts_key = k(keys::TIMESTAMP_COLUMN.debezium);
    let timestamp = match resolved(cfg, notes, &ts_key) {
        Some(v) => {
            notes.translated(&ts_key, Some(&v), "timestamp_column (record timestamp)");
            Some(Entry::plain(v))
        }
        // What the record is stamped with instead: `edges`.
        None => None,
    };

    let topic_template = topic_template(cfg, notes, router);
    let expand_json = cfg
        .get_bool(&k("table.expand.json.payload"))
        .unwrap_or(false);
    let placements = router_options(cfg, notes, router);
    Routing {
        route_by,
        topic_template,
        id,
        key,
        event_type,
        payload,
        timestamp,
        expand_json,
        placements,
    }
}

/// `topic_template` from `route.topic.replacement` (and `route.topic.regex`).
pub(super) fn topic_template(cfg: &mut Config, notes: &mut Notes, router: &str) -> Entry {
    let regex_key = format!("transforms.{router}.route.topic.regex");
    if let Some(regex) = cfg.get(&regex_key) {
        if regex == DEFAULT_TOPIC_REGEX {
            notes.ignored(
                &regex_key,
                Some(&regex),
                "Debezium's default: the whole route value is ${routedByValue}, as in pgoutbox",
            );
        } else {
            notes.unsupported(
                &regex_key,
                Some(&regex),
                "pgoutbox substitutes the whole route value for ${routedByValue}; topics that \
                    depended on this regex differ",
            );
        }
    }
    let key = format!("transforms.{router}.{}", keys::TOPIC_TEMPLATE.debezium);
    let Some(replacement) = resolved(cfg, notes, &key) else {
        notes.translated(
            &key,
            None,
            format!(
                "Debezium's default {:?} → topic_template (pgoutbox's default too)",
                DEFAULT_TOPIC_TEMPLATE
            ),
        );
        return Entry::with(DEFAULT_TOPIC_TEMPLATE.to_owned(), "Debezium default");
    };
    let template = match java_replacement(&replacement) {
        Ok(template) => {
            notes.translated(&key, Some(&replacement), "topic_template");
            template
        }
        Err(why) => {
            notes.unsupported(
                &key,
                Some(&replacement),
                format!("{why}; written to topic_template as it is, fix it by hand"),
            );
            replacement.clone()
        }
    };
    let example = TopicTemplate::new(&template).render("order");
    if template != PLACEHOLDER && !is_valid_topic(&example) {
        notes.unsupported(
            &key,
            Some(&replacement),
            format!(
                "renders topic names such as {example:?}, which Kafka rejects (1-249 of a-z A-Z \
                    0-9 . _ -); pgoutbox stops on them"
            ),
        );
    }
    Entry::plain(template)
}

/// Debezium fills `route.topic.replacement` through `java.util.regex.Matcher`: `\`
/// quotes the next character and `$n` / `${name}` insert groups of
/// `route.topic.regex`, whose default has one group, `routedByValue` (= `$1`, `$0`).
pub(super) fn java_replacement(replacement: &str) -> Result<String, String> {
    let mut out = String::with_capacity(replacement.len());
    let mut references = 0;
    let mut chars = replacement.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(quoted) => out.push(quoted),
                None => return Err("ends with a lone backslash, which Debezium rejects".to_owned()),
            },
            '$' => {
                match chars.next() {
                    Some('{') => {
                        let mut name = String::new();
                        loop {
                            match chars.next() {
                                Some('}') => break,
                                Some(c) => name.push(c),
                                None => return Err(format!("has an unclosed ${{{name}")),
                            }
                        }
                        if name != "routedByValue" {
                            return Err(format!(
                                "refers to group ${{{name}}}, which pgoutbox does not have (only \
                                    ${{routedByValue}})"
                            ));
                        }
                    }
                    Some('0' | '1') => {}
                    _ => {
                        return Err(
                            "has a '$' that is not ${routedByValue}, $0 or $1 (a literal dollar \
                                is written \\$)"
                                .to_owned(),
                        )
                    }
                }
                out.push_str(ROUTED_BY_VALUE);
                references += 1;
            }
            c => out.push(c),
        }
    }
    if out.matches(ROUTED_BY_VALUE).count() != references {
        return Err(
            "quotes the text ${routedByValue} literally, which pgoutbox would substitute"
                .to_owned(),
        );
    }
    Ok(out)
}

/// The router's options other than the columns and the topic; returns the
/// `placement` items.
pub(super) fn router_options(cfg: &mut Config, notes: &mut Notes, router: &str) -> Vec<String> {
    let k = |option: &str| format!("transforms.{router}.{option}");

    let key = k("table.expand.json.payload");
    if let Some(v) = cfg.get(&key) {
        if v.eq_ignore_ascii_case("true") {
            notes.translated(
                &key,
                Some(&v),
                "expand_json_payload = true: JSON-object payloads become Connect structs (what \
                    still differs: README, migration)",
            );
        } else {
            notes.ignored(
                &key,
                Some(&v),
                "expand_json_payload = false, as in pgoutbox",
            );
        }
    }

    let key = k("table.fields.additional.placement");
    let mut placements = Vec::new();
    match cfg.get(&key) {
        Some(v) => {
            for item in list(&v) {
                match placement(&item) {
                    Ok(m) => {
                        notes.translated(&key, Some(&item), m);
                        placements.push(item);
                    }
                    Err(m) => notes.unsupported(&key, Some(&item), m),
                }
            }
        }
        None => notes.translated(
            &key,
            None,
            "Debezium placed no column (records carry header id only): placement = [\"none\"] \
                (pgoutbox's own default adds header event_type)",
        ),
    }
    if placements.is_empty() {
        placements.push("none".to_owned());
    }

    let key = k("route.tombstone.on.empty.payload");
    if let Some(v) = cfg.get(&key) {
        let msg = "pgoutbox writes a NULL payload as a record with a null value (a tombstone)";
        if v.eq_ignore_ascii_case("true") {
            notes.translated(&key, Some(&v), msg);
        } else {
            notes.ignored(
                &key,
                Some(&v),
                format!("{msg}, as Debezium does with a schemaless converter"),
            );
        }
    }

    let key = k("table.op.invalid.behavior");
    if let Some(v) = cfg.get(&key) {
        let why = "pgoutbox's on_update (ignore, the default; warn; fail) treats UPDATE and \
            DELETE of outbox rows alike, while Debezium drops deletes silently";
        if v == "fatal" {
            notes.unsupported(
                &key,
                Some(&v),
                format!(
                    "not carried over: {why}, so on_update = \"fail\" would also stop on deletes"
                ),
            );
        } else {
            notes.ignored(
                &key,
                Some(&v),
                format!(
                    "updates are skipped silently: {why}, so on_update = \"warn\" would also log \
                        every delete"
                ),
            );
        }
    }

    let key = k("table.field.event.payload.id");
    if let Some(v) = cfg.get(&key) {
        notes.unsupported(
            &key,
            Some(&v),
            "deprecated Debezium option with no pgoutbox equivalent; the key comes from \
                table.field.event.key",
        );
    }
    let key = k("table.field.event.schema.version");
    if let Some(v) = cfg.get(&key) {
        notes.unsupported(
            &key,
            Some(&v),
            "pgoutbox writes no Connect schema, so no schema version",
        );
    }
    let key = k("table.fields.additional.error.on.missing");
    if let Some(v) = cfg.get(&key) {
        if v.eq_ignore_ascii_case("false") {
            notes.unsupported(
                &key,
                Some(&v),
                "pgoutbox stops on a placed column missing from the table (Debezium's default, \
                    true); it never leaves the header out",
            );
        } else {
            notes.ignored(
                &key,
                Some(&v),
                "pgoutbox stops on a missing placed column too",
            );
        }
    }
    let key = k("table.json.payload.null.behavior");
    if let Some(v) = cfg.get(&key) {
        if v.eq_ignore_ascii_case("ignore") {
            notes.ignored(
                &key,
                Some(&v),
                "pgoutbox's expansion leaves null fields out too",
            );
        } else {
            notes.unsupported(
                &key,
                Some(&v),
                "pgoutbox's expansion leaves null fields out (Debezium's default, ignore)",
            );
        }
    }
    // tracing.*: `edges` (trace_context).
    for option in ["predicate", "negate"] {
        let key = k(option);
        if let Some(v) = cfg.get(&key) {
            notes.unsupported(
                &key,
                Some(&v),
                "pgoutbox routes every row of the listed tables; transform predicates are not \
                    applied",
            );
        }
    }
    placements
}

/// One `table.fields.additional.placement` item, `column:placement[:alias]`: the note
/// message, `Ok` when pgoutbox places it the same way.
pub(super) fn placement(item: &str) -> Result<String, String> {
    match Placement::parse(item) {
        Ok(p) => Ok(match p.place {
            Place::Header => format!("placement: header {:?} from column {:?}", p.alias, p.column),
            Place::Envelope => format!(
                "placement: envelope field {:?} from column {:?} (the value becomes {{\"payload\": \
                    …, {:?}: …}})",
                p.alias, p.column, p.alias
            ),
        }),
        Err(e) => Err(format!("not carried over: {}", e.why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_replacements_become_templates() {
        assert_eq!(
            java_replacement("outbox.event.${routedByValue}").unwrap(),
            "outbox.event.${routedByValue}"
        );
        assert_eq!(
            java_replacement("events.$1").unwrap(),
            "events.${routedByValue}"
        );
        assert_eq!(
            java_replacement("a\\.b.$0").unwrap(),
            "a.b.${routedByValue}"
        );
        assert!(java_replacement("${other}").is_err());
        assert!(java_replacement("a.${routedByValue").is_err());
        assert!(java_replacement("cost$").is_err());
        assert!(java_replacement("x\\").is_err());
        assert!(java_replacement("\\${routedByValue}").is_err());
    }
}
