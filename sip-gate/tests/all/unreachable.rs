//! Through the real binaries: what the gate does and says when an instance
//! cannot be reached, and what it logs as the site changes.
//!
//! 1. RFC 3261 16.9: sg-a answers the gate's UDP health probes (so it is
//!    `up`) but nothing listens for TCP on its address. An INVITE over TCP
//!    that the pool sends to sg-a gets 503 with Retry-After at once, not 32
//!    s of silence; the gate holds sg-a's TCP down, the next new call that
//!    would go to sg-a goes to sg-b, and `ringsync status` (text and
//!    `--json`) shows sg-a unreachable over tcp.
//! 2. The gate's log says when it applies a drain view (`ringsync profile
//!    activate`) and when an instance stops or starts answering its probes.
//!
//! Addresses: `127.84.1.0/24` and `127.84.2.0/24`; the gate on `.1`, sg-a
//! and sg-b's SIPp on `.11` and `.12`, the TCP client on `.21`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{ip, ringsync};
use ringsync::config::Service;
use ringsync::profile::ProfileSet;
use ringsync::view::{DrainView, Health};
use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};
use testbed::{Scenario, Sipp, SippHandle, Transport};

/// Polls `f` until it gives a value; panics naming `what` after `timeout`.
fn wait_for<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    testbed::wait_for(what, timeout, f).unwrap()
}

/// The `sip-gate` binary on `site` with its admin endpoint at `admin`.
fn start_gate(site: &Path, admin: SocketAddr) -> Node {
    let mut gate = Node::gate(site).admin(admin).start().unwrap();
    gate.wait_ready().unwrap();
    gate
}

/// Two sg probed every 200 ms behind a balancing UDP+TCP listener; a
/// transport failure holds for 30 s, Retry-After is 30 s flat.
fn site_file(net: (u8, u8)) -> SiteFile {
    let [gate, sg_a, sg_b] = [1, 11, 12].map(|h| SocketAddr::new(ip(net, h), 5060));
    SiteFile::new("unreachable")
        .health("interval_ms = 200\ntimeout_ms = 150\nfailures = 2")
        .section("timers", "retry_after_s = 30\nretry_after_jitter_s = 0")
        .section("dns", "failover_hold_s = 30")
        .admin(
            SocketAddr::new(gate.ip(), 9091),
            SocketAddr::new(gate.ip(), 9092),
        )
        .servers(&["srv-a", "srv-b"])
        .instance("sg-a", "sg", "srv-a", sg_a)
        .instance("sg-b", "sg", "srv-b", sg_b)
        .listener(
            "subs",
            gate,
            Mode::Balance("sg"),
            "subscriber",
            "transports = [\"udp\", \"tcp\"]",
        )
}

/// SIPp's stock UAS over UDP at `addr`: it answers the gate's OPTIONS
/// probes (`-aa`), and nothing listens for TCP there.
fn probe_answerer(addr: SocketAddr) -> SippHandle {
    Sipp::new(Scenario::builtin("uas"))
        .local(addr.ip(), addr.port())
        .arg("-aa")
        .timeout(Duration::from_secs(120))
        .spawn()
        .expect("udp uas starts")
}

/// Writes the site into a new directory; the site file's path.
fn site_in(dir: &tempfile::TempDir, net: (u8, u8)) -> std::path::PathBuf {
    site_file(net).write(dir.path())
}

/// Waits until the gate's probes have found both sg up.
fn wait_both_up(gate: &Node) {
    wait_for("both sg up", Duration::from_secs(10), || {
        let w = gate.work()?;
        ["sg-a", "sg-b"]
            .iter()
            .all(|id| w.instances.get(*id).is_some_and(|i| i.health == Health::Up))
            .then_some(())
    });
}

/// Call-IDs the pool's ring gives to instance `idx` (nobody draining).
fn call_ids_for(site: &Path, idx: usize, n: usize) -> Vec<String> {
    let config = Arc::new(ringsync::SiteConfig::load(site).unwrap());
    let view = DrainView::build(config, &ProfileSet::default(), &[], &[]);
    (0..)
        .map(|i| format!("unreachable-{i}@127.84.1.21"))
        .filter(|c| view.pick(&Service::Sg, c.as_bytes()) == Some(idx))
        .take(n)
        .collect()
}

/// A SIP client over one TCP connection from `from`.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(from: std::net::IpAddr, to: SocketAddr) -> Client {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::new(from, 0).into()).unwrap();
        s.connect(&to.into()).unwrap();
        let stream: TcpStream = s.into();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    fn invite(&mut self, call_id: &str, gate: SocketAddr) {
        let me = self.stream.local_addr().unwrap();
        let text = format!(
            "INVITE sip:bob@{gate} SIP/2.0\r\n\
             Via: SIP/2.0/TCP {me};branch=z9hG4bK-{call_id}\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:alice@{ip}>;tag=a1\r\n\
             To: <sip:bob@{gate_ip}>\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: 1 INVITE\r\n\
             Contact: <sip:alice@{me};transport=tcp>\r\n\
             Content-Length: 0\r\n\r\n",
            ip = me.ip(),
            gate_ip = gate.ip(),
        );
        self.stream.write_all(text.as_bytes()).unwrap();
    }

    /// The next final response (provisional ones skipped), or `None` when
    /// none came by `deadline`.
    fn final_response(&mut self, deadline: Instant) -> Option<String> {
        loop {
            while let Some(end) = find(&self.buf, b"\r\n\r\n") {
                // The gate's responses and SIPp's here carry no body.
                let msg: Vec<u8> = self.buf.drain(..end + 4).collect();
                let msg = String::from_utf8_lossy(&msg).into_owned();
                let code: u16 = msg.split(' ').nth(1)?.parse().ok()?;
                if code >= 200 {
                    return Some(msg);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("reading from the gate: {e}"),
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `ringsync --config site status` as text.
fn status_text(site: &Path) -> String {
    let out = testbed::bins::command("ringsync")
        .unwrap()
        .arg("--config")
        .arg(site)
        .arg("status")
        .output()
        .expect("ringsync runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// RFC 3261 16.9 (a transport error is a 503), R-AA-1 (new dialogs avoid
/// an instance the gate cannot reach that way), R-ST-1 (`status` says so).
#[test]
fn rfc3261_16_9_an_instance_refusing_tcp_gets_503_its_new_dialogs_move_and_status_says_so() {
    const NET: (u8, u8) = (84, 1);
    let dir = tempfile::tempdir().unwrap();
    let site = site_in(&dir, NET);
    let gate_sip = SocketAddr::new(ip(NET, 1), 5060);
    // sg-a: probes answered over UDP, TCP refused. sg-b: both.
    let _sg_a = probe_answerer(SocketAddr::new(ip(NET, 11), 5060));
    let _sg_b_udp = probe_answerer(SocketAddr::new(ip(NET, 12), 5060));
    let _sg_b_tcp = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(NET, 12), 5060)
        .transport(Transport::Tcp)
        .timeout(Duration::from_secs(120))
        .spawn()
        .expect("sg-b tcp uas starts");
    let gate = start_gate(&site, SocketAddr::new(ip(NET, 1), 9091));
    wait_both_up(&gate);

    let to_a = call_ids_for(&site, 0, 2);
    let mut client = Client::connect(ip(NET, 21), gate_sip);

    // The first INVITE the ring gives sg-a: 503 with Retry-After, at once.
    let sent = Instant::now();
    client.invite(&to_a[0], gate_sip);
    let answer = client
        .final_response(sent + Duration::from_secs(5))
        .expect("an answer within 5 s, not silence until the client's 32 s timer");
    let took = sent.elapsed();
    eprintln!("503 after {took:?}");
    assert!(answer.starts_with("SIP/2.0 503 "), "{answer}");
    assert!(answer.contains("\r\nRetry-After: 30"), "{answer}");
    assert!(
        answer.contains(&format!("Call-ID: {}", to_a[0])),
        "{answer}"
    );

    // The next new call the ring gives sg-a goes to sg-b while sg-a's TCP
    // is held down: sg-b's SIPp answers it (its Contact names it).
    let sent = Instant::now();
    client.invite(&to_a[1], gate_sip);
    let answer = client
        .final_response(sent + Duration::from_secs(5))
        .expect("sg-b answers");
    assert!(answer.starts_with("SIP/2.0 200 "), "{answer}");
    assert!(answer.contains(&ip(NET, 12).to_string()), "{answer}");

    // What the gate counts and logs.
    assert_eq!(
        gate.metric(r#"sipgate_requests_total{method="INVITE",outcome="transport_error"}"#)
            .unwrap(),
        1.0
    );
    wait_for("the unreachable gauge", Duration::from_secs(5), || {
        (gate
            .metric(r#"sipgate_instance_unreachable{instance="sg-a",transport="tcp"}"#)
            .ok()?
            == 1.0)
            .then_some(())
    });
    let log = gate.log();
    assert!(
        log.lines()
            .any(|l| l.contains("instance unreachable") && l.contains("sg-a")),
        "{log}"
    );

    // `ringsync status`: sg-a is up (its probes answer) and unreachable
    // over tcp from the gate, with the reason and the hold's end.
    let st = ringsync(&site, &["status"]);
    let a = st["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "sg-a")
        .cloned()
        .unwrap();
    assert_eq!(a["state"], "up", "{a}");
    let u = &a["unreachable"][0];
    assert_eq!(u["transport"], "tcp", "{a}");
    assert_eq!(u["node"], gate.admin().to_string(), "{a}");
    assert!(
        u["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("{}:5060", ip(NET, 11)))),
        "{a}"
    );
    let hold_left = u["until_ms"].as_u64().unwrap() as i64 - ringsync::work::now_ms() as i64;
    assert!((20_000..=30_000).contains(&hold_left), "{a}");
    let b = st["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "sg-b")
        .cloned()
        .unwrap();
    assert!(b.get("unreachable").is_none(), "{b}");
    let text = status_text(&site);
    let row = text
        .lines()
        .find(|l| l.starts_with("sg-a "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("up (tcp unreachable)"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("sg-a unreachable over tcp from ")),
        "{text}"
    );
}

/// The gate's log names the drain view it applies (revision, the
/// instances entering the drain zone) after `ringsync profile activate`,
/// and an instance that stops answering its probes, then answers again.
#[test]
fn the_gate_logs_applied_views_and_instances_going_down_and_up() {
    const NET: (u8, u8) = (84, 2);
    let dir = tempfile::tempdir().unwrap();
    let site = site_in(&dir, NET);
    let sg_a = probe_answerer(SocketAddr::new(ip(NET, 11), 5060));
    let _sg_b = probe_answerer(SocketAddr::new(ip(NET, 12), 5060));
    let gate = start_gate(&site, SocketAddr::new(ip(NET, 1), 9091));
    wait_both_up(&gate);
    let lines = |pat: &[&str]| {
        gate.log()
            .lines()
            .filter(|l| pat.iter().all(|p| l.contains(p)))
            .count()
    };
    assert_eq!(lines(&["answers health probes", "sg-a"]), 1);

    ringsync(
        &site,
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ],
    );
    ringsync(&site, &["profile", "activate", "maint-a"]);
    let store_rev = ringsync(&site, &["profile", "list"])["revision"]
        .as_u64()
        .unwrap();
    wait_for(
        "the applied view in the log",
        Duration::from_secs(5),
        || {
            (lines(&[
                "applied drain view",
                &format!("revision={store_rev}"),
                "entering=[\"sg-a\"]",
            ]) == 1)
                .then_some(())
        },
    );

    // sg-a stops answering: two probes unanswered mark it down, and the
    // log says so once; back, it says it answers again.
    sg_a.stop().expect("sg-a stops");
    wait_for("sg-a down in the log", Duration::from_secs(5), || {
        (lines(&["no answer to health probes", "sg-a"]) == 1).then_some(())
    });
    let _sg_a = probe_answerer(SocketAddr::new(ip(NET, 11), 5060));
    wait_for("sg-a up again in the log", Duration::from_secs(5), || {
        (lines(&["answers health probes", "sg-a"]) == 2).then_some(())
    });
    assert_eq!(lines(&["no answer to health probes"]), 1, "{}", gate.log());
}
