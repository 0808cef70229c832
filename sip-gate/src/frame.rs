//! Stream framing of SIP messages (RFC 3261 18.3) and CRLF keep-alives
//! (RFC 5626 3.5.1).
//!
//! [`check`] answers "is there a complete frame at the start of this buffer,
//! and how long is it" without allocating or copying, in the manner of
//! mini-redis `Frame::check`: the connection reads into a buffer, calls
//! `check`, and splits off `len` bytes when it gets a frame. Parsing the
//! message itself is [`crate::message::SipMessage::parse`]'s job.
//!
//! The line-level lexer under it (end of the header section, header lines
//! with folding, `Content-Length` values) is [`crate::lex`], which the message
//! view uses too, so framing and parsing never disagree on where a message
//! ends.

use thiserror::Error;

use crate::lex::{content_length, find_head_end, ContentLength};

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
}
