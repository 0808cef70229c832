//! Real engines for the R-EX-1 tests and the engines bench: Kamailio with
//! the bench config's JSON-RPC variant, a HAProxy with its runtime API,
//! small TCP servers behind it, and the site text that names them.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use testbed::fixture::SiteFile;

use serde_json::Value;
use testbed::{free_port, Kamailio, KamailioHandle, Transport};

use super::served::{ok, remote, wait_until};

pub const UAS_A: &str = "127.0.86.21:5060";
pub const UAS_B: &str = "127.0.86.22:5060";

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn base_site(engines: &str) -> String {
    sites(UAS_A, UAS_B, engines)
}

/// sg-a at `a` and sg-b at `b` on two servers, with `engines`; nothing
/// listens at the admin addresses of the gate and media-ctl (ports 9 and 7
/// are closed on loopback). Health probes as the defaults say.
pub fn sites(a: &str, b: &str, engines: &str) -> String {
    let at = |s: &str| s.parse().expect("an sg address");
    SiteFile::new("eng")
        .health("")
        .section(
            "admin",
            "bind = \"127.0.0.1:0\"\ngate_bind = \"127.0.0.1:9\"\nmedia_bind = \"127.0.0.1:7\"",
        )
        .servers(&["srv-a", "srv-b"])
        .pool("sg", "sip", &[("a", at(a)), ("b", at(b))])
        .raw(engines)
        .text()
        .to_owned()
}

pub fn kamailio_engine(name: &str, rpc: SocketAddr) -> String {
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
pub fn kamailio(sip: SocketAddr, rpc: SocketAddr) -> Kamailio {
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
pub fn rpc(at: SocketAddr, method: &str) -> Option<Value> {
    rpc_with(at, method, &serde_json::json!([]))
}

/// One JSON-RPC call with parameters (`dispatcher.set_state` by hand).
pub fn rpc_with(at: SocketAddr, method: &str, params: &Value) -> Option<Value> {
    let mut s = TcpStream::connect_timeout(&at, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let body = format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":1}}"#);
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
pub fn flags(at: SocketAddr, uas: &str) -> Option<String> {
    let v = rpc(at, "dispatcher.list")?;
    let want = format!("sip:{uas};transport=udp");
    v["result"]["RECORDS"][0]["SET"]["TARGETS"]
        .as_array()?
        .iter()
        .find(|t| t["DEST"]["URI"] == want.as_str())
        .map(|t| t["DEST"]["FLAGS"].as_str().unwrap_or_default().to_owned())
}

pub fn status_json(url: &str) -> Value {
    serde_json::from_str(&ok(&remote(url, None, &["--json", "status"]))).unwrap()
}

pub fn engine<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["engines"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no engine {name} in {st}"))
}

pub fn start_kamailio(k: &Kamailio, rpc_at: SocketAddr) -> KamailioHandle {
    let h = k.clone().start().unwrap();
    wait_until(Duration::from_secs(5), || {
        rpc(rpc_at, "dispatcher.list").is_some()
    });
    h
}

// === HAProxy ===

/// A real HAProxy (Debian's), its own config in a temp dir, killed on drop.
pub struct Haproxy {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    /// A TCP frontend on `front` balancing (round robin) over the servers
    /// `sg-a` and `sg-b` of backend `be_sg`, runtime API on `admin`.
    pub fn start(front: SocketAddr, admin: SocketAddr, a: SocketAddr, b: SocketAddr) -> Haproxy {
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
pub fn named_server(at: &str, name: &'static str) -> SocketAddr {
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
pub fn connect(front: SocketAddr) -> (TcpStream, String) {
    let mut s = TcpStream::connect(front).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 16];
    let n = s.read(&mut b).unwrap();
    let name = String::from_utf8_lossy(&b[..n]).trim().to_owned();
    (s, name)
}

pub fn haproxy_engine(name: &str, admin: &str) -> String {
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
pub fn spread(front: SocketAddr, n: usize) -> Vec<String> {
    let mut names: Vec<String> = (0..n).map(|_| connect(front).1).collect();
    names.sort();
    names.dedup();
    names
}

pub fn says(st: &Value, engine_name: &str, id: &str) -> Option<String> {
    engine(st, engine_name)["instances"]
        .as_array()?
        .iter()
        .find(|i| i["id"] == id)?["says"]
        .as_str()
        .map(str::to_owned)
}

/// A HAProxy in front of two servers, an engine on the site.
pub struct HaproxySite {
    pub front: SocketAddr,
    _hap: Haproxy,
}

pub fn haproxy_site(host: &str) -> (HaproxySite, SocketAddr, SocketAddr, SocketAddr) {
    let h = ip(host);
    let a = named_server(&format!("{}.41:0", host.rsplit_once('.').unwrap().0), "A");
    let b = named_server(&format!("{}.42:0", host.rsplit_once('.').unwrap().0), "B");
    let front = SocketAddr::new(h, free_port(h).unwrap());
    let admin = SocketAddr::new(h, free_port(h).unwrap());
    let hap = Haproxy::start(front, admin, a, b);
    (HaproxySite { front, _hap: hap }, admin, a, b)
}

/// The admin state bits of `backend/server`, read from HAProxy's runtime
/// API directly (`show servers state`).
// The engines bench reads these; the tests read the engines' own views.
#[allow(dead_code)]
pub fn admin_bits(admin: SocketAddr, backend: &str, server: &str) -> Option<u32> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("show servers state {backend}\n").as_bytes())
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&backend) && f.get(3) == Some(&server))
        .and_then(|f| f.get(6)?.parse().ok())
}

/// Garbage at `at`: an HTTP error page for whatever is sent, where a
/// runtime API or a JSON-RPC answer should be.
pub fn garbage_server(at: &str) -> SocketAddr {
    let l = TcpListener::bind(at).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.0 400 Bad request\r\nContent-Length: 8\r\n\r\nno way\r\n");
        }
    });
    addr
}

/// Silence at `at`: accepts connections, holds them and never answers.
pub fn silent_server(at: &str) -> SocketAddr {
    let l = TcpListener::bind(at).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    addr
}
