//! Stream framing of SIP messages (RFC 3261 18.3) and CRLF keep-alives
//! (RFC 5626 3.5.1).
//!
//! [`check`] answers "is there a complete frame at the start of this buffer,
//! and how long is it" without allocating or copying, in the manner of
//! mini-redis `Frame::check`: the connection reads into a buffer, calls
//! `check`, and splits off `len` bytes when it gets a frame. Parsing the
//! message itself is [`crate::message::SipMessage::parse`]'s job.
//!
//! This module also holds the line-level lexer (end of the header section,
//! header lines with folding, `Content-Length` values) that the message view
//! reuses, so that framing and parsing can never disagree on where a message
//! ends.

use std::ops::Range;

use thiserror::Error;

/// One complete unit at the start of a stream buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A CRLF keep-alive (RFC 5626 3.5.1). `ping` is true for a double CRLF,
    /// which the caller answers with a single CRLF pong; a single CRLF is a
    /// pong (or noise) and is only consumed.
    KeepAlive {
        /// Bytes to consume from the buffer.
        len: usize,
        /// Whether the peer expects a pong.
        ping: bool,
    },
    /// A complete SIP message: start line, headers, empty line and exactly
    /// `Content-Length` bytes of body.
    Message {
        /// Bytes to consume from the buffer (the whole message).
        len: usize,
    },
}

/// Why a stream buffer cannot be framed. Every variant is fatal for the
/// connection: after a framing error the stream position is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The header section has no terminator within `max_len` bytes, or the
    /// header section plus the announced body exceeds `max_len`.
    #[error("message larger than {limit} bytes")]
    TooLarge {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// No `Content-Length` header: on a stream it is mandatory
    /// (RFC 3261 18.3), without it the end of the body is unknowable.
    #[error("missing Content-Length on a stream transport")]
    MissingContentLength,
    /// `Content-Length` is empty, negative or not a number.
    #[error("bad Content-Length")]
    BadContentLength,
    /// Several `Content-Length` headers disagree; picking one would let a
    /// peer smuggle a message past whoever picked the other.
    #[error("conflicting Content-Length headers")]
    ConflictingContentLength,
}

/// Checks whether `buf` starts with a complete frame.
///
/// Returns `Ok(None)` when more bytes are needed, `Ok(Some(frame))` when the
/// first `frame.len()` bytes form one keep-alive or one message, and an error
/// when the stream can never be framed (the caller closes the connection).
/// `max_len` bounds the whole message, header section included.
///
/// A buffer holding exactly `"\r\n"` or `"\r\n\r"` needs more bytes: it may
/// be the start of a ping, and consuming it as a pong would lose the ping.
pub fn check(buf: &[u8], max_len: usize) -> Result<Option<Frame>, FrameError> {
    if buf.starts_with(b"\r\n") {
        return Ok(match buf.get(2..4) {
            Some(b"\r\n") => Some(Frame::KeepAlive { len: 4, ping: true }),
            Some(_) => Some(Frame::KeepAlive {
                len: 2,
                ping: false,
            }),
            // "\r\n\r" is still ambiguous; "\r\n" followed by a single other
            // byte is not.
            None => match buf.get(2) {
                Some(b'\r') | None => None,
                Some(_) => Some(Frame::KeepAlive {
                    len: 2,
                    ping: false,
                }),
            },
        });
    }
    let Some(head) = find_head_end(buf) else {
        return if buf.len() > max_len {
            Err(FrameError::TooLarge { limit: max_len })
        } else {
            Ok(None)
        };
    };
    if head.body_start > max_len {
        return Err(FrameError::TooLarge { limit: max_len });
    }
    let first_header = match memchr::memchr(b'\n', buf) {
        Some(nl) => nl.saturating_add(1),
        None => head.header_end,
    };
    let content_length = match content_length(buf, first_header..head.header_end) {
        ContentLength::Absent => return Err(FrameError::MissingContentLength),
        ContentLength::Bad => return Err(FrameError::BadContentLength),
        ContentLength::Conflicting => return Err(FrameError::ConflictingContentLength),
        ContentLength::Value(n) => n,
    };
    let len = match head.body_start.checked_add(content_length) {
        Some(len) if len <= max_len => len,
        _ => return Err(FrameError::TooLarge { limit: max_len }),
    };
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some(Frame::Message { len }))
}

impl Frame {
    /// Number of bytes this frame occupies at the start of the buffer.
    pub fn len(&self) -> usize {
        match *self {
            Frame::KeepAlive { len, .. } | Frame::Message { len } => len,
        }
    }

    /// Always false: a frame has at least two bytes. Present because
    /// `len` without `is_empty` surprises readers (and clippy).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// === line lexer shared with the message view ===

/// Where the header section of a message ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadEnd {
    /// Offset of the empty line: new headers are inserted here.
    pub header_end: usize,
    /// Offset of the first body byte (after the empty line).
    pub body_start: usize,
}

/// Finds the first empty line. CRLF CRLF is the standard terminator; a bare
/// LF line ending is accepted too, because some peers send them and the
/// byte-for-byte forwarding does not care.
pub(crate) fn find_head_end(buf: &[u8]) -> Option<HeadEnd> {
    for nl in memchr::memchr_iter(b'\n', buf) {
        let next = nl.checked_add(1)?;
        match buf.get(next) {
            Some(b'\n') => {
                return Some(HeadEnd {
                    header_end: next,
                    body_start: next.checked_add(1)?,
                })
            }
            Some(b'\r') if buf.get(next.checked_add(1)?) == Some(&b'\n') => {
                return Some(HeadEnd {
                    header_end: next,
                    body_start: next.checked_add(2)?,
                })
            }
            _ => {}
        }
    }
    None
}

/// One logical header line as found by [`header_lines`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawHeader {
    /// The whole line including folded continuations and the final line end.
    pub line: Range<usize>,
    /// The header name without surrounding whitespace; empty when the line
    /// has no colon or an invalid name (the caller reports it).
    pub name: Range<usize>,
    /// The value with leading and trailing whitespace (and line ends) removed.
    pub value: Range<usize>,
    /// False when the line has no colon or the name is not a token.
    pub well_formed: bool,
}

/// Iterates the logical header lines of `buf[range]`. `range` must start at
/// the first header line and end at the empty line (as given by
/// [`find_head_end`]); lines beginning with SP or HT are folded into the
/// previous one.
pub(crate) fn header_lines(buf: &[u8], range: Range<usize>) -> HeaderLines<'_> {
    HeaderLines {
        buf,
        pos: range.start,
        end: range.end.min(buf.len()),
    }
}

/// Iterator returned by [`header_lines`].
pub(crate) struct HeaderLines<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

impl Iterator for HeaderLines<'_> {
    type Item = RawHeader;

    fn next(&mut self) -> Option<RawHeader> {
        if self.pos >= self.end {
            return None;
        }
        let start = self.pos;
        let first_end = self.line_end(start);
        let mut end = first_end;
        while end < self.end && matches!(self.buf.get(end), Some(b' ' | b'\t')) {
            end = self.line_end(end);
        }
        self.pos = end;

        let first = self.buf.get(start..first_end).unwrap_or_default();
        let Some(colon) = memchr::memchr(b':', first) else {
            return Some(RawHeader {
                line: start..end,
                name: start..start,
                value: start..start,
                well_formed: false,
            });
        };
        let colon = start.saturating_add(colon);
        let name = trim(self.buf, start..colon);
        // A first header line that starts with whitespace would be a fold of
        // the start line, which RFC 3261 does not allow.
        let name_ok = !name.is_empty()
            && name.start == start
            && self
                .buf
                .get(name.clone())
                .is_some_and(|n| n.iter().all(|&b| is_token(b)));
        let value = trim(self.buf, colon.saturating_add(1)..end);
        Some(RawHeader {
            line: start..end,
            name,
            value,
            well_formed: name_ok,
        })
    }
}

impl HeaderLines<'_> {
    /// End (exclusive, after the LF) of the physical line starting at `from`.
    fn line_end(&self, from: usize) -> usize {
        let rest = self.buf.get(from..self.end).unwrap_or_default();
        match memchr::memchr(b'\n', rest) {
            Some(i) => from.saturating_add(i).saturating_add(1),
            None => self.end,
        }
    }
}

/// Linear whitespace as it may appear inside a (possibly folded) value.
pub(crate) fn is_lws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// RFC 3261 `token` characters.
pub(crate) fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.' | b'!' | b'%' | b'*' | b'_' | b'+' | b'`' | b'\'' | b'~'
        )
}

/// Shrinks `range` so it neither starts nor ends with whitespace.
pub(crate) fn trim(buf: &[u8], range: Range<usize>) -> Range<usize> {
    let Some(bytes) = buf.get(range.clone()) else {
        return range.start..range.start;
    };
    let Some(first) = bytes.iter().position(|&b| !is_lws(b)) else {
        return range.start..range.start;
    };
    let last = bytes.iter().rposition(|&b| !is_lws(b)).unwrap_or(first);
    range.start.saturating_add(first)..range.start.saturating_add(last).saturating_add(1)
}

/// Parses an unsigned decimal made only of digits, `None` on anything else
/// or on overflow. Leading zeros are fine (RFC 4475 wsinv uses them).
pub(crate) fn parse_decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// Outcome of looking for `Content-Length` in a header section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContentLength {
    /// No `Content-Length` / `l` header.
    Absent,
    /// Present but not a non-negative decimal that fits in `usize`.
    Bad,
    /// Present several times with different values.
    Conflicting,
    /// The announced body length.
    Value(usize),
}

/// Whether a header name is `Content-Length` or its compact form `l`.
pub(crate) fn is_content_length(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"content-length") || name.eq_ignore_ascii_case(b"l")
}

/// Reads `Content-Length` from the header lines in `buf[headers]`.
pub(crate) fn content_length(buf: &[u8], headers: Range<usize>) -> ContentLength {
    let mut found = ContentLength::Absent;
    for h in header_lines(buf, headers) {
        let name = buf.get(h.name.clone()).unwrap_or_default();
        if !h.well_formed || !is_content_length(name) {
            continue;
        }
        let value = buf.get(h.value.clone()).unwrap_or_default();
        let n = match parse_decimal(value).and_then(|n| usize::try_from(n).ok()) {
            Some(n) => n,
            None => return ContentLength::Bad,
        };
        found = match found {
            ContentLength::Value(prev) if prev != n => return ContentLength::Conflicting,
            _ => ContentLength::Value(n),
        };
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 64 * 1024;

    fn msg(body: &str) -> String {
        format!(
            "OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/TCP h;branch=z9hG4bK1\r\nContent-Length: {}\r\n\r\n{}",
            body.len(),
            body
        )
    }

    #[test]
    fn keepalives() {
        assert_eq!(
            check(b"\r\n\r\n", MAX),
            Ok(Some(Frame::KeepAlive { len: 4, ping: true }))
        );
        assert_eq!(
            check(b"\r\nINVITE", MAX),
            Ok(Some(Frame::KeepAlive {
                len: 2,
                ping: false
            }))
        );
        assert_eq!(
            check(b"\r\nI", MAX),
            Ok(Some(Frame::KeepAlive {
                len: 2,
                ping: false
            }))
        );
        assert_eq!(check(b"\r\n", MAX), Ok(None));
        assert_eq!(check(b"\r\n\r", MAX), Ok(None));
        assert_eq!(check(b"", MAX), Ok(None));
        assert_eq!(check(b"\r", MAX), Ok(None));
    }

    #[test]
    fn complete_message_and_body() {
        let m = msg("hello");
        assert_eq!(
            check(m.as_bytes(), MAX),
            Ok(Some(Frame::Message { len: m.len() }))
        );
        // Trailing bytes of the next message are not part of this frame.
        let two = format!("{m}{m}");
        assert_eq!(
            check(two.as_bytes(), MAX),
            Ok(Some(Frame::Message { len: m.len() }))
        );
    }

    #[test]
    fn byte_by_byte() {
        let m = msg("v=0\r\n\r\nbinary\0");
        for cut in 0..m.len() {
            assert_eq!(check(&m.as_bytes()[..cut], MAX), Ok(None), "cut at {cut}");
        }
        assert_eq!(
            check(m.as_bytes(), MAX),
            Ok(Some(Frame::Message { len: m.len() }))
        );
    }

    #[test]
    fn compact_and_odd_content_length() {
        let m = b"MESSAGE sip:a SIP/2.0\r\nL \t:  \r\n 3\r\n\r\nabcEXTRA";
        assert_eq!(check(m, MAX), Ok(Some(Frame::Message { len: m.len() - 5 })));
        let m = b"MESSAGE sip:a SIP/2.0\r\ncontent-LENGTH:0003\r\n\r\nabc";
        assert_eq!(check(m, MAX), Ok(Some(Frame::Message { len: m.len() })));
        // Lenient bare LF line endings.
        let m = b"MESSAGE sip:a SIP/2.0\nl: 2\n\nab";
        assert_eq!(check(m, MAX), Ok(Some(Frame::Message { len: m.len() })));
    }

    #[test]
    fn content_length_errors() {
        let bad = |cl: &str| {
            let m = format!("BYE sip:a SIP/2.0\r\nContent-Length: {cl}\r\n\r\n");
            check(m.as_bytes(), MAX)
        };
        assert_eq!(bad("-1"), Err(FrameError::BadContentLength));
        assert_eq!(bad("abc"), Err(FrameError::BadContentLength));
        assert_eq!(bad(""), Err(FrameError::BadContentLength));
        assert_eq!(bad("+5"), Err(FrameError::BadContentLength));
        assert_eq!(
            bad("99999999999999999999999999"),
            Err(FrameError::BadContentLength)
        );
        assert_eq!(bad("70000"), Err(FrameError::TooLarge { limit: MAX }));
        assert_eq!(
            bad(&usize::MAX.to_string()),
            Err(FrameError::TooLarge { limit: MAX })
        );
        assert_eq!(
            check(b"BYE sip:a SIP/2.0\r\nVia: x\r\n\r\n", MAX),
            Err(FrameError::MissingContentLength)
        );
        assert_eq!(
            check(b"BYE sip:a SIP/2.0\r\nl: 1\r\nl: 2\r\n\r\nab", MAX),
            Err(FrameError::ConflictingContentLength)
        );
        let same = b"BYE sip:a SIP/2.0\r\nl: 1\r\nContent-Length: 1\r\n\r\na";
        assert_eq!(
            check(same, MAX),
            Ok(Some(Frame::Message { len: same.len() }))
        );
    }

    #[test]
    fn header_section_too_large() {
        let big = vec![b'a'; 100];
        assert_eq!(check(&big, 99), Err(FrameError::TooLarge { limit: 99 }));
        assert_eq!(check(&big, 100), Ok(None));
        let m = msg("");
        assert_eq!(
            check(m.as_bytes(), 20),
            Err(FrameError::TooLarge { limit: 20 })
        );
    }

    #[test]
    fn lexer_folding_and_trim() {
        let m = b"X\r\nA :  one\r\n two \r\n\tthree\r\nbad line\r\nB:\r\n\r\n";
        let head = find_head_end(m).unwrap();
        let lines: Vec<_> = header_lines(m, 3..head.header_end).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(&m[lines[0].name.clone()], b"A");
        assert_eq!(&m[lines[0].value.clone()], b"one\r\n two \r\n\tthree");
        assert_eq!(
            &m[lines[0].line.clone()],
            b"A :  one\r\n two \r\n\tthree\r\n"
        );
        assert!(!lines[1].well_formed);
        assert!(lines[2].well_formed);
        assert!(lines[2].value.is_empty());
        let m = b"X\r\n Via: a\r\n\r\n";
        let lines: Vec<_> = header_lines(m, 3..m.len() - 2).collect();
        assert_eq!(lines.len(), 1);
        assert!(!lines[0].well_formed);
    }
}
