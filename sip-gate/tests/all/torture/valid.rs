//! RFC 4475 3.1.1: valid messages, however odd (and a stream of them).

use bytes::Bytes;
use sip_gate::{HeaderName, Method, SipMessage, Splice, StartLine};

use super::{frame_bytewise, msg, parse, SDP};

fn wsinv() -> Bytes {
    msg(
        "INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0\n\
TO :\n sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n\n\
from   : \"J Rosenberg \\\\\\\"\"       <sip:jdrosen@example.com>\n  ;\n  tag = 98asjd8\n\
MaX-fOrWaRdS: 0068\n\
Call-ID: wsinv.ndaksdj@192.0.2.1\n\
Content-Length   : {CL}\n\
cseq: 0009\n  INVITE\n\
Via  : SIP  /   2.0\n /UDP\n    192.0.2.2;rport;branch=390skdjuw\n\
s :\n\
NewFangledHeader:   newfangled value\n continued newfangled value\n\
UnknownHeaderWithUnusualValue: ;;,,;;,;\n\
Content-Type: application/sdp\n\
Route:\n <sip:services.example.com;lr;unknownwith=value;unknown-no-value>\n\
v:  SIP  / 2.0  / TCP     spindle.example.com   ;\n  branch  =   z9hG4bK9ikj8  ,\n SIP  /    2.0   / UDP  192.168.255.111   ; branch=\n z9hG4bK30239\n\
m:\"Quoted string \\\"\\\"\" <sip:jdrosen@example.com> ; newparam =\n      newvalue ;\n  secondparam ; q = 0.33\n\n",
        SDP,
    )
}

#[test]
fn wsinv_escaped_and_folded() {
    let raw = wsinv();
    let m = parse(&raw);
    assert_eq!(m.method(), Some(Method::Invite));
    assert_eq!(
        m.request_uri(),
        Some(&b"sip:vivekg@chair-dnrc.example.com;unknownparam"[..])
    );
    assert_eq!(m.to_uri(), Some(&b"sip:vivekg@chair-dnrc.example.com"[..]));
    assert_eq!(m.to_tag(), Some(&b"1918181833n"[..]));
    assert_eq!(m.from_uri(), Some(&b"sip:jdrosen@example.com"[..]));
    assert_eq!(m.from_tag(), Some(&b"98asjd8"[..]));
    assert_eq!(m.max_forwards(), Some(Ok(68)));
    assert_eq!(m.call_id(), Some(&b"wsinv.ndaksdj@192.0.2.1"[..]));
    assert_eq!(m.cseq(), Some((9, Method::Invite)));
    assert_eq!(m.body(), SDP);

    let vias: Vec<_> = m.vias().collect();
    assert_eq!(vias.len(), 3);
    type Summary<'a> = Vec<(&'a [u8], &'a [u8], Option<&'a [u8]>)>;
    let summary: Summary = vias
        .iter()
        .map(|v| (v.transport, v.host, v.branch))
        .collect();
    assert_eq!(
        summary,
        vec![
            (&b"UDP"[..], &b"192.0.2.2"[..], Some(&b"390skdjuw"[..])),
            (
                &b"TCP"[..],
                &b"spindle.example.com"[..],
                Some(&b"z9hG4bK9ikj8"[..])
            ),
            (
                &b"UDP"[..],
                &b"192.168.255.111"[..],
                Some(&b"z9hG4bK30239"[..])
            ),
        ]
    );
    assert_eq!(vias[0].rport, Some(None));
    assert!(vias.iter().all(|v| v.port.is_none()));

    let routes = m.routes();
    assert_eq!(routes.len(), 1);
    assert_eq!(
        m.slice(routes[0].uri.clone()),
        b"sip:services.example.com;lr;unknownwith=value;unknown-no-value"
    );
    let contacts = m.contacts();
    assert_eq!(contacts.len(), 1);
    assert_eq!(m.slice(contacts[0].uri.clone()), b"sip:jdrosen@example.com");

    let subject = m.fields(HeaderName::Subject).next().unwrap();
    assert_eq!(m.value(subject), b"");
    let unknown: Vec<&[u8]> = m.fields(HeaderName::Other).map(|f| m.value(f)).collect();
    assert_eq!(
        unknown,
        vec![
            &b"newfangled value\r\n continued newfangled value"[..],
            &b";;,,;;,;"[..]
        ]
    );
    // Framing agrees with the datagram parser, even byte by byte.
    assert_eq!(frame_bytewise(&raw), vec![raw.clone()]);
}

#[test]
fn intmeth_wide_range_of_characters() {
    let method = "!interesting-Method0123456789_*+`.%indeed'~";
    let uri = "sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com";
    let mut head = format!("{method} {uri} SIP/2.0\n").into_bytes();
    head.extend_from_slice(b"Via: SIP/2.0/TCP host1.example.com;branch=z9hG4bK-.!%66*_+`'~\n");
    head.extend_from_slice(b"To: \"BEL:\\\x07 NUL:\\\x00 DEL:\\\x7F\" <sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*@example.com>\n");
    head.extend_from_slice("From: token1~` token2'+_ token3*%!.- <sip:mundane@example.com>;fromParam''~+*_!.-%=\"работающий\";tag=_token~1'+`*%!-.\n".as_bytes());
    head.extend_from_slice(b"Call-ID: intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{\n");
    head.extend_from_slice(format!("CSeq: 139122385 {method}\n").as_bytes());
    head.extend_from_slice(b"Max-Forwards: 255\n");
    head.extend_from_slice("extensionHeader-!.%*+_`'~:\u{feff}大停電\n".as_bytes());
    head.extend_from_slice(b"Content-Length: 0\n\n");
    let raw: Vec<u8> = head
        .iter()
        .flat_map(|&b| {
            if b == b'\n' {
                vec![b'\r', b'\n']
            } else {
                vec![b]
            }
        })
        .collect();
    let raw = Bytes::from(raw);
    let m = parse(&raw);
    assert_eq!(m.method(), Some(Method::Other));
    assert_eq!(m.method_bytes(), method.as_bytes());
    assert_eq!(m.request_uri(), Some(uri.as_bytes()));
    assert_eq!(
        m.top_via().unwrap().branch,
        Some(&b"z9hG4bK-.!%66*_+`'~"[..])
    );
    assert_eq!(
        m.to_uri(),
        Some(&b"sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*@example.com"[..])
    );
    assert_eq!(m.from_uri(), Some(&b"sip:mundane@example.com"[..]));
    assert_eq!(m.from_tag(), Some(&b"_token~1'+`*%!-."[..]));
    assert_eq!(
        m.call_id(),
        Some(&b"intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{"[..])
    );
    assert_eq!(m.cseq(), Some((139122385, Method::Other)));
    assert_eq!(m.cseq_method_bytes(), Some(method.as_bytes()));
    assert_eq!(m.max_forwards(), Some(Ok(255)));
    let ext = m.fields(HeaderName::Other).next().unwrap();
    assert_eq!(
        m.slice(ext.name_range.clone()),
        b"extensionHeader-!.%*+_`'~"
    );
    assert_eq!(m.value(ext), "\u{feff}大停電".as_bytes());
    assert_eq!(m.body(), b"");
}

#[test]
fn esc01_escapes_stay_raw() {
    let raw = msg(
        "INVITE sip:sips%3Auser%40example.com@example.net SIP/2.0\n\
To: sip:%75se%72@example.com\n\
From: <sip:I%20have%20spaces@example.net>;tag=938\n\
Max-Forwards: 87\n\
i: esc01.239409asdfakjkn23onasd0-3234\n\
CSeq: 234234 INVITE\n\
Via: SIP/2.0/UDP host5.example.net;branch=z9hG4bKkdjuw\n\
C: application/sdp\n\
Contact:\n  <sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31>\n\
Content-Length: {CL}\n\n",
        SDP,
    );
    let m = parse(&raw);
    assert_eq!(
        m.request_uri(),
        Some(&b"sip:sips%3Auser%40example.com@example.net"[..])
    );
    assert_eq!(m.to_uri(), Some(&b"sip:%75se%72@example.com"[..]));
    assert_eq!(m.to_tag(), None);
    assert_eq!(
        m.from_uri(),
        Some(&b"sip:I%20have%20spaces@example.net"[..])
    );
    assert_eq!(
        m.call_id(),
        Some(&b"esc01.239409asdfakjkn23onasd0-3234"[..])
    );
    assert_eq!(m.cseq(), Some((234234, Method::Invite)));
    let c = m.contacts();
    assert_eq!(
        m.slice(c[0].uri.clone()),
        b"sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31"
    );
    assert_eq!(m.fields(HeaderName::ContentType).count(), 1);
    assert_eq!(m.body(), SDP);
}

#[test]
fn lwsdisp_no_space_before_angle() {
    let raw = msg(
        "OPTIONS sip:user@example.com SIP/2.0\n\
To: sip:user@example.com\n\
From: caller<sip:caller@example.com>;tag=323\n\
Max-Forwards: 70\n\
Call-ID: lwsdisp.1234abcd@funky.example.com\n\
CSeq: 60 OPTIONS\n\
Via: SIP/2.0/UDP funky.example.com;branch=z9hG4bKkdjuw\n\
l: 0\n\n",
        b"",
    );
    let m = parse(&raw);
    assert_eq!(m.from_uri(), Some(&b"sip:caller@example.com"[..]));
    assert_eq!(m.from_tag(), Some(&b"323"[..]));
    assert_eq!(m.cseq(), Some((60, Method::Options)));
}

#[test]
fn longreq_long_values_and_many_vias() {
    let long = "longreq.".to_string() + &"one".repeat(300);
    let tag = "12982982398".repeat(50);
    let mut head = format!(
        "INVITE sip:user@example.com SIP/2.0\n\
Max-Forwards: 70\n\
To: \"I have a user name of {long} {long}\" <sip:user@example.com>\n\
From: sip:caller@example.net;tag={tag}\n\
Call-ID: {long}\n\
CSeq: 3882340 INVITE\n\
Unknown-{long}-{long}: unknown-value-{long}\n"
    );
    for i in 0..40 {
        head += &format!("Via: SIP/2.0/TCP sip{i}.example.com:{};branch=z9hG4bK{i}{long}, SIP/2.0/UDP [2001:db8::{i}];received=192.0.2.{i};branch=z9hG4bKx{i}\n", 5060 + i);
    }
    head += "Content-Type: application/sdp\nl: {CL}\n\n";
    let raw = msg(&head, SDP);
    let m = parse(&raw);
    assert_eq!(m.call_id(), Some(long.as_bytes()));
    assert_eq!(m.from_tag(), Some(tag.as_bytes()));
    let vias: Vec<_> = m.vias().collect();
    assert_eq!(vias.len(), 80);
    assert_eq!(vias[78].port, Some(5099));
    assert_eq!(vias[79].host, b"[2001:db8::39]");
    assert_eq!(vias[79].received, Some(&b"192.0.2.39"[..]));
    assert_eq!(vias[79].branch, Some(&b"z9hG4bKx39"[..]));
    assert_eq!(m.body(), SDP);
    assert_eq!(frame_bytewise(&raw), vec![raw.clone()]);
}

#[test]
fn dblreq_extra_bytes_ignored_in_datagram() {
    let second = "INVITE sip:joe@example.com SIP/2.0\n\
t: sip:joe@example.com\n\
From: sip:caller@example.net;tag=141334\n\
Max-Forwards: 8\n\
Call-ID: dblreq.0ha0isnda977644900765@192.0.2.15\n\
CSeq: 8 INVITE\n\
Via: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKkdjuw380234\n\
Content-Type: application/sdp\n\
Content-Length: {CL}\n\n";
    let first = "REGISTER sip:example.com SIP/2.0\n\
To: sip:j.user@example.com\n\
From: sip:j.user@example.com;tag=43251j3j324\n\
Max-Forwards: 8\n\
I: dblreq.0ha0isndaksdj99sdfafnl3lk233412\n\
Contact: sip:j.user@host.example.com\n\
CSeq: 8 REGISTER\n\
Via: SIP/2.0/UDP 192.0.2.125;branch=z9hG4bKkdjuw23492\n\
Content-Length: 0\n\n";
    let a = msg(first, b"");
    let b = msg(second, SDP);
    let mut dgram = a.to_vec();
    dgram.extend_from_slice(&b);
    let dgram = Bytes::from(dgram);
    let m = parse(&dgram);
    assert_eq!(m.method(), Some(Method::Register));
    assert_eq!(
        m.call_id(),
        Some(&b"dblreq.0ha0isndaksdj99sdfafnl3lk233412"[..])
    );
    assert_eq!(m.body(), b"");
    assert_eq!(m.contacts().len(), 1);
    assert_eq!(m.body_range().end, a.len());
    // On a stream the same bytes are two messages.
    assert_eq!(frame_bytewise(&dgram), vec![a, b]);
}

#[test]
fn semiuri_semicolon_in_user_part() {
    let raw = msg(
        "OPTIONS sip:user;par=u%40example.net@example.com SIP/2.0\n\
To: sip:j_user@example.com\n\
From: sip:caller@example.org;tag=33242\n\
Max-Forwards: 3\n\
Call-ID: semiuri.0ha0isndaksdj\n\
CSeq: 8 OPTIONS\n\
Accept: application/sdp, application/pkcs7-mime,\n        multipart/mixed, multipart/signed,\n        message/sip, message/sipfrag\n\
Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKkdjuw\n\
l: 0\n\n",
        b"",
    );
    let m = parse(&raw);
    assert_eq!(
        m.request_uri(),
        Some(&b"sip:user;par=u%40example.net@example.com"[..])
    );
    assert_eq!(m.from_uri(), Some(&b"sip:caller@example.org"[..]));
    assert_eq!(m.from_tag(), Some(&b"33242"[..]));
}

#[test]
fn transports_unusual_via_transports() {
    let raw = msg(
        "OPTIONS sip:user@example.com SIP/2.0\n\
To: sip:user@example.com\n\
From: <sip:caller@example.com>;tag=323\n\
Max-Forwards: 70\n\
Call-ID:  transports.kijh4akdnaqjkwendsasfdj\n\
Accept: application/sdp\n\
CSeq: 60 OPTIONS\n\
Via: SIP/2.0/UDP t1.example.com;branch=z9hG4bKkdjuw\n\
Via: SIP/2.0/SCTP t2.example.com;branch=z9hG4bKklasjdhf\n\
Via: SIP/2.0/TLS t3.example.com;branch=z9hG4bK2980unddj\n\
Via: SIP/2.0/UNKNOWN t4.example.com;branch=z9hG4bKasd0f3en\n\
Via: SIP/2.0/TCP t5.example.com;branch=z9hG4bK0a9idfnee\n\
l: 0\n\n",
        b"",
    );
    let m = parse(&raw);
    let t: Vec<&[u8]> = m.vias().map(|v| v.transport).collect();
    assert_eq!(t, vec![&b"UDP"[..], b"SCTP", b"TLS", b"UNKNOWN", b"TCP"]);
    assert_eq!(
        m.call_id(),
        Some(&b"transports.kijh4akdnaqjkwendsasfdj"[..])
    );
}

#[test]
fn mpart01_binary_multipart_body() {
    let mut body = b"--boundary42\r\nContent-Type: application/sdp\r\n\r\nv=0\r\n\r\n--boundary42\r\nContent-Type: application/pkcs7-signature; name=smime.p7s\r\nContent-Transfer-Encoding: binary\r\n\r\n".to_vec();
    body.extend(
        (0u8..=255).chain(
            b"\r\n\r\nVia: SIP/2.0/UDP evil;branch=z9hG4bKevil\r\n"
                .iter()
                .copied(),
        ),
    );
    body.extend_from_slice(b"\r\n--boundary42--\r\n");
    let raw = msg(
        "MESSAGE sip:kumiko@example.org SIP/2.0\n\
Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK-d87543-4dade06d0bdb11ee-1--d87543-;rport\n\
Max-Forwards: 70\n\
Route: <sip:127.0.0.1:5080>\n\
Identity: r5mwreLuyDRYBi/0TiPwEsY3rEVsk/G2WxhgTV1PF7hHuL\n  Ih2+sizqAmo0cpR+vQGy5fUmvk4TkJFe7tgw5lAH4VFRJo5lDBqJ+yL2f/W6Kc\n\
Identity-Info: <https://example.com/cert>;alg=rsa-sha1\n\
To: <sip:kumiko@example.org>\n\
From: <sip:fluffy@example.com>;tag=2fb0dcc9\n\
Call-ID: 3d9485ad0c49859b@Zmx1ZmZ5LW1hYy0xNi5sb2NhbA..\n\
CSeq: 1 MESSAGE\n\
Content-Transfer-Encoding: binary\n\
Content-Type: multipart/mixed;boundary=boundary42\n\
Content-Length: {CL}\n\n",
        &body,
    );
    let m = parse(&raw);
    assert_eq!(m.body(), &body[..]);
    assert_eq!(m.vias().count(), 1);
    assert_eq!(m.top_via().unwrap().port, Some(5070));
    assert_eq!(m.fields(HeaderName::Identity).count(), 1);
    assert_eq!(m.routes().len(), 1);
    assert_eq!(m.cseq(), Some((1, Method::Message)));
    // The Via inside the body is invisible to editing too.
    let mut s = Splice::new(&m);
    s.remove_top_via().unwrap();
    let out = SipMessage::scan(s.finish().unwrap()).unwrap();
    assert_eq!(out.vias().count(), 0);
    assert_eq!(out.body(), &body[..]);
    assert_eq!(frame_bytewise(&raw), vec![raw.clone()]);
}

#[test]
fn unreason_and_noreason_responses() {
    let raw = msg(
        "SIP/2.0 200 = 2**3 * 5**2 но сто девяносто девять - простое\n\
Via: SIP/2.0/UDP 192.0.2.198;branch=z9hG4bK1324923\n\
Call-ID: unreason.1234ksdfak3j2erwedfsASdf\n\
CSeq: 35 INVITE\n\
From: sip:user@example.com;tag=11141343\n\
To: sip:user@example.edu;tag=2229\n\
Content-Length: {CL}\n\
Content-Type: application/sdp\n\
Contact: <sip:user@host198.example.com>\n\n",
        SDP,
    );
    let m = parse(&raw);
    assert_eq!(m.start_line(), &StartLine::Response { code: 200 });
    assert_eq!(m.code(), Some(200));
    assert_eq!(m.cseq(), Some((35, Method::Invite)));
    assert_eq!(m.to_tag(), Some(&b"2229"[..]));
    assert_eq!(m.body(), SDP);

    let raw = msg(
        "SIP/2.0 100 \n\
Via: SIP/2.0/UDP 192.0.2.105;branch=z9hG4bK2398ndaoe\n\
Call-ID: noreason.asndj203insdf99223ndf\n\
CSeq: 35 INVITE\n\
From: <sip:user@example.com>;tag=39ansfi3\n\
To: <sip:user@example.edu>;tag=902jndnke3\n\
Content-Length: 0\n\
Contact: <sip:user@host105.example.com>\n\n",
        b"",
    );
    let m = parse(&raw);
    assert_eq!(m.code(), Some(100));
    assert_eq!(m.from_tag(), Some(&b"39ansfi3"[..]));
    let raw = msg("SIP/2.0 100\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\nCall-ID: a\nCSeq: 1 BYE\nFrom: <sip:a@b>;tag=1\nTo: <sip:a@b>\n\n", b"");
    assert_eq!(parse(&raw).code(), Some(100));
}

#[test]
fn ipv6_via_and_zero_max_forwards() {
    let raw = msg(
        "OPTIONS sip:[2001:db8::10]:5070 SIP/2.0\n\
To: sip:user@[2001:db8::10]\n\
From: sip:user@example.com;tag=81x2\n\
Via: SIP/2.0/UDP [2001:db8::9:1] : 5070 ;branch=z9hG4bKas3-111;received=[2001:db8::9:255];rport=5071\n\
Call-ID: SSG9559905523997077@hlau_4100\n\
Max-Forwards: 0\n\
CSeq: 1 OPTIONS\n\
Content-Length: 0\n\n",
        b"",
    );
    let m = parse(&raw);
    let v = m.top_via().unwrap();
    assert_eq!(v.host, b"[2001:db8::9:1]");
    assert_eq!(v.port, Some(5070));
    assert_eq!(v.received, Some(&b"[2001:db8::9:255]"[..]));
    assert_eq!(v.rport, Some(Some(5071)));
    assert_eq!(v.branch, Some(&b"z9hG4bKas3-111"[..]));
    assert_eq!(m.max_forwards(), Some(Ok(0)));
    assert_eq!(m.request_uri(), Some(&b"sip:[2001:db8::10]:5070"[..]));
}

#[test]
fn bcast_broadcast_sent_by_is_exposed_as_is() {
    // The message layer reports the address; refusing to send a response
    // to a broadcast address is the transport's decision.
    let raw = msg(
        "SIP/2.0 200 OK\n\
Via: SIP/2.0/UDP 255.255.255.255;branch=z9hG4bK1saber23\n\
Call-ID: bcast.0384840201234ksdfak3j2erwedfsASdf\n\
CSeq: 35 INVITE\n\
From: sip:user@example.com;tag=11141343\n\
To: sip:user@example.edu;tag=2229\n\
Content-Length: 0\n\n",
        b"",
    );
    let m = parse(&raw);
    assert_eq!(m.top_via().unwrap().host, b"255.255.255.255");
}

// === invalid messages ===

#[test]
fn stream_of_everything_with_keepalives() {
    let valid = [
        wsinv(),
        msg(
            "BYE sip:a@b SIP/2.0\nv: SIP/2.0/TCP h;branch=z9hG4bK1\nf: <sip:a@b>;tag=1\nt: <sip:c@d>;tag=2\ni: x\nCSeq: 2 BYE\nl: {CL}\n\n",
            b"\r\n\r\n\0\xff",
        ),
    ];
    let mut stream = Vec::new();
    for m in &valid {
        stream.extend_from_slice(b"\r\n\r\n");
        stream.extend_from_slice(m);
        stream.extend_from_slice(b"\r\n");
    }
    let got = frame_bytewise(&stream);
    assert_eq!(got, valid.to_vec());
    for g in got {
        parse(&g);
    }
}
