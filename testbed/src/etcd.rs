//! Real etcd on loopback: one member or a cluster, each member on its own
//! `127.0.0.x` with its own ports and data directory (in a temporary
//! directory that lives as long as the handle, in memory where the machine
//! has `/dev/shm`: see [`MEMORY`]).
//!
//! A test can kill a member (SIGKILL, as a crash), start it again on the
//! same data, stop and start the whole cluster, find the leader and read a
//! member's Prometheus metrics. Everything is stopped when the handle drops.
//!
//! ```no_run
//! # fn main() -> Result<(), testbed::Error> {
//! let ips = ["127.0.0.11", "127.0.0.12", "127.0.0.13"].map(|s| s.parse().unwrap());
//! let mut etcd = testbed::Etcd::cluster(&ips)?;
//! let leader = etcd.leader().expect("a leader");
//! etcd.kill(leader);
//! etcd.start_member(leader)?;
//! etcd.wait_healthy(std::time::Duration::from_secs(10))?;
//! # Ok(())
//! # }
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::http::get_ok as http_get;
use crate::net::free_port;
use crate::process::Proc;
use crate::{Error, Result};

/// The program and the Debian package that ships it.
const PROGRAM: &str = "etcd";
const PACKAGE: &str = "etcd-server";
/// Time allowed for a member or the cluster to become healthy.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Where members keep their data when it exists. The testbed checks how
/// the site behaves, not a disk: on a shared disk one fsync can stall for
/// seconds, and a member then answers late enough to fail a test that
/// holds the product to its deadlines. A killed member still finds its
/// data there (the page cache outlives the process), as on a disk.
pub const MEMORY: &str = "/dev/shm";

/// An etcd cluster (possibly of one member).
#[derive(Debug)]
pub struct Etcd {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    dir: TempDir,
}

#[derive(Debug)]
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    data: PathBuf,
    proc: Option<Proc>,
    /// Runs of this member so far (log file names).
    runs: u32,
}

impl Etcd {
    /// One member on `ip`, healthy.
    pub fn single(ip: IpAddr) -> Result<Etcd> {
        Self::cluster(&[ip])
    }

    /// One member per address (three for a real cluster), all started with
    /// `--initial-cluster-state new`, healthy when this returns.
    pub fn cluster(ips: &[IpAddr]) -> Result<Etcd> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("etcd-");
        let dir = builder.tempdir_in(MEMORY).or_else(|_| builder.tempdir())?;
        let mut members = Vec::with_capacity(ips.len());
        for (i, ip) in ips.iter().enumerate() {
            let client = SocketAddr::new(*ip, free_port(*ip)?);
            let mut peer = SocketAddr::new(*ip, free_port(*ip)?);
            while peer == client {
                peer = SocketAddr::new(*ip, free_port(*ip)?);
            }
            let data = dir.path().join(format!("m{i}.data"));
            members.push(Member {
                name: format!("m{i}"),
                client,
                peer,
                data,
                proc: None,
                runs: 0,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!(
            "testbed-{}-{}",
            std::process::id(),
            dir.path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        );
        let mut etcd = Etcd {
            members,
            initial_cluster,
            token,
            dir,
        };
        etcd.start()?;
        Ok(etcd)
    }

    /// Client URLs (`http://ip:port`), one per member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://{}", m.client))
            .collect()
    }

    /// The client address of member `i`.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        self.members[i].client
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True for a cluster of no member (never, once built).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Starts every member that is not running and waits until all are healthy.
    pub fn start(&mut self) -> Result<()> {
        for i in 0..self.members.len() {
            if self.members[i].proc.is_none() {
                self.spawn(i)?;
            }
        }
        self.wait_healthy(START_TIMEOUT)
    }

    /// Starts member `i` again (same data, same ports) and waits until the
    /// cluster is healthy.
    pub fn start_member(&mut self, i: usize) -> Result<()> {
        if self.members[i].proc.is_none() {
            self.spawn(i)?;
        }
        self.wait_healthy(START_TIMEOUT)
    }

    /// SIGKILL to member `i` (a crash); its data stays.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].proc.take() {
            p.signal("KILL");
            let _ = p.wait_timeout(Duration::from_secs(5));
        }
    }

    /// Stops every member (SIGTERM, then SIGKILL); the data stays.
    pub fn stop(&mut self) {
        for m in &mut self.members {
            if let Some(mut p) = m.proc.take() {
                p.stop(Duration::from_secs(5));
            }
        }
    }

    /// True while member `i` runs.
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].proc.is_some()
    }

    /// Waits until every running member answers `/health` with a leader.
    pub fn wait_healthy(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut all = true;
            for i in 0..self.members.len() {
                let Some(p) = self.members[i].proc.as_mut() else {
                    continue;
                };
                if let Some(status) = p.try_wait()? {
                    let e = p.exited_early(status);
                    self.members[i].proc = None;
                    return Err(e);
                }
                let ok = http_get(self.members[i].client, "/health")
                    .is_some_and(|b| b.contains("\"health\":\"true\""));
                all &= ok;
            }
            if all {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::NotListening {
                    program: PROGRAM.into(),
                    addr: format!("healthy cluster {}", self.endpoints().join(",")),
                    after: timeout,
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The index of the member that is leader now, from each running
    /// member's own `etcd_server_is_leader` metric.
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            self.members[i].proc.is_some()
                && self.metrics(i).is_some_and(|m| {
                    crate::metrics::Metrics::new(m).total("etcd_server_is_leader") == Some(1.0)
                })
        })
    }

    /// Member `i`'s Prometheus metrics text, if it answers.
    pub fn metrics(&self, i: usize) -> Option<String> {
        http_get(self.members[i].client, "/metrics")
    }

    /// The directory holding data and logs.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The end of member `i`'s log, for failure messages.
    pub fn log_tail(&self, i: usize) -> String {
        let m = &self.members[i];
        crate::process::tail(
            &self
                .dir
                .path()
                .join(format!("etcd-{}-{}.stderr", m.name, m.runs)),
            3000,
        )
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let dir = self.dir.path().to_owned();
        let m = &mut self.members[i];
        m.runs += 1;
        let mut cmd = Command::new(PROGRAM);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&m.data)
            .arg("--listen-client-urls")
            .arg(format!("http://{}", m.client))
            .arg("--advertise-client-urls")
            .arg(format!("http://{}", m.client))
            .arg("--listen-peer-urls")
            .arg(format!("http://{}", m.peer))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://{}", m.peer))
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .arg("--log-level")
            .arg("warn")
            .arg("--logger")
            .arg("zap");
        let label = format!("etcd-{}-{}", m.name, m.runs);
        let proc = Proc::spawn(cmd, &label, &dir).map_err(|e| match e {
            Error::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::NotInstalled {
                    program: PROGRAM.into(),
                    package: PACKAGE.into(),
                }
            }
            e => e,
        })?;
        m.proc = Some(proc);
        Ok(())
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut p) = m.proc.take() {
                p.signal("KILL");
                let _ = p.wait_timeout(Duration::from_secs(5));
            }
        }
    }
}
