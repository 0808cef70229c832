//! The start line: a Request-Line or a Status-Line (RFC 3261 7.1, 7.2).

use std::ops::Range;

use crate::lex;

use super::{note, Method, ParseError};

/// The first line of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartLine {
    /// `Method SP Request-URI SP SIP/2.0`
    Request {
        /// The classified method (see [`SipMessage::method_bytes`] for `Other`).
        method: Method,
        /// The Request-URI in the raw bytes.
        uri: Range<usize>,
    },
    /// `SIP/2.0 SP code SP reason`
    Response {
        /// The status code, 100..=699.
        code: u16,
    },
}

/// Parses the start line in `buf[line]` (no line end). Fatal only when the
/// line is neither a status line nor starts with a method token.
pub(super) fn parse_start_line(
    buf: &[u8],
    line: Range<usize>,
    defect: &mut Option<ParseError>,
) -> Result<(StartLine, Range<usize>), ParseError> {
    let text = buf.get(line.clone()).unwrap_or_default();
    if text.starts_with(b"SIP/2.0 ")
        || text
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"SIP/"))
    {
        return parse_status_line(text, defect)
            .map(|code| (StartLine::Response { code }, line.start..line.start));
    }

    // The method is the token before the first SP: the first byte that is
    // no token must be that SP (or the line end).
    let method_len = text
        .iter()
        .position(|&b| !lex::is_token(b))
        .unwrap_or(text.len());
    if method_len == 0 || !matches!(text.get(method_len), None | Some(b' ')) {
        return Err(ParseError::BadRequestLine);
    }
    let method_tok = text.get(..method_len).unwrap_or_default();
    let method = line.start..line.start + method_len;
    let rest_start = method_len + 1;
    let rest = text.get(rest_start..).unwrap_or_default();
    // The version follows the last SP; the usual one is checked as a suffix
    // (it holds no SP, so that SP is the last one).
    let (uri_rel, version) = match rest.strip_suffix(b" SIP/2.0") {
        Some(uri) => (rest_start..rest_start + uri.len(), None),
        None => match memchr::memrchr(b' ', rest) {
            Some(sp) => (
                rest_start..rest_start + sp,
                Some(rest.get(sp + 1..).unwrap_or_default()),
            ),
            None => {
                note(defect, ParseError::BadRequestLine);
                (rest_start.min(text.len())..text.len(), Some(&b""[..]))
            }
        },
    };
    let uri_bytes = text.get(uri_rel.clone()).unwrap_or_default();
    if !valid_request_uri(uri_bytes) {
        note(defect, ParseError::BadRequestLine);
    }
    // `None`: the usual version, already matched.
    if let Some(version) = version.filter(|v| !v.eq_ignore_ascii_case(b"SIP/2.0")) {
        let looks_like_sip = version
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"SIP/"));
        note(
            defect,
            if looks_like_sip {
                ParseError::UnsupportedVersion
            } else {
                ParseError::BadRequestLine
            },
        );
    }
    let uri = line.start + uri_rel.start..line.start + uri_rel.end;
    Ok((
        StartLine::Request {
            method: Method::from_token(method_tok),
            uri,
        },
        method,
    ))
}

/// The status code of a line starting with `SIP/` (any case).
fn parse_status_line(text: &[u8], defect: &mut Option<ParseError>) -> Result<u16, ParseError> {
    // The usual version needs no search for the SP after it (`None`).
    let (version, rest) = match text.strip_prefix(b"SIP/2.0 ") {
        Some(rest) => (None, rest),
        None => {
            let sp = memchr::memchr(b' ', text).ok_or(ParseError::BadStatusLine)?;
            (
                Some(text.get(..sp).unwrap_or_default()),
                text.get(sp + 1..).unwrap_or_default(),
            )
        }
    };
    let digits = rest.get(..3).ok_or(ParseError::BadStatusLine)?;
    let code = lex::parse_decimal(digits)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (100..=699).contains(c))
        .ok_or(ParseError::BadStatusLine)?;
    // The code is exactly three digits, then SP and any reason phrase
    // (possibly empty, RFC 4475 noreason), or nothing at all.
    if !matches!(rest.get(3), None | Some(b' ')) {
        return Err(ParseError::BadStatusLine);
    }
    if version.is_some_and(|v| !v.eq_ignore_ascii_case(b"SIP/2.0")) {
        note(defect, ParseError::UnsupportedVersion);
    }
    Ok(code)
}

/// `scheme ":" rest` with no whitespace or control bytes: catches
/// `<sip:...>` and embedded LWS (RFC 4475 ltgtruri, lwsruri, lwsstart)
/// without judging the URI's own grammar, which the proxy never needs.
pub(super) fn valid_request_uri(uri: &[u8]) -> bool {
    // The scheme runs up to the first byte no scheme has, which must be the
    // first colon.
    let scheme_len = uri
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))
        .unwrap_or(uri.len());
    uri.first().is_some_and(u8::is_ascii_alphabetic)
        && uri.get(scheme_len) == Some(&b':')
        && !has_space_or_control(uri)
}

/// Whether any byte is at most SP or is DEL, eight bytes at a time up to
/// the last seven ([`lex::skip_plain`]), which are looked at one by one.
fn has_space_or_control(bytes: &[u8]) -> bool {
    let from = lex::skip_plain(bytes, 0, 0x7f);
    bytes
        .get(from..)
        .unwrap_or_default()
        .iter()
        .any(|&b| b <= b' ' || b == 0x7f)
}

#[cfg(test)]
mod tests {
    use super::{has_space_or_control, valid_request_uri};

    /// The word-at-a-time check finds every byte the bytewise one does, at
    /// every offset, and nothing else.
    #[test]
    fn space_and_control_bytes_are_found_at_every_offset() {
        for b in 0..=255u8 {
            let bad = b <= b' ' || b == 0x7f;
            for len in 1..20 {
                for at in 0..len {
                    let mut v = vec![b'a'; len];
                    v[at] = b;
                    assert_eq!(has_space_or_control(&v), bad, "{b} at {at} of {len}");
                    // Bytes above DEL next to it must not hide or fake one.
                    let mut hi = vec![0xffu8; len];
                    hi[at] = b;
                    assert_eq!(
                        has_space_or_control(&hi),
                        bad,
                        "{b} at {at} of {len}, 0xff around"
                    );
                }
            }
        }
        assert!(!has_space_or_control(b""));
    }

    #[test]
    fn request_uri_needs_a_scheme_and_a_colon_and_no_whitespace() {
        for ok in [
            &b"sip:a@b"[..],
            b"sips:x",
            b"tel:+1",
            b"a+b-c.d:x",
            b"SIP:A",
        ] {
            assert!(valid_request_uri(ok), "{ok:?}");
        }
        for bad in [
            &b""[..],
            b":x",
            b"sip",
            b"1sip:x",
            b"<sip:a>",
            b"sip :a",
            b"s_p:a",
            b"sip:a b",
            b"sip:a\x7f",
            b"sip:a\tb",
        ] {
            assert!(!valid_request_uri(bad), "{bad:?}");
        }
    }
}
