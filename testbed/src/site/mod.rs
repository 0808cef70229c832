//! A whole site on one machine: the ringsync store (embedded, or a
//! three-member etcd cluster), the gate node(s), media-ctl with one
//! rtpengine per mg and bgmg, and one SIPp UAS per sg and esg instance, each
//! on its own `127.A.B.x` of a per-run `/24` ([`layout`]).
//!
//! ```no_run
//! # fn main() -> Result<(), testbed::Error> {
//! let mut site = testbed::site::Site::builder().sg(3).esg(2).mg(3).gates(1).run()?;
//! site.activate("maint-a", &["srv-a"])?;
//! # Ok(())
//! # }
//! ```
//!
//! An operator's own site file runs the same way, its addresses mapped onto
//! the run's loopback ([`Layout::from_file`]):
//! `Site::builder().site_file("nyc-1.toml").run()?`.
//!
//! Everything it started is stopped when the [`Site`] drops (also when
//! `run` fails half-way): gates first, then the instances, media-ctl, the
//! rtpengines and etcd.

mod breaks;
mod counts;
mod fronts;

pub use breaks::Break;
pub mod http;
pub mod layout;
#[cfg(test)]
mod layout_tests;
mod nodes;
mod own;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

pub use counts::Counts;
pub use layout::{Acct, ApGroup, Inst, Layout, Lsn, Mapped, RunSpec, StoreKind, Svc};
pub use nodes::{ringsync, BinDir, GateNode, MediaNode, StopPoll, StopSeen};

use crate::{Error, Etcd, Result, Rtpengine, RtpengineHandle, Scenario, Sipp, SippHandle};

/// The SIPp scenario every sg/esg instance plays: calls with SDP and
/// re-INVITE; `-aa` answers the gates' OPTIONS probes.
pub const UAS_SCENARIO: &str = "uas_rehearsal";

/// Builder of a [`Site`].
#[derive(Debug, Clone)]
pub struct SiteBuilder {
    counts: Counts,
    file: Option<PathBuf>,
    run: RunSpec,
    dir: Option<PathBuf>,
    bins: Option<BinDir>,
    lifetime: Duration,
    broken: Option<(usize, Break)>,
    delay_fronts: bool,
}

impl SiteBuilder {
    /// sg instances (default 2).
    pub fn sg(mut self, n: usize) -> Self {
        self.counts.sg = n;
        self
    }
    /// esg instances (default 0).
    pub fn esg(mut self, n: usize) -> Self {
        self.counts.esg = n;
        self
    }
    /// mg instances (default 2).
    pub fn mg(mut self, n: usize) -> Self {
        self.counts.mg = n;
        self
    }
    /// A bgmg on every server with an sg or esg (default off).
    pub fn bgmg(mut self, on: bool) -> Self {
        self.counts.bgmg = on;
        self
    }
    /// Active-Passive groups (default 0): `ringsync serve` plans their
    /// handovers and a `ringsync agent` per member stands in for the service.
    pub fn ap_groups(mut self, n: usize) -> Self {
        self.counts.ap_groups = n;
        self
    }
    /// The operator's own site file instead of counts: its names, services,
    /// accounts, listeners and groups, every address mapped onto the run's
    /// loopback (`Layout::from_file`).
    pub fn site_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }
    /// Gate nodes (default 1).
    pub fn gates(mut self, n: usize) -> Self {
        self.run.gates = n;
        self
    }
    /// The profile store (default embedded).
    pub fn store(mut self, kind: StoreKind) -> Self {
        self.run.store = kind;
        self
    }
    /// `timers.mg_drain_window_s` (default 10 s for counts, the site
    /// file's for a site file).
    pub fn mg_drain_window_s(mut self, s: u32) -> Self {
        self.run.mg_drain_window_s = Some(s);
        self
    }
    /// Seconds a gate sent SIGTERM serves its transactions before it exits
    /// regardless (default 20; R-GW-1).
    pub fn gate_deadline_s(mut self, s: u32) -> Self {
        self.run.gate_deadline_s = s;
        self
    }
    /// `timers.ap_pace_s` (default 60, or the site file's; below 60 the
    /// run's site file allows a test pace).
    pub fn ap_pace_s(mut self, s: u32) -> Self {
        self.run.ap_pace_s = Some(s);
        self
    }
    /// The run's `/24`, `127.A.B` (default: one derived from the process id).
    pub fn net(mut self, net: [u8; 3]) -> Self {
        self.run.net = net;
        self
    }
    /// Where site files and logs go (default: a temporary directory removed
    /// with the site).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }
    /// Where the project's binaries are (default [`BinDir::locate`]).
    pub fn bins(mut self, bins: BinDir) -> Self {
        self.bins = Some(bins);
        self
    }
    /// Gate node `k` breaks a promise on purpose (`testbed chaos --break`),
    /// to see the checks catch it.
    pub fn break_gate(mut self, k: usize, how: Break) -> Self {
        self.broken = Some((k, how));
        self
    }
    /// A delaying relay in front of every UDP listener of every gate,
    /// where the loads' callers send ([`Site::delay_gate`]).
    pub fn delay_fronts(mut self) -> Self {
        self.delay_fronts = true;
        self
    }
    /// The longest the site may run: every SIPp UAS ends by itself after
    /// it (default 10 minutes).
    pub fn lifetime(mut self, t: Duration) -> Self {
        self.lifetime = t;
        self
    }
    /// The layout this builder describes: the site file loaded and mapped,
    /// or the counts' site; the error names the field.
    pub fn layout(&self) -> Result<Layout> {
        let l = match &self.file {
            Some(f) => Layout::from_file(f, &self.run),
            None => Layout::from_counts(&self.counts, &self.run),
        };
        let path = self.file.clone().unwrap_or_else(|| "site".into());
        l.and_then(|l| l.check().map(|()| l))
            .map_err(|message| Error::Scenario { path, message })
    }

    /// Writes the site files and starts everything; returns once every gate
    /// is ready and media-ctl answers.
    pub fn run(self) -> Result<Site> {
        let layout = self.layout()?;
        let (tmp, dir) = match &self.dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|source| Error::File {
                    path: d.clone(),
                    source,
                })?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new().prefix("testbed-site-").tempdir()?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let mut site = Site {
            layout,
            bins: self.bins.clone().unwrap_or_else(BinDir::locate),
            site_file: dir.join("site.toml"),
            dir,
            gates: Vec::new(),
            uas: BTreeMap::new(),
            media: None,
            mgs: BTreeMap::new(),
            etcd: None,
            ap: None,
            lifetime: self.lifetime,
            uas_runs: BTreeMap::new(),
            fronts: None,
            _tmp: tmp,
        };
        if self.delay_fronts {
            site.fronts = Some(fronts::Fronts::start(&site.layout)?);
        }
        site.start_all(self.lifetime, self.broken)?;
        Ok(site)
    }
}

/// A running site. Dropping it stops everything it started.
#[derive(Debug)]
pub struct Site {
    layout: Layout,
    bins: BinDir,
    dir: PathBuf,
    site_file: PathBuf,
    gates: Vec<GateNode>,
    uas: BTreeMap<String, SippHandle>,
    media: Option<MediaNode>,
    mgs: BTreeMap<String, RtpengineHandle>,
    etcd: Option<Etcd>,
    ap: Option<nodes::ApNodes>,
    lifetime: Duration,
    /// Per sg/esg, how many times its UAS was started again.
    uas_runs: BTreeMap<String, u32>,
    /// Delaying relays in front of the gates, if asked for.
    fronts: Option<fronts::Fronts>,
    _tmp: Option<TempDir>,
}

impl Site {
    /// A builder: 2 sg, 2 mg, 1 gate, embedded store.
    pub fn builder() -> SiteBuilder {
        let pid = std::process::id();
        SiteBuilder {
            counts: Counts::default(),
            file: None,
            run: RunSpec {
                net: [127, 100 + (pid % 100) as u8, ((pid / 100) % 250) as u8],
                gates: 1,
                store: StoreKind::Embedded,
                gate_deadline_s: 20,
                mg_drain_window_s: None,
                ap_pace_s: None,
            },
            dir: None,
            bins: None,
            lifetime: Duration::from_secs(600),
            broken: None,
            delay_fronts: false,
        }
    }

    fn start_all(&mut self, lifetime: Duration, broken: Option<(usize, Break)>) -> Result<()> {
        let endpoints = if self.layout.store() == StoreKind::Etcd {
            let etcd = Etcd::cluster(&self.layout.etcd_ips())?;
            let e = etcd.endpoints();
            self.etcd = Some(etcd);
            e
        } else {
            Vec::new()
        };
        let mut files = Vec::new();
        for k in 0..self.layout.gates() {
            let path = self.gate_file(k);
            let mut text = self.layout.site_toml(k, &endpoints);
            if let Some((_, how)) =
                broken.filter(|(g, how)| *g == k || *how == Break::ForgetfulGates)
            {
                text = how.apply(text);
            }
            std::fs::write(&path, text).map_err(|source| Error::File {
                path: path.clone(),
                source,
            })?;
            files.push(path);
        }
        for i in self.layout.instances() {
            match i.svc {
                Svc::Mg | Svc::Bgmg => {
                    // A deleted call frees its ports at once: rtpengine's
                    // default keeps them 30 s, which a rehearsal's load
                    // would exhaust in its 1000-port range.
                    let mg = Rtpengine::new(i.ip).arg("--delete-delay=0").start()?;
                    self.mgs.insert(i.id.clone(), mg);
                }
                Svc::Sg | Svc::Esg => {
                    let uas = Self::uas(&i, lifetime, &self.uas_log(&i.id))?;
                    self.uas.insert(i.id.clone(), uas);
                }
            }
        }
        self.media = Some(MediaNode::start(
            &self.bins,
            &self.site_file,
            self.layout.media_admin(),
        )?);
        self.seed_profiles()?;
        if !self.layout.ap().is_empty() {
            self.ap = Some(nodes::start_ap(&self.bins, &self.site_file, &self.layout)?);
        }
        for (k, file) in files.iter().enumerate() {
            let mut g = GateNode::new(
                &self.bins,
                &format!("gate-{k}"),
                file,
                self.layout.gate_admin(k),
                self.layout.run.gate_deadline_s,
            )?;
            g.start()?;
            self.gates.push(g);
        }
        Ok(())
    }

    /// The profiles of the operator's store, created inactive in the run's.
    fn seed_profiles(&self) -> Result<()> {
        for (name, servers) in self.layout.profiles() {
            let mut args = vec!["profile", "create", "--name", name.as_str()];
            for s in servers {
                args.extend(["--server", s.as_str()]);
            }
            ringsync(&self.bins, &self.site_file, &args)?;
        }
        Ok(())
    }

    /// The instance's own record of what it held (`ev inv|ack|bye|reg|
    /// unreg|sub|unsub CALL-ID ... UNIX-SECONDS` lines): the far end's
    /// ground truth, independent of the gates' counters.
    fn uas(i: &Inst, lifetime: Duration, log: &Path) -> Result<SippHandle> {
        let _ = std::fs::remove_file(log);
        Sipp::new(Scenario::repo(UAS_SCENARIO))
            .local(i.ip, i.addr().port())
            .arg("-aa")
            .arg("-trace_logs")
            .arg("-log_file")
            .arg(log)
            .timeout(lifetime)
            .spawn()
    }

    /// The log file of an sg/esg instance's SIPp UAS (see [`Self::uas`]).
    pub fn uas_log(&self, id: &str) -> PathBuf {
        self.dir.join(format!("uas-{id}.log"))
    }

    /// Every log file of an sg/esg instance's UAS, one per run in the
    /// order they ran ([`Self::start_instance`] starts a new one).
    pub fn uas_logs(&self, id: &str) -> Vec<PathBuf> {
        let runs = self.uas_runs.get(id).copied().unwrap_or(0);
        std::iter::once(self.uas_log(id))
            .chain((1..=runs).map(|n| self.dir.join(format!("uas-{id}.run{n}.log"))))
            .collect()
    }

    /// Starts an sg/esg instance's UAS again after [`Self::kill_instance`],
    /// logging to a file of its own (`uas-ID.runN.log`).
    pub fn start_instance(&mut self, id: &str) -> Result<()> {
        let inst = self
            .layout
            .instances()
            .into_iter()
            .find(|i| {
                i.id == id && matches!(i.svc, Svc::Sg | Svc::Esg) && !self.uas.contains_key(id)
            })
            .ok_or(Error::Scenario {
                path: "site".into(),
                message: format!("no stopped sg/esg instance `{id}` to start"),
            })?;
        let n = self.uas_runs.entry(id.to_owned()).or_insert(0);
        *n += 1;
        let log = self.dir.join(format!("uas-{id}.run{n}.log"));
        let uas = Self::uas(&inst, self.lifetime, &log)?;
        self.uas.insert(id.to_owned(), uas);
        Ok(())
    }

    fn gate_file(&self, k: usize) -> PathBuf {
        if k == 0 {
            self.site_file.clone()
        } else {
            self.dir.join(format!("gate-{k}.toml"))
        }
    }

    /// The layout (addresses, counts).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The site file every tool reads (gate 0's).
    pub fn site_file(&self) -> &Path {
        &self.site_file
    }

    /// The directory of site files and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the project's binaries are.
    pub fn bins(&self) -> &BinDir {
        &self.bins
    }

    /// Gate nodes.
    pub fn gates(&self) -> &[GateNode] {
        &self.gates
    }

    /// Gate node `k`.
    pub fn gate_mut(&mut self, k: usize) -> Option<&mut GateNode> {
        self.gates.get_mut(k)
    }

    /// media-ctl's admin address.
    pub fn media_admin(&self) -> std::net::SocketAddr {
        self.layout.media_admin()
    }

    /// SIGKILL to media-ctl, as a crash would, and a start again.
    pub fn kill_and_start_media(&mut self) -> Result<()> {
        match &mut self.media {
            Some(m) => m.kill_and_start(),
            None => Ok(()),
        }
    }

    /// SIGKILL to `ringsync serve` (the Active-Passive planner) and a
    /// start again; an error on a site without Active-Passive groups.
    pub fn kill_and_start_serve(&mut self) -> Result<()> {
        match &mut self.ap {
            Some(ap) => ap.kill_and_start_serve(),
            None => Err(Error::Command {
                command: "kill ringsync serve".into(),
                message: "the site has no Active-Passive group, so no planner runs".into(),
            }),
        }
    }

    /// Where a caller of gate `k`'s `listener` sends: the relay in front
    /// of it when the site has them, else the gate.
    pub fn caller_target(&self, k: usize, listener: &str) -> Option<std::net::SocketAddr> {
        (self.fronts.as_ref())
            .and_then(|f| f.addr(k, listener))
            .or_else(|| self.layout.gate_listener(k, listener))
    }

    /// Datagrams the relays in front of the gates carried so far.
    pub fn relayed(&self) -> u64 {
        self.fronts.as_ref().map_or(0, fronts::Fronts::relayed)
    }

    /// Delays everything between the callers and gate `k` by `d` each
    /// way (zero: no delay); an error on a site without relays in front.
    pub fn delay_gate(&self, k: usize, d: Duration) -> Result<()> {
        match &self.fronts {
            Some(f) if f.set_delay(k, d) => Ok(()),
            _ => Err(Error::Command {
                command: format!("delay gate-{k}"),
                message: "the site has no delaying relay in front of that gate".into(),
            }),
        }
    }

    /// SIGKILL to Active-Passive member `member`'s agent and a start
    /// again; an error for a member the site has not.
    pub fn kill_and_start_agent(&mut self, member: &str) -> Result<()> {
        let found = match &mut self.ap {
            Some(ap) => ap.kill_and_start_agent(member)?,
            None => false,
        };
        if found {
            Ok(())
        } else {
            Err(Error::Command {
                command: format!("kill the agent of {member}"),
                message: "the site has no Active-Passive member of that name".into(),
            })
        }
    }

    /// The etcd cluster, with [`StoreKind::Etcd`].
    pub fn etcd_mut(&mut self) -> Option<&mut Etcd> {
        self.etcd.as_mut()
    }

    /// Kills an instance as a crash would: its SIPp UAS or its rtpengine.
    pub fn kill_instance(&mut self, id: &str) -> Result<()> {
        if let Some(u) = self.uas.remove(id) {
            crate::process::signal_pid(u.pid(), "KILL");
            drop(u);
        } else if let Some(m) = self.mgs.remove(id) {
            m.kill();
        } else {
            return Err(Error::Scenario {
                path: "site".into(),
                message: format!("no running instance `{id}` to kill"),
            });
        }
        Ok(())
    }

    /// Creates (if new) and activates a drain profile through the ringsync
    /// CLI; with no servers, the profile is one of the site's store.
    pub fn activate(&self, profile: &str, servers: &[&str]) -> Result<()> {
        let list = ringsync(&self.bins, &self.site_file, &["profile", "list"])?;
        let exists = list
            .as_array()
            .or_else(|| list["profiles"].as_array())
            .is_some_and(|ps| ps.iter().any(|p| p["name"] == profile));
        if !exists {
            let mut args = vec!["profile", "create", "--name", profile];
            for s in servers {
                args.extend(["--server", s]);
            }
            ringsync(&self.bins, &self.site_file, &args)?;
        }
        ringsync(
            &self.bins,
            &self.site_file,
            &["profile", "activate", profile],
        )?;
        Ok(())
    }

    /// Lifts a drain profile through the ringsync CLI.
    pub fn deactivate(&self, profile: &str) -> Result<()> {
        ringsync(
            &self.bins,
            &self.site_file,
            &["profile", "deactivate", profile],
        )?;
        Ok(())
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        for g in &mut self.gates {
            g.stop(Duration::from_secs(1));
        }
        self.uas.clear();
        if let Some(m) = self.media.take() {
            m.stop(Duration::from_secs(1));
        }
        if let Some(ap) = &mut self.ap {
            ap.stop(Duration::from_secs(1));
        }
        for (_, m) in std::mem::take(&mut self.mgs) {
            m.stop();
        }
        if let Some(e) = &mut self.etcd {
            e.stop();
        }
    }
}
