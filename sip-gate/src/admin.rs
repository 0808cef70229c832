//! The gate's admin HTTP endpoint: Prometheus metrics, its work report at
//! `/v1/work` in the site-wide shape ([`ringsync::work::WorkReport`]),
//! which `ringsync status` sums with every other node's (R-ST-1, R-ST-3),
//! `/readyz` for whatever balances traffic onto the gate (R-GW-1) and
//! `/healthz` (the process answers), and the bans of sources that failed
//! authentication (`GET /v1/bans`, `DELETE /v1/bans/{ip}`, R-SEC-3).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{delete, get};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use ringsync::config::Service;
use ringsync::work::{self, InstanceWork, NodeKind, WorkReport, WORK_PATH};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::lifecycle::Phase;
use crate::proxy::Core;

/// What the work report covers, exactly as the gate counts (R-ST-2, R-ST-3).
pub const SCOPE: &str = "per SIP instance, what this gate routed: INVITE transactions to or from the instance without a \
final response, until Timer C (transactions); calls the instance received or placed through \
this gate, from each 2xx of the initial INVITE (one per dialog) until a BYE from either side is \
answered 2xx, 481 or 408, Timer F after a BYE without an answer, a 481 to a request in the \
call, or [work] max_call_age_s without a request in it (dialogs); bindings of REGISTERs routed \
to the instance, as its 2xx lists them, until they expire, are listed by another instance's 2xx \
or are no longer listed (registrations); subscriptions of the instance either way, from the 2xx \
of the SUBSCRIBE until they expire, are refreshed to 0, a NOTIFY says terminated, or a 481 \
answers a request in them (subscriptions). Calls and subscriptions set up before this gate \
started count from the first re-INVITE, UPDATE, PRACK, INFO or REFER (calls), NOTIFY or \
refreshed SUBSCRIBE (subscriptions) seen in them. Not counted: work routed through other gate \
nodes, REGISTERs the instance sends out. While the gate cannot know (the work it knows began, \
at its start or as far back as its work snapshot covered, less than the longer of [work] \
max_expires_s and max_call_age_s ago; or its call table was full less than max_call_age_s ago, \
or its registration or subscription table less than max_expires_s ago), each instance says why \
in `unknown`. Per ws instance: the WebSocket connections a ws pool of this gate passed to it and \
that are still open (connections), always known: they end when this gate stops; its health is \
what this gate's connects to it said: `up` while connections are open or one was set up within \
[dns] failover_hold_s, `down` while a failed connect holds it unreachable, else `unknown`.";

/// Where the gate lists its bans (R-SEC-3).
pub use ringsync::bans::BANS_PATH;

/// `GET /v1/bans`: the bans in force on this node.
async fn bans(State(s): State<AdminState>) -> Json<Vec<crate::BanInfo>> {
    Json(s.core.site().bans.list(Instant::now()))
}

/// `DELETE /v1/bans/{ip}`: lifts the bans of one source on every listener
/// of this node; 404 when it had none, 400 for a bad address.
async fn lift_ban(State(s): State<AdminState>, Path(ip): Path<String>) -> impl IntoResponse {
    let Ok(addr) = ip.parse::<std::net::IpAddr>() else {
        return (
            StatusCode::BAD_REQUEST,
            format!("`{ip}` is not an IP address\n"),
        );
    };
    match s.core.site().bans.lift(addr, Instant::now()) {
        0 => (StatusCode::NOT_FOUND, format!("{addr} is not banned\n")),
        n => (StatusCode::OK, format!("lifted {n} ban(s) of {addr}\n")),
    }
}

/// Who this gate is in its reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its name on the site (the admin address unless configured).
    pub name: String,
    /// When it started (Unix ms).
    pub started_ms: u64,
    /// Which run of the binary this is (issue 39); `None` where no
    /// process runs the gate (tests of the library).
    pub run: Option<work::RunInfo>,
}

#[derive(Clone)]
struct AdminState {
    core: Arc<Core>,
    node: Arc<NodeInfo>,
}

/// The admin router (exposed for tests).
pub fn router(core: Arc<Core>, node: NodeInfo, prometheus: Option<PrometheusHandle>) -> Router {
    let mut r = Router::new()
        .route(WORK_PATH, get(work))
        .route("/readyz", get(readyz))
        .route(BANS_PATH, get(bans));
    // The admin port is otherwise read-only (R-PR-1). Lifting a ban is its
    // one write, routed only on a site that turned bans on: the worst it
    // can do is shorten a ban (R-SEC-3).
    if core.site().bans.any() {
        r = r.route("/v1/bans/{ip}", delete(lift_ban));
    }
    r.with_state(AdminState {
        core,
        node: Arc::new(node),
    })
    .merge(ringsync::admin::basics(prometheus, None))
}

/// Serves the admin endpoint on a bound listener until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    core: Arc<Core>,
    node: NodeInfo,
    prometheus: Option<PrometheusHandle>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    ringsync::admin::serve(listener, router(core, node, prometheus), shutdown).await
}

/// `/readyz`: whether the gate takes new work, and why not.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Readiness {
    /// True only while serving: a balancer sends new traffic here.
    pub ready: bool,
    /// The gate's phase.
    pub phase: Phase,
    /// Why it is not ready, one line per cause; empty when ready.
    pub why: Vec<String>,
    /// Transactions in the table, completed ones kept for their
    /// retransmissions included.
    pub transactions: usize,
    /// Of those, the ones waiting for a final response: a stopping gate
    /// exits when this is 0 (R-GW-1).
    #[serde(default)]
    pub in_flight: usize,
    /// Whether the profile store the drain view follows is current. A
    /// stale store leaves the gate ready: it keeps routing with its last
    /// view and says since when (R-MN-2).
    pub store: String,
}

/// `200` with [`Readiness`] when serving, `503` with it otherwise.
async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    let r = readiness(&s.core);
    let code = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(r))
}

/// The gate's readiness as `/readyz` serves it.
pub fn readiness(core: &Core) -> Readiness {
    let (phase, why) = core.lifecycle().readiness();
    Readiness {
        ready: phase == Phase::Serving,
        phase,
        why: why.into_iter().map(str::to_owned).collect(),
        transactions: core.transactions(),
        in_flight: core.in_flight(),
        store: core.store_freshness().describe(work::now_ms()),
    }
}

async fn work(State(s): State<AdminState>) -> Json<WorkReport> {
    Json(report(&s.core, &s.node))
}

/// The gate's work report: only the instances it routes to (sg, esg, and
/// behind a ws pool ws: the connections it passes, R-WS-3); a gate never reports a
/// zero for an mg or an Active-Passive instance, nor for an sg or esg while
/// it cannot vouch for it (each says why: R-ST-3).
pub fn report(core: &Core, node: &NodeInfo) -> WorkReport {
    let view = core.view();
    let book = core.work();
    let now = Instant::now();
    let hold = Duration::from_secs(view.config().dns.failover_hold_s.into());
    let instances: BTreeMap<String, InstanceWork> = view
        .instances()
        .iter()
        .enumerate()
        .filter(|(_, iv)| NodeKind::Gate.counts_on(view.config(), &iv.service))
        .map(|(i, iv)| {
            let unreachable = core.unreachable_over(i, now);
            // R-WS-3, R-ST-4 (issue 37): nothing probes a `ws`; its health
            // is what this gate's connects to it said, never `up` unseen.
            let health = if iv.service == Service::Ws {
                book.ws_health(i, !unreachable.is_empty(), hold, now)
            } else {
                iv.health
            };
            let work = InstanceWork {
                health,
                unreachable,
                ..book.instance_work(i, now)
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
        site_hash: view.config().hash.clone(),
        backups: core.backups_report(),
        run: node.run.clone(),
    }
}
