//! Which exit status an error ends the process with: the rules of the scheme in
//! [`crate::exit`], applied to an error's whole source chain.
//!
//! Invariants: the first matching rule wins, in the order of [`status_of`]; an error
//! nothing matches is 1 ([`Status::Failure`]); a [`Coded`] error keeps the status its
//! command chose, so the rule lives here and not in `main`. This module knows the
//! error types of every room (`config`, `run`, `replay`, …); nothing but `main` uses
//! it, which keeps the front (`cli` → `exit`) free of them.

use std::error::Error;

use crate::config::file::FileError;
use crate::config::ConfigError;
use crate::exit::{Coded, Status};
use crate::pipeline::PipelineError;
use crate::replay::ReplayError;
use crate::run::RunError;
use crate::safety::SafetyError;

/// The status for `err`, looking through its whole source chain.
pub fn status_of(err: &(dyn Error + 'static)) -> Status {
    if broken_pipe(err) {
        return Status::BrokenPipe;
    }
    for cause in chain(err) {
        if let Some(coded) = cause.downcast_ref::<Coded>() {
            return coded.status;
        }
        if cause.is::<ConfigError>() || cause.is::<FileError>() || cause.is::<clap::Error>() {
            return Status::Usage;
        }
        if let Some(run) = cause.downcast_ref::<RunError>() {
            return of_run(run);
        }
        if let Some(replay) = cause.downcast_ref::<ReplayError>() {
            return of_replay(replay);
        }
    }
    Status::Failure
}

fn of_run(err: &RunError) -> Status {
    match err {
        RunError::Option(_) => Status::Usage,
        RunError::Pipeline(PipelineError::Invalid(_) | PipelineError::UpdateOnOutbox { .. }) => {
            Status::Poison
        }
        RunError::Safety(SafetyError::State(_) | SafetyError::Catalog(_)) => Status::Failure,
        RunError::Safety(_)
        | RunError::Pipeline(
            PipelineError::PublicationChanged(_)
            | PipelineError::WatermarkMismatch(_)
            | PipelineError::Watermark(crate::kafka::watermark::WatermarkError::Lost { .. }),
        ) => Status::SlotSafety,
        _ => Status::Failure,
    }
}

fn of_replay(err: &ReplayError) -> Status {
    match err {
        ReplayError::Poison(_) => Status::Poison,
        ReplayError::UnsafeOption(_)
        | ReplayError::Time { .. }
        | ReplayError::Id { .. }
        | ReplayError::TimeColumn { .. }
        | ReplayError::MissingColumn { .. }
        | ReplayError::NoTable(_) => Status::Usage,
        _ => Status::Failure,
    }
}

/// Whether `err` comes from writing to a pipe whose reader went away.
pub fn broken_pipe(err: &(dyn Error + 'static)) -> bool {
    chain(err).any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn chain<'a>(err: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(err), |e| (*e).source())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("writing")]
    struct Writing(#[source] std::io::Error);

    #[test]
    fn a_closed_pipe_anywhere_in_the_chain_wins() {
        let err = Writing(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(status_of(&err), Status::BrokenPipe);
        let err = Writing(std::io::Error::other("disk full"));
        assert_eq!(status_of(&err), Status::Failure);
    }

    #[test]
    fn config_errors_are_usage_and_coded_errors_keep_their_status() {
        assert_eq!(status_of(&ConfigError::NoBrokers), Status::Usage);
        let err = Coded::new(Status::CheckFailed, "1 check(s) failed");
        assert_eq!(status_of(&err), Status::CheckFailed);
    }

    #[test]
    fn slot_safety_findings_differ_from_runtime_failures() {
        let finding = RunError::Safety(SafetyError::SlotMissing {
            slot: "s".into(),
            persisted: crate::pg::lsn::Lsn(16),
            path: "/state".into(),
            republish: "".into(),
        });
        assert_eq!(status_of(&finding), Status::SlotSafety);
        let stream = RunError::Pipeline(PipelineError::StreamClosed);
        assert_eq!(status_of(&stream), Status::Failure);
    }
}
