//! The load: offer/answer/delete cycles from client threads, and the
//! numbers they give.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use crate::Opts;

/// The benchmark's own loopback network: 127.76.0.0/24.
pub(crate) fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 76, 0, host))
}

// === ng messages, by hand (testbed does not depend on media-ctl) ===

fn bstr(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(s);
}

/// `<cookie> d...e` with the pairs sorted by key, as bencode requires.
pub(crate) fn ng(cookie: &str, pairs: &mut [(&str, &str)]) -> Vec<u8> {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(400);
    out.extend_from_slice(cookie.as_bytes());
    out.extend_from_slice(b" d");
    for (k, v) in pairs.iter() {
        bstr(&mut out, k.as_bytes());
        bstr(&mut out, v.as_bytes());
    }
    out.push(b'e');
    out
}

pub(crate) fn sdp(port: u16) -> String {
    format!(
        "v=0\r\no=- 1545997027 1 IN IP4 10.10.0.{h}\r\ns=bench\r\nc=IN IP4 10.10.0.{h}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0 8 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n\
         a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-16\r\na=ptime:20\r\na=sendrecv\r\n",
        h = port % 200 + 1
    )
}

// === the cycle load ===

#[derive(Default)]
pub(crate) struct Load {
    pub(crate) ok: u64,
    pub(crate) failed: u64,
    /// Round trip of every answered command, microseconds.
    pub(crate) lat_us: Vec<u32>,
}

/// One command; its round trip, or None if no `ok` came within 1 s.
fn exchange(
    sock: &UdpSocket,
    to: SocketAddr,
    d: &[u8],
    cookie: &str,
    buf: &mut [u8],
) -> Option<u32> {
    let t0 = Instant::now();
    sock.send_to(d, to).ok()?;
    loop {
        let n = sock.recv(buf).ok()?;
        let r = &buf[..n];
        if r.len() > cookie.len() && r.starts_with(cookie.as_bytes()) && r[cookie.len()] == b' ' {
            let ok = r.windows(12).any(|w| w == b"6:result2:ok");
            let us = u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX);
            return ok.then_some(us);
        }
        if t0.elapsed() > Duration::from_secs(1) {
            return None;
        }
    }
}

/// Runs `rate × seconds` cycles toward `to` with `workers` threads; cycle
/// `i` starts at `i / rate` seconds.
pub(crate) fn cycles(to: SocketAddr, tag: &str, o: &Opts) -> Load {
    let total = u64::from(o.rate) * u64::from(o.seconds);
    let start = Instant::now() + Duration::from_millis(50);
    let handles: Vec<_> = (0..o.workers)
        .map(|w| {
            let tag = tag.to_owned();
            let (rate, workers) = (u64::from(o.rate), u64::from(o.workers));
            thread::spawn(move || {
                let sock = UdpSocket::bind(SocketAddr::new(ip(100 + w as u8), 0)).expect("bind");
                sock.set_read_timeout(Some(Duration::from_secs(1)))
                    .expect("timeout");
                let mut buf = vec![0u8; 65_536];
                let mut load = Load::default();
                let mut i = u64::from(w);
                while i < total {
                    let at = start + Duration::from_micros(i * 1_000_000 / rate);
                    if let Some(d) = at.checked_duration_since(Instant::now()) {
                        thread::sleep(d);
                    }
                    let call = format!("{tag}-{i}@bench");
                    let offer_sdp = sdp(4000 + (i % 20000) as u16 * 2);
                    let answer_sdp = sdp(40000 + (i % 10000) as u16 * 2);
                    let steps: [Vec<(&str, &str)>; 3] = [
                        vec![
                            ("command", "offer"),
                            ("call-id", &call),
                            ("from-tag", "ft"),
                            ("sdp", &offer_sdp),
                        ],
                        vec![
                            ("command", "answer"),
                            ("call-id", &call),
                            ("from-tag", "ft"),
                            ("to-tag", "tt"),
                            ("sdp", &answer_sdp),
                        ],
                        vec![
                            ("command", "delete"),
                            ("call-id", &call),
                            ("from-tag", "ft"),
                            ("to-tag", "tt"),
                        ],
                    ];
                    let mut ok = true;
                    for (s, mut pairs) in steps.into_iter().enumerate() {
                        // Unique per run: rtpengine answers a cookie it has
                        // seen from its cache, without doing the work.
                        let cookie = format!("{tag}.{w}.{i}.{s}");
                        let d = ng(&cookie, &mut pairs);
                        match exchange(&sock, to, &d, &cookie, &mut buf) {
                            Some(us) => load.lat_us.push(us),
                            None => {
                                ok = false;
                                break;
                            }
                        }
                    }
                    if ok {
                        load.ok += 1;
                    } else {
                        load.failed += 1;
                    }
                    i += workers;
                }
                load
            })
        })
        .collect();
    let mut all = Load::default();
    for h in handles {
        let l = h.join().unwrap_or_default();
        all.ok += l.ok;
        all.failed += l.failed;
        all.lat_us.extend(l.lat_us);
    }
    all.lat_us.sort_unstable();
    all
}

/// The `q`-quantile of sorted µs samples in ms, nearest rank
/// ([`testbed::stats::percentile`]); NaN when there is none.
pub(crate) fn pct(sorted: &[u32], q: f64) -> f64 {
    testbed::stats::percentile(sorted, q).map_or(f64::NAN, |us| f64::from(us) / 1000.0)
}
