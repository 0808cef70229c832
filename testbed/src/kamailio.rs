//! Kamailio as a reference proxy: started in the foreground from a config
//! (by default `bench/kamailio/kamailio.cfg`) with its dispatcher pool
//! written per run, everything it writes kept in a private temp dir.

use std::{
    fmt::Write as _,
    fs,
    net::{Ipv4Addr, SocketAddr},
    path::PathBuf,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use tempfile::TempDir;

use crate::{
    bench_dir,
    net::{is_listening, Transport},
    process::Proc,
    Error, ProcStats, Result,
};

/// Builder for one Kamailio process tree.
#[derive(Clone, Debug)]
pub struct Kamailio {
    program: PathBuf,
    config: PathBuf,
    listen: SocketAddr,
    transports: Vec<Transport>,
    workers: u32,
    destinations: Vec<(SocketAddr, Transport)>,
    probing: bool,
    defines: Vec<String>,
    args: Vec<String>,
    ready_timeout: Duration,
}

impl Default for Kamailio {
    fn default() -> Self {
        Self::new()
    }
}

impl Kamailio {
    /// Kamailio with the repository's bench config, listening on
    /// 127.0.0.1:5060 over UDP and TCP with 2 workers and an empty pool.
    pub fn new() -> Self {
        Self {
            program: PathBuf::from("kamailio"),
            config: bench_dir().join("kamailio").join("kamailio.cfg"),
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 5060)),
            transports: vec![Transport::Udp, Transport::Tcp],
            workers: 2,
            destinations: Vec::new(),
            probing: false,
            defines: Vec::new(),
            args: Vec::new(),
            ready_timeout: Duration::from_secs(10),
        }
    }

    /// The Kamailio binary (default: `kamailio` from `PATH`).
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = path.into();
        self
    }

    /// Another config file. It must read its pool from `DISPATCHER_LIST`
    /// if it uses [`destination`](Kamailio::destination).
    pub fn config(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = path.into();
        self
    }

    /// Where to listen (`-l proto:ip:port` for each transport).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Transports to listen on (default UDP and TCP).
    pub fn transports(mut self, transports: &[Transport]) -> Self {
        self.transports = transports.to_vec();
        self
    }

    /// Worker processes per UDP listener (`-n`, default 2).
    pub fn workers(mut self, n: u32) -> Self {
        self.workers = n;
        self
    }

    /// Adds a pool member (dispatcher set 1), reached over `transport`.
    pub fn destination(mut self, addr: SocketAddr, transport: Transport) -> Self {
        self.destinations.push((addr, transport));
        self
    }

    /// Gives every pool member the probing flag (8 in the list file, `P` in
    /// `dispatcher.list`), as an operator who has Kamailio ping them would.
    pub fn probing(mut self) -> Self {
        self.probing = true;
        self
    }

    /// A config preprocessor define (`-A NAME` or `-A NAME=value`).
    pub fn define(mut self, define: impl Into<String>) -> Self {
        self.defines.push(define.into());
        self
    }

    /// Extra command-line argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How long [`start`](Kamailio::start) waits for every listener.
    pub fn ready_timeout(mut self, t: Duration) -> Self {
        self.ready_timeout = t;
        self
    }

    /// Writes the pool, starts Kamailio and returns once every listener
    /// is bound.
    pub fn start(self) -> Result<KamailioHandle> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-kamailio-")
            .tempdir()?;
        let list = dir.path().join("dispatcher.list");
        fs::write(&list, self.dispatcher_list()).map_err(|source| Error::File {
            path: list.clone(),
            source,
        })?;

        let mut cmd = Command::new(&self.program);
        cmd.arg("-f")
            .arg(&self.config)
            .arg("-DD")
            .arg("-E")
            .arg("-n")
            .arg(self.workers.to_string());
        for t in &self.transports {
            cmd.arg("-l").arg(format!("{t}:{}", self.listen));
        }
        cmd.arg("-A")
            .arg(format!("DISPATCHER_LIST=\"{}\"", list.display()))
            .arg("-w")
            .arg(dir.path())
            .arg("-Y")
            .arg(dir.path())
            .arg("-P")
            .arg(dir.path().join("kamailio.pid"));
        for d in &self.defines {
            cmd.arg("-A").arg(d);
        }
        cmd.args(&self.args);

        let mut proc = Proc::spawn(cmd, "kamailio", dir.path())?;
        let deadline = Instant::now() + self.ready_timeout;
        while !self
            .transports
            .iter()
            .all(|t| is_listening(self.listen, *t))
        {
            if let Some(status) = proc.try_wait()? {
                return Err(proc.exited_early(status));
            }
            if Instant::now() >= deadline {
                return Err(Error::NotListening {
                    program: "kamailio".into(),
                    addr: self.listen.to_string(),
                    after: self.ready_timeout,
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(KamailioHandle {
            proc,
            addr: self.listen,
            _dir: dir,
        })
    }

    fn dispatcher_list(&self) -> String {
        let mut out = String::from("# written by testbed::Kamailio\n");
        for (addr, t) in &self.destinations {
            let flags = if self.probing { " 8" } else { "" };
            let _ = writeln!(out, "1 sip:{addr};transport={t}{flags}");
        }
        out
    }
}

// === impl KamailioHandle ===

/// A running Kamailio. Dropping it stops the main process and kills any
/// worker left behind.
#[derive(Debug)]
pub struct KamailioHandle {
    proc: Proc,
    addr: SocketAddr,
    _dir: TempDir,
}

impl KamailioHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Main process id; workers are its children.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// CPU and memory of the main process and all workers.
    pub fn stats(&self) -> Result<ProcStats> {
        ProcStats::sample(self.pid())
    }

    /// The end of Kamailio's log (stderr), for failure messages.
    pub fn log_tail(&self, max: usize) -> String {
        self.proc.stderr_tail(max)
    }

    /// SIGKILL to the main process and every worker at once: a crash, with
    /// no chance to clean up.
    pub fn kill(mut self) {
        self.proc.kill();
    }

    /// SIGTERM and wait (2 s) for the tree to exit; then SIGKILL.
    pub fn stop(mut self) {
        self.proc.stop(Duration::from_secs(2));
    }
}
