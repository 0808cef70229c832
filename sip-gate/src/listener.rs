//! What the core knows of each listener: its advertised address, mode and
//! leg, resolved from the config once (instance ids become indexes), and the
//! set of addresses that are the gate itself.
//!
//! Below the routing core and the drain policy, which both read it.

use std::net::SocketAddr;

use ringsync::config::{Leg, ListenerMode, Service, SiteConfig, Transport, WsOptions};

/// One listener as the core sees it.
#[derive(Debug, Clone)]
pub(crate) struct ListenerCtx {
    /// Address written into Via and Record-Route.
    pub(crate) advertise: SocketAddr,
    /// Balance or guard.
    pub(crate) mode: Mode,
    /// Side it faces.
    pub(crate) leg: Leg,
    /// Serves UDP.
    pub(crate) udp: bool,
    /// Serves a stream transport: TCP, TLS when `tls`, WebSocket when `ws`.
    pub(crate) tcp: bool,
    /// Its stream transport is TLS (RFC 3261 26): Via `SIP/2.0/TLS`,
    /// Record-Route `transport=tls` (or `sips:`), connections with rustls.
    /// Also true on a `wss` listener (TLS under the WebSocket).
    pub(crate) tls: bool,
    /// Its stream transport is WebSocket (RFC 7118; `ws`, or `wss` with
    /// `tls`): Via `SIP/2.0/WS(S)`, Record-Route `transport=ws(s)`, the
    /// upgrade checked against these options, and no connection opened
    /// from it (a browser cannot be connected to).
    pub(crate) ws: Option<WsOptions>,
    /// `advertise` as written in SIP (IPv6 in brackets).
    pub(crate) host: String,
    /// Who may start new dialogs here (`[listener.access]`).
    pub(crate) access: ringsync::config::AccessList,
}

/// A listener's mode, resolved to indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// New dialogs go to a member of this service's ring.
    Balance(Service),
    /// Everything goes to this instance (index into the config's instances).
    Guard(usize),
    /// A ws pool (R-WS-3): no SIP at all; each WebSocket connection goes
    /// whole to a `ws` instance (`transport/ws/pool.rs`), over TLS when
    /// `upstream_tls`.
    WsPool {
        /// Connect to the instances over TLS.
        upstream_tls: bool,
    },
}

impl Mode {
    /// Whether instance `idx` (of service `service`) is one this listener
    /// fronts: a member of its pool, or the guarded instance.
    pub(crate) fn fronts(&self, idx: usize, service: &Service) -> bool {
        match self {
            Mode::Balance(pool) => service == pool,
            Mode::Guard(g) => idx == *g,
            Mode::WsPool { .. } => *service == Service::Ws,
        }
    }
}

/// A listener names an instance the config does not define.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownInstance(pub(crate) String);

/// Every listener of a site, and the gate's own addresses.
#[derive(Debug, Clone)]
pub(crate) struct Listeners {
    ctx: Vec<ListenerCtx>,
    /// Bind and advertised addresses of every listener, sorted.
    own: Vec<SocketAddr>,
}

impl Listeners {
    /// Resolves the listeners of a validated site.
    pub(crate) fn new(config: &SiteConfig) -> Result<Listeners, UnknownInstance> {
        let mut ctx = Vec::with_capacity(config.listeners.len());
        for l in &config.listeners {
            let mode = match &l.mode {
                ListenerMode::Balance { pool } => Mode::Balance(pool.clone()),
                ListenerMode::Guard { instance } => Mode::Guard(
                    config
                        .instances
                        .iter()
                        .position(|i| &i.id == instance)
                        .ok_or_else(|| UnknownInstance(l.name.clone()))?,
                ),
                ListenerMode::WsPool { upstream_tls } => Mode::WsPool {
                    upstream_tls: *upstream_tls,
                },
            };
            ctx.push(ListenerCtx {
                advertise: l.advertise,
                mode,
                leg: l.leg,
                udp: l.transports.contains(&Transport::Udp),
                tcp: l.transports.iter().any(|t| t.is_stream()),
                tls: l.transports.contains(&Transport::Tls)
                    || l.transports.contains(&Transport::Wss),
                ws: l.ws.clone(),
                // SocketAddr's Display writes IPv6 in brackets, as SIP wants.
                host: l.advertise.to_string(),
                access: l.access.clone(),
            });
        }
        let mut own: Vec<SocketAddr> = config
            .listeners
            .iter()
            .flat_map(|l| [l.advertise, l.bind])
            .collect();
        own.sort();
        own.dedup();
        Ok(Listeners { ctx, own })
    }

    /// The listeners, in config order.
    pub(crate) fn all(&self) -> &[ListenerCtx] {
        &self.ctx
    }

    /// Listener `idx`. Indexes come from the transport, which only has
    /// listeners of this config.
    pub(crate) fn get(&self, idx: usize) -> Option<&ListenerCtx> {
        self.ctx.get(idx)
    }

    /// Whether `addr` is one of the gate's own addresses.
    pub(crate) fn is_own(&self, addr: SocketAddr) -> bool {
        self.own.binary_search(&addr).is_ok()
    }
}

impl ListenerCtx {
    /// The transport name of its stream in a Via (`TCP`, `TLS`, `WS`,
    /// `WSS`; RFC 3261 26, RFC 7118 5).
    pub(crate) fn stream_via(&self) -> &'static str {
        match (self.ws.is_some(), self.tls) {
            (true, true) => "WSS",
            (true, false) => "WS",
            (false, true) => "TLS",
            (false, false) => "TCP",
        }
    }

    /// The URI parameter naming its stream transport (`;transport=tcp`,
    /// `tls`, `ws`, `wss`).
    pub(crate) fn stream_param(&self) -> &'static str {
        match (self.ws.is_some(), self.tls) {
            (true, true) => ";transport=wss",
            (true, false) => ";transport=ws",
            (false, true) => ";transport=tls",
            (false, false) => ";transport=tcp",
        }
    }
}
