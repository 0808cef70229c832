//! The value parsers as first written (re-slicing, saturating arithmetic,
//! a second walk for the tag): the tight ones must find exactly what these
//! find, on any bytes.

use std::ops::Range;

use proptest::prelude::*;

use super::super::name_addr::{parse_contact, parse_name_addr, ContactView};
use super::super::via::{parse_via, Via};
use crate::lex::{self, Param};

fn take_while(buf: &[u8], pos: usize, end: usize, f: impl Fn(u8) -> bool) -> usize {
    let end = end.min(buf.len());
    match buf.get(pos..end) {
        Some(run) => pos.saturating_add(run.iter().position(|&b| !f(b)).unwrap_or(run.len())),
        None => pos,
    }
}

fn skip_lws(buf: &[u8], pos: usize, end: usize) -> usize {
    take_while(buf, pos, end, lex::is_lws)
}

fn quoted_end(buf: &[u8], pos: usize, end: usize) -> Option<usize> {
    let end = end.min(buf.len());
    let mut p = pos.checked_add(1)?;
    while p < end {
        match buf.get(p)? {
            b'\\' => p = p.checked_add(2)?,
            b'"' => return p.checked_add(1),
            _ => p = p.checked_add(1)?,
        }
    }
    None
}

fn walk_params(buf: &[u8], range: Range<usize>, mut f: impl FnMut(Param)) -> Option<()> {
    let end = range.end.min(buf.len());
    let mut p = skip_lws(buf, range.start, end);
    while p < end {
        if buf.get(p) != Some(&b';') {
            return None;
        }
        let name_start = skip_lws(buf, p.saturating_add(1), end);
        let name_end = take_while(buf, name_start, end, lex::is_token);
        if name_end == name_start {
            return None;
        }
        let mut q = skip_lws(buf, name_end, end);
        let mut value = None;
        let mut whole_end = name_end;
        if buf.get(q) == Some(&b'=') && q < end {
            let v_start = skip_lws(buf, q.saturating_add(1), end);
            let v_end = if buf.get(v_start) == Some(&b'"') {
                quoted_end(buf, v_start, end)?
            } else {
                take_while(buf, v_start, end, |b| !lex::is_lws(b) && b != b';')
            };
            if v_end == v_start {
                return None;
            }
            value = Some(v_start..v_end);
            whole_end = v_end;
            q = skip_lws(buf, v_end, end);
        }
        f(Param {
            name: name_start..name_end,
            value,
            whole: name_start..whole_end,
        });
        p = q;
    }
    Some(())
}

fn find_param(buf: &[u8], range: Range<usize>, name: &[u8]) -> Option<Param> {
    let mut found = None;
    walk_params(buf, range, |p| {
        let named = buf
            .get(p.name.clone())
            .is_some_and(|n| n.eq_ignore_ascii_case(name));
        if found.is_none() && named {
            found = Some(p);
        }
    })?;
    found
}

fn old_parse_via(buf: &[u8], range: Range<usize>, field_index: usize) -> Option<Via<'_>> {
    let end = range.end.min(buf.len());
    let mut p = range.start;
    let mut transport = p..p;
    for i in 0..3 {
        p = skip_lws(buf, p, end);
        let tok_end = take_while(buf, p, end, lex::is_token);
        if tok_end == p {
            return None;
        }
        transport = p..tok_end;
        p = skip_lws(buf, tok_end, end);
        if i < 2 {
            if buf.get(p) != Some(&b'/') || p >= end {
                return None;
            }
            p = p.saturating_add(1);
        }
    }
    if p == transport.end {
        return None;
    }
    let host_start = p;
    let host_end = if buf.get(p) == Some(&b'[') {
        let close = memchr::memchr(b']', buf.get(p..end)?)?;
        p.checked_add(close)?.checked_add(1)?
    } else {
        take_while(buf, p, end, |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')
        })
    };
    if host_end == host_start {
        return None;
    }
    p = skip_lws(buf, host_end, end);
    let mut port = None;
    if buf.get(p) == Some(&b':') && p < end {
        let d_start = skip_lws(buf, p.saturating_add(1), end);
        let d_end = take_while(buf, d_start, end, |b| b.is_ascii_digit());
        let n = lex::parse_decimal(buf.get(d_start..d_end)?)?;
        port = Some(u16::try_from(n).ok()?);
        p = d_end;
    }
    let mut via = Via {
        transport: buf.get(transport)?,
        host: buf.get(host_start..host_end)?,
        port,
        branch: None,
        rport: None,
        rport_range: None,
        received: None,
        range: range.start..end,
        field_index,
    };
    let mut ok = true;
    walk_params(buf, p..end, |prm| {
        ok &= old_via_param(buf, prm, &mut via).is_some();
    })?;
    ok.then_some(via)
}

fn old_via_param<'a>(buf: &'a [u8], prm: Param, via: &mut Via<'a>) -> Option<()> {
    let name = buf.get(prm.name.clone())?;
    let value = match prm.value.clone() {
        Some(v) => Some(buf.get(v)?),
        None => None,
    };
    if name.eq_ignore_ascii_case(b"branch") && via.branch.is_none() {
        via.branch = Some(value?);
    } else if name.eq_ignore_ascii_case(b"received") && via.received.is_none() {
        via.received = Some(value?);
    } else if name.eq_ignore_ascii_case(b"rport") && via.rport.is_none() {
        via.rport = Some(match value {
            Some(v) => Some(u16::try_from(lex::parse_decimal(v)?).ok()?),
            None => None,
        });
        via.rport_range = Some(prm.whole);
    }
    Some(())
}

/// `(uri, params, tag)`.
type Parts = (Range<usize>, Range<usize>, Option<Range<usize>>);

/// The tag found by a second walk, as `tag_in` did.
fn old_parse_name_addr(buf: &[u8], range: Range<usize>) -> Option<Parts> {
    let end = range.end.min(buf.len());
    let p = skip_lws(buf, range.start, end);
    let lt = if buf.get(p) == Some(&b'"') {
        let q = skip_lws(buf, quoted_end(buf, p, end)?, end);
        (buf.get(q) == Some(&b'<')).then_some(q)?
    } else {
        let bytes = buf.get(p..end)?;
        match memchr::memchr(b'<', bytes) {
            Some(i) => {
                let display = bytes.get(..i)?;
                if !display.iter().all(|&b| lex::is_token(b) || lex::is_lws(b)) {
                    return None;
                }
                p.checked_add(i)?
            }
            None => {
                let uri_end = take_while(buf, p, end, |b| !lex::is_lws(b) && b != b';');
                let uri = p..uri_end;
                if !is_uri(buf.get(uri.clone())?) {
                    return None;
                }
                walk_params(buf, uri_end..end, |_| {})?;
                let tag = find_param(buf, uri_end..end, b"tag").and_then(|t| t.value);
                return Some((uri, uri_end..end, tag));
            }
        }
    };
    let uri_start = lt.checked_add(1)?;
    let gt = uri_start.checked_add(memchr::memchr(b'>', buf.get(uri_start..end)?)?)?;
    let uri = uri_start..gt;
    if !is_uri(buf.get(uri.clone())?) {
        return None;
    }
    let params = gt.checked_add(1)?..end;
    walk_params(buf, params.clone(), |_| {})?;
    let tag = find_param(buf, params.clone(), b"tag").and_then(|t| t.value);
    Some((uri, params, tag))
}

fn is_uri(uri: &[u8]) -> bool {
    !uri.is_empty() && uri.contains(&b':') && uri.iter().all(|&b| !lex::is_lws(b))
}

fn old_parse_contact(buf: &[u8], range: Range<usize>, field_index: usize) -> Option<ContactView> {
    if buf.get(range.clone())? == b"*" {
        return Some(ContactView {
            uri: range.clone(),
            range,
            field_index,
            star: true,
            expires: None,
        });
    }
    let (uri, params, _) = old_parse_name_addr(buf, range.clone())?;
    let expires = match find_param(buf, params, b"expires") {
        Some(p) => Some(super::super::name_addr::parse_delta(buf.get(p.value?)?)?),
        None => None,
    };
    Some(ContactView {
        uri,
        range,
        field_index,
        star: false,
        expires,
    })
}

/// Values near the real ones, mutated: most cases get past the first
/// check, so the deep paths are compared too.
fn value(seeds: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
    let alphabet = b"aB;=,: \t\r\n\"\\<>[]/@.0123456789%".to_vec();
    (
        proptest::sample::select(seeds),
        proptest::collection::vec(
            (
                any::<proptest::sample::Index>(),
                proptest::sample::select(alphabet),
                0u8..3,
            ),
            0..4,
        ),
    )
        .prop_map(|(seed, edits)| {
            let mut v = seed.to_vec();
            for (at, b, op) in edits {
                let i = at.index(v.len() + 1);
                match op {
                    0 => v.insert(i, b),
                    1 if i < v.len() => v[i] = b,
                    _ if i < v.len() => {
                        v.remove(i);
                    }
                    _ => v.push(b),
                }
            }
            v
        })
}

const VIAS: &[&[u8]] = &[
    b"SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKbench-7;rport",
    b"SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bK-g0123456789abcdef0123456789abcdef;rport=40000;received=203.0.113.10",
    b" SIP / 2.0 / TCP\r\n [2001:db8::1] : 5070 ; BRANCH = \"q;x\" ;RPort;received=[::1]",
    b"sip/2.0/tls h;branch=a;branch;rport=99999;x",
];

const NAME_ADDRS: &[&[u8]] = &[
    b"\"Alice\" <sip:alice@example.com>;tag=a1",
    b"<sip:bob@example.com>;TAG;tag=x",
    b"Bob Smith <sips:bob@[::1]:5061;lr>;expires=60;tag=\"q\"",
    b"sip:bob@example.com;foo;tag=b2 ",
    b"*",
    b"<sip:g1.sg-a.0011223344556677@127.0.0.1:5060;lr;transport=TCP>",
];

proptest! {
    #[test]
    fn params_walk_as_first_written(v in value(&[b";tag=a1 ; Expires = 60;lr;q=\"x;y\"", b";branch=z9hG4bK-g0123456789abcdef0123456789;rport"]), cut in 0usize..4) {
        for range in [cut.min(v.len())..v.len(), 0..v.len().saturating_sub(cut)] {
            let (mut new, mut old) = (Vec::new(), Vec::new());
            let new = lex::walk_params(&v, range.clone(), |p| new.push(p)).map(|()| new);
            let old = walk_params(&v, range.clone(), |p| old.push(p)).map(|()| old);
            prop_assert_eq!(new, old);
            for name in [&b"tag"[..], b"expires", b"branch"] {
                prop_assert_eq!(
                    lex::find_param(&v, range.clone(), name),
                    find_param(&v, range.clone(), name)
                );
            }
        }
    }

    #[test]
    fn vias_parse_as_first_written(v in value(VIAS), cut in 0usize..4) {
        for range in [cut.min(v.len())..v.len(), 0..v.len().saturating_sub(cut)] {
            prop_assert_eq!(parse_via(&v, range.clone(), 3), old_parse_via(&v, range.clone(), 3));
        }
    }

    #[test]
    fn name_addrs_parse_as_first_written(v in value(NAME_ADDRS), cut in 0usize..4) {
        for range in [cut.min(v.len())..v.len(), 0..v.len().saturating_sub(cut)] {
            let new = parse_name_addr(&v, range.clone()).map(|p| (p.uri, p.params, p.tag));
            prop_assert_eq!(new, old_parse_name_addr(&v, range.clone()));
            prop_assert_eq!(parse_contact(&v, range.clone(), 1), old_parse_contact(&v, range.clone(), 1));
        }
    }

    /// Past the end of the buffer the ranges are clamped the same way.
    #[test]
    fn ranges_beyond_the_buffer_as_first_written(v in value(VIAS), start in 0usize..8, over in 0usize..8) {
        let range = start..v.len() + over;
        prop_assert_eq!(parse_via(&v, range.clone(), 0), old_parse_via(&v, range.clone(), 0));
        let new = parse_name_addr(&v, range.clone()).map(|p| (p.uri, p.params, p.tag));
        prop_assert_eq!(new, old_parse_name_addr(&v, range));
    }
}

proptest! {
    /// The first byte below 0x21 or `stop`, but for a tail shorter than a
    /// chunk: that is left to the caller's byte loop.
    #[test]
    fn skip_plain_finds_the_first_stop(
        v in proptest::collection::vec(
            proptest::sample::select(b"ab;> \t\r\n\x00\x01\x20\x21\x7f\x80\xff".to_vec()), 0..40),
        start in 0usize..10,
    ) {
        for stop in [b';', b'>'] {
            let want = v
                .get(start..)
                .and_then(|r| r.iter().position(|&b| b < 0x21 || b == stop))
                .map_or(v.len().max(start), |i| start + i);
            let got = lex::skip_plain(&v, start, stop);
            prop_assert!(
                got == want || (got < want && v.len() - got < 8),
                "{:?} from {}: {} {}", v, start, got, want
            );
        }
    }
}

#[test]
fn skip_plain_examples() {
    // High bytes are plain: a run of them is skipped whole.
    assert_eq!(lex::skip_plain(&[0xff; 20], 0, b';'), 16);
    assert_eq!(lex::skip_plain(b"z9hG4bK-g01234567;x", 0, b';'), 16);
    assert_eq!(lex::skip_plain(b"z9hG4bK;g01234567", 0, b';'), 7);
    assert_eq!(lex::skip_plain(b"z9hG4bK-g0123\x01;4567", 0, b';'), 13);
    assert_eq!(lex::skip_plain(b"ab", 5, b';'), 5, "past the end stays");
}

/// The tight `;branch=` shortcut and the cases it leaves to the walk.
#[test]
fn branch_shortcut_edges_as_first_written() {
    for v in [
        &b"SIP/2.0/UDP h;branch=z9hG4bKa;branch=b"[..],
        b"SIP/2.0/UDP h;branch= z9hG4bKa",
        b"SIP/2.0/UDP h;branch=\"q;x\"",
        b"SIP/2.0/UDP h;branch=;rport",
        b"SIP/2.0/UDP h;branch=",
        b"SIP/2.0/UDP h;branch=z9hG4bK-g0123456789abcdef\x01x;rport",
        b"SIP/2.0/UDP h:5060;branch=z9hG4bKa\r\n ;received=[::1]",
        b"SIP/2.0/UDP h;branchx=a;branch=b",
    ] {
        let new = parse_via(v, 0..v.len(), 0);
        assert_eq!(
            new,
            old_parse_via(v, 0..v.len(), 0),
            "{:?}",
            String::from_utf8_lossy(v)
        );
    }
    let v = b"SIP/2.0/UDP h;branch=z9hG4bKa;branch=b";
    assert_eq!(
        parse_via(v, 0..v.len(), 0).unwrap().branch,
        Some(&b"z9hG4bKa"[..])
    );
}
