//! Everything PostgreSQL, in two rooms and three leaves.
//!
//! ```text
//!  source/   the replication source: streaming connection, CopyData payloads,
//!     │      pgoutput decoder, catalog SQL, failover slots, SourceConfig
//!     ▼
//!  client/   the wire client: conninfo, host walk, TLS, SCRAM channel binding,
//!     │      backend framing, the authenticated connection
//!     ▼
//!  names · lsn · timestamp   value types, shared with the rest of the relay
//! ```
//!
//! Data flow: [`client::connection`] (transport, TLS, auth with
//! [`client::channel_binding`], frames from [`client::frame`]) →
//! [`source::replication`] (CopyBoth stream task, payloads from [`source::protocol`])
//! → [`source::pgoutput`] (decoder) → caller. [`source::catalog`] runs on a separate
//! ordinary SQL connection ([`source::sql_client`]) for publication/slot queries.
//! Both connections walk a multi-host list the same way, with [`client::host_walk`].
//!
//! Layering (arrows point the only way a `use` may go, checked by the tests below,
//! which read the source files): `source` may use `client` and the leaves; `client`
//! uses only the leaves, never `source`; the leaves ([`names`], [`lsn`],
//! [`timestamp`]) use nothing of `pg`.

pub mod client;
pub mod lsn;
pub mod names;
pub mod source;
pub mod timestamp;

#[cfg(test)]
mod tests {
    use crate::layering::lines_mentioning;

    /// Every way a file under `pg/` could name the replication source: the crate
    /// path, a relative path from any depth, and a grouped `pg::{…}` import that
    /// would hide it.
    const SOURCE: &[&str] = &["pg::source", "super::source", "pg::{"];

    #[test]
    fn client_never_imports_the_replication_source() {
        let hits = lines_mentioning("pg/client", SOURCE);
        assert!(hits.is_empty(), "client → source:\n{}", hits.join("\n"));
    }

    #[test]
    fn leaves_import_nothing_of_pg() {
        let pg = &[
            "crate::pg",
            "super::client",
            "super::source",
            "pgoutbox::pg",
        ];
        for leaf in ["pg/names.rs", "pg/lsn.rs", "pg/timestamp.rs"] {
            let hits = lines_mentioning(leaf, pg);
            assert!(hits.is_empty(), "leaf {leaf} → pg:\n{}", hits.join("\n"));
        }
    }
}
