//! Operator commands: preflight checks, slot status (with a running relay's window
//! and memory, [`relay`]), teardown, outbox cleanup.
//!
//! Each submodule is a library function returning data (so tests and `--json` share
//! it); printing lives in `main.rs`.

pub mod check;
pub mod cleanup;
pub mod relay;
pub mod status;
pub mod teardown;
