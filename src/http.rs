//! The metrics and health endpoint: `/metrics`, `/livez` (alias `/healthz`), `/readyz`.
//!
//! Owns a deliberately tiny HTTP/1.1 responder (GET only, one request per
//! connection, 8 KiB request limit) so the relay carries no web framework. It binds
//! loopback by default; exposing it is an explicit `--http-addr 0.0.0.0:…`.
//! Invariants: a slow or malicious client cannot block the relay (each connection
//! is its own task with a read timeout); `/livez` is 200 while the process runs — a
//! standby waiting for the slot is alive, so a liveness probe never restarts it;
//! `/readyz` is 200 while the instance does its part (an active relay with both
//! connections up, or a standby able to take over; see [`crate::metrics::role`]), and
//! its body names the role either way, and a stall detected since the last ack
//! (`stalled: …`) makes an active relay not ready, and so does a stale end-to-end
//! heartbeat (`heartbeat: stale: …`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::task::Tasks;

/// How long one connection may take to send its request and read the answer.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on --http-addr {addr}: {error}; fix: choose a free address or port")]
pub struct BindError {
    addr: SocketAddr,
    /// Shown in the message, before the fix (so not a `source`).
    error: std::io::Error,
}

/// Bind `addr` and serve until `shutdown`, as a task of `tasks` (each connection is
/// a task the server joins before it ends). Returns the bound address (useful with
/// port 0).
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tasks: &mut Tasks,
) -> Result<SocketAddr, BindError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|error| BindError { addr, error })?;
    let local = listener
        .local_addr()
        .map_err(|error| BindError { addr, error })?;
    tracing::info!(addr = %local, "serving /metrics, /livez, /readyz");
    tasks.spawn("http", accept_loop(listener, metrics, shutdown));
    Ok(local)
}

/// Accept until `shutdown`, then wait for the connections still being answered.
async fn accept_loop(listener: TcpListener, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    let mut connections = Tasks::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    let metrics = metrics.clone();
                    connections.spawn("http-connection", async move {
                        let _ = tokio::time::timeout(RESPONSE_TIMEOUT, respond(stream, &metrics)).await;
                    });
                }
            }
        }
    }
    // Every connection ends within its own timeout.
    connections.join(RESPONSE_TIMEOUT * 2).await;
}

async fn respond(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let request = String::from_utf8_lossy(&buf);
    let mut parts = request.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
        ("GET", "/livez" | "/healthz") => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", "/readyz") if metrics.ready() => ("200 OK", "text/plain", metrics.readiness()),
        ("GET", "/readyz") => ("503 Service Unavailable", "text/plain", metrics.readiness()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "try /metrics, /livez or /readyz\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Role;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn endpoints_answer() {
        let metrics = Arc::new(Metrics::default());
        let token = CancellationToken::new();
        let mut tasks = Tasks::new();
        let addr = serve(
            "127.0.0.1:0".parse().unwrap(),
            metrics.clone(),
            token.clone(),
            &mut tasks,
        )
        .await
        .unwrap();
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/livez").await.starts_with("HTTP/1.1 200"));
        let starting = get(addr, "/readyz").await;
        assert!(starting.starts_with("HTTP/1.1 503"), "{starting}");
        assert!(
            starting.ends_with("role: connecting\nreplication: down\nproducer: down\n"),
            "{starting}"
        );
        metrics.set_producer_connected(true);
        metrics.set_role(Role::Standby);
        let standby = get(addr, "/readyz").await;
        assert!(standby.starts_with("HTTP/1.1 200"), "{standby}");
        assert!(standby.contains("role: standby\n"), "{standby}");
        assert!(get(addr, "/livez").await.starts_with("HTTP/1.1 200"));
        metrics.set_role(Role::Active);
        assert!(
            get(addr, "/readyz").await.starts_with("HTTP/1.1 503"),
            "active, replication down"
        );
        metrics.set_replication_connected(true);
        let active = get(addr, "/readyz").await;
        assert!(active.starts_with("HTTP/1.1 200"), "{active}");
        assert!(
            active.contains("role: active\nreplication: connected\n"),
            "{active}"
        );
        assert!(get(addr, "/metrics")
            .await
            .contains("outbox_relay_latency_seconds_count 0"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        token.cancel();
        tasks.join(Duration::from_secs(60)).await;
        assert!(
            tasks_ended(addr).await,
            "the listener still accepts after join"
        );
    }

    /// Whether nothing listens on `addr` any more.
    async fn tasks_ended(addr: SocketAddr) -> bool {
        TcpStream::connect(addr).await.is_err()
    }
}
