//! Who may call which endpoint: every route of the API has a rule in the
//! table it is built from ([`super::endpoints`]), and one layer around the
//! whole router checks it before any handler runs. A route without a rule
//! is refused to everyone (default deny), so a new endpoint is closed until
//! someone says who may call it.
//!
//! 401 without a valid bearer token, 403 for a role below the rule's; in
//! both cases nothing runs, and a refused change (any method but GET) is
//! recorded in the audit log. Without a tokens file (allowed on loopback
//! only) every caller is `anonymous` with every right.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{AdminApi, ApiError};
use crate::auth::{Role, Tokens};
use crate::session::{self, Session};
use ringsync::store::audit::Actor;
use subtle::ConstantTimeEq;

/// Who may call an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Anyone, without a token (liveness and readiness probes).
    Public,
    /// A token with this role or a stronger one.
    Role(Role),
}

/// One endpoint and its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The method.
    pub method: Method,
    /// The path as routed (`/v1/profiles/{id}`).
    pub path: &'static str,
    /// Who may call it.
    pub need: Need,
}

/// How callers are told apart.
#[derive(Clone, Debug)]
pub enum Access {
    /// No tokens file: every caller may do everything (loopback only).
    Open,
    /// Bearer tokens from a tokens file.
    Tokens(Arc<Tokens>),
}

/// The caller of a request that passed the check, for handlers to audit.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Who and from where.
    pub actor: Actor,
}

/// The peer address of a connection, for the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

impl Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>> for Peer {
    fn connect_info(s: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Peer {
        Peer(*s.remote_addr())
    }
}

impl Connected<axum::serve::IncomingStream<'_, super::tls::TlsListener>> for Peer {
    fn connect_info(s: axum::serve::IncomingStream<'_, super::tls::TlsListener>) -> Peer {
        Peer(*s.remote_addr())
    }
}

/// The rules, by method and routed path.
#[derive(Debug, Default)]
pub(super) struct Rules(HashMap<(Method, &'static str), Need>);

impl Rules {
    pub(super) fn new(endpoints: &[Endpoint]) -> Rules {
        Rules(
            endpoints
                .iter()
                .map(|e| ((e.method.clone(), e.path), e.need))
                .collect(),
        )
    }

    fn get(&self, method: &Method, path: &str) -> Option<Need> {
        // HEAD is answered by GET's handler, and may do what GET may.
        let m = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        self.0
            .iter()
            .find(|((rm, rp), _)| rm == m && *rp == path)
            .map(|(_, n)| *n)
    }

    fn has_path(&self, path: &str) -> bool {
        self.0.keys().any(|(_, p)| *p == path)
    }
}

/// The layer around the router: authenticate, then check the rule.
pub(super) async fn guard(
    State((api, rules)): State<(Arc<AdminApi>, Arc<Rules>)>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    let routed = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned());
    let from = req
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map_or_else(|| "unknown".to_owned(), |c| c.0 .0.to_string());
    let need = routed.as_deref().and_then(|p| rules.get(&method, p));
    if need == Some(Need::Public) {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let target = RawPathParams::from_request_parts(&mut parts, &())
        .await
        .ok()
        .and_then(|p| p.iter().next().map(|(_, v)| v.to_owned()));
    let refusal = Refusal {
        api: &api,
        method: &method,
        routed: routed.as_deref(),
        target: target.as_deref(),
    };
    let (actor, session) = match authenticate(&api, &parts.headers, from) {
        Ok(found) => found,
        Err(actor) => {
            return refusal
                .deny(&actor, StatusCode::UNAUTHORIZED, unauthorized())
                .await
        }
    };
    if !is_read(&method) {
        if let Err(msg) = cross_site(&parts.headers, session.as_ref()) {
            return refusal.deny(&actor, StatusCode::FORBIDDEN, msg).await;
        }
    }
    let Some(path) = routed.as_deref() else {
        // No route: the fallback answers 404, to callers with a token only.
        return next.run(Request::from_parts(parts, body)).await;
    };
    let role = role_of(&api.access, &actor);
    let msg = match need {
        Some(Need::Role(need)) if role >= need => None,
        Some(Need::Role(need)) => Some(format!(
            "{} has role {role}; {method} {path} needs {need}",
            actor.who
        )),
        None if rules.has_path(path) => {
            return ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
                .into_response()
        }
        None => {
            tracing::error!(%method, path, "no access rule for this endpoint: refused to everyone (add it to the API's endpoint table)");
            Some(format!("{method} {path} has no access rule: refused"))
        }
        Some(Need::Public) => None,
    };
    if let Some(msg) = msg {
        return refusal.deny(&actor, StatusCode::FORBIDDEN, msg).await;
    }
    parts.extensions.insert(Caller { actor });
    next.run(Request::from_parts(parts, body)).await
}

fn unauthorized() -> String {
    "a valid bearer token is needed (Authorization: Bearer TOKEN)".into()
}

/// The caller named by a valid token, or by the session cookie of the
/// status page (with that session, whose CSRF token a change must carry);
/// else `Err` with who they claimed to be. A bearer token wins over a cookie.
fn authenticate(
    api: &AdminApi,
    headers: &axum::http::HeaderMap,
    from: String,
) -> Result<(Actor, Option<Session>), Actor> {
    let tokens = match &api.access {
        Access::Open => {
            let actor = Actor {
                who: "anonymous".into(),
                role: None,
                from,
            };
            return Ok((actor, None));
        }
        Access::Tokens(t) => t.current(),
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let session = match (bearer, session::cookie_of(headers)) {
        (None, Some(id)) => api
            .sessions
            .get(id, Instant::now())
            .filter(|s| tokens.holds(&s.name, s.role)),
        _ => None,
    };
    if let Some(s) = session {
        let actor = Actor {
            who: s.name.clone(),
            role: Some(s.role.as_str().to_owned()),
            from,
        };
        return Ok((actor, Some(s)));
    }
    match bearer.and_then(|t| tokens.check(t)) {
        Some(h) => Ok((
            Actor {
                who: h.name,
                role: Some(h.role.as_str().to_owned()),
                from,
            },
            None,
        )),
        None => Err(Actor {
            who: if bearer.is_some() {
                "(invalid token)".into()
            } else {
                "(no token)".into()
            },
            role: None,
            from,
        }),
    }
}

/// R-PR-1 against cross-site requests: a change a browser sends from
/// another site's page is refused, and one a session cookie authenticates
/// must also carry that session's CSRF token (a cross-site page cannot read
/// it). Bearer-token clients that are no browser send no Origin and pass.
fn cross_site(headers: &axum::http::HeaderMap, session: Option<&Session>) -> Result<(), String> {
    if !session::same_origin(headers) {
        return Err("cross-site request refused: its Origin is not this server".into());
    }
    let Some(s) = session else { return Ok(()) };
    let sent = headers
        .get(session::CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let ok: bool = sent.as_bytes().ct_eq(s.csrf.as_bytes()).into();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a change made with a session cookie needs the session's {} header",
            session::CSRF_HEADER
        ))
    }
}

fn role_of(access: &Access, actor: &Actor) -> Role {
    match access {
        Access::Open => Role::Admin,
        Access::Tokens(_) => actor
            .role
            .as_deref()
            .and_then(|r| r.parse().ok())
            .unwrap_or(Role::Read),
    }
}

struct Refusal<'a> {
    api: &'a AdminApi,
    method: &'a Method,
    routed: Option<&'a str>,
    target: Option<&'a str>,
}

impl Refusal<'_> {
    /// Refuses; a refused change is audited (with the method and path it
    /// asked for, since no handler ran to name it).
    async fn deny(&self, actor: &Actor, status: StatusCode, msg: String) -> Response {
        // Refused for want of a valid token (401) or of a role (403).
        metrics::counter!("ringsync_api_refused_total", "status" => status.as_str().to_owned())
            .increment(1);
        if let (false, Some(path)) = (is_read(self.method), self.routed) {
            let mut rec = actor.record(&format!("{} {path}", self.method), self.target);
            rec.status = status.as_u16();
            rec.error = Some(msg.clone());
            self.api.audit_refusal(rec).await;
        }
        let mut resp = ApiError::new(status, msg).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"ringsync\""),
            );
        }
        resp
    }
}

fn is_read(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}
