//! The sg instances behind the gate: registrar and call UAS at once.
//!
//! The gate places a REGISTER on its pool's ring by AoR and a call by
//! Call-ID, so every instance gets both. A SIPp server plays one scenario
//! and starts it on the first request of each Call-ID (`uas_call` takes a
//! REGISTER for a broken call, `uas_register` an INVITE), so the
//! instances here are a small stateless UDP answerer instead, one thread
//! each: 200 to every request but ACK, the To tag made from the Call-ID
//! (so a retransmission gets the same one), Vias and Record-Routes copied;
//! a REGISTER's 200 lists its Contact with the requested expiry, an
//! INVITE's carries an SDP answer. It costs far less CPU than a SIPp
//! server per request, which on a shared 2-core machine leaves the cores
//! to the gate and the timed callers.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The running stand-ins; stopped (and joined) on drop.
pub(crate) struct StandIns {
    stop: Arc<AtomicBool>,
    registers: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl StandIns {
    /// One stand-in on each address.
    pub(crate) fn start(addrs: &[SocketAddr]) -> Result<StandIns, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let registers = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for &a in addrs {
            let sock = UdpSocket::bind(a).map_err(|e| format!("stand-in on {a}: {e}"))?;
            sock.set_read_timeout(Some(Duration::from_millis(100)))
                .map_err(|e| e.to_string())?;
            let (stop, registers) = (stop.clone(), registers.clone());
            threads.push(std::thread::spawn(move || serve(&sock, &stop, &registers)));
        }
        Ok(StandIns {
            stop,
            registers,
            threads,
        })
    }

    /// REGISTERs answered so far (retransmissions included).
    pub(crate) fn registers(&self) -> u64 {
        self.registers.load(Ordering::Relaxed)
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(sock: &UdpSocket, stop: &AtomicBool, registers: &AtomicU64) {
    let mut buf = vec![0u8; 65_536];
    let local = sock.local_addr().ok();
    while !stop.load(Ordering::Relaxed) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => continue,
        };
        let Some(req) = buf.get(..n).and_then(|b| std::str::from_utf8(b).ok()) else {
            continue;
        };
        if let Some((reply, register)) = local.and_then(|l| answer(req, l)) {
            if register {
                registers.fetch_add(1, Ordering::Relaxed);
            }
            let _ = sock.send_to(reply.as_bytes(), from);
        }
    }
}

/// The 200 to `req` (and whether it was a REGISTER); `None` for an ACK, a
/// response or what does not parse.
pub(crate) fn answer(req: &str, local: SocketAddr) -> Option<(String, bool)> {
    let mut lines = req.split("\r\n");
    let method = lines.next()?.split(' ').next()?;
    if method == "ACK" || method == "SIP/2.0" || method.is_empty() {
        return None;
    }
    let mut out = String::from("SIP/2.0 200 OK\r\n");
    let (mut contact, mut expires, mut call_id) = (None, "3600", "");
    for line in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "via" | "v" | "record-route" | "from" | "f" | "cseq" => {
                out.push_str(line);
                out.push_str("\r\n");
            }
            "call-id" | "i" => {
                call_id = value;
                out.push_str(line);
                out.push_str("\r\n");
            }
            "to" | "t" if value.contains(";tag=") => {
                out.push_str(line);
                out.push_str("\r\n");
            }
            "to" | "t" => {
                let tag = fnv(call_id_of(req));
                out.push_str(&format!("To: {value};tag=st{tag:x}\r\n"));
            }
            "contact" | "m" => contact = Some(value),
            "expires" => expires = value,
            _ => {}
        }
    }
    if call_id.is_empty() {
        return None;
    }
    let register = method == "REGISTER";
    if register {
        if let Some(c) = contact {
            out.push_str(&format!(
                "Contact: {c};expires={expires}\r\nExpires: {expires}\r\n"
            ));
        }
    } else {
        out.push_str(&format!("Contact: <sip:sg@{local}>\r\n"));
    }
    if method == "INVITE" {
        let ip = local.ip();
        let sdp = format!(
            "v=0\r\no=sg 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        );
        out.push_str(&format!(
            "Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
            sdp.len()
        ));
    } else {
        out.push_str("Content-Length: 0\r\n\r\n");
    }
    Some((out, register))
}

/// The Call-ID's value, wherever its header is (the To line may come
/// before it).
fn call_id_of(req: &str) -> &str {
    req.split("\r\n")
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("call-id") || n.trim() == "i")
        .map_or("", |(_, v)| v.trim())
}

/// FNV-1a: a To tag that is the same for every copy of a request.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: &str = "127.82.0.11:5060";

    #[test]
    fn a_register_gets_200_listing_its_contact_and_the_same_tag_every_time() {
        let req = "REGISTER sip:avalanche.test SIP/2.0\r\nVia: SIP/2.0/UDP 127.82.0.5:5060;branch=z9hG4bKg\r\nVia: SIP/2.0/UDP 127.82.0.150:5060;branch=z9hG4bK-av-1-1;rport=5060\r\nPath: <sip:gate;lr>\r\nFrom: <sip:u1@avalanche.test>;tag=av1\r\nTo: <sip:u1@avalanche.test>\r\nCall-ID: av-1@avalanche.test\r\nCSeq: 1 REGISTER\r\nContact: <sip:u1@127.82.0.150:5060>\r\nExpires: 600\r\nContent-Length: 0\r\n\r\n";
        let (r, register) = answer(req, LOCAL.parse().unwrap()).unwrap();
        assert!(register);
        assert!(r.starts_with("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.82.0.5:5060;branch=z9hG4bKg\r\nVia: SIP/2.0/UDP 127.82.0.150"), "{r}");
        assert!(
            r.contains("\r\nContact: <sip:u1@127.82.0.150:5060>;expires=600\r\n"),
            "{r}"
        );
        assert!(
            r.contains("\r\nCSeq: 1 REGISTER\r\n") && !r.contains("Path"),
            "{r}"
        );
        assert_eq!(answer(req, LOCAL.parse().unwrap()).unwrap().0, r);
        assert!(r.ends_with("Content-Length: 0\r\n\r\n"));
    }

    #[test]
    fn an_invite_gets_200_with_sdp_and_an_ack_nothing() {
        let req = "INVITE sip:x@127.82.0.11 SIP/2.0\r\nVia: SIP/2.0/UDP 127.82.0.5;branch=z9hG4bK1\r\nRecord-Route: <sip:127.82.0.5;lr>\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:x@y>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
        let (r, register) = answer(req, LOCAL.parse().unwrap()).unwrap();
        assert!(!register);
        assert!(
            r.contains("\r\nRecord-Route: <sip:127.82.0.5;lr>\r\n"),
            "{r}"
        );
        assert!(r.contains("\r\nTo: <sip:x@y>;tag=st"), "{r}");
        assert!(r.contains("Content-Type: application/sdp\r\n"), "{r}");
        let bye = req
            .replace("INVITE sip", "BYE sip")
            .replace("<sip:x@y>", "<sip:x@y>;tag=9")
            .replace("1 INVITE", "2 BYE");
        let (r, _) = answer(&bye, LOCAL.parse().unwrap()).unwrap();
        assert!(
            r.contains("\r\nTo: <sip:x@y>;tag=9\r\n") && r.ends_with("Content-Length: 0\r\n\r\n"),
            "{r}"
        );
        assert!(answer(
            &req.replace("INVITE sip", "ACK sip"),
            LOCAL.parse().unwrap()
        )
        .is_none());
    }
}
