//! The rehearsal's polls of the nodes' admin endpoints, once a second:
//! [`crate::http`] with short waits, so one node that hangs does not hold
//! up a sample.

use std::net::SocketAddr;
use std::time::Duration;

use crate::http::Request;

/// The status code and body of `GET path`; `None` when nothing answers.
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let r = Request::new("GET", addr, path)
        .timeouts(Duration::from_millis(300), Duration::from_secs(1))
        .send()
        .ok()?;
    Some((r.status, r.body))
}

/// `GET path` parsed as JSON into `T`, on a 200 only.
pub fn get_json<T: serde::de::DeserializeOwned>(addr: SocketAddr, path: &str) -> Option<T> {
    let (code, body) = get(addr, path)?;
    (code == 200).then_some(())?;
    serde_json::from_str(&body).ok()
}
