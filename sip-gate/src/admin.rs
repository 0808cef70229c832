//! The gate's admin HTTP endpoint: Prometheus metrics, and its work report
//! at `/v1/work` in the site-wide shape ([`ringsync::work::WorkReport`]),
//! which `ringsync status` sums with every other node's (R-ST-1, R-ST-3).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use ringsync::work::{self, InstanceWork, NodeKind, WorkCounts, WorkReport, WORK_PATH};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::proxy::Core;

/// What the work report covers, exactly as the gate counts today.
pub const SCOPE: &str = "per SIP instance, since this gate started: INVITE transactions it \
forwarded to the instance that have neither a final response nor expired (transactions); calls \
whose INVITE it forwarded to the instance and saw answered 2xx, until a BYE it forwards to the \
instance is answered, 12 h at most (dialogs; a call the instance ends with its own BYE stays \
counted until then). Not counted (0): calls the instance placed, registrations, subscriptions, \
and work set up before this gate started.";

/// Who this gate is in its reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its name on the site (the admin address unless configured).
    pub name: String,
    /// When it started (Unix ms).
    pub started_ms: u64,
}

#[derive(Clone)]
struct AdminState {
    core: Arc<Core>,
    node: Arc<NodeInfo>,
    prometheus: Option<PrometheusHandle>,
}

/// The admin router (exposed for tests).
pub fn router(core: Arc<Core>, node: NodeInfo, prometheus: Option<PrometheusHandle>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route(WORK_PATH, get(work))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(AdminState {
            core,
            node: Arc::new(node),
            prometheus,
        })
}

/// Serves the admin endpoint on a bound listener until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    core: Arc<Core>,
    node: NodeInfo,
    prometheus: Option<PrometheusHandle>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(core, node, prometheus))
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
    Json(report(&s.core, &s.node))
}

/// The gate's work report: only the instances it routes to (sg, esg); a
/// gate never reports a zero for an mg or an Active-Passive instance.
pub fn report(core: &Core, node: &NodeInfo) -> WorkReport {
    let view = core.view();
    let book = core.work();
    let instances: BTreeMap<String, InstanceWork> = view
        .instances()
        .iter()
        .enumerate()
        .filter(|(_, iv)| NodeKind::Gate.counts(&iv.service))
        .map(|(i, iv)| {
            let w = book.get(i);
            let counts = WorkCounts {
                transactions: w.invites,
                dialogs: w.dialogs,
                ..WorkCounts::default()
            };
            let work = InstanceWork {
                health: iv.health,
                counts,
                ..InstanceWork::default()
            };
            (iv.id.clone(), work)
        })
        .collect();
    WorkReport {
        site: view.config().site.name.clone(),
        node: node.name.clone(),
        kind: NodeKind::Gate,
        scope: SCOPE.to_owned(),
        started_ms: node.started_ms,
        generated_ms: work::now_ms(),
        revision: view.revision(),
        generation: view.generation(),
        instances,
    }
}
