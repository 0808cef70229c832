//! The admin HTTP endpoint: `/v1/status` (media-ctl's own view),
//! `/v1/work` (the site-wide work report type `ringsync status` sums),
//! `/metrics` (Prometheus) and `/readyz`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use ringsync::work::WORK_PATH;

use crate::controller::Controller;
use crate::status::Assign;

/// The path of media-ctl's status.
pub const STATUS_PATH: &str = "/v1/status";

#[derive(Clone)]
struct AdminState {
    controller: Arc<Controller>,
    node: String,
    stopping: Arc<AtomicBool>,
}

/// The admin router. `node` names this media-ctl in reports.
pub fn router(
    controller: Arc<Controller>,
    node: String,
    prometheus: Option<PrometheusHandle>,
    stopping: Arc<AtomicBool>,
) -> Router {
    // The per-mg gauges are read from the controller's state when scraped.
    let gauges = controller.clone();
    let refresh: ringsync::admin::Refresh = Arc::new(move || gauges.publish_gauges(now()));
    Router::new()
        .route(STATUS_PATH, get(status))
        .route(WORK_PATH, get(work))
        .route("/readyz", get(readyz))
        .with_state(AdminState {
            controller,
            node,
            stopping,
        })
        .merge(ringsync::admin::basics(prometheus, Some(refresh)))
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

async fn status(State(s): State<AdminState>) -> impl IntoResponse {
    Json(s.controller.status(&s.node, now()))
}

async fn work(State(s): State<AdminState>) -> impl IntoResponse {
    Json(s.controller.work_report(&s.node, now()))
}

/// Ready while not stopping and some instance can take a new call.
async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    if s.stopping.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n".to_owned());
    }
    let st = s.controller.status(&s.node, now());
    let usable = st.instances.iter().any(|i| {
        matches!(
            i.assign,
            Assign::Normal
                | Assign::RampingDown
                | Assign::RampingUp
                | Assign::QueuedForDrain
                | Assign::Pinned
        )
    });
    if usable {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "no media gateway can take a new call\n".to_owned(),
        )
    }
}

/// Why the status could not be had from a running media-ctl.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Nothing answered in time.
    #[error("media-ctl at {0} did not answer within {1:?}")]
    Timeout(std::net::SocketAddr, std::time::Duration),
    /// Connecting, writing or reading failed.
    #[error("media-ctl at {0}: {1}")]
    Io(std::net::SocketAddr, #[source] std::io::Error),
    /// The answer was not a 200 with the expected JSON.
    #[error("media-ctl at {0}: bad response: {1}")]
    BadResponse(std::net::SocketAddr, String),
}

/// Fetches `path` from a media-ctl admin endpoint and parses its JSON
/// (HTTP/1.0, one request; the server closes after the body). Its own
/// client, not ringsync-ops' `Fetcher`: media-ctl links only the model
/// crate (`ringsync`), and one GET for `media-ctl status` does not justify
/// linking the operator plane.
pub async fn fetch<T: serde::de::DeserializeOwned>(
    addr: std::net::SocketAddr,
    path: &str,
    timeout: std::time::Duration,
) -> Result<T, FetchError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let io = |e| FetchError::Io(addr, e);
        let mut s = tokio::net::TcpStream::connect(addr).await.map_err(io)?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.map_err(io)?;
        let mut buf = Vec::new();
        (&mut s)
            .take(16 << 20)
            .read_to_end(&mut buf)
            .await
            .map_err(io)?;
        let bad = |m: String| FetchError::BadResponse(addr, m);
        let end = buf
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| bad("no end of headers".into()))?;
        let head = String::from_utf8_lossy(&buf[..end]);
        let status = head.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) != Some("200") {
            return Err(bad(format!("status line `{status}`")));
        }
        serde_json::from_slice(&buf[end + 4..]).map_err(|e| bad(format!("body: {e}")))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(FetchError::Timeout(addr, timeout)),
    }
}
