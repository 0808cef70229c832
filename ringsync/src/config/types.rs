//! The validated site model: every public type of a site file.
//!
//! Plain data with serde derives; what the fields may hold is checked in
//! [`super::validate`], which is the only place these are built from a file.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

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

/// Why a site on etcd cannot run on this build: the config error at
/// `store.kind` (and the store's, for a config built in code) when ringsync
/// was built without its `etcd` feature.
pub const NO_ETCD: &str = "this build has no etcd store: it was built without the `etcd` \
     feature of ringsync (on by default; e.g. `cargo build -p sip-gate --no-default-features` \
     leaves it out); use `kind = \"embedded\"` or a build with the `etcd` feature";

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

pub use super::sections::{
    AdminConfig, DnsConfig, DrainPolicy, HealthConfig, TcpConfig, Timers, WorkConfig,
};

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
    /// `ws` only: the address its WebSocket server listens on, where a
    /// `ws_pool` listener passes the connections it picks it for (R-WS-3).
    pub ws: Option<SocketAddr>,
    /// Exceptions to the drain 503 for this instance (R-SG-3).
    pub exceptions: Vec<Exception>,
    /// Source networks whose messages are this instance's own, besides its
    /// `sip` address (an instance whose TCP connections come from ephemeral
    /// ports). Empty: only the exact `sip` address is the instance (R-SEC-1).
    pub sources: Vec<IpNet>,
    /// The pool it belongs to (`pool`, sg and esg only): a listener's
    /// `pool = "sg"` balances over the instances whose pool is `sg`, and a
    /// `[[pool]]` may name another pool as its backup (R-HT-1). Defaults to
    /// the service's name.
    pub pool: String,
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
    /// In front of the site's `ws` instances (`mode = "ws_pool"`, R-WS-3):
    /// each WebSocket connection is passed through whole to the instance
    /// the `ws` ring picks at the upgrade, without terminating SIP.
    WsPool {
        /// Connect to the instances over TLS (`ws_upstream = "wss"`),
        /// verifying them against `[tls] ca`; plain TCP otherwise.
        upstream_tls: bool,
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
    /// The short hash of the file's bytes ([`super::file_hash`]): what
    /// every node reports, so a site whose nodes run different files shows.
    pub hash: String,
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
    /// The embedded store's audit log rotation (`[audit]`).
    pub audit: super::AuditConfig,
    /// The mg controller (media-ctl).
    pub media: super::MediaConfig,
    /// Copies of the messages to HEP collectors (`[capture]`), when given.
    pub capture: Option<super::CaptureConfig>,
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
    /// `[[pool]]`: health thresholds and backups of pools (R-HT-1), in file
    /// order.
    pub pools: Vec<super::Pool>,
}
