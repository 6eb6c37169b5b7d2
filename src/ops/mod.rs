//! Operator commands: preflight checks, slot status, teardown.
//!
//! Each submodule is a library function returning data (so tests and `--json` share
//! it); printing lives in `main.rs`.

pub mod check;
pub mod status;
pub mod teardown;
