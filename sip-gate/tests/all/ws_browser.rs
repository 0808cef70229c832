//! A real browser through the gate's WSS listener (R-WS-2): SIP.js (from
//! the npm registry, installed by this test into its cache dir, served by
//! the test itself, no CDN) in headless Debian Chromium registers through
//! the `sip-gate` binary to a Kamailio registrar (`registrar`, `usrloc`,
//! `path`); a SIPp MESSAGE to its AoR at Kamailio follows the gate's Path
//! into the browser's own WebSocket, and SIP.js answers it 200; a SIPp call
//! to the AoR reaches the browser the same way, SIP.js answers it (fake
//! media devices; the offer is a WebRTC one without candidates, so no media
//! flows), and the caller's re-INVITE and BYE reach it along the route set.
//!
//! Chromium is started on the test's page with `--ignore-certificate-errors`
//! (the gate's certificate is from a test CA) and fake media devices; the
//! page reports what SIP.js does by fetching `/event?...` from the test's
//! HTTP server, which is how the test follows it (no WebDriver needed).
//! Needs `npm` (to install SIP.js once) and `chromium`.
//!
//! Addresses: `127.43.7.0/24`: the gate on `.1` (UDP and WSS on 5080,
//! admin 9091), the page's HTTP server on `.1:8000`, Kamailio on `.11`,
//! SIPp from `.50`.

mod drain;

use crate::tls::peer;

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{assert_all_ok, ip, run};
use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};
use testbed::{Kamailio, Scenario, Sipp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};

const NET: (u8, u8) = (43, 7);
const SIPJS: &str = "sip.js@0.21.2";
const T: Duration = Duration::from_secs(5);

/// One browser test at a time: two headless Chromiums, two Kamailios and
/// the gate at once on two shared cores made the browser's timers (SIP.js
/// answers within its transaction timers) the first thing to fail.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// SIP.js's `lib` dir, installed from the npm registry into the test cache
/// once (`CARGO_TARGET_TMPDIR/sipjs`). The tests of this module run in
/// parallel: one installs while the others wait (two `npm install` into one
/// directory at once fail with ENOTEMPTY).
fn sipjs() -> PathBuf {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sipjs");
    let lib = dir.join("node_modules/sip.js/lib");
    if !lib.join("index.js").exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--no-save",
                "--prefix",
            ])
            .arg(&dir)
            .arg(SIPJS)
            .output()
            .expect("npm runs (Debian package npm)");
        assert!(
            out.status.success() && lib.join("index.js").exists(),
            "npm install {SIPJS}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    lib
}

/// The page: SIP.js registers `dave` over `wss://gate/sip`, accepts every
/// MESSAGE, and reports each step to `/event`.
fn page(gate: SocketAddr) -> String {
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>ws-browser</title></head><body>
<script type="module">
import {{ UserAgent, Registerer }} from "/sipjs/index.js";
const report = (e) => fetch("/event?" + encodeURIComponent(e)).catch(() => {{}});
window.addEventListener("error", (e) => report("error:" + e.message));
try {{
  const ua = new UserAgent({{
    uri: UserAgent.makeURI("sip:dave@example.com"),
    transportOptions: {{ server: "wss://{gate}/sip" }},
    logBuiltinEnabled: false,
    delegate: {{
      onMessage(m) {{ m.accept(); report("message:" + m.request.body); }},
      onInvite(inv) {{
        report("invite");
        inv.stateChange.addListener((s) => report("call:" + s));
        inv.accept({{ sessionDescriptionHandlerOptions: {{ constraints: {{ audio: true, video: false }} }} }})
          .catch((e) => report("error:accept " + e));
      }},
    }},
  }});
  await ua.start();
  report("connected");
  const reg = new Registerer(ua, {{ expires: 600 }});
  reg.stateChange.addListener((s) => report("registration:" + s));
  await reg.register();
  // The test's commands: `reregister` refreshes the registration now (as
  // SIP.js does before it expires), and says when it is accepted.
  for (;;) {{
    const cmd = await fetch("/cmd").then((r) => r.text());
    if (cmd === "reregister") {{
      await reg.register({{ requestDelegate: {{
        onAccept() {{ report("reregistered"); }},
        onReject(r) {{ report("error:re-REGISTER " + r.message.statusCode); }},
      }} }});
    }}
  }}
}} catch (e) {{
  report("error:" + e);
}}
</script></body></html>"#
    )
}

/// Serves the page, SIP.js's files, `/event?TEXT` (sent to `events`), and
/// `/cmd`, answered `reregister` once `cmd` is notified.
async fn http(
    listener: TcpListener,
    page: String,
    lib: PathBuf,
    (events, cmd): (mpsc::UnboundedSender<String>, Arc<Notify>),
) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let (page, lib, events, cmd) = (page.clone(), lib.clone(), events.clone(), cmd.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut n = 0;
            while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") && n < buf.len() {
                match s.read(&mut buf[n..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(k) => n += k,
                }
            }
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
            let (status, ctype, body) = if target == "/cmd" {
                cmd.notified().await;
                ("200 OK", "text/plain", b"reregister".to_vec())
            } else {
                respond(&target, &page, &lib, &events)
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(&body).await;
        });
    }
}

fn respond(
    target: &str,
    page: &str,
    lib: &Path,
    events: &mpsc::UnboundedSender<String>,
) -> (&'static str, &'static str, Vec<u8>) {
    if target == "/" {
        return ("200 OK", "text/html", page.as_bytes().to_vec());
    }
    if let Some(e) = target.strip_prefix("/event?") {
        let _ = events.send(decode(e));
        return ("204 No Content", "text/plain", Vec::new());
    }
    if let Some(rel) = target.strip_prefix("/sipjs/") {
        if !rel.contains("..") {
            if let Ok(body) = std::fs::read(lib.join(rel)) {
                return ("200 OK", "text/javascript", body);
            }
        }
    }
    ("404 Not Found", "text/plain", Vec::new())
}

/// Percent-decoding of what `encodeURIComponent` wrote.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Headless Chromium on `url`, in its own process group (killed whole on
/// drop: Chromium forks helpers).
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start(url: &str) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                "--ignore-certificate-errors",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromium starts (Debian package chromium)");
        Browser {
            child,
            _profile: profile,
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// Waits for an event starting with `prefix`; fails on an `error:` one.
async fn wait_event(
    events: &mut mpsc::UnboundedReceiver<String>,
    prefix: &str,
    seen: &mut Vec<String>,
) -> String {
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let e = tokio::time::timeout_at(end, events.recv())
            .await
            .unwrap_or_else(|_| panic!("no `{prefix}` from the browser; it said: {seen:?}"))
            .expect("the event channel");
        seen.push(e.clone());
        assert!(!e.starts_with("error:"), "the browser: {seen:?}");
        if e.starts_with(prefix) {
            return e;
        }
    }
}

/// R-WS-2 in a real browser: SIP.js in headless Chromium registers through
/// the gate's WSS listener to Kamailio (the gate adds its Path with a flow
/// token over WebSocket), and a SIPp MESSAGE to its AoR at Kamailio reaches
/// it through that Path and its own WebSocket; SIP.js's 200 gets back to
/// SIPp. Then a call to the AoR: answered in the browser, re-INVITEd and
/// hung up by the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_2_a_browser_registers_over_wss_takes_a_message_and_a_call_through_its_flow() {
    let _one = ONE_BROWSER.lock().await;
    let lib = tokio::task::spawn_blocking(sipjs).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = peer::Ca::new(dir.path(), "site");
    ca.issue_gate(dir.path(), &ip(NET, 1).to_string());
    let gate_sip = SocketAddr::new(ip(NET, 1), 5080);
    let web = SocketAddr::new(ip(NET, 1), 8000);
    let kam_addr = SocketAddr::new(ip(NET, 11), 5060);
    let wss = format!(
        "transports = [\"udp\", \"wss\"]\nws_path = \"/sip\"\nws_origins = [\"http://{web}\"]"
    );
    SiteFile::new("ws-browser")
        .tls("gate-cert.pem", "gate-key.pem")
        .sgs(&[("0", kam_addr)])
        .listener("webrtc", gate_sip, Mode::Balance("sg"), "subscriber", &wss)
        .write(dir.path());
    let kam = Kamailio::new()
        .config(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kamailio/registrar.cfg"))
        .listen(kam_addr)
        .start()
        .expect("kamailio starts");
    let mut gate = Node::gate(dir.path().join("site.toml"))
        .admin(SocketAddr::new(ip(NET, 1), 9091))
        .start()
        .unwrap();
    gate.wait_ready().unwrap();

    let (tx, mut events) = mpsc::unbounded_channel();
    let server = TcpListener::bind(web).await.unwrap();
    let cmd = Arc::new(Notify::new());
    let http_task = tokio::spawn(http(server, page(gate_sip), lib, (tx, cmd)));
    let browser = Browser::start(&format!("http://{web}/"));
    let mut seen = Vec::new();
    wait_event(&mut events, "registration:Registered", &mut seen).await;
    let m = |s: &str| gate.metric(s).unwrap();
    assert_eq!(m(r#"sipgate_ws_handshakes_total{result="ok"}"#), 1.0);
    assert_eq!(m("sipgate_ws_connections"), 1.0);
    assert_eq!(m(r#"sipgate_flow_paths_total{transport="ws"}"#), 1.0);

    let r = run(Sipp::new(Scenario::repo("uac_message"))
        .local_ip(ip(NET, 50))
        .remote(kam_addr)
        .service("dave")
        .calls(1)
        .timeout(Duration::from_secs(20)))
    .await;
    assert_all_ok("MESSAGE to the browser (uac_message)", &r, 1);
    let got = wait_event(&mut events, "message:", &mut seen).await;
    assert_eq!(got.trim_end(), "message:hello browser 1", "{seen:?}");

    // A call: SIPp -> Kamailio -> the gate -> the browser's WebSocket;
    // SIP.js answers with its fake microphone; the caller's re-INVITE and
    // BYE follow the route set (the gate's two Record-Routes).
    let r = run(Sipp::new(Scenario::repo("uac_call_webrtc"))
        .local_ip(ip(NET, 50))
        .remote(kam_addr)
        .service("dave")
        .calls(1)
        .duration(Duration::from_millis(500))
        .timeout(Duration::from_secs(30)))
    .await;
    assert_all_ok("call to the browser (uac_call_webrtc)", &r, 1);
    wait_event(&mut events, "call:Established", &mut seen).await;
    wait_event(&mut events, "call:Terminated", &mut seen).await;
    assert_eq!(m("sipgate_ws_connections"), 1.0, "one connection all along");

    drop(browser);
    testbed::wait_for("the browser's connection closed", T, || {
        (gate.metric("sipgate_ws_connections").ok()? == 0.0).then_some(())
    })
    .unwrap();
    http_task.abort();
    gate.stop(T);
    kam.stop();
}
