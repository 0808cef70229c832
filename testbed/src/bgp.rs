//! BGP on loopback for the anycast tests (R-EX-2): BIRD as the router
//! ([`Bird`]) and ExaBGP as the speaker on the gate's node ([`ExaBgp`]),
//! each from its own config in a private temp dir, in the foreground, no
//! system service involved.
//!
//! Loopback addresses are host-scope, which BIRD refuses as a directly
//! connected BGP neighbor: the session is `multihop`, so routes learnt
//! show as `unreachable` (no IGP resolves the next hop) but are in the
//! table, which is what the tests read.

use std::{
    fs,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use tempfile::TempDir;

use crate::{process::Proc, Error, Result};

/// Builder for a BIRD 2 router that takes one passive eBGP session.
#[derive(Clone, Debug)]
pub struct Bird {
    addr: Ipv4Addr,
    port: u16,
    local_as: u32,
    neighbor: Ipv4Addr,
    neighbor_as: u32,
}

impl Bird {
    /// BIRD on `addr:port` (router id `addr`, AS 65000), waiting for a
    /// session from `neighbor` (AS 65001).
    pub fn new(addr: Ipv4Addr, port: u16, neighbor: Ipv4Addr) -> Self {
        Self {
            addr,
            port,
            local_as: 65000,
            neighbor,
            neighbor_as: 65001,
        }
    }

    /// The config file BIRD runs.
    pub fn config(&self) -> String {
        format!(
            "# written by testbed::Bird\n\
             router id {addr};\n\
             log stderr all;\n\
             protocol device {{}}\n\
             protocol bgp edge {{\n\
             \x20 local {addr} port {port} as {local_as};\n\
             \x20 neighbor {neighbor} as {neighbor_as};\n\
             \x20 passive on;\n\
             \x20 multihop;\n\
             \x20 strict bind;\n\
             \x20 ipv4 {{ import all; export none; }};\n\
             }}\n",
            addr = self.addr,
            port = self.port,
            local_as = self.local_as,
            neighbor = self.neighbor,
            neighbor_as = self.neighbor_as,
        )
    }

    /// Starts BIRD and returns once its control socket answers.
    pub fn start(self) -> Result<BirdHandle> {
        let dir = tempfile::Builder::new().prefix("testbed-bird-").tempdir()?;
        let conf = dir.path().join("bird.conf");
        write(&conf, &self.config())?;
        let sock = dir.path().join("bird.ctl");
        let mut cmd = Command::new("bird");
        cmd.arg("-f").arg("-c").arg(&conf).arg("-s").arg(&sock);
        let mut proc = Proc::spawn(cmd, "bird", dir.path()).map_err(not_installed("bird2"))?;
        let handle_sock = sock.clone();
        let deadline = Instant::now() + Duration::from_secs(10);
        while birdc(&handle_sock, &["show", "status"]).is_err() {
            if let Some(status) = proc.try_wait()? {
                return Err(proc.exited_early(status));
            }
            if Instant::now() >= deadline {
                return Err(Error::NotListening {
                    program: "bird".into(),
                    addr: sock.display().to_string(),
                    after: Duration::from_secs(10),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(BirdHandle {
            proc,
            sock,
            addr: SocketAddr::from((self.addr, self.port)),
            _dir: dir,
        })
    }
}

/// A running BIRD; dropping it stops it.
#[derive(Debug)]
pub struct BirdHandle {
    proc: Proc,
    sock: PathBuf,
    addr: SocketAddr,
    _dir: TempDir,
}

impl BirdHandle {
    /// Where it takes BGP sessions.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `birdc show route`: the routing table as BIRD prints it.
    pub fn routes(&self) -> Result<String> {
        birdc(&self.sock, &["show", "route"])
    }

    /// Whether the table holds `prefix` (as BIRD prints it: `a.b.c.d/len`).
    pub fn has_route(&self, prefix: &str) -> Result<bool> {
        let table = self.routes()?;
        Ok(table
            .lines()
            .any(|l| l.split_whitespace().next() == Some(prefix)))
    }

    /// Whether the BGP session is up (`Established`).
    pub fn established(&self) -> Result<bool> {
        Ok(birdc(&self.sock, &["show", "protocols", "edge"])?.contains("Established"))
    }

    /// The end of BIRD's log, for failure messages.
    pub fn log_tail(&self, max: usize) -> String {
        self.proc.stderr_tail(max)
    }
}

/// One `birdc` command on the control socket; its output, or an error
/// when BIRD does not answer.
fn birdc(sock: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("birdc")
        .arg("-s")
        .arg(sock)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            program: "birdc".into(),
            source,
        })?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.contains("Unable to connect") {
        return Err(Error::ExitedEarly {
            program: "birdc".into(),
            status: out.status.to_string(),
            stderr: format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(text)
}

// === ExaBGP ===

/// Builder for ExaBGP 4.2 with one neighbor and one API `process`.
#[derive(Clone, Debug)]
pub struct ExaBgp {
    local: Ipv4Addr,
    peer: SocketAddr,
    local_as: u32,
    peer_as: u32,
    process: Vec<String>,
}

impl ExaBgp {
    /// ExaBGP on `local` (router id too, AS 65001) connecting to the
    /// router at `peer` (AS 65000), running `process` (program and
    /// arguments, no spaces inside one) for its routes.
    pub fn new(local: Ipv4Addr, peer: SocketAddr, process: Vec<String>) -> Self {
        Self {
            local,
            peer,
            local_as: 65001,
            peer_as: 65000,
            process,
        }
    }

    /// The config file ExaBGP runs.
    pub fn config(&self) -> String {
        format!(
            "# written by testbed::ExaBgp\n\
             process announce {{\n\
             \x20 run {run};\n\
             \x20 encoder text;\n\
             }}\n\
             neighbor {peer} {{\n\
             \x20 router-id {local};\n\
             \x20 local-address {local};\n\
             \x20 local-as {local_as};\n\
             \x20 peer-as {peer_as};\n\
             \x20 connect {port};\n\
             \x20 family {{ ipv4 unicast; ipv6 unicast; }}\n\
             \x20 api {{ processes [ announce ]; }}\n\
             }}\n",
            run = self.process.join(" "),
            peer = self.peer.ip(),
            port = self.peer.port(),
            local = self.local,
            local_as = self.local_as,
            peer_as = self.peer_as,
        )
    }

    /// Starts ExaBGP in the foreground. It connects to the router by
    /// itself; [`BirdHandle::established`] says when the session is up.
    pub fn start(self) -> Result<ExaBgpHandle> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-exabgp-")
            .tempdir()?;
        let conf = dir.path().join("exabgp.conf");
        write(&conf, &self.config())?;
        let mut cmd = Command::new("exabgp");
        cmd.arg(&conf)
            .current_dir(dir.path())
            // Foreground, as the current user, no CLI pipes, no listening
            // socket, no acks on the API (the program only writes).
            .env("exabgp.daemon.daemonize", "false")
            .env("exabgp.daemon.drop", "false")
            .env("exabgp.daemon.pid", "")
            .env("exabgp.api.ack", "false")
            .env("exabgp.api.cli", "false")
            .env("exabgp.tcp.bind", "")
            .env("exabgp.log.destination", "stderr");
        let mut proc = Proc::spawn(cmd, "exabgp", dir.path()).map_err(not_installed("exabgp"))?;
        // A config it refuses ends it at once.
        thread::sleep(Duration::from_millis(200));
        if let Some(status) = proc.try_wait()? {
            return Err(proc.exited_early(status));
        }
        Ok(ExaBgpHandle { proc, _dir: dir })
    }
}

/// A running ExaBGP (and its process); dropping it stops both.
#[derive(Debug)]
pub struct ExaBgpHandle {
    proc: Proc,
    _dir: TempDir,
}

impl ExaBgpHandle {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The end of ExaBGP's log, which carries its process's stderr too.
    pub fn log_tail(&self, max: usize) -> String {
        self.proc.stderr_tail(max)
    }

    /// Stops ExaBGP and its process (SIGTERM, then SIGKILL to the tree).
    pub fn stop(mut self) {
        self.proc.stop(Duration::from_secs(3));
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(|source| Error::File {
        path: path.to_path_buf(),
        source,
    })
}

/// Turns "no such program" into the package to install.
fn not_installed(package: &'static str) -> impl Fn(Error) -> Error {
    move |e| match e {
        Error::Spawn { program, source } if source.kind() == std::io::ErrorKind::NotFound => {
            Error::NotInstalled {
                program,
                package: package.into(),
            }
        }
        e => e,
    }
}
