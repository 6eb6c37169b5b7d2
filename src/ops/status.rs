//! `pgoutbox status`: where the relay's slot stands against the server's WAL.
//!
//! Owns the one query that reads the slot and the current WAL position together (so
//! the lag is computed from a single snapshot) and the human rendering of byte
//! counts. Invariants: read-only; a missing slot is a status (`exists = false`), not
//! an error; lags never go negative (a slot ahead of the position read counts as 0).
//!
//! On a standby the "current" position is the last replayed one
//! (`pg_last_wal_replay_lsn()`), since `pg_current_wal_lsn()` fails during recovery.
//! Failover properties (the slot's `failover` and `synced`, the server's
//! `synchronized_standby_slots`) exist since PostgreSQL 17 and are `None` before.

use crate::pg::client::conninfo::ConnInfo;
use crate::pg::lsn::Lsn;
use crate::pg::source::catalog::{self, CatalogError};
use crate::pg::source::SourceConfig;

/// What the relay reads, for `status`: the mode (tables, or `--messages-only`),
/// the tables and the message prefixes.
pub fn source_json(source: &SourceConfig) -> serde_json::Value {
    let tables: Vec<String> = source.tables.iter().map(ToString::to_string).collect();
    serde_json::json!({
        "mode": if source.messages_only { "messages-only" } else { "tables" },
        "publication": source.publication,
        "tables": tables,
        "message_prefixes": source.message_prefixes,
    })
}

/// The human line for [`source_json`].
pub fn source_line(source: &SourceConfig) -> String {
    let prefixes = match source.message_prefixes.is_empty() {
        true => "off".to_owned(),
        false => format!("prefix {}", source.message_prefixes.join(", ")),
    };
    if source.messages_only {
        return format!(
            "source: messages only ({prefixes}; PostgreSQL 14+), no outbox table expected; publication {} (empty)\n",
            source.publication
        );
    }
    let tables: Vec<String> = source.tables.iter().map(ToString::to_string).collect();
    format!(
        "source: outbox table(s) {} through publication {}; logical decoding messages: {prefixes}\n",
        tables.join(", "),
        source.publication
    )
}

/// The slot and the WAL position, read together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotStatus {
    /// Slot name.
    pub slot: String,
    /// Whether the slot exists (every slot field below is `None` when not).
    pub exists: bool,
    /// The walsender streaming from it, if any.
    pub active_pid: Option<i32>,
    /// Oldest WAL the slot makes the server keep.
    pub restart_lsn: Option<Lsn>,
    /// What the relay confirmed as delivered.
    pub confirmed_flush_lsn: Option<Lsn>,
    /// The server's current WAL write position (replay position on a standby).
    pub current_wal_lsn: Lsn,
    /// WAL not yet confirmed: current − confirmed_flush.
    pub lag_bytes: Option<u64>,
    /// WAL the slot keeps on disk: current − restart_lsn.
    pub retained_bytes: Option<u64>,
    /// `reserved`, `extended`, `unreserved` or `lost`.
    pub wal_status: Option<String>,
    /// WAL that may still be written before the slot is lost; `None` when
    /// `max_slot_wal_keep_size = -1` (unlimited) or the slot is already lost.
    pub safe_wal_size: Option<i64>,
    /// Whether the slot is a failover slot (PostgreSQL 17+).
    pub failover: Option<bool>,
    /// Whether the slot is a synchronized copy from a primary (PostgreSQL 17+).
    pub synced: Option<bool>,
    /// The server's `synchronized_standby_slots` (PostgreSQL 17+).
    pub synchronized_standby_slots: Option<String>,
}

/// Read the status of `slot`.
pub async fn status(conninfo: &ConnInfo, slot: &str) -> Result<SlotStatus, CatalogError> {
    let client = catalog::connect(conninfo).await?;
    let row = client
        .query_one(
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                          ELSE pg_current_wal_lsn() END)::text, \
                    s.slot_name IS NOT NULL, s.active_pid, s.restart_lsn::text, \
                    s.confirmed_flush_lsn::text, s.wal_status, s.safe_wal_size, \
                    (to_jsonb(s) ->> 'failover')::bool, (to_jsonb(s) ->> 'synced')::bool, \
                    current_setting('synchronized_standby_slots', true) \
             FROM (SELECT 1) AS one \
             LEFT JOIN pg_replication_slots s ON s.slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|error| CatalogError::Query {
            context: format!("reading the status of replication slot {slot}"),
            error,
        })?;
    let lsn = |v: Option<String>| v.and_then(|s| s.parse::<Lsn>().ok());
    // NULL only on a standby that has not replayed anything yet.
    let current_wal_lsn = lsn(row.get(0)).unwrap_or_default();
    let restart_lsn = lsn(row.get(3));
    let confirmed_flush_lsn = lsn(row.get(4));
    Ok(SlotStatus {
        slot: slot.to_owned(),
        exists: row.get(1),
        active_pid: row.get(2),
        restart_lsn,
        confirmed_flush_lsn,
        current_wal_lsn,
        lag_bytes: confirmed_flush_lsn.map(|c| current_wal_lsn.bytes_since(c)),
        retained_bytes: restart_lsn.map(|r| current_wal_lsn.bytes_since(r)),
        wal_status: row.get(5),
        safe_wal_size: row.get(6),
        failover: row.get(7),
        synced: row.get(8),
        synchronized_standby_slots: row.get(9),
    })
}

impl SlotStatus {
    /// Machine-readable form; LSNs as `X/Y` text, sizes in bytes.
    pub fn to_json(&self) -> serde_json::Value {
        let lsn = |l: Option<Lsn>| l.map(|l| l.to_string());
        serde_json::json!({
            "slot": self.slot,
            "exists": self.exists,
            "active": self.active_pid.is_some(),
            "active_pid": self.active_pid,
            "restart_lsn": lsn(self.restart_lsn),
            "confirmed_flush_lsn": lsn(self.confirmed_flush_lsn),
            "current_wal_lsn": self.current_wal_lsn.to_string(),
            "lag_bytes": self.lag_bytes,
            "retained_bytes": self.retained_bytes,
            "wal_status": self.wal_status,
            "safe_wal_size": self.safe_wal_size,
            "failover": self.failover,
            "synced": self.synced,
            "synchronized_standby_slots": self.synchronized_standby_slots,
        })
    }

    /// Human-readable lines.
    pub fn render(&self) -> String {
        if !self.exists {
            return format!(
                "slot {}: does not exist (current WAL {}); `pgoutbox setup` or `run` creates it\n",
                self.slot, self.current_wal_lsn
            );
        }
        let lsn = |l: Option<Lsn>| l.map_or_else(|| "-".to_owned(), |l| l.to_string());
        let bytes = |b: Option<u64>| b.map_or_else(|| "-".to_owned(), with_human);
        let state = match self.active_pid {
            Some(pid) => format!("active (walsender pid {pid})"),
            None => "inactive".to_owned(),
        };
        let safe = match (self.safe_wal_size, self.wal_status.as_deref()) {
            (_, Some("lost")) => "none: the slot is lost".to_owned(),
            (None, _) => "unlimited (max_slot_wal_keep_size = -1)".to_owned(),
            (Some(n), _) if n < 0 => format!("{n} bytes (past the limit)"),
            (Some(n), _) => format!("{} before the slot is lost", with_human(n.unsigned_abs())),
        };
        let lines = [
            format!("slot {}: {state}", self.slot),
            format!("  current WAL:          {}", self.current_wal_lsn),
            format!("  confirmed_flush_lsn:  {}", lsn(self.confirmed_flush_lsn)),
            format!("  lag:                  {}", bytes(self.lag_bytes)),
            format!("  restart_lsn:          {}", lsn(self.restart_lsn)),
            format!("  WAL retained:         {}", bytes(self.retained_bytes)),
            format!(
                "  wal_status:           {}",
                self.wal_status.as_deref().unwrap_or("-")
            ),
            format!("  safe_wal_size:        {safe}"),
            format!("  failover:             {}", self.failover_text()),
        ];
        lines.join("\n") + "\n"
    }

    /// The failover line: the slot's property and the primary's setting.
    fn failover_text(&self) -> String {
        let Some(failover) = self.failover else {
            return "not available (PostgreSQL 16 or older: the slot exists only on this server)"
                .to_owned();
        };
        let slot = match (failover, self.synced) {
            (true, Some(true)) => "yes (a synchronized copy)",
            (true, _) => "yes",
            (false, _) => "no (`pgoutbox check` shows how to enable it)",
        };
        let standby = match self.synchronized_standby_slots.as_deref().map(str::trim) {
            Some(v) if !v.is_empty() => format!("synchronized_standby_slots = '{v}'"),
            _ => "synchronized_standby_slots is empty".to_owned(),
        };
        format!("{slot}; {standby}")
    }
}

/// `12.3 MiB (12897280 bytes)`, or `512 bytes` below 1 KiB.
fn with_human(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else {
        format!("{} ({n} bytes)", human_bytes(n))
    }
}

/// A byte count in binary units with one decimal: `0 B`, `512 B`, `1.0 KiB`,
/// `12.3 MiB`, … up to EiB.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    // Compare the rounded value, so 1048575 bytes reads "1.0 MiB", not "1024.0 KiB".
    while (value * 10.0).round() / 10.0 >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1), "1 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12_897_485), "12.3 MiB");
        assert_eq!(human_bytes(1024 * 1024 - 1), "1.0 MiB");
        assert_eq!(human_bytes(5 * 1024 * 1024 * 1024), "5.0 GiB");
        assert_eq!(human_bytes(1 << 40), "1.0 TiB");
        assert_eq!(human_bytes(1 << 50), "1.0 PiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }

    fn sample() -> SlotStatus {
        SlotStatus {
            slot: "pgoutbox".into(),
            exists: true,
            active_pid: Some(4242),
            restart_lsn: Some("0/1000000".parse().unwrap()),
            confirmed_flush_lsn: Some("0/1800000".parse().unwrap()),
            current_wal_lsn: "0/2000000".parse().unwrap(),
            lag_bytes: Some(0x800000),
            retained_bytes: Some(0x1000000),
            wal_status: Some("reserved".into()),
            safe_wal_size: None,
            failover: None,
            synced: None,
            synchronized_standby_slots: None,
        }
    }

    #[test]
    fn render_lines() {
        let text = sample().render();
        assert!(
            text.starts_with("slot pgoutbox: active (walsender pid 4242)\n"),
            "{text}"
        );
        assert!(
            text.contains("lag:                  8.0 MiB (8388608 bytes)\n"),
            "{text}"
        );
        assert!(
            text.contains("WAL retained:         16.0 MiB (16777216 bytes)\n"),
            "{text}"
        );
        assert!(text.contains("confirmed_flush_lsn:  0/1800000\n"), "{text}");
        assert!(text.contains("safe_wal_size:        unlimited"), "{text}");
        let missing = SlotStatus {
            exists: false,
            active_pid: None,
            restart_lsn: None,
            confirmed_flush_lsn: None,
            lag_bytes: None,
            retained_bytes: None,
            wal_status: None,
            ..sample()
        };
        assert!(missing.render().contains("does not exist"));
        let bounded = SlotStatus {
            safe_wal_size: Some(3 << 30),
            ..sample()
        };
        assert!(bounded
            .render()
            .contains("3.0 GiB (3221225472 bytes) before the slot is lost"));
    }

    #[test]
    fn failover_line_per_version() {
        let line = |s: SlotStatus| {
            s.render()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("  failover:             ")
                        .map(str::to_owned)
                })
                .unwrap()
        };
        assert!(line(sample()).starts_with("not available (PostgreSQL 16 or older"));
        let on = SlotStatus {
            failover: Some(true),
            synced: Some(false),
            synchronized_standby_slots: Some("sb1".into()),
            ..sample()
        };
        assert_eq!(line(on.clone()), "yes; synchronized_standby_slots = 'sb1'");
        let copy = SlotStatus {
            synced: Some(true),
            synchronized_standby_slots: Some(String::new()),
            ..on
        };
        assert_eq!(
            line(copy.clone()),
            "yes (a synchronized copy); synchronized_standby_slots is empty"
        );
        let off = SlotStatus {
            failover: Some(false),
            ..copy
        };
        assert!(line(off.clone()).starts_with("no (`pgoutbox check`"));
        assert_eq!(off.to_json()["failover"], false);
    }

    #[test]
    fn json_fields() {
        let json = sample().to_json();
        assert_eq!(json["slot"], "pgoutbox");
        assert_eq!(json["active"], true);
        assert_eq!(json["active_pid"], 4242);
        assert_eq!(json["confirmed_flush_lsn"], "0/1800000");
        assert_eq!(json["current_wal_lsn"], "0/2000000");
        assert_eq!(json["lag_bytes"], 0x800000);
        assert_eq!(json["safe_wal_size"], serde_json::Value::Null);
    }
}
