//! A TCP collector: HEP packets back to back on one connection, dropped
//! and counted while it is gone, the connection made again when it is back.

use std::net::SocketAddr;
use std::time::Duration;

use super::{collector, gate, refused_invite, site};
use crate::common::ip;
use testbed::wait_for;

/// A TCP collector's end of a connection from the gate.
struct TcpCollector {
    conn: std::net::TcpStream,
    buf: Vec<u8>,
}

impl TcpCollector {
    fn accept(listener: &std::net::TcpListener) -> TcpCollector {
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        TcpCollector {
            conn,
            buf: Vec::new(),
        }
    }

    /// Reads HEP packets until one holds `needle` (`None` if none came
    /// within half a second); each must start with `HEP3` and its length
    /// must end where the next begins.
    fn until(&mut self, needle: &[u8]) -> Option<Vec<Vec<u8>>> {
        use std::io::Read;
        let mut packets = Vec::new();
        let mut chunk = [0u8; 65_536];
        loop {
            while self.buf.len() >= 6 {
                assert_eq!(&self.buf[..4], b"HEP3", "packets back to back");
                let len = usize::from(u16::from_be_bytes([self.buf[4], self.buf[5]]));
                if self.buf.len() < len {
                    break;
                }
                let p: Vec<u8> = self.buf.drain(..len).collect();
                let found = p.windows(needle.len()).any(|w| w == needle);
                packets.push(p);
                if found {
                    return Some(packets);
                }
            }
            let n = self.conn.read(&mut chunk).ok()?;
            assert!(n > 0, "the gate closed the collector connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends refused INVITEs until the collector gets one's exchange (the
    /// gate sends on a connection once its connect returned: the copies of
    /// the moment before are dropped); the request, the answer and the
    /// packets read.
    fn exchange(
        &mut self,
        tag: &str,
        ua: &std::net::UdpSocket,
        to: SocketAddr,
    ) -> (String, String, Vec<Vec<u8>>) {
        for n in 0..10 {
            let (req, answer) = refused_invite(&format!("{tag}-{n}"), ua, to);
            if let Some(packets) = self.until(answer.as_bytes()) {
                return (req, answer, packets);
            }
        }
        panic!("{tag}: nothing reached the collector");
    }
}

/// A TCP collector: the gate connects to it, sends HEP packets back to
/// back; when it goes away the copies are dropped and counted, and the
/// gate connects again when it is back.
#[test]
fn r_cap_1_a_tcp_collector_gets_packets_back_to_back_and_is_reconnected() {
    let net = (63, 6);
    let (_dir, site) = site(net);
    let text = std::fs::read_to_string(&site).unwrap();
    std::fs::write(&site, text.replace("\"udp:", "\"tcp:")).unwrap();
    let listener = std::net::TcpListener::bind(collector(net)).unwrap();
    let ua = std::net::UdpSocket::bind(SocketAddr::new(ip(net, 100), 0)).unwrap();
    ua.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let to = SocketAddr::new(ip(net, 1), 5060);
    let gate = gate(&site, net);
    let mut c = TcpCollector::accept(&listener);
    let (req, answer, packets) = c.exchange("tcp-1", &ua, to);
    let with = |m: &str| {
        packets
            .iter()
            .filter(|p| p.windows(m.len()).any(|w| w == m.as_bytes()))
            .count()
    };
    assert_eq!((with(&req), with(&answer)), (1, 1));

    // The collector goes: the copies meanwhile are dropped and counted.
    drop((c, listener));
    let down = r#"sipgate_capture_dropped_total{reason="collector_down"}"#;
    let mut n = 0;
    wait_for("copies dropped", Duration::from_secs(10), || {
        n += 1;
        refused_invite(&format!("tcp-gone-{n}"), &ua, to);
        (gate.metric(down).ok()? > 0.0).then_some(())
    })
    .unwrap();
    // Back (once the old connection has let go of the address): the gate
    // connects again within its retry (a second).
    let listener = wait_for("the collector's address", Duration::from_secs(60), || {
        std::net::TcpListener::bind(collector(net)).ok()
    })
    .unwrap();
    let mut c = TcpCollector::accept(&listener);
    let (_, _, packets) = c.exchange("tcp-back", &ua, to);
    assert!(!packets.is_empty());
}
