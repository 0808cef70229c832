//! SIPp as a real peer: a builder for the command line, a handle that
//! waits for the run and parses SIPp's final statistics.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    fs,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use tempfile::TempDir;

use crate::{
    free_port,
    net::{is_listening, Transport},
    process::{self, Proc},
    scenarios_dir, Error, Result,
};

/// Which scenario SIPp plays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// One of SIPp's embedded scenarios (`-sn uac`, `-sn uas`, ...).
    BuiltIn(String),
    /// An XML scenario file (`-sf path`).
    File(PathBuf),
}

impl Scenario {
    /// An embedded scenario: `"uac"`, `"uas"`, `"regexp"`, ...
    pub fn builtin(name: impl Into<String>) -> Self {
        Scenario::BuiltIn(name.into())
    }

    /// A scenario file anywhere.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Scenario::File(path.into())
    }

    /// A scenario of this repository: `repo("uac_call")` is
    /// `sipp-scenarios/uac_call.xml`.
    pub fn repo(name: &str) -> Self {
        Scenario::File(scenarios_dir().join(format!("{name}.xml")))
    }
}

/// Builder for one SIPp process.
///
/// Without [`remote`](Sipp::remote) SIPp runs as a server (UAS) and
/// [`spawn`](Sipp::spawn) returns once it is bound; with it, SIPp is a client
/// and starts sending at once. Every run has a global timeout
/// ([`timeout`](Sipp::timeout), 60 s by default), so it always ends by itself.
#[derive(Clone, Debug)]
pub struct Sipp {
    program: PathBuf,
    scenario: Scenario,
    local_ip: IpAddr,
    local_port: Option<u16>,
    remote: Option<SocketAddr>,
    transport: Transport,
    service: Option<String>,
    calls: Option<u64>,
    rate: Option<f64>,
    rate_period: Option<Duration>,
    call_limit: Option<u64>,
    duration: Option<Duration>,
    timeout: Duration,
    ready_timeout: Duration,
    control: bool,
    nice: Option<u8>,
    args: Vec<OsString>,
}

impl Sipp {
    /// A SIPp playing `scenario` on 127.0.0.1 with a free port, UDP.
    pub fn new(scenario: Scenario) -> Self {
        Self {
            program: PathBuf::from("sipp"),
            scenario,
            local_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            local_port: None,
            remote: None,
            transport: Transport::Udp,
            service: None,
            calls: None,
            rate: None,
            rate_period: None,
            call_limit: None,
            duration: None,
            timeout: Duration::from_secs(60),
            ready_timeout: Duration::from_secs(5),
            control: false,
            nice: None,
            args: Vec::new(),
        }
    }

    /// The SIPp binary (default: `sipp` from `PATH`).
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = path.into();
        self
    }

    /// Local address (`-i ip -p port -bind_local`): give each peer its own
    /// `127.0.0.x`.
    pub fn local(mut self, ip: IpAddr, port: u16) -> Self {
        self.local_ip = ip;
        self.local_port = Some(port);
        self
    }

    /// Local address with a free port picked at spawn.
    pub fn local_ip(mut self, ip: IpAddr) -> Self {
        self.local_ip = ip;
        self.local_port = None;
        self
    }

    /// The peer to send to; makes this SIPp a client.
    pub fn remote(mut self, addr: SocketAddr) -> Self {
        self.remote = Some(addr);
        self
    }

    /// Transport (`-t u1` or `-t t1`). Both sides of a pair must agree.
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// Request-URI user (`-s`).
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }

    /// Stop after this many calls (`-m`); a server exits after handling them.
    pub fn calls(mut self, n: u64) -> Self {
        self.calls = Some(n);
        self
    }

    /// Calls per rate period (`-r`; the period is 1 s unless
    /// [`rate_period`](Sipp::rate_period) is set).
    pub fn rate(mut self, calls_per_period: u32) -> Self {
        self.rate = Some(f64::from(calls_per_period));
        self
    }

    /// Rate period (`-rp`, milliseconds).
    pub fn rate_period(mut self, period: Duration) -> Self {
        self.rate_period = Some(period);
        self
    }

    /// Maximum simultaneous calls (`-l`).
    pub fn call_limit(mut self, n: u64) -> Self {
        self.call_limit = Some(n);
        self
    }

    /// Length of the scenario's `<pause/>` (`-d`, e.g. call hold time).
    pub fn duration(mut self, d: Duration) -> Self {
        self.duration = Some(d);
        self
    }

    /// Global timeout (`-timeout`, whole seconds, rounded up): SIPp quits
    /// after it whatever the state.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// How long [`spawn`](Sipp::spawn) waits for a server to be bound.
    pub fn ready_timeout(mut self, t: Duration) -> Self {
        self.ready_timeout = t;
        self
    }

    /// Opens SIPp's UDP control port on its local IP (`-cp`, `-ci`), so
    /// [`SippHandle::finish_calls`] can tell it to wind down.
    pub fn control(mut self) -> Self {
        self.control = true;
        self
    }

    /// Runs SIPp at a lower CPU priority (`nice -n N`, 1..=19): a load
    /// generator that shares the cores with what it measures takes what they
    /// leave, as one on another machine would.
    pub fn nice(mut self, n: u8) -> Self {
        self.nice = Some(n.clamp(1, 19));
        self
    }

    /// Extra command-line arguments, appended as given.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Starts SIPp. For a server, returns once its socket is bound.
    pub fn spawn(self) -> Result<SippHandle> {
        let dir = tempfile::Builder::new().prefix("testbed-sipp-").tempdir()?;
        let port = match self.local_port {
            Some(p) => p,
            None => free_port(self.local_ip)?,
        };
        let local = SocketAddr::new(self.local_ip, port);
        let control = if self.control {
            let mut c = free_port(self.local_ip)?;
            while c == port {
                c = free_port(self.local_ip)?;
            }
            Some(SocketAddr::new(self.local_ip, c))
        } else {
            None
        };
        let paths = Paths::new(dir.path());
        let mut cmd = self.command(local, &paths);
        if let Some(c) = control {
            cmd.arg("-cp")
                .arg(c.port().to_string())
                .arg("-ci")
                .arg(c.ip().to_string());
        }
        let mut proc = Proc::spawn(cmd, "sipp", dir.path())?;
        if self.remote.is_none() {
            wait_ready(&mut proc, local, self.transport, self.ready_timeout)?;
        }
        Ok(SippHandle {
            proc,
            local,
            transport: self.transport,
            control,
            paths,
            _dir: dir,
        })
    }

    fn command(&self, local: SocketAddr, paths: &Paths) -> Command {
        // `nice` execs SIPp in its place: the child's pid stays SIPp's.
        let mut cmd = match self.nice {
            Some(n) => {
                let mut c = Command::new("nice");
                c.arg("-n").arg(n.to_string()).arg(&self.program);
                c
            }
            None => Command::new(&self.program),
        };
        if let Some(remote) = self.remote {
            cmd.arg(remote.to_string());
        }
        match &self.scenario {
            Scenario::BuiltIn(name) => cmd.arg("-sn").arg(name),
            Scenario::File(path) => cmd.arg("-sf").arg(path),
        };
        cmd.arg("-i")
            .arg(local.ip().to_string())
            .arg("-p")
            .arg(local.port().to_string())
            .arg("-bind_local")
            .arg("-t")
            .arg(self.transport.sipp_mode());
        if let Some(s) = &self.service {
            cmd.arg("-s").arg(s);
        }
        if let Some(m) = self.calls {
            cmd.arg("-m").arg(m.to_string());
        }
        if let Some(r) = self.rate {
            cmd.arg("-r").arg(r.to_string());
        }
        if let Some(rp) = self.rate_period {
            cmd.arg("-rp").arg(rp.as_millis().max(1).to_string());
        }
        if let Some(l) = self.call_limit {
            cmd.arg("-l").arg(l.to_string());
        }
        if let Some(d) = self.duration {
            cmd.arg("-d").arg(d.as_millis().to_string());
        }
        // SIPp 3.6 calls its global timeout -timeout (later releases add
        // -timeout_global); it ends the run and the final stats are written.
        let secs = self.timeout.as_millis().div_ceil(1000).max(1);
        cmd.arg("-timeout").arg(format!("{secs}s"));
        cmd.arg("-nostdin")
            .arg("-trace_stat")
            .arg("-stf")
            .arg(&paths.stats)
            .arg("-fd")
            .arg("1")
            .arg("-trace_err")
            .arg("-error_file")
            .arg(&paths.errors)
            .arg("-trace_screen")
            .arg("-screen_file")
            .arg(&paths.screen);
        cmd.args(&self.args);
        cmd
    }
}

fn wait_ready(proc: &mut Proc, local: SocketAddr, transport: Transport, t: Duration) -> Result<()> {
    let deadline = Instant::now() + t;
    loop {
        if is_listening(local, transport) {
            return Ok(());
        }
        if let Some(status) = proc.try_wait()? {
            return Err(proc.exited_early(status));
        }
        if Instant::now() >= deadline {
            return Err(Error::NotListening {
                program: proc.program().to_string(),
                addr: format!("{transport}:{local}"),
                after: t,
            });
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Debug)]
struct Paths {
    stats: PathBuf,
    errors: PathBuf,
    screen: PathBuf,
}

impl Paths {
    fn new(dir: &Path) -> Self {
        Self {
            stats: dir.join("stats.csv"),
            errors: dir.join("errors.log"),
            screen: dir.join("screen.log"),
        }
    }
}

// === impl SippHandle ===

/// A running SIPp. Dropping it kills the process.
#[derive(Debug)]
pub struct SippHandle {
    proc: Proc,
    local: SocketAddr,
    transport: Transport,
    control: Option<SocketAddr>,
    paths: Paths,
    _dir: TempDir,
}

impl SippHandle {
    /// The address SIPp is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The transport it uses.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Tells SIPp to start no new call and to exit once the calls in
    /// progress have ended (its `q` command, on the control port of a SIPp
    /// built with [`Sipp::control`]). The run then ends by itself; in the
    /// report of [`wait`](SippHandle::wait), every call created has either
    /// succeeded or failed.
    pub fn finish_calls(&self) -> Result<()> {
        let to = self
            .control
            .ok_or(Error::NoControlPort { local: self.local })?;
        let sock = std::net::UdpSocket::bind((to.ip(), 0))?;
        sock.send_to(b"q", to)?;
        Ok(())
    }

    /// Process id (for [`ProcStats`](crate::ProcStats)).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Waits for SIPp to exit by itself, then reads its report. On timeout
    /// SIPp is killed and [`Error::Timeout`] returned.
    pub fn wait(mut self, timeout: Duration) -> Result<SippReport> {
        match self.proc.wait_timeout(timeout)? {
            Some(status) => self.report(status.code()),
            None => {
                self.proc.stop(Duration::from_millis(200));
                Err(Error::Timeout {
                    program: "sipp".into(),
                    after: timeout,
                })
            }
        }
    }

    /// Asks SIPp to quit now (SIGUSR1: final statistics written) and reads
    /// its report; for a server run without [`Sipp::calls`]. Calls still in
    /// progress (including a scenario's final `timewait`) are abandoned and
    /// counted neither successful nor failed; [`SippReport::created`]
    /// counts them.
    pub fn stop(mut self) -> Result<SippReport> {
        if self.proc.try_wait()?.is_none() {
            self.proc.signal("USR1");
        }
        match self.proc.wait_timeout(Duration::from_secs(5))? {
            Some(status) => self.report(status.code()),
            None => {
                let status = self.proc.stop(Duration::from_millis(200));
                self.report(status.and_then(|s| s.code()))
            }
        }
    }

    fn report(&self, exit_code: Option<i32>) -> Result<SippReport> {
        let mut report = parse_stats(&self.paths.stats)?;
        report.exit_code = exit_code;
        report.errors = process::tail(&self.paths.errors, 4000);
        if report.errors.is_empty() {
            report.errors = self.proc.stderr_tail(2000);
        }
        Ok(report)
    }
}

// === SippReport ===

/// SIPp's cumulative counters at the end of a run (last line of the
/// `-trace_stat` CSV) and its exit code.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SippReport {
    /// Calls created (`TotalCallCreated`).
    pub created: u64,
    /// Calls that ran the whole scenario (`SuccessfulCall(C)`).
    pub successful: u64,
    /// Calls that did not (`FailedCall(C)`).
    pub failed: u64,
    /// Non-zero `Failed*(C)` columns by reason, e.g.
    /// `"UnexpectedMessage" => 3`, `"MaxUDPRetrans" => 1`.
    pub failures: BTreeMap<String, u64>,
    /// UDP retransmissions SIPp sent (`Retransmissions(C)`).
    pub retransmissions: u64,
    /// Messages that matched no call (`OutOfCallMsgs(C)`).
    pub out_of_call: u64,
    /// Messages for calls already ended (`DeadCallMsgs(C)`).
    pub dead_call: u64,
    /// SIPp's exit code: 0 all calls succeeded, 1 at least one failed,
    /// 97 stopped by a signal or internal command, 99 ended with no call,
    /// 255/254 fatal or bind error; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// End of SIPp's error log (unexpected messages ...) or stderr.
    pub errors: String,
}

impl SippReport {
    /// Every call succeeded and SIPp said so (exit code 0).
    pub fn all_ok(&self) -> bool {
        self.failed == 0 && self.exit_code == Some(0)
    }
}

fn parse_stats(path: &Path) -> Result<SippReport> {
    let bad = |reason: &str| Error::Stats {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let text = fs::read_to_string(path).map_err(|source| Error::File {
        path: path.to_path_buf(),
        source,
    })?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().ok_or_else(|| bad("empty"))?;
    let last = lines.next_back().ok_or_else(|| bad("no data line"))?;
    let header: Vec<&str> = header.split(';').collect();
    let last: Vec<&str> = last.split(';').collect();
    let value = |name: &str| -> Result<u64> {
        let i = header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| bad(&format!("no column {name}")))?;
        last.get(i)
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| bad(&format!("bad value for {name}")))
    };
    let mut failures = BTreeMap::new();
    for (i, h) in header.iter().enumerate() {
        if let Some(reason) = h.strip_prefix("Failed").and_then(|r| r.strip_suffix("(C)")) {
            if reason == "Call" {
                continue;
            }
            let n: u64 = last.get(i).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
            if n > 0 {
                failures.insert(reason.to_string(), n);
            }
        }
    }
    Ok(SippReport {
        created: value("TotalCallCreated")?,
        successful: value("SuccessfulCall(C)")?,
        failed: value("FailedCall(C)")?,
        failures,
        retransmissions: value("Retransmissions(C)")?,
        out_of_call: value("OutOfCallMsgs(C)")?,
        dead_call: value("DeadCallMsgs(C)")?,
        exit_code: None,
        errors: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_last_line_of_a_stats_csv() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        fs::write(
            &path,
            "TotalCallCreated;SuccessfulCall(C);FailedCall(C);FailedMaxUDPRetrans(C);\
             FailedUnexpectedMessage(C);Retransmissions(C);OutOfCallMsgs(C);DeadCallMsgs(C);\n\
             0;0;0;0;0;0;0;0;\n\
             10;7;3;1;2;5;0;4;\n",
        )
        .unwrap();
        let r = parse_stats(&path).unwrap();
        assert_eq!((r.created, r.successful, r.failed), (10, 7, 3));
        assert_eq!(r.retransmissions, 5);
        assert_eq!(r.dead_call, 4);
        assert_eq!(r.failures.get("MaxUDPRetrans"), Some(&1));
        assert_eq!(r.failures.get("UnexpectedMessage"), Some(&2));
        assert!(!r.failures.contains_key("Call"));
    }

    #[test]
    fn a_header_only_csv_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        fs::write(&path, "TotalCallCreated;\n").unwrap();
        assert!(matches!(parse_stats(&path), Err(Error::Stats { .. })));
    }

    #[test]
    fn command_line_has_a_global_timeout_and_stats() {
        let sipp = Sipp::new(Scenario::builtin("uac"))
            .remote("127.0.0.2:5060".parse().unwrap())
            .calls(3)
            .rate(2)
            .timeout(Duration::from_millis(1500));
        let paths = Paths::new(Path::new("/tmp/x"));
        let cmd = sipp.command("127.0.0.1:5061".parse().unwrap(), &paths);
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        assert!(joined.starts_with("127.0.0.2:5060 -sn uac -i 127.0.0.1 -p 5061"));
        assert!(joined.contains("-timeout 2s"));
        assert!(joined.contains("-m 3 -r 2"));
        assert!(joined.contains("-stf /tmp/x/stats.csv"));
    }
}
