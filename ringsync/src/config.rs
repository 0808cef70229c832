//! Site configuration: one TOML file per site, one schema for every binary.
//!
//! Loading happens in two steps. `toml` + serde check the shape (types, unknown
//! fields); then [`SiteConfig::validate`] checks the meaning (references between
//! servers, instances, accounts and listeners). Both kinds of error carry the
//! file, the line and the field, because an operator fixing a config at 3 a.m.
//! should not have to guess which `[[instance]]` of forty is wrong.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use toml::Spanned;

mod media;
pub use media::MediaConfig;

/// A configuration error: which file, where in it, which field, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file the error is in.
    pub file: PathBuf,
    /// 1-based line, when the error can be placed.
    pub line: Option<usize>,
    /// 1-based column, when the error can be placed.
    pub column: Option<usize>,
    /// Dotted path of the field, e.g. `instance[2].server`.
    pub field: String,
    /// What is wrong, in words an operator understands.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if !self.field.is_empty() {
            write!(f, ": field `{}`", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The service an instance runs. Anything that is not one of the known
/// Active-Active services is an Active-Passive service, named by the operator.
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
    /// Minimum time between two Active-Passive leader moves (R-AP-2). Default 60.
    pub ap_pace_s: u32,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            retry_after_s: 30,
            retry_after_jitter_s: 10,
            mg_drain_window_s: 180,
            ap_pace_s: 60,
        }
    }
}

impl Timers {
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

/// Settings of the admin HTTP endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where `ringsync serve` listens (API, /metrics). Default 127.0.0.1:8080.
    pub bind: SocketAddr,
    /// Where `sip-gate` exposes /metrics and /status. Default 127.0.0.1:9091.
    pub gate_bind: SocketAddr,
    /// Where `media-ctl` exposes /metrics, /v1/status and /v1/work.
    /// Default 127.0.0.1:9092.
    pub media_bind: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            gate_bind: SocketAddr::from(([127, 0, 0, 1], 9091)),
            media_bind: SocketAddr::from(([127, 0, 0, 1], 9092)),
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
    fn is_empty(&self) -> bool {
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
    pub ng_source: Option<IpAddr>,
    /// Exceptions to the drain 503 for this instance (R-SG-3).
    pub exceptions: Vec<Exception>,
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
}

/// Transport of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// SIP over UDP.
    Udp,
    /// SIP over TCP.
    Tcp,
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
    /// Admin endpoints.
    pub admin: AdminConfig,
    /// The mg controller (media-ctl).
    pub media: MediaConfig,
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
}

impl SiteConfig {
    /// Reads and validates a site file.
    pub fn load(path: impl AsRef<Path>) -> Result<SiteConfig, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_owned(),
            line: None,
            column: None,
            field: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        Self::from_str_at(&text, path)
    }

    /// Parses and validates site TOML; `path` names the file in errors and
    /// anchors relative paths.
    pub fn from_str_at(text: &str, path: &Path) -> Result<SiteConfig, ConfigError> {
        let raw: RawSite = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| line_col(text, s.start))
                .map_or((None, None), |(l, c)| (Some(l), Some(c)));
            ConfigError {
                file: path.to_owned(),
                line,
                column,
                field: String::new(),
                message: e.message().trim().to_owned(),
            }
        })?;
        Validator { text, path }.validate(raw)
    }

    /// The instance with this id.
    pub fn instance(&self, id: &str) -> Option<&Instance> {
        self.instances.iter().find(|i| i.id == id)
    }

    /// The instances of a service, in file order.
    pub fn instances_of<'a>(&'a self, service: &'a Service) -> impl Iterator<Item = &'a Instance> {
        self.instances.iter().filter(move |i| &i.service == service)
    }

    /// True if a server of this name is configured.
    pub fn has_server(&self, name: &str) -> bool {
        self.servers.iter().any(|s| s.name == name)
    }

    /// The listener with this name.
    pub fn listener(&self, name: &str) -> Option<&Listener> {
        self.listeners.iter().find(|l| l.name == name)
    }
}

// === raw (as written) ===

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSite {
    site: RawSiteId,
    #[serde(default)]
    store: Option<Spanned<RawStore>>,
    #[serde(default)]
    timers: Timers,
    #[serde(default)]
    drain: DrainPolicy,
    #[serde(default)]
    health: HealthConfig,
    #[serde(default)]
    admin: AdminConfig,
    #[serde(default)]
    media: Option<Spanned<media::RawMedia>>,
    #[serde(default)]
    server: Vec<Spanned<RawServer>>,
    #[serde(default)]
    instance: Vec<Spanned<RawInstance>>,
    #[serde(default)]
    account: Vec<Spanned<RawAccount>>,
    #[serde(default)]
    ap_group: Vec<Spanned<RawApGroup>>,
    #[serde(default)]
    listener: Vec<Spanned<RawListener>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSiteId {
    name: Spanned<String>,
    #[serde(default)]
    secret: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    #[serde(default = "default_store_kind")]
    kind: Spanned<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    endpoints: Vec<String>,
    #[serde(default)]
    prefix: Option<String>,
}

fn default_store_kind() -> Spanned<String> {
    Spanned::new(0..0, "embedded".to_owned())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    id: Spanned<String>,
    service: Spanned<String>,
    server: Spanned<String>,
    #[serde(default)]
    sip: Option<SocketAddr>,
    #[serde(default)]
    ng: Option<Spanned<SocketAddr>>,
    #[serde(default)]
    ng_source: Option<Spanned<IpAddr>>,
    #[serde(default)]
    exceptions: Vec<Spanned<Exception>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccount {
    name: Spanned<String>,
    #[serde(default)]
    multi_instance: bool,
    #[serde(default)]
    home: Option<Spanned<String>>,
    #[serde(default, rename = "match")]
    matcher: AccountMatch,
    #[serde(default)]
    exceptions: Vec<Spanned<Exception>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApGroup {
    name: Spanned<String>,
    members: Spanned<Vec<Spanned<String>>>,
    home: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListener {
    name: Spanned<String>,
    bind: Spanned<SocketAddr>,
    #[serde(default)]
    advertise: Option<Spanned<SocketAddr>>,
    #[serde(default = "default_transports")]
    transports: Spanned<Vec<Transport>>,
    mode: Spanned<String>,
    #[serde(default)]
    pool: Option<Spanned<String>>,
    #[serde(default)]
    instance: Option<Spanned<String>>,
    leg: Leg,
}

fn default_transports() -> Spanned<Vec<Transport>> {
    Spanned::new(0..0, vec![Transport::Udp, Transport::Tcp])
}

// === validation ===

struct Validator<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Validator<'_> {
    fn err(
        &self,
        span: Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = if span.start == 0 && span.end == 0 {
            (None, None)
        } else {
            let (l, c) = line_col(self.text, span.start);
            (Some(l), Some(c))
        };
        ConfigError {
            file: self.path.to_owned(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }

    fn validate(&self, raw: RawSite) -> Result<SiteConfig, ConfigError> {
        let site_name = raw.site.name.get_ref().trim().to_owned();
        if site_name.is_empty() {
            return Err(self.err(raw.site.name.span(), "site.name", "must not be empty"));
        }
        let secret = match &raw.site.secret {
            Some(s) if s.get_ref().len() < 16 => {
                return Err(self.err(s.span(), "site.secret", "must be at least 16 characters"))
            }
            Some(s) => s.get_ref().clone(),
            None => format!("ringsync-default-secret:{site_name}"),
        };

        // Servers.
        let mut servers = Vec::new();
        let mut server_names = HashSet::new();
        for (i, s) in raw.server.iter().enumerate() {
            let name = s.get_ref().name.get_ref();
            let field = format!("server[{i}].name");
            check_name(name).map_err(|m| self.err(s.get_ref().name.span(), &field, m))?;
            if !server_names.insert(name.clone()) {
                return Err(self.err(
                    s.get_ref().name.span(),
                    field,
                    format!("duplicate server `{name}`"),
                ));
            }
            servers.push(Server { name: name.clone() });
        }

        // Instances.
        let mut instances = Vec::new();
        let mut ids = HashMap::new();
        for (i, spanned) in raw.instance.iter().enumerate() {
            let r = spanned.get_ref();
            let id = r.id.get_ref();
            check_name(id).map_err(|m| self.err(r.id.span(), format!("instance[{i}].id"), m))?;
            if ids.insert(id.clone(), i).is_some() {
                return Err(self.err(
                    r.id.span(),
                    format!("instance[{i}].id"),
                    format!("duplicate instance id `{id}`"),
                ));
            }
            let service = Service::from(r.service.get_ref().clone());
            if let Service::Other(name) = &service {
                check_name(name)
                    .map_err(|m| self.err(r.service.span(), format!("instance[{i}].service"), m))?;
            }
            if !server_names.contains(r.server.get_ref()) {
                return Err(self.err(
                    r.server.span(),
                    format!("instance[{i}].server"),
                    format!(
                        "unknown server `{}` (define it in a [[server]] table)",
                        r.server.get_ref()
                    ),
                ));
            }
            if service.is_sip() && r.sip.is_none() {
                return Err(self.err(
                    spanned.span(),
                    format!("instance[{i}].sip"),
                    format!("a `{service}` instance needs a SIP address"),
                ));
            }
            if matches!(service, Service::Mg | Service::Bgmg) && r.ng.is_none() {
                return Err(self.err(
                    spanned.span(),
                    format!("instance[{i}].ng"),
                    format!("a `{service}` instance needs an ng address"),
                ));
            }
            for (j, e) in r.exceptions.iter().enumerate() {
                if e.get_ref().is_empty() {
                    return Err(self.err(
                        e.span(),
                        format!("instance[{i}].exceptions[{j}]"),
                        "an exception needs at least one of all, source, aor, user, domain, method",
                    ));
                }
            }
            instances.push(Instance {
                id: id.clone(),
                service,
                server: r.server.get_ref().clone(),
                sip: r.sip,
                ng: r.ng.as_ref().map(|a| *a.get_ref()),
                ng_source: r.ng_source.as_ref().map(|s| *s.get_ref()),
                exceptions: r.exceptions.iter().map(|e| e.get_ref().clone()).collect(),
            });
        }
        media::check_instances(self, &raw.instance, &mut instances)?;
        let service_of = |id: &str| ids.get(id).map(|&i| &instances[i].service);

        // Accounts.
        let mut accounts = Vec::new();
        let mut account_names = HashSet::new();
        for (i, spanned) in raw.account.iter().enumerate() {
            let r = spanned.get_ref();
            let name = r.name.get_ref();
            check_name(name)
                .map_err(|m| self.err(r.name.span(), format!("account[{i}].name"), m))?;
            if !account_names.insert(name.clone()) {
                return Err(self.err(
                    r.name.span(),
                    format!("account[{i}].name"),
                    format!("duplicate account `{name}`"),
                ));
            }
            if r.matcher.source.is_empty() && r.matcher.domain.is_empty() {
                return Err(self.err(
                    spanned.span(),
                    format!("account[{i}].match"),
                    "an account needs at least one source network or domain to match",
                ));
            }
            if let Some(home) = &r.home {
                if service_of(home.get_ref()) != Some(&Service::Esg) {
                    return Err(self.err(
                        home.span(),
                        format!("account[{i}].home"),
                        format!("`{}` is not an esg instance", home.get_ref()),
                    ));
                }
            } else if !r.multi_instance {
                return Err(self.err(
                    spanned.span(),
                    format!("account[{i}].home"),
                    "a single-instance account needs its home esg instance (R-ESG-5)",
                ));
            }
            for (j, e) in r.exceptions.iter().enumerate() {
                if e.get_ref().is_empty() {
                    return Err(self.err(
                        e.span(),
                        format!("account[{i}].exceptions[{j}]"),
                        "an exception needs at least one of all, source, aor, user, domain, method",
                    ));
                }
            }
            accounts.push(Account {
                name: name.clone(),
                multi_instance: r.multi_instance,
                home: r.home.as_ref().map(|h| h.get_ref().clone()),
                matcher: r.matcher.clone(),
                exceptions: r.exceptions.iter().map(|e| e.get_ref().clone()).collect(),
            });
        }

        // Active-Passive groups.
        let mut ap_groups = Vec::new();
        let mut group_names = HashSet::new();
        for (i, spanned) in raw.ap_group.iter().enumerate() {
            let r = spanned.get_ref();
            let name = r.name.get_ref();
            check_name(name)
                .map_err(|m| self.err(r.name.span(), format!("ap_group[{i}].name"), m))?;
            if !group_names.insert(name.clone()) {
                return Err(self.err(
                    r.name.span(),
                    format!("ap_group[{i}].name"),
                    format!("duplicate group `{name}`"),
                ));
            }
            if r.members.get_ref().len() < 2 {
                return Err(self.err(
                    r.members.span(),
                    format!("ap_group[{i}].members"),
                    "an Active-Passive group needs at least two members",
                ));
            }
            let mut seen = HashSet::new();
            for (j, m) in r.members.get_ref().iter().enumerate() {
                match service_of(m.get_ref()) {
                    None => {
                        return Err(self.err(
                            m.span(),
                            format!("ap_group[{i}].members[{j}]"),
                            format!("unknown instance `{}`", m.get_ref()),
                        ))
                    }
                    Some(s) if s.is_active_active() || s.never_drained() => {
                        return Err(self.err(
                            m.span(),
                            format!("ap_group[{i}].members[{j}]"),
                            format!(
                                "`{}` runs `{s}`, which is not an Active-Passive service",
                                m.get_ref()
                            ),
                        ))
                    }
                    Some(_) => {}
                }
                if !seen.insert(m.get_ref().clone()) {
                    return Err(self.err(
                        m.span(),
                        format!("ap_group[{i}].members[{j}]"),
                        format!("`{}` is listed twice", m.get_ref()),
                    ));
                }
            }
            if !seen.contains(r.home.get_ref()) {
                return Err(self.err(
                    r.home.span(),
                    format!("ap_group[{i}].home"),
                    format!("home `{}` is not a member of the group", r.home.get_ref()),
                ));
            }
            ap_groups.push(ApGroup {
                name: name.clone(),
                members: r
                    .members
                    .get_ref()
                    .iter()
                    .map(|m| m.get_ref().clone())
                    .collect(),
                home: r.home.get_ref().clone(),
            });
        }

        // Listeners.
        let mut listeners: Vec<Listener> = Vec::new();
        for (i, spanned) in raw.listener.iter().enumerate() {
            let r = spanned.get_ref();
            let name = r.name.get_ref();
            check_name(name)
                .map_err(|m| self.err(r.name.span(), format!("listener[{i}].name"), m))?;
            if listeners.iter().any(|l| &l.name == name) {
                return Err(self.err(
                    r.name.span(),
                    format!("listener[{i}].name"),
                    format!("duplicate listener `{name}`"),
                ));
            }
            let bind = *r.bind.get_ref();
            if let Some(other) = listeners
                .iter()
                .find(|l| l.bind == bind && bind.port() != 0)
            {
                return Err(self.err(
                    r.bind.span(),
                    format!("listener[{i}].bind"),
                    format!("`{bind}` is already bound by listener `{}`", other.name),
                ));
            }
            let advertise = match &r.advertise {
                Some(a) => {
                    if a.get_ref().ip().is_unspecified() {
                        return Err(self.err(
                            a.span(),
                            format!("listener[{i}].advertise"),
                            "must be a concrete address",
                        ));
                    }
                    *a.get_ref()
                }
                None => bind,
            };
            if r.transports.get_ref().is_empty() {
                return Err(self.err(
                    r.transports.span(),
                    format!("listener[{i}].transports"),
                    "needs at least one of \"udp\", \"tcp\"",
                ));
            }
            let mode = match r.mode.get_ref().as_str() {
                "balance" => {
                    let Some(pool) = &r.pool else {
                        return Err(self.err(
                            spanned.span(),
                            format!("listener[{i}].pool"),
                            "a balance listener needs `pool = \"<service>\"`",
                        ));
                    };
                    if r.instance.is_some() {
                        return Err(self.err(
                            spanned.span(),
                            format!("listener[{i}].instance"),
                            "a balance listener takes `pool`, not `instance`",
                        ));
                    }
                    let service = Service::from(pool.get_ref().clone());
                    if !service.is_sip() {
                        return Err(self.err(
                            pool.span(),
                            format!("listener[{i}].pool"),
                            format!("`{service}` is not a SIP service (sg or esg)"),
                        ));
                    }
                    if !instances.iter().any(|inst| inst.service == service) {
                        return Err(self.err(
                            pool.span(),
                            format!("listener[{i}].pool"),
                            format!("no instance of `{service}` is configured"),
                        ));
                    }
                    ListenerMode::Balance { pool: service }
                }
                "guard" => {
                    let Some(inst) = &r.instance else {
                        return Err(self.err(
                            spanned.span(),
                            format!("listener[{i}].instance"),
                            "a guard listener needs `instance = \"<id>\"`",
                        ));
                    };
                    if r.pool.is_some() {
                        return Err(self.err(
                            spanned.span(),
                            format!("listener[{i}].pool"),
                            "a guard listener takes `instance`, not `pool`",
                        ));
                    }
                    match service_of(inst.get_ref()) {
                        Some(s) if s.is_sip() => {}
                        Some(s) => {
                            return Err(self.err(
                                inst.span(),
                                format!("listener[{i}].instance"),
                                format!("`{}` runs `{s}`, not sg or esg", inst.get_ref()),
                            ))
                        }
                        None => {
                            return Err(self.err(
                                inst.span(),
                                format!("listener[{i}].instance"),
                                format!("unknown instance `{}`", inst.get_ref()),
                            ))
                        }
                    }
                    ListenerMode::Guard {
                        instance: inst.get_ref().clone(),
                    }
                }
                other => {
                    return Err(self.err(
                        r.mode.span(),
                        format!("listener[{i}].mode"),
                        format!("unknown mode `{other}`, expected \"balance\" or \"guard\""),
                    ))
                }
            };
            let mut transports = r.transports.get_ref().clone();
            transports.dedup();
            listeners.push(Listener {
                name: name.clone(),
                bind,
                advertise,
                transports,
                mode,
                leg: r.leg,
            });
        }

        // Store.
        let base = self.path.parent().unwrap_or(Path::new("."));
        let store = match &raw.store {
            None => StoreConfig::Embedded {
                path: base.join(format!("{site_name}.profiles.json")),
            },
            Some(s) => {
                let r = s.get_ref();
                match r.kind.get_ref().as_str() {
                    "embedded" => {
                        let p = r
                            .path
                            .clone()
                            .unwrap_or_else(|| format!("{site_name}.profiles.json"));
                        StoreConfig::Embedded { path: base.join(p) }
                    }
                    "etcd" => {
                        if r.endpoints.is_empty() {
                            return Err(self.err(
                                s.span(),
                                "store.endpoints",
                                "an etcd store needs at least one endpoint",
                            ));
                        }
                        StoreConfig::Etcd {
                            endpoints: r.endpoints.clone(),
                            prefix: r
                                .prefix
                                .clone()
                                .unwrap_or_else(|| format!("/drain/{site_name}")),
                        }
                    }
                    other => {
                        return Err(self.err(
                            r.kind.span(),
                            "store.kind",
                            format!(
                                "unknown store kind `{other}`, expected \"embedded\" or \"etcd\""
                            ),
                        ))
                    }
                }
            }
        };

        if raw.health.interval_ms != 0 && (raw.health.timeout_ms == 0 || raw.health.failures == 0) {
            return Err(self.err(
                0..0,
                "health",
                "timeout_ms and failures must be positive when probing is on",
            ));
        }

        let media = media::validate(self, raw.media.as_ref(), &instances)?;

        Ok(SiteConfig {
            path: self.path.to_owned(),
            site: Site {
                name: site_name,
                secret,
            },
            store,
            timers: raw.timers,
            drain: raw.drain,
            health: raw.health,
            admin: raw.admin,
            media,
            servers,
            instances,
            accounts,
            ap_groups,
            listeners,
        })
    }
}

/// Names go into Record-Route tokens, metric labels and file names: keep them tame.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 64 {
        return Err("must be at most 64 characters".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "`{name}` has `{c}`; use letters, digits, `-`, `_`, `.`"
        ));
    }
    Ok(())
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = offset
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    (line, col)
}

/// Is this address in one of these networks?
pub fn in_networks(ip: IpAddr, nets: &[IpNet]) -> bool {
    nets.iter().any(|n| n.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[site]
name = "t1"

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "127.0.0.1:5080"
exceptions = [{ source = "10.0.0.0/8" }, { aor = "sip:112@example.com" }]

[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "127.0.0.2:5080"

[[instance]]
id = "esg-a"
service = "esg"
server = "srv-a"
sip = "127.0.0.3:5080"

[[instance]]
id = "bill-a"
service = "billing"
server = "srv-a"
[[instance]]
id = "bill-b"
service = "billing"
server = "srv-b"

[[account]]
name = "carrier-x"
multi_instance = true
match = { source = ["192.0.2.0/24"], domain = ["carrier-x.example"] }

[[account]]
name = "carrier-y"
home = "esg-a"
match = { domain = ["y.example"] }

[[ap_group]]
name = "billing"
members = ["bill-a", "bill-b"]
home = "bill-a"

[[listener]]
name = "subscribers"
bind = "127.0.0.1:5060"
mode = "balance"
pool = "sg"
leg = "subscriber"

[[listener]]
name = "sg-a-guard"
bind = "127.0.0.1:5061"
transports = ["udp"]
mode = "guard"
instance = "sg-a"
leg = "subscriber"
"#;

    fn load(text: &str) -> Result<SiteConfig, ConfigError> {
        SiteConfig::from_str_at(text, Path::new("/etc/site/t1.toml"))
    }

    #[test]
    fn good_site_loads_with_defaults() {
        let c = load(GOOD).unwrap();
        assert_eq!(c.site.name, "t1");
        assert_eq!(c.instances.len(), 5);
        assert_eq!(c.instances[3].service, Service::Other("billing".into()));
        assert_eq!(c.timers, Timers::default());
        assert_eq!(
            c.store,
            StoreConfig::Embedded {
                path: PathBuf::from("/etc/site/t1.profiles.json")
            }
        );
        assert_eq!(
            c.listeners[0].transports,
            vec![Transport::Udp, Transport::Tcp]
        );
        assert_eq!(
            c.listeners[0].mode,
            ListenerMode::Balance { pool: Service::Sg }
        );
        assert_eq!(
            c.listeners[1].mode,
            ListenerMode::Guard {
                instance: "sg-a".into()
            }
        );
        assert_eq!(c.listeners[1].advertise, c.listeners[1].bind);
        assert_eq!(c.instances[0].exceptions.len(), 2);
        assert_eq!(c.instance("sg-b").unwrap().server, "srv-b");
        assert_eq!(c.instances_of(&Service::Sg).count(), 2);
        assert!(!c.accounts[1].multi_instance);
    }

    #[test]
    fn unknown_server_names_file_line_and_field() {
        // R-PR-1's sibling for config: a reference to an unknown server is refused.
        let bad = GOOD.replace(
            "server = \"srv-b\"\nsip = \"127.0.0.2:5080\"",
            "server = \"srv-z\"\nsip = \"127.0.0.2:5080\"",
        );
        let e = load(&bad).unwrap_err();
        assert_eq!(e.field, "instance[1].server");
        assert!(e.message.contains("srv-z"), "{e}");
        let expected = bad.lines().position(|l| l == "server = \"srv-z\"").unwrap() + 1;
        assert_eq!(e.line, Some(expected));
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!("/etc/site/t1.toml:{expected}:")),
            "{shown}"
        );
        assert!(shown.contains("instance[1].server"), "{shown}");
    }

    #[test]
    fn syntax_error_has_a_line() {
        let e = load("[site]\nname = \"x\"\n[[server]]\nname = 3\n").unwrap_err();
        assert_eq!(e.line, Some(4));
        let e = load("[site]\nname = \"x\"\nbogus = 1\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("bogus"), "{e}");
    }

    #[test]
    fn semantic_errors() {
        let cases = [
            (
                GOOD.replace("pool = \"sg\"", "pool = \"mg\""),
                "listener[0].pool",
            ),
            (
                GOOD.replace("instance = \"sg-a\"", "instance = \"nope\""),
                "listener[1].instance",
            ),
            (
                GOOD.replace("home = \"esg-a\"", "home = \"sg-a\""),
                "account[1].home",
            ),
            (
                GOOD.replace("home = \"bill-a\"", "home = \"sg-a\""),
                "ap_group[0].home",
            ),
            (
                GOOD.replace("mode = \"guard\"", "mode = \"gaurd\""),
                "listener[1].mode",
            ),
            (
                GOOD.replace("id = \"sg-b\"", "id = \"sg-a\""),
                "instance[1].id",
            ),
            (
                GOOD.replace("id = \"sg-b\"", "id = \"sg b\""),
                "instance[1].id",
            ),
            (
                GOOD.replace("bind = \"127.0.0.1:5061\"", "bind = \"127.0.0.1:5060\""),
                "listener[1].bind",
            ),
            (
                GOOD.replace("{ aor = \"sip:112@example.com\" }", "{ }"),
                "instance[0].exceptions[1]",
            ),
            (
                GOOD.replace("name = \"t1\"", "name = \"t1\"\nsecret = \"short\""),
                "site.secret",
            ),
        ];
        for (text, field) in cases {
            let e = load(&text).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.line.is_some(), "{e}");
        }
    }

    #[test]
    fn etcd_store() {
        let text =
            format!("{GOOD}\n[store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n");
        let c = load(&text).unwrap();
        assert_eq!(
            c.store,
            StoreConfig::Etcd {
                endpoints: vec!["http://127.0.0.1:2379".into()],
                prefix: "/drain/t1".into()
            }
        );
    }

    #[test]
    fn example_site_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/site.toml");
        let c = SiteConfig::load(&path).unwrap();
        assert!(!c.listeners.is_empty());
    }
}
