//! The site file as written: serde input with the spans errors point at.
//!
//! `deny_unknown_fields` everywhere, so a misspelt key is an error with a
//! line, not a silently ignored setting.

use std::net::SocketAddr;

use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

use super::types::{
    AccountMatch, AdminConfig, DnsConfig, DrainPolicy, Exception, HealthConfig, Leg, TcpConfig,
    Timers, Transport, WorkConfig,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSite {
    pub(super) site: RawSiteId,
    #[serde(default)]
    pub(super) store: Option<Spanned<RawStore>>,
    #[serde(default)]
    pub(super) timers: Option<Spanned<Timers>>,
    #[serde(default)]
    pub(super) drain: DrainPolicy,
    #[serde(default)]
    pub(super) health: HealthConfig,
    #[serde(default)]
    pub(super) work: WorkConfig,
    #[serde(default)]
    pub(super) dns: DnsConfig,
    #[serde(default)]
    pub(super) tcp: TcpConfig,
    #[serde(default)]
    pub(super) tls: Option<Spanned<super::tls::RawTls>>,
    #[serde(default)]
    pub(super) overload: Option<Spanned<super::limits::OverloadConfig>>,
    #[serde(default)]
    pub(super) admin: AdminConfig,
    #[serde(default)]
    pub(super) audit: super::AuditConfig,
    #[serde(default)]
    pub(super) media: Option<Spanned<RawMedia>>,
    #[serde(default)]
    pub(super) capture: Option<Spanned<super::capture::RawCapture>>,
    #[serde(default)]
    pub(super) server: Vec<Spanned<RawServer>>,
    #[serde(default)]
    pub(super) instance: Vec<Spanned<RawInstance>>,
    #[serde(default)]
    pub(super) account: Vec<Spanned<RawAccount>>,
    #[serde(default)]
    pub(super) ap_group: Vec<Spanned<RawApGroup>>,
    #[serde(default)]
    pub(super) listener: Vec<Spanned<RawListener>>,
    #[serde(default)]
    pub(super) engine: Vec<Spanned<super::engine::RawEngine>>,
    #[serde(default)]
    pub(super) pool: Vec<Spanned<RawPool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSiteId {
    pub(super) name: Spanned<String>,
    #[serde(default)]
    pub(super) secret: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) server_header: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    #[serde(default = "default_store_kind")]
    pub(super) kind: Spanned<String>,
    #[serde(default)]
    pub(super) path: Option<String>,
    #[serde(default)]
    pub(super) endpoints: Vec<String>,
    #[serde(default)]
    pub(super) prefix: Option<String>,
    #[serde(default)]
    pub(super) cache: Option<String>,
}

fn default_store_kind() -> Spanned<String> {
    Spanned::new(0..0, "embedded".to_owned())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) name: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInstance {
    pub(super) id: Spanned<String>,
    pub(super) service: Spanned<String>,
    pub(super) server: Spanned<String>,
    #[serde(default)]
    pub(super) sip: Option<SocketAddr>,
    #[serde(default)]
    pub(super) ng: Option<Spanned<SocketAddr>>,
    #[serde(default)]
    pub(super) ng_source: Option<Spanned<std::net::IpAddr>>,
    #[serde(default)]
    pub(super) ws: Option<Spanned<SocketAddr>>,
    #[serde(default)]
    pub(super) exceptions: Vec<Spanned<Exception>>,
    #[serde(default)]
    pub(super) sources: Vec<Spanned<IpNet>>,
    #[serde(default)]
    pub(super) pool: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccount {
    pub(super) name: Spanned<String>,
    #[serde(default)]
    pub(super) multi_instance: bool,
    #[serde(default)]
    pub(super) home: Option<Spanned<String>>,
    #[serde(default, rename = "match")]
    pub(super) matcher: AccountMatch,
    #[serde(default)]
    pub(super) exceptions: Vec<Spanned<Exception>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApGroup {
    pub(super) name: Spanned<String>,
    pub(super) members: Spanned<Vec<Spanned<String>>>,
    pub(super) home: Spanned<String>,
    #[serde(default)]
    pub(super) priority: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListener {
    pub(super) name: Spanned<String>,
    pub(super) bind: Spanned<SocketAddr>,
    #[serde(default)]
    pub(super) advertise: Option<Spanned<SocketAddr>>,
    #[serde(default = "default_transports")]
    pub(super) transports: Spanned<Vec<Transport>>,
    pub(super) mode: Spanned<String>,
    #[serde(default)]
    pub(super) pool: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) instance: Option<Spanned<String>>,
    pub(super) leg: Leg,
    #[serde(default)]
    pub(super) ws_path: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) ws_origins: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pub(super) ws_upstream: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) access: super::AccessList,
    #[serde(default = "default_auth_ban")]
    pub(super) auth_ban: Spanned<super::AuthBan>,
}

fn default_auth_ban() -> Spanned<super::AuthBan> {
    Spanned::new(0..0, super::AuthBan::default())
}

fn default_transports() -> Spanned<Vec<Transport>> {
    Spanned::new(0..0, vec![Transport::Udp, Transport::Tcp])
}

/// `[media]` as written: every field keeps its place in the file, so an
/// error names the line of the field that is wrong. Here with the
/// other raw sections, not in `media`, since `media` reads [`RawInstance`]
/// too (issue 24).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMedia {
    #[serde(default)]
    pub(super) ng_bind: Option<Spanned<SocketAddr>>,
    #[serde(default)]
    pub(super) call_idle_timeout_s: Option<Spanned<u32>>,
    #[serde(default)]
    pub(super) ping_interval_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(super) ping_timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(super) ping_failures: Option<Spanned<u32>>,
    #[serde(default)]
    pub(super) mg_timeout_ms: Option<Spanned<u64>>,
}

/// `[[pool]]` as written (checked in `pool.rs`, R-HT-1).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    pub(super) name: Spanned<String>,
    pub(super) threshold: Spanned<i64>,
    #[serde(default)]
    pub(super) backup: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) backup_sip: Option<Spanned<Vec<SocketAddr>>>,
    #[serde(default)]
    pub(super) hold_s: Option<Spanned<u32>>,
    #[serde(default)]
    pub(super) guard_to_backup: bool,
}
