//! The media side of a `load` of calls. The sg/esg are SIPp, which sends
//! no ng command, so alongside each SIPp caller an ng caller plays, per
//! call of the load, what an sg's rtpengine module would: `offer` when the
//! call starts, `answer`, and `delete` after the hold time, to media-ctl's
//! ng port. media-ctl then places as many calls as the load has, on the mg
//! its weights choose, and the report's mg shares are its real choices.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use media_ctl::ng::{self, DictView, Value};

/// What an ng caller did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MediaCalls {
    /// Calls offered.
    pub offered: u64,
    /// Offer and answer `ok`.
    pub answered: u64,
    /// Delete `ok`.
    pub deleted: u64,
    /// A command with an error result or no reply within 1 s.
    pub failed: u64,
}

impl MediaCalls {
    /// The sum of two callers' counts.
    pub fn plus(self, o: MediaCalls) -> MediaCalls {
        MediaCalls {
            offered: self.offered + o.offered,
            answered: self.answered + o.answered,
            deleted: self.deleted + o.deleted,
            failed: self.failed + o.failed,
        }
    }
}

/// An ng caller: `rate` calls/s for `duration` toward `to`, each deleted
/// `hold` after its offer; it ends by itself.
pub fn spawn(
    from: IpAddr,
    to: SocketAddr,
    tag: String,
    rate: u32,
    duration: Duration,
    hold: Duration,
) -> thread::JoinHandle<MediaCalls> {
    thread::spawn(move || {
        let mut out = MediaCalls::default();
        let Ok(sock) = UdpSocket::bind(SocketAddr::new(from, 0)) else {
            return out;
        };
        let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
        let total = (f64::from(rate) * duration.as_secs_f64()).ceil() as u64;
        let start = Instant::now();
        let mut up: VecDeque<(Instant, String)> = VecDeque::new();
        let mut i = 0;
        while i < total || !up.is_empty() {
            let next = start + Duration::from_secs_f64(i as f64 / f64::from(rate.max(1)));
            while up.front().is_some_and(|(at, _)| *at <= Instant::now()) {
                let (_, call) = up.pop_front().expect("front exists");
                match command(&sock, to, &format!("{call}.d"), "delete", &call, None) {
                    true => out.deleted += 1,
                    false => out.failed += 1,
                }
            }
            if i < total && Instant::now() >= next {
                let call = format!("{tag}-{i}@rehearsal");
                out.offered += 1;
                let sdp = offer_sdp(i);
                let ok = command(&sock, to, &format!("{call}.o"), "offer", &call, Some(&sdp))
                    && command(&sock, to, &format!("{call}.a"), "answer", &call, Some(&sdp));
                if ok {
                    out.answered += 1;
                    up.push_back((Instant::now() + hold, call));
                } else {
                    out.failed += 1;
                }
                i += 1;
                continue;
            }
            thread::sleep(Duration::from_millis(5));
        }
        out
    })
}

fn offer_sdp(i: u64) -> String {
    let port = 10_000 + (i % 20_000) * 2;
    format!(
        "v=0\r\no=- {i} 1 IN IP4 10.10.0.1\r\ns=rehearsal\r\nc=IN IP4 10.10.0.1\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n"
    )
}

/// One ng command; true when its result is `ok`.
fn command(
    sock: &UdpSocket,
    to: SocketAddr,
    cookie: &str,
    cmd: &str,
    call: &str,
    sdp: Option<&str>,
) -> bool {
    let mut d = std::collections::BTreeMap::new();
    d.insert(b"command".to_vec(), Value::str(cmd));
    d.insert(b"call-id".to_vec(), Value::str(call));
    d.insert(b"from-tag".to_vec(), Value::str("ft"));
    if cmd != "offer" {
        d.insert(b"to-tag".to_vec(), Value::str("tt"));
    }
    if let Some(s) = sdp {
        d.insert(b"sdp".to_vec(), Value::str(s));
    }
    let mut payload = Vec::new();
    Value::Dict(d).encode_into(&mut payload);
    if sock
        .send_to(&ng::join_cookie(cookie.as_bytes(), &payload), to)
        .is_err()
    {
        return false;
    }
    let t0 = Instant::now();
    let mut buf = vec![0u8; 65_536];
    while t0.elapsed() < Duration::from_secs(1) {
        let Ok(n) = sock.recv(&mut buf) else {
            continue;
        };
        let Ok((c, body)) = ng::split_cookie(&buf[..n]) else {
            continue;
        };
        if c == cookie.as_bytes() {
            return DictView::parse(body)
                .ok()
                .and_then(|v| v.bytes("result").map(|r| r == b"ok"))
                .unwrap_or(false);
        }
    }
    false
}
