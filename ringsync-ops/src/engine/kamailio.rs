//! Kamailio's dispatcher over JSON-RPC on HTTP (`jsonrpcs` + `xhttp`):
//! `dispatcher.list` to read, `dispatcher.set_state` to change.
//!
//! The driver owns one thing of a destination: whether it is disabled
//! (`D`). A draining instance's destination is set `d`: not selected, and
//! not pinged, so a probe that answers does not make it active again
//! behind the driver's back (an `i`nactive destination with the probing
//! flag is re-activated by its first good ping). Inactive or trying states
//! that Kamailio's own probing sets on a normal destination are left to
//! it: they are not a divergence. Kamailio drops the probing flag of a
//! disabled destination; the driver remembers it and gives it back
//! (`ap`) on lift. What it remembers is the flag as first seen enabled,
//! and `P` once seen: a destination an operator hand-sets active without
//! it while it drains (`AX`, which the driver then corrects) still gets
//! its probing back on lift.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::CONTENT_TYPE;
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use super::backend::{Backend, Seen, Want};
use super::error::{bounded, with_causes, EngineError};
use ringsync::config::Service;

/// Most bytes of one JSON-RPC answer read (a dispatcher list of a few
/// thousand destinations fits).
const MAX_ANSWER: usize = 4 << 20;

/// One Kamailio's dispatcher sets.
pub(crate) struct Kamailio {
    at: String,
    url: String,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
    /// instance id → (set, destination URI).
    targets: BTreeMap<String, (u32, String)>,
    /// The probing flag of each destination: as first seen enabled, and
    /// set for good once seen.
    probing: Mutex<HashMap<String, bool>>,
}

impl Kamailio {
    pub(crate) fn new(
        addr: SocketAddr,
        path: &str,
        sets: &BTreeMap<Service, u32>,
        destinations: &BTreeMap<String, String>,
        services: &HashMap<String, Service>,
        timeout: Duration,
    ) -> Kamailio {
        let targets = destinations
            .iter()
            .filter_map(|(id, uri)| {
                let set = sets.get(services.get(id)?)?;
                Some((id.clone(), (*set, uri.clone())))
            })
            .collect();
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeout));
        Kamailio {
            at: addr.to_string(),
            url: format!("http://{addr}{path}"),
            client: Client::builder(TokioExecutor::new()).build(http),
            timeout,
            targets,
            probing: Mutex::new(HashMap::new()),
        }
    }

    /// One JSON-RPC call: its `result`, or the engine's `error`.
    async fn call(&self, method: &str, params: Value) -> Result<Value, EngineError> {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": 1});
        let req = Request::post(&self.url)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| self.garbage(format!("request: {e}")))?;
        let at = self.at.clone();
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| EngineError::Unreachable {
                    at: at.clone(),
                    reason: with_causes(&e),
                })?;
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| EngineError::Unreachable {
                    at: at.clone(),
                    reason: with_causes(&*e),
                })?
                .to_bytes();
            Ok((status, bytes))
        };
        let (status, bytes) = bounded(&self.at, self.timeout, exchange).await?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
            self.garbage(format!(
                "HTTP {status}, not JSON-RPC ({e}): {}",
                snippet(&bytes)
            ))
        })?;
        if let Some(err) = v.get("error") {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error");
            return Err(EngineError::Refused {
                at: self.at.clone(),
                reason: format!("{method}: {msg}"),
            });
        }
        v.get("result")
            .cloned()
            .ok_or_else(|| self.garbage(format!("{method}: no result in {}", snippet(&bytes))))
    }

    fn garbage(&self, reason: String) -> EngineError {
        EngineError::Garbage {
            at: self.at.clone(),
            reason,
        }
    }
}

/// The start of an answer, printable, for error messages.
fn snippet(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(120)]);
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `dispatcher.list`'s result as (set, URI) → FLAGS (`AP`, `DX`, ...).
pub(crate) fn parse_list(result: &Value) -> Result<HashMap<(u32, String), String>, String> {
    let mut out = HashMap::new();
    // An empty dispatcher answers with no RECORDS at all.
    let Some(records) = result.get("RECORDS") else {
        return if result.get("NRSETS").is_some() {
            Ok(out)
        } else {
            Err("no NRSETS nor RECORDS".into())
        };
    };
    let records = records.as_array().ok_or("RECORDS is not a list")?;
    for r in records {
        let set = r.get("SET").ok_or("a record without SET")?;
        let id = set
            .get("ID")
            .and_then(Value::as_u64)
            .ok_or("a SET without a numeric ID")?;
        let id = u32::try_from(id).map_err(|_| "a SET ID out of range")?;
        let targets = set
            .get("TARGETS")
            .and_then(Value::as_array)
            .ok_or("a SET without TARGETS")?;
        for t in targets {
            let d = t.get("DEST").ok_or("a target without DEST")?;
            let uri = d
                .get("URI")
                .and_then(Value::as_str)
                .ok_or("a DEST without URI")?;
            let flags = d
                .get("FLAGS")
                .and_then(Value::as_str)
                .ok_or("a DEST without FLAGS")?;
            out.insert((id, uri.to_owned()), flags.to_owned());
        }
    }
    Ok(out)
}

impl Backend for Kamailio {
    fn address(&self) -> String {
        self.url.clone()
    }

    fn read(&self) -> BoxFuture<'_, Result<BTreeMap<String, Seen>, EngineError>> {
        Box::pin(async move {
            let result = self.call("dispatcher.list", json!([])).await?;
            let list =
                parse_list(&result).map_err(|r| self.garbage(format!("dispatcher.list: {r}")))?;
            let mut probing = self.probing.lock().unwrap_or_else(|e| e.into_inner());
            let mut seen = BTreeMap::new();
            for (id, (set, uri)) in &self.targets {
                let Some(flags) = list.get(&(*set, uri.clone())) else {
                    continue;
                };
                let disabled = flags.starts_with('D');
                if !disabled {
                    *probing.entry(id.clone()).or_default() |= flags.contains('P');
                }
                seen.insert(
                    id.clone(),
                    Seen {
                        says: flags.clone(),
                        excluded: disabled,
                    },
                );
            }
            Ok(seen)
        })
    }

    fn apply<'a>(&'a self, id: &'a str, want: Want) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let Some((set, uri)) = self.targets.get(id) else {
                return Err(self.garbage(format!("no destination for `{id}`")));
            };
            let probe = self
                .probing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(id)
                .copied();
            let state = match (want, probe) {
                (Want::Drain, Some(true)) => "dp",
                (Want::Drain, _) => "d",
                (Want::Active, Some(true)) => "ap",
                (Want::Active, _) => "a",
            };
            self.call("dispatcher.set_state", json!([state, set, uri]))
                .await
                .map(|_| ())
        })
    }

    fn target(&self, id: &str) -> Option<String> {
        self.targets
            .get(id)
            .map(|(set, uri)| format!("set {set} {uri}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_ex_1_dispatcher_list_parses_and_garbage_is_named() {
        let v: Value = serde_json::from_str(
            r#"{"NRSETS":1,"RECORDS":[{"SET":{"ID":1,"TARGETS":[
                {"DEST":{"URI":"sip:127.0.86.21:5060","FLAGS":"DX","PRIORITY":0}},
                {"DEST":{"URI":"sip:127.0.86.22:5060","FLAGS":"AP","PRIORITY":0}}]}}]}"#,
        )
        .unwrap();
        let l = parse_list(&v).unwrap();
        assert_eq!(l[&(1, "sip:127.0.86.21:5060".to_owned())], "DX");
        assert_eq!(l[&(1, "sip:127.0.86.22:5060".to_owned())], "AP");
        assert!(parse_list(&json!({"NRSETS": 0})).unwrap().is_empty());
        assert!(parse_list(&json!({"x": 1})).is_err());
        assert!(parse_list(&json!({"NRSETS":1,"RECORDS":[{"SET":{"ID":"one"}}]})).is_err());
    }
}
