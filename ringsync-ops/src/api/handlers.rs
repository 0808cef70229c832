//! The endpoints, each with its rule ([`table`]), and their handlers.
//!
//! A change names the revision it was read at with `If-Match: "N"` or a
//! `revision` field in its body; when the profile has moved on it is refused
//! with 409 and the current profile. Without one, the change applies to
//! whatever is current (last writer wins), as before revisions existed.
//! Every change, made or refused, is audited by the store; requests refused
//! before the store sees them (malformed bodies) are audited here.

use ringsync::store::Refusal;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::handler::Handler;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Extension, Json};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::access::{Caller, Endpoint, Need};
use super::{AdminApi, ApiError, ApiResult};
use crate::auth::Role;
use ringsync::profile::{NewProfile, Profile, ProfilePatch, ProfileState};
use ringsync::store::{AuditQuery, Op, StoreError, WriteRequest};

/// Every endpoint with its rule and its handler: the router is built from
/// this table and only from it.
pub(super) fn table() -> Vec<(Endpoint, MethodRouter<Arc<AdminApi>>)> {
    use Need::{Public, Role as R};
    use Role::{Admin, Operate, Read};
    vec![
        ep(Method::GET, "/v1/profiles", R(Read), list_profiles),
        ep(Method::POST, "/v1/profiles", R(Operate), create_profile),
        ep(Method::GET, "/v1/profiles/{id}", R(Read), get_profile),
        ep(
            Method::PATCH,
            "/v1/profiles/{id}",
            R(Operate),
            update_profile,
        ),
        ep(
            Method::DELETE,
            "/v1/profiles/{id}",
            R(Admin),
            delete_profile,
        ),
        ep(
            Method::POST,
            "/v1/profiles/{id}/activate",
            R(Operate),
            activate,
        ),
        ep(
            Method::POST,
            "/v1/profiles/{id}/deactivate",
            R(Operate),
            deactivate,
        ),
        ep(Method::GET, "/v1/status", R(Read), status),
        ep(Method::GET, "/v1/wait", R(Read), super::wait::wait),
        ep(Method::GET, "/v1/handover", R(Read), handover),
        ep(Method::GET, "/v1/audit", R(Read), audit),
        ep(Method::GET, "/metrics", R(Read), metrics_text),
        ep(Method::GET, "/healthz", Public, healthz),
        ep(Method::GET, "/readyz", Public, readyz),
    ]
}

/// One endpoint of the table: its method, path and the role it needs,
/// with its handler (the page's endpoints are made the same way).
pub(crate) fn ep<H, T>(
    method: Method,
    path: &'static str,
    need: Need,
    handler: H,
) -> (Endpoint, MethodRouter<Arc<AdminApi>>)
where
    H: Handler<T, Arc<AdminApi>>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).unwrap_or(MethodFilter::GET);
    (Endpoint { method, path, need }, on(filter, handler))
}

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// A profile with its revision as an entity tag.
fn profile_response(status: StatusCode, p: &Profile) -> Response {
    let mut resp = (status, Json(p)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", p.revision)) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    resp
}

/// The revision a change names: `If-Match` and/or the body's `revision`.
fn expected(headers: &HeaderMap, body: Option<u64>) -> Result<Option<u64>, ApiError> {
    let header = match headers.get(header::IF_MATCH) {
        None => None,
        Some(v) => {
            let s = v.to_str().unwrap_or_default().trim();
            let s = s.strip_prefix("W/").unwrap_or(s).trim_matches('"');
            Some(s.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "If-Match must be a profile revision such as \"7\", not {v:?}"
                ))
            })?)
        }
    };
    match (header, body) {
        (Some(h), Some(b)) if h != b => Err(ApiError::bad_request(format!(
            "If-Match names revision {h} and the body revision {b}: name one"
        ))),
        (h, b) => Ok(h.or(b)),
    }
}

impl AdminApi {
    /// Runs an audited change and answers with the profile.
    async fn change(
        &self,
        caller: &Caller,
        op: Op,
        expect: Option<u64>,
        ok: StatusCode,
    ) -> ApiResult<Response> {
        let audit = Some(caller.actor.record_op(&op, expect));
        let w = WriteRequest { op, expect, audit };
        let written = self.after_write(self.store.write(w).await)?;
        let c = &written.committed;
        let mut resp = profile_response(ok, &c.profile);
        // The body stays the profile (clients parse it as one); whether it
        // changed, or was already as asked and kept its revision, is a header.
        let changed = HeaderValue::from_static(if c.changed { "true" } else { "false" });
        resp.headers_mut().insert(super::CHANGED_HEADER, changed);
        Ok(resp)
    }

    /// Records a change refused before the store saw it, and refuses it.
    async fn refuse(
        &self,
        caller: &Caller,
        op: &str,
        target: Option<&str>,
        e: ApiError,
    ) -> ApiError {
        let mut rec = caller.actor.record(op, target);
        rec.status = e.status.as_u16();
        rec.error = Some(e.message.clone());
        self.audit_refusal(rec).await;
        e
    }
}

async fn list_profiles(State(api): State<Arc<AdminApi>>) -> ApiResult<Response> {
    let set = api.store.list().await?;
    Ok(Json(&*set).into_response())
}

async fn create_profile(
    State(api): State<Arc<AdminApi>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> ApiResult<Response> {
    let new: NewProfile = match parse(&body) {
        Ok(n) => n,
        Err(e) => return Err(api.refuse(&caller, "create", None, e).await),
    };
    api.change(&caller, Op::Create(new), None, StatusCode::CREATED)
        .await
}

async fn get_profile(
    State(api): State<Arc<AdminApi>>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let set = api.store.list().await?;
    match set.find(&id) {
        Some(p) => Ok(profile_response(StatusCode::OK, p)),
        None => Err(StoreError::Refused(Refusal::NotFound { id }).into()),
    }
}

/// A PATCH body: the fields to change, and optionally the revision read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    servers: Option<Vec<String>>,
    #[serde(default)]
    revision: Option<u64>,
}

/// The body of activate, deactivate and delete: empty, or the revision read.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RevisionBody {
    #[serde(default)]
    revision: Option<u64>,
}

async fn update_profile(
    State(api): State<Arc<AdminApi>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let parsed = parse::<PatchBody>(&body).and_then(|b| Ok((expected(&headers, b.revision)?, b)));
    let (expect, b) = match parsed {
        Ok(v) => v,
        Err(e) => return Err(api.refuse(&caller, "update", Some(&id), e).await),
    };
    let patch = ProfilePatch {
        name: b.name,
        description: b.description,
        servers: b.servers,
    };
    api.change(&caller, Op::Update { id, patch }, expect, StatusCode::OK)
        .await
}

/// The revision named by an optional body and `If-Match`; a bad one is
/// refused and audited as `action`.
async fn revision_of(
    api: &AdminApi,
    caller: &Caller,
    action: &str,
    id: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Option<u64>, ApiError> {
    let b = if body.iter().all(u8::is_ascii_whitespace) {
        Ok(RevisionBody::default())
    } else {
        parse::<RevisionBody>(body)
    };
    match b.and_then(|b| expected(headers, b.revision)) {
        Ok(v) => Ok(v),
        Err(e) => Err(api.refuse(caller, action, Some(id), e).await),
    }
}

async fn delete_profile(
    State(api): State<Arc<AdminApi>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let expect = revision_of(&api, &caller, "delete", &id, &headers, &body).await?;
    api.change(&caller, Op::Delete { id }, expect, StatusCode::OK)
        .await
}

/// `?dry_run=true` on activate: the plan, nothing changed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivateQuery {
    #[serde(default)]
    dry_run: bool,
}

async fn activate(
    State(api): State<Arc<AdminApi>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<ActivateQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    if q.dry_run {
        let set = api.store.list().await?;
        let plan = crate::plan::activation(&api.drain.config(), &set, &id)?;
        return Ok(Json(plan).into_response());
    }
    let expect = revision_of(&api, &caller, "activate", &id, &headers, &body).await?;
    let state = ProfileState::Active;
    api.change(&caller, Op::SetState { id, state }, expect, StatusCode::OK)
        .await
}

async fn deactivate(
    State(api): State<Arc<AdminApi>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let expect = revision_of(&api, &caller, "deactivate", &id, &headers, &body).await?;
    let state = ProfileState::Inactive;
    api.change(&caller, Op::SetState { id, state }, expect, StatusCode::OK)
        .await
}

async fn status(State(api): State<Arc<AdminApi>>) -> Response {
    Json(api.site_status()).into_response()
}

async fn handover(State(api): State<Arc<AdminApi>>) -> ApiResult<Response> {
    Ok(Json(api.handover_status().await?).into_response())
}

async fn audit(
    State(api): State<Arc<AdminApi>>,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Response> {
    Ok(Json(api.store.audit_log(q).await?).into_response())
}

async fn metrics_text(State(api): State<Arc<AdminApi>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        api.render_metrics(),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(api): State<Arc<AdminApi>>) -> Response {
    if api.is_ready() {
        // R-MN-2: still ready when stale; the detail says so.
        let detail = api.drain.freshness().describe(ringsync::work::now_ms());
        (StatusCode::OK, format!("ready\n{detail}\n")).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "profile store not read yet\n",
        )
            .into_response()
    }
}
