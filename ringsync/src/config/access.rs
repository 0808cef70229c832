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
