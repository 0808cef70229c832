//! The admin HTTP API (`ringsync serve`): profile CRUD, the site's status
//! (the drain view with the work every node reports, summed: R-ST-1,
//! R-ST-3), the Active-Passive handover (`/v1/handover`), metrics.
//!
//! JSON in and out. Bad input gets a 4xx with `{"error": "..."}` and stores
//! nothing (R-PR-1); store failures get 503. The entry point takes a bound
//! listener and a shutdown token, so tests bind `127.0.0.1:0`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::handover::status::{GroupState, HandoverStatus};
use crate::handover::PlannerStats;
use crate::profile::{NewProfile, ProfilePatch, ProfileState};
use crate::state::DrainState;
use crate::status::{NodeBoard, Round, SiteStatus};
use crate::store::{self, Store, StoreError};
use crate::view::{DrainView, InstanceState};

/// What the handlers share.
pub struct AdminApi {
    store: Arc<dyn Store>,
    drain: Arc<DrainState>,
    nodes: Arc<NodeBoard>,
    recorder: PrometheusRecorder,
    ready: AtomicBool,
    /// This node's handover planner: its name and counters.
    planner: OnceLock<(String, Arc<PlannerStats>)>,
}

/// Body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        store::count_error(&e);
        let status = match &e {
            StoreError::NotFound { .. } => StatusCode::NOT_FOUND,
            StoreError::DuplicateName { .. } | StoreError::Conflict { .. } => StatusCode::CONFLICT,
            e if e.is_client_error() => StatusCode::BAD_REQUEST,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(error = %e, "profile store failed");
        }
        ApiError {
            status,
            message: e.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
            }),
        )
            .into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

impl AdminApi {
    /// Handlers over a store, the drain state that follows it, and the
    /// board of the nodes' latest work reports.
    pub fn new(
        store: Arc<dyn Store>,
        drain: Arc<DrainState>,
        nodes: Arc<NodeBoard>,
    ) -> Arc<AdminApi> {
        Arc::new(AdminApi {
            store,
            drain,
            nodes,
            recorder: PrometheusBuilder::new().build_recorder(),
            ready: AtomicBool::new(false),
            planner: OnceLock::new(),
        })
    }

    /// Names the handover planner this node runs (`/v1/handover` says
    /// whether it acts; `/metrics` counts its moves). Set once.
    pub fn set_planner(&self, node: String, stats: Arc<PlannerStats>) {
        let _ = self.planner.set((node, stats));
    }

    /// True once the store has been read.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Reads the store until it succeeds (readiness), retrying every second.
    /// A store that is unreachable but serves a last-known view (R-MN-2:
    /// fail-static, e.g. etcd down and the view cache loaded) is ready too:
    /// serving that view is correct, and `/readyz` says it is stale.
    async fn become_ready(&self, shutdown: &CancellationToken) {
        loop {
            match self.store.list().await {
                Ok(set) => {
                    self.drain.set_profiles(set);
                    self.ready.store(true, Ordering::Relaxed);
                    return;
                }
                Err(e) if self.store.freshness().borrow().is_stale() => {
                    tracing::warn!(error = %e, "profile store unreachable; serving the last known view");
                    self.drain.set_profiles(self.store.watch().borrow().clone());
                    self.ready.store(true, Ordering::Relaxed);
                    return;
                }
                Err(e) => {
                    store::count_error(&e);
                    tracing::error!(error = %e, "profile store not readable; not ready");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Applies the store's latest snapshot at once, so a status read right
    /// after a write shows it (the follower task would, a moment later).
    fn after_write<T>(&self, r: Result<T, StoreError>) -> ApiResult<T> {
        let v = r?;
        let set = self.store.watch().borrow().clone();
        self.drain.set_profiles(set);
        Ok(v)
    }

    /// The site's status: the current view with the nodes' last reports
    /// summed, the handover records counting the Active-Passive work.
    pub fn site_status(&self) -> SiteStatus {
        let view = self.drain.view();
        let mut st = self.round(&view).status(&view);
        st.store = Some((*self.drain.freshness()).clone());
        st
    }

    /// The nodes' last round plus the handover records' report (R-ST-3).
    fn round(&self, view: &DrainView) -> Arc<Round> {
        let round = self.nodes.latest();
        let Some(records) = self.store.handover() else {
            return round;
        };
        let state = records.watch().borrow().clone();
        let mut round = (*round).clone();
        round.outcomes.push(crate::handover::work::outcome(
            view.config(),
            Ok(&state),
            view.revision(),
            crate::work::now_ms(),
        ));
        Arc::new(round)
    }

    /// The handover's status from the records as the store has them now.
    pub async fn handover_status(&self) -> Result<HandoverStatus, StoreError> {
        let records = self.store.handover().ok_or_else(|| {
            StoreError::Unsupported("this store keeps no handover records".into())
        })?;
        let state = records.read().await?;
        let view = self.drain.view();
        let fresh = !self.drain.freshness().is_stale();
        let mut st =
            crate::handover::status(view.config(), &view, &state, crate::work::now_ms(), fresh);
        if let Some((node, stats)) = self.planner.get() {
            st.planner.this_node = Some(node.clone());
            st.planner.this_node_acting = Some(stats.acting());
        }
        Ok(st)
    }

    /// Prometheus text: per-instance state and summed work, which nodes
    /// report, profile counts, store errors.
    pub fn render_metrics(&self) -> String {
        let view = self.drain.view();
        let status = self.round(&view).status(&view);
        let set = self.store.watch().borrow().clone();
        self.handover_metrics(&view);
        metrics::with_local_recorder(&self.recorder, || {
            for node in &status.nodes {
                metrics::gauge!(
                    "ringsync_node_reporting",
                    "kind" => node.kind.as_str(),
                    "addr" => node.addr.to_string(),
                )
                .set(if node.error.is_none() { 1.0 } else { 0.0 });
            }
            for inst in &status.instances {
                for st in InstanceState::ALL {
                    metrics::gauge!(
                        "ringsync_instance_state",
                        "instance" => inst.id.clone(),
                        "service" => inst.service.to_string(),
                        "server" => inst.server.clone(),
                        "state" => st.as_str(),
                    )
                    .set(if inst.state == st { 1.0 } else { 0.0 });
                }
                // NaN while unknown: never equal to 0, so never read as drained.
                metrics::gauge!("ringsync_instance_work", "instance" => inst.id.clone())
                    .set(inst.work.map_or(f64::NAN, |w| w as f64));
            }
            let active = set.active_count();
            metrics::gauge!("ringsync_profiles", "state" => "active").set(active as f64);
            metrics::gauge!("ringsync_profiles", "state" => "inactive")
                .set((set.profiles.len() - active) as f64);
            metrics::gauge!("ringsync_profile_revision").set(set.revision as f64);
            metrics::gauge!("ringsync_drain_zone_servers").set(view.drain_zone().len() as f64);
            metrics::gauge!("ringsync_view_generation").set(view.generation() as f64);
            metrics::counter!("ringsync_store_errors_total").absolute(store::error_count());
            let f = self.drain.freshness();
            metrics::gauge!("ringsync_store_stale").set(if f.is_stale() { 1.0 } else { 0.0 });
            metrics::gauge!("ringsync_store_stale_since_seconds")
                .set(f.stale_since_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
            metrics::gauge!("ringsync_store_revision").set(f.store_revision as f64);
            metrics::counter!("ringsync_profile_updates_applied_total")
                .absolute(self.drain.profile_updates());
        });
        self.recorder.handle().render()
    }
}

impl AdminApi {
    /// The handover's gauges and this node's move counters (R-AP-1..4).
    fn handover_metrics(&self, view: &DrainView) {
        let Some(records) = self.store.handover() else {
            return;
        };
        let state = records.watch().borrow().clone();
        let now = crate::work::now_ms();
        let fresh = !self.drain.freshness().is_stale();
        let st = crate::handover::status(view.config(), view, &state, now, fresh);
        let count = |s: GroupState| st.groups.iter().filter(|g| g.state == s).count() as f64;
        metrics::with_local_recorder(&self.recorder, || {
            metrics::gauge!("ringsync_handover_blocked_groups").set(count(GroupState::Blocked));
            metrics::gauge!("ringsync_handover_unconfirmed_groups").set(count(GroupState::Moving));
            metrics::gauge!("ringsync_handover_planned_moves").set(f64::from(st.planner.planned));
            // NaN while nothing is planned.
            let next = st
                .planner
                .next_move_ms
                .map_or(f64::NAN, |t| t.saturating_sub(now) as f64 / 1000.0);
            metrics::gauge!("ringsync_handover_next_move_seconds").set(next);
            if let Some((_, stats)) = self.planner.get() {
                let (handovers, takeovers, retries) = stats.moves();
                for (kind, n) in [
                    ("handover", handovers),
                    ("takeover", takeovers),
                    ("retry", retries),
                ] {
                    metrics::counter!("ringsync_handover_moves_total", "kind" => kind).absolute(n);
                }
                metrics::gauge!("ringsync_handover_acting").set(if stats.acting() {
                    1.0
                } else {
                    0.0
                });
            }
        });
    }
}

/// The API's routes.
pub fn router(api: Arc<AdminApi>) -> Router {
    Router::new()
        .route("/v1/profiles", get(list_profiles).post(create_profile))
        .route(
            "/v1/profiles/{id}",
            get(get_profile)
                .patch(update_profile)
                .delete(delete_profile),
        )
        .route("/v1/profiles/{id}/activate", post(activate))
        .route("/v1/profiles/{id}/deactivate", post(deactivate))
        .route("/v1/status", get(status))
        .route("/v1/handover", get(handover))
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .fallback(|| async {
            ApiError {
                status: StatusCode::NOT_FOUND,
                message: "no such endpoint".into(),
            }
        })
        .with_state(api)
}

/// Serves the API on `listener` until `shutdown`; in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    api: Arc<AdminApi>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let ready = {
        let api = api.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move { api.become_ready(&shutdown).await })
    };
    let result = axum::serve(listener, router(api))
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .await;
    ready.abort();
    result
}

// === handlers ===

fn parse<T: DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

async fn list_profiles(State(api): State<Arc<AdminApi>>) -> ApiResult<Response> {
    let set = api.store.list().await?;
    Ok(Json(&*set).into_response())
}

async fn create_profile(State(api): State<Arc<AdminApi>>, body: Bytes) -> ApiResult<Response> {
    let new: NewProfile = parse(&body)?;
    let p = api.after_write(api.store.create(new).await)?;
    Ok((StatusCode::CREATED, Json(p)).into_response())
}

async fn get_profile(
    State(api): State<Arc<AdminApi>>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let set = api.store.list().await?;
    match set.find(&id) {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(StoreError::NotFound { id }.into()),
    }
}

async fn update_profile(
    State(api): State<Arc<AdminApi>>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let patch: ProfilePatch = parse(&body)?;
    Ok(Json(api.after_write(api.store.update(&id, patch).await)?).into_response())
}

async fn delete_profile(
    State(api): State<Arc<AdminApi>>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(Json(api.after_write(api.store.delete(&id).await)?).into_response())
}

async fn activate(State(api): State<Arc<AdminApi>>, Path(id): Path<String>) -> ApiResult<Response> {
    Ok(
        Json(api.after_write(api.store.set_state(&id, ProfileState::Active).await)?)
            .into_response(),
    )
}

async fn deactivate(
    State(api): State<Arc<AdminApi>>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(
        Json(api.after_write(api.store.set_state(&id, ProfileState::Inactive).await)?)
            .into_response(),
    )
}

async fn status(State(api): State<Arc<AdminApi>>) -> Json<SiteStatus> {
    Json(api.site_status())
}

async fn handover(State(api): State<Arc<AdminApi>>) -> ApiResult<Json<HandoverStatus>> {
    Ok(Json(api.handover_status().await?))
}

async fn metrics_text(State(api): State<Arc<AdminApi>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        api.render_metrics(),
    )
        .into_response()
}

async fn readyz(State(api): State<Arc<AdminApi>>) -> Response {
    if api.is_ready() {
        // R-MN-2: still ready when stale; the detail says so.
        let detail = api.drain.freshness().describe(crate::work::now_ms());
        (StatusCode::OK, format!("ready\n{detail}\n")).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "profile store not read yet\n",
        )
            .into_response()
    }
}
