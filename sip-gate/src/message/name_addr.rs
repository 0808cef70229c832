//! name-addr and addr-spec values (From, To, Route, Record-Route, Contact;
//! RFC 3261 20.10, 25.1).

use std::ops::Range;

use crate::lex::{self, find_param, quoted_end, skip_lws, take_while};

/// One element of a Route or Record-Route list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAddr {
    /// The URI, without `<>` and without header parameters.
    pub uri: Range<usize>,
    /// This single comma-separated element.
    pub range: Range<usize>,
    /// Index into [`SipMessage::headers`] of the line holding this element.
    pub field_index: usize,
}

/// One element of a Contact list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContactView {
    /// The URI, without `<>` and without header parameters; the `*` itself
    /// for a star contact.
    pub uri: Range<usize>,
    /// This single comma-separated element.
    pub range: Range<usize>,
    /// Index into [`SipMessage::headers`] of the line holding this element.
    pub field_index: usize,
    /// `Contact: *` (unregister all).
    pub star: bool,
    /// The `expires` parameter; values above 2^32-1 saturate.
    pub expires: Option<u32>,
}

/// The pieces of a name-addr or addr-spec with header parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NameAddrParts {
    pub(super) uri: Range<usize>,
    pub(super) params: Range<usize>,
}

/// Parses `[display-name] <uri> *(;param)` or `addr-spec *(;param)`.
/// In the addr-spec form the URI ends at the first `;` or whitespace: its
/// parameters belong to the header (RFC 3261 20.10).
pub(super) fn parse_name_addr(buf: &[u8], range: Range<usize>) -> Option<NameAddrParts> {
    let end = range.end.min(buf.len());
    let p = skip_lws(buf, range.start, end);
    let lt = if buf.get(p) == Some(&b'"') {
        let q = skip_lws(buf, quoted_end(buf, p, end)?, end);
        (buf.get(q) == Some(&b'<')).then_some(q)?
    } else {
        let bytes = buf.get(p..end)?;
        match memchr::memchr(b'<', bytes) {
            // An unquoted display name is tokens and whitespace only
            // (RFC 4475 baddn: `Bell, Alexander <...>` is invalid).
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
                lex::walk_params(buf, uri_end..end, |_| {})?;
                return Some(NameAddrParts {
                    uri,
                    params: uri_end..end,
                });
            }
        }
    };
    let uri_start = lt.checked_add(1)?;
    let gt = uri_start.checked_add(memchr::memchr(b'>', buf.get(uri_start..end)?)?)?;
    let uri = uri_start..gt;
    // RFC 4475 badaspec: whitespace inside <> is not a URI.
    if !is_uri(buf.get(uri.clone())?) {
        return None;
    }
    let params = gt.checked_add(1)?..end;
    lex::walk_params(buf, params.clone(), |_| {})?;
    Some(NameAddrParts { uri, params })
}

pub(super) fn is_uri(uri: &[u8]) -> bool {
    !uri.is_empty() && uri.contains(&b':') && uri.iter().all(|&b| !lex::is_lws(b))
}

/// Parses one Contact element: `*` or a name-addr with params.
pub(super) fn parse_contact(
    buf: &[u8],
    range: Range<usize>,
    field_index: usize,
) -> Option<ContactView> {
    if buf.get(range.clone())? == b"*" {
        return Some(ContactView {
            uri: range.clone(),
            range,
            field_index,
            star: true,
            expires: None,
        });
    }
    let parts = parse_name_addr(buf, range.clone())?;
    let expires = match find_param(buf, parts.params, b"expires") {
        Some(p) => Some(parse_delta(buf.get(p.value?)?)?),
        None => None,
    };
    Some(ContactView {
        uri: parts.uri,
        range,
        field_index,
        star: false,
        expires,
    })
}

/// delta-seconds: digits only; values above 2^32-1 saturate (RFC 4475
/// scalar02 expects them tolerated, not rejected).
pub(super) fn parse_delta(v: &[u8]) -> Option<u32> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        lex::parse_decimal(v)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(u32::MAX),
    )
}
