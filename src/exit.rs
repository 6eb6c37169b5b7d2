//! The exit statuses of the `pgoutbox` binary: one scheme for every command.
//!
//! Owns the numbers and their meaning (printed by `--help` and listed in the
//! README); which error ends with which status is [`crate::failure`]'s rule. The
//! scheme answers the question a supervisor asks — *would starting again help?*:
//!
//! ```text
//!   0  done (run and tail: also a stop on SIGTERM/SIGINT after draining)
//!   1  runtime failure: PostgreSQL or Kafka refused or failed, an I/O error
//!   2  usage or configuration error: nothing was started
//!   3  check failed: `check` found a problem; `status`: the slot is missing or lost
//!   4  the relay stopped before a row it will not skip (poison row, --on-update fail)
//!   5  the relay refused a slot or publication changed, dropped or lost behind its back,
//!      or an exactly-once watermark that cannot belong to its stream
//! 141  stdout was closed by its reader (`| head`): the conventional 128 + SIGPIPE
//! ```
//!
//! `run` retries lost connections itself, so it exits non-zero only on what a plain
//! restart does not fix: 2, 4 and 5 need an operator, which is why they differ from
//! 1 (systemd: `RestartPreventExitStatus=2 4 5`). The numbers follow the Unix
//! custom of small codes with 2 for usage (as clap, grep and diff use) rather than
//! BSD's sysexits 64–78, which few Linux tools or supervisors know.
//!
//! A command that decides a status itself (a failed check) says so with [`Coded`].
//!
//! A leaf of the front: `cli` prints [`help`] and imports this module, so it imports
//! nothing of the crate (checked by `layering::tests::front_modules_form_no_cycle`).

/// An exit status of the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// The command did what it was asked.
    Success,
    /// A runtime failure (database, broker, I/O).
    Failure,
    /// A usage or configuration error.
    Usage,
    /// `check` found a problem, or `status` found the slot missing or lost.
    CheckFailed,
    /// The relay stopped before a row it will not skip.
    Poison,
    /// The relay refused a slot that moved behind its back.
    SlotSafety,
    /// The reader of stdout went away.
    BrokenPipe,
}

impl Status {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Status::Success => 0,
            Status::Failure => 1,
            Status::Usage => 2,
            Status::CheckFailed => 3,
            Status::Poison => 4,
            Status::SlotSafety => 5,
            Status::BrokenPipe => 141,
        }
    }

    /// Every status, in code order.
    pub const ALL: [Status; 7] = [
        Status::Success,
        Status::Failure,
        Status::Usage,
        Status::CheckFailed,
        Status::Poison,
        Status::SlotSafety,
        Status::BrokenPipe,
    ];

    /// The statuses of a `run` that a restart would meet again: a supervisor should
    /// not restart on them (systemd's `RestartPreventExitStatus=`).
    pub const NEEDS_OPERATOR: [Status; 3] = [Status::Usage, Status::Poison, Status::SlotSafety];

    /// What the status means, one line.
    pub fn meaning(self) -> &'static str {
        match self {
            Status::Success => "done (`run`, `tail`: also when SIGTERM/SIGINT stopped them)",
            Status::Failure => {
                "runtime failure: PostgreSQL or Kafka refused or failed, an I/O error"
            }
            Status::Usage => "usage or configuration error (flag, environment, config file)",
            Status::CheckFailed => "`check` found a problem; `status`: the slot is missing or lost",
            Status::Poison => {
                "`run` or `replay` stopped before a row it will not skip (poison row, --on-update fail)"
            }
            Status::SlotSafety => {
                "`run` refused a slot or publication changed behind its back (see slot safety)"
            }
            Status::BrokenPipe => {
                "stdout was closed by its reader (`| head`), as if killed by SIGPIPE"
            }
        }
    }
}

/// The exit-status table for `--help` and the README.
pub fn help() -> String {
    let mut text = String::from("Exit status:\n");
    for status in Status::ALL {
        text.push_str(&format!("  {:>3}  {}\n", status.code(), status.meaning()));
    }
    text.push_str(
        "  Other commands stopped by a signal end killed by it (130: SIGINT, 143: SIGTERM).\n",
    );
    text
}

/// An error whose status the command decided (a failed check, a missing slot).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Coded {
    /// The status to exit with.
    pub status: Status,
    /// What happened, with the fix.
    pub message: String,
}

impl Coded {
    /// An error with `status`.
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Coded {
            status,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_documented() {
        let mut codes: Vec<u8> = Status::ALL.iter().map(|s| s.code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), Status::ALL.len());
        let help = help();
        for status in Status::ALL {
            assert!(help.contains(&format!("{:>3}  ", status.code())), "{help}");
        }
    }
}
