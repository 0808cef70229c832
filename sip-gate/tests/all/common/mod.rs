//! Shared pieces of the SIPp integration tests: a site on its own loopback
//! network, a gate started in-process on it, SIPp peers, and drains.
//!
//! Each test module takes its own `127.N.M.0/24`, so tests run side by side.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ringsync::config::SiteConfig;
use ringsync::profile::{Profile, ProfileSet, ProfileState};
use ringsync::state::DrainState;
use sip_gate::Gate;
use testbed::fixture::SiteFile;
use testbed::{Scenario, Sipp, SippHandle, SippReport, Transport};
use tokio_util::sync::CancellationToken;

pub mod overload;

/// `127.a.b.host`.
pub fn ip(net: (u8, u8), host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, net.0, net.1, host))
}

/// SIP address of the i-th simulated server (`.11`, `.12`, ...), port 5060.
pub fn server_addr(net: (u8, u8), i: u8) -> SocketAddr {
    SocketAddr::new(ip(net, 11 + i), 5060)
}

/// The site of these tests as a [`SiteFile`]: `n` sg instances `sg-0..`
/// on servers `srv-0..`, each on its own address, the embedded store,
/// health probing off, and a `Retry-After` of 30 s without jitter.
pub fn site_file(net: (u8, u8), n: u8) -> SiteFile {
    let (a, b) = net;
    let names: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let sgs: Vec<(&str, SocketAddr)> = names
        .iter()
        .zip(0..n)
        .map(|(x, i)| (x.as_str(), server_addr(net, i)))
        .collect();
    SiteFile::new(&format!("t{a}-{b}"))
        .secret(&format!("integration-test-secret-{a}-{b}"))
        .section("timers", "retry_after_s = 30\nretry_after_jitter_s = 0")
        .sgs(&sgs)
}

/// [`site_file`]'s text with whatever `extra` TOML adds (listeners,
/// esg...). Health probing is off unless `extra` turns it on.
pub fn site(net: (u8, u8), n: u8, extra: &str) -> String {
    site_file(net, n).raw(extra).text().to_owned()
}

/// A site file in a new temp dir: one sg (`sg-0`) behind a balance
/// listener on `127.a.b.1:5060`, its profiles in the embedded store next
/// to it (for the gate binary). The dir, the file, the listener's address and
/// the gate's admin address (`.1:9091`).
pub fn one_sg_site(net: (u8, u8)) -> (tempfile::TempDir, PathBuf, SocketAddr, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let listener = SocketAddr::new(ip(net, 1), 5060);
    let admin = SocketAddr::new(ip(net, 1), 9091);
    let path = site_file(net, 1)
        .subscribers("subs", listener, &[])
        .write(dir.path());
    (dir, path, listener, admin)
}

/// A balance listener over the sg pool on `127.a.b.1:0`.
pub fn balance_sg(net: (u8, u8)) -> String {
    format!(
        "[[listener]]\nname = \"subs\"\nbind = \"{}:0\"\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n",
        ip(net, 1)
    )
}

/// Parses a site text.
pub fn config(text: &str) -> SiteConfig {
    SiteConfig::from_str_at(text, Path::new("test-site.toml")).expect("test site is valid")
}

/// A drain state with no profile, and a gate on it. Every peer of these
/// tests starts with no work, so the gate's work book is told it has seen
/// everything since it started (no restart window: R-ST-3).
pub async fn start_gate(cfg: SiteConfig) -> (Gate, Arc<DrainState>) {
    let (gate, drain) = start_gate_restarted(cfg).await;
    gate.core().work().assume_fresh_site();
    (gate, drain)
}

/// Like [`start_gate`] for a gate that restarts while the site has work:
/// it cannot vouch for its counts (R-ST-3).
pub async fn start_gate_restarted(cfg: SiteConfig) -> (Gate, Arc<DrainState>) {
    let drain = DrainState::new(Arc::new(cfg.clone()));
    let gate = Gate::start(cfg, drain.clone(), CancellationToken::new())
        .await
        .expect("gate starts");
    (gate, drain)
}

/// Applies one active profile draining `servers` (or none when empty).
pub fn drain(state: &DrainState, revision: u64, servers: &[&str]) {
    let profiles = if servers.is_empty() {
        vec![]
    } else {
        vec![Profile {
            id: "p-test".into(),
            name: "test".into(),
            description: String::new(),
            revision: 0,
            servers: servers.iter().map(|s| s.to_string()).collect(),
            state: ProfileState::Active,
        }]
    };
    state.set_profiles(Arc::new(ProfileSet { revision, profiles }));
}

/// The address of listener `name` as bound.
pub fn listener_addr(gate: &Gate, name: &str) -> SocketAddr {
    gate.config().listener(name).expect("listener exists").bind
}

/// A SIPp UAS on `addr`.
pub fn uas(scenario: &str, addr: SocketAddr, transport: Transport) -> SippHandle {
    Sipp::new(Scenario::repo(scenario))
        .local(addr.ip(), addr.port())
        .transport(transport)
        .timeout(Duration::from_secs(90))
        .spawn()
        .expect("uas starts")
}

/// A SIPp UAC toward `remote`, `calls` calls at `rate` per second.
pub fn uac(
    scenario: Scenario,
    local: IpAddr,
    remote: SocketAddr,
    transport: Transport,
    calls: u64,
    rate: u32,
) -> Sipp {
    Sipp::new(scenario)
        .local_ip(local)
        .remote(remote)
        .transport(transport)
        .calls(calls)
        .rate(rate)
        .timeout(Duration::from_secs(60))
}

/// Runs a UAC to the end without blocking the runtime.
pub async fn run(sipp: Sipp) -> SippReport {
    tokio::task::spawn_blocking(move || {
        sipp.spawn()
            .expect("uac starts")
            .wait(Duration::from_secs(90))
            .expect("uac report")
    })
    .await
    .expect("uac task")
}

/// Asserts a UAC report has every call successful.
pub fn assert_all_ok(what: &str, r: &SippReport, calls: u64) {
    assert_eq!(r.successful, calls, "{what}: {r:?}");
    assert_eq!(r.failed, 0, "{what}: {r:?}");
    assert!(r.all_ok(), "{what}: {r:?}");
}

/// `ringsync --config SITE --json ARGS` run to its end: its JSON output.
///
/// # Panics
/// When it fails, with what it wrote on stderr.
pub fn ringsync(site: &Path, args: &[&str]) -> serde_json::Value {
    testbed::bins::ringsync(&testbed::bins::BinDir::locate(), site, args)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Drains `server` with the `ringsync` CLI (a profile `m`, activated) and
/// polls the gate's work report at `admin` until it has applied the drain
/// (revision 2), for up to `timeout`.
pub fn cli_drain(site: &Path, admin: SocketAddr, server: &str, timeout: Duration) {
    ringsync(
        site,
        &["profile", "create", "--name", "m", "--server", server],
    );
    ringsync(site, &["profile", "activate", "m"]);
    testbed::wait_for("the gate to apply the drain", timeout, || {
        testbed::http::get_json::<ringsync::work::WorkReport>(admin, ringsync::work::WORK_PATH)
            .filter(|r| r.revision >= 2)
    })
    .unwrap();
}

/// One instance as `ringsync status --json` on `site` shows it.
pub fn status_of(site: &Path, id: &str) -> serde_json::Value {
    let st = ringsync(site, &["status"]);
    st["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} missing in {st}"))
}

/// `calls` runs of `scenario` from `from` through `to` over UDP, 10 a
/// second, each held `hold`, run to their end (70 s at the most): the
/// report.
pub fn calls_through(
    scenario: &str,
    from: IpAddr,
    to: SocketAddr,
    calls: u64,
    hold: Duration,
) -> SippReport {
    Sipp::new(Scenario::repo(scenario))
        .local_ip(from)
        .remote(to)
        .transport(Transport::Udp)
        .calls(calls)
        .rate(10)
        .duration(hold)
        .timeout(Duration::from_secs(60))
        .spawn()
        .expect("uac starts")
        .wait(Duration::from_secs(70))
        .expect("uac report")
}
