//! The site and the messages the core benchmarks use (`benches/core.rs`,
//! `examples/invites.rs`, `examples/calls.rs`, `examples/flows.rs`).

#![allow(dead_code)] // each user takes what it needs

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use sip_gate::{Action, Core, Inbound, TokenKey};
use testbed::fixture::{Mode, SiteFile};

/// The site's secret, which the gate's tokens are sealed with.
pub const SECRET: &str = "bench-site-secret-0123456789";

/// Three sg behind one balance listener. Every call of a run comes from
/// one address at one instant: bursts large enough that none is refused,
/// while the checks still run on every INVITE. The text ends in its
/// `[overload]` table, so a caller can add to it.
pub fn site() -> String {
    let sg = |h: u8| SocketAddr::from(([127, 0, 1, h], 5060));
    SiteFile::new("bench")
        .secret(SECRET)
        .sgs(&[("a", sg(1)), ("b", sg(2)), ("c", sg(3))])
        .listener(
            "subs",
            SocketAddr::from(([127, 0, 0, 1], 5060)),
            Mode::Balance("sg"),
            "subscriber",
            "",
        )
        .section(
            "overload",
            "new_dialogs_burst = 4000000\nper_source_burst = 4000000",
        )
        .text()
        .to_owned()
}

/// A core on [`site`], a scratch core beside it (which [`call_messages`]
/// drives to learn the gate's answers), and the inbound of the subscriber
/// ([`SUBSCRIBER`]) on listener 0.
pub fn cores() -> (Core, Core, Inbound) {
    let config = std::sync::Arc::new(
        ringsync::config::SiteConfig::from_str_at(&site(), std::path::Path::new("bench.toml"))
            .expect("site"),
    );
    let drain = || ringsync::state::DrainState::new(config.clone());
    let core = Core::new(config.clone(), drain()).expect("core");
    let scratch = Core::new(config.clone(), drain()).expect("core");
    let peer = SUBSCRIBER.parse().expect("address");
    (core, scratch, Inbound::Udp { listener: 0, peer })
}

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

/// The bytes of a 200 answering `fwd` (a request as the gate forwarded it),
/// from its next hop: every Via, To tagged `uas`.
pub fn ok_to(fwd: &Bytes) -> Bytes {
    let text = std::str::from_utf8(fwd).unwrap();
    let head = text.split("\r\n\r\n").next().unwrap();
    let mut out = String::from("SIP/2.0 200 OK\r\n");
    for line in head.lines().skip(1) {
        let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
        match name.as_str() {
            "via" | "from" | "call-id" | "cseq" | "record-route" => {
                out.push_str(line);
                out.push_str("\r\n");
            }
            "to" if line.contains(";tag=") => {
                out.push_str(line);
                out.push_str("\r\n");
            }
            "to" => out.push_str(&format!("{line};tag=uas\r\n")),
            _ => {}
        }
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    Bytes::from(out)
}

/// An in-dialog request of the UA in call `n`, routed by the gate's token.
pub fn in_dialog(method: &str, n: u64, cseq: u32, route: &str) -> Bytes {
    Bytes::from(format!(
        "{method} sip:bob@127.0.1.1:5060 SIP/2.0\r\n\
Via: SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKbench-{n}-{cseq};rport\r\n\
Route: <{route}>\r\n\
Max-Forwards: 70\r\n\
From: \"Alice\" <sip:alice@example.com>;tag=a1\r\n\
To: <sip:bob@example.com>;tag=uas\r\n\
Call-ID: bench-{n}@203.0.113.10\r\n\
CSeq: {cseq} {method}\r\n\
Content-Length: 0\r\n\r\n"
    ))
}

/// Where an action sends, and what.
pub fn sent(a: Action) -> (std::net::SocketAddr, Bytes) {
    match a {
        Action::Send(sip_gate::Out::Udp { to, .. }, b) => (to, b),
        other => panic!("{other:?}"),
    }
}

/// The five messages of call `n`, and where its responses come from.
pub fn call_messages(
    scratch: &Core,
    n: u64,
    inbound: Inbound,
    now: Instant,
) -> Vec<(Inbound, Bytes)> {
    let invite = invite(n);
    let (sg, fwd) = sent(scratch.handle(inbound, invite.clone(), now));
    let from_sg = Inbound::Udp {
        listener: 0,
        peer: sg,
    };
    let ok = ok_to(&fwd);
    let key = TokenKey::new(SECRET);
    let id = match sg.ip().to_string().as_str() {
        "127.0.1.1" => "sg-a",
        "127.0.1.2" => "sg-b",
        _ => "sg-c",
    };
    let call_id = format!("bench-{n}@203.0.113.10");
    let route = format!("sip:{}@127.0.0.1:5060;lr", key.seal(id, call_id.as_bytes()));
    let ack = in_dialog("ACK", n, 1, &route);
    let bye = in_dialog("BYE", n, 2, &route);
    let (_, bye_fwd) = sent(scratch.handle(inbound, bye.clone(), now));
    let bye_ok = ok_to(&bye_fwd);
    vec![
        (inbound, invite),
        (from_sg, ok),
        (inbound, ack),
        (inbound, bye),
        (from_sg, bye_ok),
    ]
}

/// A REGISTER from the subscriber; `n` makes its branch unique.
pub fn register(n: u64) -> Bytes {
    Bytes::from(format!(
        "REGISTER sip:example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP 192.168.1.20:5060;branch=z9hG4bKreg-{n};rport\r\n\
Max-Forwards: 70\r\n\
From: <sip:alice@example.com>;tag=r1\r\n\
To: <sip:alice@example.com>\r\n\
Call-ID: reg-1@192.168.1.20\r\n\
CSeq: {n} REGISTER\r\n\
Contact: <sip:alice@192.168.1.20:5060>\r\n\
Expires: 600\r\n\
Content-Length: 0\r\n\r\n"
    ))
}

/// An INVITE from sg-a to the subscriber, routed by `route`.
pub fn invite_from_sg(n: u64, route: &str) -> Bytes {
    Bytes::from(format!(
        "INVITE sip:alice@192.168.1.20:5060 SIP/2.0\r\n\
Via: SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKsg-{n};rport\r\n\
Route: {route}\r\n\
Max-Forwards: 70\r\n\
From: <sip:bob@example.com>;tag=b1\r\n\
To: <sip:alice@example.com>\r\n\
Call-ID: sg-{n}@127.0.1.1\r\n\
CSeq: 1 INVITE\r\n\
Contact: <sip:bob@127.0.1.1:5060>\r\n\
Content-Length: 0\r\n\r\n"
    ))
}

/// Where the subscriber's REGISTERs come from (after its NAT).
pub const SUBSCRIBER: &str = "203.0.113.10:40000";

/// [`site`] plus listener 1: the same pool on the inside leg, where no
/// Path is added.
pub fn flow_site() -> String {
    format!(
        "{}\n[[listener]]\nname = \"inside\"\nbind = \"127.0.0.1:5070\"\nmode = \"balance\"\n\
         pool = \"sg\"\nleg = \"inside\"\n",
        site()
    )
}

/// The Path the gate adds to the subscriber's REGISTER on listener 0, as a
/// registrar stores it (a Route value).
pub fn path_of(core: &Core, now: Instant) -> String {
    let peer = SUBSCRIBER.parse().expect("address");
    let Action::Send(_, fwd) = core.handle(Inbound::Udp { listener: 0, peer }, register(0), now)
    else {
        panic!("REGISTER not forwarded")
    };
    String::from_utf8_lossy(&fwd)
        .lines()
        .find_map(|l| l.strip_prefix("Path: "))
        .expect("a Path")
        .to_string()
}
