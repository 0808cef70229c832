//! `[[engine]]`: the edges an operator already runs that `ringsync serve`
//! drives from the drain view (R-EX-1): a Kamailio dispatcher over its
//! JSON-RPC, HAProxy over its runtime API.
//!
//! Only the shape and the references are checked here (which service a
//! set or backend is for, which instance a destination or server name
//! belongs to); whether the engine answers is the driver's business.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::error::ConfigError;
use super::types::{Instance, Service};
use super::validator::Validator;

type Result<T> = std::result::Result<T, ConfigError>;

/// Default time between two reads of an engine's state (`resync_ms`).
pub const DEFAULT_RESYNC_MS: u64 = 2000;
/// Default bound on one request to an engine (`timeout_ms`).
pub const DEFAULT_ENGINE_TIMEOUT_MS: u64 = 1000;

/// One engine the drain view drives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// Its name: unique among engines; audit records say `engine:<name>`.
    pub name: String,
    /// What it is and how it is reached.
    pub kind: EngineKind,
    /// How often the driver reads the engine's state back and corrects a
    /// divergence (a restart, a reload, a hand edit).
    pub resync_ms: u64,
    /// The bound on one request to the engine.
    pub timeout_ms: u64,
}

impl EngineConfig {
    /// [`EngineConfig::resync_ms`] as a duration.
    pub fn resync(&self) -> Duration {
        Duration::from_millis(self.resync_ms)
    }
    /// [`EngineConfig::timeout_ms`] as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
    /// The kind's name as written in the file.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            EngineKind::KamailioDispatcher { .. } => "kamailio-dispatcher",
            EngineKind::Haproxy { .. } => "haproxy",
        }
    }
}

/// The kinds of engine, with what each needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// Kamailio's dispatcher module, over JSON-RPC on HTTP (`jsonrpcs` +
    /// `xhttp`).
    KamailioDispatcher {
        /// Where Kamailio's HTTP listener is (an IP and port; host names are
        /// not resolved).
        addr: SocketAddr,
        /// The HTTP path of the JSON-RPC handler (default `/RPC`).
        path: String,
        /// The dispatcher set of each service.
        sets: BTreeMap<Service, u32>,
        /// The destination URI of each instance of those services, as the
        /// dispatcher list names it (default `sip:<its sip address>`).
        destinations: BTreeMap<String, String>,
    },
    /// HAProxy's runtime API (its stats socket at level admin).
    Haproxy {
        /// Where the runtime API listens.
        address: RuntimeAddress,
        /// The backend of each service.
        backends: BTreeMap<Service, String>,
        /// The server name of each instance of those services in its
        /// backend (default: the instance id).
        servers: BTreeMap<String, String>,
    },
}

/// Where HAProxy's runtime API listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeAddress {
    /// `stats socket ipv4@IP:PORT`.
    Tcp(SocketAddr),
    /// `stats socket /path`.
    Unix(PathBuf),
}

impl std::fmt::Display for RuntimeAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuntimeAddress::Tcp(a) => write!(f, "{a}"),
            RuntimeAddress::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// `[[engine]]` as written: every kind's fields, each checked against the
/// kind it is given with.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEngine {
    name: Spanned<String>,
    kind: Spanned<String>,
    #[serde(default)]
    url: Option<Spanned<String>>,
    #[serde(default)]
    address: Option<Spanned<String>>,
    #[serde(default)]
    sets: Option<Spanned<BTreeMap<String, Spanned<u32>>>>,
    #[serde(default)]
    destinations: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
    #[serde(default)]
    backends: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
    #[serde(default)]
    servers: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
    #[serde(default)]
    resync_ms: Option<Spanned<u64>>,
    #[serde(default)]
    timeout_ms: Option<Spanned<u64>>,
}

/// Checks every `[[engine]]` against the instances.
pub(super) fn validate(
    v: &Validator<'_>,
    raw: &[Spanned<RawEngine>],
    instances: &[Instance],
) -> Result<Vec<EngineConfig>> {
    let mut names = HashSet::new();
    let mut out = Vec::new();
    for (i, spanned) in raw.iter().enumerate() {
        let r = spanned.get_ref();
        let at = |f: &str| format!("engine[{i}].{f}");
        v.name(&r.name, at("name"))?;
        if !names.insert(r.name.get_ref().clone()) {
            let msg = format!("duplicate engine `{}`", r.name.get_ref());
            return Err(v.err(r.name.span(), at("name"), msg));
        }
        let e = Engine {
            v,
            i,
            raw: r,
            whole: spanned.span(),
            instances,
        };
        let kind = match r.kind.get_ref().as_str() {
            "kamailio-dispatcher" => e.kamailio()?,
            "haproxy" => e.haproxy()?,
            other => {
                let msg = format!(
                    "unknown engine kind `{other}`, expected \"kamailio-dispatcher\" or \"haproxy\""
                );
                return Err(v.err(r.kind.span(), at("kind"), msg));
            }
        };
        let resync_ms = e.positive(&r.resync_ms, "resync_ms", DEFAULT_RESYNC_MS)?;
        let timeout_ms = e.positive(&r.timeout_ms, "timeout_ms", DEFAULT_ENGINE_TIMEOUT_MS)?;
        out.push(EngineConfig {
            name: r.name.get_ref().clone(),
            kind,
            resync_ms,
            timeout_ms,
        });
    }
    Ok(out)
}

/// One `[[engine]]` being checked.
struct Engine<'a> {
    v: &'a Validator<'a>,
    i: usize,
    raw: &'a RawEngine,
    whole: std::ops::Range<usize>,
    instances: &'a [Instance],
}

type Table = Spanned<BTreeMap<String, Spanned<String>>>;

impl Engine<'_> {
    fn field(&self, f: &str) -> String {
        format!("engine[{}].{f}", self.i)
    }

    fn err(&self, span: std::ops::Range<usize>, f: &str, msg: impl Into<String>) -> ConfigError {
        self.v.err(span, self.field(f), msg)
    }

    fn positive(&self, f: &Option<Spanned<u64>>, name: &str, dflt: u64) -> Result<u64> {
        match f {
            Some(s) if *s.get_ref() == 0 => Err(self.err(s.span(), name, "must be positive")),
            Some(s) => Ok(*s.get_ref()),
            None => Ok(dflt),
        }
    }

    /// A field the kind does not take is an error, not a silent no-op.
    fn refuse<T>(&self, f: &Option<Spanned<T>>, name: &str) -> Result<()> {
        match f {
            Some(s) => Err(self.err(
                s.span(),
                name,
                format!(
                    "`{name}` is not a field of a `{}` engine",
                    self.raw.kind.get_ref()
                ),
            )),
            None => Ok(()),
        }
    }

    fn required<'b, T>(&self, f: &'b Option<Spanned<T>>, name: &str) -> Result<&'b Spanned<T>> {
        f.as_ref().ok_or_else(|| {
            let msg = format!("a `{}` engine needs `{name}`", self.raw.kind.get_ref());
            self.err(self.whole.clone(), name, msg)
        })
    }

    /// A service named as a key of `sets` or `backends`: one the site has.
    fn service(&self, table: &str, key: &str, span: std::ops::Range<usize>) -> Result<Service> {
        let s = Service::from(key.to_owned());
        if s.never_drained() {
            let msg = format!("`{key}` is never drained (R-BG-1, R-WS-1): nothing to drive");
            return Err(self.err(span, &format!("{table}.{key}"), msg));
        }
        if !self.instances.iter().any(|i| i.service == s) {
            let msg = format!("no instance of service `{key}` is configured");
            return Err(self.err(span, &format!("{table}.{key}"), msg));
        }
        Ok(s)
    }

    /// Per-instance names (`destinations`, `servers`): each key an instance
    /// of a driven service; every instance of those services gets its
    /// default when not named.
    fn per_instance(
        &self,
        table: &str,
        given: Option<&Table>,
        services: &[Service],
        default: impl Fn(&Instance) -> Option<String>,
    ) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        if let Some(t) = given {
            for (id, val) in t.get_ref() {
                let f = format!("{table}.{id}");
                match self.instances.iter().find(|i| &i.id == id) {
                    None => {
                        let msg = format!("unknown instance `{id}`");
                        return Err(self.err(val.span(), &f, msg));
                    }
                    Some(inst) if !services.contains(&inst.service) => {
                        let msg = format!(
                            "`{id}` runs `{}`, which this engine does not drive",
                            inst.service
                        );
                        return Err(self.err(val.span(), &f, msg));
                    }
                    Some(_) => {}
                }
                let s = val.get_ref().trim();
                if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c == '/') {
                    let msg = format!("`{s}` must be non-empty, without spaces or `/`");
                    return Err(self.err(val.span(), &f, msg));
                }
                out.insert(id.clone(), s.to_owned());
            }
        }
        for inst in self
            .instances
            .iter()
            .filter(|i| services.contains(&i.service))
        {
            if out.contains_key(&inst.id) {
                continue;
            }
            let Some(d) = default(inst) else {
                let span = given.map_or(self.whole.clone(), Spanned::span);
                let msg = format!("`{}` has no default here; name it in `{table}`", inst.id);
                return Err(self.err(span, &format!("{table}.{}", inst.id), msg));
            };
            out.insert(inst.id.clone(), d);
        }
        Ok(out)
    }

    fn kamailio(&self) -> Result<EngineKind> {
        let r = self.raw;
        self.refuse(&r.address, "address")?;
        self.refuse(&r.backends, "backends")?;
        self.refuse(&r.servers, "servers")?;
        let url = self.required(&r.url, "url")?;
        let (addr, path) = parse_url(url.get_ref()).map_err(|m| self.err(url.span(), "url", m))?;
        let sets_raw = self.required(&r.sets, "sets")?;
        if sets_raw.get_ref().is_empty() {
            let msg = "needs at least one `service = <set id>`";
            return Err(self.err(sets_raw.span(), "sets", msg));
        }
        let mut sets = BTreeMap::new();
        for (svc, id) in sets_raw.get_ref() {
            let s = self.service("sets", svc, id.span())?;
            if *id.get_ref() == 0 {
                let msg = "a dispatcher set id is positive";
                return Err(self.err(id.span(), &format!("sets.{svc}"), msg));
            }
            sets.insert(s, *id.get_ref());
        }
        let services: Vec<Service> = sets.keys().cloned().collect();
        let destinations =
            self.per_instance("destinations", r.destinations.as_ref(), &services, |i| {
                i.sip.map(|a| format!("sip:{a}"))
            })?;
        Ok(EngineKind::KamailioDispatcher {
            addr,
            path,
            sets,
            destinations,
        })
    }

    fn haproxy(&self) -> Result<EngineKind> {
        let r = self.raw;
        self.refuse(&r.url, "url")?;
        self.refuse(&r.sets, "sets")?;
        self.refuse(&r.destinations, "destinations")?;
        let a = self.required(&r.address, "address")?;
        let address = parse_runtime(a.get_ref()).map_err(|m| self.err(a.span(), "address", m))?;
        let backends_raw = self.required(&r.backends, "backends")?;
        if backends_raw.get_ref().is_empty() {
            let msg = "needs at least one `service = \"<backend>\"`";
            return Err(self.err(backends_raw.span(), "backends", msg));
        }
        let mut backends = BTreeMap::new();
        for (svc, b) in backends_raw.get_ref() {
            let s = self.service("backends", svc, b.span())?;
            let name = b.get_ref().trim();
            if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '/') {
                let msg = format!("`{name}` must be non-empty, without spaces or `/`");
                return Err(self.err(b.span(), &format!("backends.{svc}"), msg));
            }
            backends.insert(s, name.to_owned());
        }
        let services: Vec<Service> = backends.keys().cloned().collect();
        let servers = self.per_instance("servers", r.servers.as_ref(), &services, |i| {
            Some(i.id.clone())
        })?;
        Ok(EngineKind::Haproxy {
            address,
            backends,
            servers,
        })
    }
}

/// `http://IP:PORT[/path]`: Kamailio's xhttp listener. No TLS and no host
/// names: the JSON-RPC port belongs on a loopback or management address.
fn parse_url(url: &str) -> std::result::Result<(SocketAddr, String), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("`{url}`: expected http://IP:PORT/PATH (Kamailio's xhttp listener)")
    })?;
    let (host, path) = match rest.find('/') {
        Some(p) => (&rest[..p], rest[p..].to_owned()),
        None => (rest, "/RPC".to_owned()),
    };
    let addr = host.parse::<SocketAddr>().map_err(|_| {
        format!(
            "`{host}` is not IP:PORT (host names are not resolved), e.g. http://127.0.0.1:5071/RPC"
        )
    })?;
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the path `{path}` has spaces or control characters"
        ));
    }
    Ok((addr, path))
}

/// `IP:PORT` for a TCP stats socket, an absolute path for a unix one.
fn parse_runtime(s: &str) -> std::result::Result<RuntimeAddress, String> {
    if s.starts_with('/') {
        return Ok(RuntimeAddress::Unix(PathBuf::from(s)));
    }
    s.parse::<SocketAddr>()
        .map(RuntimeAddress::Tcp)
        .map_err(|_| {
            format!("`{s}`: expected IP:PORT (a TCP stats socket) or an absolute unix socket path")
        })
}

#[cfg(test)]
mod tests;
