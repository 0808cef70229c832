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
    if text.len() >= 4
        && text
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"SIP/"))
    {
        let sp = memchr::memchr(b' ', text).ok_or(ParseError::BadStatusLine)?;
        let version = text.get(..sp).unwrap_or_default();
        let rest = text.get(sp.saturating_add(1)..).unwrap_or_default();
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
        if !version.eq_ignore_ascii_case(b"SIP/2.0") {
            note(defect, ParseError::UnsupportedVersion);
        }
        return Ok((StartLine::Response { code }, line.start..line.start));
    }

    let method_len = text.iter().position(|&b| b == b' ').unwrap_or(text.len());
    let method_tok = text.get(..method_len).unwrap_or_default();
    if method_tok.is_empty() || !method_tok.iter().all(|&b| lex::is_token(b)) {
        return Err(ParseError::BadRequestLine);
    }
    let method = line.start..line.start.saturating_add(method_len);
    let rest_start = method_len.saturating_add(1);
    let rest = text.get(rest_start..).unwrap_or_default();
    let (uri_rel, version) = match memchr::memrchr(b' ', rest) {
        Some(sp) => (
            rest_start..rest_start.saturating_add(sp),
            rest.get(sp.saturating_add(1)..).unwrap_or_default(),
        ),
        None => {
            note(defect, ParseError::BadRequestLine);
            (rest_start.min(text.len())..text.len(), &b""[..])
        }
    };
    let uri_bytes = text.get(uri_rel.clone()).unwrap_or_default();
    if !valid_request_uri(uri_bytes) {
        note(defect, ParseError::BadRequestLine);
    }
    if !version.eq_ignore_ascii_case(b"SIP/2.0") {
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
    let uri = line.start.saturating_add(uri_rel.start)..line.start.saturating_add(uri_rel.end);
    Ok((
        StartLine::Request {
            method: Method::from_token(method_tok),
            uri,
        },
        method,
    ))
}

/// `scheme ":" rest` with no whitespace or control bytes: catches
/// `<sip:...>` and embedded LWS (RFC 4475 ltgtruri, lwsruri, lwsstart)
/// without judging the URI's own grammar, which the proxy never needs.
pub(super) fn valid_request_uri(uri: &[u8]) -> bool {
    let Some(colon) = memchr::memchr(b':', uri) else {
        return false;
    };
    let scheme = uri.get(..colon).unwrap_or_default();
    let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    scheme_ok && uri.iter().all(|&b| b > b' ' && b != 0x7f)
}
