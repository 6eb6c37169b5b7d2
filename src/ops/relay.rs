//! What `pgoutbox status` reads from a running relay: the in-flight window's use
//! against its caps and the process's memory, scraped from the relay's `/metrics`
//! (its `--http-addr`), since only the relay process knows them.
//!
//! Owns the one GET `status` makes and the reading of those six series out of the
//! exposition ([`RelayFigures::parse`], pure, tested on text). Invariants: read-only
//! and bounded — one connection, [`TIMEOUT`] for all of it, at most [`MAX_BODY`]
//! bytes read; a relay that is not there (or an address that is not a relay) is a
//! status line, never an error, so `status` keeps working where no relay runs; a
//! series missing from the text is `None`, never 0.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::metrics::{
    DELIVERY, IN_FLIGHT_BYTES, IN_FLIGHT_MAX_BYTES, IN_FLIGHT_MAX_RECORDS, IN_FLIGHT_RECORDS,
    IN_FLIGHT_WINDOW_RECORDS, RESIDENT_MEMORY, RESIDENT_MEMORY_PEAK,
};
use crate::ops::status::human_bytes;

/// The whole scrape (connect, request, response) must finish within this.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// A larger response is not a relay's exposition (ours is a few kB per topic).
const MAX_BODY: u64 = 4 << 20;

/// The figures, each `None` when the series was not in the exposition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayFigures {
    /// Records awaiting a Kafka ack, and the cap (`--max-in-flight`).
    pub in_flight_records: Option<u64>,
    /// … the cap.
    pub max_records: Option<u64>,
    /// … the window in use under the cap.
    pub window_records: Option<u64>,
    /// Their bytes, and the cap (`--max-in-flight-bytes`).
    pub in_flight_bytes: Option<u64>,
    /// … the cap.
    pub max_bytes: Option<u64>,
    /// Resident memory now.
    pub resident_bytes: Option<u64>,
    /// Its peak since the relay started.
    pub resident_peak_bytes: Option<u64>,
    /// The delivery mode in force (`at-least-once`, `exactly-once`).
    pub delivery: Option<String>,
}

impl RelayFigures {
    /// The eight series out of a Prometheus text exposition.
    pub fn parse(text: &str) -> RelayFigures {
        let value = |name: &str| {
            text.lines()
                .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .find_map(|v| v.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(|v| v as u64)
        };
        RelayFigures {
            in_flight_records: value(IN_FLIGHT_RECORDS),
            max_records: value(IN_FLIGHT_MAX_RECORDS),
            window_records: value(IN_FLIGHT_WINDOW_RECORDS),
            in_flight_bytes: value(IN_FLIGHT_BYTES),
            max_bytes: value(IN_FLIGHT_MAX_BYTES),
            resident_bytes: value(RESIDENT_MEMORY),
            resident_peak_bytes: value(RESIDENT_MEMORY_PEAK),
            delivery: delivery_mode(text),
        }
    }

    /// Whether the text was a relay's at all.
    fn any(&self) -> bool {
        *self != RelayFigures::default()
    }
}

/// The mode whose `pgoutbox_delivery{mode="…"}` series is 1.
fn delivery_mode(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(DELIVERY)?.strip_prefix("{mode=\"")?;
        let (mode, value) = rest.split_once("\"} ")?;
        (value.trim() == "1").then(|| mode.to_owned())
    })
}

/// What `status` got from `addr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayStatus {
    /// The relay answered.
    Figures(RelayFigures),
    /// Nothing usable there (why, for the line).
    Unreachable(String),
}

/// GET `http://{addr}/metrics` and read the figures.
pub async fn read(addr: &str) -> RelayStatus {
    match tokio::time::timeout(TIMEOUT, get_metrics(addr)).await {
        Ok(Ok(text)) => {
            let figures = RelayFigures::parse(&text);
            if figures.any() {
                RelayStatus::Figures(figures)
            } else {
                RelayStatus::Unreachable("the answer holds no pgoutbox metrics".to_owned())
            }
        }
        Ok(Err(err)) => RelayStatus::Unreachable(err.to_string()),
        Err(_) => RelayStatus::Unreachable(format!("no answer within {TIMEOUT:?}")),
    }
}

async fn get_metrics(addr: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: pgoutbox\r\nConnection: close\r\n\r\n")
        .await?;
    let mut raw = Vec::new();
    stream.take(MAX_BODY).read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(std::io::Error::other("not an HTTP response"));
    };
    if !head.starts_with("HTTP/1.1 200") {
        let line = head.lines().next().unwrap_or_default();
        return Err(std::io::Error::other(format!("answered {line:?}")));
    }
    Ok(body.to_owned())
}

impl RelayStatus {
    /// Human-readable lines.
    pub fn render(&self, addr: &str) -> String {
        let figures = match self {
            RelayStatus::Unreachable(why) => {
                return format!(
                    "relay at {addr}: no metrics ({why}); give `status --http-addr` the relay's --http-addr\n"
                )
            }
            RelayStatus::Figures(f) => f,
        };
        let count = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        let size = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), human_bytes);
        let share = |used: Option<u64>, cap: Option<u64>| match (used, cap) {
            (Some(u), Some(c)) if c > 0 => format!(" ({:.0} %)", u as f64 * 100.0 / c as f64),
            _ => String::new(),
        };
        // Records against the window in use; the cap beside it when it is larger.
        let window = figures.window_records.or(figures.max_records);
        let cap = match (figures.max_records, window) {
            (Some(cap), Some(window)) if cap > window => format!(", cap {cap}"),
            _ => String::new(),
        };
        let lines = [
            format!("relay at {addr}:"),
            format!(
                "  in flight:            {} of {} records{}{cap}, {} of {}{}",
                count(figures.in_flight_records),
                count(window),
                share(figures.in_flight_records, window),
                size(figures.in_flight_bytes),
                size(figures.max_bytes),
                share(figures.in_flight_bytes, figures.max_bytes),
            ),
            format!(
                "  memory (RSS):         {} (peak {})",
                size(figures.resident_bytes),
                size(figures.resident_peak_bytes)
            ),
            format!(
                "  delivery:             {}",
                figures.delivery.as_deref().unwrap_or("-")
            ),
        ];
        lines.join("\n") + "\n"
    }

    /// Machine-readable form, sizes in bytes.
    pub fn to_json(&self, addr: &str) -> serde_json::Value {
        match self {
            RelayStatus::Unreachable(why) => serde_json::json!({
                "http_addr": addr,
                "reachable": false,
                "error": why,
            }),
            RelayStatus::Figures(f) => serde_json::json!({
                "http_addr": addr,
                "reachable": true,
                "in_flight_records": f.in_flight_records,
                "max_in_flight_records": f.max_records,
                "window_records": f.window_records,
                "in_flight_bytes": f.in_flight_bytes,
                "max_in_flight_bytes": f.max_bytes,
                "resident_memory_bytes": f.resident_bytes,
                "resident_memory_peak_bytes": f.resident_peak_bytes,
                "delivery": f.delivery,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP pgoutbox_in_flight_records Records awaiting a Kafka ack.\n\
        # TYPE pgoutbox_in_flight_records gauge\n\
        pgoutbox_in_flight_records 2500\n\
        pgoutbox_in_flight_bytes 1048576\n\
        pgoutbox_in_flight_max_records 10000\n\
        pgoutbox_in_flight_window_records 3000\n\
        pgoutbox_in_flight_max_bytes 67108864\n\
        process_resident_memory_bytes 23068672\n\
        pgoutbox_resident_memory_peak_bytes 25165824\n\
        pgoutbox_delivery{mode=\"at-least-once\"} 0\n\
        pgoutbox_delivery{mode=\"exactly-once\"} 1\n";

    #[test]
    fn reads_the_eight_series_and_nothing_else() {
        let f = RelayFigures::parse(TEXT);
        assert_eq!(
            f,
            RelayFigures {
                in_flight_records: Some(2500),
                max_records: Some(10_000),
                window_records: Some(3_000),
                in_flight_bytes: Some(1 << 20),
                max_bytes: Some(64 << 20),
                resident_bytes: Some(22 << 20),
                resident_peak_bytes: Some(24 << 20),
                delivery: Some("exactly-once".into()),
            }
        );
        // A prefix of another series' name is not that series.
        let other = RelayFigures::parse("pgoutbox_in_flight_records_total 7\n");
        assert_eq!(other, RelayFigures::default());
    }

    #[test]
    fn renders_use_against_the_caps() {
        let text = RelayStatus::Figures(RelayFigures::parse(TEXT)).render("127.0.0.1:10737");
        assert_eq!(
            text,
            "relay at 127.0.0.1:10737:\n  \
             in flight:            2500 of 3000 records (83 %), cap 10000, 1.0 MiB of 64.0 MiB (2 %)\n  \
             memory (RSS):         22.0 MiB (peak 24.0 MiB)\n  \
             delivery:             exactly-once\n"
        );
        assert_eq!(
            RelayStatus::Figures(RelayFigures::parse(TEXT)).to_json("a:1")["delivery"],
            "exactly-once"
        );
        let json = RelayStatus::Figures(RelayFigures::parse(TEXT)).to_json("a:1");
        assert_eq!(json["max_in_flight_records"], 10_000);
        assert_eq!(json["window_records"], 3_000);
        assert_eq!(json["resident_memory_peak_bytes"], 24 << 20);
        let missing = RelayStatus::Unreachable("connection refused".into());
        assert!(missing
            .render("a:1")
            .starts_with("relay at a:1: no metrics (connection refused)"));
        assert_eq!(missing.to_json("a:1")["reachable"], false);
    }

    #[tokio::test]
    async fn nothing_listening_is_a_status_not_an_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        assert!(matches!(read(&addr).await, RelayStatus::Unreachable(_)));
    }
}
