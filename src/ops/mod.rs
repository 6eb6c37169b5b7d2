//! Operator commands: preflight checks, slot status, teardown, outbox cleanup.
//!
//! Each submodule is a library function returning data (so tests and `--json` share
//! it); printing lives in `main.rs`.

pub mod check;
pub mod cleanup;
pub mod status;
pub mod teardown;
