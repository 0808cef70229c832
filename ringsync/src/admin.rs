//! What the data-plane daemons' admin endpoints share (sip-gate's and
//! media-ctl's): `/healthz`, `/metrics` rendered from the process's
//! Prometheus recorder ([`crate::daemon::install_metrics`]), and serving a
//! router until shutdown. Each daemon merges its own routes (`/readyz`,
//! `/v1/work`, ...) into [`basics`].

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Called before each `/metrics` rendering: sets the gauges that are read
/// from state rather than kept up to date (media-ctl's per-mg figures).
pub type Refresh = Arc<dyn Fn() + Send + Sync>;

/// `/healthz` (the process answers) and `/metrics` (404 when no recorder
/// was installed, as in tests of the libraries).
pub fn basics(prometheus: Option<PrometheusHandle>, refresh: Option<Refresh>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/metrics",
            get(move || async move { metrics(prometheus.as_ref(), refresh.as_deref()) }),
        )
}

fn metrics(
    prometheus: Option<&PrometheusHandle>,
    refresh: Option<&(dyn Fn() + Send + Sync)>,
) -> Response {
    let Some(h) = prometheus else {
        return (StatusCode::NOT_FOUND, "metrics recorder not installed\n").into_response();
    };
    if let Some(refresh) = refresh {
        refresh();
    }
    (
        StatusCode::OK,
        [("content-type", "text/plain; version=0.0.4")],
        h.render(),
    )
        .into_response()
}

/// Serves `router` on a bound listener until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    async fn get_status(r: Router, path: &str) -> (StatusCode, String) {
        let res = r
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let code = res.status();
        let body = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn metrics_refreshes_then_renders_and_says_when_no_recorder_is_installed() {
        let (code, body) = get_status(basics(None, None), "/metrics").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(body.contains("not installed"), "{body}");
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let refresh: Refresh = Arc::new(move || {
            seen.fetch_add(1, Ordering::Relaxed);
        });
        let r = basics(Some(handle), Some(refresh));
        let (code, _) = get_status(r.clone(), "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        assert_eq!(
            get_status(r, "/healthz").await,
            (StatusCode::OK, "ok\n".into())
        );
    }
}
