//! A flow Route from a stranger (R-SEC-1): a new request whose Route names
//! one of this gate's flow URIs but that does not come from an instance the
//! listener fronts. Only an instance sends into a subscriber's flow; from
//! anyone else it is a misconfigured instance (its outgoing address not in
//! its `sources`) or a forgery. Routed as a client's new request it would go
//! back to an instance: a loop through the gate. It is refused with 403,
//! counted as `sipgate_requests_total{outcome="flow_from_stranger"}`, and
//! logged once per source address with the hint of where instances are
//! expected to come from.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ringsync::config::SiteConfig;

use crate::listener::ListenerCtx;

/// Sources logged at most once each; past this many the set starts over,
/// so the table stays bounded whatever a flood of sources sends.
const MAX_LOGGED: usize = 4096;

/// Sources logged lately: each at most once per window (`every`), or once
/// for good without one. Bounded: past [`MAX_LOGGED`] sources the set
/// starts over, so a flood of addresses costs a line each at worst, never
/// memory. Used for strangers (once) and refused sources (once a minute).
#[derive(Debug, Default)]
pub(super) struct LoggedLately {
    logged: Mutex<HashMap<IpAddr, Instant>>,
    every: Option<Duration>,
}

/// The sources already logged of [`hint`]'s kind: once each.
pub(super) type Strangers = LoggedLately;

impl LoggedLately {
    /// Each source at most once per `every`.
    pub(super) fn every(every: Duration) -> Self {
        LoggedLately {
            logged: Mutex::default(),
            every: Some(every),
        }
    }

    /// Whether `ip` is to be logged at `now` (and notes it).
    pub(super) fn first(&self, ip: IpAddr, now: Instant) -> bool {
        let mut set = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = set.get(&ip) {
            match self.every {
                Some(every) if now.saturating_duration_since(*at) >= every => {}
                _ => return false,
            }
        } else if set.len() >= MAX_LOGGED {
            set.clear();
        }
        set.insert(ip, now);
        true
    }
}

/// The instances `listener` fronts, each with where the gate accepts it
/// from: its `sip` address and its `sources` networks.
pub(super) fn hint(config: &SiteConfig, listener: &ListenerCtx) -> String {
    let mut out = String::new();
    for (idx, inst) in config.instances.iter().enumerate() {
        if !listener.mode.fronts(idx, &inst.service) {
            continue;
        }
        if !out.is_empty() {
            out.push_str("; ");
        }
        let _ = write!(out, "{}", inst.id);
        if let Some(sip) = inst.sip {
            let _ = write!(out, " sip {sip}");
        }
        if !inst.sources.is_empty() {
            let nets: Vec<String> = inst.sources.iter().map(ToString::to_string).collect();
            let _ = write!(out, " sources [{}]", nets.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_once_and_the_set_stays_bounded_r_sec_1() {
        let s = Strangers::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let t0 = Instant::now();
        assert!(s.first(a, t0));
        assert!(!s.first(a, t0 + Duration::from_secs(3600)));
        for i in 0..(MAX_LOGGED as u32 * 3) {
            s.first(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(s.logged.lock().unwrap().len() <= MAX_LOGGED);
    }

    #[test]
    fn each_refused_source_once_per_window_r_sec_4() {
        let s = LoggedLately::every(Duration::from_secs(60));
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let t0 = Instant::now();
        assert!(s.first(a, t0));
        assert!(!s.first(a, t0 + Duration::from_secs(59)));
        assert!(s.first(a, t0 + Duration::from_secs(60)));
    }
}
