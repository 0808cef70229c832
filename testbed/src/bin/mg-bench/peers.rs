//! The processes under test besides rtpengine: media-ctl, the floor relay,
//! and the stand-in mg of the held-calls run.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::load::ip;

// === media-ctl under test ===

pub(crate) struct MediaCtl {
    pub(crate) child: Child,
    pub(crate) ng: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for MediaCtl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the media-ctl binary `bin` on 127.76.0.`host` (ng port 2223,
/// admin port 9092) in front of `mg`.
pub(crate) fn start_media_ctl(
    bin: &Path,
    host: u8,
    mg: SocketAddr,
    idle_s: u32,
) -> Result<MediaCtl, String> {
    let dir = tempfile::Builder::new()
        .prefix("mg-bench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let ng = SocketAddr::new(ip(host), 2223);
    let site = format!(
        "[site]\nname = \"mg-bench\"\n[admin]\nmedia_bind = \"{}:9092\"\n[media]\nng_bind = \"{ng}\"\ncall_idle_timeout_s = {idle_s}\n\
         [[server]]\nname = \"srv-a\"\n[[instance]]\nid = \"mg-a\"\nservice = \"mg\"\nserver = \"srv-a\"\nng = \"{mg}\"\n",
        ip(host)
    );
    let path = dir.path().join("site.toml");
    std::fs::write(&path, site).map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            format!(
                "starting {}: {e} (cargo build --release -p media-ctl)",
                bin.display()
            )
        })?;
    let m = MediaCtl {
        child,
        ng,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !testbed::rtpengine::ping(ng, Duration::from_millis(100)) {
        if Instant::now() > deadline {
            return Err("media-ctl did not answer ping".into());
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(m)
}

/// The floor relay: what any ng relay must do and nothing more.
pub(crate) fn floor_relay(listen: SocketAddr, upstream: SocketAddr) -> Result<(), String> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    let client = Arc::new(UdpSocket::bind(listen).map_err(|e| format!("{listen}: {e}"))?);
    let up = Arc::new(UdpSocket::bind(SocketAddr::new(listen.ip(), 0)).map_err(|e| e.to_string())?);
    let who: Arc<Mutex<HashMap<Vec<u8>, SocketAddr>>> = Arc::default();
    let back = {
        let (client, up, who) = (client.clone(), up.clone(), who.clone());
        thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, _)) = up.recv_from(&mut buf) {
                let d = &buf[..n];
                let Some(sp) = d.iter().position(|&b| b == b' ') else {
                    continue;
                };
                let to = who.lock().map(|mut m| m.remove(&d[..sp])).ok().flatten();
                if let Some(to) = to {
                    let _ = client.send_to(d, to);
                }
            }
        })
    };
    let mut buf = vec![0u8; 65_536];
    while let Ok((n, from)) = client.recv_from(&mut buf) {
        let d = &buf[..n];
        let Some(sp) = d.iter().position(|&b| b == b' ') else {
            continue;
        };
        if let Ok(mut m) = who.lock() {
            m.insert(d[..sp].to_vec(), from);
        }
        let _ = up.send_to(d, upstream);
    }
    let _ = back.join();
    Ok(())
}

/// A stand-in mg: answers `ping` with `pong` and everything else with `ok`
/// (and a one-line SDP for offers and answers), as fast as it can.
pub(crate) fn fake_mg(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
) -> Result<thread::JoinHandle<()>, String> {
    let sock = UdpSocket::bind(addr).map_err(|e| format!("fake mg {addr}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| e.to_string())?;
    Ok(thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            let d = &buf[..n];
            let Some(sp) = d.iter().position(|&b| b == b' ') else {
                continue;
            };
            let mut out = d[..sp].to_vec();
            if d.windows(14).any(|w| w == b"7:command4:pin") {
                out.extend_from_slice(b" d6:result4:ponge");
            } else if d.windows(12).any(|w| w == b"7:command5:o")
                || d.windows(12).any(|w| w == b"7:command6:a")
            {
                let sdp = b"v=0\r\nc=IN IP4 127.76.0.21\r\n";
                out.extend_from_slice(format!(" d3:sdp{}:", sdp.len()).as_bytes());
                out.extend_from_slice(sdp);
                out.extend_from_slice(b"6:result2:oke");
            } else {
                out.extend_from_slice(b" d6:result2:oke");
            }
            let _ = sock.send_to(&out, from);
        }
    }))
}

/// `"calls":N` from media-ctl's status.
pub(crate) fn http_status(addr: SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /v1/status HTTP/1.0\r\n\r\n").ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    let at = b.find("\"calls\":")? + 8;
    Some(b[at..].chars().take_while(char::is_ascii_digit).collect())
}
