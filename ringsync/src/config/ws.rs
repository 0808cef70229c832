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
//!
//! A `ws_pool` listener (R-WS-3) is the other kind: it speaks no SIP, it
//! passes each WebSocket connection whole to one of the site's `ws`
//! instances, so it has one WebSocket transport and nothing else, and every
//! `ws` instance needs the `ws` address the gate connects to.

use std::net::SocketAddr;

use toml::Spanned;

use super::error::ConfigError;
use super::listeners::Target;
use super::raw::{RawInstance, RawListener};
use super::types::{Listener, ListenerMode, Service, Transport, WsOptions};
use super::validator::Validator;
use super::{Instance, TlsConfig};

type Result<T> = std::result::Result<T, ConfigError>;

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
        mode: &ListenerMode,
    ) -> Result<Option<WsOptions>> {
        let field = format!("listener[{i}].transports");
        let span = r.transports.span();
        let streams = transports.iter().filter(|t| t.is_stream()).count();
        let pool = matches!(mode, ListenerMode::WsPool { .. });
        self.ws_pool_transports(i, r, transports, pool)?;
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
        if !pool && !transports.contains(&Transport::Udp) {
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

impl Validator<'_> {
    /// `ws_upstream` only on a ws pool, and a ws pool's transports: one
    /// WebSocket transport and nothing else (it speaks no SIP).
    fn ws_pool_transports(
        &self,
        i: usize,
        r: &RawListener,
        transports: &[Transport],
        pool: bool,
    ) -> Result<()> {
        if let (Some(u), false) = (&r.ws_upstream, pool) {
            return Err(self.err(
                u.span(),
                format!("listener[{i}].ws_upstream"),
                "only a `mode = \"ws_pool\"` listener takes ws_upstream",
            ));
        }
        if pool && !matches!(transports, [t] if t.is_ws()) {
            return Err(self.err(
                r.transports.span(),
                format!("listener[{i}].transports"),
                "a ws_pool listener passes WebSocket connections through and speaks no SIP: exactly one of \"ws\" or \"wss\", nothing else",
            ));
        }
        Ok(())
    }

    /// `mode = "ws_pool"` (R-WS-3): `pool = "ws"`, no `instance`, at
    /// least one `ws` instance, each with its `ws` address; `ws_upstream`
    /// is `"ws"` (default) or `"wss"`.
    pub(super) fn ws_pool(
        &self,
        i: usize,
        spanned: &Spanned<RawListener>,
        instances: &[Instance],
    ) -> Result<ListenerMode> {
        let r = spanned.get_ref();
        // A pool other than `ws` is named first, as before `needs`/`takes`.
        if let Some(p) = r.pool.as_ref().filter(|p| p.get_ref() != "ws") {
            return Err(self.err(
                p.span(),
                format!("listener[{i}].pool"),
                format!(
                    "a ws_pool listener fronts the `ws` instances, not `{}`",
                    p.get_ref()
                ),
            ));
        }
        self.target(i, spanned, "ws_pool", Target::Pool("ws"))?;
        let mut ws = instances.iter().filter(|x| x.service == Service::Ws);
        let Some(_) = ws.clone().next() else {
            return Err(self.err(
                spanned.span(),
                format!("listener[{i}].pool"),
                "no instance of `ws` is configured",
            ));
        };
        if let Some(x) = ws.find(|x| x.ws.is_none()) {
            return Err(self.err(
                spanned.span(),
                format!("listener[{i}].pool"),
                format!(
                    "instance `{}` has no `ws` address: a ws_pool listener passes connections to each `ws` instance's `ws = \"ip:port\"`",
                    x.id
                ),
            ));
        }
        let upstream_tls = match &r.ws_upstream {
            None => false,
            Some(u) if u.get_ref() == "ws" => false,
            Some(u) if u.get_ref() == "wss" => true,
            Some(u) => {
                return Err(self.err(
                    u.span(),
                    format!("listener[{i}].ws_upstream"),
                    format!("`{}`: expected \"ws\" or \"wss\"", u.get_ref()),
                ))
            }
        };
        Ok(ListenerMode::WsPool { upstream_tls })
    }

    /// An instance's `ws` address: only a `ws` instance has one.
    pub(super) fn ws_address(
        &self,
        i: usize,
        r: &RawInstance,
        service: &Service,
    ) -> Result<Option<SocketAddr>> {
        match &r.ws {
            Some(a) if *service != Service::Ws => Err(self.err(
                a.span(),
                format!("instance[{i}].ws"),
                format!("only a `ws` instance has a `ws` address, not a `{service}` one"),
            )),
            Some(a) => Ok(Some(*a.get_ref())),
            None => Ok(None),
        }
    }

    /// `ws_upstream = "wss"` verifies the instances against `[tls] ca`,
    /// so it needs one.
    pub(super) fn ws_upstreams(
        &self,
        raw: &[Spanned<RawListener>],
        listeners: &[Listener],
        tls: Option<&TlsConfig>,
    ) -> Result<()> {
        let has_ca = tls.is_some_and(|t| t.ca.is_some());
        for (i, (l, r)) in listeners.iter().zip(raw).enumerate() {
            if let (ListenerMode::WsPool { upstream_tls: true }, false) = (&l.mode, has_ca) {
                let span = r
                    .get_ref()
                    .ws_upstream
                    .as_ref()
                    .map_or(r.span(), |u| u.span());
                return Err(self.err(
                    span,
                    format!("listener[{i}].ws_upstream"),
                    "\"wss\" toward the ws instances needs [tls] ca to verify them",
                ));
            }
        }
        Ok(())
    }
}
