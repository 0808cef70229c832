//! The WebSocket side of a listener (`transports = ["udp", "ws"]` or
//! `"wss"`, RFC 7118): which transports may go with it, and the upgrade's
//! path and Origin allow-list (`ws_path`, `ws_origins`).
//!
//! A WebSocket listener's port speaks HTTP first, so it cannot also take
//! raw SIP over TCP or TLS: it has exactly one stream transport. It must
//! serve UDP too: the gate reaches the instances behind it, and they reach
//! the gate (a Path, a Record-Route), on the listener's UDP socket, since an
//! instance speaks no WebSocket (the two Record-Routes of RFC 5658 name
//! each side). `wss` takes its certificate from `[tls]` (checked in `tls`).

use super::error::ConfigError;
use super::raw::RawListener;
use super::types::{Transport, WsOptions};
use super::validator::Validator;

impl Validator<'_> {
    /// The WebSocket options of listener `i`: `Some` on a `ws`/`wss`
    /// listener (defaults filled in), `None` elsewhere; an error when the
    /// transports do not fit together or a `ws_` field is on a listener
    /// without WebSocket.
    pub(super) fn ws_options(
        &self,
        i: usize,
        r: &RawListener,
        transports: &[Transport],
    ) -> Result<Option<WsOptions>, ConfigError> {
        let field = format!("listener[{i}].transports");
        let span = r.transports.span();
        let streams = transports.iter().filter(|t| t.is_stream()).count();
        if !transports.iter().any(|t| t.is_ws()) {
            if let Some(p) = &r.ws_path {
                return Err(self.err(
                    p.span(),
                    format!("listener[{i}].ws_path"),
                    "only a listener with \"ws\" or \"wss\" in its transports takes ws_path",
                ));
            }
            if let Some(o) = &r.ws_origins {
                return Err(self.err(
                    o.span(),
                    format!("listener[{i}].ws_origins"),
                    "only a listener with \"ws\" or \"wss\" in its transports takes ws_origins",
                ));
            }
            return Ok(None);
        }
        if streams > 1 {
            return Err(self.err(
                span,
                field,
                "\"ws\"/\"wss\" with another stream transport on one listener: its port speaks HTTP first; give each stream transport a listener (and port) of its own",
            ));
        }
        if !transports.contains(&Transport::Udp) {
            return Err(self.err(
                span,
                field,
                "a \"ws\"/\"wss\" listener needs \"udp\" too: the instances behind it speak no WebSocket and reach the gate on the listener's UDP socket",
            ));
        }
        let path = match &r.ws_path {
            Some(p) if !p.get_ref().starts_with('/') || p.get_ref().contains(' ') => {
                return Err(self.err(
                    p.span(),
                    format!("listener[{i}].ws_path"),
                    "must start with `/` and hold no space",
                ))
            }
            Some(p) => p.get_ref().clone(),
            None => "/".to_owned(),
        };
        let origins = r
            .ws_origins
            .as_ref()
            .map(|o| o.get_ref().clone())
            .unwrap_or_default();
        if let Some(o) = &r.ws_origins {
            if let Some(bad) = o.get_ref().iter().find(|s| s.is_empty() || s.contains(' ')) {
                return Err(self.err(
                    o.span(),
                    format!("listener[{i}].ws_origins"),
                    format!("`{bad}` is not an origin (scheme://host[:port])"),
                ));
            }
        }
        Ok(Some(WsOptions { path, origins }))
    }
}
