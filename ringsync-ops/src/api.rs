//! The admin HTTP API (`ringsync serve`): profile CRUD, the site's status
//! (the drain view with the work every node reports, summed: R-ST-1,
//! R-ST-3) and its long poll `/v1/wait`, the Active-Passive handover (`/v1/handover`), the audit log,
//! metrics.
//!
//! JSON in and out. Bad input gets a 4xx with `{"error": "..."}` and stores
//! nothing (R-PR-1); store failures get 503. Every endpoint has an access
//! rule ([`endpoints`], checked by [`access`]), every change is audited, and
//! the API speaks HTTPS when given a certificate ([`tls`]). The entry points
//! take a bound listener and a shutdown token, so tests bind `127.0.0.1:0`.

use ringsync::store::Refusal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::engine::{EngineBoard, EngineStatus};
use crate::handover::PlannerStats;
use crate::round::Round;
use crate::session::Sessions;
use crate::status::{NodeBoard, SiteStatus};
use ringsync::profile::Profile;
use ringsync::state::DrainState;
use ringsync::store::{self, AuditRecord, Store, StoreError};
use ringsync::view::{DrainView, InstanceState};

pub mod access;
mod handlers;
pub(crate) use handlers::ep;
mod handover;
mod wait;
pub use ringsync::tls;

pub use access::{Access, Endpoint, Need, Peer};

/// The header of every answer to a change (create, update, activate,
/// deactivate, delete): `true`, or `false` when the profile was already as
/// asked and nothing was written (its revision kept).
pub const CHANGED_HEADER: &str = "ringsync-changed";

/// What the handlers share.
pub struct AdminApi {
    store: Arc<dyn Store>,
    drain: Arc<DrainState>,
    nodes: Arc<NodeBoard>,
    recorder: PrometheusRecorder,
    ready: AtomicBool,
    /// This node's handover planner: its name and counters.
    planner: OnceLock<(String, Arc<PlannerStats>)>,
    /// The engine drivers this node runs (R-EX-1).
    engines: OnceLock<Arc<EngineBoard>>,
    access: Access,
    /// Told `READY=1` with this phase once the store has been read.
    notify: OnceLock<(ringsync::notify::Notifier, String)>,
    /// The server's shutdown: a held long poll (`/v1/wait`) answers at
    /// once then, so a graceful stop does not wait out its timeout.
    stopping: OnceLock<CancellationToken>,
    /// The status page's logged-in browsers ([`crate::session`]).
    sessions: Sessions,
    /// Served over HTTPS: session cookies are `Secure`.
    secure: AtomicBool,
}

/// Body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
    /// On a 409 for a stale revision: the profile as it is now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<Profile>,
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    current: Option<Box<Profile>>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            current: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        store::count_error(&e);
        let status =
            StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(error = %e, "profile store failed");
        }
        let current = match &e {
            StoreError::Refused(Refusal::Stale { current, .. }) => Some(current.clone()),
            _ => None,
        };
        ApiError {
            status,
            message: e.to_string(),
            current,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
                current: self.current.map(|p| *p),
            }),
        )
            .into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

impl AdminApi {
    /// Handlers over a store, the drain state that follows it, and the
    /// board of the nodes' latest work reports; open to every caller
    /// ([`Access::Open`]).
    pub fn new(
        store: Arc<dyn Store>,
        drain: Arc<DrainState>,
        nodes: Arc<NodeBoard>,
    ) -> Arc<AdminApi> {
        Self::with_access(store, drain, nodes, Access::Open)
    }

    /// [`AdminApi::new`] with callers told apart by `access`.
    pub fn with_access(
        store: Arc<dyn Store>,
        drain: Arc<DrainState>,
        nodes: Arc<NodeBoard>,
        access: Access,
    ) -> Arc<AdminApi> {
        Arc::new(AdminApi {
            store,
            drain,
            nodes,
            recorder: PrometheusBuilder::new().build_recorder(),
            ready: AtomicBool::new(false),
            planner: OnceLock::new(),
            engines: OnceLock::new(),
            access,
            notify: OnceLock::new(),
            stopping: OnceLock::new(),
            sessions: Sessions::default(),
            secure: AtomicBool::new(false),
        })
    }

    /// Names the handover planner this node runs (`/v1/handover` says
    /// whether it acts; `/metrics` counts its moves). Set once.
    pub fn set_planner(&self, node: String, stats: Arc<PlannerStats>) {
        let _ = self.planner.set((node, stats));
    }

    /// Names the engine drivers this node runs: `/v1/status` and
    /// `/metrics` report them. Set once.
    pub fn set_engines(&self, board: Arc<EngineBoard>) {
        let _ = self.engines.set(board);
    }

    /// Says `READY=1` to systemd through `notify`, with `phase`, when
    /// `/readyz` becomes ready (the store read). Set once.
    pub fn notify_ready(&self, notify: ringsync::notify::Notifier, phase: String) {
        let _ = self.notify.set((notify, phase));
    }

    fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
        if let Some((notify, phase)) = self.notify.get() {
            notify.ready(phase.clone());
        }
    }

    /// Appends the record of a refused change; a failure to is logged and
    /// counted, and the refusal stands (nothing was changed).
    pub(crate) async fn audit_refusal(&self, rec: AuditRecord) {
        if let Err(e) = self.store.append_audit(rec).await {
            store::count_error(&e);
            tracing::error!(error = %e, "cannot append a refused change to the audit log");
        }
    }

    /// The status page's sessions.
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Whether this API is served over HTTPS (its cookies say `Secure`).
    pub(crate) fn is_secure(&self) -> bool {
        self.secure.load(Ordering::Relaxed)
    }

    /// True without a tokens file: every caller is `anonymous` with every
    /// right.
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.access, Access::Open)
    }

    /// Who holds `token`; `None` for a token that is not valid (and
    /// without a tokens file, where there are none).
    pub(crate) fn holder_of(&self, token: &str) -> Option<crate::auth::Holder> {
        match &self.access {
            Access::Open => None,
            Access::Tokens(t) => t.current().check(token),
        }
    }

    /// The store the API reads and writes (the page reads the same).
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The drain state the API serves.
    pub(crate) fn drain(&self) -> &Arc<DrainState> {
        &self.drain
    }

    /// The board of the nodes' latest answers.
    pub(crate) fn nodes(&self) -> &Arc<NodeBoard> {
        &self.nodes
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
                    self.set_ready();
                    return;
                }
                Err(e) if self.store.freshness().borrow().is_stale() => {
                    tracing::warn!(error = %e, "profile store unreachable; serving the last known view");
                    self.drain.set_profiles(self.store.watch().borrow().clone());
                    self.set_ready();
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
        st.engines = self.engines.get().map(|b| b.snapshot());
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
            ringsync::work::now_ms(),
        ));
        Arc::new(round)
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
                // When its work is estimated gone (Unix s), for a dashboard's
                // ETA (`... - time()`); NaN while nothing is estimated.
                metrics::gauge!("ringsync_instance_eta_timestamp_seconds", "instance" => inst.id.clone())
                    .set(inst.eta.until_ms().map_or(f64::NAN, |ms| ms as f64 / 1000.0));
            }
            let active = set.active_count();
            metrics::gauge!("ringsync_profiles", "state" => "active").set(active as f64);
            metrics::gauge!("ringsync_profiles", "state" => "inactive")
                .set((set.profiles.len() - active) as f64);
            metrics::gauge!("ringsync_profile_revision").set(set.revision as f64);
            metrics::gauge!("ringsync_drain_zone_servers").set(view.drain_zone().len() as f64);
            metrics::gauge!("ringsync_view_generation").set(view.generation() as f64);
            // The store's freshness is the drain state's (DrainState::set_freshness),
            // in the process's recorder.
            for e in self.engines.get().map(|b| b.snapshot()).unwrap_or_default() {
                engine_metrics(&e);
            }
        });
        // Then what the process counts where it happens (the `metrics`
        // facade: store and token errors, refusals, the drain state's
        // gauges), when `serve` installed the process's recorder.
        let mut text = self.recorder.handle().render();
        if let Some(process) = ringsync::daemon::process_metrics() {
            text.push_str(&process.render());
        }
        text
    }
}

/// One engine's gauges and counters (R-EX-1): reachable, the revision it
/// holds (-1 while none), the changes and corrections its driver made.
fn engine_metrics(e: &EngineStatus) {
    let name = e.name.clone();
    metrics::gauge!("ringsync_engine_reachable", "engine" => name.clone())
        .set(if e.reachable == Some(true) { 1.0 } else { 0.0 });
    metrics::gauge!("ringsync_engine_acting", "engine" => name.clone()).set(if e.acting {
        1.0
    } else {
        0.0
    });
    metrics::gauge!("ringsync_engine_applied_revision", "engine" => name.clone())
        .set(e.revision.map_or(-1.0, |r| r as f64));
    metrics::counter!("ringsync_engine_changes_total", "engine" => name.clone())
        .absolute(e.changes);
    metrics::counter!("ringsync_engine_corrections_total", "engine" => name)
        .absolute(e.corrections);
}

/// Every endpoint of the API with its access rule: the router is built
/// from exactly this list.
pub fn endpoints() -> Vec<Endpoint> {
    handlers::table().into_iter().map(|(e, _)| e).collect()
}

/// Routes served beside the API's own (the status page's), each with its
/// access rule, behind the same guard.
pub type Extra = Vec<(Endpoint, axum::routing::MethodRouter<Arc<AdminApi>>)>;

/// The API's routes, each behind its access rule.
pub fn router(api: Arc<AdminApi>) -> Router {
    router_with(api, Vec::new())
}

/// [`router`] with `extra` routes behind the same access guard.
pub fn router_with(api: Arc<AdminApi>, extra: Extra) -> Router {
    let mut table = handlers::table();
    table.extend(extra);
    let rules = Arc::new(access::Rules::new(
        &table.iter().map(|(e, _)| e.clone()).collect::<Vec<_>>(),
    ));
    let mut router = Router::new();
    for (e, handler) in table {
        router = router.route(e.path, handler);
    }
    router
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        // Last, so that it wraps every route above, however it was added.
        .layer(axum::middleware::from_fn_with_state(
            (api.clone(), rules),
            access::guard,
        ))
        .with_state(api)
}

/// Serves the API over plain HTTP on `listener` until `shutdown`;
/// in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    api: Arc<AdminApi>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_with(listener, api, Vec::new(), None, shutdown).await
}

/// [`serve`] with `extra` routes (the status page) beside the API's, over
/// HTTPS when given `tls` (handshakes off the accept path:
/// [`tls::TlsListener`]).
pub async fn serve_with(
    listener: TcpListener,
    api: Arc<AdminApi>,
    extra: Extra,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    // The TLS listener first: the only step here that can fail.
    let listener = match tls {
        Some(config) => {
            let listener = tls::TlsListener::new(listener, config)?;
            api.secure.store(true, Ordering::Relaxed);
            Bound::Tls(listener)
        }
        None => Bound::Plain(listener),
    };
    let ready = api.clone().spawn_ready(&shutdown);
    let app = router_with(api, extra).into_make_service_with_connect_info::<Peer>();
    let stop = shutdown.clone().cancelled_owned();
    // Two calls because axum's listener is a type parameter; all else is one.
    let result = match listener {
        Bound::Plain(l) => axum::serve(l, app).with_graceful_shutdown(stop).await,
        Bound::Tls(l) => axum::serve(l, app).with_graceful_shutdown(stop).await,
    };
    ready.abort();
    result
}

/// What [`serve_with`] accepts on.
enum Bound {
    Plain(TcpListener),
    Tls(tls::TlsListener),
}

impl AdminApi {
    fn spawn_ready(self: Arc<Self>, shutdown: &CancellationToken) -> tokio::task::JoinHandle<()> {
        let _ = self.stopping.set(shutdown.clone());
        let shutdown = shutdown.clone();
        tokio::spawn(async move { self.become_ready(&shutdown).await })
    }
}
