//! The project's own binaries as processes, one launcher for every crate's
//! tests, the benchmarks and the rehearsal: the `sip-gate` binary, the
//! `media-ctl` binary, `ringsync serve` and `ringsync agent`. Start one, wait until it is
//! ready, ask its admin endpoint ([`crate::http`]), scrape its `/metrics`
//! ([`crate::metrics::Metrics`]), stop it with SIGTERM under a deadline;
//! dropping the handle kills (SIGKILL) what is still running.
//!
//! ```no_run
//! # fn main() -> Result<(), testbed::Error> {
//! use std::time::Duration;
//! use testbed::bins::Node;
//!
//! let site = std::path::Path::new("site.toml");
//! let mut gate = Node::gate(site)
//!     .admin("127.0.9.1:9091".parse().unwrap())
//!     .args(["--node", "g1"])
//!     .start()?;
//! gate.wait_ready()?;
//! let forwarded = gate.metrics()?.count("sipgate_requests_total{method=\"INVITE\",outcome=\"forwarded\"}");
//! # let _ = forwarded;
//! let status = gate.stop(Duration::from_secs(10));
//! assert!(status.is_some_and(|s| s.success()));
//! # Ok(())
//! # }
//! ```
//!
//! The binaries are found, and built when another package's, by
//! [`BinDir::locate`]. Each process writes its stdout and stderr to
//! `LABEL.stdout` and `LABEL.stderr` in its log directory (the site file's,
//! unless [`Builder::log_dir`] says otherwise), so a chatty node never
//! blocks on a full pipe and a failing test can show what it said.

mod cli;
mod locate;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

pub use cli::{check, command, ringsync, run};
pub use locate::BinDir;

use crate::http::{self, Reply};
use crate::metrics::Metrics;
use crate::process::{tail, Proc};
use crate::{Error, Result};

/// How long a node may take to become ready before it is an error.
const READY: Duration = Duration::from_secs(15);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);

/// Which of the project's binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `sip-gate --config SITE [--admin ADDR]`.
    Gate,
    /// `media-ctl --config SITE [--admin ADDR]`.
    MediaCtl,
    /// `ringsync --config SITE serve [--bind ADDR]`.
    Serve,
    /// `ringsync --config SITE agent ARGS`: no admin endpoint.
    Agent,
}

impl Kind {
    fn program(self) -> &'static str {
        match self {
            Kind::Gate => "sip-gate",
            Kind::MediaCtl => "media-ctl",
            Kind::Serve | Kind::Agent => "ringsync",
        }
    }

    /// The subcommand after `--config SITE`, for `ringsync`.
    fn subcommand(self) -> Option<&'static str> {
        match self {
            Kind::Gate | Kind::MediaCtl => None,
            Kind::Serve => Some("serve"),
            Kind::Agent => Some("agent"),
        }
    }

    /// The name of its log files without [`Builder::label`].
    fn default_label(self) -> &'static str {
        match self {
            Kind::Agent => "ringsync-agent",
            k => k.program(),
        }
    }
}

/// What to start; made by [`Node::gate`], [`Node::media_ctl`],
/// [`Node::serve`] or [`Node::agent`].
#[derive(Debug, Clone)]
pub struct Builder {
    kind: Kind,
    site: PathBuf,
    admin: Option<SocketAddr>,
    args: Vec<OsString>,
    log_dir: Option<PathBuf>,
    label: Option<String>,
    bins: Option<BinDir>,
    own_group: bool,
    env: Vec<(OsString, OsString)>,
    wrapper: Vec<OsString>,
    program: Option<PathBuf>,
}

impl Builder {
    /// The admin address (`--admin` of the gate and media-ctl, `--bind` of
    /// `ringsync serve`); without it, the site file's. A serve bound to
    /// port 0 is reached where it says it listens. `ringsync agent` has no
    /// admin endpoint: it is given no flag for one.
    pub fn admin(mut self, addr: SocketAddr) -> Self {
        self.admin = Some(addr);
        self
    }

    /// One more argument, after the ones the launcher gives.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// More arguments, after the ones the launcher gives.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// An environment variable for it (`RUST_LOG`, ...).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Where `LABEL.stdout` and `LABEL.stderr` go (default: the site
    /// file's directory).
    pub fn log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.log_dir = Some(dir.into());
        self
    }

    /// The name of its log files (default: the program's name).
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Where the binaries are (default [`BinDir::locate`]).
    pub fn bins(mut self, bins: BinDir) -> Self {
        self.bins = Some(bins);
        self
    }

    /// A program (and its arguments) that runs the binary, given after
    /// them with its own arguments: `["prlimit", "--nofile=96:96", "--"]`
    /// starts it under a descriptor limit. The wrapper should exec the
    /// binary, so that signals and the exit status are the binary's.
    pub fn wrapper<I, S>(mut self, wrapper: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.wrapper = wrapper.into_iter().map(Into::into).collect();
        self
    }

    /// The binary to run, instead of the one [`Builder::bins`] holds (a
    /// benchmark's `--gate PATH`).
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = Some(path.into());
        self
    }

    /// Its own process group: a Ctrl-C at the terminal then reaches the
    /// program that started it only, which stops everything in order.
    pub fn own_group(mut self) -> Self {
        self.own_group = true;
        self
    }

    /// Starts it; returns at once for the gate and media-ctl (see
    /// [`Node::wait_ready`]), and once it says where it listens for
    /// `ringsync serve`.
    pub fn start(self) -> Result<Node> {
        let mut node = Node {
            proc: None,
            admin: self.admin,
            scheme: "http",
            runs: 0,
            label: String::new(),
            builder: self,
        };
        node.spawn()?;
        Ok(node)
    }
}

/// One of the project's binaries, running (or stopped, until started
/// again). Dropping it kills (SIGKILL) the process and its descendants.
#[derive(Debug)]
pub struct Node {
    builder: Builder,
    proc: Option<Proc>,
    admin: Option<SocketAddr>,
    scheme: &'static str,
    runs: u32,
    /// The current run's file label.
    label: String,
}

impl Node {
    /// `sip-gate --config SITE`.
    pub fn gate(site: impl AsRef<Path>) -> Builder {
        Self::builder(Kind::Gate, site.as_ref())
    }

    /// `media-ctl --config SITE`.
    pub fn media_ctl(site: impl AsRef<Path>) -> Builder {
        Self::builder(Kind::MediaCtl, site.as_ref())
    }

    /// `ringsync --config SITE serve`.
    pub fn serve(site: impl AsRef<Path>) -> Builder {
        Self::builder(Kind::Serve, site.as_ref())
    }

    /// `ringsync --config SITE agent`, followed by [`Builder::args`]
    /// (`--group G --member M`). It has no admin endpoint: wait on what it
    /// does (its log, its handover records, sd_notify).
    pub fn agent(site: impl AsRef<Path>) -> Builder {
        Self::builder(Kind::Agent, site.as_ref())
    }

    fn builder(kind: Kind, site: &Path) -> Builder {
        Builder {
            kind,
            site: site.to_path_buf(),
            admin: None,
            args: Vec::new(),
            log_dir: None,
            label: None,
            bins: None,
            own_group: false,
            env: Vec::new(),
            wrapper: Vec::new(),
            program: None,
        }
    }

    fn log_dir(&self) -> PathBuf {
        let b = &self.builder;
        b.log_dir.clone().unwrap_or_else(|| {
            b.site
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        })
    }

    /// This run's file label: `LABEL`, then `LABEL.run1`, ...
    fn run_label(&self) -> String {
        let base = (self.builder.label.as_deref())
            .unwrap_or(self.builder.kind.default_label())
            .to_owned();
        match self.runs {
            0 => base,
            n => format!("{base}.run{n}"),
        }
    }

    fn spawn(&mut self) -> Result<()> {
        let b = &self.builder;
        let program = match &b.program {
            Some(p) => p.clone(),
            None => (b.bins.clone().unwrap_or_else(BinDir::locate)).program(b.kind.program())?,
        };
        let mut cmd = match b.wrapper.split_first() {
            Some((wrapper, args)) => {
                let mut cmd = Command::new(wrapper);
                cmd.args(args).arg(program);
                cmd
            }
            None => Command::new(program),
        };
        cmd.arg("--config").arg(&b.site);
        cmd.args(b.kind.subcommand());
        let flag = match b.kind {
            Kind::Gate | Kind::MediaCtl => Some("--admin"),
            Kind::Serve => Some("--bind"),
            Kind::Agent => None,
        };
        if let (Some(flag), Some(a)) = (flag, b.admin) {
            cmd.arg(flag).arg(a.to_string());
        }
        cmd.args(&b.args).envs(b.env.iter().map(|(k, v)| (k, v)));
        if b.own_group {
            cmd.process_group(0);
        }
        let label = self.run_label();
        let proc = Proc::spawn(cmd, &label, &self.log_dir())?;
        self.runs += 1;
        self.proc = Some(proc);
        self.label = label.clone();
        if b.kind == Kind::Serve {
            self.read_serve_url(&label)?;
        }
        Ok(())
    }

    /// `ringsync serve` prints `... on http://ADDR` once bound: a wildcard
    /// or port-0 bind is reached there (a wildcard on 127.0.0.1).
    fn read_serve_url(&mut self, label: &str) -> Result<()> {
        let out = self.log_dir().join(format!("{label}.stdout"));
        let until = Instant::now() + READY;
        let url = loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(url) = text
                .lines()
                .next()
                .filter(|_| text.contains('\n'))
                .and_then(|l| l.split_whitespace().last())
                .filter(|u| u.contains("://"))
            {
                break url.to_owned();
            }
            self.check_alive(until, "to say where it listens")?;
            std::thread::sleep(POLL);
        };
        let (scheme, rest) = url.split_once("://").unwrap_or(("http", &url));
        let mut addr: SocketAddr = rest.parse().map_err(|_| Error::Command {
            command: "ringsync serve".into(),
            message: format!("printed `{url}`, not a URL with an address"),
        })?;
        if addr.ip().is_unspecified() {
            addr.set_ip([127, 0, 0, 1].into());
        }
        self.scheme = if scheme == "https" { "https" } else { "http" };
        self.admin = Some(addr);
        Ok(())
    }

    /// An error if the process has exited, or if `until` has passed.
    fn check_alive(&mut self, until: Instant, what: &str) -> Result<()> {
        let program = self.builder.kind.program();
        let Some(p) = self.proc.as_mut() else {
            return Err(Error::Command {
                command: program.into(),
                message: "not running".into(),
            });
        };
        if let Some(status) = p.try_wait()? {
            return Err(p.exited_early(status));
        }
        if Instant::now() >= until {
            return Err(Error::NotListening {
                program: program.into(),
                addr: format!(
                    "{} (waiting {what}; stderr: {})",
                    self.admin.map_or("?".into(), |a| a.to_string()),
                    p.stderr_tail(600)
                ),
                after: READY,
            });
        }
        Ok(())
    }

    /// Its admin address (for `ringsync serve`, where it said it listens).
    /// Without one given, the launcher does not know the gate's or
    /// media-ctl's: this panics then, naming the binary.
    pub fn admin(&self) -> SocketAddr {
        self.admin.unwrap_or_else(|| {
            panic!(
                "{}: started without .admin(ADDR), so its admin address is the site file's",
                self.builder.kind.program()
            )
        })
    }

    /// `http://ADDR` or `https://ADDR` (`ringsync serve` with TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.admin())
    }

    /// Its process id (of the current run).
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// Sends a signal (`TERM`, `INT`, `HUP`, `KILL`) to the process.
    pub fn signal(&self, signal: &str) {
        if let Some(p) = &self.proc {
            p.signal(signal);
        }
    }

    /// What this run wrote on stderr so far (its log).
    pub fn log(&self) -> String {
        let path = self.log_dir().join(format!("{}.stderr", self.label));
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// What this run wrote on stdout so far.
    pub fn stdout(&self) -> String {
        let path = self.log_dir().join(format!("{}.stdout", self.label));
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        self.proc
            .as_mut()
            .is_some_and(|p| matches!(p.try_wait(), Ok(None)))
    }

    /// Its exit status once it exits by itself, at most `timeout` from now;
    /// `None` while it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.proc.as_mut()?.wait_timeout(timeout).ok().flatten()
    }

    /// Waits until `GET /readyz` answers 200 (the gate serves; media-ctl has
    /// a media gateway for a new call; serve has its store). The error
    /// says whether it exited (with its stderr) or never became ready.
    pub fn wait_ready(&mut self) -> Result<()> {
        self.wait_answer("/readyz", "/readyz to answer 200", |r| r.status == 200)
    }

    /// Waits until its admin endpoint answers `GET /healthz` at all.
    pub fn wait_up(&mut self) -> Result<()> {
        self.wait_answer("/healthz", "/healthz to answer", |_| true)
    }

    fn wait_answer(&mut self, path: &str, what: &str, ok: impl Fn(&Reply) -> bool) -> Result<()> {
        if self.scheme == "https" {
            // No TLS client here: a serve with TLS is up once it said
            // where it listens.
            return Ok(());
        }
        let until = Instant::now() + READY;
        loop {
            let reply = Self::quick(self.admin(), path);
            if reply.is_some_and(|r| ok(&r)) {
                return Ok(());
            }
            self.check_alive(until, what)?;
            std::thread::sleep(POLL);
        }
    }

    /// A GET a poll can afford to repeat: short waits.
    fn quick(addr: SocketAddr, path: &str) -> Option<Reply> {
        http::Request::new("GET", addr, path)
            .timeouts(Duration::from_millis(300), Duration::from_secs(2))
            .send()
            .ok()
    }

    /// [`crate::wait_for`] `cond` on this node; the error ends with its log.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut cond: impl FnMut(&Node) -> Option<T>,
    ) -> Result<T> {
        crate::wait_for(what, timeout, || cond(self)).map_err(|e| Error::Command {
            command: self.builder.kind.program().into(),
            message: format!("{e}; its log ends: {}", self.log_tail(600)),
        })
    }

    fn log_tail(&self, max: usize) -> String {
        tail(&self.log_dir().join(format!("{}.stderr", self.label)), max)
    }

    /// `GET path` on its admin endpoint.
    pub fn get(&self, path: &str) -> Result<Reply> {
        http::get(self.admin(), path)
    }

    /// `GET path` parsed as JSON into `T`, on a 200 only.
    pub fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Option<T> {
        http::get_json(self.admin(), path)
    }

    /// `GET /readyz`: its status code and JSON body (`Null` when the body
    /// is not JSON).
    pub fn readyz(&self) -> Option<(u16, serde_json::Value)> {
        let r = self.get("/readyz").ok()?;
        Some((r.status, serde_json::from_str(&r.body).unwrap_or_default()))
    }

    /// One sample of `/metrics`.
    pub fn metrics(&self) -> Result<Metrics> {
        let r = self.get("/metrics")?;
        if r.status != 200 {
            return Err(Error::Http {
                request: format!("GET http://{}/metrics", self.admin()),
                reason: format!("status {}", r.status),
            });
        }
        Ok(Metrics::new(r.body))
    }

    /// One series of `/metrics` (name and labels as the exporter prints
    /// them), 0 when absent.
    pub fn metric(&self, series: &str) -> Result<f64> {
        Ok(self.metrics()?.count(series))
    }

    /// Its work report (`/v1/work`, R-ST-3) while it answers one.
    pub fn work(&self) -> Option<ringsync::work::WorkReport> {
        self.get_json(ringsync::work::WORK_PATH)
    }

    /// SIGTERM, up to `deadline` for it to exit by itself, then SIGKILL to
    /// it and its descendants; its exit status (`None` when it was not
    /// running). It may be started again.
    pub fn stop(&mut self, deadline: Duration) -> Option<ExitStatus> {
        self.proc.take().and_then(|mut p| p.stop(deadline))
    }

    /// SIGKILL to it and its descendants at once (no goodbye), and waits
    /// for it to be gone; its exit status.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.proc.take().and_then(|mut p| p.kill())
    }

    /// Starts it again with the same command (after [`Self::stop`] or
    /// [`Self::kill`]; a process still running is killed first). Its new
    /// logs are `LABEL.runN.*`.
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for Node {
    /// A test that ends, or fails, leaves nothing running; SIGKILL at once,
    /// as a graceful stop would only make every test's end slower.
    fn drop(&mut self) {
        self.kill();
    }
}
