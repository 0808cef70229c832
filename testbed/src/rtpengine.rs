//! rtpengine as a real media gateway (Debian `rtpengine-daemon`): userspace
//! forwarding, no distro config, its own address, ng and CLI ports and
//! media port range, in the foreground with its log and pidfile in a
//! private temp dir. Ready means it answers the ng `ping` with `pong`.

use std::{
    io,
    net::{IpAddr, SocketAddr, UdpSocket},
    path::PathBuf,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use tempfile::TempDir;

use crate::{process::Proc, Error, ProcStats, Result};

/// The Debian package that ships the daemon.
pub const PACKAGE: &str = "rtpengine-daemon";

/// Builder for one rtpengine process.
#[derive(Clone, Debug)]
pub struct Rtpengine {
    program: PathBuf,
    ip: IpAddr,
    ng_port: u16,
    cli_port: u16,
    ports: (u16, u16),
    log_level: u8,
    args: Vec<String>,
    ready_timeout: Duration,
}

impl Rtpengine {
    /// rtpengine on `ip`: ng on port 22222, CLI on 9900, media ports in a
    /// range derived from the address's last byte (20000 + 1000 × (b % 40),
    /// 1000 ports), so instances on different addresses never share one.
    pub fn new(ip: IpAddr) -> Self {
        let last = match ip {
            IpAddr::V4(v4) => v4.octets()[3],
            IpAddr::V6(v6) => v6.octets()[15],
        };
        let base = 20_000 + 1_000 * u16::from(last % 40);
        Self {
            program: PathBuf::from("rtpengine"),
            ip,
            ng_port: 22222,
            cli_port: 9900,
            ports: (base, base + 999),
            log_level: 4,
            args: Vec::new(),
            ready_timeout: Duration::from_secs(10),
        }
    }

    /// The rtpengine binary (default: `rtpengine` from `PATH`).
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = path.into();
        self
    }

    /// The ng control port (UDP) on the instance's address.
    pub fn ng_port(mut self, port: u16) -> Self {
        self.ng_port = port;
        self
    }

    /// The CLI port on the instance's address.
    pub fn cli_port(mut self, port: u16) -> Self {
        self.cli_port = port;
        self
    }

    /// Media port range (`--port-min`, `--port-max`).
    pub fn ports(mut self, min: u16, max: u16) -> Self {
        self.ports = (min, max);
        self
    }

    /// Log level (`--log-level`, syslog numbers; default 4, warnings).
    pub fn log_level(mut self, level: u8) -> Self {
        self.log_level = level;
        self
    }

    /// Extra command-line argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How long [`start`](Rtpengine::start) waits for a `pong`.
    pub fn ready_timeout(mut self, t: Duration) -> Self {
        self.ready_timeout = t;
        self
    }

    /// The ng address the instance will listen on.
    pub fn ng_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.ng_port)
    }

    /// Starts rtpengine and returns once it answers `ping`.
    pub fn start(self) -> Result<RtpengineHandle> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-rtpengine-")
            .tempdir()?;
        let ip = self.ip;
        let mut cmd = Command::new(&self.program);
        cmd.arg("--table=-1")
            .arg("--config-file=none")
            .arg("--foreground")
            .arg("--log-stderr")
            .arg(format!("--log-level={}", self.log_level))
            .arg(format!("--interface={ip}"))
            .arg(format!("--listen-ng={}", self.ng_addr()))
            .arg(format!(
                "--listen-cli={}",
                SocketAddr::new(ip, self.cli_port)
            ))
            .arg(format!("--port-min={}", self.ports.0))
            .arg(format!("--port-max={}", self.ports.1))
            .arg(format!(
                "--pidfile={}",
                dir.path().join("rtpengine.pid").display()
            ))
            .args(&self.args);
        let mut proc = match Proc::spawn(cmd, "rtpengine", dir.path()) {
            Err(Error::Spawn { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotInstalled {
                    program: self.program.display().to_string(),
                    package: PACKAGE.into(),
                })
            }
            r => r?,
        };
        let deadline = Instant::now() + self.ready_timeout;
        loop {
            if let Some(status) = proc.try_wait()? {
                return Err(proc.exited_early(status));
            }
            if ping(self.ng_addr(), Duration::from_millis(100)) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(Error::NotListening {
                    program: "rtpengine".into(),
                    addr: format!("udp:{} (no pong)", self.ng_addr()),
                    after: self.ready_timeout,
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(RtpengineHandle {
            proc,
            ng: self.ng_addr(),
            ip,
            ports: self.ports,
            _dir: dir,
        })
    }
}

/// Sends one ng `ping` and waits for `pong`.
pub fn ping(ng: SocketAddr, timeout: Duration) -> bool {
    let bind: SocketAddr = if ng.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let Ok(sock) = UdpSocket::bind(bind) else {
        return false;
    };
    if sock.set_read_timeout(Some(timeout)).is_err()
        || sock.send_to(b"tb-ping d7:command4:pinge", ng).is_err()
    {
        return false;
    }
    let mut buf = [0u8; 256];
    matches!(sock.recv_from(&mut buf), Ok((n, from)) if from == ng && buf[..n].starts_with(b"tb-ping d6:result4:ponge"))
}

// === impl RtpengineHandle ===

/// A running rtpengine. Dropping it stops the process.
#[derive(Debug)]
pub struct RtpengineHandle {
    proc: Proc,
    ng: SocketAddr,
    ip: IpAddr,
    ports: (u16, u16),
    _dir: TempDir,
}

impl RtpengineHandle {
    /// Its ng control address.
    pub fn ng(&self) -> SocketAddr {
        self.ng
    }

    /// The address it writes into the SDP it returns (`c=` line).
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Its media port range.
    pub fn ports(&self) -> (u16, u16) {
        self.ports
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// CPU and memory of the process.
    pub fn stats(&self) -> Result<ProcStats> {
        ProcStats::sample(self.pid())
    }

    /// True while it answers `ping`.
    pub fn answers(&self) -> bool {
        ping(self.ng, Duration::from_millis(200))
    }

    /// The end of its log (stderr), for failure messages.
    pub fn log_tail(&self, max: usize) -> String {
        self.proc.stderr_tail(max)
    }

    /// SIGKILL, as a crash would: no goodbye, calls lost.
    pub fn kill(mut self) {
        self.proc.signal("KILL");
        let _ = self.proc.wait_timeout(Duration::from_secs(2));
        self.proc.stop(Duration::from_millis(100));
    }

    /// SIGTERM and wait (2 s); then SIGKILL.
    pub fn stop(mut self) {
        self.proc.stop(Duration::from_secs(2));
    }
}
