//! Topic routing: Debezium's `route.topic.replacement` template.
//!
//! Owns the template syntax: the literal text with every `${routedByValue}` replaced
//! by the value of the route-by column. Invariant: rendering never fails; whether
//! the result is a legal Kafka topic name is a separate check ([`is_valid_topic`]),
//! so the caller decides what an illegal name means (fail, dead-letter, skip).

/// The placeholder Debezium's Outbox Event Router uses.
pub const ROUTED_BY_VALUE: &str = "${routedByValue}";

/// Default topic template, as in Debezium.
pub const DEFAULT_TOPIC_TEMPLATE: &str = "outbox.event.${routedByValue}";

/// A parsed topic template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTemplate {
    /// Literal pieces between placeholders; rendering interleaves them with the value.
    pieces: Vec<String>,
}

impl TopicTemplate {
    /// Parse a template such as `outbox.event.${routedByValue}`.
    pub fn new(template: &str) -> Self {
        Self {
            pieces: template.split(ROUTED_BY_VALUE).map(str::to_owned).collect(),
        }
    }

    /// The template text, as given.
    pub fn as_str(&self) -> String {
        self.pieces.join(ROUTED_BY_VALUE)
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

    #[test]
    fn topic_validity() {
        assert!(is_valid_topic("outbox.event.order_v2-x"));
        assert!(!is_valid_topic("outbox.event.with space"));
        assert!(!is_valid_topic(""));
        assert!(!is_valid_topic(".."));
        assert!(!is_valid_topic(&"a".repeat(250)));
    }
}
