//! R-EX-1 through the real binaries: `ringsync serve` drives a real
//! Kamailio's dispatcher set (JSON-RPC over HTTP) and a real HAProxy's
//! backend (runtime API) from the drain profiles, re-applies the state a
//! restarted Kamailio lost, and keeps driving one engine while another is
//! unreachable or answers garbage.
//!
//! Addresses: 127.0.86.x (Kamailio, its SIPp UAS and UAC), 127.0.87.x
//! (HAProxy and its servers), 127.0.88.x (the failing engines).

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::served::{local, ok, remote, wait_until, Served};
use common::TestSite;
use serde_json::Value;
use testbed::{free_port, Kamailio, KamailioHandle, Scenario, Sipp, SippHandle, Transport};

const UAS_A: &str = "127.0.86.21:5060";
const UAS_B: &str = "127.0.86.22:5060";
const KAM_IP: &str = "127.0.86.30";
const UAC_IP: &str = "127.0.86.10";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn base_site(extra_instances: &str, engines: &str) -> String {
    format!(
        r#"
[site]
name = "eng"

[admin]
bind = "127.0.0.1:0"
gate_bind = "127.0.0.1:9"
media_bind = "127.0.0.1:7"

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "{UAS_A}"
[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "{UAS_B}"
{extra_instances}
{engines}
"#
    )
}

fn kamailio_engine(name: &str, rpc: SocketAddr) -> String {
    format!(
        r#"
[[engine]]
name = "{name}"
kind = "kamailio-dispatcher"
url = "http://{rpc}/RPC"
sets = {{ sg = 1 }}
destinations = {{ sg-a = "sip:{UAS_A};transport=udp", sg-b = "sip:{UAS_B};transport=udp" }}
resync_ms = 500
timeout_ms = 500
"#
    )
}

/// Kamailio with the bench config's JSON-RPC variant: SIP on UDP, the RPC
/// on its own TCP port.
fn kamailio(sip: SocketAddr, rpc: SocketAddr) -> Kamailio {
    Kamailio::new()
        .workers(1)
        .listen(sip)
        .transports(&[Transport::Udp])
        .destination(UAS_A.parse().unwrap(), Transport::Udp)
        .destination(UAS_B.parse().unwrap(), Transport::Udp)
        .define("WITH_JSONRPC")
        .arg("-l")
        .arg(format!("tcp:{rpc}"))
}

/// One JSON-RPC call to Kamailio, as an operator's curl would make it.
fn rpc(at: SocketAddr, method: &str) -> Option<Value> {
    let mut s = TcpStream::connect_timeout(&at, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let body = format!(r#"{{"jsonrpc":"2.0","method":"{method}","id":1}}"#);
    let req = format!(
        "POST /RPC HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    // Kamailio keeps the connection open: read the body by its length.
    let mut resp = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        resp.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&resp);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let len: usize = head.lines().find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().ok())
        })??;
        if body.len() >= len {
            return serde_json::from_str(&body[..len]).ok();
        }
    }
}

/// `dispatcher.list`'s flags of a UAS's destination.
fn flags(at: SocketAddr, uas: &str) -> Option<String> {
    let v = rpc(at, "dispatcher.list")?;
    let want = format!("sip:{uas};transport=udp");
    v["result"]["RECORDS"][0]["SET"]["TARGETS"]
        .as_array()?
        .iter()
        .find(|t| t["DEST"]["URI"] == want.as_str())
        .map(|t| t["DEST"]["FLAGS"].as_str().unwrap_or_default().to_owned())
}

fn uas(addr: &str) -> SippHandle {
    let a: SocketAddr = addr.parse().unwrap();
    Sipp::new(Scenario::builtin("uas"))
        .local(a.ip(), a.port())
        .transport(Transport::Udp)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap()
}

/// `n` calls through Kamailio (20/s); how many each UAS received.
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

fn status_json(url: &str) -> Value {
    serde_json::from_str(&ok(&remote(url, None, &["--json", "status"]))).unwrap()
}

fn engine<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["engines"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no engine {name} in {st}"))
}

fn start_kamailio(k: &Kamailio, rpc_at: SocketAddr) -> KamailioHandle {
    let h = k.clone().start().unwrap();
    wait_until(Duration::from_secs(5), || {
        rpc(rpc_at, "dispatcher.list").is_some()
    });
    h
}

/// R-EX-1: a profile drains sg-a: within a second Kamailio's dispatcher
/// disables its destination and new calls reach only sg-b; Kamailio killed
/// and started again comes up with the list file's state, and the driver
/// re-applies the drain (the time it took is printed); lifted, both take
/// calls again. Every change is audited as `engine:kam`, and the engine's
/// view does not make sg-a `drained` (R-ST-4: nobody counted its work).
#[test]
fn r_ex_1_kamailio_dispatcher_follows_the_drain_through_a_kill_9() {
    let kam_ip = ip(KAM_IP);
    let sip = SocketAddr::new(kam_ip, free_port(kam_ip).unwrap());
    let rpc_at = SocketAddr::new(kam_ip, free_port(kam_ip).unwrap());
    let site = TestSite::with_text(&base_site("", &kamailio_engine("kam", rpc_at)));
    let k = kamailio(sip, rpc_at);
    let proxy = start_kamailio(&k, rpc_at);
    ok(&local(
        &site,
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ],
    ));
    let served = Served::start(&site, &[]);
    wait_until(Duration::from_secs(5), || {
        engine(&status_json(&served.url), "kam")["revision"].is_u64()
    });

    let (a, b) = calls_through(sip, 20);
    assert!(
        a > 0 && b > 0,
        "both UAS take calls before the drain: {a} {b}"
    );

    let t0 = Instant::now();
    ok(&remote(
        &served.url,
        None,
        &["profile", "activate", "maint-a"],
    ));
    let applied = wait_until(Duration::from_secs(1), || {
        flags(rpc_at, UAS_A).is_some_and(|f| f.starts_with('D'))
    });
    println!(
        "profile activate -> Kamailio applied: {:?} (CLI {:?})",
        applied,
        t0.elapsed()
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

    ok(&remote(
        &served.url,
        None,
        &["profile", "deactivate", "maint-a"],
    ));
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
    assert!(actions.iter().any(|a| *a == "engine drain"), "{actions:?}");
    assert!(
        actions
            .iter()
            .any(|a| a.starts_with("engine drain (re-applied")),
        "{actions:?}"
    );
    assert!(actions.iter().any(|a| *a == "engine active"), "{actions:?}");
    assert!(
        by_engine
            .iter()
            .all(|r| r["target"] == "sg-a" && r["status"] == 200),
        "{by_engine:?}"
    );
    proxy.stop();
}
