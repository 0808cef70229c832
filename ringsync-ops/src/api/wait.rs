//! `GET /v1/wait`: a long poll that answers once the instances of some
//! servers are all `drained` (R-ST-1), or at a timeout, for automation that
//! stops a server once its drain is done.
//!
//! It judges the same site status `GET /v1/status` serves (the view with the
//! nodes' last round summed), and looks again only when there is something
//! new: a new view (a profile change) or a new round of the nodes' reports
//! (once a second): no busy loop. A request is held at most
//! [`MAX_WAIT`], and answered 503 at once when the server stops, so a
//! graceful stop never waits out a long poll; the answers and their
//! statuses are in docs/api.md.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio::time::Instant;

use super::{AdminApi, ApiError, ApiResult};
use crate::drained::{self, Outcome, Verdict, WaitAnswer, MAX_WAIT};
use ringsync::store::{Refusal, StoreError};

/// Without `timeout=`.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// What a `GET /v1/wait` asks for.
#[derive(Debug, Default)]
struct WaitParams {
    servers: Vec<String>,
    profile: Option<String>,
    timeout: Option<Duration>,
    changed: Option<String>,
}

impl WaitParams {
    fn parse(pairs: Vec<(String, String)>) -> Result<WaitParams, ApiError> {
        let mut p = WaitParams::default();
        for (k, v) in pairs {
            match k.as_str() {
                "server" => p.servers.push(v),
                "profile" => p.profile = Some(v),
                "changed" => p.changed = Some(v),
                "state" if v == "drained" => {}
                "state" => {
                    return Err(ApiError::bad_request(format!(
                        "state `{v}`: only `drained` can be waited for"
                    )))
                }
                "timeout" => {
                    let t = drained::parse_duration(&v)
                        .map_err(|e| ApiError::bad_request(format!("timeout {e}")))?;
                    if t > MAX_WAIT {
                        return Err(ApiError::bad_request(format!(
                            "timeout `{v}`: at most {}s; ask again to wait longer",
                            MAX_WAIT.as_secs()
                        )));
                    }
                    p.timeout = Some(t);
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "unknown parameter `{k}`: server, profile, state, timeout, changed"
                    )))
                }
            }
        }
        Ok(p)
    }
}

/// The handler of `GET /v1/wait`.
pub(super) async fn wait(
    State(api): State<Arc<AdminApi>>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    let p = WaitParams::parse(pairs)?;
    let mut servers = p.servers;
    if let Some(id) = &p.profile {
        let set = api.store.list().await?;
        let profile = set.find(id).ok_or_else(|| {
            ApiError::from(StoreError::Refused(Refusal::NotFound { id: id.clone() }))
        })?;
        servers.extend(profile.servers.iter().cloned());
    }
    servers.sort();
    servers.dedup();
    if servers.is_empty() {
        return Err(ApiError::bad_request(
            "name the servers (server=, repeat) or a profile=",
        ));
    }
    let deadline = Instant::now() + p.timeout.unwrap_or(DEFAULT_WAIT);
    // Subscribed before the first look, so nothing new is missed between.
    let mut views = api.drain.subscribe();
    let mut rounds = api.nodes.subscribe();
    let (mut views_open, mut rounds_open) = (true, true);
    let stopping = api.stopping.get().cloned().unwrap_or_default();
    loop {
        let st = api.site_status();
        let look = drained::look(&st, &servers)
            .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, e.to_string()))?;
        let (outcome, status) = match &look.verdict {
            Verdict::Drained => (Outcome::Drained, StatusCode::OK),
            Verdict::NotDraining(_) => (Outcome::NotDraining, StatusCode::CONFLICT),
            Verdict::Pending
                if p.changed
                    .as_ref()
                    .is_some_and(|d| *d != drained::digest(&look.progress)) =>
            {
                (Outcome::Changed, StatusCode::OK)
            }
            Verdict::Pending if Instant::now() >= deadline => {
                (Outcome::Timeout, StatusCode::REQUEST_TIMEOUT)
            }
            Verdict::Pending => {
                // A sender gone (the server stopping) is waited past, not
                // polled: only the deadline wakes us then.
                tokio::select! {
                    () = stopping.cancelled() => return Err(ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "ringsync serve is stopping; ask another, or again once it is back",
                    )),
                    r = views.changed(), if views_open => views_open = r.is_ok(),
                    r = rounds.changed(), if rounds_open => rounds_open = r.is_ok(),
                    () = tokio::time::sleep_until(deadline) => {}
                }
                continue;
            }
        };
        let answer = WaitAnswer::new(outcome, &servers, st.revision, look);
        return Ok((status, Json(answer)).into_response());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parameters_are_checked() {
        let p = WaitParams::parse(pairs(&[
            ("server", "a"),
            ("server", "b"),
            ("state", "drained"),
            ("timeout", "2s"),
        ]))
        .unwrap();
        assert_eq!(p.servers, ["a", "b"]);
        assert_eq!(p.timeout, Some(Duration::from_secs(2)));
        for bad in [
            ("state", "up"),
            ("timeout", "301s"),
            ("timeout", "soon"),
            ("servers", "a"),
        ] {
            let e = WaitParams::parse(pairs(&[bad])).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }
}
