//! Topic routing: Debezium's `route.topic.replacement` template.
//!
//! Owns the template syntax: the literal text with every `${routedByValue}` replaced
//! by the value of the route-by column. Invariants: [`TopicTemplate::parse`] accepts
//! only templates whose fixed text can be part of a Kafka topic name (legal
//! characters, at most 249 of them, no placeholder but `${routedByValue}`), so a bad
//! template is refused at start-up and by `check`, never on the first row; rendering
//! never fails; whether a rendered name is legal (the routing value is the row's) is
//! a separate check ([`is_valid_topic`]), so the caller decides what an illegal name
//! means (fail, dead-letter, skip).

/// The placeholder Debezium's Outbox Event Router uses.
pub const ROUTED_BY_VALUE: &str = "${routedByValue}";

/// Default topic template, as in Debezium.
pub const DEFAULT_TOPIC_TEMPLATE: &str = "outbox.event.${routedByValue}";

/// Kafka's longest topic name.
pub const MAX_TOPIC_LEN: usize = 249;

/// Why a template can never render a legal topic name. Every message ends with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// No text at all.
    #[error("the template is empty; fix: e.g. {DEFAULT_TOPIC_TEMPLATE}")]
    Empty,
    /// A character Kafka refuses in topic names, outside the placeholder.
    #[error("{found:?} (character {position}) cannot be part of a Kafka topic name, which allows only a-z A-Z 0-9 . _ -; fix: e.g. {suggestion}")]
    IllegalCharacter {
        /// The character.
        found: char,
        /// 1-based position in the template.
        position: usize,
        /// The template with every illegal character replaced by `.`.
        suggestion: String,
    },
    /// `${…}` naming something other than `routedByValue`.
    #[error("unknown placeholder ${{{name}}}; fix: {}", placeholder_fix(.name))]
    UnknownPlaceholder {
        /// The name between the braces.
        name: String,
    },
    /// `${` without its `}`.
    #[error("\"${{\" (character {position}) is not closed by \"}}\"; fix: write the placeholder as {ROUTED_BY_VALUE}")]
    Unclosed {
        /// 1-based position of the `$`.
        position: usize,
    },
    /// More fixed text than a topic name can hold.
    #[error("its fixed text is {length} characters and a Kafka topic name has at most {MAX_TOPIC_LEN}; fix: shorten it")]
    TooLong {
        /// Characters outside placeholders.
        length: usize,
    },
    /// `.` or `..` without a placeholder.
    #[error("{0:?} is not a legal Kafka topic name; fix: e.g. {DEFAULT_TOPIC_TEMPLATE}")]
    Dots(String),
}

fn placeholder_fix(name: &str) -> String {
    let wanted = &ROUTED_BY_VALUE[2..ROUTED_BY_VALUE.len() - 1];
    if name.eq_ignore_ascii_case(wanted) {
        format!("did you mean {ROUTED_BY_VALUE}? (placeholder names are case-sensitive)")
    } else {
        format!("the only placeholder is {ROUTED_BY_VALUE} (the value of --route-by-field)")
    }
}

/// A parsed topic template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTemplate {
    /// Literal pieces between placeholders; rendering interleaves them with the value.
    pieces: Vec<String>,
}

impl TopicTemplate {
    /// Parse and validate a template such as `outbox.event.${routedByValue}`: its
    /// fixed text must be able to be part of a Kafka topic name.
    pub fn parse(template: &str) -> Result<Self, TemplateError> {
        let parsed = Self::new(template);
        if template.is_empty() {
            return Err(TemplateError::Empty);
        }
        let fixed = parsed.pieces.concat();
        if let Some(err) = placeholder_error(&parsed.pieces) {
            return Err(err);
        }
        if let Some(err) = illegal_character(template) {
            return Err(err);
        }
        let length = fixed.chars().count();
        if length > MAX_TOPIC_LEN {
            return Err(TemplateError::TooLong { length });
        }
        if !parsed.uses_value() && (fixed == "." || fixed == "..") {
            return Err(TemplateError::Dots(fixed));
        }
        Ok(parsed)
    }

    /// Split a template without validating it (see [`TopicTemplate::parse`]).
    pub fn new(template: &str) -> Self {
        Self {
            pieces: template.split(ROUTED_BY_VALUE).map(str::to_owned).collect(),
        }
    }

    /// The template text, as given.
    pub fn as_str(&self) -> String {
        self.pieces.join(ROUTED_BY_VALUE)
    }

    /// The fixed text before the routing value (the whole topic when the template
    /// has no placeholder): every topic it renders starts with it.
    pub fn prefix(&self) -> &str {
        self.pieces.first().map_or("", String::as_str)
    }

    /// Whether the template uses the routing value at all.
    pub fn uses_value(&self) -> bool {
        self.pieces.len() > 1
    }

    /// The topic for one routing value.
    pub fn render(&self, routed_by_value: &str) -> String {
        let mut out = String::with_capacity(
            self.pieces.iter().map(String::len).sum::<usize>() + routed_by_value.len(),
        );
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                out.push_str(routed_by_value);
            }
            out.push_str(piece);
        }
        out
    }
}

impl Default for TopicTemplate {
    fn default() -> Self {
        Self::new(DEFAULT_TOPIC_TEMPLATE)
    }
}

/// The first `${…}` in the fixed text (pieces between `${routedByValue}`s).
fn placeholder_error(pieces: &[String]) -> Option<TemplateError> {
    let mut offset = 0;
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            offset += ROUTED_BY_VALUE.chars().count();
        }
        if let Some(at) = piece.find("${") {
            let rest = &piece[at + 2..];
            return Some(match rest.find('}') {
                Some(end) => TemplateError::UnknownPlaceholder {
                    name: rest[..end].to_owned(),
                },
                None => TemplateError::Unclosed {
                    position: offset + piece[..at].chars().count() + 1,
                },
            });
        }
        offset += piece.chars().count();
    }
    None
}

/// The first character outside placeholders that Kafka refuses in a topic name.
fn illegal_character(template: &str) -> Option<TemplateError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let pieces: Vec<&str> = template.split(ROUTED_BY_VALUE).collect();
    let mut position = 0;
    let mut found = None;
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            position += ROUTED_BY_VALUE.chars().count();
        }
        for c in piece.chars() {
            position += 1;
            if !legal(c) && found.is_none() {
                found = Some((c, position));
            }
        }
    }
    let (found, position) = found?;
    let suggestion = pieces
        .iter()
        .map(|p| {
            p.chars()
                .map(|c| if legal(c) { c } else { '.' })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join(ROUTED_BY_VALUE);
    Some(TemplateError::IllegalCharacter {
        found,
        position,
        suggestion,
    })
}

/// Kafka's topic name rule: 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn is_valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_debezium_default() {
        assert_eq!(
            TopicTemplate::default().render("order"),
            "outbox.event.order"
        );
    }

    #[test]
    fn renders_every_occurrence_and_literals() {
        let t = TopicTemplate::new("${routedByValue}.events.${routedByValue}");
        assert_eq!(t.render("a"), "a.events.a");
        let fixed = TopicTemplate::new("all-events");
        assert!(!fixed.uses_value());
        assert_eq!(fixed.render("x"), "all-events");
    }

    /// Regression (issue 13 item 9): these passed `config show` and `check`, and
    /// `run` then stopped on the first row.
    #[test]
    fn bad_templates_are_refused_with_the_fix() {
        let err = |t: &str| TopicTemplate::parse(t).unwrap_err().to_string();
        assert_eq!(
            err("orders/${routedByValue}"),
            "'/' (character 7) cannot be part of a Kafka topic name, which allows only \
             a-z A-Z 0-9 . _ -; fix: e.g. orders.${routedByValue}"
        );
        assert_eq!(
            err("outbox.${routedbyvalue}"),
            "unknown placeholder ${routedbyvalue}; fix: did you mean ${routedByValue}? \
             (placeholder names are case-sensitive)"
        );
        assert_eq!(
            err("outbox.${aggregate_type}"),
            "unknown placeholder ${aggregate_type}; fix: the only placeholder is \
             ${routedByValue} (the value of --route-by-field)"
        );
        assert!(err("a.${routedByValue}.${oops").contains("(character 20) is not closed"));
        assert!(err("${routedByValue} x").contains("' ' (character 17)"));
        assert!(err(&format!("{}${{routedByValue}}", "a".repeat(250))).contains("250 characters"));
        assert!(err("").contains("empty"));
        assert!(err("..").contains("not a legal"));
    }

    #[test]
    fn good_templates_parse() {
        for t in [
            DEFAULT_TOPIC_TEMPLATE,
            "all-events",
            "${routedByValue}",
            "${routedByValue}.events.${routedByValue}",
            "..${routedByValue}",
        ] {
            assert_eq!(
                TopicTemplate::parse(t).map(|t| t.as_str()),
                Ok(t.to_owned())
            );
        }
        assert!(TopicTemplate::parse(&"a".repeat(249)).is_ok());
    }

    #[test]
    fn topic_validity() {
        assert!(is_valid_topic("outbox.event.order_v2-x"));
        assert!(!is_valid_topic("outbox.event.with space"));
        assert!(!is_valid_topic(""));
        assert!(!is_valid_topic(".."));
        assert!(!is_valid_topic(&"a".repeat(250)));
    }
}
