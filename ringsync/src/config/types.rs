//! The validated site model: every public type of a site file.
//!
//! Plain data with serde derives; what the fields may hold is checked in
//! [`super::validate`], which is the only place these are built from a file.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The service an instance runs. Anything that is not one of the built-in
/// services is an Active-Passive service, named by the operator and
/// declared by an `[[ap_group]]` of its instances (`services.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Service {
    /// Subscriber SIP gateway (Active-Active).
    Sg,
    /// External SIP gateway toward providers (Active-Active).
    Esg,
    /// Media gateway, assigned per call by the controller.
    Mg,
    /// Media gateway bound to the local sg/esg; never drained (R-BG-1).
    Bgmg,
    /// Web/WebSocket front; not drained (R-WS-1).
    Ws,
    /// An Active-Passive service (one leader per group).
    Other(String),
}

impl Service {
    /// The name used in config files and reports.
    pub fn as_str(&self) -> &str {
        match self {
            Service::Sg => "sg",
            Service::Esg => "esg",
            Service::Mg => "mg",
            Service::Bgmg => "bgmg",
            Service::Ws => "ws",
            Service::Other(s) => s,
        }
    }

    /// True for services balanced Active-Active over a hash ring (R-AA-*).
    pub fn is_active_active(&self) -> bool {
        matches!(self, Service::Sg | Service::Esg | Service::Mg)
    }

    /// True for services whose instances speak SIP and sit behind sip-gate.
    pub fn is_sip(&self) -> bool {
        matches!(self, Service::Sg | Service::Esg)
    }

    /// True for services the drain never touches (R-BG-1, R-WS-1).
    pub fn never_drained(&self) -> bool {
        matches!(self, Service::Bgmg | Service::Ws)
    }
}

impl From<String> for Service {
    fn from(s: String) -> Self {
        match s.as_str() {
            "sg" => Service::Sg,
            "esg" => Service::Esg,
            "mg" => Service::Mg,
            "bgmg" => Service::Bgmg,
            "ws" => Service::Ws,
            _ => Service::Other(s),
        }
    }
}

impl From<Service> for String {
    fn from(s: Service) -> Self {
        s.as_str().to_owned()
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where profiles are stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum StoreConfig {
    /// A local file with atomic replace (default; one machine).
    Embedded {
        /// Absolute path of the profiles file (relative paths are resolved
        /// against the directory of the site file).
        path: PathBuf,
    },
    /// An etcd cluster (a site with several gate nodes).
    Etcd {
        /// Client endpoints, e.g. `http://127.0.0.1:2379`.
        endpoints: Vec<String>,
        /// Key prefix under which the site's profiles live.
        prefix: String,
        /// This node's last-known view cache (R-MN-2), resolved against the
        /// site file's directory; default `<site>.view-cache.json` there.
        cache: PathBuf,
    },
}

/// Timers of the drain behaviour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timers {
    /// `Retry-After` seconds in a drain 503 (R-SG-5). Default 30.
    pub retry_after_s: u32,
    /// Up to this many seconds are added at random to `Retry-After`, so a
    /// drained population does not come back at one instant. Default 10.
    pub retry_after_jitter_s: u32,
    /// Window over which the mg controller sheds a draining mg (R-MG-1). Default 180.
    pub mg_drain_window_s: u32,
    /// Minimum time between two Active-Passive leader moves (R-AP-2). Default
    /// 60; below 60 only with `ap_test_pace_allowed`.
    pub ap_pace_s: u32,
    /// Allows an `ap_pace_s` below 60 (down to 1) for test and lab sites, so
    /// a handover can be watched in seconds. Never set it in production:
    /// R-AP-2 asks for at most one group per minute. Default false.
    pub ap_test_pace_allowed: bool,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            retry_after_s: 30,
            retry_after_jitter_s: 10,
            mg_drain_window_s: 180,
            ap_pace_s: 60,
            ap_test_pace_allowed: false,
        }
    }
}

impl Timers {
    /// The smallest `ap_pace_s` a production site may set (R-AP-2).
    pub const MIN_AP_PACE_S: u32 = 60;

    /// The mg drain window as a duration.
    pub fn mg_drain_window(&self) -> Duration {
        Duration::from_secs(self.mg_drain_window_s.into())
    }
    /// The Active-Passive pace as a duration.
    pub fn ap_pace(&self) -> Duration {
        Duration::from_secs(self.ap_pace_s.into())
    }
}

/// Drain policy switches that are not timers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrainPolicy {
    /// Answer out-of-dialog OPTIONS with 503 while the instance drains, so
    /// providers that pick trunks by OPTIONS pings move away. Default false.
    pub options_503: bool,
}

#[allow(clippy::derivable_impls)] // spelled out so the default is visible next to the doc
impl Default for DrainPolicy {
    fn default() -> Self {
        DrainPolicy { options_503: false }
    }
}

/// How a gate accounts for the work it routes (R-ST-2, R-ST-3): the bounds
/// its tables keep, and the longest lives it assumes for work it cannot see
/// end. Every field must be positive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkConfig {
    /// The longest registration or subscription expiry the site's
    /// registrars and notifiers grant, in seconds. A gate that restarted
    /// cannot vouch for its counts until this long after it started (work
    /// set up before may still be alive); a 2xx that grants more is counted
    /// as granted and logged. Default 3600 (RFC 3261's default expiry).
    pub max_expires_s: u32,
    /// An established call in which no request has been seen for this
    /// long (no re-INVITE, UPDATE or session-timer refresh, no BYE) is
    /// assumed gone. Also bounds how long a restarted gate cannot vouch for
    /// calls set up before it started. Default 43200 (12 h).
    pub max_call_age_s: u32,
    /// The hold time assumed for a call's remaining life in the drain ETA
    /// while too few calls have ended on this gate to estimate it. Default 180.
    pub typical_call_s: u32,
    /// At most this many calls are tracked; past it the gate reports its
    /// counts unknown rather than wrong. Default 1000000.
    pub max_calls: u32,
    /// At most this many registration bindings. Default 1000000.
    pub max_registrations: u32,
    /// At most this many subscriptions. Default 1000000.
    pub max_subscriptions: u32,
}

impl Default for WorkConfig {
    fn default() -> Self {
        WorkConfig {
            max_expires_s: 3600,
            max_call_age_s: 43_200,
            typical_call_s: 180,
            max_calls: 1_000_000,
            max_registrations: 1_000_000,
            max_subscriptions: 1_000_000,
        }
    }
}

impl WorkConfig {
    /// How long after it starts a gate cannot vouch for its counts: the
    /// longer of `max_expires_s` and `max_call_age_s`.
    pub fn blind_window(&self) -> Duration {
        Duration::from_secs(self.max_expires_s.max(self.max_call_age_s).into())
    }
}

/// Health probing of instances (OPTIONS pings from the gate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Probe every this many milliseconds; 0 disables probing (instances are
    /// then assumed up). Default 1000.
    pub interval_ms: u64,
    /// A probe without answer after this many milliseconds fails. Default 500.
    pub timeout_ms: u64,
    /// Consecutive failures before an instance is `down`. Default 3.
    pub failures: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            interval_ms: 1000,
            timeout_ms: 500,
            failures: 3,
        }
    }
}

/// How sip-gate resolves the host names instances send requests to
/// (RFC 3263: NAPTR, SRV, then A/AAAA).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DnsConfig {
    /// Name servers to ask (`ip:port`), in order; empty (the default): the
    /// system's, from /etc/resolv.conf.
    pub nameservers: Vec<SocketAddr>,
    /// A query without answer after this many milliseconds is retried or
    /// fails. Default 2000.
    pub timeout_ms: u64,
    /// Tries per query and name server. Default 2.
    pub attempts: u32,
    /// Names whose answers the gate keeps (per their TTL); beyond it the
    /// oldest go. Default 4096.
    pub cache_size: usize,
    /// Longest time a name that does not resolve is remembered as such
    /// (a negative answer's own TTL, capped here). Default 30.
    pub negative_ttl_s: u32,
    /// How long a target that failed (TCP connect refused or timed out, an
    /// ICMP error for a UDP send) is passed over for the next one. Default 30.
    pub failover_hold_s: u32,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            nameservers: Vec::new(),
            timeout_ms: 2000,
            attempts: 2,
            cache_size: 4096,
            negative_ttl_s: 30,
            failover_hold_s: 30,
        }
    }
}

/// sip-gate's TCP connections: the table's bound and when an idle one closes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpConfig {
    /// Open connections (accepted and opened by the gate) beyond which new
    /// inbound ones are refused, so a flood cannot exhaust the file
    /// descriptors established calls need. Default 16384.
    pub max_connections: usize,
    /// A connection with no traffic this many seconds is closed, unless a
    /// subscriber's registration uses it (it is then kept until that
    /// registration expires: RFC 5626 flows). Default 600.
    pub idle_s: u32,
    /// A message whose first bytes arrived must be complete within this
    /// many seconds, or the connection is closed: a peer dribbling a byte
    /// at a time (slowloris) never looks idle, and would otherwise hold a
    /// connection and a 64 KB buffer for as long as it likes. Default 10.
    pub frame_s: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            max_connections: 16_384,
            idle_s: 600,
            frame_s: 10,
        }
    }
}

impl TcpConfig {
    /// The idle time as a duration.
    pub fn idle(&self) -> Duration {
        Duration::from_secs(self.idle_s.into())
    }

    /// The time a started message has to complete.
    pub fn frame(&self) -> Duration {
        Duration::from_secs(self.frame_s.into())
    }
}

/// Settings of the admin HTTP endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where `ringsync serve` listens (API, /metrics). Default 127.0.0.1:8080.
    pub bind: SocketAddr,
    /// Where `sip-gate` exposes /metrics and its work report (/v1/work).
    /// Default 127.0.0.1:9091.
    pub gate_bind: SocketAddr,
    /// Where `media-ctl` exposes /metrics, /v1/status and /v1/work.
    /// Default 127.0.0.1:9092.
    pub media_bind: SocketAddr,
    /// The API's tokens file (hashes only; `ringsync token add` writes it).
    /// Without it the API asks no one for a token: allowed on a loopback
    /// address only.
    pub tokens: Option<PathBuf>,
    /// The API's TLS certificate chain (PEM); with `tls_key`, the API
    /// serves HTTPS only.
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM).
    pub tls_key: Option<PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            gate_bind: SocketAddr::from(([127, 0, 0, 1], 9091)),
            media_bind: SocketAddr::from(([127, 0, 0, 1], 9092)),
            tokens: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// One physical or virtual server of the site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Server {
    /// Server name, unique on the site; profiles name servers.
    pub name: String,
}

/// An exception to the drain 503 (R-SG-3, R-ESG-3). Every field that is set
/// must match; `all = true` matches every request (the instance or account is
/// exempt from drain refusals altogether).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Exception {
    /// Matches every request.
    pub all: bool,
    /// Source address of the request within this network.
    pub source: Option<IpNet>,
    /// Address of record (the To URI of REGISTER/SUBSCRIBE, the From URI of
    /// INVITE), compared without parameters, scheme and host case-insensitive.
    pub aor: Option<String>,
    /// User part of the address of record.
    pub user: Option<String>,
    /// Host part of the address of record.
    pub domain: Option<String>,
    /// Request method, e.g. `OPTIONS`.
    pub method: Option<String>,
}

impl Exception {
    pub(super) fn is_empty(&self) -> bool {
        !self.all
            && self.source.is_none()
            && self.aor.is_none()
            && self.user.is_none()
            && self.domain.is_none()
            && self.method.is_none()
    }
}

/// One instance of a service on a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Instance {
    /// Instance id, unique on the site; also written into Record-Route tokens,
    /// so it is restricted to `[A-Za-z0-9._-]`.
    pub id: String,
    /// The service it runs.
    pub service: Service,
    /// The server it runs on.
    pub server: String,
    /// SIP address (sg, esg).
    pub sip: Option<SocketAddr>,
    /// rtpengine ng control address (mg, bgmg).
    pub ng: Option<SocketAddr>,
    /// sg/esg: the IP their ng commands to media-ctl come from; it ties the
    /// commands to the instance's server for the bgmg rules (R-BG-*).
    /// Defaults to the IP of `sip`; `None` for other services.
    pub ng_source: Option<std::net::IpAddr>,
    /// Exceptions to the drain 503 for this instance (R-SG-3).
    pub exceptions: Vec<Exception>,
    /// Source networks whose messages are this instance's own, besides its
    /// `sip` address (an instance whose TCP connections come from ephemeral
    /// ports). Empty: only the exact `sip` address is the instance (R-SEC-1).
    pub sources: Vec<IpNet>,
}

/// How requests are matched to an esg account.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountMatch {
    /// Source networks of the provider.
    pub source: Vec<IpNet>,
    /// Domains (host of the From URI on the provider leg, or of the To URI
    /// for REGISTER), compared case-insensitively.
    pub domain: Vec<String>,
}

/// An esg account (provider or trunk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Account {
    /// Account name, unique on the site.
    pub name: String,
    /// Served by several esg instances; only these are refused on a draining
    /// esg (R-ESG-2) and moved between instances (R-ESG-5).
    pub multi_instance: bool,
    /// Home esg instance of a single-instance account (R-ESG-5).
    pub home: Option<String>,
    /// How requests are matched to this account.
    pub matcher: AccountMatch,
    /// Exceptions to the drain 503 for this account (R-ESG-3).
    pub exceptions: Vec<Exception>,
}

/// An Active-Passive group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApGroup {
    /// Group name, unique on the site.
    pub name: String,
    /// Member instance ids, leader candidates in order of preference.
    pub members: Vec<String>,
    /// The home leader (where leadership returns after a drain, R-AP-3).
    pub home: String,
    /// Order of moves: groups move in ascending priority (1 before 2), then
    /// by name. Default 100.
    pub priority: u32,
}

/// Transport of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// SIP over UDP.
    Udp,
    /// SIP over TCP.
    Tcp,
    /// SIP over TLS over TCP (RFC 3261 26); needs `[tls]`, and excludes
    /// `tcp` on the same listener.
    Tls,
    /// SIP over WebSocket (RFC 7118) for browsers and WebRTC clients; the
    /// listener's only stream transport, beside `udp` (its instance side).
    Ws,
    /// SIP over secure WebSocket (RFC 7118, TLS from `[tls]`); like `ws`.
    Wss,
}

impl Transport {
    /// Whether this is a WebSocket transport (`ws` or `wss`).
    pub fn is_ws(self) -> bool {
        matches!(self, Transport::Ws | Transport::Wss)
    }

    /// Whether this transport runs over a TCP connection (everything but
    /// `udp`).
    pub fn is_stream(self) -> bool {
        !matches!(self, Transport::Udp)
    }
}

/// Which side of the platform a listener faces. The esg rules apply on
/// `provider` only (R-ESG-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Leg {
    /// Subscribers' user agents.
    Subscriber,
    /// Providers and trunks.
    Provider,
    /// Inside the platform.
    Inside,
}

/// How a listener picks the instance for a new dialog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ListenerMode {
    /// In front of a pool: new dialogs go to a member of the service's ring.
    Balance {
        /// The service whose instances form the pool.
        pool: Service,
    },
    /// Inline in front of one instance: answers 503 on its behalf while it drains.
    Guard {
        /// The guarded instance id.
        instance: String,
    },
}

/// A SIP listener of sip-gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listener {
    /// Listener name, unique on the site.
    pub name: String,
    /// Address to bind (UDP and/or TCP on the same port).
    pub bind: SocketAddr,
    /// Address written into Via and Record-Route; defaults to `bind`.
    pub advertise: SocketAddr,
    /// Transports served.
    pub transports: Vec<Transport>,
    /// Balance or guard.
    pub mode: ListenerMode,
    /// Which side it faces.
    pub leg: Leg,
    /// `[listener.access]`: the sources that may start new dialogs here.
    pub access: super::AccessList,
    /// `[listener.auth_ban]`: bans of sources that fail authentication
    /// (R-SEC-3).
    pub auth_ban: super::AuthBan,
    /// The WebSocket upgrade's checks, on a `ws`/`wss` listener only.
    pub ws: Option<WsOptions>,
}

/// What a `ws`/`wss` listener accepts at the HTTP upgrade (RFC 6455 4.2,
/// RFC 7118 4): the request path, and the `Origin`s allowed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WsOptions {
    /// The path the upgrade must ask for (`ws_path`, default `/`).
    pub path: String,
    /// The `Origin` values let in (`ws_origins`, compared without case);
    /// empty lets in any origin, and a request without `Origin` (not a
    /// browser).
    pub origins: Vec<String>,
}

impl WsOptions {
    /// Whether a handshake with this `Origin` header (if any) is let in:
    /// any when the list is empty, else only a listed one, and never a
    /// missing one (a browser always sends it, RFC 6454 7).
    pub fn origin_allowed(&self, origin: Option<&str>) -> bool {
        if self.origins.is_empty() {
            return true;
        }
        origin.is_some_and(|o| self.origins.iter().any(|a| a.eq_ignore_ascii_case(o)))
    }
}

/// Site-wide identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Site {
    /// Site name.
    pub name: String,
    /// Secret that authenticates the gate's Record-Route tokens; every gate
    /// node of the site must share it. Defaults to a value derived from the
    /// site name, which only protects against accidents, not attackers.
    pub secret: String,
    /// The `Server` header of the responses the gate generates itself
    /// (`[site] server_header`): `None` keeps the gate's default
    /// (`sip-gate/<version>`), an empty string sends none.
    pub server_header: Option<String>,
}

/// A validated site configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SiteConfig {
    /// The file it was loaded from.
    pub path: PathBuf,
    /// Site identity.
    pub site: Site,
    /// Profile store.
    pub store: StoreConfig,
    /// Timers.
    pub timers: Timers,
    /// Drain policy switches.
    pub drain: DrainPolicy,
    /// Health probing.
    pub health: HealthConfig,
    /// Work accounting of the gate.
    pub work: WorkConfig,
    /// Name resolution for requests the gate sends to host names.
    pub dns: DnsConfig,
    /// The gate's TCP connections.
    pub tcp: TcpConfig,
    /// The gate's TLS certificate and CA (`[tls]`), when given.
    pub tls: Option<super::TlsConfig>,
    /// The gate's overload protection and per-source limits.
    pub overload: super::OverloadConfig,
    /// Admin endpoints.
    pub admin: AdminConfig,
    /// The mg controller (media-ctl).
    pub media: super::MediaConfig,
    /// Servers, in file order.
    pub servers: Vec<Server>,
    /// Instances, in file order.
    pub instances: Vec<Instance>,
    /// esg accounts, in file order.
    pub accounts: Vec<Account>,
    /// Active-Passive groups, in file order.
    pub ap_groups: Vec<ApGroup>,
    /// SIP listeners, in file order.
    pub listeners: Vec<Listener>,
    /// Engines `ringsync serve` drives from the drain view (R-EX-1), in
    /// file order.
    pub engines: Vec<super::EngineConfig>,
}
