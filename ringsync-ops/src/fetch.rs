//! Asking a node for its work report (`GET /v1/work`, a
//! [`WorkReport`]), with the HTTP stack the admin servers already run on
//! (hyper 1 through hyper-util's client): a deadline over the whole exchange,
//! a cap on the body, and an error that says which step failed.
//!
//! One [`Fetcher`] keeps its connections alive between polls, so `ringsync
//! serve` asking once a second does not open a connection each time.

use std::error::Error as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::header::{ACCEPT, CONTENT_LENGTH};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use ringsync::work::{WorkReport, WORK_PATH};

/// Time allowed for a whole exchange (connect, request, answer, body).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);
/// Largest report accepted: far above a site's worth of instances (a
/// report is about 200 bytes per instance), far below harm.
pub const DEFAULT_MAX_BODY: usize = 4 << 20;

/// Bounds of one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deadline for the whole exchange.
    pub timeout: Duration,
    /// Largest body accepted, in bytes.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
        }
    }
}

/// Why a node's report could not be had, and where it was asked.
#[derive(Debug, thiserror::Error)]
#[error("GET http://{addr}{WORK_PATH}: {failure}")]
pub struct FetchError {
    /// The node's admin address.
    pub addr: SocketAddr,
    /// What went wrong.
    pub failure: Failure,
}

/// The step of the exchange that failed.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// No complete answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The TCP connection could not be made (nothing listens, unreachable).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The connection broke or the answer was not HTTP.
    #[error("HTTP exchange failed: {0}")]
    Http(String),
    /// The node answered with an error status.
    #[error("answered {status}: {body}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The start of the body, for the operator.
        body: String,
    },
    /// The body was larger than [`Limits::max_body`].
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
    /// The body was not a work report.
    #[error("not a work report: {0}")]
    Json(#[source] serde_json::Error),
}

/// Fetches work reports; cheap to share, keeps idle connections.
#[derive(Debug, Clone)]
pub struct Fetcher {
    client: Client<HttpConnector, Empty<Bytes>>,
    limits: Limits,
}

impl Default for Fetcher {
    fn default() -> Self {
        Fetcher::new(Limits::default())
    }
}

impl Fetcher {
    /// A fetcher with these bounds. Must be called inside a tokio runtime
    /// (connections run as tasks on it).
    pub fn new(limits: Limits) -> Fetcher {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(limits.timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(1)
            .build(connector);
        Fetcher { client, limits }
    }

    /// The bounds of every exchange.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// `GET http://ADDR/v1/work`, parsed as a [`WorkReport`].
    pub async fn work_report(&self, addr: SocketAddr) -> Result<WorkReport, FetchError> {
        let timeout = self.limits.timeout;
        let failure = match tokio::time::timeout(timeout, self.exchange(addr)).await {
            Ok(Ok(report)) => return Ok(report),
            Ok(Err(f)) => f,
            Err(_) => Failure::Timeout(timeout),
        };
        Err(FetchError { addr, failure })
    }

    async fn exchange(&self, addr: SocketAddr) -> Result<WorkReport, Failure> {
        // A SocketAddr prints as a valid authority (IPv6 in brackets).
        let uri: Uri = format!("http://{addr}{WORK_PATH}")
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| Failure::Http(e.to_string()))?;
        let req = Request::get(uri)
            .header(ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| Failure::Http(e.to_string()))?;
        let resp = self.client.request(req).await.map_err(|e| {
            if e.is_connect() {
                Failure::Connect(root_cause(&e))
            } else {
                Failure::Http(causes(&e))
            }
        })?;
        let max = self.limits.max_body;
        let announced = resp
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > max as u64) {
            return Err(Failure::TooLarge(max));
        }
        let status = resp.status();
        let body = Limited::new(resp.into_body(), max)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<LengthLimitError>() {
                    Failure::TooLarge(max)
                } else {
                    Failure::Http(e.to_string())
                }
            })?
            .to_bytes();
        if !status.is_success() {
            return Err(Failure::Status {
                status: status.as_u16(),
                body: snippet(&body),
            });
        }
        serde_json::from_slice(&body).map_err(Failure::Json)
    }
}

/// The causes under a client error ("client error (Connect)" says little;
/// "Connection refused (os error 111)" says what to fix).
fn causes(e: &hyper_util::client::legacy::Error) -> String {
    let mut parts = Vec::new();
    let mut next = e.source();
    while let Some(cause) = next {
        parts.push(cause.to_string());
        next = cause.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}

/// The OS's word for a failed connect ("Connection refused (os error 111)").
fn root_cause(e: &hyper_util::client::legacy::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The first line of a body, at most 200 characters.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text.lines().next().unwrap_or_default().trim();
    line.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::routing::get;
    use axum::Router;
    use ringsync::work::NodeKind;
    use std::collections::BTreeMap;
    use std::time::Instant;

    fn report() -> WorkReport {
        WorkReport {
            site_hash: String::new(),
            backups: Vec::new(),
            run: None,
            site: "t".into(),
            node: "g1".into(),
            kind: NodeKind::Gate,
            scope: "test".into(),
            started_ms: 1,
            generated_ms: 2,
            revision: 3,
            generation: 4,
            instances: BTreeMap::new(),
        }
    }

    /// A real HTTP server on loopback serving `app`.
    async fn serve(app: Router) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await });
        addr
    }

    #[tokio::test]
    async fn gets_a_report_and_reuses_the_connection() {
        use axum::extract::ConnectInfo;
        use std::sync::{Arc, Mutex};
        let peers = Arc::new(Mutex::new(Vec::new()));
        let seen = peers.clone();
        let app = Router::new().route(
            WORK_PATH,
            get(
                move |ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                    seen.lock().unwrap().push(peer);
                    axum::Json(report())
                },
            ),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(l, app.into_make_service_with_connect_info::<SocketAddr>()).await
        });
        let f = Fetcher::default();
        assert_eq!(f.work_report(addr).await.unwrap(), report());
        assert_eq!(f.work_report(addr).await.unwrap(), report());
        let peers = peers.lock().unwrap();
        assert_eq!(peers.len(), 2);
        assert_eq!(
            peers[0], peers[1],
            "the second poll rode the first connection"
        );
    }

    #[tokio::test]
    async fn bad_json_and_error_statuses_are_typed() {
        let f = Fetcher::default();
        let junk = serve(Router::new().route(WORK_PATH, get(|| async { "{not json" }))).await;
        let e = f.work_report(junk).await.unwrap_err();
        assert!(matches!(e.failure, Failure::Json(_)), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("GET http://{junk}/v1/work: not a work report")),
            "{e}"
        );
        let busy = serve(Router::new().route(
            WORK_PATH,
            get(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "{\"error\":\"busy\"}\nmore",
                )
            }),
        ))
        .await;
        let e = f.work_report(busy).await.unwrap_err();
        match &e.failure {
            Failure::Status { status: 503, body } => assert_eq!(body, "{\"error\":\"busy\"}"),
            _ => panic!("{e}"),
        }
    }

    #[tokio::test]
    async fn a_body_past_the_cap_is_refused_with_or_without_a_length() {
        let f = Fetcher::new(Limits {
            max_body: 1000,
            ..Limits::default()
        });
        let sized =
            serve(Router::new().route("/v1/work", get(|| async { "x".repeat(1001) }))).await;
        let e = f.work_report(sized).await.unwrap_err();
        assert!(matches!(e.failure, Failure::TooLarge(1000)), "{e}");
        // Chunked, no Content-Length: the cap holds while reading.
        let stream = futures::stream::iter(
            (0..20).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 100]))),
        );
        let chunked = serve(Router::new().route(
            "/v1/work",
            get(move || async move { axum::body::Body::from_stream(stream) }),
        ))
        .await;
        let e = f.work_report(chunked).await.unwrap_err();
        assert!(matches!(e.failure, Failure::TooLarge(1000)), "{e}");
    }

    #[tokio::test]
    async fn nothing_listening_is_a_connect_error_at_once() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let t0 = Instant::now();
        let e = Fetcher::default().work_report(addr).await.unwrap_err();
        assert!(matches!(e.failure, Failure::Connect(_)), "{e}");
        assert!(e.to_string().contains("refused"), "{e}");
        assert!(t0.elapsed() < DEFAULT_TIMEOUT);
    }

    #[tokio::test]
    async fn a_silent_node_times_out() {
        // Accepts connections (the kernel does, from the backlog) but never answers.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let f = Fetcher::new(Limits {
            timeout: Duration::from_millis(200),
            ..Limits::default()
        });
        let t0 = Instant::now();
        let e = f.work_report(addr).await.unwrap_err();
        assert!(
            matches!(e.failure, Failure::Timeout(t) if t == Duration::from_millis(200)),
            "{e}"
        );
        assert!(t0.elapsed() < Duration::from_secs(2));
        drop(l);
    }
}
