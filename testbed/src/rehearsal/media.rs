//! The media side of a `load` of calls. The sg/esg are SIPp, which sends
//! no ng command, so beside each SIPp caller an ng caller plays what the
//! sg's rtpengine module would, call by call: it follows the caller's log
//! and, for each established call, sends media-ctl's ng port the `offer`
//! and `answer` from the address of the sg/esg instance that answered it
//! (the address in its SDP answer), and the `delete` when the call ends. So
//! media-ctl places exactly the calls that are up, sees them come from the
//! instance's server (its bgmg, R-BG-1) and the report's mg shares are its
//! real choices.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// An ng caller following the SIPp caller's `log`: per `media CALL answer
/// ADDRESS` line an offer and answer from ADDRESS, per `ev end CALL` a
/// delete. Once `done` is set (the SIPp caller has exited) it reads the log
/// to its end, deletes the calls still up and returns.
pub fn follow(
    log: PathBuf,
    to: SocketAddr,
    done: Arc<AtomicBool>,
) -> thread::JoinHandle<MediaCalls> {
    thread::spawn(move || {
        let mut f = Follower {
            to,
            out: MediaCalls::default(),
            socks: BTreeMap::new(),
            up: BTreeMap::new(),
            n: 0,
        };
        let mut pos = 0u64;
        let mut partial = String::new();
        loop {
            let last = done.load(Ordering::Relaxed);
            for line in read_lines(&log, &mut pos, &mut partial) {
                f.line(&line);
            }
            if last {
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        for call in f.up.keys().cloned().collect::<Vec<_>>() {
            f.delete(&call);
        }
        f.out
    })
}

/// The complete lines added to `path` since `pos`.
fn read_lines(path: &std::path::Path, pos: &mut u64, partial: &mut String) -> Vec<String> {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut buf = String::new();
    if file.seek(SeekFrom::Start(*pos)).is_err() || file.read_to_string(&mut buf).is_err() {
        return Vec::new();
    }
    *pos += buf.len() as u64;
    partial.push_str(&buf);
    let Some(end) = partial.rfind('\n') else {
        return Vec::new();
    };
    let rest = partial.split_off(end + 1);
    let lines = std::mem::replace(partial, rest);
    lines.lines().map(str::to_owned).collect()
}

struct Follower {
    to: SocketAddr,
    out: MediaCalls,
    socks: BTreeMap<IpAddr, UdpSocket>,
    /// Calls up: their instance's address.
    up: BTreeMap<String, IpAddr>,
    n: u64,
}

impl Follower {
    fn line(&mut self, line: &str) {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["media", call, "answer", ip, ..] => {
                if let Ok(ip) = ip.parse() {
                    self.offer(call, ip);
                }
            }
            ["ev", "end", call, ..] => self.delete(call),
            _ => {}
        }
    }

    fn sock(&mut self, ip: IpAddr) -> Option<&UdpSocket> {
        if let std::collections::btree_map::Entry::Vacant(e) = self.socks.entry(ip) {
            let s = UdpSocket::bind(SocketAddr::new(ip, 0)).ok()?;
            s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
            e.insert(s);
        }
        self.socks.get(&ip)
    }

    fn offer(&mut self, call: &str, ip: IpAddr) {
        self.out.offered += 1;
        let sdp = offer_sdp(self.n);
        self.n += 1;
        let to = self.to;
        let ok = self.sock(ip).is_some_and(|s| {
            command(s, to, &format!("{call}.o"), "offer", call, Some(&sdp))
                && command(s, to, &format!("{call}.a"), "answer", call, Some(&sdp))
        });
        if ok {
            self.out.answered += 1;
            self.up.insert(call.to_owned(), ip);
        } else {
            self.out.failed += 1;
        }
    }

    fn delete(&mut self, call: &str) {
        let Some(ip) = self.up.remove(call) else {
            return;
        };
        let to = self.to;
        match self
            .sock(ip)
            .is_some_and(|s| command(s, to, &format!("{call}.d"), "delete", call, None))
        {
            true => self.out.deleted += 1,
            false => self.out.failed += 1,
        }
    }
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
