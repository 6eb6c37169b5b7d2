//! The PostgreSQL wire client: from a libpq connection string to an authenticated
//! session, for the replication connection and (through [`host_walk`] and [`tls`])
//! the SQL connection too.
//!
//! - [`conninfo`]: libpq connection strings (URL and keyword/value), password file,
//!   multi-host lists, TLS and keepalive settings; passwords never print.
//! - [`host_walk`]: which host of a list to use, as libpq (`target_session_attrs`,
//!   `load_balance_hosts`), for any connection kind.
//! - [`tls`]: rustls configuration per `sslmode`, direct and negotiated TLS.
//! - [`channel_binding`]: SCRAM-SHA-256-PLUS, bound to the server certificate.
//! - [`frame`]: sans-I/O backend message framing, bounded before allocating.
//! - [`connection`]: the transport, startup and authentication, simple queries;
//!   [`error`]: its errors, transient or definite, and the fixes auth failures need.
//!
//! Layering: this room knows nothing of replication. It never imports the
//! replication source, its sibling room (checked by the test
//! `client_never_imports_the_replication_source` in `pg/mod.rs`), and may use only
//! the leaves of `pg` (`names`, `lsn`, `timestamp`).

pub mod channel_binding;
pub mod connection;
pub mod conninfo;
pub mod error;
pub mod frame;
pub mod host_walk;
pub mod tls;
