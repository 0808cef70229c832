//! HEP v3 (the Homer Encapsulation Protocol, sipcapture's `HEP3`): a
//! 6-byte header (`HEP3` and the packet's length) and chunks, each a
//! vendor id, a type and a length (of the whole chunk) before its data,
//! all in network order. Only vendor 0 (the generic chunks) is written.
//!
//! The chunks go in the order Kamailio's `siptrace` writes them (family,
//! protocol, ports, time, protocol type, agent id, addresses, auth key,
//! payload) with the correlation id last: receivers that read chunks in a
//! fixed order before the payload (older sngrep) read these packets too.

use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

/// HEP protocol type of a SIP message (chunk 0x000b).
pub const PROTO_SIP: u8 = 1;
/// HEP protocol type of a log record, as HOMER files rtpengine's and
/// other control records (chunk 0x000b).
pub const PROTO_LOG: u8 = 100;

/// IP protocol numbers of chunk 0x0002.
pub const IPPROTO_TCP: u8 = 6;
/// UDP.
pub const IPPROTO_UDP: u8 = 17;

/// The largest HEP packet: its length field is 16 bits.
pub const MAX_PACKET: usize = u16::MAX as usize;

/// A packet that does not fit [`MAX_PACKET`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a HEP packet holds at most {MAX_PACKET} bytes")]
pub struct TooBig;

/// What one HEP packet says.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// When the message was received or sent.
    pub at: SystemTime,
    /// Where it came from.
    pub src: SocketAddr,
    /// Where it went.
    pub dst: SocketAddr,
    /// [`IPPROTO_UDP`] or [`IPPROTO_TCP`].
    pub ip_proto: u8,
    /// [`PROTO_SIP`] or [`PROTO_LOG`].
    pub proto_type: u8,
    /// The capture agent id (chunk 0x000c).
    pub agent: u32,
    /// The auth key (chunk 0x000e), if any.
    pub auth_key: Option<&'a [u8]>,
    /// The correlation id (chunk 0x0011): a SIP message's Call-ID.
    pub correlation: Option<&'a [u8]>,
    /// The message (chunk 0x000f).
    pub payload: &'a [u8],
}

/// Appends the packet of `r` to `out`, after what `out` holds (a batch's
/// packets end to end): the header and fixed chunks are laid out on the
/// stack at fixed offsets and appended at once, then the auth key,
/// payload and correlation id, so the payload is copied once. On
/// [`TooBig`] `out` is left as it was.
pub fn encode(r: &Record<'_>, out: &mut Vec<u8>) -> Result<(), TooBig> {
    let mut fixed = [0u8; FIXED_MAX];
    fixed[..4].copy_from_slice(b"HEP3");
    let (src, dst) = (r.src.ip(), r.dst.ip());
    let v4 = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some((s, d)),
        _ => None,
    };
    // AF_INET and AF_INET6 as Linux numbers them, as every HEP agent sends.
    let at = put(&mut fixed, 6, 0x0001, [if v4.is_some() { 2 } else { 10 }]);
    let at = put(&mut fixed, at, 0x0002, [r.ip_proto]);
    let at = put(&mut fixed, at, 0x0007, r.src.port().to_be_bytes());
    let at = put(&mut fixed, at, 0x0008, r.dst.port().to_be_bytes());
    let since = r.at.duration_since(UNIX_EPOCH).unwrap_or_default();
    // The seconds field is 32 bits, as in every HEP v3 agent (to 2106).
    let at = put(
        &mut fixed,
        at,
        0x0009,
        (since.as_secs() as u32).to_be_bytes(),
    );
    let at = put(&mut fixed, at, 0x000a, since.subsec_micros().to_be_bytes());
    let at = put(&mut fixed, at, 0x000b, [r.proto_type]);
    let at = put(&mut fixed, at, 0x000c, r.agent.to_be_bytes());
    let fixed_len = match v4 {
        Some((s, d)) => {
            let at = put(&mut fixed, at, 0x0003, s.octets());
            put(&mut fixed, at, 0x0004, d.octets())
        }
        None => {
            let at = put(&mut fixed, at, 0x0005, v6(src).octets());
            put(&mut fixed, at, 0x0006, v6(dst).octets())
        }
    };
    let variable = [
        (0x000e, r.auth_key),
        (0x000f, Some(r.payload)),
        (0x0011, r.correlation),
    ];
    let len = variable
        .iter()
        .filter_map(|(_, d)| d.map(|d| 6 + d.len()))
        .sum::<usize>()
        + fixed_len;
    let len = u16::try_from(len).map_err(|_| TooBig)?;
    fixed[4..6].copy_from_slice(&len.to_be_bytes());
    out.reserve(usize::from(len));
    out.extend_from_slice(&fixed[..fixed_len]);
    for (kind, data) in variable {
        if let Some(data) = data {
            // Each fits: the packet's length, their sum, did.
            out.extend_from_slice(&head(kind, data.len()));
            out.extend_from_slice(data);
        }
    }
    Ok(())
}

/// The most bytes before the auth key: the header and the fixed chunks
/// of an IPv6 packet (the longest).
const FIXED_MAX: usize = 6 + 7 + 7 + 8 + 8 + 10 + 10 + 7 + 10 + 22 + 22;

/// Writes a fixed-size chunk at `at` in `buf`; where the next begins.
/// Inlined with `at` and `N` known, it compiles to a few stores.
#[inline(always)]
fn put<const N: usize>(buf: &mut [u8; FIXED_MAX], at: usize, kind: u16, data: [u8; N]) -> usize {
    buf[at..at + 6].copy_from_slice(&head(kind, N));
    buf[at + 6..at + 6 + N].copy_from_slice(&data);
    at + 6 + N
}

/// A chunk's head: vendor 0, its type, and its length with the head.
#[inline(always)]
fn head(kind: u16, data_len: usize) -> [u8; 6] {
    let [k0, k1] = kind.to_be_bytes();
    let [l0, l1] = ((6 + data_len) as u16).to_be_bytes();
    [0, 0, k0, k1, l0, l1]
}

fn v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// What the capture filters and correlates a SIP message by: its method
/// (a response's from its CSeq) and its Call-ID, read from the header
/// lines without parsing the message.
pub fn sip_fields(msg: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    // memchr finds the line ends a word at a time; the scan stops once
    // both fields are known (a request's Call-ID, wherever it is).
    let mut start = 0;
    let mut lines = memchr::memchr_iter(b'\n', msg)
        .chain(std::iter::once(msg.len()))
        .map(move |end| {
            let line = &msg[start.min(end)..end];
            start = end + 1;
            trim_cr(line)
        });
    let Some(start) = lines.next() else {
        return (None, None);
    };
    let mut method = (!start.starts_with(b"SIP/"))
        .then(|| start.split(|&b| b == b' ').next())
        .flatten()
        .filter(|m| !m.is_empty());
    let mut call_id = None;
    for line in lines {
        if line.is_empty() {
            break;
        }
        if method.is_some() && call_id.is_some() {
            break;
        }
        // Only `Call-ID`, `i` and `CSeq` are read: other lines are passed
        // on their first letter.
        let first = line.iter().find(|b| !b.is_ascii_whitespace());
        if !matches!(first, Some(b'c' | b'C' | b'i' | b'I')) {
            continue;
        }
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let name = trim(&line[..colon]);
        let value = trim(&line[colon + 1..]);
        if name.eq_ignore_ascii_case(b"call-id") || name.eq_ignore_ascii_case(b"i") {
            call_id = Some(value);
        } else if method.is_none() && name.eq_ignore_ascii_case(b"cseq") {
            method = value.split(|&b| b == b' ').rfind(|w| !w.is_empty());
        }
    }
    (method, call_id)
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn chunks(p: &[u8]) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut pos = 6;
        while pos < p.len() {
            let kind = u16::from_be_bytes([p[pos + 2], p[pos + 3]]);
            let len = u16::from_be_bytes([p[pos + 4], p[pos + 5]]) as usize;
            out.push((kind, p[pos + 6..pos + len].to_vec()));
            pos += len;
        }
        out
    }

    #[test]
    fn a_record_has_every_chunk_and_its_length() {
        let r = Record {
            at: UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789),
            src: "10.0.0.1:5060".parse().unwrap(),
            dst: "10.0.0.2:5070".parse().unwrap(),
            ip_proto: IPPROTO_UDP,
            proto_type: PROTO_SIP,
            agent: 2001,
            auth_key: Some(b"k"),
            correlation: Some(b"c1"),
            payload: b"OPTIONS sip:x SIP/2.0\r\n\r\n",
        };
        let mut p = Vec::new();
        encode(&r, &mut p).unwrap();
        assert_eq!(&p[..4], b"HEP3");
        assert_eq!(u16::from_be_bytes([p[4], p[5]]) as usize, p.len());
        let c = chunks(&p);
        let get = |k| c.iter().find(|(t, _)| *t == k).map(|(_, d)| d.clone());
        assert_eq!(get(1), Some(vec![2]));
        assert_eq!(get(2), Some(vec![17]));
        assert_eq!(get(3), Some(vec![10, 0, 0, 1]));
        assert_eq!(get(8), Some(5070u16.to_be_bytes().to_vec()));
        assert_eq!(get(9), Some(1_700_000_000u32.to_be_bytes().to_vec()));
        assert_eq!(get(10), Some(123_456u32.to_be_bytes().to_vec()));
        assert_eq!(get(12), Some(2001u32.to_be_bytes().to_vec()));
        assert_eq!(get(14), Some(b"k".to_vec()));
        assert_eq!(get(15), Some(r.payload.to_vec()));
        assert_eq!(get(17), Some(b"c1".to_vec()));
    }

    #[test]
    fn ipv6_and_mixed_families_use_the_v6_chunks() {
        let r = Record {
            at: UNIX_EPOCH,
            src: "[::1]:5060".parse().unwrap(),
            dst: "10.0.0.2:5070".parse().unwrap(),
            ip_proto: IPPROTO_TCP,
            proto_type: PROTO_SIP,
            agent: 0,
            auth_key: None,
            correlation: None,
            payload: b"x",
        };
        let mut p = Vec::new();
        encode(&r, &mut p).unwrap();
        let c = chunks(&p);
        assert!(c.contains(&(1, vec![10])));
        assert!(c.iter().any(|(t, d)| *t == 6 && d.len() == 16));
        assert!(!c.iter().any(|(t, _)| *t == 3 || *t == 14 || *t == 17));
    }

    #[test]
    fn a_payload_past_the_bound_is_refused() {
        let big = vec![b'x'; MAX_PACKET];
        let r = Record {
            at: UNIX_EPOCH,
            src: "10.0.0.1:1".parse().unwrap(),
            dst: "10.0.0.2:2".parse().unwrap(),
            ip_proto: IPPROTO_UDP,
            proto_type: PROTO_SIP,
            agent: 0,
            auth_key: None,
            correlation: None,
            payload: &big,
        };
        let mut out = b"earlier packets".to_vec();
        assert_eq!(encode(&r, &mut out), Err(TooBig));
        assert_eq!(out, b"earlier packets", "left as it was");
    }

    /// Packets are appended end to end: a batch is one buffer.
    #[test]
    fn packets_append_after_what_the_buffer_holds() {
        let r = |payload: &'static [u8]| Record {
            at: UNIX_EPOCH,
            src: "[::1]:5060".parse().unwrap(),
            dst: "[::2]:5070".parse().unwrap(),
            ip_proto: IPPROTO_UDP,
            proto_type: PROTO_SIP,
            agent: 9,
            auth_key: Some(b"key"),
            correlation: Some(b"id"),
            payload,
        };
        let (mut one, mut two, mut both) = (Vec::new(), Vec::new(), Vec::new());
        encode(&r(b"first"), &mut one).unwrap();
        encode(&r(b"second"), &mut two).unwrap();
        encode(&r(b"first"), &mut both).unwrap();
        encode(&r(b"second"), &mut both).unwrap();
        assert_eq!(both, [one.clone(), two].concat());
        assert_eq!(u16::from_be_bytes([one[4], one[5]]) as usize, one.len());
    }

    #[test]
    fn method_and_call_id_of_requests_and_responses() {
        let req = b"INVITE sip:b@x SIP/2.0\r\nVia: SIP/2.0/UDP h\r\ni: abc@h \r\nCSeq: 1 INVITE\r\n\r\nCall-ID: body";
        assert_eq!(sip_fields(req), (Some(&b"INVITE"[..]), Some(&b"abc@h"[..])));
        let resp = b"SIP/2.0 200 OK\r\nCSeq:  7  REGISTER\r\nCall-ID: r1\r\n\r\n";
        assert_eq!(sip_fields(resp), (Some(&b"REGISTER"[..]), Some(&b"r1"[..])));
        assert_eq!(sip_fields(b""), (None, None));
    }
}
