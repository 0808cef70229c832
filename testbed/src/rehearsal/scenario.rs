//! A rehearsal scenario: the site to build and a timeline of steps, read
//! from TOML (docs/rehearsal.md describes every field).

use std::path::Path;

use serde::Deserialize;

use crate::site::{Layout, Site, SiteBuilder, StoreKind};
use crate::{Error, Result};

/// Rules a scenario may ask a verdict on.
pub const RULES: &[&str] = &[
    "R-SG-4", "R-ESG-4", "R-GW-2", "R-AA-1", "R-AA-3", "R-AA-4", "R-MG-1", "R-MG-3", "R-MG-4",
    "R-GW-1", "R-ESG-1", "R-ESG-3", "R-ESG-5", "R-BG-1", "R-BG-3", "R-MN-2", "R-AP-2",
];

/// The longest a scenario may run, and the highest load rate, so every run
/// is bounded.
pub const MAX_DURATION_S: f64 = 1800.0;
/// Highest calls/s of one load step.
pub const MAX_RATE: u32 = 500;

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name (report title, file names).
    pub name: String,
    /// What it rehearses.
    #[serde(default)]
    pub description: String,
    /// Rules to give a verdict on (see [`RULES`]).
    #[serde(default)]
    pub rules: Vec<String>,
    /// The site.
    #[serde(default)]
    pub site: SiteSpec,
    /// When the run ends, seconds after it starts (default: when the last
    /// step's effect ends, plus a few seconds).
    #[serde(default)]
    pub end_s: Option<f64>,
    /// The timeline.
    #[serde(default, rename = "step")]
    pub steps: Vec<Step>,
}

/// Counts and timers of the site to build.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SiteSpec {
    /// sg instances.
    pub sg: usize,
    /// esg instances.
    pub esg: usize,
    /// mg instances.
    pub mg: usize,
    /// A bgmg per server with an sg or esg.
    pub bgmg: bool,
    /// Gate nodes.
    pub gates: usize,
    /// `embedded` or `etcd` (a three-member cluster).
    pub store: StoreKind,
    /// The mg drain window, seconds.
    pub mg_drain_window_s: u32,
    /// Seconds a gate sent SIGTERM serves its transactions before it exits
    /// regardless (R-GW-1).
    pub gate_deadline_s: u32,
    /// Active-Passive groups (a member on every server, homed on srv-a).
    pub ap_groups: usize,
    /// Seconds between two Active-Passive leader moves (R-AP-2).
    pub ap_pace_s: u32,
    /// `127.A.B` of the run's /24, e.g. `"127.60.1"` (default: from the pid).
    pub net: Option<String>,
}

impl Default for SiteSpec {
    fn default() -> Self {
        SiteSpec {
            sg: 2,
            esg: 0,
            mg: 2,
            bgmg: false,
            gates: 1,
            store: StoreKind::Embedded,
            mg_drain_window_s: 10,
            gate_deadline_s: 20,
            ap_groups: 0,
            ap_pace_s: 60,
            net: None,
        }
    }
}

/// One step of the timeline.
#[derive(Debug, Clone, Deserialize)]
pub struct Step {
    /// Seconds after the start.
    pub at_s: f64,
    /// What happens.
    #[serde(flatten)]
    pub action: Action,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum Action {
    /// Calls with SDP through a gate listener, at `rate` calls/s for
    /// `duration_s`, each held `hold_s`.
    Load {
        /// Calls per second.
        rate: u32,
        /// Seconds of new calls.
        duration_s: f64,
        /// Hold time of each call.
        hold_s: f64,
        /// Gate listener: `subscribers` (sg), `providers`, `inside` (esg).
        #[serde(default = "subscribers")]
        listener: String,
        /// Gate node the calls go through (default: spread over all).
        #[serde(default)]
        gate: Option<usize>,
        /// What each "call" of the load is.
        #[serde(default)]
        kind: LoadKind,
        /// The esg account the calls belong to (by their source address).
        #[serde(default)]
        account: AccountKind,
    },
    /// Create (if new) and activate a drain profile (ringsync CLI).
    Activate {
        /// Profile name.
        profile: String,
        /// Its servers.
        servers: Vec<String>,
    },
    /// Lift a drain profile (ringsync CLI).
    Deactivate {
        /// Profile name.
        profile: String,
    },
    /// SIGTERM to a gate node: it stops gracefully (R-GW-1).
    SigtermGate {
        /// Gate node.
        gate: usize,
    },
    /// Stop a gate node gracefully and start it again (R-GW-2).
    RestartGate {
        /// Gate node.
        gate: usize,
    },
    /// Kill an instance (its SIPp or rtpengine) as a crash would.
    KillInstance {
        /// Instance id.
        instance: String,
    },
    /// Stop the etcd cluster for `for_s` seconds (R-MN-2).
    StopEtcd {
        /// Outage length.
        for_s: f64,
    },
}

fn subscribers() -> String {
    "subscribers".into()
}

/// What a `load` step sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    /// A call with SDP, held, re-INVITEd and ended (`uac_rehearsal_call`).
    #[default]
    Call,
    /// A registration, refreshed after the hold time and removed
    /// (`uac_rehearsal_register`).
    Register,
    /// A presence subscription: SUBSCRIBE and its NOTIFY, refreshed after
    /// the hold time and removed (`uac_rehearsal_subscribe`).
    Subscribe,
    /// An out-of-dialog OPTIONS (`uac_rehearsal_options`).
    Options,
}

/// Which esg account a load's calls belong to: the gate tells them apart
/// by the callers' source address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountKind {
    /// `rehearsal-carrier`, multi-instance: moved off a draining esg.
    #[default]
    Multi,
    /// `rehearsal-single`, single-instance, home `esg-a` (R-ESG-5).
    Single,
}

impl Action {
    /// The step's name in the report.
    pub fn label(&self) -> String {
        match self {
            Action::Load {
                rate,
                listener,
                kind: LoadKind::Call,
                account: AccountKind::Single,
                ..
            } => format!("load {rate}/s {listener} single-instance account"),
            Action::Load {
                rate,
                listener,
                kind: LoadKind::Call,
                ..
            } => format!("load {rate}/s {listener}"),
            Action::Load {
                rate,
                listener,
                kind,
                ..
            } => {
                let what = match kind {
                    LoadKind::Register => "registrations",
                    LoadKind::Subscribe => "subscriptions",
                    _ => "OPTIONS",
                };
                format!("load {rate} {what}/s {listener}")
            }
            Action::Activate { profile, servers } => {
                format!("activate {profile} ({})", servers.join(", "))
            }
            Action::Deactivate { profile } => format!("deactivate {profile}"),
            Action::SigtermGate { gate } => format!("SIGTERM gate-{gate}"),
            Action::RestartGate { gate } => format!("restart gate-{gate}"),
            Action::KillInstance { instance } => format!("kill {instance}"),
            Action::StopEtcd { for_s } => format!("stop etcd {for_s} s"),
        }
    }

    /// Seconds after the step starts until its effect is over.
    fn length_s(&self) -> f64 {
        match self {
            Action::Load {
                duration_s, hold_s, ..
            } => duration_s + hold_s + 1.0,
            Action::StopEtcd { for_s } => *for_s,
            _ => 0.0,
        }
    }
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::File {
            path: path.to_path_buf(),
            source,
        })?;
        let s: Scenario = toml::from_str(&text).map_err(|e| Error::Scenario {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        s.check().map_err(|message| Error::Scenario {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(s)
    }

    /// When the run ends, seconds after the start.
    pub fn end_s(&self) -> f64 {
        self.end_s.unwrap_or_else(|| {
            self.steps
                .iter()
                .map(|s| s.at_s + s.action.length_s())
                .fold(0.0, f64::max)
                + 3.0
        })
    }

    /// The site builder this scenario describes.
    pub fn builder(&self) -> Result<SiteBuilder> {
        let s = &self.site;
        let mut b = Site::builder()
            .sg(s.sg)
            .esg(s.esg)
            .mg(s.mg)
            .bgmg(s.bgmg)
            .gates(s.gates)
            .store(s.store)
            .mg_drain_window_s(s.mg_drain_window_s)
            .gate_deadline_s(s.gate_deadline_s)
            .ap_groups(s.ap_groups)
            .ap_pace_s(s.ap_pace_s)
            .lifetime(std::time::Duration::from_secs_f64(self.end_s() + 60.0));
        if let Some(net) = &s.net {
            b = b.net(parse_net(net).ok_or_else(|| Error::Scenario {
                path: "scenario".into(),
                message: format!("site.net = {net:?}: expected \"127.A.B\""),
            })?);
        }
        Ok(b)
    }

    fn check(&self) -> std::result::Result<(), String> {
        for r in &self.rules {
            if !RULES.contains(&r.as_str()) {
                return Err(format!(
                    "rules: no verdict for {r} (known: {})",
                    RULES.join(", ")
                ));
            }
        }
        let layout = self.builder().map_err(|e| e.to_string())?.layout().clone();
        layout.check().map_err(|e| format!("site: {e}"))?;
        if self.end_s() > MAX_DURATION_S {
            return Err(format!(
                "the run would last {} s: at most {MAX_DURATION_S}",
                self.end_s()
            ));
        }
        for (i, step) in self.steps.iter().enumerate() {
            check_step(&layout, &step.action)
                .map_err(|e| format!("step[{i}] ({}): {e}", step.action.label()))?;
            if !(0.0..=MAX_DURATION_S).contains(&step.at_s) {
                return Err(format!("step[{i}].at_s = {}: out of range", step.at_s));
            }
        }
        Ok(())
    }
}

fn check_step(l: &Layout, a: &Action) -> std::result::Result<(), String> {
    let gate_ok = |g: usize| {
        (g < l.gates)
            .then_some(())
            .ok_or(format!("gate {g}: the site has {} gate(s)", l.gates))
    };
    match a {
        Action::Load {
            rate,
            duration_s,
            hold_s,
            listener,
            gate,
            account,
            ..
        } => {
            if *account == AccountKind::Single && (listener == "subscribers" || l.esg == 0) {
                return Err(
                    "account = \"single\" is an esg account: listener providers or inside".into(),
                );
            }
            if *rate == 0 || *rate > MAX_RATE {
                return Err(format!("rate = {rate}: 1 to {MAX_RATE} calls/s"));
            }
            if !(*duration_s > 0.0
                && *duration_s <= MAX_DURATION_S
                && *hold_s >= 0.0
                && *hold_s <= 600.0)
            {
                return Err("duration_s must be in (0, 1800], hold_s in [0, 600]".into());
            }
            if l.gate_listener(0, listener).is_none() {
                return Err(format!("listener `{listener}`: not on this site (subscribers needs sg, providers/inside need esg)"));
            }
            gate.map_or(Ok(()), gate_ok)
        }
        Action::Activate { servers, .. } => {
            let known = l.servers();
            match servers.iter().find(|s| !known.contains(s)) {
                Some(s) => Err(format!(
                    "server `{s}` is not on the site ({})",
                    known.join(", ")
                )),
                None if servers.is_empty() => Err("servers: name at least one".into()),
                None => Ok(()),
            }
        }
        Action::SigtermGate { gate } | Action::RestartGate { gate } => gate_ok(*gate),
        Action::KillInstance { instance } => l
            .instances()
            .iter()
            .any(|i| &i.id == instance)
            .then_some(())
            .ok_or(format!("no instance `{instance}`")),
        Action::StopEtcd { .. } if l.store != StoreKind::Etcd => {
            Err("stop_etcd needs site.store = \"etcd\"".into())
        }
        _ => Ok(()),
    }
}

/// `"127.A.B"` as octets.
fn parse_net(s: &str) -> Option<[u8; 3]> {
    let mut it = s.split('.').map(|p| p.parse::<u8>().ok());
    let net = [it.next()??, it.next()??, it.next()??];
    it.next().is_none().then_some(net)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<Scenario, String> {
        let s: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        s.check()?;
        Ok(s)
    }

    #[test]
    fn a_timeline_parses_and_ends_after_its_last_effect() {
        let s = parse(
            r#"
name = "t"
rules = ["R-SG-4", "R-AA-1"]
[site]
sg = 3
net = "127.60.1"
[[step]]
at_s = 0
do = "load"
rate = 10
duration_s = 20
hold_s = 4
[[step]]
at_s = 5
do = "activate"
profile = "maint-a"
servers = ["srv-a"]
"#,
        )
        .unwrap();
        assert_eq!(s.steps.len(), 2);
        assert_eq!(s.end_s(), 0.0 + 20.0 + 4.0 + 1.0 + 3.0);
        assert_eq!(s.builder().unwrap().layout().net, [127, 60, 1]);
    }

    #[test]
    fn mistakes_are_named() {
        let base = "name = \"t\"\n[site]\nsg = 2\n";
        let e = parse(&format!(
            "{base}[[step]]\nat_s = 1\ndo = \"activate\"\nprofile = \"p\"\nservers = [\"srv-q\"]\n"
        ))
        .unwrap_err();
        assert!(e.contains("step[0]") && e.contains("srv-q"), "{e}");
        let e = parse(&format!(
            "{base}[[step]]\nat_s = 1\ndo = \"load\"\nrate = 5000\nduration_s = 1\nhold_s = 1\n"
        ))
        .unwrap_err();
        assert!(e.contains("rate = 5000"), "{e}");
        let e = parse("name = \"t\"\nrules = [\"R-XX-9\"]\n").unwrap_err();
        assert!(e.contains("R-XX-9"), "{e}");
        let e = parse(&format!(
            "{base}[[step]]\nat_s = 1\ndo = \"stop_etcd\"\nfor_s = 3\n"
        ))
        .unwrap_err();
        assert!(e.contains("etcd"), "{e}");
        let e = parse(&format!("{base}[[step]]\nat_s = 1\ndo = \"explode\"\n")).unwrap_err();
        assert!(e.contains("explode"), "{e}");
        // The single-instance account is an esg account.
        let e = parse(&format!(
            "{base}[[step]]\nat_s = 0\ndo = \"load\"\naccount = \"single\"\nrate = 1\nduration_s = 1\nhold_s = 1\n"
        ))
        .unwrap_err();
        assert!(e.contains("esg account"), "{e}");
        let e = parse("name = \"t\"\n[site]\nsg = 2\ngate_deadline_s = 0\n").unwrap_err();
        assert!(e.contains("gate_deadline_s = 0"), "{e}");
        let e = parse("name = \"t\"\n[site]\nsg = 1\nmg = 0\nap_groups = 2\n").unwrap_err();
        assert!(e.contains("two servers"), "{e}");
    }
}
