//! The worker's HTTP endpoint for orchestrators (`work --metrics-addr`): `GET /healthz` answers
//! 200 while the worker runs and 503 once it is stopping (so a Kubernetes probe sees the
//! shutdown), `GET /metrics` the process's counters in Prometheus text format, and the ledger's
//! `deletion_overdue_oldest_seconds` gauge (one read of the due index per scrape). Deliberately
//! tiny: one request per connection, no keep-alive, nothing else served.

use std::sync::Arc;
use tilegate_core::ledger::LedgerTable;
use tilegate_core::metrics::{self as m, Counters, prometheus_text};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Largest request head read.
const MAX_REQUEST: usize = 8 * 1024;

/// Serve until the process exits.
pub async fn serve(
    listener: TcpListener,
    counters: Arc<Counters>,
    ledger: Arc<dyn LedgerTable>,
    stopping: watch::Receiver<bool>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let counters = counters.clone();
        let ledger = ledger.clone();
        let stopping = *stopping.borrow();
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &counters, &*ledger, stopping).await {
                tracing::debug!(error = %e, "metrics endpoint: request failed");
            }
        });
    }
}

/// The ledger's gauges, in Prometheus text; nothing if the ledger cannot be read (the counters
/// are still served).
async fn ledger_gauges(ledger: &dyn LedgerTable) -> String {
    let now = tilegate_core::now_millis();
    match ledger.oldest_due(now).await {
        Ok(oldest) => m::gauge_text(
            m::DELETION_OVERDUE_OLDEST,
            "Age of the oldest ledger row past its deadline and not yet deleted (0: none).",
            oldest.map_or(0, |d| u64::try_from((now - d) / 1000).unwrap_or(0)),
        ),
        Err(e) => {
            tracing::warn!(error = %tilegate_core::error::chain(&e), "metrics: ledger gauge unavailable");
            String::new()
        }
    }
}

async fn answer(
    mut stream: TcpStream,
    counters: &Counters,
    ledger: &dyn LedgerTable,
    stopping: bool,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or_default().split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET", "/healthz") if stopping => (
            "503 Service Unavailable",
            "text/plain",
            "stopping\n".to_owned(),
        ),
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4",
            prometheus_text(&counters.snapshot()) + &ledger_gauges(ledger).await,
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "serves /healthz and /metrics\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
