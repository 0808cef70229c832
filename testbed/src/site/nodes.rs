//! The project's own binaries as processes of a site: gate nodes
//! (`sip-gate`), media-ctl, `ringsync serve` and the agents, all started by
//! [`crate::bins::Node`]. Each runs in its own process group (a Ctrl-C at
//! the terminal reaches testbed only, which then stops everything in order)
//! with its log in the run directory.

use std::net::SocketAddr;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::bins::Node;
pub use crate::bins::{ringsync, BinDir};
use crate::Result;

// === GateNode ===

/// One `sip-gate` node of the site.
#[derive(Debug)]
pub struct GateNode {
    /// `gate-0`, ...
    pub name: String,
    /// Its admin address.
    pub admin: SocketAddr,
    builder: crate::bins::Builder,
    node: Option<Node>,
    deadline_s: u32,
    bins: BinDir,
    config: std::path::PathBuf,
    /// The run that took over by `sip-gate upgrade` (R-GW-3): no child of
    /// ours, known by its pid.
    adopted: Option<u32>,
}

impl GateNode {
    pub(crate) fn new(
        bins: &BinDir,
        name: &str,
        config: &Path,
        admin: SocketAddr,
        deadline_s: u32,
    ) -> Result<Self> {
        // Found (or built) now: a missing binary fails the site's start.
        bins.program("sip-gate")?;
        let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
        let builder = Node::gate(config)
            .bins(bins.clone())
            .admin(admin)
            .args(["--node", name, "--drain-deadline-s"])
            .arg(deadline_s.to_string())
            .arg("--work-snapshot")
            .arg(dir.join(format!("{name}.work.json")))
            .label(name)
            .own_group();
        Ok(GateNode {
            name: name.into(),
            admin,
            builder,
            node: None,
            deadline_s,
            bins: bins.clone(),
            config: config.to_path_buf(),
            adopted: None,
        })
    }

    /// Starts the node (again, after a stop: its logs are then
    /// `NAME.runN.*`) and waits until its `/readyz` says it serves.
    pub fn start(&mut self) -> Result<()> {
        self.kill_adopted();
        match &mut self.node {
            Some(n) => n.restart()?,
            None => self.node = Some(self.builder.clone().start()?),
        }
        self.node.as_mut().map_or(Ok(()), Node::wait_ready)
    }

    /// SIGTERM: the node stops gracefully (R-GW-1) and exits by itself.
    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Sends `signal` (`TERM`, `STOP`, `CONT`, ...) to the node's current
    /// run: the one an upgrade started, once there is one.
    pub fn signal(&self, signal: &str) {
        match (self.adopted, &self.node) {
            (Some(pid), _) => crate::process::signal_pid(pid, signal),
            (None, Some(n)) => n.signal(signal),
            (None, None) => {}
        }
    }

    /// Its current run's process id.
    pub fn pid(&self) -> Option<u32> {
        self.adopted
            .or_else(|| self.node.as_ref().and_then(Node::pid))
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        match self.adopted {
            Some(pid) => Path::new(&format!("/proc/{pid}")).exists(),
            None => self.node.as_mut().is_some_and(Node::running),
        }
    }

    /// SIGKILL, as a crash would, and a start again at once; returns once
    /// it serves (it reads back what work book it has).
    pub fn kill_and_start(&mut self) -> Result<()> {
        self.kill_adopted();
        if let Some(n) = &mut self.node {
            n.kill();
        }
        self.start()
    }

    /// `sip-gate upgrade` (R-GW-3): a new run of the binary takes the
    /// node's sockets and work; the old run exits by itself. Returns the
    /// new run's pid, which the node's later signals go to.
    pub fn upgrade(&mut self) -> Result<u32> {
        let out = std::process::Command::new(self.bins.program("sip-gate")?)
            .args(["upgrade", "--config"])
            .arg(&self.config)
            .args(["--admin", &self.admin.to_string()])
            .output()
            .map_err(|source| crate::Error::Spawn {
                program: "sip-gate upgrade".into(),
                source,
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let pid = stdout
            .split("pid ")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .and_then(|s| s.parse().ok());
        match pid {
            Some(pid) if out.status.success() => {
                self.kill_adopted();
                self.adopted = Some(pid);
                Ok(pid)
            }
            _ => Err(crate::Error::Command {
                command: "sip-gate upgrade".into(),
                message: format!("{stdout} {}", String::from_utf8_lossy(&out.stderr)),
            }),
        }
    }

    /// The adopted run (if any) killed and forgotten, once it is dead: it
    /// is no child of ours to wait for, and SIGKILL takes a moment, during
    /// which its sockets are still bound (a start at once then found the
    /// admin address in use, once in an hour of chaos). Up to 5 s.
    fn kill_adopted(&mut self) {
        if let Some(pid) = self.adopted.take() {
            crate::process::signal_pid(pid, "CONT");
            crate::process::signal_pid(pid, "KILL");
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && alive(pid) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
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
        if let Some(n) = &mut self.node {
            n.stop(Duration::ZERO);
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
        if let Some(pid) = self.adopted {
            crate::process::signal_pid(pid, "CONT");
            crate::process::signal_pid(pid, "TERM");
            let t0 = Instant::now();
            while self.running() && t0.elapsed() < grace {
                thread::sleep(Duration::from_millis(20));
            }
            self.kill_adopted();
        }
        if let Some(n) = &mut self.node {
            n.stop(grace);
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
    node: Node,
}

impl MediaNode {
    pub(crate) fn start(bins: &BinDir, config: &Path, admin: SocketAddr) -> Result<Self> {
        let mut node = Node::media_ctl(config)
            .bins(bins.clone())
            .admin(admin)
            .own_group()
            .start()?;
        node.wait_up()?;
        Ok(MediaNode { admin, node })
    }

    /// Stops it (SIGTERM, then SIGKILL after `grace`).
    pub fn stop(mut self, grace: Duration) {
        self.node.stop(grace);
    }

    /// SIGKILL, as a crash would, and a start again; returns once its
    /// admin endpoint answers.
    pub fn kill_and_start(&mut self) -> Result<()> {
        self.node.restart()?;
        self.node.wait_up()
    }
}

// === Active-Passive: the planner and the agents ===

/// `ringsync serve` (the handover planner) and the agents of the groups'
/// members.
#[derive(Debug)]
pub(crate) struct ApNodes {
    serve: Node,
    /// Each member's agent, by member.
    agents: Vec<(String, Node)>,
}

impl ApNodes {
    /// Stops the agents, then the planner (SIGTERM, SIGKILL after `grace`).
    pub(crate) fn stop(&mut self, grace: Duration) {
        for (_, a) in &mut self.agents {
            a.stop(grace);
        }
        self.serve.stop(grace);
    }

    /// SIGKILL to `ringsync serve` (the planner) and a start again;
    /// returns once it answers.
    pub(crate) fn kill_and_start_serve(&mut self) -> Result<()> {
        self.serve.restart()?;
        self.serve.wait_up()
    }

    /// SIGKILL to `member`'s agent and a start again (its log goes on in
    /// `agent-<member>.run<n>.stderr`); false for no such member.
    pub(crate) fn kill_and_start_agent(&mut self, member: &str) -> Result<bool> {
        match self.agents.iter_mut().find(|(m, _)| m == member) {
            Some((_, a)) => a.restart().map(|()| true),
            None => Ok(false),
        }
    }
}

/// `ringsync serve` (the handover planner, on `admin.bind`) and one
/// `ringsync agent` per group member standing in for the service; returns
/// once the planner answers.
pub(crate) fn start_ap(bins: &BinDir, site: &Path, l: &super::Layout) -> Result<ApNodes> {
    let mut serve = Node::serve(site)
        .bins(bins.clone())
        .label("ringsync-serve")
        .own_group()
        .start()?;
    serve.wait_up()?;
    let mut agents = Vec::new();
    for (group, members) in l.ap_groups() {
        for (member, _) in members {
            let agent = Node::agent(site)
                .bins(bins.clone())
                .args(["--group", &group, "--member", &member])
                .label(format!("agent-{member}"))
                .own_group()
                .start()?;
            agents.push((member, agent));
        }
    }
    Ok(ApNodes { serve, agents })
}

/// Whether `pid` runs: it exists and is no zombie (a dead process whose
/// parent has not reaped it has closed its sockets already).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        // `pid (comm) S ...`: the state follows the last ')'.
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn alive_is_true_for_a_running_process_and_false_for_a_reaped_or_dead_one() {
        assert!(super::alive(std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(super::alive(pid));
        child.kill().unwrap();
        // Killed, not yet reaped: a zombie, no longer alive.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while super::alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!super::alive(pid));
        child.wait().unwrap();
        assert!(!super::alive(pid));
    }
}
