//! The tunable sections of a site file (`[timers]`, `[drain]`, `[work]`,
//! `[health]`, `[dns]`, `[tcp]`, `[admin]`): plain data with their defaults,
//! read straight by serde; [`super::validate`] checks their values.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// The hold time the drain ETA assumes for a call (from its start; the
    /// next doubling once it outlived it) while too few calls have ended on
    /// this gate to estimate it. Default 180.
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
