//! dnsmasq as a real DNS server on one loopback address: the records a test
//! needs (A, SRV, NAPTR) from the command line, nothing from the machine
//! (`--no-resolv --no-hosts`, no config file), every query logged so a
//! test can count them. Debian package: `dnsmasq-base`.
//!
//! ```no_run
//! use testbed::Dnsmasq;
//! # fn main() -> Result<(), testbed::Error> {
//! let dns = Dnsmasq::new("127.0.0.53:5353".parse().unwrap())
//!     .host("pbx.example", "127.0.0.60".parse().unwrap())
//!     .srv("_sip._udp.example", "pbx.example", 5060, 10, 0)
//!     .start()?;
//! assert!(dns.queries().is_empty());
//! # Ok(())
//! # }
//! ```

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    process::Command,
    time::Duration,
};

use tempfile::TempDir;

use crate::{
    net::{wait_listening, Transport},
    process::{tail, Proc},
    Error, Result,
};

/// Builder for one dnsmasq.
#[derive(Clone, Debug)]
pub struct Dnsmasq {
    program: PathBuf,
    listen: SocketAddr,
    records: Vec<String>,
    local_ttl: u32,
    ready_timeout: Duration,
}

impl Dnsmasq {
    /// A server on `listen` (UDP and TCP) with no records; the records it
    /// serves have a TTL of 0 unless [`ttl`](Dnsmasq::ttl) says otherwise.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            program: PathBuf::from("dnsmasq"),
            listen,
            records: Vec::new(),
            local_ttl: 0,
            ready_timeout: Duration::from_secs(5),
        }
    }

    /// The dnsmasq binary (default: `dnsmasq` from `PATH`).
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = path.into();
        self
    }

    /// TTL of every record served, in seconds (`--local-ttl`).
    pub fn ttl(mut self, secs: u32) -> Self {
        self.local_ttl = secs;
        self
    }

    /// Answers for `domain` locally only (`--local=/domain/`): a name under
    /// it without records is NXDOMAIN, not REFUSED for want of upstreams.
    pub fn local_domain(mut self, domain: &str) -> Self {
        self.records.push(format!("--local=/{domain}/"));
        self
    }

    /// An A (or AAAA) record (`--host-record`).
    pub fn host(mut self, name: &str, ip: IpAddr) -> Self {
        self.records.push(format!("--host-record={name},{ip}"));
        self
    }

    /// An SRV record (`--srv-host`): `name` is the whole owner name, e.g.
    /// `_sip._tcp.example.com`.
    pub fn srv(mut self, name: &str, target: &str, port: u16, priority: u16, weight: u16) -> Self {
        self.records.push(format!(
            "--srv-host={name},{target},{port},{priority},{weight}"
        ));
        self
    }

    /// A NAPTR record with the `S` flag and an empty regexp (what RFC 3263
    /// uses): `service` such as `SIP+D2T`, `replacement` the SRV name.
    pub fn naptr(
        mut self,
        name: &str,
        order: u16,
        preference: u16,
        service: &str,
        replacement: &str,
    ) -> Self {
        self.records.push(format!(
            "--naptr-record={name},{order},{preference},S,{service},,{replacement}"
        ));
        self
    }

    /// Starts dnsmasq and returns once it listens.
    pub fn start(self) -> Result<DnsmasqHandle> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-dnsmasq-")
            .tempdir()?;
        let mut cmd = Command::new(&self.program);
        cmd.arg("--no-daemon")
            .arg("--conf-file=/dev/null")
            .arg("--no-resolv")
            .arg("--no-hosts")
            .arg("--bind-interfaces")
            .arg(format!("--listen-address={}", self.listen.ip()))
            .arg(format!("--port={}", self.listen.port()))
            .arg(format!("--local-ttl={}", self.local_ttl))
            .arg("--pid-file=")
            .arg("--log-queries")
            .arg("--log-facility=-")
            .args(&self.records);
        let mut proc = match Proc::spawn(cmd, "dnsmasq", dir.path()) {
            Ok(p) => p,
            Err(Error::Spawn { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotInstalled {
                    program: "dnsmasq".into(),
                    package: "dnsmasq-base".into(),
                })
            }
            Err(e) => return Err(e),
        };
        if !wait_listening(self.listen, Transport::Udp, self.ready_timeout) {
            if let Some(status) = proc.try_wait()? {
                return Err(proc.exited_early(status));
            }
            return Err(Error::NotListening {
                program: "dnsmasq".into(),
                addr: format!("udp:{}", self.listen),
                after: self.ready_timeout,
            });
        }
        Ok(DnsmasqHandle {
            proc,
            addr: self.listen,
            log: dir.path().join("dnsmasq.stderr"),
            _dir: dir,
        })
    }
}

/// A running dnsmasq; dropping it stops it.
#[derive(Debug)]
pub struct DnsmasqHandle {
    proc: Proc,
    addr: SocketAddr,
    log: PathBuf,
    _dir: TempDir,
}

impl DnsmasqHandle {
    /// Where it answers.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The queries it got so far, as it logged them (`query[SRV]
    /// _sip._tcp.example from 127.0.0.1`), oldest first.
    pub fn queries(&self) -> Vec<String> {
        tail(&self.log, 1 << 20)
            .lines()
            .filter_map(|l| l.find("query[").map(|i| l[i..].to_string()))
            .collect()
    }

    /// Stops it (SIGTERM, then SIGKILL).
    pub fn stop(mut self) {
        self.proc.stop(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_dnsmasq_names_its_package() {
        let e = Dnsmasq::new("127.0.0.1:5353".parse().unwrap())
            .program("/nonexistent/dnsmasq")
            .start()
            .unwrap_err();
        assert!(matches!(e, Error::NotInstalled { .. }), "{e:?}");
        assert!(e.to_string().contains("dnsmasq-base"), "{e}");
    }
}
