//! What a run stands on: its addresses, the descriptor limit, the
//! certificate made for it, the site file, and the peers (a loopback DNS
//! server, SIPp's `uas_register` as the registrar over UDP and over TCP,
//! and the gate itself).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use rustls_pki_types::CertificateDer;
use testbed::bins::Node;
use testbed::fixture::SiteFile;
use testbed::{Dnsmasq, DnsmasqHandle, ProcStats, Scenario, Sipp, SippHandle, Transport};

use crate::Opts;

/// The servers of a run: `127.82.NET.0/24` (the gate on `.1`, the
/// registrar on `.11`, DNS on `.53`).
pub(crate) fn server_ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 82, net, host))
}

/// The clients' source addresses: `127.83.NET.1` and up, at most
/// [`PER_SOURCE`] connections each, so no source runs short of ephemeral
/// ports (about 28,000 per address in the default range).
pub(crate) fn source_ip(net: u8, conn: u32) -> IpAddr {
    let host = u8::try_from(1 + conn / PER_SOURCE).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(127, 83, net, host))
}

/// Connections per source address.
pub(crate) const PER_SOURCE: u32 = 1000;
/// The gate's TCP and TLS subscriber listeners.
pub(crate) const TCP_PORT: u16 = 5060;
pub(crate) const TLS_PORT: u16 = 5061;
const ADMIN_PORT: u16 = 9092;
const REGISTRAR: u8 = 11;
const DNS: u8 = 53;

/// Descriptors the run needs beyond one per connection (the gate's and
/// this program's own sockets, files, the runtime).
const FD_MARGIN: u64 = 1024;

/// Raises this process's descriptor limit to hold every connection with a
/// margin: the soft limit up to the hard one, the hard one too where the
/// process may (`CAP_SYS_RESOURCE`, up to `fs.nr_open`). The gate, SIPp
/// and dnsmasq are its children and inherit it; the limit is per process,
/// and this program and the gate each hold one descriptor a connection.
/// Returns the limit in force.
pub(crate) fn raise_nofile(connections: u32) -> Result<u64, String> {
    let need = u64::from(connections) + FD_MARGIN;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| e.to_string())?;
    if soft >= need {
        return Ok(soft);
    }
    if setrlimit(Resource::RLIMIT_NOFILE, need, hard.max(need)).is_ok() {
        return Ok(need);
    }
    Err(format!(
        "{connections} connections need a descriptor limit of {need}; the hard limit is \
         {hard} and this process may not raise it (no CAP_SYS_RESOURCE): run as root \
         with that capability, or with --tcp and --tls adding up to at most {}",
        hard.saturating_sub(FD_MARGIN)
    ))
}

/// The certificate and key of the run (a self-signed leaf for the gate's
/// address) in `dir`; the certificate, for the clients to trust.
pub(crate) fn make_cert(dir: &Path, gate: IpAddr) -> Result<CertificateDer<'static>, String> {
    testbed::tls::self_signed(dir, &gate.to_string()).map_err(|e| e.to_string())
}

/// The site: one sg (the registrar), a TCP and a TLS subscriber listener
/// (each with UDP too; the gate forwards a TCP client's REGISTER over TCP
/// and a TLS client's over UDP), room for
/// every connection, and no admission limit the run's own rate would meet
/// (its thousands of subscribers share a few source addresses).
pub(crate) fn site_toml(o: &Opts) -> String {
    let (g, sg, dns) = (
        server_ip(o.net, 1),
        server_ip(o.net, REGISTRAR),
        server_ip(o.net, DNS),
    );
    let max = u64::from(o.tcp) + u64::from(o.tls) + 1000;
    let subs = |port: u16| SocketAddr::new(g, port);
    SiteFile::new("conn-bench")
        .store_path("bench.profiles.json")
        .section(
            "admin",
            &format!("gate_bind = \"{}\"", SocketAddr::new(g, ADMIN_PORT)),
        )
        .section("dns", &format!("nameservers = [\"{dns}:53\"]"))
        .section("tcp", &format!("max_connections = {max}"))
        .section(
            "overload",
            "per_source_rate = 0\nper_source_register_rate = 0\n\
             registers_per_s = 0\nnew_dialogs_per_s = 0",
        )
        .tls("cert.pem", "key.pem")
        .sgs(&[("0", SocketAddr::new(sg, 5060))])
        .subscribers("tcp", subs(TCP_PORT), &["udp", "tcp"])
        .subscribers("tls", subs(TLS_PORT), &["udp", "tls"])
        .text()
        .to_owned()
}

/// The peers of a run; each is stopped when this drops.
pub(crate) struct Peers {
    pub(crate) gate: Node,
    _registrars: [SippHandle; 2],
    _dns: DnsmasqHandle,
}

impl Peers {
    /// Starts DNS, the registrar and the gate (`bins`: the directory of the
    /// sip-gate binary, if not this program's own), and waits for the gate
    /// to be ready.
    pub(crate) fn start(
        o: &Opts,
        dir: &Path,
        bins: Option<&Path>,
        lifetime: Duration,
    ) -> Result<Peers, String> {
        let dns = Dnsmasq::new(SocketAddr::new(server_ip(o.net, DNS), 53))
            .start()
            .map_err(|e| format!("dnsmasq: {e}"))?;
        // One REGISTER is one SIPp call; its 200 echoes the Contact with the
        // request's Expires (3600), so the gate holds each connection as the
        // subscriber's flow. A TCP listener's instance side is TCP, a TLS
        // listener's (it serves UDP too) is UDP: one SIPp on each, the
        // instance's address for both.
        let registrar = |t: Transport| {
            Sipp::new(Scenario::repo("uas_register"))
                .local(server_ip(o.net, REGISTRAR), 5060)
                .transport(t)
                .timeout(lifetime)
                .spawn()
                .map_err(|e| format!("SIPp uas_register over {t}: {e}"))
        };
        let registrars = [registrar(Transport::Udp)?, registrar(Transport::Tcp)?];
        let site = dir.join("site.toml");
        std::fs::write(&site, site_toml(o)).map_err(|e| format!("writing the site: {e}"))?;
        let mut builder = Node::gate(&site)
            .admin(SocketAddr::new(server_ip(o.net, 1), ADMIN_PORT))
            .env("RUST_LOG", "warn");
        if let Some(bins) = bins {
            builder = builder.bins(testbed::bins::BinDir::at(bins));
        }
        let mut gate = builder.start().map_err(|e| format!("sip-gate: {e}"))?;
        gate.wait_ready()
            .map_err(|e| format!("sip-gate not ready: {e}\n{}", gate.log()))?;
        Ok(Peers {
            gate,
            _registrars: registrars,
            _dns: dns,
        })
    }

    /// The gate's CPU and memory now.
    pub(crate) fn sample(&self) -> Result<ProcStats, String> {
        let pid = self.gate.pid().ok_or("the gate is not running")?;
        ProcStats::sample(pid).map_err(|e| e.to_string())
    }

    /// A gauge or counter of the gate's `/metrics` (0 when absent).
    pub(crate) fn metric(&self, series: &str) -> f64 {
        self.gate.metric(series).unwrap_or(f64::NAN)
    }
}

/// Where the site file and certificate of a run go.
pub(crate) fn workdir() -> Result<(tempfile::TempDir, PathBuf), String> {
    let dir = tempfile::Builder::new()
        .prefix("conn-bench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let path = dir.path().to_path_buf();
    Ok((dir, path))
}
