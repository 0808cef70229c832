//! The rtpengine launcher: an instance on its own address answers ng on
//! its own port, rewrites SDP to its own address and port range, and is
//! gone when stopped; a missing binary is an error naming the package.

use std::net::{IpAddr, UdpSocket};
use std::time::Duration;

use testbed::{rtpengine, Error, Rtpengine};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn two_instances_answer_on_their_own_addresses() {
    let a = Rtpengine::new(ip("127.0.78.1")).start().unwrap();
    let b = Rtpengine::new(ip("127.0.78.2")).start().unwrap();
    assert_ne!(a.ports(), b.ports());
    for (mg, addr) in [(&a, "127.0.78.1"), (&b, "127.0.78.2")] {
        assert!(mg.answers());
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let sdp = "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n";
        let offer = format!(
            "o1 d7:call-id2:c17:command5:offer8:from-tag2:f13:sdp{}:{sdp}e",
            sdp.len()
        );
        sock.send_to(offer.as_bytes(), mg.ng()).unwrap();
        let mut buf = [0u8; 4096];
        let (n, _) = sock.recv_from(&mut buf).unwrap();
        let reply = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(reply.contains(&format!("c=IN IP4 {addr}")), "{reply}");
        let port: u16 = reply
            .split("m=audio ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        assert!((mg.ports().0..=mg.ports().1).contains(&port), "{port}");
    }
    let ng = a.ng();
    a.stop();
    assert!(!rtpengine::ping(ng, Duration::from_millis(200)));
    let ng = b.ng();
    b.kill();
    assert!(!rtpengine::ping(ng, Duration::from_millis(200)));
}

#[test]
fn a_missing_binary_names_the_debian_package() {
    let e = Rtpengine::new(ip("127.0.78.3"))
        .program("/nonexistent/rtpengine")
        .start()
        .unwrap_err();
    assert!(
        matches!(&e, Error::NotInstalled { package, .. } if package == "rtpengine-daemon"),
        "{e}"
    );
    assert!(e.to_string().contains("rtpengine-daemon"), "{e}");
}
