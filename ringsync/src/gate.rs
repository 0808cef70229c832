//! A tiny client for the gate's work report (`GET /v1/work`), so `status`
//! and `serve` can show health and work counts (R-ST-1).
//!
//! Hand-written HTTP/1.0 over a tokio `TcpStream`: one request, the server
//! closes the connection after the body, no new HTTP client dependency.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::state::DrainState;
use crate::view::Health;

/// The path the gate serves its report on.
pub const WORK_PATH: &str = "/v1/work";
/// Default time allowed for the whole exchange.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(300);
/// Largest response accepted.
const MAX_RESPONSE: u64 = 4 << 20;

/// The gate's report: per instance id, health and work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateReport {
    /// Keyed by instance id.
    #[serde(default)]
    pub instances: HashMap<String, GateInstance>,
}

/// What the gate knows of one instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateInstance {
    /// Probe result.
    #[serde(default)]
    pub health: Health,
    /// Dialogs/transactions it still holds.
    #[serde(default)]
    pub work: Option<u64>,
}

/// Why the report could not be had.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// Nothing answered in time.
    #[error("gate at {addr} did not answer within {timeout:?}")]
    Timeout {
        /// Where we asked.
        addr: SocketAddr,
        /// How long we waited.
        timeout: Duration,
    },
    /// Connecting, writing or reading failed.
    #[error("gate at {addr}: {source}")]
    Io {
        /// Where we asked.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The answer was not a 200 with the expected JSON.
    #[error("gate at {addr}: bad response: {detail}")]
    BadResponse {
        /// Where we asked.
        addr: SocketAddr,
        /// What was wrong.
        detail: String,
    },
}

/// Fetches the gate's work report within `timeout`.
pub async fn fetch(addr: SocketAddr, timeout: Duration) -> Result<GateReport, GateError> {
    match tokio::time::timeout(timeout, exchange(addr)).await {
        Ok(r) => r,
        Err(_) => Err(GateError::Timeout { addr, timeout }),
    }
}

async fn exchange(addr: SocketAddr) -> Result<GateReport, GateError> {
    let io = |source| GateError::Io { addr, source };
    let mut stream = TcpStream::connect(addr).await.map_err(io)?;
    let req = format!(
        "GET {WORK_PATH} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.map_err(io)?;
    let mut buf = Vec::new();
    (&mut stream)
        .take(MAX_RESPONSE)
        .read_to_end(&mut buf)
        .await
        .map_err(io)?;
    parse_response(&buf).map_err(|detail| GateError::BadResponse { addr, detail })
}

/// Parses an HTTP/1.x response carrying a [`GateReport`]. Pure, for tests.
pub fn parse_response(buf: &[u8]) -> Result<GateReport, String> {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let mut parts = status.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(v), Some("200")) if v.starts_with("HTTP/1.") => {}
        _ => return Err(format!("status line `{status}`")),
    }
    let mut body = &buf[end + 4..];
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") && !value.eq_ignore_ascii_case("identity")
        {
            return Err(format!("unsupported transfer-encoding `{value}`"));
        }
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| format!("content-length `{value}`"))?;
            if n > body.len() {
                return Err("truncated body".into());
            }
            body = &body[..n];
        }
    }
    serde_json::from_slice(body).map_err(|e| format!("body: {e}"))
}

/// Applies a report to a drain state: health and work of every instance it names.
pub fn apply(report: &GateReport, state: &DrainState) {
    let view = state.view();
    for (id, inst) in &report.instances {
        if let Some(idx) = view.index_of(id) {
            state.set_health(idx, inst.health);
            if let Some(w) = inst.work {
                state.set_work(idx, w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_report() {
        let body = r#"{"instances":{"sg-a":{"health":"up","work":4},"sg-b":{}}}"#;
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}trailing",
            body.len()
        );
        let r = parse_response(resp.as_bytes());
        let r = r.unwrap();
        assert_eq!(r.instances["sg-a"].work, Some(4));
        assert_eq!(r.instances["sg-a"].health, Health::Up);
        assert_eq!(r.instances["sg-b"].health, Health::Unknown);
    }

    #[test]
    fn rejects_bad_responses() {
        assert!(parse_response(b"HTTP/1.0 404 Not Found\r\n\r\n{}").is_err());
        assert!(parse_response(b"HTTP/1.0 200 OK\r\n").is_err());
        assert!(parse_response(b"HTTP/1.0 200 OK\r\n\r\nnot json").is_err());
        assert!(parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )
        .is_err());
        assert!(parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 99\r\n\r\n{}").is_err());
    }

    #[tokio::test]
    async fn unreachable_gate_is_an_error_not_a_hang() {
        // Port 9 (discard) on loopback is normally closed: refused at once.
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let t0 = std::time::Instant::now();
        assert!(fetch(addr, DEFAULT_TIMEOUT).await.is_err());
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
}
