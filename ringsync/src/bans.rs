//! The shape of the gate's auth bans as its admin port lists them (R-SEC-3,
//! `GET /v1/bans`): one type for the gate that serves it and `ringsync
//! bans` that reads it.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Where a gate lists its bans; `DELETE {BANS_PATH}/{ip}` lifts one
/// source's.
pub const BANS_PATH: &str = "/v1/bans";

/// A ban as the gate's admin endpoint lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BanInfo {
    /// The listener it applies to.
    pub listener: String,
    /// The banned source address.
    pub source: IpAddr,
    /// Seconds until it ends (rounded up).
    pub remaining_s: u64,
    /// Failures counted when it was banned, and since.
    pub failures: u32,
}
