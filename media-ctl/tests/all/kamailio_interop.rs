//! Interop with a real SIP stack: SIPp calls with SDP go SIPp uac →
//! sip-gate → Kamailio (the sg, its `rtpengine` module pointed at the real
//! media-ctl binary) → SIPp uas. The calls complete, and the media address
//! both ends see (`c=` of every offer and answer, logged per Call-ID by the
//! scenarios) is the rtpengine media-ctl chose: the bgmg of Kamailio's
//! server while it is in the normal zone (R-BG-1), a normal-zone mg once
//! that server drains (R-BG-3). Run through `netns-run`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ringsync::config::SiteConfig;
use ringsync::profile::{NewProfile, ProfileState};
use ringsync::state::DrainState;
use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile, UDP};
use testbed::{Kamailio, Rtpengine, Scenario, Sipp, Transport};
use tokio_util::sync::CancellationToken;

fn ip(host: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(127, 81, 1, host))
}

const KAMAILIO: u8 = 21;
const MG_A: u8 = 31;
const MG_B: u8 = 32;
const BGMG_A: u8 = 41;

/// Kamailio as sg-a, rtpengines as mg-a, mg-b and bgmg-a, media-ctl on
/// `.1` (pinging every 200 ms), the gate's subscriber listener on `.2`.
fn site_text() -> String {
    let at = |host: u8, port: u16| SocketAddr::new(ip(host), port);
    SiteFile::new("interop")
        .section("timers", "mg_drain_window_s = 1")
        .section("admin", &format!("media_bind = \"{}\"", at(1, 9092)))
        .media(at(1, 2223), "ping_interval_ms = 200\nping_timeout_ms = 150")
        .servers(&["srv-a", "srv-b"])
        .instance("sg-a", "sg", "srv-a", at(KAMAILIO, 5060))
        .pool(
            "mg",
            "ng",
            &[("a", at(MG_A, 22222)), ("b", at(MG_B, 22222))],
        )
        .pool("bgmg", "ng", &[("a", at(BGMG_A, 22222))])
        .listener("subs", at(2, 5060), Mode::Balance("sg"), "subscriber", UDP)
        .text()
        .to_owned()
}

/// `call-id → [(what, address)]` from a scenario's `-trace_logs` file.
fn media_log(path: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("media") {
            continue;
        }
        if let (Some(call), Some(what), Some(addr)) = (w.next(), w.next(), w.next()) {
            out.entry(call.into())
                .or_default()
                .push((what.into(), addr.into()));
        }
    }
    out
}

/// Runs `calls` calls through the gate; returns the media addresses seen
/// per call at both ends.
fn run_calls(
    dir: &Path,
    tag: &str,
    gate: SocketAddr,
    uas_log: &Path,
    calls: u64,
) -> BTreeMap<String, Vec<(String, String)>> {
    let log = dir.join(format!("uac-{tag}.log"));
    let report = Sipp::new(Scenario::repo("uac_call_media"))
        .local_ip(ip(61))
        .remote(gate)
        .transport(Transport::Udp)
        .calls(calls)
        .rate(10)
        .duration(Duration::from_millis(200))
        .timeout(Duration::from_secs(30))
        .arg("-trace_logs")
        .arg("-log_file")
        .arg(&log)
        .spawn()
        .unwrap()
        .wait(Duration::from_secs(40))
        .unwrap();
    assert_eq!(report.successful, calls, "{tag}: {report:#?}");
    assert!(report.all_ok(), "{tag}: {report:#?}");
    let mut seen = media_log(&log);
    for (call, v) in media_log(uas_log) {
        seen.entry(call).or_default().extend(v);
    }
    seen
}

/// media-ctl (the real binary) in front of three rtpengines, up and pinged.
struct Media {
    node: Node,
    _mgs: Vec<testbed::RtpengineHandle>,
}

impl Media {
    fn start(path: &Path) -> Media {
        let _mgs = [MG_A, MG_B, BGMG_A]
            .iter()
            .map(|h| Rtpengine::new(ip(*h)).start().unwrap())
            .collect();
        let node = Node::media_ctl(path)
            .admin(SocketAddr::new(ip(1), 9092))
            .start()
            .unwrap();
        let m = Media { node, _mgs };
        m.wait("media-ctl up, mgs pinged", &|s| {
            s.instances
                .iter()
                .all(|i| i.health == ringsync::view::Health::Up)
        });
        m
    }

    fn status(&self) -> Option<media_ctl::Status> {
        self.node.get_json("/v1/status")
    }

    fn instance(&self, id: &str) -> media_ctl::MgStatus {
        let s = self.status().unwrap();
        s.instances.into_iter().find(|i| i.id == id).unwrap()
    }

    fn wait(&self, what: &str, f: &dyn Fn(&media_ctl::Status) -> bool) {
        self.node
            .wait_for(what, Duration::from_secs(10), |_| {
                self.status().filter(|s| f(s))
            })
            .unwrap();
    }
}

/// Every call seen with all four SDPs, each with its media on `addr`.
fn all_on(seen: &BTreeMap<String, Vec<(String, String)>>, addr: IpAddr, calls: usize) {
    assert_eq!(seen.len(), calls, "{seen:#?}");
    for (call, v) in seen {
        let whats: Vec<&str> = v.iter().map(|(w, _)| w.as_str()).collect();
        for w in ["offer", "answer", "reoffer", "reanswer"] {
            assert!(whats.contains(&w), "{call}: {v:?}");
        }
        let addr = addr.to_string();
        assert!(v.iter().all(|(_, a)| *a == addr), "{call}: {v:?}");
    }
}

#[test]
fn kamailio_relays_sdp_through_media_ctl_to_the_rtpengine_it_chose() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.toml");
    std::fs::write(&path, site_text()).unwrap();
    let config = SiteConfig::load(&path).unwrap();
    let media = Media::start(&path);

    let uas_log = dir.path().join("uas.log");
    let uas = Sipp::new(Scenario::repo("uas_call_media"))
        .local(ip(51), 5060)
        .timeout(Duration::from_secs(90))
        .arg("-trace_logs")
        .arg("-log_file")
        .arg(&uas_log)
        .spawn()
        .unwrap();
    let kamailio = Kamailio::new()
        .listen(SocketAddr::new(ip(KAMAILIO), 5060))
        .transports(&[Transport::Udp])
        .destination(uas.local_addr(), Transport::Udp)
        .define(format!("RTPENGINE_SOCK=\"udp:{}:2223\"", ip(1)))
        .define(format!("RTPENGINE_SOURCE=\"{}\"", ip(KAMAILIO)))
        .start()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let drain = DrainState::new(Arc::new(config.clone()));
    let gate = rt
        .block_on(sip_gate::Gate::start(
            config.clone(),
            drain,
            CancellationToken::new(),
        ))
        .unwrap();
    let gate_addr = gate.config().listener("subs").unwrap().bind;

    // Normal zone: Kamailio is sg-a on srv-a; its calls get the bgmg of
    // srv-a (R-BG-1), at both ends, for the offer and the re-offer.
    let seen = run_calls(dir.path(), "normal", gate_addr, &uas_log, 10);
    all_on(&seen, ip(BGMG_A), 10);
    assert_eq!(media.instance("bgmg-a").new_calls, 10);
    assert_eq!(
        media.status().unwrap().calls,
        0,
        "every BYE deleted its call"
    );

    // srv-a drains: Kamailio (sg-a) is draining; the calls it still takes
    // get a normal-zone mg, mg-b, not the bgmg and not mg-a (R-BG-3, R-MG-1).
    let store = rt.block_on(ringsync::store::open(&config)).unwrap();
    rt.block_on(store.create(NewProfile {
        name: "maint-a".into(),
        description: "interop".into(),
        servers: vec!["srv-a".into()],
        state: ProfileState::Active,
    }))
    .unwrap();
    media.wait("drain applied", &|s| s.drain_zone == ["srv-a"]);
    std::thread::sleep(Duration::from_millis(1200)); // the 1 s window
    let seen: BTreeMap<_, _> = run_calls(dir.path(), "drain", gate_addr, &uas_log, 10)
        .into_iter()
        .filter(|(_, v)| v.iter().any(|(_, a)| *a != ip(BGMG_A).to_string()))
        .collect();
    all_on(&seen, ip(MG_B), 10);
    assert_eq!(media.instance("mg-b").new_calls, 10);
    assert_eq!(media.instance("bgmg-a").stoppable, Some(true));
    let s = media.status().unwrap();
    assert_eq!(s.counters.get("bgmg_skipped.local_draining"), Some(&10));

    kamailio.stop();
    let _ = uas.stop();
    rt.block_on(gate.shutdown(Duration::from_secs(2)));
}
