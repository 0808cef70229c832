//! The gate's upgrade (R-GW-3) through the real `sip-gate` binary: under
//! SIPp load over UDP and over TCP, `sip-gate upgrade` starts the binary
//! at the gate's path, which takes the listening sockets, the open TCP
//! connections (SIPp's, both sides) and the work book; no call fails, no
//! connection is closed, and the old run exits by itself. Twenty upgrades
//! in a row under load fail no call; a ban stays in force; a ringing
//! INVITE is the new run's transaction. Here too the helpers the other
//! upgrade tests share. A subscriber registered over a raw TCP connection
//! keeps it and its flow: `upgrade/subscriber.rs`; a new run of another
//! hand-over version refuses, and one killed mid-way leaves the old run
//! serving: `upgrade/refusal.rs`; TLS clients: `upgrade_tls.rs`.
//!
//! Each test has its own `127.139.N.0/24`: the gate's listener and admin
//! on `.1`, the sg (SIPp or Kamailio) on `.11`, callers on `.21`, the
//! subscriber on `.100`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{ip, server_addr};
use testbed::bins::Node;
use testbed::{wait_for, Scenario, Sipp, Transport};

mod refusal;
mod subscriber;

/// A site with one sg behind a subscriber balance listener on
/// `127.139.N.1:5060` (UDP and TCP), its profiles in an embedded store;
/// `sources`: the sg's own address is also a source network (Kamailio's
/// connections come from ephemeral ports).
pub(crate) fn site(
    net: (u8, u8),
    sources: bool,
) -> (tempfile::TempDir, PathBuf, SocketAddr, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let listener = SocketAddr::new(ip(net, 1), 5060);
    let admin = SocketAddr::new(ip(net, 1), 9091);
    let sg = server_addr(net, 0);
    let sources = if sources {
        format!("sources = [\"{}/32\"]\n", sg.ip())
    } else {
        String::new()
    };
    let text = format!(
        "[site]\nname = \"upgrade-{a}-{b}\"\nsecret = \"integration-test-secret-upgrade-{a}-{b}\"\n\n\
         [health]\ninterval_ms = 0\n\n[[server]]\nname = \"srv-0\"\n\n\
         [[instance]]\nid = \"sg-0\"\nservice = \"sg\"\nserver = \"srv-0\"\nsip = \"{sg}\"\n{sources}\n\
         [[listener]]\nname = \"subs\"\nbind = \"{listener}\"\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n\n\
         [store]\nkind = \"embedded\"\npath = \"profiles.json\"\n{overload}",
        a = net.0,
        b = net.1,
        overload = overload(),
    );
    let path = dir.path().join("site.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path, listener, admin)
}

/// The callers are one source address: past R-OV-2's 50 new dialogs a
/// second from one source (the benchmark's `UPGRADE_CALL_RATE=100`), the
/// site lets that source through, so the calls measure the upgrade, not
/// the limit.
fn overload() -> String {
    if call_rate() > 40 {
        "\n[overload]\nper_source_rate = 1000\nper_source_burst = 1000\n".to_string()
    } else {
        String::new()
    }
}

/// The run an upgrade started: not a child the launcher knows (its parent
/// exits), so it is killed here when the test ends.
pub(crate) struct NewRun(pub(crate) u32);

impl Drop for NewRun {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .status();
    }
}

/// `sip-gate upgrade` for the gate of `site` at `admin`: its exit status
/// and output.
pub(crate) fn upgrade_cli(site: &Path, admin: SocketAddr) -> std::process::Output {
    testbed::bins::command("sip-gate")
        .unwrap()
        .args(["upgrade", "--config"])
        .arg(site)
        .args(["--admin", &admin.to_string()])
        .output()
        .unwrap()
}

/// Upgrades through the CLI, which must succeed; the new run.
pub(crate) fn upgrade(site: &Path, admin: SocketAddr) -> NewRun {
    let out = upgrade_cli(site, admin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // A new run may serve though its answer was lost, its pid unknown:
        // no later test may find it on these addresses.
        let _ = std::process::Command::new("pkill")
            .arg("-KILL")
            .arg("-f")
            .arg(site)
            .status();
    }
    assert!(
        out.status.success(),
        "sip-gate upgrade: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = stdout
        .split("pid ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pid in `{stdout}`"));
    NewRun(pid)
}

/// Once the old run `old` logged its new run ready: the new run's pid.
pub(crate) fn new_run_ready(old: &Node) -> u64 {
    old.wait_for("the new run ready", Duration::from_secs(10), |g| {
        let log = g.log();
        log.contains("the new run is ready")
            .then(|| logged(&log, "upgrade: new run started", "pid"))
            .flatten()
    })
    .unwrap()
}

/// The value of `key=N` on the last log line that contains `what`.
pub(crate) fn logged(log: &str, what: &str, key: &str) -> Option<u64> {
    let line = log.lines().rev().find(|l| l.contains(what))?;
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// `key=N` on the new run's "took over" line, once it is written (the new
/// run logs it after it told the old run it is done).
pub(crate) fn took_over(gate: &Node, key: &str) -> Option<u64> {
    let line = "took over from the running gate";
    gate.wait_for(line, Duration::from_secs(5), |g| {
        g.log().contains(line).then_some(())
    })
    .unwrap();
    logged(&gate.log(), line, key)
}

pub(crate) fn gate(site: &Path, admin: SocketAddr, env: Option<(&str, &str)>) -> Node {
    let mut b = Node::gate(site).admin(admin);
    if let Some((k, v)) = env {
        b = b.env(k, v);
    }
    let mut gate = b.start().unwrap();
    gate.wait_ready().unwrap();
    gate
}

/// New calls a second across the upgrade: 10 in the suite; the benchmark
/// (docs/benchmarks.md, "sip-gate: upgrade hand-over") sets
/// `UPGRADE_CALL_RATE=100` on the release build. Each test runs six
/// seconds of calls.
fn call_rate() -> u32 {
    std::env::var("UPGRADE_CALL_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .clamp(1, 500)
}

/// Calls at [`call_rate`], held 2 s (then a re-INVITE and a BYE), through
/// the gate over `transport`; `sip-gate upgrade` while calls are up.
fn calls_across_an_upgrade(net: (u8, u8), transport: Transport) {
    let (_dir, site, listener, admin) = site(net, false);
    let mut old = gate(&site, admin, None);
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(server_addr(net, 0).ip(), 5060)
        .transport(transport)
        .timeout(Duration::from_secs(90))
        .spawn()
        .unwrap();
    let rate = call_rate();
    let calls = 6 * u64::from(rate);
    let uac = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 21))
        .remote(listener)
        .transport(transport)
        .calls(calls)
        .rate(rate)
        .duration(Duration::from_secs(2))
        .timeout(Duration::from_secs(90))
        .spawn()
        .unwrap();
    wait_for(
        "calls up through the old run",
        Duration::from_secs(10),
        || {
            let up = old.work()?.instances.get("sg-0")?.counts.dialogs;
            (up >= 5).then_some(())
        },
    )
    .unwrap();

    let started = Instant::now();
    let new = upgrade(&site, admin);
    println!(
        "upgrade over {transport:?} at {rate} calls/s: the CLI returned in {} ms",
        started.elapsed().as_millis()
    );
    assert_ne!(Some(new.0), old.pid());
    // The old run had nothing it could not hand over: it exits by itself.
    let status = old.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        old.log()
    );
    let r = uac.wait(Duration::from_secs(90)).unwrap();
    println!(
        "upgrade over {transport:?} at {rate} calls/s: {} of {calls} calls succeeded, {} failed",
        r.successful, r.failed
    );
    assert!(
        r.all_ok() && r.successful == calls && r.failed == 0,
        "{r:?}\n{}",
        old.log()
    );
    let u = uas.stop().unwrap();
    assert_eq!(u.failed, 0, "{u:?}");
    let moved = took_over(&old, "connections");
    let log = old.log();
    if transport == Transport::Tcp {
        // SIPp's two connections (the callers' and the gate's to the sg)
        // moved: neither side saw a close or a reconnect.
        assert_eq!(moved, Some(2), "{log}");
    } else {
        assert_eq!(moved, Some(0), "{log}");
    }
    // The new run serves the admin endpoint and is ready.
    let (code, _) = testbed::http::get(admin, "/readyz")
        .map(|r| (r.status, r.body))
        .unwrap();
    assert_eq!(code, 200);
}

#[test]
fn r_gw_3_calls_over_udp_fail_none_across_an_upgrade() {
    calls_across_an_upgrade((139, 1), Transport::Udp);
}

#[test]
fn r_gw_3_calls_over_tcp_keep_their_connections_across_an_upgrade() {
    calls_across_an_upgrade((139, 2), Transport::Tcp);
}

/// Calls through the gate now, all answered.
pub(crate) fn calls_pass(net: (u8, u8), listener: SocketAddr, n: u64) {
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(server_addr(net, 0).ip(), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let uac = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 21))
        .remote(listener)
        .calls(n)
        .rate(10)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let r = uac.wait(Duration::from_secs(60)).unwrap();
    assert!(r.all_ok() && r.successful == n, "{r:?}");
    let _ = uas.stop();
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
pub(crate) fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// R-GW-3: twenty upgrades in a row, one every half second, under SIPp
/// load over TCP: no call fails, each run hands SIPp's two connections to
/// the next and exits.
#[test]
fn r_gw_3_twenty_upgrades_in_a_row_under_load_fail_no_call() {
    let net = (139, 7);
    let (_dir, site, listener, admin) = site(net, false);
    let mut first = gate(&site, admin, None);
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(server_addr(net, 0).ip(), 5060)
        .transport(Transport::Tcp)
        .timeout(Duration::from_secs(120))
        .spawn()
        .unwrap();
    let calls = 150;
    let uac = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 21))
        .remote(listener)
        .transport(Transport::Tcp)
        .calls(calls)
        .rate(10)
        .duration(Duration::from_secs(1))
        .timeout(Duration::from_secs(120))
        .spawn()
        .unwrap();
    let mut runs: Vec<NewRun> = Vec::new();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        runs.push(upgrade(&site, admin));
    }
    let status = first.wait_exit(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    for r in &runs[..runs.len() - 1] {
        wait_for("an upgraded run to exit", Duration::from_secs(10), || {
            ended(r.0).then_some(())
        })
        .unwrap();
    }
    assert!(!ended(runs[runs.len() - 1].0), "the last run serves");
    let r = uac.wait(Duration::from_secs(120)).unwrap();
    assert!(
        r.all_ok() && r.successful == calls && r.failed == 0,
        "{r:?}"
    );
    let u = uas.stop().unwrap();
    assert_eq!(u.failed, 0, "{u:?}");
    took_over(&first, "connections");
    let log = first.log();
    let moved: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("took over from the running gate"))
        .filter_map(|l| logged(l, "took over", "connections"))
        .collect();
    // Each run passed SIPp's two connections on, and no run opened
    // another to the sg (before the moved connections were all in the
    // table before any was read, one run in about fourteen did).
    assert_eq!(moved, vec![2; 20], "{log}");
}

/// R-GW-3 with R-SEC-3: a source banned by the old run is banned by the
/// new one, for what was left of its ban. (The policy tests' site, on
/// `127.86.139.0/24`.)
#[test]
fn r_gw_3_a_ban_stays_in_force_across_an_upgrade() {
    use crate::policy::{ban_gate, udp, BanGate};
    let net = 139;
    let dir = tempfile::tempdir().unwrap();
    let BanGate {
        mut gate,
        site,
        g,
        sg: registrar,
    } = ban_gate(dir.path(), net, 2, 60, "uas_register_401");
    let admin = SocketAddr::new(crate::policy::ip(net, 1), 9091);
    let brute = SocketAddr::new(crate::policy::ip(net, 66), 5099);
    let register = |id: &str| {
        let msg = format!(
            "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP {brute};branch=z9hG4bK{id};rport\r\n\
             Max-Forwards: 70\r\nFrom: <sip:150@example.com>;tag=r-{id}\r\nTo: <sip:150@example.com>\r\n\
             Call-ID: {id}@brute\r\nCSeq: 1 REGISTER\r\nContact: <sip:150@{brute}>\r\nExpires: 60\r\n\
             Content-Length: 0\r\n\r\n"
        );
        udp(brute, g, msg.as_bytes()).unwrap_or_default()
    };
    for n in 0..2 {
        assert!(register(&format!("b{n}")).starts_with("SIP/2.0 401"));
    }
    assert!(register("banned").starts_with("SIP/2.0 403"));

    let _new = upgrade(&site, admin);
    let status = gate.wait_exit(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    // The new run answers: still banned, and listed with what was left.
    let got = register("after");
    assert!(got.starts_with("SIP/2.0 403"), "after the upgrade: {got}");
    let bans: Vec<ringsync::bans::BanInfo> =
        testbed::http::get_json(admin, ringsync::bans::BANS_PATH).expect("the new run's bans");
    assert_eq!(bans.len(), 1, "{bans:?}");
    assert_eq!(bans[0].source, brute.ip());
    assert!(
        bans[0].remaining_s > 40 && bans[0].remaining_s <= 60,
        "{bans:?}"
    );
    let _ = registrar.stop();
}

/// R-GW-3: a transaction in flight moves: an INVITE ringing at the sg when
/// the gate upgrades is the new run's work at once (its `transactions`
/// count), and its 200, relayed by the new run, sets the call up in the
/// new run's book (before the transactions moved: 0, then no call).
#[test]
fn r_gw_3_a_ringing_invite_is_the_new_runs_transaction() {
    let net = (139, 10);
    let (_dir, site, listener, admin) = site(net, false);
    let old = gate(&site, admin, None);
    let sg_work = |g: &Node| {
        let c = g.work()?.instances.get("sg-0")?.counts;
        Some((c.transactions, c.dialogs))
    };
    let uas = Sipp::new(Scenario::repo("uas_call_ringing"))
        .local(server_addr(net, 0).ip(), 5060)
        .duration(Duration::from_secs(3))
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let uac = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 21))
        .remote(listener)
        .calls(1)
        .rate(1)
        .duration(Duration::from_secs(2))
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    old.wait_for("the INVITE ringing", Duration::from_secs(5), |g| {
        sg_work(g).filter(|&(ringing, _)| ringing == 1)
    })
    .unwrap();
    let _new = upgrade(&site, admin);
    // The admin endpoint is the new run's now.
    assert_eq!(sg_work(&old), Some((1, 0)), "the ringing INVITE, carried");
    assert!(took_over(&old, "transactions").is_some_and(|n| n >= 1));
    old.wait_for("the call up in the new run", Duration::from_secs(10), |g| {
        sg_work(g).filter(|&w| w == (0, 1))
    })
    .unwrap();
    let r = uac.wait(Duration::from_secs(30)).unwrap();
    assert!(r.all_ok() && r.successful == 1, "{r:?}");
    let _ = uas.stop();
}
