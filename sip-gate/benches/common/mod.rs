//! The site and the INVITE the core benchmarks use (`benches/core.rs`,
//! `examples/invites.rs`).

use bytes::Bytes;

/// Three sg behind one balance listener.
pub const SITE: &str = r#"
[site]
name = "bench"
secret = "bench-site-secret-0123456789"

[health]
interval_ms = 0

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"
[[server]]
name = "srv-c"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "127.0.1.1:5060"
[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "127.0.1.2:5060"
[[instance]]
id = "sg-c"
service = "sg"
server = "srv-c"
sip = "127.0.1.3:5060"

[[listener]]
name = "subs"
bind = "127.0.0.1:5060"
mode = "balance"
pool = "sg"
leg = "subscriber"
"#;

/// A new INVITE with SDP; `n` makes its branch and Call-ID unique.
pub fn invite(n: u64) -> Bytes {
    Bytes::from(format!(
        "INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKbench-{n};rport\r\n\
Max-Forwards: 70\r\n\
From: \"Alice\" <sip:alice@example.com>;tag=a1\r\n\
To: <sip:bob@example.com>\r\n\
Call-ID: bench-{n}@203.0.113.10\r\n\
CSeq: 1 INVITE\r\n\
Contact: <sip:alice@203.0.113.10:5062>\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 129\r\n\r\n\
v=0\r\no=- 1 1 IN IP4 203.0.113.10\r\ns=-\r\nc=IN IP4 203.0.113.10\r\nt=0 0\r\n\
m=audio 4000 RTP/AVP 0 8\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n"
    ))
}
