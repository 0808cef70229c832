//! Site configuration: one TOML file per site, one schema for every binary.
//!
//! Loading happens in two steps. `toml` + serde check the shape (types,
//! unknown fields) into the raw input of `raw`, with the spans of every
//! value; then `validate` checks the meaning (references between servers,
//! instances, accounts and listeners), one function per section, and builds
//! the model of `types`. Both kinds of error carry the file, the line and
//! the field ([`ConfigError`]).

use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;

mod access;
mod admin;
mod ap;
mod audit;
mod capture;
mod engine;
mod error;
mod limits;
mod listeners;
mod local;
mod media;
mod place;
mod pool;
mod raw;
mod reload;
mod sections;
mod services;
mod tls;
mod types;
mod validate;
mod validator;
mod ws;

#[cfg(test)]
mod tests;

pub use access::{AccessAction, AccessList, AuthBan};
pub use ap::DEFAULT_PRIORITY;
pub use audit::{AuditConfig, MIN_AUDIT_BYTES};
pub use capture::{CaptureConfig, CaptureTls, Collector, CollectorTransport, MAX_CAPTURE_QUEUE};
pub use engine::{
    EngineConfig, EngineKind, RuntimeAddress, DEFAULT_ENGINE_TIMEOUT_MS, DEFAULT_RESYNC_MS,
};
pub use error::ConfigError;
pub use limits::{LimitAction, OverloadConfig};
pub use local::{check_warnings, host_addresses, is_local, not_local, Binding, Daemon};
pub use media::MediaConfig;
pub use pool::{Pool, DEFAULT_HOLD_S};
pub use reload::{restart_only, ReloadRefused};
pub use tls::TlsConfig;
pub use types::{
    Account, AccountMatch, AdminConfig, ApGroup, DnsConfig, DrainPolicy, Exception, HealthConfig,
    Instance, Leg, Listener, ListenerMode, Server, Service, Site, SiteConfig, StoreConfig,
    TcpConfig, Timers, Transport, WorkConfig, WsOptions, NO_ETCD,
};

use error::Locator;

/// How many hex digits of the site file's SHA-256 a node reports: 48
/// bits tell two files apart for any site's count of nodes.
const HASH_HEX: usize = 12;

/// The short hash of a site file's bytes (the first [`HASH_HEX`] hex
/// digits of its SHA-256), as every node reports it in its metrics
/// (`..._site_file_info{hash}`) and its node record.
pub fn file_hash(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    let mut hex = String::with_capacity(HASH_HEX);
    for b in digest.iter().take(HASH_HEX / 2) {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

impl SiteConfig {
    /// Reads and validates a site file.
    pub fn load(path: impl AsRef<Path>) -> Result<SiteConfig, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| error::unreadable(path, &e))?;
        Self::from_str_at(&text, path)
    }

    /// Parses and validates site TOML; `path` names the file in errors and
    /// anchors relative paths.
    pub fn from_str_at(text: &str, path: &Path) -> Result<SiteConfig, ConfigError> {
        let loc = Locator { text, path };
        let raw: raw::RawSite = toml::from_str(text).map_err(|e| loc.syntax(&e))?;
        validate::validate(loc, raw)
    }

    /// The instance with this id.
    pub fn instance(&self, id: &str) -> Option<&Instance> {
        self.instances.iter().find(|i| i.id == id)
    }

    /// The instances of a service, in file order.
    pub fn instances_of<'a>(&'a self, service: &'a Service) -> impl Iterator<Item = &'a Instance> {
        self.instances.iter().filter(move |i| &i.service == service)
    }

    /// True when a `ws_pool` listener fronts the site's `ws` instances:
    /// then they take new connections only in the normal zone and their
    /// open connections are counted as their work (R-WS-3). Without one,
    /// nothing routes to them and they are never drained (R-WS-1).
    pub fn ws_pooled(&self) -> bool {
        self.listeners
            .iter()
            .any(|l| matches!(l.mode, ListenerMode::WsPool { .. }))
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

/// Is this address in one of these networks?
pub fn in_networks(ip: IpAddr, nets: &[IpNet]) -> bool {
    nets.iter().any(|n| n.contains(&ip))
}
