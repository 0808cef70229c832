//! `[listener.access]`: which source networks may start new dialogs on a
//! listener (its access list). In-dialog requests are not judged here:
//! they follow the dialog's Record-Route token as always.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// What the gate does with a new dialog a listener's access list refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AccessAction {
    /// Answer `403 Forbidden` (the default): a misconfigured peer sees why.
    #[default]
    Reject,
    /// Say nothing: a scanner learns nothing about the listener.
    Drop,
}

/// A listener's access list for new dialogs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessList {
    /// Networks allowed to start dialogs; empty: every source not denied.
    #[serde(default)]
    pub allow: Vec<IpNet>,
    /// Networks refused, even inside an allowed one.
    #[serde(default)]
    pub deny: Vec<IpNet>,
    /// Answer 403 or drop.
    #[serde(default)]
    pub action: AccessAction,
}

impl AccessList {
    /// Whether `ip` may start a new dialog: not in `deny`, and in `allow`
    /// when `allow` names any network. An IPv4-mapped IPv6 source is
    /// judged as its IPv4 address.
    pub fn admits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if self.deny.iter().any(|n| n.contains(&ip)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|n| n.contains(&ip))
    }

    /// Whether the list restricts anything.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// `[listener.auth_ban]`, R-SEC-3: a source whose requests the instances
/// answer with 401, 407 or 403 `limit` times within `window_s` seconds is
/// refused new dialogs on the listener for `ban_s` seconds. In-dialog
/// requests and responses are never banned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthBan {
    /// Authentication failures that ban a source; 0 (the default): off.
    #[serde(default)]
    pub limit: u32,
    /// The window the failures are counted over, in seconds.
    #[serde(default = "default_window_s")]
    pub window_s: u32,
    /// How long a ban lasts, in seconds.
    #[serde(default = "default_ban_s")]
    pub ban_s: u32,
    /// Networks never banned (the site's instances never are either).
    #[serde(default)]
    pub exempt: Vec<IpNet>,
    /// Answer a banned source's new dialogs with 403, or drop them.
    #[serde(default)]
    pub action: AccessAction,
    /// Sources the table tracks at most; past it, a new source's failures
    /// are not counted until entries expire (memory stays bounded).
    #[serde(default = "default_max_sources")]
    pub max_sources: usize,
}

fn default_window_s() -> u32 {
    60
}
fn default_ban_s() -> u32 {
    600
}
fn default_max_sources() -> usize {
    65_536
}

impl Default for AuthBan {
    fn default() -> Self {
        AuthBan {
            limit: 0,
            window_s: default_window_s(),
            ban_s: default_ban_s(),
            exempt: Vec::new(),
            action: AccessAction::Reject,
            max_sources: default_max_sources(),
        }
    }
}

impl AuthBan {
    /// Whether bans are on.
    pub fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// What is wrong with it, as (field, message), when enabled.
    pub fn problem(&self) -> Option<(&'static str, &'static str)> {
        if !self.enabled() {
            return None;
        }
        if self.window_s == 0 {
            return Some(("window_s", "must be at least 1 when limit is set"));
        }
        if self.ban_s == 0 {
            return Some(("ban_s", "must be at least 1 when limit is set"));
        }
        if self.max_sources == 0 {
            return Some(("max_sources", "must be at least 1 when limit is set"));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(allow: &[&str], deny: &[&str]) -> AccessList {
        AccessList {
            allow: allow.iter().map(|n| n.parse().unwrap()).collect(),
            deny: deny.iter().map(|n| n.parse().unwrap()).collect(),
            action: AccessAction::Reject,
        }
    }

    #[test]
    fn deny_wins_allow_restricts_empty_admits_all() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(AccessList::default().admits(ip("203.0.113.9")));
        let l = list(&["10.0.0.0/8"], &["10.6.6.0/24"]);
        assert!(l.admits(ip("10.1.2.3")));
        assert!(!l.admits(ip("10.6.6.6")));
        assert!(!l.admits(ip("192.0.2.1")));
        assert!(l.admits(ip("::ffff:10.1.2.3")));
        assert!(!list(&[], &["::/0", "0.0.0.0/0"]).admits(ip("2001:db8::1")));
    }
}
