//! Property tests of the message layer: no input panics, framing is exact
//! whatever the read boundaries, and splicing keeps everything it does not
//! edit byte for byte.
//!
//! The fuzz targets (R-FT-5) are structure-aware: valid generated messages
//! mutated by byte flips, truncation, inserted separators, deletions, two
//! messages spliced at random points and header lines duplicated, fed to
//! the framing and to the message view; and a stream whose valid messages
//! surround a mutated one must frame the valid ones before it exactly.
//!
//! The number of cases defaults to a value that keeps this file well under
//! 30 s in a debug build; `PROPTEST_CASES` raises it (CI runs 2000; see
//! docs/operations.md for longer local runs).

use bytes::Bytes;
use proptest::prelude::*;
use sip_gate::frame::{self, Frame};
use sip_gate::{SipMessage, Splice};

const MAX: usize = 1 << 16;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    ProptestConfig::with_cases(cases)
}

/// A generated valid message and what parsing it must report.
#[derive(Debug, Clone)]
struct Generated {
    raw: Vec<u8>,
    call_id: String,
    branches: Vec<String>,
    body: Vec<u8>,
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9.!%*_+`'~-]{1,12}"
}

prop_compose! {
    fn arb_message()(
        request in any::<bool>(),
        method in prop::sample::select(vec!["INVITE", "BYE", "OPTIONS", "REGISTER", "FOO-EXT", "MESSAGE"]),
        code in 100u16..700,
        call_id in token(),
        tag in token(),
        branches in prop::collection::vec("[A-Za-z0-9]{1,10}", 1..5),
        join in prop::collection::vec(any::<bool>(), 5),
        compact in any::<bool>(),
        fold in any::<bool>(),
        ipv6 in any::<bool>(),
        routes in 0usize..3,
        body in prop::collection::vec(any::<u8>(), 0..64),
        crlf_body in any::<bool>(),
    ) -> Generated {
        let mut body = body;
        if crlf_body {
            // Header-looking bytes in a body must stay invisible.
            body.extend_from_slice(b"\r\n\r\nVia: SIP/2.0/UDP x;branch=z9hG4bKbody\r\n");
        }
        let branches: Vec<String> = branches.into_iter().map(|b| format!("z9hG4bK{b}")).collect();
        let mut h = String::new();
        if request {
            h += &format!("{method} sip:user@example.com SIP/2.0\r\n");
        } else {
            h += &format!("SIP/2.0 {code} Whatever\r\n");
        }
        let mut i = 0;
        while i < branches.len() {
            let host = if ipv6 { "[2001:db8::1]:5060" } else { "host.example.com" };
            let name = if compact { "v" } else { "Via" };
            h += &format!("{name}: SIP/2.0/UDP {host};branch={}", branches[i]);
            // Join the next value on the same line with a comma sometimes.
            while join[i % join.len()] && i + 1 < branches.len() {
                i += 1;
                let sep = if fold { " ,\r\n " } else { ", " };
                h += &format!("{sep}SIP/2.0/TCP h{i}.example.com;rport;branch={}", branches[i]);
            }
            h += "\r\n";
            i += 1;
        }
        for r in 0..routes {
            h += &format!("Route: <sip:p{r}.example.com;lr>, \"a,\\\"b\" <sip:q{r}.example.com;lr>\r\n");
        }
        h += if compact { "f: " } else { "From: " };
        h += &format!("<sip:a@example.com>;tag={tag}\r\n");
        h += if compact { "t: " } else { "To: " };
        h += "sip:b@example.com\r\n";
        h += if compact { "i: " } else { "Call-ID: " };
        h += &format!("{call_id}\r\n");
        let cseq_method = if request { method } else { "INVITE" };
        h += &format!("CSeq: 1 {cseq_method}\r\nMax-Forwards: 70\r\n");
        h += if fold { "Content-Length:\r\n " } else { "l: " };
        h += &format!("{}\r\n\r\n", body.len());
        let mut raw = h.into_bytes();
        raw.extend_from_slice(&body);
        Generated { raw, call_id, branches, body }
    }
}

/// Exercises every accessor, and a splice, on whatever `scan` accepts: the
/// point is that none of it panics.
fn exercise(raw: &[u8]) {
    for max in [0, 10, 200, MAX] {
        let _ = frame::check(raw, max);
    }
    let _ = SipMessage::parse(Bytes::copy_from_slice(raw));
    let Ok(m) = SipMessage::scan(Bytes::copy_from_slice(raw)) else {
        return;
    };
    let _ = m.validate();
    // What `validate` kept for routing is what a view that skipped it reads.
    if let Ok(fresh) = SipMessage::scan(Bytes::copy_from_slice(raw)) {
        assert_eq!(m.top_via(), fresh.top_via());
        assert_eq!(m.top_via(), m.vias().next());
        assert_eq!(
            (m.from_tag(), m.to_tag()),
            (fresh.from_tag(), fresh.to_tag())
        );
    }
    let _ = (m.has_mandatory(), m.method(), m.method_bytes(), m.code());
    let _ = (
        m.request_uri(),
        m.call_id(),
        m.cseq(),
        m.cseq_method_bytes(),
    );
    let _ = (m.from_tag(), m.to_tag(), m.from_uri(), m.to_uri());
    let _ = (m.max_forwards(), m.expires(), m.body(), m.header_end());
    let _ = (m.contacts(), m.routes(), m.record_routes());
    let vias: Vec<_> = m.vias().collect();
    for f in m.headers() {
        let _ = m.value(f);
    }
    for i in 0..m.headers().len() {
        let _ = m.elements(i);
    }
    let mut s = Splice::new(&m);
    let _ = s.remove_top_via();
    s.prepend_header(&b"Via: SIP/2.0/UDP me;branch=z9hG4bKme\r\n"[..]);
    if let Some(v) = vias.last() {
        s.insert(v.range.end, &b";received=1.2.3.4"[..]);
    }
    if let Ok(out) = s.finish() {
        let _ = SipMessage::parse(out);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, &'static [u8]),
    Delete(usize, usize),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    let nasty: Vec<&'static [u8]> = vec![
        b"\r\n",
        b"\n",
        b"\r",
        b":",
        b",",
        b";",
        b"\"",
        b"\\",
        b"<",
        b">",
        b" ",
        b"\t",
        b"\r\n ",
        b"\r\n\r\n",
        b"[",
        b"]",
        b"=",
        b"\0",
        b"-",
        b"99999999999999999999",
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::sample::select(nasty)).prop_map(|(i, s)| Mutation::Insert(i, s)),
        (any::<usize>(), 0usize..8).prop_map(|(i, n)| Mutation::Delete(i, n)),
    ]
}

fn mutate(mut raw: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        let len = raw.len().max(1);
        match *m {
            Mutation::Flip(i, b) => {
                if let Some(x) = raw.get_mut(i % len) {
                    *x ^= b;
                }
            }
            Mutation::Truncate(i) => raw.truncate(i % len),
            Mutation::Insert(i, s) => {
                let at = (i % len).min(raw.len());
                raw.splice(at..at, s.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let at = (i % len).min(raw.len());
                let end = (at + n).min(raw.len());
                raw.drain(at..end);
            }
        }
    }
    raw
}

/// `a` up to `cut_a`, then `b` from `cut_b`: two messages spliced.
fn splice(a: &[u8], cut_a: usize, b: &[u8], cut_b: usize) -> Vec<u8> {
    let mut out = a[..cut_a % (a.len() + 1)].to_vec();
    out.extend_from_slice(&b[cut_b % (b.len() + 1)..]);
    out
}

/// The `k`-th header line (of the header section, modulo its count)
/// written twice.
fn duplicate_header(raw: &[u8], k: usize) -> Vec<u8> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let starts: Vec<usize> = raw[..head_end]
        .windows(2)
        .enumerate()
        .filter(|(_, w)| *w == b"\r\n")
        .map(|(i, _)| i + 2)
        .collect();
    let Some(&start) = starts.get(k % starts.len().max(1)) else {
        return raw.to_vec();
    };
    let end = raw[start..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(raw.len(), |i| start + i + 2);
    let mut out = raw[..end].to_vec();
    out.extend_from_slice(&raw[start..end]);
    out.extend_from_slice(&raw[end..]);
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..512)) {
        exercise(&raw);
    }

    #[test]
    fn sip_like_bytes_never_panic(
        raw in prop::collection::vec(prop::sample::select(b"INVITE SIP/2.0 v:;,<>\"\\[]=\r\n\t 0123456789l-".to_vec()), 0..400),
    ) {
        exercise(&raw);
    }

    #[test]
    fn mutated_messages_never_panic(
        g in arb_message(),
        muts in prop::collection::vec(arb_mutation(), 1..6),
    ) {
        exercise(&mutate(g.raw, &muts));
    }

    #[test]
    fn generated_messages_parse(g in arb_message()) {
        let m = SipMessage::parse(Bytes::from(g.raw.clone())).expect("valid message");
        prop_assert_eq!(m.call_id(), Some(g.call_id.as_bytes()));
        prop_assert_eq!(m.body(), &g.body[..]);
        let branches: Vec<&[u8]> = m.vias().filter_map(|v| v.branch).collect();
        let want: Vec<&[u8]> = g.branches.iter().map(|b| b.as_bytes()).collect();
        prop_assert_eq!(branches, want);
    }

    #[test]
    fn framing_split_anywhere(
        msgs in prop::collection::vec(arb_message(), 1..5),
        pings in prop::collection::vec(any::<bool>(), 5),
        cuts in prop::collection::vec(1usize..97, 1..40),
    ) {
        let mut stream = Vec::new();
        let mut expected = Vec::new();
        for (i, g) in msgs.iter().enumerate() {
            if pings[i] {
                stream.extend_from_slice(b"\r\n\r\n");
            }
            stream.extend_from_slice(&g.raw);
            expected.push(g.raw.clone());
        }
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut pos = 0;
        let mut k = 0;
        while pos < stream.len() {
            let n = cuts[k % cuts.len()].min(stream.len() - pos);
            k += 1;
            buf.extend_from_slice(&stream[pos..pos + n]);
            pos += n;
            while let Some(f) = frame::check(&buf, MAX).expect("framing") {
                let rest = buf.split_off(f.len());
                let unit = std::mem::replace(&mut buf, rest);
                if let Frame::Message { .. } = f {
                    got.push(unit);
                }
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn splice_identity_and_via_round_trip(g in arb_message()) {
        let raw = Bytes::from(g.raw.clone());
        let m = SipMessage::parse(raw.clone()).expect("valid message");
        let same = Splice::new(&m).finish().expect("no edits");
        prop_assert_eq!(&same[..], &raw[..]);

        // Remove the top Via, then put it back as its own line on top.
        let top = m.top_via().expect("top via");
        let line = [b"Via: ", m.slice(top.range.clone()), b"\r\n"].concat();
        let mut s = Splice::new(&m);
        s.remove_top_via().expect("remove");
        let popped = s.finish().expect("popped");
        let pm = SipMessage::scan(popped.clone()).expect("scan popped");
        prop_assert_eq!(pm.vias().count(), g.branches.len() - 1);
        prop_assert_eq!(pm.body(), &g.body[..]);
        let mut s = Splice::new(&pm);
        s.prepend_header(line);
        let back = SipMessage::parse(s.finish().expect("restored")).expect("parseable");
        prop_assert_eq!(back.body(), &g.body[..]);
        let branches: Vec<&[u8]> = back.vias().filter_map(|v| v.branch).collect();
        let want: Vec<&[u8]> = g.branches.iter().map(|b| b.as_bytes()).collect();
        prop_assert_eq!(branches, want);
        prop_assert_eq!(back.call_id(), m.call_id());
    }

    #[test]
    fn spliced_and_duplicated_messages_never_panic(
        a in arb_message(),
        b in arb_message(),
        cuts in (any::<usize>(), any::<usize>()),
        dup in any::<usize>(),
        muts in prop::collection::vec(arb_mutation(), 0..4),
    ) {
        let spliced = splice(&a.raw, cuts.0, &b.raw, cuts.1);
        exercise(&spliced);
        let doubled = duplicate_header(&a.raw, dup);
        exercise(&doubled);
        exercise(&mutate(duplicate_header(&spliced, dup), &muts));
    }

    #[test]
    fn framing_keeps_the_messages_before_a_mutated_one(
        before in prop::collection::vec(arb_message(), 0..3),
        bad in arb_message(),
        other in arb_message(),
        cuts in (any::<usize>(), any::<usize>(), any::<usize>()),
        muts in prop::collection::vec(arb_mutation(), 1..4),
        step in 1usize..200,
    ) {
        let broken = mutate(duplicate_header(&splice(&bad.raw, cuts.0, &other.raw, cuts.1), cuts.2), &muts);
        let mut stream: Vec<u8> = before.iter().flat_map(|g| g.raw.clone()).collect();
        stream.extend_from_slice(&broken);
        stream.extend_from_slice(&other.raw);
        let (mut buf, mut got, mut pos) = (Vec::new(), Vec::new(), 0);
        'read: while pos < stream.len() {
            let n = step.min(stream.len() - pos);
            buf.extend_from_slice(&stream[pos..pos + n]);
            pos += n;
            loop {
                match frame::check(&buf, MAX) {
                    Ok(Some(f)) => {
                        prop_assert!(!f.is_empty() && f.len() <= buf.len().min(MAX));
                        let rest = buf.split_off(f.len());
                        let unit = std::mem::replace(&mut buf, rest);
                        if let Frame::Message { .. } = f {
                            exercise(&unit);
                            got.push(unit);
                        }
                    }
                    Ok(None) => break,
                    Err(_) => break 'read, // the connection closes here
                }
            }
        }
        let want: Vec<Vec<u8>> = before.iter().map(|g| g.raw.clone()).collect();
        prop_assert!(got.len() >= want.len(), "{} of {} framed", got.len(), want.len());
        prop_assert_eq!(&got[..want.len()], &want[..]);
    }
}
