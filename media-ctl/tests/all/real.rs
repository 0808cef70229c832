//! A site on its own loopback network with real rtpengine processes as its
//! mgs and bgmg, the real media-ctl binary in front of them, and an ng
//! client that plays the sg/esg. Profiles change through the real store,
//! as `ringsync profile activate` would do it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use media_ctl::ng::{split_cookie, DictView, NgMessage, Value};
use media_ctl::Status;
use ringsync::profile::{NewProfile, ProfileState};
use ringsync::work::WorkReport;
use testbed::bins::Node;
use testbed::fixture::SiteFile;
use testbed::{Rtpengine, RtpengineHandle};

/// `127.a.b.host`.
pub fn ip(net: (u8, u8), host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, net.0, net.1, host))
}

/// What to start.
pub struct Spec {
    /// `127.a.b.0/24` of this site.
    pub net: (u8, u8),
    /// mg instances (mg-a, mg-b, ... on srv-a, srv-b, ...).
    pub mgs: u8,
    /// Start a bgmg on srv-a.
    pub bgmg: bool,
    /// Which mgs get a real rtpengine (the others are configured but dead).
    pub running: Vec<u8>,
    /// `timers.mg_drain_window_s`.
    pub window_s: u32,
    /// Extra rtpengine arguments.
    pub rtpengine_args: Vec<String>,
    /// etcd client URLs: the site's store is etcd (else the embedded file).
    pub etcd: Option<Vec<String>>,
    /// TOML sections added to the site file (e.g. `[capture]`).
    pub extra: String,
}

impl Spec {
    pub fn new(net: (u8, u8)) -> Spec {
        Spec {
            net,
            mgs: 3,
            bgmg: true,
            running: vec![0, 1, 2],
            window_s: 4,
            rtpengine_args: Vec::new(),
            etcd: None,
            extra: String::new(),
        }
    }
}

/// A running site. media-ctl is its first field, so it is killed before
/// the rest (its directory, the rtpengines) goes.
pub struct Site {
    /// The media-ctl binary.
    pub node: Node,
    pub net: (u8, u8),
    /// Held so the site file's directory lives as long as the site.
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub ng: SocketAddr,
    pub admin: SocketAddr,
    pub mgs: BTreeMap<String, RtpengineHandle>,
    rt: tokio::runtime::Runtime,
    store: Arc<dyn ringsync::Store>,
    profile: Option<String>,
}

/// Instance id of the i-th mg.
pub fn mg_id(i: u8) -> String {
    format!("mg-{}", (b'a' + i) as char)
}

/// Server of the i-th mg (and sg).
pub fn srv(i: u8) -> String {
    format!("srv-{}", (b'a' + i) as char)
}

impl Site {
    pub fn start(spec: Spec) -> Site {
        let net = spec.net;
        let dir = tempfile::tempdir().unwrap();
        let ng = SocketAddr::new(ip(net, 1), 2223);
        let admin = SocketAddr::new(ip(net, 1), 9092);
        let media =
            "ping_interval_ms = 200\nping_timeout_ms = 150\nping_failures = 2\nmg_timeout_ms = 800";
        let mut site = SiteFile::new(&format!("m{}-{}", net.0, net.1))
            .section("timers", &format!("mg_drain_window_s = {}", spec.window_s))
            .section("admin", &format!("media_bind = \"{admin}\""))
            .media(ng, media);
        let servers: Vec<String> = (0..spec.mgs).map(srv).collect();
        site = site.servers(&servers.iter().map(String::as_str).collect::<Vec<_>>());
        // One sg per server; each sends ng from 127.a.b.(11+i).
        for i in 0..spec.mgs {
            let sg = format!("sg-{}", (b'a' + i) as char);
            site = site.instance(&sg, "sg", &srv(i), SocketAddr::new(ip(net, 11 + i), 5060));
        }
        let mut mgs = BTreeMap::new();
        for i in 0..spec.mgs {
            let addr = ip(net, 31 + i);
            let ng = format!("ng = \"{addr}:22222\"");
            site = site.instance_with(&mg_id(i), "mg", &srv(i), &ng);
            if spec.running.contains(&i) {
                let r = spec
                    .rtpengine_args
                    .iter()
                    .fold(Rtpengine::new(addr), |r, a| r.arg(a.clone()));
                mgs.insert(mg_id(i), r.start().unwrap());
            }
        }
        if spec.bgmg {
            let addr = ip(net, 41);
            site = site.instance_with("bgmg-a", "bgmg", "srv-a", &format!("ng = \"{addr}:22222\""));
            let r = spec
                .rtpengine_args
                .iter()
                .fold(Rtpengine::new(addr), |r, a| r.arg(a.clone()));
            mgs.insert("bgmg-a".into(), r.start().unwrap());
        }
        if let Some(eps) = &spec.etcd {
            site = site.etcd(eps, &format!("/media/{}-{}", net.0, net.1));
        }
        let path = site.raw(&spec.extra).write(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let config = ringsync::SiteConfig::load(&path).unwrap();
        let store = rt.block_on(ringsync::store::open(&config)).unwrap();
        let node = Node::media_ctl(&path).admin(admin).start().unwrap();
        let site = Site {
            node,
            net,
            _dir: dir,
            path,
            ng,
            admin,
            mgs,
            rt,
            store,
            profile: None,
        };
        site.wait_until("media-ctl up and every running mg pinged", |s| {
            s.status().is_some_and(|st| {
                st.instances
                    .iter()
                    .all(|i| i.health != ringsync::view::Health::Unknown)
            })
        });
        site
    }

    /// Kills media-ctl (SIGKILL: no goodbye) and starts it again.
    pub fn restart(&mut self) {
        self.node.restart().unwrap();
        self.wait_until("media-ctl back", |s| s.status().is_some());
    }

    /// An ng client on `127.a.b.host` (host 11+i plays sg i).
    pub fn client(&self, host: u8) -> NgClient {
        let sock = UdpSocket::bind(SocketAddr::new(ip(self.net, host), 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        NgClient {
            sock,
            to: self.ng,
            n: 0,
        }
    }

    /// The status, as served.
    pub fn status(&self) -> Option<Status> {
        self.node.get_json("/v1/status")
    }

    /// The work report, as served.
    pub fn work(&self) -> WorkReport {
        self.node.work().expect("work report")
    }

    /// Polls until `cond` holds (10 s at most); how long that took.
    pub fn wait_until(&self, what: &str, cond: impl Fn(&Site) -> bool) -> Duration {
        let start = Instant::now();
        self.node
            .wait_for(what, Duration::from_secs(10), |_| cond(self).then_some(()))
            .unwrap();
        start.elapsed()
    }

    /// Activates a profile draining `servers` (replacing the previous one),
    /// or lifts every drain with an empty list.
    pub fn drain(&mut self, servers: &[&str]) {
        if let Some(id) = self.profile.take() {
            self.rt.block_on(self.store.delete(&id)).unwrap();
        }
        if servers.is_empty() {
            return;
        }
        let p = self
            .rt
            .block_on(self.store.create(NewProfile {
                name: "maint".into(),
                description: "test".into(),
                servers: servers.iter().map(|s| s.to_string()).collect(),
                state: ProfileState::Active,
            }))
            .unwrap();
        self.profile = Some(p.id);
    }

    /// The site's status as `ringsync status` computes it: the profiles
    /// from the store, media-ctl's `/v1/work` asked by ringsync's own
    /// fetcher and summed (R-ST-3). Only media-ctl is asked (no gate here).
    pub fn ringsync_status(&self) -> ringsync_ops::status::SiteStatus {
        let config = Arc::new(ringsync::SiteConfig::load(&self.path).unwrap());
        let state = ringsync::state::DrainState::new(config.clone());
        state.set_profiles(self.rt.block_on(self.store.list()).unwrap());
        let nodes = [ringsync_ops::status::NodeAddr {
            kind: ringsync::work::NodeKind::MediaCtl,
            addr: self.admin,
        }];
        let round = self.rt.block_on(async {
            let fetcher = ringsync_ops::fetch::Fetcher::default();
            ringsync_ops::status::ask_all(&fetcher, &config.site.name, &nodes).await
        });
        round.status(&state.view())
    }

    /// The site's status from the store's node registry (etcd): what every
    /// registered node published, summed (R-ST-3).
    pub fn registry_status(&self) -> ringsync_ops::status::SiteStatus {
        let config = Arc::new(ringsync::SiteConfig::load(&self.path).unwrap());
        let state = ringsync::state::DrainState::new(config);
        state.set_profiles(self.rt.block_on(self.store.list()).unwrap());
        let round = self
            .rt
            .block_on(ringsync_ops::sitewide::round(self.store.as_ref()))
            .unwrap()
            .expect("the store keeps a node registry");
        round.status(&state.view())
    }

    /// Waits until media-ctl shows `servers` as the drain zone.
    pub fn wait_drain_zone(&self, servers: &[&str]) -> Duration {
        let want: Vec<String> = servers.iter().map(|s| s.to_string()).collect();
        self.wait_until("drain zone applied", |s| {
            s.status().is_some_and(|st| st.drain_zone == want)
        })
    }

    /// The instance whose rtpengine has this address.
    pub fn mg_at(&self, addr: &str) -> String {
        self.mgs
            .iter()
            .find(|(_, h)| h.ip().to_string() == addr)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("no mg at {addr}"))
    }

    /// SIGTERM; true if it exited cleanly within 10 s.
    pub fn stop(&mut self) -> bool {
        self.node
            .stop(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    }
}

/// An ng client (plays an sg/esg, or Kamailio's rtpengine module).
pub struct NgClient {
    pub sock: UdpSocket,
    pub to: SocketAddr,
    n: u64,
}

/// An answer, read.
#[derive(Debug, Clone)]
pub struct Answer {
    pub raw: Vec<u8>,
    pub result: String,
    pub error: Option<String>,
    /// The address in the SDP's `c=` line: which mg took the call.
    pub media: Option<String>,
}

impl NgClient {
    /// Sends a command, waits for its answer (same cookie).
    pub fn cmd(&mut self, pairs: &[(&str, &str)]) -> Answer {
        self.n += 1;
        let cookie = format!("t{}", self.n);
        let dict: BTreeMap<Vec<u8>, Value> = pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), Value::str(v)))
            .collect();
        let d = NgMessage {
            cookie: cookie.clone().into_bytes(),
            dict,
        }
        .to_bytes();
        self.raw(&d, &cookie).expect("an answer within 3 s")
    }

    /// Sends raw bytes; the answer carrying `cookie`, if any comes.
    pub fn raw(&mut self, d: &[u8], cookie: &str) -> Option<Answer> {
        self.sock.send_to(d, self.to).unwrap();
        let mut buf = vec![0u8; 65_536];
        loop {
            let n = self.sock.recv(&mut buf).ok()?;
            let Ok((c, payload)) = split_cookie(&buf[..n]) else {
                continue;
            };
            if c != cookie.as_bytes() {
                continue;
            }
            let v = DictView::parse(payload).ok()?;
            let s = |k| v.bytes(k).map(|b| String::from_utf8_lossy(b).into_owned());
            return Some(Answer {
                raw: buf[..n].to_vec(),
                result: s("result").unwrap_or_default(),
                error: s("error-reason"),
                media: s("sdp").and_then(|sdp| {
                    sdp.lines()
                        .find_map(|l| l.strip_prefix("c=IN IP4 ").map(|a| a.trim().to_owned()))
                }),
            });
        }
    }

    /// An offer for a new call; returns the answer.
    pub fn offer(&mut self, call: &str) -> Answer {
        self.cmd(&[
            ("command", "offer"),
            ("call-id", call),
            ("from-tag", "ft"),
            ("sdp", &sdp("10.1.1.1", 4000)),
        ])
    }

    /// The callee's answer.
    pub fn answer(&mut self, call: &str) -> Answer {
        self.cmd(&[
            ("command", "answer"),
            ("call-id", call),
            ("from-tag", "ft"),
            ("to-tag", "tt"),
            ("sdp", &sdp("10.2.2.2", 5000)),
        ])
    }

    /// Ends the call.
    pub fn delete(&mut self, call: &str) -> Answer {
        self.cmd(&[
            ("command", "delete"),
            ("call-id", call),
            ("from-tag", "ft"),
            ("to-tag", "tt"),
        ])
    }

    /// A whole setup (offer + answer); returns the mg address, checking
    /// both answers carry the same one (R-MG-2).
    pub fn setup(&mut self, call: &str) -> String {
        let o = self.offer(call);
        assert_eq!(o.result, "ok", "offer {call}: {o:?}");
        let a = self.answer(call);
        assert_eq!(a.result, "ok", "answer {call}: {a:?}");
        assert_eq!(o.media, a.media, "R-MG-2: answer on the offer's mg");
        o.media.expect("c= in the SDP")
    }
}

/// A minimal audio SDP.
pub fn sdp(addr: &str, port: u16) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {addr}\r\ns=-\r\nc=IN IP4 {addr}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n"
    )
}
