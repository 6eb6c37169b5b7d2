//! How an error is printed: every cause once, outermost first.
//!
//! # The rule
//! An error shows its cause **either** in its own message **or** through
//! `source()`, never both (the Rust API guidelines' rule; breaking it is what
//! printed "refused: refused" lines). In pgoutbox:
//!
//! - An error that wraps another says what was being done and names the object —
//!   `cannot read config file /etc/p.toml` — and keeps the cause as `#[source]` or
//!   `#[from]`; its message has no `{0}` / `{source}`.
//! - An error whose fix must come *after* the cause (`…: Permission denied; fix: …`)
//!   or that renders a foreign error better than the foreign `Display` does
//!   (tokio-postgres prints a server error as just "db error") writes the cause into
//!   its message and keeps it in a field that is *not* a source (named `error`,
//!   never `source`, which thiserror would make one).
//!
//! Every place that prints an error — `main`'s last line, a log field — prints the
//! chain with [`Report`] (`error = %Report(&err)`), never `{err}` alone, which would
//! drop the causes. `Report` also skips a cause whose text the line already holds:
//! some foreign errors (tokio-postgres, an `io::Error` wrapping another error) put
//! their source in their own message.

use std::error::Error;
use std::fmt;

/// Displays `err` and its causes, `: `-separated, each once.
pub struct Report<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render(self.0))
    }
}

/// The whole chain of `err` as one line.
pub fn render(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !more.is_empty() && !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read state file /s")]
    struct Wraps(#[source] std::io::Error);

    /// A foreign error that breaks the rule: its message repeats its source.
    #[derive(Debug, thiserror::Error)]
    #[error("error connecting to server: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("cannot connect to db")]
    struct Outer(#[source] Repeats);

    #[test]
    fn every_cause_once_outermost_first() {
        let err = Wraps(std::io::Error::other("permission denied"));
        assert_eq!(
            Report(&err).to_string(),
            "cannot read state file /s: permission denied"
        );
        let err = Outer(Repeats(std::io::Error::other("connection refused")));
        assert_eq!(
            Report(&err).to_string(),
            "cannot connect to db: error connecting to server: connection refused"
        );
    }
}
