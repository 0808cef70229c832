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
    // sent-by must be separated from the transport by whitespace.
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
    // Walked, not collected: a Via is parsed several times a message.
    let mut ok = true;
    walk_params(buf, p..end, |prm| {
        ok &= via_param(buf, prm, &mut via).is_some();
    })?;
    if !ok {
        return None;
    }
    Some(via)
}

/// Takes `branch`, `received` and `rport` (the first of each) into `via`;
/// `None` when one of them is malformed.
fn via_param<'a>(buf: &'a [u8], prm: Param, via: &mut Via<'a>) -> Option<()> {
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
