//! Live reload of the site file through the real binaries (issue 27): the
//! `sip-gate` binary gets SIGHUP while real SIPp calls run through it.
//!
//! A file that adds an sg to the pool and changes a listener's access list
//! is taken without a failed call, a lost registration or a dropped TCP
//! connection: the new sg takes new dialogs, the access list is in force. A
//! file that changes a listener's bind address, or does not load, is
//! refused, said in the log (with the line and column for a syntax error)
//! and counted, and the config in force stays whole: the old pool still
//! routes and the sg the refused file added gets nothing.
//!
//! Addresses: `127.127.N.0/24`; the gate's call listener on `.1:5060`, its
//! registration listener on `.2:5060`, its admin on `.1:9091`; sg-0..2 on
//! `.11`-`.13` (UDP and TCP), the registrar esg-r on `.21`; callers on
//! `.100` (UDP), `.103` (TCP), `.101` (the source the new access list
//! denies) and `.102` (the registering UA). Loads are bounded: at most
//! 20 calls/s for a few seconds.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use testbed::bins::{BinDir, Node};
use testbed::fixture::{Mode, SiteFile};
use testbed::{wait_for, Etcd, Scenario, Sipp, SippHandle, SippReport, Transport};

fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 127, net, host))
}

fn sip(net: u8, host: u8) -> SocketAddr {
    SocketAddr::new(ip(net, host), 5060)
}

fn admin(net: u8) -> SocketAddr {
    SocketAddr::new(ip(net, 1), 9091)
}

/// The site: sg-0 and sg-1 in the `sg` pool (and sg-2 when `sg2`), a
/// balance listener over it (with `access`, TOML lines of its
/// `[listener.access]`, when not empty) bound at `calls`, and a guard
/// listener in front of the registrar esg-r.
fn site(net: u8, sg2: bool, calls: SocketAddr, access: &str) -> SiteFile {
    let mut s = SiteFile::new(&format!("reload-{net}"))
        .admin(admin(net), SocketAddr::new(ip(net, 1), 9092))
        .servers(&["srv-0", "srv-1", "srv-2", "srv-r"])
        .instance("sg-0", "sg", "srv-0", sip(net, 11))
        .instance("sg-1", "sg", "srv-1", sip(net, 12))
        .instance("esg-r", "esg", "srv-r", sip(net, 21));
    if sg2 {
        s = s.instance("sg-2", "sg", "srv-2", sip(net, 13));
    }
    let access = if access.is_empty() {
        String::new()
    } else {
        format!("[listener.access]\n{access}")
    };
    let transports = "transports = [\"udp\", \"tcp\"]";
    s.listener(
        "calls",
        calls,
        Mode::Balance("sg"),
        "subscriber",
        &format!("{transports}\n{access}"),
    )
    .listener(
        "reg",
        sip(net, 2),
        Mode::Guard("esg-r"),
        "subscriber",
        transports,
    )
}

/// A UAS answering calls at `at` over `transport`.
fn uas(scenario: &str, at: SocketAddr, transport: Transport) -> SippHandle {
    Sipp::new(Scenario::repo(scenario))
        .local(at.ip(), at.port())
        .transport(transport)
        .timeout(Duration::from_secs(90))
        .spawn()
        .unwrap()
}

/// `calls` calls from `from` to `to` at `rate` per second, each held
/// `hold`.
fn caller(
    scenario: &str,
    from: IpAddr,
    to: SocketAddr,
    transport: Transport,
    (calls, rate, hold): (u64, u32, Duration),
) -> SippHandle {
    let mut s = Sipp::new(Scenario::repo(scenario))
        .local_ip(from)
        .remote(to)
        .transport(transport)
        .calls(calls)
        .rate(rate)
        .timeout(Duration::from_secs(60));
    if !hold.is_zero() {
        s = s.duration(hold);
    }
    s.spawn().unwrap()
}

/// `calls` runs of `scenario` (at `rate` a second, none held) from `from`
/// to `to` over UDP, every one of which must succeed within `within`;
/// `what` names them when one does not.
fn all_succeed(
    what: &str,
    scenario: &str,
    from: IpAddr,
    to: SocketAddr,
    (calls, rate): (u64, u32),
    within: Duration,
) {
    let run = caller(
        scenario,
        from,
        to,
        Transport::Udp,
        (calls, rate, Duration::ZERO),
    );
    assert_all_ok(what, &run.wait(within).unwrap(), calls);
}

/// The gate binary on `site`, once its work report answers.
fn start_gate(site: &Path, net: u8) -> Node {
    let gate = Node::gate(site)
        .admin(admin(net))
        .args(["--node", &format!("reload-{net}")])
        .start()
        .unwrap();
    gate.wait_for(
        "the gate's work report",
        Duration::from_secs(10),
        Node::work,
    )
    .unwrap();
    gate
}

/// `sipgate_config_reloads_total{result}` on `gate`.
fn reloads(gate: &Node, result: &str) -> f64 {
    gate.metric(&format!(
        "sipgate_config_reloads_total{{result=\"{result}\"}}"
    ))
    .unwrap()
}

/// Sends SIGHUP and waits until `gate` counted one more reload as `result`.
pub(crate) fn sighup(gate: &Node, result: &str) {
    let before = reloads(gate, result);
    gate.signal("HUP");
    wait_for(
        &format!("a reload counted as {result}"),
        Duration::from_secs(5),
        || (reloads(gate, result) > before).then_some(()),
    )
    .unwrap();
}

/// New dialogs the gate handed to `instance`.
fn new_work(gate: &Node, instance: &str) -> f64 {
    gate.metric(&format!(
        "sipgate_new_work_total{{instance=\"{instance}\"}}"
    ))
    .unwrap()
}

/// The registrations the gate counts for the registrar.
fn registrations(gate: &Node) -> u64 {
    gate.work()
        .map_or(0, |r| r.instances["esg-r"].counts.registrations)
}

/// How long the last reload took, from the gate's metric, in µs.
fn reload_us(gate: &Node) -> f64 {
    gate.metric("sipgate_config_reload_seconds").unwrap() * 1e6
}

fn assert_all_ok(what: &str, r: &SippReport, calls: u64) {
    assert!(
        r.all_ok() && r.successful == calls,
        "{what}: {} of {calls} calls ok, {} failed {:?}: {}",
        r.successful,
        r.failed,
        r.failures,
        r.errors
    );
}

/// Issue 27: SIGHUP with a file that adds sg-2 to the pool and denies a
/// source on the call listener, while UDP and TCP calls run and a UA is
/// registered: no call fails, the TCP caller's one connection carries on,
/// the registration stays counted, sg-2 takes new dialogs and the denied
/// source gets 403. Then four more SIGHUPs under the same load time the
/// reload (logged, `sipgate_config_reload_seconds`).
#[test]
fn reload_under_load_adds_an_sg_and_an_access_list_without_losing_a_call() {
    BinDir::locate().program("sip-gate").unwrap(); // built before any timing starts
    let net = 1;
    let dir = tempfile::tempdir().unwrap();
    let path = site(net, false, sip(net, 1), "").write(dir.path());
    let mut gate = start_gate(&path, net);
    let sgs: Vec<(SippHandle, SippHandle)> = [11, 12, 13]
        .iter()
        .map(|&h| {
            (
                uas("uas_call", sip(net, h), Transport::Udp),
                uas("uas_call", sip(net, h), Transport::Tcp),
            )
        })
        .collect();
    let registrar = uas("uas_register", sip(net, 21), Transport::Udp);
    all_succeed(
        "the registration",
        "uac_register",
        ip(net, 102),
        sip(net, 2),
        (1, 1),
        Duration::from_secs(10),
    );
    assert_eq!(registrations(&gate), 1);
    // Before the reload the source .101 may call.
    all_succeed(
        "the .101 call before",
        "uac_call",
        ip(net, 101),
        sip(net, 1),
        (1, 1),
        Duration::from_secs(10),
    );

    // 8 s of UDP calls at 15/s and TCP calls at 4/s on one connection,
    // each held 1 s.
    let udp = caller(
        "uac_call",
        ip(net, 100),
        sip(net, 1),
        Transport::Udp,
        (120, 15, Duration::from_secs(1)),
    );
    let tcp = caller(
        "uac_call",
        ip(net, 103),
        sip(net, 1),
        Transport::Tcp,
        (32, 4, Duration::from_secs(1)),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(new_work(&gate, "sg-2"), 0.0, "sg-2 is not in the file yet");
    let deny = format!("deny = [\"{}/32\"]", ip(net, 101));
    site(net, true, sip(net, 1), &deny).write(dir.path());
    sighup(&gate, "applied");
    let mut took = vec![reload_us(&gate)];
    // sg-2 takes new dialogs from the load still running.
    wait_for("sg-2 to take new dialogs", Duration::from_secs(4), || {
        (new_work(&gate, "sg-2") > 0.0).then_some(())
    })
    .unwrap();
    // The access list is in force: .101 gets 403 from the gate.
    all_succeed(
        "the .101 call after",
        "uac_call_expect_403",
        ip(net, 101),
        sip(net, 1),
        (1, 1),
        Duration::from_secs(10),
    );
    // The same file again, four times, still under load: timed.
    for _ in 0..4 {
        sighup(&gate, "unchanged");
        took.push(reload_us(&gate));
    }

    assert_all_ok(
        "UDP calls",
        &udp.wait(Duration::from_secs(40)).unwrap(),
        120,
    );
    assert_all_ok("TCP calls", &tcp.wait(Duration::from_secs(40)).unwrap(), 32);
    assert_eq!(registrations(&gate), 1, "the registration is still counted");
    let sg2 = new_work(&gate, "sg-2");
    assert!(sg2 > 0.0, "sg-2 got {sg2} new dialogs");
    let log = gate.log();
    assert_eq!(log.matches("site file reloaded").count(), 5, "{log}");
    took.sort_by(f64::total_cmp);
    eprintln!(
        "reload under load: median {:.0} µs, max {:.0} µs ({took:?})",
        testbed::stats::median(took.clone()),
        took.last().copied().unwrap_or_default()
    );
    gate.stop(Duration::from_secs(10));
    for (u, t) in sgs {
        let _ = u.stop();
        let _ = t.stop();
    }
    let _ = registrar.stop();
}

/// Issue 27: a file that changes the call listener's bind address (and
/// adds sg-2) is refused with the reason; nothing of it applies: the
/// old pool still routes every call and sg-2 gets none. Then a file with
/// a syntax error is refused naming its line and column.
#[test]
fn reload_refuses_a_new_bind_address_and_a_broken_file_and_keeps_the_old_config() {
    BinDir::locate().program("sip-gate").unwrap();
    let net = 2;
    let dir = tempfile::tempdir().unwrap();
    let path = site(net, false, sip(net, 1), "").write(dir.path());
    let mut gate = start_gate(&path, net);
    let sgs: Vec<SippHandle> = [11, 12, 13]
        .iter()
        .map(|&h| uas("uas_call", sip(net, h), Transport::Udp))
        .collect();

    let moved = SocketAddr::new(ip(net, 3), 5060);
    assert_eq!(site(net, true, moved, "").write(dir.path()), path);
    sighup(&gate, "refused");
    let log = gate.log();
    assert!(
        log.contains("listener `calls`: bind address changed"),
        "the reason is logged: {log}"
    );
    all_succeed(
        "calls after the refusal",
        "uac_call",
        ip(net, 100),
        sip(net, 1),
        (20, 10),
        Duration::from_secs(20),
    );
    assert_eq!(
        new_work(&gate, "sg-2"),
        0.0,
        "nothing of the refused file applies"
    );
    assert_eq!(
        new_work(&gate, "sg-0") + new_work(&gate, "sg-1"),
        20.0,
        "the old pool routed every call"
    );

    // Line 2 is `name = ` with nothing after it.
    let broken =
        std::fs::read_to_string(&path)
            .unwrap()
            .replacen("name = \"reload-2\"", "name = ", 1);
    std::fs::write(&path, broken).unwrap();
    sighup(&gate, "invalid");
    let log = gate.log();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("site file not reloaded"))
        .unwrap_or_else(|| panic!("no refusal logged: {log}"));
    // `FILE:LINE:COLUMN: what`.
    assert!(line.contains("site.toml:2:"), "{line}");
    all_succeed(
        "calls after the broken file",
        "uac_call",
        ip(net, 100),
        sip(net, 1),
        (10, 10),
        Duration::from_secs(20),
    );
    assert_eq!(new_work(&gate, "sg-0") + new_work(&gate, "sg-1"), 30.0);
    gate.stop(Duration::from_secs(10));
    for s in sgs {
        let _ = s.stop();
    }
}

/// A site on etcd whose call listener binds `127.127.3.1:0` (each gate
/// gets its own port), plus `extra` lines.
fn etcd_site(endpoints: &[String], extra: &str) -> String {
    let eps: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
    let net = 3;
    let s = SiteFile::new("reload-3")
        .servers(&["srv-0", "srv-1"])
        .instance("sg-0", "sg", "srv-0", sip(net, 11))
        .listener(
            "calls",
            SocketAddr::new(ip(net, 1), 0),
            Mode::Balance("sg"),
            "subscriber",
            "",
        )
        .raw(extra);
    let text = s.text().replace(
        "[store]\nkind = \"embedded\"\npath = \"profiles.json\"\n",
        &format!(
            "[store]\nkind = \"etcd\"\nendpoints = [{}]\nprefix = \"/drain/reload3\"\n",
            eps.join(", ")
        ),
    );
    assert!(text.contains("kind = \"etcd\""), "{text}");
    text
}

/// The `site_file` of `ringsync --json status` read with `site`.
fn status_site_file(site: &Path) -> serde_json::Value {
    let bins = BinDir::locate();
    let st = testbed::bins::ringsync(&bins, site, &["status"]).unwrap();
    st["site_file"].clone()
}

/// Issue 27: each gate reports the hash of the site file it runs (its
/// metrics, its node record, `ringsync status`); two gates on different
/// files make `status` warn (JSON and text), and the warning goes once the
/// lagging gate reloads the file the other runs.
#[test]
fn status_warns_while_two_gates_run_different_site_files() {
    BinDir::locate().program("ringsync").unwrap(); // built before any timing starts
    let etcd = Etcd::single(ip(3, 10)).unwrap();
    let eps = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let old = etcd_site(&eps, "");
    let new = etcd_site(
        &eps,
        "[[instance]]\nid = \"sg-1\"\nservice = \"sg\"\nserver = \"srv-1\"\nsip = \"127.127.3.12:5060\"\n",
    );
    let (old_hash, new_hash) = (
        ringsync::config::file_hash(old.as_bytes()),
        ringsync::config::file_hash(new.as_bytes()),
    );
    let file = |k: u8, text: &str| {
        let d = dir.path().join(format!("g{k}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("site.toml"), text).unwrap();
        d.join("site.toml")
    };
    let (f1, f2) = (file(1, &old), file(2, &new));
    let gate = |k: u8, f: &Path| {
        let mut g = Node::gate(f)
            .admin(SocketAddr::new(ip(3, k), 9091))
            .args(["--node", &format!("g{k}")])
            .start()
            .unwrap();
        g.wait_ready().unwrap();
        g
    };
    let (mut g1, mut g2) = (gate(1, &f1), gate(2, &f2));
    let info = |g: &Node, h: &str| {
        g.metric(&format!("ringsync_site_file_info{{hash=\"{h}\"}}"))
            .unwrap()
    };
    assert_eq!(info(&g1, &old_hash), 1.0);
    assert_eq!(info(&g2, &new_hash), 1.0);

    let st = wait_for("both gates in status", Duration::from_secs(10), || {
        let f = status_site_file(&f2);
        (f["nodes"].as_object()?.len() == 2).then_some(f)
    })
    .unwrap();
    assert_eq!(st["hash"], new_hash.as_str());
    assert_eq!(st["nodes"][&old_hash], serde_json::json!(["g1"]), "{st}");
    assert_eq!(st["nodes"][&new_hash], serde_json::json!(["g2"]), "{st}");
    let warning = st["warning"].as_str().unwrap_or_default();
    assert!(
        warning.contains("do not run the same site file") && warning.contains(&old_hash),
        "{st}"
    );
    let out = testbed::bins::command("ringsync")
        .unwrap()
        .arg("--config")
        .arg(&f2)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("warning: the nodes do not run the same site file"),
        "{text}"
    );
    assert!(
        text.contains(&format!("g1, profile revision 0, site file {old_hash}")),
        "{text}"
    );

    // g1 takes the new file: one hash, no warning.
    std::fs::write(&f1, &new).unwrap();
    sighup(&g1, "applied");
    assert_eq!(info(&g1, &new_hash), 1.0);
    assert_eq!(info(&g1, &old_hash), 0.0, "the old hash's series goes to 0");
    let st = wait_for("one site file in status", Duration::from_secs(10), || {
        let f = status_site_file(&f2);
        (f["nodes"].as_object()?.len() == 1).then_some(f)
    })
    .unwrap();
    assert_eq!(
        st["nodes"][&new_hash],
        serde_json::json!(["g1", "g2"]),
        "{st}"
    );
    assert!(st.get("warning").is_none(), "{st}");
    g1.stop(Duration::from_secs(10));
    g2.stop(Duration::from_secs(10));
    drop(etcd);
}

/// A site on net 4 with `[admin]` lines `admin` (the gate's admin address
/// stays `127.127.4.1:9091`).
fn admin_site(admin: &str) -> SiteFile {
    let net = 4;
    SiteFile::new("reload-4")
        .section("admin", admin)
        .servers(&["srv-0"])
        .instance("sg-0", "sg", "srv-0", sip(net, 11))
        .listener("calls", sip(net, 1), Mode::Balance("sg"), "subscriber", "")
}

/// Issue 38: adding `[admin] tokens` (a field of `ringsync serve`) to the
/// site file is applied by a gate's reload (its admin address did not
/// change): the gate then reports the new file's hash, so `status` stops
/// warning that the nodes run different files. Moving the gate's admin
/// address is refused, naming `admin.gate_bind`.
#[test]
fn reload_takes_admin_tokens_and_refuses_a_moved_gate_admin_naming_it() {
    BinDir::locate().program("sip-gate").unwrap();
    let net = 4;
    let dir = tempfile::tempdir().unwrap();
    let bind = format!("gate_bind = \"{}\"", admin(net));
    let path = admin_site(&bind).write(dir.path());
    let mut gate = start_gate(&path, net);
    let info = |h: &str| {
        gate.metric(&format!("ringsync_site_file_info{{hash=\"{h}\"}}"))
            .unwrap()
    };
    let old_hash = ringsync::config::file_hash(admin_site(&bind).text().as_bytes());
    assert_eq!(info(&old_hash), 1.0);

    let with_tokens = admin_site(&format!("{bind}\ntokens = \"tokens\""));
    assert_eq!(with_tokens.write(dir.path()), path);
    let new_hash = ringsync::config::file_hash(with_tokens.text().as_bytes());
    sighup(&gate, "applied");
    assert_eq!(info(&new_hash), 1.0, "the gate runs the file with tokens");
    assert_eq!(info(&old_hash), 0.0);
    assert_eq!(reloads(&gate, "refused"), 0.0, "{}", gate.log());

    let moved = admin_site(&format!(
        "gate_bind = \"{}\"\ntokens = \"tokens\"",
        SocketAddr::new(ip(net, 2), 9091)
    ));
    moved.write(dir.path());
    sighup(&gate, "refused");
    let log = gate.log();
    assert!(
        log.contains("admin.gate_bind changed (127.127.4.1:9091 -> 127.127.4.2:9091)"),
        "the refusal names the field: {log}"
    );
    assert!(!log.contains("[admin]: the admin endpoint"), "{log}");
    assert_eq!(info(&new_hash), 1.0, "the file with tokens stays in force");
    gate.stop(Duration::from_secs(10));
}
