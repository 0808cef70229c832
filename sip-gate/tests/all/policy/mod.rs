//! Shared pieces of the edge-policy tests (`edge_policy.rs`, `edge_bans.rs`):
//! a one-sg site on `127.86.N.0/24` (the gate on `.1`, the sg on `.11`),
//! the gate binary started on it, one-datagram exchanges and SIPp calls.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};
use testbed::{Scenario, Sipp, SippHandle, SippReport};

pub fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 86, net, host))
}

/// A site with one sg on `.11` and a guard listener on `.1:5060`, plus `site`
/// lines under `[site]` and `extra` at the end.
pub fn write_site(dir: &Path, net: u8, site: &str, extra: &str) -> PathBuf {
    let guard = SocketAddr::new(ip(net, 1), 5060);
    SiteFile::new(&format!("policy-{net}"))
        .secret("policy-test-secret-0123456789")
        .site_lines(site)
        .sgs(&[("0", SocketAddr::new(ip(net, 11), 5060))])
        .listener("g", guard, Mode::Guard("sg-0"), "subscriber", "")
        .raw(extra)
        .write(dir)
}

pub fn start_gate(site: &Path, net: u8) -> Node {
    let mut gate = Node::gate(site)
        .admin(SocketAddr::new(ip(net, 1), 9091))
        .args(["--node", "p"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    gate
}

/// R-SEC-3's set-up: the gate on a site whose guard listener bans a source
/// for `ban_s` after `limit` failed authentications within 30 s
/// (`[listener.auth_ban]`), and the sg on `.11`: SIPp `scenario`, a
/// registrar answering 401 (taking calls too, or not), for 60 s at the
/// most.
pub fn ban_gate(dir: &Path, net: u8, limit: u32, ban_s: u32, scenario: &str) -> BanGate {
    let site = write_site(dir, net, "", "");
    let text = std::fs::read_to_string(&site).unwrap()
        + &format!("\n[listener.auth_ban]\nlimit = {limit}\nwindow_s = 30\nban_s = {ban_s}\n");
    std::fs::write(&site, text).unwrap();
    let gate = start_gate(&site, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    let sg = Sipp::new(Scenario::repo(scenario))
        .local(ip(net, 11), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    BanGate { gate, site, g, sg }
}

/// What [`ban_gate`] started.
pub struct BanGate {
    /// The gate, ready.
    pub gate: Node,
    /// Its site file.
    pub site: PathBuf,
    /// Its SIP address, `.1:5060`.
    pub g: SocketAddr,
    /// The sg.
    pub sg: SippHandle,
}

/// Sends `bytes` from `from` to `to` in one datagram; the first answer
/// within 5 s (a loaded 2-core machine can take over a second for a
/// gate and a SIPp peer both to run), `None` for silence.
pub fn udp(from: SocketAddr, to: SocketAddr, bytes: &[u8]) -> Option<String> {
    udp_within(from, to, bytes, Duration::from_secs(5))
}

/// [`udp`] with its own wait: a test that expects silence waits less.
pub fn udp_within(
    from: SocketAddr,
    to: SocketAddr,
    bytes: &[u8],
    wait: Duration,
) -> Option<String> {
    let s = bind_client(from);
    s.set_read_timeout(Some(wait)).unwrap();
    s.send_to(bytes, to).unwrap();
    let mut buf = vec![0u8; 65_535];
    let n = s.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A client's socket on `from`. `SO_REUSEADDR`, and a few tries over 5 s:
/// once in CI the bind failed with "address in use" with no other user of
/// the address found (a socket on the wildcard address and the same port,
/// left by an earlier test's peer, is the likely one; `SO_REUSEADDR` lets a
/// specific address share a port with it).
fn bind_client(from: SocketAddr) -> UdpSocket {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(from),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        s.set_reuse_address(true).unwrap();
        match s.bind(&from.into()) {
            Ok(()) => return s.into(),
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("binding {from}: {e}; trying again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("binding {from}: {e}"),
        }
    }
}

/// `calls` SIPp calls of `scenario` from `from` to the gate `g`.
pub fn sipp_calls(scenario: &str, from: IpAddr, g: SocketAddr, calls: u64) -> SippReport {
    Sipp::new(Scenario::repo(scenario))
        .local_ip(from)
        .remote(g)
        .calls(calls)
        .rate(10)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap()
        .wait(Duration::from_secs(40))
        .unwrap()
}
