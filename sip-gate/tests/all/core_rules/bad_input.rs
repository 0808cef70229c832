//! Bad input: 400/505 with the reason when a response can be built, dropped
//! otherwise; nothing panics.

use super::prelude::*;

#[test]
fn bad_empty_call_id_is_400_with_reason_missing_call_id_header_is_dropped() {
    let g = Gate::std();
    // Every mandatory header present, Call-ID empty: answerable, 400 with the reason.
    // (The reply copies the empty Call-ID, so it is itself incomplete: scan it.)
    let input = Req::ua("INVITE", "", "z9hG4bKbad1").bytes();
    let r = replied_scan(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 400);
    assert!(
        text(r.raw()).starts_with("SIP/2.0 400 Missing Call-ID\r\n"),
        "{}",
        text(r.raw())
    );
    assert_eq!(r.top_via().unwrap().branch, Some(&b"z9hG4bKbad1"[..]));
    assert!(r.to_tag().is_some());
    // No Call-ID header at all: a response could not copy it (issue 2:
    // "anything else is dropped and counted").
    let input = Req::ua("INVITE", "x", "z9hG4bKbad2")
        .without("Call-ID")
        .bytes();
    assert_eq!(g.udp(L_SG_BAL, UA, &input), Action::None);
    // Other broken requests that can be answered: 400 naming the problem.
    for (req, reason) in [
        (
            Req::ua("INVITE", "bad3@ua", "z9hG4bKbad3").set("Max-Forwards", "abc"),
            "Bad Max-Forwards",
        ),
        (
            Req::ua("INVITE", "bad4@ua", "z9hG4bKbad4").set("CSeq", "1 BYE"),
            "CSeq Method Mismatch",
        ),
        (
            Req::ua("INVITE", "bad5@ua", "z9hG4bKbad5").set("CSeq", "x INVITE"),
            "Bad CSeq",
        ),
        (
            Req::ua("INVITE", "bad6@ua", "z9hG4bKbad6").add("To", "<sip:c@d>"),
            "Duplicate To",
        ),
    ] {
        let input = req.bytes();
        let r = replied_scan(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 400);
        assert_eq!(
            r.call_id(),
            SipMessage::scan(input.clone()).unwrap().call_id()
        );
        assert!(
            text(r.raw()).starts_with(&format!("SIP/2.0 400 {reason}\r\n")),
            "{}",
            text(r.raw())
        );
    }
}

#[test]
fn bad_sip_3_0_is_505() {
    let g = Gate::std();
    let mut req = Req::ua("INVITE", "v3@ua", "z9hG4bKv3");
    req.start = "INVITE sip:bob@example.com SIP/3.0".into();
    let r = replied(g.udp(L_SG_BAL, UA, &req.bytes()), L_SG_BAL, UA, 505);
    assert!(text(r.raw()).starts_with("SIP/2.0 505 Version Not Supported\r\n"));
    assert_eq!(r.call_id(), Some(&b"v3@ua"[..]));
}

#[test]
fn bad_garbage_is_dropped() {
    let g = Gate::std();
    for junk in [
        &b""[..],
        b"\r\n\r\n",
        b"hello world",
        b"\x00\x01\x02\x03\xff\xfe",
        b"INVITE sip:a@b SIP/2.0\r\nVia: x\r\n",
        b"SIP/2.0 2000 OK\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        assert_eq!(
            g.udp(L_SG_BAL, UA, &Bytes::copy_from_slice(junk)),
            Action::None,
            "{}",
            text(junk)
        );
    }
}

/// Hostile messages after RFC 4475 and tests/all/torture/, on every listener,
/// from a UA and from an instance, over UDP and TCP: nothing panics, and
/// whatever the gate sends parses.
#[test]
fn bad_torture_inputs_never_panic() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let sdp = b"v=0\r\no=- 1 1 IN IP4 192.0.2.3\r\ns=-\r\nc=IN IP4 192.0.2.4\r\nt=0 0\r\n";
    let cl = |head: &str, body: &[u8]| -> Bytes {
        let mut v = head
            .replace("{CL}", &body.len().to_string())
            .replace('\n', "\r\n")
            .into_bytes();
        v.extend_from_slice(body);
        Bytes::from(v)
    };
    let mut inputs: Vec<Bytes> = vec![
        // wsinv: folding, odd whitespace, compact forms.
        cl("INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0\n\
TO :\n sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n\n\
from   : \"J Rosenberg \\\\\\\"\"       <sip:jdrosen@example.com>\n  ;\n  tag = 98asjd8\n\
MaX-fOrWaRdS: 0068\n\
Call-ID: wsinv.ndaksdj@192.0.2.1\n\
Content-Length   : {CL}\n\
cseq: 0009\n  INVITE\n\
Via  : SIP  /   2.0\n /UDP\n    192.0.2.2;rport;branch=390skdjuw\n\
s :\n\
NewFangledHeader:   newfangled value\n continued newfangled value\n\
Route:\n <sip:services.example.com;lr;unknownwith=value;unknown-no-value>\n\
v:  SIP  / 2.0  / TCP     spindle.example.com   ;\n  branch  =   z9hG4bK9ikj8  ,\n SIP  /    2.0   / UDP  192.168.255.111   ; branch=\n z9hG4bK30239\n\
m:\"Quoted string \\\"\\\"\" <sip:jdrosen@example.com> ; newparam =\n      newvalue ;\n  secondparam ; q = 0.33\n\n", sdp),
        // intmeth-like: an extension method full of token characters.
        cl("!interesting-Method0123456789_*+`.%indeed'~ sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com SIP/2.0\n\
Via: SIP/2.0/TCP host1.example.com;branch=z9hG4bK-.!%66*_+`'~\n\
To: \"BEL:\\\x07 NUL:\\\x00 DEL:\\\x7F\" <sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*@example.com>\n\
From: token1~` token2'+_ token3*%!.- <sip:mundane@example.com>;fromParam''~+*_!.-%=\"работающий\";tag=_token~1'+`*%!-.\n\
Call-ID: intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{\n\
CSeq: 139122385 !interesting-Method0123456789_*+`.%indeed'~\n\
Max-Forwards: 255\n\
extensionHeader-!.%*+_`'~:\u{FEFF}大停電\n\
Content-Length: 0\n\n", b""),
        // Max-Forwards 0 on OPTIONS, IPv6 Via.
        cl("OPTIONS sip:[2001:db8::10] SIP/2.0\nTo: sip:user@example.com\nFrom: sip:user@example.com;tag=3ghi\nCall-ID: zeromf\nCSeq: 1 OPTIONS\nMax-Forwards: 0\nVia: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-111\nl: 0\n\n", b""),
        // Negative and huge Content-Length.
        cl("INVITE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKk\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>\nCall-ID: ncl\nCSeq: 1 INVITE\nContent-Length: -999\n\n", sdp),
        cl("INVITE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKk\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>\nCall-ID: hcl\nCSeq: 1 INVITE\nContent-Length: 99999999999999999999999\n\n", sdp),
        // Unterminated quote, bad Via, extraneous separators.
        cl("INVITE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;;,;,,\nFrom: \"Bell <sip:c@d>;tag=1\nTo: <sip:a@b>\nCall-ID: q\nCSeq: 1 INVITE\nl: {CL}\n\n", sdp),
        // A response with a Via of ours whose branch is almost ours.
        cl("SIP/2.0 200 OK\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-gzzzzzzzzzzzzzzzz\nVia: SIP/2.0/UDP [::1\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>;tag=2\nCall-ID: r\nCSeq: 1 INVITE\nl: 0\n\n", b""),
        cl("SIP/2.0 200 OK\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-g0000000000000000\nVia: SIP/2.0/UDP 203.0.113.1:99999;received=;rport=\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>;tag=2\nCall-ID: r\nCSeq: 1 INVITE\nl: 0\n\n", b""),
        // Routes that look like ours with odd tokens.
        cl("BYE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKrt\nRoute: <sip:g1.@127.0.0.1:5060;lr>, <sip:@127.0.0.1:5060>\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>;tag=2\nCall-ID: rt\nCSeq: 2 BYE\nl: 0\n\n", b""),
        cl("BYE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKrt2\nRoute: <sip:127.0.0.1:99999;lr>\nRoute: <sips:[::1]:5060>\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>;tag=2\nCall-ID: rt2\nCSeq: 2 BYE\nl: 0\n\n", b""),
        // Contact * with expires, comma-joined everything.
        cl("REGISTER sip:example.com SIP/2.0\nv: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKreg, SIP/2.0/TCP [2001:db8::1]:5070;branch=z9hG4bKx\nf: <sip:c@example.com>;tag=1\nt: <sip:c@example.com>\ni: reg\nCSeq: 1 REGISTER\nm: *;expires=0, <sip:a@b>\nExpires: 99999999999999\nl: 0\n\n", b""),
        // Binary body, no Content-Length (UDP: the rest of the datagram).
        cl("MESSAGE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKbin\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>\nCall-ID: bin\nCSeq: 1 MESSAGE\n\n", b"\x00\xff\r\n\r\nVia: x\r\n\r\n"),
    ];
    // Every prefix of a good INVITE (truncated datagrams).
    let good = Req::ua("INVITE", "trunc@ua", "z9hG4bKtrunc")
        .add_first("Route", &gate_route("sg-a", L_SG_BAL, "trunc@ua"))
        .body("application/sdp", sdp)
        .bytes();
    for n in 0..good.len() {
        inputs.push(good.slice(..n));
    }
    // Single-byte corruptions of it.
    for n in (0..good.len()).step_by(3) {
        for b in [b'\0', b' ', b',', b';', b'<', b'"', b'\n', 0xff] {
            let mut v = good.to_vec();
            v[n] = b;
            inputs.push(Bytes::from(v));
        }
    }
    let peers = [UA, INSTANCE_ADDR[SG_A], CARRIER_X, "[2001:db8::5]:5060"];
    for input in &inputs {
        for listener in 0..LISTENER_HOST.len() {
            for peer in peers {
                for tcp in [false, true] {
                    let inbound = if tcp {
                        Inbound::Tcp {
                            listener,
                            conn: 1,
                            peer: addr(peer),
                        }
                    } else {
                        Inbound::Udp {
                            listener,
                            peer: addr(peer),
                        }
                    };
                    let Action::Send(_, out) =
                        g.core.handle(inbound, input.clone(), Instant::now())
                    else {
                        continue;
                    };
                    // A forwarded message parses; a reply the gate made to a
                    // broken request copies what it could and at least scans.
                    let ok = match SipMessage::scan(out.clone()) {
                        Ok(m) if m.is_request() => SipMessage::parse(out.clone()).is_ok(),
                        Ok(m) => {
                            m.code().is_some_and(|c| c >= 400)
                                || SipMessage::parse(out.clone()).is_ok()
                        }
                        Err(_) => false,
                    };
                    assert!(
                        ok,
                        "bad output:\n{}\nfrom input:\n{}",
                        text(&out),
                        text(input)
                    );
                }
            }
        }
    }
}
