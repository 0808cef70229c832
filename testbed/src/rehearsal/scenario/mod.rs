//! A rehearsal scenario: the site to build and a timeline of steps, read
//! from TOML (docs/rehearsal.md describes every field).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::site::{Layout, Site, SiteBuilder, StoreKind};
use crate::{Error, Result};

/// Rules a scenario may ask a verdict on.
pub const RULES: &[&str] = &[
    "R-SG-4", "R-ESG-4", "R-GW-2", "R-AA-1", "R-AA-3", "R-AA-4", "R-MG-1", "R-MG-3", "R-MG-4",
    "R-GW-1", "R-ESG-1", "R-ESG-3", "R-ESG-5", "R-BG-1", "R-BG-3", "R-MN-2", "R-AP-1", "R-AP-2",
    "R-AP-3", "R-AP-4",
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
    /// The site: counts (`[site]` with `sg = 3, ...`) or the operator's
    /// own site file (`site = "path.toml"`, or `[site] file = ...` with
    /// the run's settings beside it).
    #[serde(default, deserialize_with = "site_spec")]
    pub site: SiteSpec,
    /// When the run ends, seconds after it starts (default: when the last
    /// step's effect ends, plus a few seconds).
    #[serde(default)]
    pub end_s: Option<f64>,
    /// The timeline.
    #[serde(default, rename = "step")]
    pub steps: Vec<Step>,
}

/// The site to run: the operator's site file or counts, and the run's
/// settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SiteSpec {
    /// The operator's site file (relative to the scenario file).
    pub file: Option<PathBuf>,
    /// sg instances (counts; default 2).
    pub sg: Option<usize>,
    /// esg instances (counts; default 0).
    pub esg: Option<usize>,
    /// mg instances (counts; default 2).
    pub mg: Option<usize>,
    /// A bgmg per server with an sg or esg (counts).
    pub bgmg: Option<bool>,
    /// Active-Passive groups (counts: a member on every server, homed on srv-a).
    pub ap_groups: Option<usize>,
    /// Gate nodes (default 1).
    pub gates: Option<usize>,
    /// `embedded` or `etcd` (a three-member cluster).
    pub store: StoreKind,
    /// The mg drain window, seconds (default 10 for counts, the site
    /// file's for a site file).
    pub mg_drain_window_s: Option<u32>,
    /// Seconds a gate sent SIGTERM serves its transactions before it exits
    /// regardless (R-GW-1; default 20).
    pub gate_deadline_s: Option<u32>,
    /// Seconds between two Active-Passive leader moves (R-AP-2; default
    /// 60, or the site file's).
    pub ap_pace_s: Option<u32>,
    /// `127.A.B` of the run's /24, e.g. `"127.60.1"` (default: from the pid).
    pub net: Option<String>,
}

/// `site = "file.toml"` or a `[site]` table.
fn site_spec<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<SiteSpec, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::String(f) => Ok(SiteSpec {
            file: Some(f.into()),
            ..SiteSpec::default()
        }),
        v @ toml::Value::Table(_) => {
            SiteSpec::deserialize(v).map_err(|e| serde::de::Error::custom(format!("site: {e}")))
        }
        other => Err(serde::de::Error::custom(format!(
            "site: a site file's path or a table, not {}",
            other.type_str()
        ))),
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
        /// The esg account the calls belong to (by their source address):
        /// `multi` (the site's first multi-instance account), `single` (its
        /// first single-instance one) or an account's name. Default: `multi`
        /// when the site has one.
        #[serde(default)]
        account: Option<String>,
    },
    /// Create (if new) and activate a drain profile (ringsync CLI).
    Activate {
        /// Profile name.
        profile: String,
        /// Its servers; none for a profile of the site's store.
        #[serde(default)]
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

/// Which kind of esg account a load's calls belong to: the gate tells the
/// accounts apart by the callers' source address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountKind {
    /// A multi-instance account (or none): moved off a draining esg.
    #[default]
    Multi,
    /// A single-instance account, kept on its home (R-ESG-5).
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
                account: Some(a),
                ..
            } if a == "single" => format!("load {rate}/s {listener} single-instance account"),
            Action::Load {
                rate,
                listener,
                kind: LoadKind::Call,
                account: Some(a),
                ..
            } if a != "multi" => format!("load {rate}/s {listener} account {a}"),
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
            Action::Activate { profile, servers } if servers.is_empty() => {
                format!("activate {profile}")
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
        let mut s: Scenario = toml::from_str(&text).map_err(|e| Error::Scenario {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if let Some(f) = &mut s.site.file {
            if f.is_relative() {
                *f = path.parent().unwrap_or(Path::new(".")).join(&*f);
            }
        }
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
        let bad = |message: String| Error::Scenario {
            path: "scenario".into(),
            message,
        };
        let mut b = Site::builder()
            .store(s.store)
            .lifetime(std::time::Duration::from_secs_f64(self.end_s() + 60.0));
        if let Some(f) = &s.file {
            let counts = [
                ("sg", s.sg.is_some()),
                ("esg", s.esg.is_some()),
                ("mg", s.mg.is_some()),
                ("bgmg", s.bgmg.is_some()),
                ("ap_groups", s.ap_groups.is_some()),
            ];
            if let Some((k, _)) = counts.iter().find(|c| c.1) {
                return Err(bad(format!(
                    "site.{k}: counts build a site; with site.file the site file says what runs"
                )));
            }
            b = b.site_file(f);
        } else {
            let d = crate::site::Counts::default();
            b = b
                .sg(s.sg.unwrap_or(d.sg))
                .esg(s.esg.unwrap_or(d.esg))
                .mg(s.mg.unwrap_or(d.mg))
                .bgmg(s.bgmg.unwrap_or(d.bgmg))
                .ap_groups(s.ap_groups.unwrap_or(d.ap_groups));
        }
        b = b.gates(s.gates.unwrap_or(1));
        if let Some(w) = s.mg_drain_window_s {
            b = b.mg_drain_window_s(w);
        }
        if let Some(d) = s.gate_deadline_s {
            b = b.gate_deadline_s(d);
        }
        if let Some(p) = s.ap_pace_s {
            b = b.ap_pace_s(p);
        }
        if let Some(net) = &s.net {
            b = b.net(
                parse_net(net)
                    .ok_or_else(|| bad(format!("site.net = {net:?}: expected \"127.A.B\"")))?,
            );
        }
        Ok(b)
    }

    /// This scenario with every `activate` of a profile of the site's store
    /// given that profile's servers, so steps and verdicts name them.
    pub fn resolved(&self, l: &Layout) -> Scenario {
        let mut s = self.clone();
        for step in &mut s.steps {
            if let Action::Activate { profile, servers } = &mut step.action {
                if servers.is_empty() {
                    if let Some((_, srv)) = l.profiles().iter().find(|p| &p.0 == profile) {
                        servers.clone_from(srv);
                    }
                }
            }
        }
        s
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
        let layout = self
            .builder()
            .and_then(|b| b.layout())
            .map_err(|e| format!("site: {e}"))?;
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
        (g < l.gates())
            .then_some(())
            .ok_or(format!("gate {g}: the site has {} gate(s)", l.gates()))
    };
    match a {
        Action::Load { gate, .. } => {
            check_load(l, a)?;
            gate.map_or(Ok(()), gate_ok)
        }
        Action::Activate { servers, profile } => {
            let known = l.servers();
            match servers.iter().find(|s| !known.contains(s)) {
                Some(s) => Err(format!(
                    "server `{s}` is not on the site ({})",
                    known.join(", ")
                )),
                None if servers.is_empty() && !l.profiles().iter().any(|p| &p.0 == profile) => {
                    Err(format!(
                        "profile `{profile}` is not in the site's store ({}): name its servers",
                        names(l.profiles().iter().map(|p| p.0.as_str()))
                    ))
                }
                None => Ok(()),
            }
        }
        Action::SigtermGate { gate } | Action::RestartGate { gate } => gate_ok(*gate),
        Action::KillInstance { instance } => l
            .instances()
            .iter()
            .any(|i| &i.id == instance)
            .then_some(())
            .ok_or(format!(
                "no instance `{instance}` with a process (sg, esg, mg, bgmg): {}",
                names(l.instances().iter().map(|i| i.id.as_str()))
            )),
        Action::StopEtcd { .. } if l.store() != StoreKind::Etcd => {
            Err("stop_etcd needs site.store = \"etcd\"".into())
        }
        _ => Ok(()),
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn check_load(l: &Layout, a: &Action) -> std::result::Result<(), String> {
    let Action::Load {
        rate,
        duration_s,
        hold_s,
        listener,
        account,
        ..
    } = a
    else {
        return Ok(());
    };
    if *rate == 0 || *rate > MAX_RATE {
        return Err(format!("rate = {rate}: 1 to {MAX_RATE} calls/s"));
    }
    if !(*duration_s > 0.0 && *duration_s <= MAX_DURATION_S && *hold_s >= 0.0 && *hold_s <= 600.0) {
        return Err("duration_s must be in (0, 1800], hold_s in [0, 600]".into());
    }
    let Some(lsn) = l.listener(listener) else {
        return Err(format!(
            "listener `{listener}`: not on this site (its listeners: {})",
            names(l.listeners().iter().map(|x| x.name.as_str()))
        ));
    };
    if !lsn.udp {
        return Err(format!(
            "listener `{listener}` serves no udp: the rehearsal's callers speak UDP"
        ));
    }
    let Some(name) = account else {
        return Ok(());
    };
    let Some(acct) = l.account(name) else {
        return Err(format!(
            "account `{name}`: not on this site (multi, single or one of: {})",
            names(l.accounts().iter().map(|x| x.name.as_str()))
        ));
    };
    let esg = lsn.pool == Some(crate::site::Svc::Esg)
        || lsn.guard.as_ref().is_some_and(|g| {
            l.instances()
                .iter()
                .any(|i| &i.id == g && i.svc == crate::site::Svc::Esg)
        });
    if !esg {
        return Err(format!(
            "account = \"{name}\" ({}) is an esg account: give a listener in front of the esg",
            acct.name
        ));
    }
    Ok(())
}

/// `"127.A.B"` as octets.
fn parse_net(s: &str) -> Option<[u8; 3]> {
    let mut it = s.split('.').map(|p| p.parse::<u8>().ok());
    let net = [it.next()??, it.next()??, it.next()??];
    it.next().is_none().then_some(net)
}

#[cfg(test)]
mod tests;
