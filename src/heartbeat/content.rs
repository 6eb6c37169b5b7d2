//! The content of a heartbeat message: which relay emitted it, its sequence number
//! and when.
//!
//! Every slot of a database sees every logical decoding message of that database, so
//! the content says whose heartbeat it is: the slot and the emitting process. It is
//! a small JSON object, readable with `pg_logical_slot_peek_binary_changes` when
//! debugging:
//!
//! ```text
//! {"v":1,"slot":"pgoutbox","relay":"4242-18c3f2a9","seq":17,"unix_ms":1764614400123,"mono_us":95012345}
//! ```
//!
//! `mono_us` is the emitter's monotonic clock ([`crate::metrics::heartbeat::mono_us`]):
//! meaningful to the process that wrote it only, which is the only one that times it.
//! `unix_ms` is for people reading the WAL.
//!
//! Invariant: parsing never panics; content that is not such an object is an error
//! (the relay counts it as foreign, never as its own).

use serde::{Deserialize, Serialize};

/// The one version of the content this relay writes and reads.
const VERSION: u32 = 1;

/// One heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Beat {
    /// Content version.
    pub v: u32,
    /// The emitting relay's slot.
    pub slot: String,
    /// The emitting process ([`crate::metrics::heartbeat::Identity::relay`]).
    pub relay: String,
    /// Per-process sequence number, from 1.
    pub seq: u64,
    /// Wall-clock emit time, ms since the Unix epoch (for people).
    pub unix_ms: i64,
    /// Monotonic emit time of the emitting process, µs.
    pub mono_us: u64,
}

/// Content that is not a heartbeat this relay can read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContentError {
    /// Not a JSON object with the heartbeat's fields.
    #[error("heartbeat content is not a pgoutbox heartbeat object")]
    Json(#[source] serde_json::Error),
    /// Written by another version of pgoutbox.
    #[error("heartbeat content version {0} (this relay reads version {VERSION})")]
    Version(u32),
}

impl Beat {
    /// A heartbeat of `slot` and `relay` numbered `seq`, emitted now.
    pub fn new(slot: &str, relay: &str, seq: u64, mono_us: u64) -> Self {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Self {
            v: VERSION,
            slot: slot.to_owned(),
            relay: relay.to_owned(),
            seq,
            unix_ms,
            mono_us,
        }
    }

    /// The message content.
    pub fn to_content(&self) -> String {
        // A struct of strings and numbers always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Read a message content.
    pub fn parse(content: &[u8]) -> Result<Self, ContentError> {
        let beat: Beat = serde_json::from_slice(content).map_err(ContentError::Json)?;
        if beat.v != VERSION {
            return Err(ContentError::Version(beat.v));
        }
        Ok(beat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let beat = Beat::new("orders_relay", "42-abc", 7, 123_456);
        let content = beat.to_content();
        assert!(
            content.starts_with(r#"{"v":1,"slot":"orders_relay","relay":"42-abc","seq":7,"#),
            "{content}"
        );
        assert_eq!(Beat::parse(content.as_bytes()).unwrap(), beat);
        assert!(beat.unix_ms > 1_600_000_000_000, "a wall-clock time in ms");
    }

    #[test]
    fn anything_else_is_an_error_never_a_panic() {
        for bad in [
            &b""[..],
            b"hello",
            b"{}",
            b"[1,2]",
            b"\xff\xfe",
            br#"{"v":1,"slot":"s","relay":"r","seq":-1,"unix_ms":0,"mono_us":0}"#,
            br#"{"v":1,"slot":7,"relay":"r","seq":1,"unix_ms":0,"mono_us":0}"#,
        ] {
            assert!(
                matches!(Beat::parse(bad), Err(ContentError::Json(_))),
                "{bad:?}"
            );
        }
        let future = br#"{"v":2,"slot":"s","relay":"r","seq":1,"unix_ms":0,"mono_us":0}"#;
        let err = Beat::parse(future).unwrap_err();
        assert!(matches!(err, ContentError::Version(2)));
        assert_eq!(
            err.to_string(),
            "heartbeat content version 2 (this relay reads version 1)"
        );
    }

    #[test]
    fn unknown_fields_are_tolerated() {
        let later = br#"{"v":1,"slot":"s","relay":"r","seq":1,"unix_ms":0,"mono_us":5,"host":"h"}"#;
        assert_eq!(Beat::parse(later).unwrap().mono_us, 5);
    }
}
