//! RFC 4475 3.1.2: invalid messages, refused (answered 400 when they carry
//! what a response needs).

use bytes::Bytes;
use sip_gate::frame::{self, FrameError};
use sip_gate::{ParseError, SipMessage};

use super::{err, msg, parse, SDP};

const GOOD_HEADERS: &str = "Via: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKkdjuw\n\
From: <sip:caller@example.com>;tag=1\n\
To: <sip:user@example.com>\n\
Call-ID: torture.invalid\n";

fn invalid(start: &str, extra: &str, cseq: &str, body: &[u8]) -> Bytes {
    msg(
        &format!("{start}\n{GOOD_HEADERS}CSeq: {cseq}\n{extra}\n"),
        body,
    )
}

/// Parse fails with `want`; `scan` still gives a message that can be
/// answered with a 400 carrying that reason.
fn answerable(raw: &Bytes, want: ParseError) {
    assert_eq!(err(raw), want);
    let m = SipMessage::scan(raw.clone()).expect("scan");
    assert!(m.has_mandatory());
    assert_eq!(m.validate(), Err(want));
}

#[test]
fn badinv01_extraneous_separators() {
    let raw = msg(
        "INVITE sip:user@example.com SIP/2.0\n\
To: sip:j.user@example.com\n\
From: sip:caller@example.net;tag=134161461246\n\
Max-Forwards: 7\n\
Call-ID: badinv01.0ha0isndaksdjasdf3234nas\n\
CSeq: 8 INVITE\n\
Via: SIP/2.0/UDP 192.0.2.15;;,;,,\n\
Contact: \"Joe\" <sip:joe@example.org>;;;;\n\
Content-Length: {CL}\n\
Content-Type: application/sdp\n\n",
        SDP,
    );
    answerable(&raw, ParseError::BadVia);
}

#[test]
fn clerr_content_length_larger_than_datagram() {
    let mut raw = invalid("INVITE sip:user@example.com SIP/2.0", "", "1 INVITE", SDP).to_vec();
    let s = String::from_utf8(raw.clone()).unwrap();
    raw = s
        .replace("Call-ID", "Content-Length: 9999\r\nCall-ID")
        .into_bytes();
    let raw = Bytes::from(raw);
    answerable(&raw, ParseError::BodyTooShort);
    // On a stream the same message is merely incomplete.
    assert_eq!(frame::check(&raw, 1 << 20), Ok(None));
}

#[test]
fn ncl_negative_content_length() {
    let raw = invalid(
        "INVITE sip:user@example.com SIP/2.0",
        "Content-Length: -999\n",
        "1 INVITE",
        SDP,
    );
    answerable(&raw, ParseError::BadContentLength);
    assert_eq!(
        frame::check(&raw, 1 << 20),
        Err(FrameError::BadContentLength)
    );
}

#[test]
fn scalar02_overlarge_scalars() {
    let raw = msg(
        "REGISTER sip:example.com SIP/2.0\n\
Via: SIP/2.0/TCP host129.example.com;branch=z9hG4bK342sdfoi3\n\
To: <sip:user@example.com>\n\
From: <sip:user@example.com>;tag=239232jh3\n\
CSeq: 36893488147419103232 REGISTER\n\
Call-ID: scalar02.23o0pd9vanlq3wnrlnewofjas9ui32\n\
Max-Forwards: 300\n\
Expires: 1000000000000000000000000000000\n\
Contact: <sip:user@host129.example.com>\n  ;expires=280297596632815\n\
Content-Length: 0\n\n",
        b"",
    );
    answerable(&raw, ParseError::BadCSeq);
    let m = SipMessage::scan(raw).unwrap();
    assert_eq!(m.cseq(), None);
    assert_eq!(m.max_forwards(), Some(Err(ParseError::BadMaxForwards)));
    assert_eq!(m.expires(), Some(u32::MAX));
    assert_eq!(m.contacts()[0].expires, Some(u32::MAX));

    // Huge Content-Length: an error on a stream, short body on a datagram.
    let raw = invalid(
        "INVITE sip:user@example.com SIP/2.0",
        "Content-Length: 18446744073709551616\n",
        "1 INVITE",
        b"",
    );
    assert_eq!(err(&raw), ParseError::BadContentLength);
    assert_eq!(
        frame::check(&raw, 1 << 20),
        Err(FrameError::BadContentLength)
    );
    let raw = invalid(
        "INVITE sip:user@example.com SIP/2.0",
        "Content-Length: 4000000\n",
        "1 INVITE",
        b"",
    );
    assert_eq!(err(&raw), ParseError::BodyTooShort);
    assert_eq!(
        frame::check(&raw, 1 << 20),
        Err(FrameError::TooLarge { limit: 1 << 20 })
    );
}

#[test]
fn quotbal_unterminated_quote() {
    let raw = msg(
        "INVITE sip:user@example.com SIP/2.0\n\
To: \"Mr. J. User <sip:j.user@example.com>\n\
From: sip:caller@example.net;tag=93334\n\
Max-Forwards: 10\n\
Call-ID: quotbal.aksdj\n\
Contact: <sip:caller@host59.example.net>\n\
CSeq: 8 INVITE\n\
Via: SIP/2.0/UDP 192.0.2.59:5050;branch=z9hG4bKkdjuw39234\n\
Content-Type: application/sdp\n\
Content-Length: {CL}\n\n",
        SDP,
    );
    answerable(&raw, ParseError::BadTo);
    // An unterminated quote inside a list cannot be split at all.
    let raw = invalid(
        "OPTIONS sip:user@example.com SIP/2.0",
        "Contact: \"Joe <sip:joe@example.org>, <sip:x@y>\n",
        "1 OPTIONS",
        b"",
    );
    answerable(&raw, ParseError::BadContact);
    assert!(SipMessage::scan(raw).unwrap().contacts().is_empty());
}

#[test]
fn request_line_errors() {
    for line in [
        "INVITE <sip:user@example.com> SIP/2.0",           // ltgtruri
        "INVITE sip:user@example.com; lr SIP/2.0",         // lwsruri
        "INVITE  sip:user@example.com  SIP/2.0",           // lwsstart
        "OPTIONS sip:remote-target@example.com SIP/2.0  ", // trws
        "INVITE sip:user@example.com",
        "INVITE sip:user@exa\0mple.com SIP/2.0",
    ] {
        let raw = invalid(line, "", "1 INVITE", b"");
        let m = SipMessage::scan(raw.clone()).unwrap();
        assert_eq!(m.validate(), Err(ParseError::BadRequestLine), "{line:?}");
        assert!(m.has_mandatory());
    }
    // Not even a method token: nothing to answer.
    for line in [
        "<INVITE> sip:a SIP/2.0",
        "\0",
        "SIP/2.0 4294967301 better not break the receiver",
    ] {
        assert!(
            SipMessage::scan(invalid(line, "", "1 INVITE", b"")).is_err(),
            "{line:?}"
        );
    }
}

#[test]
fn badvers_unknown_protocol_version() {
    let raw = invalid(
        "OPTIONS sip:t.watson@example.org SIP/7.0",
        "",
        "1 OPTIONS",
        b"",
    );
    answerable(&raw, ParseError::UnsupportedVersion);
}

#[test]
fn badaspec_and_baddn() {
    let raw = invalid(
        "OPTIONS sip:user@example.org SIP/2.0",
        "",
        "3923239 OPTIONS",
        b"",
    );
    let s = String::from_utf8(raw.to_vec()).unwrap();
    let badaspec = s.replace(
        "To: <sip:user@example.com>",
        "To: \"Watson, Thomas\" < sip:t.watson@example.org >",
    );
    answerable(&Bytes::from(badaspec), ParseError::BadTo);
    let baddn = s.replace(
        "From: <sip:caller@example.com>;tag=1",
        "From: Bell, Alexander <sip:a.g.bell@example.com>;tag=43",
    );
    answerable(&Bytes::from(baddn), ParseError::BadFrom);
    let quoted = s.replace(
        "From: <sip:caller@example.com>;tag=1",
        "From: \"Bell, Alexander\" <sip:a.g.bell@example.com>;tag=43",
    );
    let m = parse(&Bytes::from(quoted));
    assert_eq!(m.from_tag(), Some(&b"43"[..]));
}

#[test]
fn mismatch_cseq_method() {
    let raw = invalid("OPTIONS sip:user@example.com SIP/2.0", "", "8 INVITE", b"");
    answerable(&raw, ParseError::CSeqMethodMismatch);
    let raw = invalid(
        "NEWMETHOD sip:user@example.com SIP/2.0",
        "",
        "8 INVITE",
        b"",
    );
    answerable(&raw, ParseError::CSeqMethodMismatch);
    let raw = invalid(
        "NEWMETHOD sip:user@example.com SIP/2.0",
        "",
        "8 NEWMETHOD",
        b"",
    );
    assert_eq!(parse(&raw).method_bytes(), b"NEWMETHOD");
}

#[test]
fn multi01_duplicate_single_value_headers() {
    let raw = msg(
        "INVITE sip:user@company.com SIP/2.0\n\
Contact: <sip:caller@host25.example.net>\n\
Via: SIP/2.0/UDP 192.0.2.25;branch=z9hG4bKvscsl\n\
Max-Forwards: 70\n\
CSeq: 5 INVITE\n\
Call-ID: multi01.98asdh@192.0.2.1\n\
CSeq: 59 INVITE\n\
Call-ID: multi01.98asdh@192.0.2.2\n\
From: sip:caller@example.com;tag=3413415\n\
To: sip:user@example.com\n\
To: sip:other@example.net\n\
From: sip:caller@example.net;tag=2923420123\n\
Content-Type: application/sdp\n\
l: {CL}\n\n",
        SDP,
    );
    answerable(&raw, ParseError::DuplicateFrom);
}

#[test]
fn insuf_missing_headers_cannot_be_answered() {
    let raw = msg(
        "INVITE sip:user@example.com SIP/2.0\n\
CSeq: 193942 INVITE\n\
Via: SIP/2.0/UDP 192.0.2.95;branch=z9hG4bKkdj.insuf\n\
Content-Type: application/sdp\n\
l: {CL}\n\n",
        SDP,
    );
    assert_eq!(err(&raw), ParseError::MissingFrom);
    assert!(!SipMessage::scan(raw).unwrap().has_mandatory());
}

#[test]
fn structural_errors() {
    assert_eq!(
        err(&Bytes::from_static(
            b"OPTIONS sip:a@b SIP/2.0\r\nVia: x\r\n"
        )),
        ParseError::Unterminated
    );
    assert_eq!(err(&Bytes::from_static(b"\r\n\r\n\r\n")), ParseError::Empty);
    let raw = invalid(
        "OPTIONS sip:a@b SIP/2.0",
        "Bad Header Line\n",
        "1 OPTIONS",
        b"",
    );
    answerable(&raw, ParseError::BadHeader);
    let raw = invalid(
        "OPTIONS sip:a@b SIP/2.0",
        "Max-Forwards: -1\n",
        "1 OPTIONS",
        b"",
    );
    answerable(&raw, ParseError::BadMaxForwards);
    let raw = invalid(
        "OPTIONS sip:a@b SIP/2.0",
        "Record-Route: sip:a b\n",
        "1 OPTIONS",
        b"",
    );
    answerable(&raw, ParseError::BadRecordRoute);
    // A stream message without Content-Length cannot be framed.
    let raw = invalid("OPTIONS sip:a@b SIP/2.0", "", "1 OPTIONS", b"");
    assert_eq!(
        frame::check(&raw, 1 << 20),
        Err(FrameError::MissingContentLength)
    );
}
