//! The live status page of `ringsync serve` (issue 28): a page at `/` that
//! watches the site and, for those allowed, starts and lifts drains.
//!
//! Every asset is compiled into the binary ([`assets`]: plain HTML, CSS and
//! JavaScript, no framework, no CDN, no external font). The page reads
//! [`data`] (`GET /v1/page`: the API's own status, profiles, handover and
//! audit, nothing of its own) and [`history`] (`GET /v1/page/history`: new
//! work per instance, a bounded ring buffer) every second or two, and makes
//! changes through the API's own endpoints, so they are checked, revisioned
//! and audited exactly as there. A token logs in once (`POST /page/login`)
//! into a session cookie ([`crate::session`]); the API's access guard
//! checks that cookie, its CSRF token and the Origin (R-PR-1).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::handler::Handler;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::access::Caller;
use crate::api::{ep, AdminApi, Endpoint, ErrorBody, Extra, Need};
use crate::auth::Role;
use crate::session;
use ringsync::store::audit::Actor;

mod assets;
pub mod data;
pub mod history;

pub use data::{PageData, ServerRow, Viewer};
pub use history::{History, Sample};

/// How often the chart's history is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Starts sampling the history for the page on `tasks`, until `shutdown`,
/// and gives the page's routes to serve beside the API's.
pub fn start(api: &Arc<AdminApi>, tasks: &TaskTracker, shutdown: &CancellationToken) -> Extra {
    let history = History::new(history::CAPACITY);
    tasks.spawn(history::run(
        api.clone(),
        history.clone(),
        SAMPLE_EVERY,
        shutdown.clone(),
    ));
    routes(history)
}

/// The page's routes with their access rules: the assets and the login are
/// public (they hold no data), the data needs `read`.
pub fn routes(history: Arc<History>) -> Extra {
    use Need::{Public, Role as R};
    let history = Extension(history);
    vec![
        ep(Method::GET, "/", Public, assets::index),
        ep(Method::GET, "/page/app.js", Public, assets::script),
        ep(Method::GET, "/page/style.css", Public, assets::style),
        ep(Method::POST, "/page/login", Public, login),
        ep(Method::POST, "/page/logout", Public, logout),
        ep(Method::GET, "/page/session", R(Role::Read), whoami),
        ep(Method::GET, "/v1/page", R(Role::Read), page_data),
        (
            Endpoint {
                method: Method::GET,
                path: "/v1/page/history",
                need: R(Role::Read),
            },
            on(MethodFilter::GET, page_history.layer(history)),
        ),
    ]
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = ErrorBody {
        error: message.into(),
        current: None,
    };
    (status, Json(body)).into_response()
}

/// The viewer a request that passed the guard is: its token's name and
/// role; without a tokens file, `anonymous` with every right.
fn viewer_of(caller: &Caller) -> Viewer {
    let role = caller
        .actor
        .role
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(Role::Admin);
    Viewer::new(&caller.actor.who, role)
}

/// What `/page/login` and `/page/session` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Who is logged in and what they may do.
    pub viewer: Viewer,
    /// What every change must carry in the `X-Ringsync-Csrf` header
    /// (empty without a tokens file: there is no session then).
    pub csrf: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    token: String,
}

/// `POST /page/login {"token": "..."}`: a session cookie for the token's
/// holder; a wrong token is a 401, audited as a refused `page login`.
async fn login(
    State(api): State<Arc<AdminApi>>,
    peer: Option<Extension<axum::extract::ConnectInfo<crate::api::Peer>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !session::same_origin(&headers) {
        return error(StatusCode::FORBIDDEN, "cross-site login refused");
    }
    let Ok(LoginBody { token }) = serde_json::from_slice(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be {\"token\": \"...\"}",
        );
    };
    if api.is_open() {
        let viewer = Viewer::new("anonymous", Role::Admin);
        let csrf = String::new();
        return Json(SessionInfo { viewer, csrf }).into_response();
    }
    let holder = match api.holder_of(token.trim()) {
        Some(h) => h,
        None => {
            let from = peer.map_or_else(|| "unknown".to_owned(), |p| p.0 .0 .0.to_string());
            let actor = Actor {
                who: "(invalid token)".into(),
                role: None,
                from,
            };
            let mut rec = actor.record("page login", None);
            rec.status = 401;
            rec.error = Some("not a valid token".into());
            api.audit_refusal(rec).await;
            return error(StatusCode::UNAUTHORIZED, "not a valid token");
        }
    };
    let (id, s) = api
        .sessions()
        .open(&holder.name, holder.role, Instant::now());
    let info = SessionInfo {
        viewer: Viewer::new(&s.name, s.role),
        csrf: s.csrf,
    };
    let mut resp = Json(info).into_response();
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(&id, api.is_secure())) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

/// `POST /page/logout`: ends the session and clears the cookie.
async fn logout(State(api): State<Arc<AdminApi>>, headers: HeaderMap) -> Response {
    if !session::same_origin(&headers) {
        return error(StatusCode::FORBIDDEN, "cross-site logout refused");
    }
    if let Some(id) = session::cookie_of(&headers) {
        api.sessions().close(id);
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie()) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

/// `GET /page/session`: who the cookie (or token) is, and the CSRF token.
async fn whoami(
    State(api): State<Arc<AdminApi>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
) -> Response {
    let csrf = session::cookie_of(&headers)
        .and_then(|id| api.sessions().get(id, Instant::now()))
        .map(|s| s.csrf)
        .unwrap_or_default();
    let viewer = viewer_of(&caller);
    Json(SessionInfo { viewer, csrf }).into_response()
}

/// `GET /v1/page`: [`PageData`].
async fn page_data(
    State(api): State<Arc<AdminApi>>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let mut resp = Json(data::read(&api, viewer_of(&caller)).await).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    #[serde(default)]
    after: Option<u64>,
}

/// `GET /v1/page/history`: the chart's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryPage {
    /// Samples held at most (the chart's width).
    pub capacity: usize,
    /// Milliseconds between samples.
    pub every_ms: u64,
    /// The samples after `?after=` (all without), oldest first.
    pub samples: Vec<Sample>,
}

async fn page_history(
    Extension(history): Extension<Arc<History>>,
    Query(q): Query<HistoryQuery>,
) -> Response {
    Json(HistoryPage {
        capacity: history.capacity(),
        every_ms: SAMPLE_EVERY.as_millis() as u64,
        samples: history.since(q.after),
    })
    .into_response()
}
