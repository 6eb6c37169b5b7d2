//! Everything PostgreSQL: positions, wire protocol, decoder, connections, catalog.
//!
//! Data flow: [`connection`] (transport, TLS, auth with [`channel_binding`]) → [`replication`] (CopyBoth
//! stream task, framing from [`protocol`]) → [`pgoutput`] (decoder) → caller.
//! [`catalog`] is a separate ordinary SQL connection for publication/slot queries;
//! [`source`] names the database, publication and tables a command works on;
//! [`failover`] the failover-slot rules of PostgreSQL 17+. Both connections walk a
//! multi-host list the same way, with [`host_walk`].

pub mod catalog;
pub mod channel_binding;
pub mod connection;
pub mod conninfo;
pub mod failover;
pub mod host_walk;
pub mod lsn;
pub mod pgoutput;
pub mod protocol;
pub mod replication;
pub mod source;
pub mod sql_client;
pub mod timestamp;
pub mod tls;
