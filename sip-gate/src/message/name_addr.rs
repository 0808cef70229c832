//! name-addr and addr-spec values (From, To, Route, Record-Route, Contact;
//! RFC 3261 20.10, 25.1).

use std::ops::Range;

use crate::lex::{self, quoted_end, skip_lws, take_while, Param};

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
    /// The value of the first `tag` parameter (`None` also for a bare
    /// `;tag`), taken in the same walk: From and To need it.
    pub(super) tag: Option<Range<usize>>,
}

/// Parses `[display-name] <uri> *(;param)` or `addr-spec *(;param)`.
/// In the addr-spec form the URI ends at the first `;` or whitespace: its
/// parameters belong to the header (RFC 3261 20.10).
pub(super) fn parse_name_addr(buf: &[u8], range: Range<usize>) -> Option<NameAddrParts> {
    let mut tag = None;
    let mut seen = false;
    let (uri, params) = walk_name_addr(buf, range, |p| {
        if !seen && lex::name_is(buf, &p.name, b"tag") {
            seen = true;
            tag = p.value;
        }
    })?;
    Some(NameAddrParts { uri, params, tag })
}

/// [`parse_name_addr`] handing each header parameter to `on_param`; the
/// URI and the parameters' range.
fn walk_name_addr(
    buf: &[u8],
    range: Range<usize>,
    on_param: impl FnMut(Param),
) -> Option<(Range<usize>, Range<usize>)> {
    // Cut at the end once: `i < end` below then proves `b[i]`.
    let b = buf.get(..range.end).unwrap_or(buf);
    let end = b.len();
    let p = skip_lws(b, range.start, end);
    let lt = match b.get(p) {
        Some(b'"') => {
            let q = skip_lws(b, quoted_end(b, p, end)?, end);
            (q < end && b[q] == b'<').then_some(q)?
        }
        _ => {
            // An unquoted display name is tokens and whitespace only
            // (RFC 4475 baddn: `Bell, Alexander <...>` is invalid): the
            // first other byte is the `<` or starts an addr-spec, unless a
            // `<` follows after all.
            let mut i = p;
            while i < end && DISPLAY[usize::from(b[i])] {
                i += 1;
            }
            if i < end && b[i] == b'<' {
                i
            } else if memchr::memchr(b'<', b.get(i..)?).is_some() {
                return None;
            } else {
                let uri_end = take_while(b, p, end, |c| !lex::is_lws(c) && c != b';');
                let uri = p..uri_end;
                if !is_uri(b.get(uri.clone())?) {
                    return None;
                }
                lex::walk_params(b, uri_end..end, on_param)?;
                return Some((uri, uri_end..end));
            }
        }
    };
    // To the `>`, refusing whitespace on the way (RFC 4475 badaspec: no
    // whitespace inside <>); the URI must have its scheme's colon.
    let uri_start = lt + 1;
    let mut gt = lex::skip_plain(b, uri_start, b'>');
    loop {
        match *b.get(gt)? {
            b'>' => break,
            c if lex::is_lws(c) => return None,
            _ => gt += 1,
        }
    }
    if !b.get(uri_start..gt)?.contains(&b':') {
        return None;
    }
    let params = gt + 1..end;
    lex::walk_params(b, params.clone(), on_param)?;
    Some((uri_start..gt, params))
}

/// Bytes of an unquoted display name: token characters and whitespace.
const DISPLAY: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = lex::is_token(i as u8) || lex::is_lws(i as u8);
        i += 1;
    }
    t
};

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
    // The first `expires`, in the walk that checks the parameters.
    let mut expires = None;
    let (uri, _) = walk_name_addr(buf, range.clone(), |p| {
        if expires.is_none() && lex::name_is(buf, &p.name, b"expires") {
            expires = Some(p.value);
        }
    })?;
    let expires = match expires {
        Some(v) => Some(parse_delta(buf.get(v?)?)?),
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
