//! Readiness through sd_notify, as systemd sees it with `Type=notify`,
//! through the real debug binaries: each daemon (`sip-gate`, `media-ctl`,
//! `ringsync serve`, `ringsync agent`) is started with `NOTIFY_SOCKET`
//! naming a unix datagram socket this test reads. `READY=1` comes once the
//! daemon is ready (for the ones with an admin endpoint, `/readyz` already
//! answers 200 then), `STATUS=` names the phase and the drain view
//! revision, `WATCHDOG=1` repeats at half `WATCHDOG_USEC`, and `STOPPING=1`
//! follows SIGTERM. On 127.0.127.x.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testbed::bins::Node;
use testbed::fixture::SiteFile;

/// [`SiteFile::daemons`] on `net`, with a billing pair (an `ap_group`).
fn site_text(net: [u8; 3]) -> String {
    SiteFile::daemons("notify", net, 0)
        .servers(&["srv-b"])
        .instance_with("bill-a", "billing", "srv-a", "")
        .instance_with("bill-b", "billing", "srv-b", "")
        .raw("[[ap_group]]\nname = \"bill\"\nmembers = [\"bill-a\", \"bill-b\"]\nhome = \"bill-a\"\n")
        .text()
        .to_owned()
}

/// The network of the tests here (another for the upgrade's).
const NET: [u8; 3] = [127, 0, 127];

/// How long a message may take to come.
const WITHIN: Duration = Duration::from_secs(15);

/// The service manager's end: a datagram socket and what came on it.
struct Manager {
    socket: UnixDatagram,
    path: PathBuf,
    seen: Vec<String>,
}

impl Manager {
    fn bind(dir: &Path) -> Manager {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Manager {
            socket,
            path,
            seen: Vec::new(),
        }
    }

    /// Reads datagrams until one has the line `line` (returns it), or
    /// panics after [`WITHIN`] with everything seen.
    fn until(&mut self, line: &str) -> String {
        let end = Instant::now() + WITHIN;
        let mut buf = vec![0u8; 4096];
        while Instant::now() < end {
            if let Ok(n) = self.socket.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                self.seen.push(msg.clone());
                if msg.lines().any(|l| l == line) {
                    return msg;
                }
            }
        }
        panic!("no `{line}` within {WITHIN:?}; seen: {:?}", self.seen);
    }

    /// Reads every datagram that comes within `period`.
    fn read_for(&mut self, period: Duration) {
        let end = Instant::now() + period;
        let mut buf = vec![0u8; 4096];
        while Instant::now() < end {
            if let Ok(n) = self.socket.recv(&mut buf) {
                self.seen
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }

    /// The messages seen so far with a line `line`.
    fn count(&self, line: &str) -> usize {
        self.seen
            .iter()
            .filter(|m| m.lines().any(|l| l == line))
            .count()
    }
}

fn site(dir: &Path) -> PathBuf {
    let p = dir.join("site.toml");
    std::fs::write(&p, site_text(NET)).unwrap();
    p
}

/// The `STATUS=` line of a message.
fn status(msg: &str) -> &str {
    msg.lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or_else(|| panic!("no STATUS= in {msg:?}"))
}

/// A daemon with an admin endpoint: a STATUS of its start-up before
/// READY=1; at READY=1 `/readyz` already answers 200 and the status names
/// the view revision; WATCHDOG=1 at half WATCHDOG_USEC; STOPPING=1 after
/// SIGTERM, then a clean exit.
fn ready_then_stopping(node: testbed::bins::Builder, dir: &Path) {
    let mut manager = Manager::bind(dir);
    let mut node = node
        .env("NOTIFY_SOCKET", &manager.path)
        // 400 ms: a ping every 200 ms.
        .env("WATCHDOG_USEC", "400000")
        .start()
        .unwrap();
    let ready = manager.until("READY=1");
    assert!(
        manager.seen[0].lines().all(|l| l != "READY=1"),
        "a start-up status comes before READY=1: {:?}",
        manager.seen
    );
    assert!(
        status(&manager.seen[0]).starts_with("starting"),
        "{:?}",
        manager.seen
    );
    let (code, _) = node.readyz().expect("/readyz answers");
    assert_eq!(code, 200, "READY=1 only once /readyz says ready");
    assert!(status(&ready).contains("drain view revision"), "{ready:?}");
    let before = manager.count("WATCHDOG=1");
    manager.read_for(Duration::from_millis(700));
    assert!(
        manager.count("WATCHDOG=1") >= before + 2,
        "a WATCHDOG=1 every 200 ms: {:?}",
        manager.seen
    );
    node.signal("TERM");
    let stopping = manager.until("STOPPING=1");
    assert!(status(&stopping).starts_with("stopping"), "{stopping:?}");
    let exit = node
        .wait_exit(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no exit within 15 s of SIGTERM: {}", node.log()));
    assert!(exit.success(), "{exit:?}\n{}", node.log());
}

#[test]
fn the_gate_says_ready_once_serving_and_stopping_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let gate = Node::gate(&site)
        .admin("127.0.127.1:9091".parse().unwrap())
        .args(["--node", "g1", "--drain-deadline-s", "5"]);
    ready_then_stopping(gate, dir.path());
}

/// Issue 38: while a gate stops, `STATUS=` follows what it still waits
/// for (the transactions in flight, the calls up, the time to its
/// deadline), once a second, instead of keeping the count it began with.
/// An INVITE to an sg that never answers holds the stop to the deadline.
#[test]
fn the_gate_status_follows_its_stop() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let mut manager = Manager::bind(dir.path());
    let sg = std::net::UdpSocket::bind("127.0.127.11:5060").unwrap();
    sg.set_read_timeout(Some(WITHIN)).unwrap();
    let mut gate = Node::gate(&site)
        .admin("127.0.127.1:9091".parse().unwrap())
        .args(["--node", "g1", "--drain-deadline-s", "4"])
        .env("NOTIFY_SOCKET", &manager.path)
        .start()
        .unwrap();
    manager.until("READY=1");
    let ua = std::net::UdpSocket::bind("127.0.127.66:5070").unwrap();
    let invite = "INVITE sip:100@127.0.127.1 SIP/2.0\r\n\
        Via: SIP/2.0/UDP 127.0.127.66:5070;branch=z9hG4bK-stop-status;rport\r\n\
        Max-Forwards: 70\r\nFrom: <sip:ua@127.0.127.66>;tag=u1\r\n\
        To: <sip:100@127.0.127.1>\r\nCall-ID: stop-status@ua\r\nCSeq: 1 INVITE\r\n\
        Contact: <sip:ua@127.0.127.66:5070>\r\nContent-Length: 0\r\n\r\n";
    ua.send_to(invite.as_bytes(), "127.0.127.1:5060").unwrap();
    let mut buf = vec![0u8; 4096];
    let n = sg.recv(&mut buf).expect("the INVITE reaches the sg");
    assert!(buf[..n].starts_with(b"INVITE "));
    gate.signal("TERM");
    manager.until("STOPPING=1");
    manager.read_for(Duration::from_millis(2500));
    let stops: Vec<&str> = manager
        .seen
        .iter()
        .filter_map(|m| m.lines().find_map(|l| l.strip_prefix("STATUS=")))
        .filter(|s| s.contains("transaction(s) in flight, "))
        .collect();
    assert!(
        stops
            .iter()
            .any(|s| s.starts_with("stopping: 1 transaction(s) in flight, 0 call(s) up")),
        "{stops:?}"
    );
    let distinct: std::collections::BTreeSet<&&str> = stops.iter().collect();
    assert!(
        distinct.len() >= 2,
        "STATUS= moves with the stop: {stops:?}"
    );
    let exit = gate
        .wait_exit(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no exit after the deadline: {}", gate.log()));
    assert!(exit.success(), "{exit:?}");
}

/// Issue 27: SIGHUP (`systemctl reload`, the unit's `ExecReload`) gives
/// `RELOADING=1` with `MONOTONIC_USEC=` while the site file is read
/// again, then `READY=1` with the hash of the file now in force; a file
/// that does not load also ends in `READY=1` (the gate serves on, with
/// the config it had), its status saying why.
#[test]
fn the_gate_says_reloading_then_ready_around_a_sighup() {
    let dir = tempfile::tempdir().unwrap();
    // Its own SIP address: the test above runs a gate at the same time.
    let base = site_text(NET).replace("\"127.0.127.1:5060\"", "\"127.0.127.2:5060\"");
    assert_ne!(base, site_text(NET));
    let site = dir.path().join("site.toml");
    std::fs::write(&site, &base).unwrap();
    let mut manager = Manager::bind(dir.path());
    let mut gate = Node::gate(&site)
        .admin("127.0.127.2:9091".parse().unwrap())
        .args(["--node", "g2"])
        .env("NOTIFY_SOCKET", &manager.path)
        .start()
        .unwrap();
    manager.until("READY=1");
    let text = format!("{base}\n# edited\n");
    std::fs::write(&site, &text).unwrap();
    gate.signal("HUP");
    let reloading = manager.until("RELOADING=1");
    assert!(
        reloading.lines().any(|l| l.starts_with("MONOTONIC_USEC=")),
        "{reloading:?}"
    );
    let ready = manager.until("READY=1");
    let hash = ringsync::config::file_hash(text.as_bytes());
    assert!(
        status(&ready).contains(&format!("site file {hash} reloaded")),
        "{ready:?}"
    );
    std::fs::write(&site, "[site\n").unwrap();
    gate.signal("HUP");
    manager.until("RELOADING=1");
    let ready = manager.until("READY=1");
    assert!(status(&ready).contains("reload refused"), "{ready:?}");
    gate.stop(Duration::from_secs(10));
}

#[test]
fn media_ctl_says_ready_once_serving_and_stopping_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let media = Node::media_ctl(&site).admin("127.0.127.2:9092".parse().unwrap());
    ready_then_stopping(media, dir.path());
}

#[test]
fn serve_says_ready_once_serving_and_stopping_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let serve = Node::serve(&site).admin("127.0.127.3:0".parse().unwrap());
    ready_then_stopping(serve, dir.path());
}

#[test]
fn the_agent_says_ready_once_following_and_stopping_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let mut manager = Manager::bind(dir.path());
    let mut agent = Node::agent(&site)
        .args(["--member", "bill-b"])
        .env("NOTIFY_SOCKET", &manager.path)
        .start()
        .unwrap();
    let ready = manager.until("READY=1");
    // Issue 27: the agent names the site file it runs.
    let hash = ringsync::config::file_hash(&std::fs::read(&site).unwrap());
    assert_eq!(
        status(&ready),
        format!("following the handover records of bill/bill-b; site file {hash}")
    );
    assert_eq!(manager.count("WATCHDOG=1"), 0, "no watchdog asked for");
    agent.signal("TERM");
    let stopping = manager.until("STOPPING=1");
    assert_eq!(status(&stopping), "stopping");
    let exit = agent
        .wait_exit(WITHIN)
        .unwrap_or_else(|| panic!("the agent did not exit: {}", agent.log()));
    assert!(exit.success(), "{exit:?}\n{}", agent.log());
}

/// R-GW-3: an upgraded gate's new run tells the manager it is the main
/// process now (`MAINPID=` its pid, with `READY=1`), which systemd takes
/// with `NotifyAccess=all`; the old run then exits. On 127.0.139.x.
#[test]
fn the_new_run_of_an_upgraded_gate_says_it_is_the_main_process() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.toml");
    std::fs::write(&site, site_text([127, 0, 139])).unwrap();
    let admin = "127.0.139.1:9091";
    let mut manager = Manager::bind(dir.path());
    let mut gate = Node::gate(&site)
        .admin(admin.parse().unwrap())
        .args(["--node", "g1"])
        .env("NOTIFY_SOCKET", &manager.path)
        .start()
        .unwrap();
    manager.until("READY=1");
    let out = testbed::bins::command("sip-gate")
        .unwrap()
        .args(["upgrade", "--config"])
        .arg(&site)
        .args(["--admin", admin])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", gate.log());
    let pid: u32 = stdout
        .split("pid ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {stdout}"));
    let main = manager.until(&format!("MAINPID={pid}"));
    assert!(main.lines().any(|l| l == "READY=1"), "{main:?}");
    assert!(status(&main).contains("upgraded"), "{main:?}");
    let exit = gate.wait_exit(Duration::from_secs(10));
    assert!(exit.is_some_and(|s| s.success()), "{exit:?}");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}
