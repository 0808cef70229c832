//! The message view on hand-written messages: every accessor, compact
//! names, and the first error of each kind.

use bytes::Bytes;

use super::*;

mod first_written;

const INVITE: &str = "INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP [2001:db8::1]:5070;branch=z9hG4bKa;rport, SIP/2.0/TCP b.example.com;received=10.0.0.1;branch=z9hG4bKb\r\n\
v: SIP/2.0/UDP c.example.com:5062;rport=1234;branch=z9hG4bKc\r\n\
Max-Forwards: 70\r\n\
Route: <sip:p1.example.com;lr>, \"Odd, \\\"name\\\"\" <sip:p2.example.com;lr>\r\n\
Route: <sip:p3.example.com;lr>\r\n\
From: \"Alice\" <sip:alice@example.com>;TAG=a1;x=y\r\n\
t: sip:bob@example.com;foo;tag=b2\r\n\
i: abc@host\r\n\
CSeq: 7 INVITE\r\n\
m: <sip:alice@192.0.2.1;transport=tcp>;expires=60, sip:alt@192.0.2.2;q=0.5\r\n\
Expires: 99999999999\r\n\
X-Custom: a, b\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\r\nIGNORED";

fn parse(s: &str) -> Result<SipMessage, ParseError> {
    SipMessage::parse(Bytes::copy_from_slice(s.as_bytes()))
}

#[test]
fn reasons_match_display() {
    use ParseError::*;
    for e in [
        Empty,
        Unterminated,
        BadRequestLine,
        BadStatusLine,
        UnsupportedVersion,
        BadHeader,
        BadContentLength,
        BodyTooShort,
        MissingVia,
        MissingFrom,
        MissingTo,
        MissingCallId,
        MissingCSeq,
        DuplicateFrom,
        DuplicateTo,
        DuplicateCallId,
        DuplicateCSeq,
        BadVia,
        BadFrom,
        BadTo,
        BadCSeq,
        CSeqMethodMismatch,
        BadMaxForwards,
        BadRoute,
        BadRecordRoute,
        BadContact,
    ] {
        assert_eq!(e.to_string(), e.reason());
    }
}

#[test]
fn full_invite() {
    let m = parse(INVITE).unwrap();
    assert!(m.is_request());
    assert_eq!(m.method(), Some(Method::Invite));
    assert_eq!(m.request_uri(), Some(&b"sip:bob@example.com"[..]));
    assert_eq!(m.call_id(), Some(&b"abc@host"[..]));
    assert_eq!(m.cseq(), Some((7, Method::Invite)));
    assert_eq!(m.from_tag(), Some(&b"a1"[..]));
    assert_eq!(m.to_tag(), Some(&b"b2"[..]));
    assert_eq!(m.from_uri(), Some(&b"sip:alice@example.com"[..]));
    assert_eq!(m.to_uri(), Some(&b"sip:bob@example.com"[..]));
    assert_eq!(m.max_forwards(), Some(Ok(70)));
    assert_eq!(m.expires(), Some(u32::MAX));
    assert_eq!(m.body(), b"v=0\r");

    let vias: Vec<_> = m.vias().collect();
    assert_eq!(vias.len(), 3);
    assert_eq!(vias[0].host, b"[2001:db8::1]");
    assert_eq!(vias[0].port, Some(5070));
    assert_eq!(vias[0].rport, Some(None));
    assert_eq!(m.slice(vias[0].rport_range.clone().unwrap()), b"rport");
    assert_eq!(vias[0].branch, Some(&b"z9hG4bKa"[..]));
    assert_eq!(vias[1].transport, b"TCP");
    assert_eq!(vias[1].received, Some(&b"10.0.0.1"[..]));
    assert_eq!(vias[1].field_index, vias[0].field_index);
    assert_eq!(vias[2].rport, Some(Some(1234)));
    assert_eq!(vias[2].port, Some(5062));
    assert_eq!(m.top_via().unwrap().branch, Some(&b"z9hG4bKa"[..]));
    // Kept by validation; found by the first reader of a scanned message.
    assert_eq!(m.second_via(), Some(vias[1].clone()));
    let scanned = SipMessage::scan(m.raw().clone()).unwrap();
    assert_eq!(scanned.second_via(), Some(vias[1].clone()));

    let routes = m.routes();
    assert_eq!(routes.len(), 3);
    assert_eq!(m.slice(routes[1].uri.clone()), b"sip:p2.example.com;lr");
    assert_eq!(
        m.slice(routes[1].range.clone()),
        b"\"Odd, \\\"name\\\"\" <sip:p2.example.com;lr>"
    );
    assert_eq!(routes[2].field_index, routes[0].field_index + 1);
    assert!(m.record_routes().is_empty());

    let contacts = m.contacts();
    assert_eq!(contacts.len(), 2);
    assert_eq!(
        m.slice(contacts[0].uri.clone()),
        b"sip:alice@192.0.2.1;transport=tcp"
    );
    assert_eq!(contacts[0].expires, Some(60));
    assert_eq!(m.slice(contacts[1].uri.clone()), b"sip:alt@192.0.2.2");
    assert_eq!(contacts[1].expires, None);

    let custom: Vec<_> = m.fields(HeaderName::Other).collect();
    assert_eq!(custom.len(), 1);
    assert_eq!(m.slice(custom[0].name_range.clone()), b"X-Custom");
    assert!(m.has_mandatory());
    assert_eq!(&m.raw()[m.header_end()..m.header_end() + 2], b"\r\n");
}

#[test]
fn compact_names() {
    for (c, h) in [
        ("i", HeaderName::CallId),
        ("M", HeaderName::Contact),
        ("e", HeaderName::ContentEncoding),
        ("l", HeaderName::ContentLength),
        ("c", HeaderName::ContentType),
        ("f", HeaderName::From),
        ("s", HeaderName::Subject),
        ("k", HeaderName::Supported),
        ("t", HeaderName::To),
        ("v", HeaderName::Via),
        ("o", HeaderName::Event),
        ("u", HeaderName::AllowEvents),
        ("r", HeaderName::ReferTo),
        ("b", HeaderName::ReferredBy),
        ("x", HeaderName::SessionExpires),
        ("y", HeaderName::Identity),
        ("z", HeaderName::Other),
        ("rEcOrD-rOuTe", HeaderName::RecordRoute),
        ("X-Foo", HeaderName::Other),
    ] {
        assert_eq!(HeaderName::from_bytes(c.as_bytes()), h, "{c}");
    }
    assert_eq!(HeaderName::CallId.as_str(), Some("Call-ID"));
    assert_eq!(Method::Prack.as_str(), Some("PRACK"));
    assert_eq!(Method::from_token(b"invite"), Method::Other);
}

#[test]
fn response_and_extension_method() {
    let r = "SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <tel:+15551234>;tag=1\r\nTo: <tel:+15550000>\r\nCall-ID: x\r\nCSeq: 1 FOO\r\n\r\n";
    let m = parse(r).unwrap();
    assert_eq!(m.code(), Some(180));
    assert_eq!(m.method(), None);
    assert_eq!(m.method_bytes(), b"");
    assert_eq!(m.cseq(), Some((1, Method::Other)));
    assert_eq!(m.cseq_method_bytes(), Some(&b"FOO"[..]));
    assert_eq!(m.from_uri(), Some(&b"tel:+15551234"[..]));
    assert_eq!(m.to_tag(), None);
    assert_eq!(m.body(), b"");

    let q = "FOO tel:+1-555-1234;phone-context=x SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: tel:+1;tag=1\r\nTo: <tel:+2>\r\nCall-ID: x\r\nCSeq: 1 FOO\r\n\r\nrest";
    let m = parse(q).unwrap();
    assert_eq!(m.method(), Some(Method::Other));
    assert_eq!(m.method_bytes(), b"FOO");
    assert_eq!(
        m.request_uri(),
        Some(&b"tel:+1-555-1234;phone-context=x"[..])
    );
    assert_eq!(m.from_uri(), Some(&b"tel:+1"[..]));
    assert_eq!(m.body(), b"rest");
}

#[test]
fn errors() {
    let base = |extra: &str, cseq: &str| {
        format!(
            "OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: x\r\nCSeq: {cseq}\r\n{extra}\r\n"
        )
    };
    assert!(parse(&base("", "1 OPTIONS")).is_ok());
    assert_eq!(
        parse(&base("", "1 INVITE")).unwrap_err(),
        ParseError::CSeqMethodMismatch
    );
    assert_eq!(
        parse(&base("", "4294967296 OPTIONS")).unwrap_err(),
        ParseError::BadCSeq
    );
    assert_eq!(
        parse(&base("", "OPTIONS")).unwrap_err(),
        ParseError::BadCSeq
    );
    assert_eq!(
        parse(&base("Max-Forwards: 256\r\n", "1 OPTIONS")).unwrap_err(),
        ParseError::BadMaxForwards
    );
    assert_eq!(
        parse(&base("Call-ID: y\r\n", "1 OPTIONS")).unwrap_err(),
        ParseError::DuplicateCallId
    );
    assert_eq!(
        parse(&base("no colon\r\n", "1 OPTIONS")).unwrap_err(),
        ParseError::BadHeader
    );
    assert_eq!(
        parse(&base("Content-Length: 5\r\n", "1 OPTIONS")).unwrap_err(),
        ParseError::BodyTooShort
    );
    assert_eq!(
        parse(&base("Route: <sip:x\r\n", "1 OPTIONS")).unwrap_err(),
        ParseError::BadRoute
    );
    assert_eq!(
        parse(&base("v: SIP/2.0/UDP\r\n", "1 OPTIONS")).unwrap_err(),
        ParseError::BadVia
    );
    assert_eq!(
        parse(&base("Contact: \"unterminated <sip:x>\r\n", "1 OPTIONS")).unwrap_err(),
        ParseError::BadContact
    );
    assert_eq!(parse("").unwrap_err(), ParseError::Empty);
    assert_eq!(parse("\r\n\r\n").unwrap_err(), ParseError::Empty);
    assert_eq!(
        parse("OPTIONS sip:a SIP/2.0\r\nVia: x").unwrap_err(),
        ParseError::Unterminated
    );
    assert_eq!(
        parse("<bad> sip:a SIP/2.0\r\n\r\n").unwrap_err(),
        ParseError::BadRequestLine
    );
    assert_eq!(
        parse("SIP/2.0 99 x\r\n\r\n").unwrap_err(),
        ParseError::BadStatusLine
    );
    let m = SipMessage::scan(Bytes::from_static(b"OPTIONS sip:a SIP/3.0\r\n\r\n")).unwrap();
    assert_eq!(m.validate(), Err(ParseError::UnsupportedVersion));
    assert!(!m.has_mandatory());
}

#[test]
fn star_contact_and_leading_crlf() {
    let r = "\r\n\r\nREGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@example.com>;tag=1\r\nTo: <sip:a@example.com>\r\nCall-ID: x\r\nCSeq: 2 REGISTER\r\nContact: *\r\nExpires: 0\r\nl: 0\r\n\r\n";
    let m = parse(r).unwrap();
    let c = m.contacts();
    assert_eq!(c.len(), 1);
    assert!(c[0].star);
    assert_eq!(m.expires(), Some(0));
    assert_eq!(m.method(), Some(Method::Register));
}

#[test]
fn a_bare_nul_in_the_header_section_is_malformed_an_escaped_one_is_not() {
    let with = |subject: &[u8]| {
        let at = INVITE.find("Content-Length").unwrap();
        let mut m = INVITE.as_bytes()[..at].to_vec();
        m.extend_from_slice(b"Subject: ");
        m.extend_from_slice(subject);
        m.extend_from_slice(b"\r\n");
        m.extend_from_slice(&INVITE.as_bytes()[at..]);
        SipMessage::scan(Bytes::from(m)).unwrap().validate()
    };
    assert_eq!(with(b"a\0b"), Err(ParseError::BadHeader));
    assert_eq!(
        with(b"a\\\\\0b"),
        Err(ParseError::BadHeader),
        "the NUL is bare"
    );
    assert_eq!(
        with(b"\"a\\\0b\""),
        Ok(()),
        "a quoted-pair (RFC 4475 intmeth)"
    );
    assert_eq!(with(b"ab"), Ok(()));
}

#[test]
fn a_single_via_has_no_second_validated_or_not() {
    let raw = Bytes::from_static(
        b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1\r\n\
From: <sip:a@x>;tag=1\r\nTo: <sip:b@x>;tag=2\r\nCall-ID: c\r\nCSeq: 1 BYE\r\n\
Content-Length: 0\r\n\r\n",
    );
    assert_eq!(SipMessage::parse(raw.clone()).unwrap().second_via(), None);
    assert_eq!(SipMessage::scan(raw).unwrap().second_via(), None);
}
