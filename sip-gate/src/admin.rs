//! The gate's admin HTTP endpoint: Prometheus metrics, and the work and
//! state of every instance as this node sees them (R-ST-1). `ringsync
//! status` reads `/v1/work` to show work counts next to drain states.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::proxy::Core;

#[derive(Clone)]
struct AdminState {
    core: Arc<Core>,
    prometheus: Option<PrometheusHandle>,
}

#[derive(Serialize)]
struct InstanceWork {
    service: String,
    server: String,
    zone: &'static str,
    state: &'static str,
    health: &'static str,
    work: u64,
    invites: u64,
    dialogs: u64,
}

#[derive(Serialize)]
struct WorkReport {
    site: String,
    generation: u64,
    transactions: usize,
    instances: std::collections::BTreeMap<String, InstanceWork>,
}

/// The admin router (exposed for tests).
pub fn router(core: Arc<Core>, prometheus: Option<PrometheusHandle>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/work", get(work))
        .route("/v1/status", get(work))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(AdminState { core, prometheus })
}

/// Serves the admin endpoint on a bound listener until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    core: Arc<Core>,
    prometheus: Option<PrometheusHandle>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(core, prometheus))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    match &s.prometheus {
        Some(h) => (
            StatusCode::OK,
            [("content-type", "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "metrics recorder not installed\n").into_response(),
    }
}

async fn work(State(s): State<AdminState>) -> Json<WorkReport> {
    let view = s.core.view();
    let book = s.core.work();
    let mut instances = std::collections::BTreeMap::new();
    for (i, iv) in view.instances().iter().enumerate() {
        let w = book.get(i);
        instances.insert(
            iv.id.clone(),
            InstanceWork {
                service: iv.service.to_string(),
                server: iv.server.clone(),
                zone: iv.zone.as_str(),
                state: iv.state.as_str(),
                health: iv.health.as_str(),
                work: w.total(),
                invites: w.invites,
                dialogs: w.dialogs,
            },
        );
    }
    Json(WorkReport {
        site: view.config().site.name.clone(),
        generation: view.generation(),
        transactions: s.core.transactions(),
        instances,
    })
}
