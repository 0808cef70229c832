//! Browser sessions of the status page: a token logs in once
//! (`POST /page/login`) and the browser then holds an opaque session id in
//! an `HttpOnly`, `SameSite=Strict` cookie with an expiry, never the token.
//! Each session has its own CSRF token, which a change must carry in the
//! [`CSRF_HEADER`]; [`crate::api::access`] checks both, and the Origin, for
//! every request a cookie authenticates (R-PR-1: a forged POST is a 403).
//!
//! The table is in memory: a restarted `ringsync serve` logs everyone out,
//! which is the safe side. It is bounded ([`MAX_SESSIONS`]): expired
//! sessions go first, then the oldest.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};

use crate::auth::Role;

/// The cookie that carries the session id.
pub const COOKIE: &str = "ringsync_session";

/// The header a change made with a session cookie must carry: the
/// session's CSRF token (a cross-site page cannot read it, so cannot send it).
pub const CSRF_HEADER: &str = "x-ringsync-csrf";

/// How long a session lasts after its login.
pub const TTL: Duration = Duration::from_secs(8 * 3600);

/// At most this many sessions at once.
pub const MAX_SESSIONS: usize = 1024;

/// One logged-in browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The token's name: the audit log's `who`, as through the API.
    pub name: String,
    /// The token's role.
    pub role: Role,
    /// What a change must carry in [`CSRF_HEADER`].
    pub csrf: String,
    expires: Instant,
}

/// The sessions of one `ringsync serve`.
#[derive(Debug, Default)]
pub struct Sessions {
    table: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Opens a session for a token's holder: its id (the cookie's value)
    /// and the session.
    pub fn open(&self, name: &str, role: Role, now: Instant) -> (String, Session) {
        let id = hex(&rand::random::<[u8; 32]>());
        let session = Session {
            name: name.to_owned(),
            role,
            csrf: hex(&rand::random::<[u8; 16]>()),
            expires: now + TTL,
        };
        let mut t = self.lock();
        if t.len() >= MAX_SESSIONS {
            t.retain(|_, s| s.expires > now);
        }
        if t.len() >= MAX_SESSIONS {
            let oldest = t
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                t.remove(&k);
            }
        }
        t.insert(id.clone(), session.clone());
        (id, session)
    }

    /// The live session with this id; an expired one is removed.
    pub fn get(&self, id: &str, now: Instant) -> Option<Session> {
        let mut t = self.lock();
        match t.get(id) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                t.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends a session (logout).
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }

    /// How many sessions are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A panic elsewhere while holding the lock leaves a table that is
        // still whole (every change is one insert or remove).
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The session id a request's cookies carry, if any.
pub fn cookie_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim())
}

/// The `Set-Cookie` value that gives the browser a session: not readable
/// by scripts, never sent cross-site, `Secure` when served over HTTPS.
pub fn set_cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
        TTL.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes it (logout).
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
}

/// Whether a request comes from a page of this server, as far as the
/// browser says: an `Origin` that names another host, or `Sec-Fetch-Site:
/// cross-site`, is a cross-site request. Clients that are no browser (the
/// CLI, curl) send neither and are same-site.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    if text("sec-fetch-site") == Some("cross-site") {
        return false;
    }
    let Some(origin) = text("origin") else {
        return true;
    };
    let host = text("host").unwrap_or_default();
    // `scheme://host[:port]`; "null" (a sandboxed or file page) is no host.
    origin
        .split_once("://")
        .is_some_and(|(_, authority)| !host.is_empty() && authority == host)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_session_expires_and_is_removed() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let (id, sess) = s.open("op-1", Role::Operate, t0);
        assert_eq!(s.get(&id, t0 + TTL / 2), Some(sess.clone()));
        assert_eq!(s.get(&id, t0 + TTL), None);
        assert!(s.is_empty());
        let (id, _) = s.open("op-1", Role::Operate, t0);
        s.close(&id);
        assert_eq!(s.get(&id, t0), None);
    }

    #[test]
    fn the_table_is_bounded() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let first = s.open("a", Role::Read, t0).0;
        for i in 1..MAX_SESSIONS + 10 {
            s.open("a", Role::Read, t0 + Duration::from_millis(i as u64));
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        assert_eq!(s.get(&first, t0), None, "the oldest went first");
    }

    #[test]
    fn cookies_and_origins() {
        let h = headers(&[("cookie", "a=1; ringsync_session=abc ; b=2")]);
        assert_eq!(cookie_of(&h), Some("abc"));
        assert_eq!(cookie_of(&headers(&[("cookie", "a=1")])), None);
        let c = set_cookie("abc", true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "null")
        ])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "cross-site")])));
    }
}
