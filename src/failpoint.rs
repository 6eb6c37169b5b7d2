//! Crash points for tests ([`hit`]): `PGOUTBOX_FAILPOINT=<name>:<n>[:stop]` makes
//! the process abort (as kill -9 would) or stop (SIGSTOP) the n-th time it reaches
//! the named step, after printing `failpoint <name> hit` on stderr, so a test can
//! prove the step was reached. Unset — always, outside tests — each step costs one
//! check of a value read once.
//!
//! Steps: exactly-once's (`before-init-transactions`, `during-init-transactions`,
//! `after-init-transactions`, `before-kafka-commit`, `after-kafka-commit`, see
//! [`crate::pipeline::exactly_once`]) and the publication repair's
//! `repair-before-commit` ([`crate::safety::repair`]).

/// Crash points for tests of what a crash at a named step leaves behind:
/// `PGOUTBOX_FAILPOINT=<name>:<n>` aborts the process (as kill -9 would, no drain)
/// the n-th time the step is reached, after printing `failpoint <name> hit` to
/// stderr; `<name>:<n>:stop` stops it instead (SIGSTOP, as a paused VM or a long
/// GC pause would: the test resumes it with SIGCONT — a zombie). Steps:
/// `before-init-transactions`, `after-init-transactions` (a session's fencing),
/// `during-init-transactions` (see [`crate::pipeline::exactly_once`]), `before-kafka-commit` (the
/// watermark is in the transaction, the commit not begun), `after-kafka-commit`
/// (committed, the slot not confirmed). Unset (always, outside tests): one check of
/// a value read once.
pub fn hit(name: &str) {
    if let Some(action) = armed(name) {
        fire(name, action);
    }
}

/// What an armed failpoint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Abort,
    Stop,
}

/// The action of failpoint `name` if this is the pass it is armed for (counted).
pub fn armed(name: &str) -> Option<Action> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<(String, u64, Action)>> = OnceLock::new();
    static REACHED: AtomicU64 = AtomicU64::new(0);
    let armed = ARMED.get_or_init(|| {
        let value = std::env::var("PGOUTBOX_FAILPOINT").ok()?;
        let mut parts = value.split(':');
        let (step, n) = (parts.next()?, parts.next()?.parse().ok()?);
        let action = match parts.next() {
            None | Some("abort") => Action::Abort,
            Some("stop") => Action::Stop,
            Some(_) => return None,
        };
        Some((step.to_owned(), n, action))
    });
    let (step, n, action) = armed.as_ref()?;
    (step == name && REACHED.fetch_add(1, Ordering::Relaxed) + 1 == *n).then_some(*action)
}

pub fn fire(name: &str, action: Action) {
    eprintln!("failpoint {name} hit");
    match action {
        Action::Abort => std::process::abort(),
        // SAFETY: raise(3) with a valid signal number has no memory-safety
        // preconditions; the process stops here until a SIGCONT.
        Action::Stop => unsafe {
            libc::raise(libc::SIGSTOP);
        },
    }
}
