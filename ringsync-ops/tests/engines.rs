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
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
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

fn base_site(engines: &str) -> String {
    sites(UAS_A, UAS_B, engines)
}

fn sites(a: &str, b: &str, engines: &str) -> String {
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
sip = "{a}"
[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "{b}"
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
    let site = TestSite::with_text(&base_site(&kamailio_engine("kam", rpc_at)));
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

// === HAProxy ===

/// A real HAProxy (Debian's), its own config in a temp dir, killed on drop.
struct Haproxy {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    /// A TCP frontend on `front` balancing (round robin) over the servers
    /// `sg-a` and `sg-b` of backend `be_sg`, runtime API on `admin`.
    fn start(front: SocketAddr, admin: SocketAddr, a: SocketAddr, b: SocketAddr) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(
            &cfg,
            format!(
                "global\n    stats socket ipv4@{admin} level admin\n\
                 defaults\n    mode tcp\n    timeout connect 1s\n    timeout client 30s\n    timeout server 30s\n\
                 frontend fe\n    bind {front}\n    default_backend be_sg\n\
                 backend be_sg\n    balance roundrobin\n    server sg-a {a}\n    server sg-b {b}\n"
            ),
        )
        .unwrap();
        let child = std::process::Command::new("haproxy")
            .arg("-f")
            .arg(&cfg)
            .arg("-db")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_until(Duration::from_secs(5), || TcpStream::connect(admin).is_ok());
        Haproxy { child, _dir: dir }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small TCP server: greets each connection with its name, then echoes
/// what it reads until the client closes.
fn named_server(at: &str, name: &'static str) -> SocketAddr {
    let l = std::net::TcpListener::bind(at).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let _ = c.write_all(format!("{name}\n").as_bytes());
                let mut buf = [0u8; 256];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A connection through HAProxy and the name of the server it reached.
fn connect(front: SocketAddr) -> (TcpStream, String) {
    let mut s = TcpStream::connect(front).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 16];
    let n = s.read(&mut b).unwrap();
    let name = String::from_utf8_lossy(&b[..n]).trim().to_owned();
    (s, name)
}

fn haproxy_engine(name: &str, admin: &str) -> String {
    format!(
        r#"
[[engine]]
name = "{name}"
kind = "haproxy"
address = "{admin}"
backends = {{ sg = "be_sg" }}
resync_ms = 500
timeout_ms = 300
"#
    )
}

/// The names of the servers `n` new connections reach.
fn spread(front: SocketAddr, n: usize) -> Vec<String> {
    let mut names: Vec<String> = (0..n).map(|_| connect(front).1).collect();
    names.sort();
    names.dedup();
    names
}

fn says(st: &Value, engine_name: &str, id: &str) -> Option<String> {
    engine(st, engine_name)["instances"]
        .as_array()?
        .iter()
        .find(|i| i["id"] == id)?["says"]
        .as_str()
        .map(str::to_owned)
}

/// A HAProxy in front of two servers, an engine on the site.
struct HaproxySite {
    front: SocketAddr,
    _hap: Haproxy,
}

fn haproxy_site(host: &str) -> (HaproxySite, SocketAddr, SocketAddr, SocketAddr) {
    let h = ip(host);
    let a = named_server(&format!("{}.41:0", host.rsplit_once('.').unwrap().0), "A");
    let b = named_server(&format!("{}.42:0", host.rsplit_once('.').unwrap().0), "B");
    let front = SocketAddr::new(h, free_port(h).unwrap());
    let admin = SocketAddr::new(h, free_port(h).unwrap());
    let hap = Haproxy::start(front, admin, a, b);
    (HaproxySite { front, _hap: hap }, admin, a, b)
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
    ok(&local(
        &site,
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ],
    ));
    let served = Served::start(&site, &[]);
    wait_until(Duration::from_secs(5), || {
        engine(&status_json(&served.url), "hap")["revision"].is_u64()
    });
    assert_eq!(spread(hs.front, 4), ["A", "B"]);
    // One open to A before the drain.
    let (mut open, name) = (0..4)
        .map(|_| connect(hs.front))
        .find(|(_, n)| n == "A")
        .unwrap();
    assert_eq!(name, "A");

    let t0 = Instant::now();
    ok(&remote(
        &served.url,
        None,
        &["profile", "activate", "maint-a"],
    ));
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

    ok(&remote(
        &served.url,
        None,
        &["profile", "deactivate", "maint-a"],
    ));
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
    // Garbage: an HTTP server where a runtime API should be, and an HTTP
    // error page where Kamailio's JSON-RPC should be.
    let garbage = TcpListener::bind("127.0.88.2:0").unwrap();
    let garbage_at = garbage.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in garbage.incoming().flatten() {
            let mut c = c;
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.0 400 Bad request\r\nContent-Length: 8\r\n\r\nno way\r\n");
        }
    });
    // Slow: accepts and never answers.
    let slow = TcpListener::bind("127.0.88.3:0").unwrap();
    let slow_at = slow.local_addr().unwrap();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for c in slow.incoming().flatten() {
            keep.lock().unwrap().push(c);
        }
    });
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
    ok(&local(
        &site,
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ],
    ));
    let served = Served::start(&site, &[]);
    wait_until(Duration::from_secs(5), || {
        engine(&status_json(&served.url), "hap")["revision"].is_u64()
    });

    let t0 = Instant::now();
    ok(&remote(
        &served.url,
        None,
        &["profile", "activate", "maint-a"],
    ));
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
    let (code, metrics) = common::served::call(served.addr, "GET", "/metrics", None, "");
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
