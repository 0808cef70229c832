//! Via values (RFC 3261 20.42, RFC 3581 `rport`).

use std::ops::Range;

use crate::lex::{self, skip_lws, take_while, walk_params, Param};

/// One Via value (`sent-protocol sent-by *(;param)`), borrowed from the
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via<'a> {
    /// The transport token as written (`UDP`, `tcp`, `TLS`, ...).
    pub transport: &'a [u8],
    /// The host; IPv6 references keep their brackets (`[::1]`).
    pub host: &'a [u8],
    /// The port of sent-by, if any.
    pub port: Option<u16>,
    /// The `branch` parameter value.
    pub branch: Option<&'a [u8]>,
    /// `None`: no rport; `Some(None)`: bare `;rport`; `Some(Some(p))`: filled.
    pub rport: Option<Option<u16>>,
    /// The whole `rport[=n]` parameter (without the `;`), so a proxy can
    /// replace it with a filled one.
    pub rport_range: Option<Range<usize>>,
    /// The `received` parameter value.
    pub received: Option<&'a [u8]>,
    /// This single via-value in the raw bytes (no surrounding commas).
    pub range: Range<usize>,
    /// Index into [`SipMessage::headers`] of the line holding this value.
    pub field_index: usize,
}

/// A [`Via`] as offsets into its message, so the view can keep its top one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ViaAt {
    transport: Range<usize>,
    host: Range<usize>,
    port: Option<u16>,
    branch: Option<Range<usize>>,
    rport: Option<Option<u16>>,
    rport_range: Option<Range<usize>>,
    received: Option<Range<usize>>,
    range: Range<usize>,
    field_index: usize,
}

impl ViaAt {
    /// `via` must borrow from `buf` (as [`parse_via`] returns it).
    pub(super) fn of(buf: &[u8], via: &Via<'_>) -> ViaAt {
        let at = |s: &[u8]| {
            let start = (s.as_ptr() as usize).saturating_sub(buf.as_ptr() as usize);
            start..start.saturating_add(s.len())
        };
        ViaAt {
            transport: at(via.transport),
            host: at(via.host),
            port: via.port,
            branch: via.branch.map(at),
            rport: via.rport,
            rport_range: via.rport_range.clone(),
            received: via.received.map(at),
            range: via.range.clone(),
            field_index: via.field_index,
        }
    }

    pub(super) fn view<'a>(&self, buf: &'a [u8]) -> Via<'a> {
        let get = |r: &Range<usize>| buf.get(r.clone()).unwrap_or_default();
        Via {
            transport: get(&self.transport),
            host: get(&self.host),
            port: self.port,
            branch: self.branch.as_ref().map(get),
            rport: self.rport,
            rport_range: self.rport_range.clone(),
            received: self.received.as_ref().map(get),
            range: self.range.clone(),
            field_index: self.field_index,
        }
    }
}

/// Parses one via-value:
/// `protocol-name SWS "/" SWS version SWS "/" SWS transport LWS sent-by *(;param)`.
pub(super) fn parse_via(buf: &[u8], range: Range<usize>, field_index: usize) -> Option<Via<'_>> {
    // Cut at the end once: `p < end` below then proves `b[p]`.
    let b = buf.get(..range.end).unwrap_or(buf);
    let end = b.len();
    let (transport, p) = sent_protocol(b, range.start, end)?;
    // sent-by must be separated from the transport by whitespace.
    if p == transport.end {
        return None;
    }
    let (host, port, p) = sent_by(b, p, end)?;
    let (branch, p) = tight_branch(b, p)?;
    let mut via = Via {
        transport: b.get(transport)?,
        host: b.get(host)?,
        port,
        branch,
        rport: None,
        rport_range: None,
        received: None,
        range: range.start..end,
        field_index,
    };
    // Walked, not collected: a Via is parsed several times a message.
    let mut ok = true;
    walk_params(b, p..end, |prm| {
        ok &= via_param(b, prm, &mut via).is_some();
    })?;
    if !ok {
        return None;
    }
    Some(via)
}

/// `protocol-name / version / transport` from `p`: the transport's range and
/// where the scan stopped (after any whitespace that follows it).
#[inline]
fn sent_protocol(b: &[u8], mut p: usize, end: usize) -> Option<(Range<usize>, usize)> {
    // Nearly every Via starts `SIP/2.0/`: the first two tokens and their
    // slashes without whitespace, which the loop would find the same.
    let first = if b.get(p..).is_some_and(|r| r.starts_with(b"SIP/2.0/")) {
        p += 8;
        2
    } else {
        0
    };
    let mut transport = p..p;
    for i in first..3 {
        p = skip_lws(b, p, end);
        let tok_end = take_while(b, p, end, lex::is_token);
        if tok_end == p {
            return None;
        }
        transport = p..tok_end;
        p = skip_lws(b, tok_end, end);
        if i < 2 {
            if p >= end || b[p] != b'/' {
                return None;
            }
            p += 1;
        }
    }
    Some((transport, p))
}

/// `host [: port]` from `p`: the host's range, the port, and where it ended.
#[inline]
fn sent_by(b: &[u8], p: usize, end: usize) -> Option<(Range<usize>, Option<u16>, usize)> {
    let host_start = p;
    let host_end = if p < end && b[p] == b'[' {
        p + memchr::memchr(b']', &b[p..])? + 1
    } else {
        take_while(b, p, end, |c| HOST[usize::from(c)])
    };
    if host_end == host_start {
        return None;
    }
    let mut p = skip_lws(b, host_end, end);
    let mut port = None;
    if p < end && b[p] == b':' {
        let d_start = skip_lws(b, p + 1, end);
        let d_end = take_while(b, d_start, end, |c| c.is_ascii_digit());
        let n = lex::parse_decimal(b.get(d_start..d_end)?)?;
        port = Some(u16::try_from(n).ok()?);
        p = d_end;
    }
    Some((host_start..host_end, port, p))
}

/// Most Vias start their parameters with `;branch=` written tight: its
/// value is taken here without the name scan, and the walk goes on after
/// it. Anything else (whitespace, a quote, no value) is left to the walk.
#[inline]
fn tight_branch(b: &[u8], p: usize) -> Option<(Option<&[u8]>, usize)> {
    if b.get(p..).is_some_and(|r| r.starts_with(b";branch=")) {
        let v_start = p + 8;
        if b.get(v_start)
            .is_some_and(|&c| !lex::is_lws(c) && c != b'"')
        {
            let v_end = lex::token_value_end(b, v_start);
            if v_end > v_start {
                return Some((Some(b.get(v_start..v_end)?), v_end));
            }
        }
    }
    Some((None, p))
}

/// Host name bytes of a sent-by (an IPv6 reference is taken apart).
const HOST: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        t[i] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_');
        i += 1;
    }
    t
};

/// Takes `branch`, `received` and `rport` (the first of each) into `via`;
/// `None` when one of them is malformed. [`lex::name_is`] compares lengths
/// first, so any other parameter costs a few integer comparisons.
fn via_param<'a>(buf: &'a [u8], prm: Param, via: &mut Via<'a>) -> Option<()> {
    let value = || match prm.value.clone() {
        Some(v) => buf.get(v).map(Some),
        None => Some(None),
    };
    let named = |want: &[u8]| lex::name_is(buf, &prm.name, want);
    if via.branch.is_none() && named(b"branch") {
        via.branch = Some(value()??);
    } else if via.received.is_none() && named(b"received") {
        via.received = Some(value()??);
    } else if via.rport.is_none() && named(b"rport") {
        via.rport = Some(match value()? {
            Some(v) => Some(u16::try_from(lex::parse_decimal(v)?).ok()?),
            None => None,
        });
        via.rport_range = Some(prm.whole.clone());
    }
    Some(())
}
