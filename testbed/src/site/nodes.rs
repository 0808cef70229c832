//! The project's own binaries as processes of a site: gate nodes
//! (`sip-gate`), media-ctl, and the `ringsync` CLI the timeline drives.
//! Each runs in its own process group (a Ctrl-C at the terminal reaches
//! testbed only, which then stops everything in order) with its log in the
//! run directory.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::process::Proc;
use crate::{Error, Result};

/// Where `sip-gate`, `media-ctl` and `ringsync` are found.
#[derive(Debug, Clone)]
pub struct BinDir(PathBuf);

impl BinDir {
    /// `TESTBED_BIN_DIR` if set, else the directory of the running program
    /// (`target/debug` for `testbed` itself and, one up from `deps/`, for a
    /// test), so a workspace build finds its own binaries.
    pub fn locate() -> BinDir {
        if let Some(d) = std::env::var_os("TESTBED_BIN_DIR") {
            return BinDir(PathBuf::from(d));
        }
        let exe = std::env::current_exe().unwrap_or_default();
        let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        if dir.file_name().is_some_and(|n| n == "deps") {
            dir.pop();
        }
        BinDir(dir)
    }

    /// A directory given explicitly.
    pub fn at(dir: impl Into<PathBuf>) -> BinDir {
        BinDir(dir.into())
    }

    /// The path of `program`, or an error saying how to build it.
    pub fn program(&self, program: &str) -> Result<PathBuf> {
        let p = self.0.join(program);
        if p.is_file() {
            Ok(p)
        } else {
            Err(Error::NotBuilt {
                program: program.into(),
                dir: self.0.clone(),
            })
        }
    }
}

/// Starts `cmd` in its own process group, logging to `DIR/LABEL.stderr`.
fn spawn(mut cmd: Command, label: &str, dir: &Path) -> Result<Proc> {
    cmd.process_group(0);
    Proc::spawn(cmd, label, dir)
}

/// Polls `ready` every 50 ms until true; the error names `label` and its log.
fn wait_until(
    proc: &mut Proc,
    addr: SocketAddr,
    t: Duration,
    ready: impl Fn() -> bool,
) -> Result<()> {
    let until = Instant::now() + t;
    while !ready() {
        if let Some(status) = proc.try_wait()? {
            return Err(proc.exited_early(status));
        }
        if Instant::now() >= until {
            return Err(Error::NotListening {
                program: proc.program().into(),
                addr: format!("http://{addr} ({})", proc.stderr_tail(400)),
                after: t,
            });
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

// === GateNode ===

/// One `sip-gate` node of the site.
#[derive(Debug)]
pub struct GateNode {
    /// `gate-0`, ...
    pub name: String,
    /// Its admin address.
    pub admin: SocketAddr,
    program: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    proc: Option<Proc>,
    runs: u32,
    deadline_s: u32,
}

impl GateNode {
    pub(crate) fn new(
        bins: &BinDir,
        name: &str,
        config: &Path,
        admin: SocketAddr,
        deadline_s: u32,
    ) -> Result<Self> {
        Ok(GateNode {
            name: name.into(),
            admin,
            program: bins.program("sip-gate")?,
            config: config.to_path_buf(),
            dir: config.parent().map(Path::to_path_buf).unwrap_or_default(),
            proc: None,
            runs: 0,
            deadline_s,
        })
    }

    /// Starts the node and waits until its `/readyz` says it serves.
    pub fn start(&mut self) -> Result<()> {
        let mut cmd = Command::new(&self.program);
        cmd.arg("--config")
            .arg(&self.config)
            .arg("--admin")
            .arg(self.admin.to_string())
            .arg("--node")
            .arg(&self.name)
            .arg("--drain-deadline-s")
            .arg(self.deadline_s.to_string())
            .arg("--work-snapshot")
            .arg(self.dir.join(format!("{}.work.json", self.name)));
        let label = format!("{}.run{}", self.name, self.runs);
        self.runs += 1;
        let mut proc = spawn(cmd, &label, &self.dir)?;
        let admin = self.admin;
        wait_until(&mut proc, admin, Duration::from_secs(15), || {
            super::http::get(admin, "/readyz").is_some_and(|(code, _)| code == 200)
        })?;
        self.proc = Some(proc);
        Ok(())
    }

    /// SIGTERM: the node stops gracefully (R-GW-1) and exits by itself.
    pub fn sigterm(&self) {
        if let Some(p) = &self.proc {
            p.signal("TERM");
        }
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        self.proc
            .as_mut()
            .is_some_and(|p| matches!(p.try_wait(), Ok(None)))
    }

    /// One look at a node stopping (R-GW-1): whether it still runs and,
    /// if it does, whether its `/readyz` answered anything but 200.
    pub fn poll_stop(&mut self) -> StopPoll {
        if !self.running() {
            return StopPoll::Exited;
        }
        match super::http::get(self.admin, "/readyz") {
            Some((200, _)) => StopPoll::Ready,
            Some(_) => StopPoll::NotReady,
            None if self.running() => StopPoll::Silent,
            None => StopPoll::Exited,
        }
    }

    /// SIGTERM, then waits up to `t` for the node to exit by itself
    /// (killing it after that) and starts it again. What the stop looked
    /// like is returned, so a verdict can judge it (R-GW-1, R-GW-2).
    pub fn restart(&mut self, t: Duration) -> Result<StopSeen> {
        let t0 = Instant::now();
        self.sigterm();
        let mut seen = StopSeen::default();
        while t0.elapsed() < t {
            match self.poll_stop() {
                StopPoll::NotReady => {
                    seen.not_ready.get_or_insert(t0.elapsed().as_secs_f64());
                }
                StopPoll::Exited => {
                    seen.exited = Some(t0.elapsed().as_secs_f64());
                    break;
                }
                StopPoll::Ready => seen.ready = Some(t0.elapsed().as_secs_f64()),
                StopPoll::Silent => {}
            }
            thread::sleep(Duration::from_millis(20));
        }
        if let Some(mut p) = self.proc.take() {
            p.stop(Duration::ZERO);
        }
        self.start()?;
        seen.back = Some(t0.elapsed().as_secs_f64());
        Ok(seen)
    }

    /// Seconds it serves its transactions after a SIGTERM (R-GW-1).
    pub fn deadline_s(&self) -> u32 {
        self.deadline_s
    }

    /// Stops the node (SIGTERM, then SIGKILL after `grace`).
    pub fn stop(&mut self, grace: Duration) {
        if let Some(mut p) = self.proc.take() {
            p.stop(grace);
        }
    }
}

/// A look at a stopping gate node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopPoll {
    /// Its `/readyz` still says 200.
    Ready,
    /// Its `/readyz` answers, not 200: withdrawn from balancing (R-GW-1).
    NotReady,
    /// It runs but its admin port does not answer.
    Silent,
    /// The process has exited.
    Exited,
}

/// A gate's stop as seen from outside, in seconds after its SIGTERM.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StopSeen {
    /// First `/readyz` that was not 200 while it ran.
    pub not_ready: Option<f64>,
    /// Last `/readyz` that still said 200.
    pub ready: Option<f64>,
    /// It exited by itself.
    pub exited: Option<f64>,
    /// It served again (a restart).
    pub back: Option<f64>,
}

// === MediaNode ===

/// media-ctl in front of the site's rtpengines.
#[derive(Debug)]
pub struct MediaNode {
    /// Its admin address (`/v1/status`).
    pub admin: SocketAddr,
    proc: Proc,
}

impl MediaNode {
    pub(crate) fn start(bins: &BinDir, config: &Path, admin: SocketAddr) -> Result<Self> {
        let dir = config.parent().unwrap_or(Path::new("."));
        let mut cmd = Command::new(bins.program("media-ctl")?);
        cmd.arg("--config").arg(config);
        let mut proc = spawn(cmd, "media-ctl", dir)?;
        wait_until(&mut proc, admin, Duration::from_secs(15), || {
            super::http::get(admin, "/v1/status").is_some_and(|(code, _)| code == 200)
        })?;
        Ok(MediaNode { admin, proc })
    }

    /// Stops it (SIGTERM, then SIGKILL after `grace`).
    pub fn stop(mut self, grace: Duration) {
        self.proc.stop(grace);
    }
}

// === Active-Passive: the planner and the agents ===

/// `ringsync serve` (the handover planner, on `admin.bind`) and one
/// `ringsync agent` per group member standing in for the service; returns
/// once the planner answers.
pub(crate) fn start_ap(bins: &BinDir, site: &Path, l: &super::Layout) -> Result<Vec<Proc>> {
    let dir = site.parent().unwrap_or(Path::new("."));
    let program = bins.program("ringsync")?;
    let mut cmd = Command::new(&program);
    cmd.arg("--config").arg(site).arg("serve");
    let mut serve = spawn(cmd, "ringsync-serve", dir)?;
    let addr = l.serve_addr();
    wait_until(&mut serve, addr, Duration::from_secs(15), || {
        super::http::get(addr, "/healthz").is_some()
    })?;
    let mut out = vec![serve];
    for (group, members) in l.ap_groups() {
        for (member, _) in members {
            let mut cmd = Command::new(&program);
            cmd.arg("--config")
                .arg(site)
                .args(["agent", "--group", &group, "--member", &member]);
            out.push(spawn(cmd, &format!("agent-{member}"), dir)?);
        }
    }
    Ok(out)
}

// === the ringsync CLI ===

/// Runs `ringsync --config SITE --json ARGS`; its JSON output, or an error
/// with what it wrote on stderr.
pub fn ringsync(bins: &BinDir, site: &Path, args: &[&str]) -> Result<serde_json::Value> {
    let out = Command::new(bins.program("ringsync")?)
        .arg("--config")
        .arg(site)
        .arg("--json")
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            program: "ringsync".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("ringsync {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    serde_json::from_slice(&out.stdout).map_err(|e| Error::Command {
        command: format!("ringsync {}", args.join(" ")),
        message: format!("output is not JSON: {e}"),
    })
}
