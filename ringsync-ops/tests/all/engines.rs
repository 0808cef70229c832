//! R-EX-1 through the real binaries: `ringsync serve` drives a real
//! Kamailio's dispatcher set (JSON-RPC over HTTP) and a real HAProxy's
//! backend (runtime API) from the drain profiles, re-applies the state a
//! restarted Kamailio lost, and keeps driving one engine while another is
//! unreachable or answers garbage.
//!
//! Addresses: 127.0.86.x (Kamailio, its SIPp UAS and UAC), 127.0.87.x
//! (HAProxy and its servers), 127.0.88.x (the failing engines).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::engines::*;
use crate::common::served::{local, ok, remote, wait_until, Served};
use crate::common::TestSite;
use serde_json::Value;
use testbed::{free_port, Scenario, Sipp, SippHandle, Transport};
const KAM_IP: &str = "127.0.86.30";
const UAC_IP: &str = "127.0.86.10";

fn uas(addr: &str) -> SippHandle {
    let a: SocketAddr = addr.parse().unwrap();
    Sipp::new(Scenario::builtin("uas"))
        .local(a.ip(), a.port())
        .transport(Transport::Udp)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap()
}

/// How long the calls set up before a drain are held (then re-INVITE, BYE).
const HOLD: Duration = Duration::from_millis(3000);

/// A UAS that answers a whole call with its re-INVITE and BYE, copying the
/// Record-Route so in-dialog requests come through the proxy.
fn held_uas(addr: &str) -> SippHandle {
    let a: SocketAddr = addr.parse().unwrap();
    Sipp::new(Scenario::repo("uas_call"))
        .local(a.ip(), a.port())
        .transport(Transport::Udp)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap()
}

/// `n` calls through Kamailio (20/s); how many each UAS received.
/// Creates the profile `maint-a` (draining srv-a) in `site`'s store and
/// starts `ringsync serve` on it; with `engine_name`, returns once that
/// engine has reported a revision.
fn serve_with_maint_a(site: &TestSite, engine_name: Option<&str>) -> Served {
    ok(&local(
        site,
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ],
    ));
    let served = Served::start(site, &[]);
    if let Some(name) = engine_name {
        wait_until(Duration::from_secs(5), || {
            engine(&status_json(&served.url), name)["revision"].is_u64()
        });
    }
    served
}

/// `ringsync --api URL profile VERB maint-a` through `served`.
fn maint_a(served: &Served, verb: &str) {
    ok(&remote(&served.url, None, &["profile", verb, "maint-a"]));
}

fn calls_through(proxy: SocketAddr, n: u64) -> (u64, u64) {
    let (a, b) = (uas(UAS_A), uas(UAS_B));
    let uac = Sipp::new(Scenario::builtin("uac"))
        .local_ip(ip(UAC_IP))
        .remote(proxy)
        .calls(n)
        .rate(20)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    let r = uac.wait(Duration::from_secs(40)).unwrap();
    assert_eq!(r.successful, n, "every call answered: {r:?}");
    let (ra, rb) = (a.stop().unwrap(), b.stop().unwrap());
    (ra.created, rb.created)
}

/// R-EX-1: a profile drains sg-a: within a second Kamailio's dispatcher
/// disables its destination and new calls reach only sg-b, while the calls
/// sg-a took before keep their in-dialog requests to the end; Kamailio killed
/// and started again comes up with the list file's state, and the driver
/// re-applies the drain (the time it took is printed); lifted, both take
/// calls again. Every change is audited as `engine:kam`, and the engine's
/// view does not make sg-a `drained` (R-ST-4: nobody counted its work).
#[test]
fn r_ex_1_kamailio_dispatcher_follows_the_drain_through_a_kill_9() {
    let kam_ip = ip(KAM_IP);
    let sip = SocketAddr::new(kam_ip, free_port(kam_ip).unwrap());
    let rpc_at = SocketAddr::new(kam_ip, free_port(kam_ip).unwrap());
    let site = TestSite::with_text(&base_site(&kamailio_engine("kam", rpc_at)));
    let k = kamailio(sip, rpc_at);
    let proxy = start_kamailio(&k, rpc_at);
    let served = serve_with_maint_a(&site, Some("kam"));

    let (a, b) = calls_through(sip, 20);
    assert!(
        a > 0 && b > 0,
        "both UAS take calls before the drain: {a} {b}"
    );

    // Calls set up before the drain, held past it: their re-INVITE and BYE
    // follow the route set Kamailio recorded, not the dispatcher.
    let (held_a, held_b) = (held_uas(UAS_A), held_uas(UAS_B));
    let held = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(UAC_IP))
        .remote(sip)
        .calls(10)
        .rate(20)
        .duration(HOLD)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    let set_up = Instant::now();
    // Every INVITE of the batch is out after 0.5 s (10 at 20/s).
    std::thread::sleep(Duration::from_millis(1000));

    let t0 = Instant::now();
    maint_a(&served, "activate");
    let applied = wait_until(Duration::from_secs(1), || {
        flags(rpc_at, UAS_A).is_some_and(|f| f.starts_with('D'))
    });
    println!(
        "profile activate -> Kamailio applied: {:?} (CLI {:?})",
        applied,
        t0.elapsed()
    );
    assert!(
        set_up.elapsed() < HOLD,
        "the drain applied before the held calls' in-dialog requests ({:?})",
        set_up.elapsed()
    );
    let r = held.wait(Duration::from_secs(40)).unwrap();
    assert_eq!(r.successful, 10, "every held call ended normally: {r:?}");
    let (ra, rb) = (held_a.stop().unwrap(), held_b.stop().unwrap());
    assert!(
        ra.created > 0,
        "sg-a held calls through the drain: {ra:?} {rb:?}"
    );
    assert_eq!(
        ra.successful, ra.created,
        "R-EX-1: the drained sg-a still got the re-INVITE and BYE of its calls: {ra:?}"
    );
    assert!(flags(rpc_at, UAS_B).is_some_and(|f| f.starts_with('A')));
    let (a, b) = calls_through(sip, 20);
    assert_eq!(
        (a, b),
        (0, 20),
        "only sg-b takes new calls while sg-a drains"
    );

    let st = status_json(&served.url);
    let e = engine(&st, "kam");
    assert_eq!(e["reachable"], true, "{e}");
    assert_eq!(e["revision"], st["revision"], "{e}");
    let row = |id: &str| {
        e["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(row("sg-a")["want"], "drain");
    assert_eq!(row("sg-a")["agrees"], true);
    let sg_a = st["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "sg-a")
        .unwrap();
    assert_ne!(
        sg_a["state"], "drained",
        "the dispatcher counts no dialogs (R-ST-4): {sg_a}"
    );

    // kill -9 and start again: the list file says active.
    proxy.kill();
    let proxy = start_kamailio(&k, rpc_at);
    let up = Instant::now();
    let reapplied = wait_until(Duration::from_secs(5), || {
        flags(rpc_at, UAS_A).is_some_and(|f| f.starts_with('D'))
    });
    println!(
        "Kamailio restart -> drain re-applied: {reapplied:?} after its RPC answered ({:?})",
        up.elapsed()
    );
    let e = engine(&status_json(&served.url), "kam").clone();
    assert!(e["corrections"].as_u64().unwrap() >= 1, "{e}");
    assert_eq!(e["last_correction"]["instance"], "sg-a", "{e}");
    let (a, b) = calls_through(sip, 20);
    assert_eq!(
        (a, b),
        (0, 20),
        "the restarted Kamailio still sends nothing to sg-a"
    );

    maint_a(&served, "deactivate");
    wait_until(Duration::from_secs(1), || {
        flags(rpc_at, UAS_A).is_some_and(|f| f.starts_with('A'))
    });
    let (a, b) = calls_through(sip, 20);
    assert!(
        a > 0 && b > 0,
        "both UAS take calls after the lift: {a} {b}"
    );

    let audit: Value = serde_json::from_str(&ok(&local(&site, &["--json", "audit"]))).unwrap();
    let by_engine: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["who"] == "engine:kam")
        .collect();
    let actions: Vec<&str> = by_engine
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"engine drain"), "{actions:?}");
    assert!(
        actions
            .iter()
            .any(|a| a.starts_with("engine drain (re-applied")),
        "{actions:?}"
    );
    assert!(actions.contains(&"engine active"), "{actions:?}");
    assert!(
        by_engine
            .iter()
            .all(|r| r["target"] == "sg-a" && r["status"] == 200),
        "{by_engine:?}"
    );
    proxy.stop();
}

/// R-EX-1 (issue 38): a destination Kamailio probes (`AP`) is drained; an
/// operator sets it active by hand (`AX`: without the probing flag); the
/// driver corrects it, and the lift gives the probing flag back (`AP`),
/// as it was before the drain, not the hand edit's `AX`.
#[test]
fn r_ex_1_kamailio_probing_flag_comes_back_after_a_hand_edit() {
    let kam_ip = ip(KAM_IP);
    let sip = SocketAddr::new(kam_ip, free_port(kam_ip).unwrap());
    let rpc_at = SocketAddr::new(kam_ip, free_port(kam_ip).unwrap());
    let site = TestSite::with_text(&base_site(&kamailio_engine("kam", rpc_at)));
    let proxy = start_kamailio(&kamailio(sip, rpc_at).probing(), rpc_at);
    assert_eq!(flags(rpc_at, UAS_A).as_deref(), Some("AP"));
    let served = serve_with_maint_a(&site, None);
    maint_a(&served, "activate");
    let drained = || flags(rpc_at, UAS_A).is_some_and(|f| f.starts_with('D'));
    wait_until(Duration::from_secs(5), drained);

    let uri = format!("sip:{UAS_A};transport=udp");
    rpc_with(
        rpc_at,
        "dispatcher.set_state",
        &serde_json::json!(["a", 1, uri]),
    )
    .expect("the hand edit");
    assert_eq!(
        flags(rpc_at, UAS_A).as_deref(),
        Some("AX"),
        "a hand-set active destination has no probing flag"
    );
    // The driver corrects the hand edit (wait_until fails the test if not).
    wait_until(Duration::from_secs(10), drained);

    maint_a(&served, "deactivate");
    wait_until(Duration::from_secs(5), || {
        flags(rpc_at, UAS_A).is_some_and(|f| f.starts_with('A'))
    });
    assert_eq!(
        flags(rpc_at, UAS_A).as_deref(),
        Some("AP"),
        "the lift gives back the probing flag the destination had"
    );
    proxy.stop();
}

/// R-EX-1: a profile drains sg-a: HAProxy's server goes to `drain` within
/// a second, new connections reach only sg-b while one opened before keeps
/// working; lifted, both take connections again.
#[test]
fn r_ex_1_haproxy_server_drains_and_open_connections_stay() {
    let (hs, admin, a, b) = haproxy_site("127.0.87.40");
    let site = TestSite::with_text(&sites(
        &a.to_string(),
        &b.to_string(),
        &haproxy_engine("hap", &admin.to_string()),
    ));
    let served = serve_with_maint_a(&site, Some("hap"));
    assert_eq!(spread(hs.front, 4), ["A", "B"]);
    // One open to A before the drain.
    let (mut open, name) = (0..4)
        .map(|_| connect(hs.front))
        .find(|(_, n)| n == "A")
        .unwrap();
    assert_eq!(name, "A");

    let t0 = Instant::now();
    maint_a(&served, "activate");
    wait_until(Duration::from_secs(1), || {
        says(&status_json(&served.url), "hap", "sg-a").as_deref() == Some("drain")
    });
    println!(
        "profile activate -> HAProxy drain verified: {:?}",
        t0.elapsed()
    );
    assert_eq!(
        spread(hs.front, 6),
        ["B"],
        "new connections avoid the draining server"
    );
    open.write_all(b"still here\n").unwrap();
    let mut buf = [0u8; 64];
    let n = open.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"still here\n", "the open connection to A stays");

    maint_a(&served, "deactivate");
    wait_until(Duration::from_secs(1), || {
        says(&status_json(&served.url), "hap", "sg-a").as_deref() == Some("ready")
    });
    assert_eq!(spread(hs.front, 4), ["A", "B"]);
    let audit: Value = serde_json::from_str(&ok(&local(&site, &["--json", "audit"]))).unwrap();
    let actions: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["who"] == "engine:hap")
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["engine drain", "engine active"]);
}

/// R-EX-1: engines that cannot be driven (nothing listening, garbage
/// answers, an answer that never comes) cost the others nothing: the real
/// HAProxy still drains within a second, status names each failed engine
/// and why, the metrics say which is reachable, and serve keeps serving.
#[test]
fn r_ex_1_failing_engines_do_not_block_the_others() {
    let (hs, admin, a, b) = haproxy_site("127.0.88.40");
    let garbage_at = garbage_server("127.0.88.2:0");
    let slow_at = silent_server("127.0.88.3:0");
    let gone = SocketAddr::new(ip("127.0.88.1"), free_port(ip("127.0.88.1")).unwrap());
    let engines = [
        kamailio_engine("kam-gone", gone),
        kamailio_engine("kam-garbage", garbage_at),
        haproxy_engine("hap-garbage", &garbage_at.to_string()),
        haproxy_engine("hap-slow", &slow_at.to_string()),
        haproxy_engine("hap", &admin.to_string()),
    ]
    .concat()
    // The Kamailio engines name the test's UAS destinations; these
    // instances are the HAProxy's servers.
    .replace(&format!("sip:{UAS_A};transport=udp"), &format!("sip:{a}"))
    .replace(&format!("sip:{UAS_B};transport=udp"), &format!("sip:{b}"));
    let site = TestSite::with_text(&sites(&a.to_string(), &b.to_string(), &engines));
    let served = serve_with_maint_a(&site, Some("hap"));

    let t0 = Instant::now();
    maint_a(&served, "activate");
    wait_until(Duration::from_secs(1), || {
        says(&status_json(&served.url), "hap", "sg-a").as_deref() == Some("drain")
    });
    println!(
        "with three failing engines, HAProxy drained in {:?}",
        t0.elapsed()
    );
    assert_eq!(spread(hs.front, 4), ["B"]);

    // Each failed engine is named with its reason once its bounded
    // request (300 ms) has failed.
    let failing = ["kam-gone", "kam-garbage", "hap-garbage", "hap-slow"];
    wait_until(Duration::from_secs(3), || {
        let st = status_json(&served.url);
        failing.iter().all(|n| engine(&st, n)["error"].is_string())
    });
    let st = status_json(&served.url);
    let err = |n: &str| {
        engine(&st, n)["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(engine(&st, "kam-gone")["reachable"], false, "{st}");
    assert!(
        err("kam-gone").contains("unreachable"),
        "{}",
        err("kam-gone")
    );
    assert!(
        err("kam-garbage").contains("garbage"),
        "{}",
        err("kam-garbage")
    );
    assert!(
        err("hap-garbage").contains("garbage"),
        "{}",
        err("hap-garbage")
    );
    assert!(err("hap-slow").contains("no answer"), "{}", err("hap-slow"));
    assert_eq!(engine(&st, "hap")["reachable"], true);
    assert!(engine(&st, "hap")["error"].is_null(), "{st}");
    for n in failing {
        assert!(
            engine(&st, n)["revision"].is_null(),
            "{n} holds nothing: {st}"
        );
    }
    // The table names them too.
    let text = ok(&remote(&served.url, None, &["status"]));
    assert!(
        text.contains("engines:") && text.contains("kam-gone") && text.contains("UNREACHABLE"),
        "{text}"
    );
    let (code, metrics) = crate::common::served::call(served.addr, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("ringsync_engine_reachable{engine=\"hap\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ringsync_engine_reachable{engine=\"kam-gone\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ringsync_engine_applied_revision{engine=\"hap\"}"),
        "{metrics}"
    );
}

/// R-EX-1 (issue 38): an engine that never answered well is not "not
/// asked yet": nothing listening, garbage and silence each make it
/// `reachable: false` with a `since_ms`, alike in `/v1/status`, the status
/// text and `/metrics`; a refused connection says so in the OS's words,
/// not only `client error (Connect)`.
#[test]
fn r_ex_1_engines_that_never_answered_well_are_unreachable_since_and_say_why() {
    let gone_ip = ip("127.0.88.5");
    let kam_gone = SocketAddr::new(gone_ip, free_port(gone_ip).unwrap());
    let hap_gone = SocketAddr::new(gone_ip, free_port(gone_ip).unwrap());
    let garbage = garbage_server("127.0.88.6:0");
    let silent = silent_server("127.0.88.7:0");
    let engines = [
        kamailio_engine("kam-gone", kam_gone),
        haproxy_engine("hap-gone", &hap_gone.to_string()),
        kamailio_engine("kam-garbage", garbage),
        haproxy_engine("hap-garbage", &garbage.to_string()),
        kamailio_engine("kam-silent", silent),
        haproxy_engine("hap-silent", &silent.to_string()),
    ]
    .concat();
    let names = [
        "kam-gone",
        "hap-gone",
        "kam-garbage",
        "hap-garbage",
        "kam-silent",
        "hap-silent",
    ];
    let site = TestSite::with_text(&base_site(&engines));
    let served = Served::start(&site, &[]);
    // Each fails its first bounded request (500 ms at most).
    wait_until(Duration::from_secs(3), || {
        let st = status_json(&served.url);
        names.iter().all(|n| engine(&st, n)["error"].is_string())
    });
    let st = status_json(&served.url);
    for n in names {
        let e = engine(&st, n);
        assert_eq!(e["reachable"], false, "{n}: {e}");
        assert!(e["since_ms"].is_u64(), "{n}: {e}");
    }
    for n in ["kam-gone", "hap-gone"] {
        let err = engine(&st, n)["error"].as_str().unwrap().to_lowercase();
        assert!(err.contains("connection refused"), "{n}: {err}");
    }

    let text = ok(&remote(&served.url, None, &["status"]));
    assert!(!text.contains("not asked yet"), "{text}");
    for n in names {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{n} (")))
            .unwrap_or_else(|| panic!("{n} missing in\n{text}"));
        assert!(line.contains("UNREACHABLE since"), "{line}");
    }
    let (code, metrics) = crate::common::served::call(served.addr, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    for n in names {
        assert!(
            metrics.contains(&format!("ringsync_engine_reachable{{engine=\"{n}\"}} 0")),
            "{n}: {metrics}"
        );
    }
}
