//! `[capture]` in media-ctl (the real binary, a real rtpengine): every ng
//! command and answer goes to the collector as a HEP log record (protocol
//! type 100), correlated by the call's call-id (an answer, which names no
//! call, by its command's cookie), on each hop: client to media-ctl,
//! media-ctl to the mg and back, media-ctl to the client. Read on the
//! wire with tshark and testbed's HEP v3 dissector; none malformed.
//!
//! Addresses: `127.80.30.0/24` (the collector on `.50:9060`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::real::*;
use testbed::hep::{fields, hep_args, TsharkCapture};

#[test]
fn ng_commands_and_answers_reach_the_collector_correlated_by_call_id() {
    let net = (80, 30);
    let collector = SocketAddr::new(ip(net, 50), 9060);
    // The collector's socket: the packets are read off the wire by tshark.
    let _collector = std::net::UdpSocket::bind(collector).unwrap();
    let wire = TsharkCapture::start(
        "lo",
        &format!("udp and dst host {} and dst port 9060", collector.ip()),
    )
    .unwrap();
    let mut spec = Spec::new(net);
    spec.mgs = 1;
    spec.running = vec![0];
    spec.bgmg = false;
    // The node is named by its admin address (no --node): its own agent id.
    let admin = SocketAddr::new(ip(net, 1), 9092);
    spec.extra = format!(
        "[capture]\ncollectors = [\"udp:{collector}\"]\nagent_id = 3001\nagents = {{ \"{admin}\" = 3002 }}\n"
    );
    let site = Site::start(spec);
    let mut c = site.client(11);
    for call in ["cap-1@test", "cap-2@test"] {
        c.setup(call);
    }
    std::thread::sleep(Duration::from_millis(500));
    let sent = format!("mediactl_capture_sent_total{{collector=\"udp:{collector}\"}}");
    assert!(site.node.metric(&sent).unwrap() > 0.0);
    for reason in ["queue_full", "collector_down", "collector_slow"] {
        let dropped = format!("mediactl_capture_dropped_total{{reason=\"{reason}\"}}");
        assert_eq!(site.node.metric(&dropped).unwrap(), 0.0, "{reason}");
    }
    let wire = wire.stop().unwrap();

    let args = hep_args(9060);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let rows = fields(
        wire.path(),
        &args,
        "hep3",
        &[
            "hep3.proto_type",
            "hep3.agent_id",
            "hep3.correlation_id",
            "hep3.src_ip",
            "hep3.src_port",
            "hep3.dst_ip",
            "hep3.dst_port",
        ],
    )
    .unwrap();
    assert!(!rows.is_empty());
    let bad = fields(wire.path(), &args, "_ws.malformed", &["frame.number"]).unwrap();
    assert!(bad.is_empty(), "malformed: {bad:?}");
    let client = c.sock.local_addr().unwrap().to_string();
    let mg = SocketAddr::new(ip(net, 31), 22222).to_string();
    let mut hops: BTreeMap<&str, Vec<(String, String)>> = BTreeMap::new();
    for r in &rows {
        assert_eq!(r[0], "100", "{r:?}");
        if !r[2].is_empty() {
            // The calls' records come after the node was named.
            assert_eq!(r[1], "3002", "{r:?}");
        }
        let (src, dst) = (format!("{}:{}", r[3], r[4]), format!("{}:{}", r[5], r[6]));
        hops.entry(r[2].as_str()).or_default().push((src, dst));
    }
    for call in ["cap-1@test", "cap-2@test"] {
        let hops = hops.get(call).unwrap_or_else(|| panic!("{call}: {rows:?}"));
        // offer and answer: each from the client, to the mg, from the mg,
        // to the client.
        assert_eq!(hops.len(), 8, "{call}: {hops:?}");
        for from in [&client, &mg] {
            let n = hops.iter().filter(|(s, _)| s == from).count();
            assert_eq!(n, 2, "{call}: from {from}: {hops:?}");
        }
        let to_mg = hops.iter().filter(|(_, d)| *d == mg).count();
        let to_client = hops.iter().filter(|(_, d)| *d == client).count();
        assert_eq!((to_mg, to_client), (2, 2), "{call}: {hops:?}");
    }
}

/// SIGHUP and a wait until media-ctl counted one more reload as `result`.
fn sighup(site: &Site, result: &str) {
    let series = format!("mediactl_config_reloads_total{{result=\"{result}\"}}");
    let before = site.node.metric(&series).unwrap();
    site.node.signal("HUP");
    testbed::wait_for(
        &format!("a reload counted as {result}"),
        Duration::from_secs(5),
        || (site.node.metric(&series).ok()? > before).then_some(()),
    )
    .unwrap();
}

/// The correlation ids of the HEP packets `collector` gets until it has
/// been quiet for its read timeout, for 3 s at most (the mg's pings go on
/// while capture is on); each packet a log record (type 100).
fn records(collector: &std::net::UdpSocket) -> Vec<String> {
    let mut ids = Vec::new();
    let mut buf = [0u8; 65_536];
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < until {
        let Ok(n) = collector.recv(&mut buf) else {
            break;
        };
        let chunks = testbed::hep::chunks(&buf[..n]).expect("a whole HEP packet");
        let get = |kind| chunks.iter().find(|(k, _)| *k == kind).map(|(_, d)| d);
        assert_eq!(get(0x000b), Some(&vec![100]), "a log record");
        let id = get(0x0011).map(|d| String::from_utf8_lossy(d).into_owned());
        ids.push(id.unwrap_or_default());
    }
    ids
}

/// `[capture]` follows SIGHUP as in sip-gate: started without it, media-ctl
/// sends nothing; with it added and SIGHUP, the next call's records come;
/// a file that does not load leaves the capture in force; with it
/// removed and SIGHUP, nothing more.
#[test]
fn capture_applies_on_reload() {
    let net = (80, 31);
    let at = SocketAddr::new(ip(net, 50), 9060);
    let collector = std::net::UdpSocket::bind(at).unwrap();
    collector
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut spec = Spec::new(net);
    spec.mgs = 1;
    spec.running = vec![0];
    spec.bgmg = false;
    let site = Site::start(spec);
    let mut c = site.client(11);
    c.setup("before@test");
    assert_eq!(
        records(&collector),
        Vec::<String>::new(),
        "no [capture] yet"
    );

    let without = std::fs::read_to_string(&site.path).unwrap();
    let with = format!("{without}\n[capture]\ncollectors = [\"udp:{at}\"]\n");
    std::fs::write(&site.path, &with).unwrap();
    sighup(&site, "applied");
    c.setup("during@test");
    let got = records(&collector);
    // offer and answer, each on four hops.
    let during = got.iter().filter(|id| *id == "during@test").count();
    assert_eq!(during, 8, "{got:?}");

    std::fs::write(&site.path, "[site\n").unwrap();
    sighup(&site, "invalid");
    c.setup("kept@test");
    let got = records(&collector);
    assert_eq!(
        got.iter().filter(|id| *id == "kept@test").count(),
        8,
        "{got:?}"
    );

    std::fs::write(&site.path, &without).unwrap();
    sighup(&site, "applied");
    // What the running sender held when the reload came (the mg's pings).
    records(&collector);
    c.setup("after@test");
    assert_eq!(
        records(&collector),
        Vec::<String>::new(),
        "[capture] removed"
    );
}
