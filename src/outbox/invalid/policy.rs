//! The `--on-invalid` policy: one [`Action`] per [`Cause`], plus the dead-letter
//! topic. Invariants: every cause defaults to `fail`; a policy that dead-letters
//! anything has a legal dead-letter topic; `deliver` is set only on a cause that
//! [allows](Cause::allows) it (`null-key`).

use super::Cause;

/// What to do with a row of one cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Action {
    /// Stop the relay without confirming past the row (the default).
    #[default]
    Fail,
    /// Write the row to the dead-letter topic; the LSN moves on once it is acked.
    Dlq,
    /// Log, count and move on.
    Skip,
    /// Send the record as it is (`null-key` only: a NULL key becomes a Kafka null
    /// key, an empty key empty key bytes); counted, logged at debug level.
    Deliver,
}

impl Action {
    /// The name used in `--on-invalid` and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Action::Fail => "fail",
            Action::Dlq => "dlq",
            Action::Skip => "skip",
            Action::Deliver => "deliver",
        }
    }

    /// Every action, in metric column order.
    pub const ALL: [Action; 4] = [Action::Fail, Action::Dlq, Action::Skip, Action::Deliver];

    fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// The policy of every cause, plus where dead letters go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPolicy {
    actions: [Action; Cause::ALL.len()],
    /// The dead-letter topic.
    pub dlq_topic: String,
}

impl Default for InvalidPolicy {
    fn default() -> Self {
        Self {
            actions: [Action::Fail; Cause::ALL.len()],
            dlq_topic: DEFAULT_DLQ_TOPIC.to_owned(),
        }
    }
}

/// Where dead letters go unless `--dlq-topic` says otherwise.
pub const DEFAULT_DLQ_TOPIC: &str = "pgoutbox.dlq";

/// A bad `--on-invalid` or `--dlq-topic` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(String);

impl InvalidPolicy {
    /// Build from `--on-invalid` values, applied in order: `POLICY` sets every
    /// cause, `CAUSE=POLICY` one cause. `deliver` is only accepted as
    /// `null-key=deliver`.
    pub fn parse(specs: &[String], dlq_topic: &str) -> Result<Self, PolicyError> {
        let causes = || {
            Cause::ALL
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let action = |s: &str| {
            Action::parse(s.trim()).ok_or_else(|| {
                PolicyError(format!(
                    "--on-invalid: unknown policy {s:?}; expected fail, dlq, skip (or \
                     null-key=deliver)"
                ))
            })
        };
        let mut policy = InvalidPolicy {
            dlq_topic: dlq_topic.trim().to_owned(),
            ..InvalidPolicy::default()
        };
        for spec in specs.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            match spec.split_once('=') {
                None if action(spec)? == Action::Deliver => {
                    return Err(PolicyError(
                        "--on-invalid deliver: only rows with a NULL or empty key can be \
                         delivered as they are; write --on-invalid null-key=deliver"
                            .to_owned(),
                    ))
                }
                None => policy.actions = [action(spec)?; Cause::ALL.len()],
                Some((cause, value)) => {
                    let cause = Cause::parse(cause.trim()).ok_or_else(|| {
                        PolicyError(format!(
                            "--on-invalid: unknown cause {:?}; causes are: {}",
                            cause.trim(),
                            causes()
                        ))
                    })?;
                    let action = action(value)?;
                    if !cause.allows(action) {
                        return Err(PolicyError(format!(
                            "--on-invalid {}=deliver: a {} row has no record Kafka would take \
                             as it is; choose fail, dlq or skip (deliver applies to null-key only)",
                            cause.name(),
                            cause.name()
                        )));
                    }
                    policy.actions[cause.index()] = action;
                }
            }
        }
        if policy.uses_dlq() && !crate::outbox::routing::is_valid_topic(&policy.dlq_topic) {
            return Err(PolicyError(format!(
                "--dlq-topic {:?} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-])",
                policy.dlq_topic
            )));
        }
        Ok(policy)
    }

    /// The action for `cause`.
    pub fn action(&self, cause: Cause) -> Action {
        self.actions[cause.index()]
    }

    /// Whether any cause dead-letters.
    pub fn uses_dlq(&self) -> bool {
        self.actions.contains(&Action::Dlq)
    }

    /// `cause=action` for every cause, for `config show`.
    pub fn describe(&self) -> Vec<String> {
        Cause::ALL
            .iter()
            .map(|c| format!("{}={}", c.name(), self.action(*c).name()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_parsing_applies_in_order_and_names_mistakes() {
        let p = InvalidPolicy::parse(&["dlq".into(), "too-large=skip".into()], "dead").unwrap();
        assert_eq!(p.action(Cause::NullKey), Action::Dlq);
        assert_eq!(p.action(Cause::TooLarge), Action::Skip);
        assert_eq!(p.dlq_topic, "dead");
        assert_eq!(
            InvalidPolicy::parse(&[], "x")
                .unwrap()
                .action(Cause::InvalidJson),
            Action::Fail
        );
        let err = InvalidPolicy::parse(&["nul-key=dlq".into()], "x")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nul-key") && err.contains("null-key, invalid-topic"),
            "{err}"
        );
        let err = InvalidPolicy::parse(&["drop".into()], "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("fail, dlq, skip"), "{err}");
        let err = InvalidPolicy::parse(&["dlq".into()], "bad topic")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--dlq-topic"), "{err}");
        // An illegal DLQ topic does not matter when nothing dead-letters.
        assert!(InvalidPolicy::parse(&["skip".into()], "bad topic").is_ok());
    }

    #[test]
    fn deliver_applies_to_null_key_only() {
        let p = InvalidPolicy::parse(&["dlq".into(), "null-key=deliver".into()], "d").unwrap();
        assert_eq!(p.action(Cause::NullKey), Action::Deliver);
        assert_eq!(p.action(Cause::NullRoute), Action::Dlq);
        assert!(p.describe().contains(&"null-key=deliver".to_owned()));
        let err = InvalidPolicy::parse(&["null-route=deliver".into()], "d")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("null-route=deliver") && err.contains("null-key only"),
            "{err}"
        );
        let err = InvalidPolicy::parse(&["deliver".into()], "d")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--on-invalid null-key=deliver"), "{err}");
        // null-route is a cause of its own, fail by default.
        let p = InvalidPolicy::parse(&[], "d").unwrap();
        assert_eq!(p.action(Cause::NullRoute), Action::Fail);
    }
}
