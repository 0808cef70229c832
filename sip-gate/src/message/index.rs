//! The header index a scan builds: every header line from the start line
//! to the empty line, found in one walk, with each name's first line, the
//! counts `validate` checks and Content-Length read on the way.

use std::cell::Cell;
use std::ops::Range;

use crate::lex::{self, ContentLength};

use super::{note, HeaderField, HeaderName, ParseError};

/// Header lines a message is expected to have at most: the vector of lines
/// is allocated once at this size (then lent from message to message on a
/// thread, [`HEADERS`]), and grows only for longer messages.
const USUAL_HEADERS: usize = 16;

thread_local! {
    /// A vector of header lines given back by the last message dropped on
    /// this thread, for the next one to index into: the line index of a
    /// message costs no allocation once a worker has handled one.
    static HEADERS: Cell<Vec<HeaderField>> = const { Cell::new(Vec::new()) };
}

/// Lends a dropped message's vector of lines to the next message on this
/// thread; a message with many lines leaves no outsized vector behind.
pub(super) fn give_back(mut headers: Vec<HeaderField>) {
    if headers.capacity() <= 4 * USUAL_HEADERS {
        headers.clear();
        HEADERS.set(headers);
    }
}

/// Whether the header section holds a NUL that no backslash escapes. The
/// grammar allows a NUL only as a quoted-pair (RFC 3261 25.1; RFC 4475
/// 3.1.1.2 sends one); a bare one is a malformed header. The instances
/// behind the gate are C stacks that end a string at a NUL, so forwarding
/// one would let a header read differently to them than to the gate
/// (R-FT-3). Bodies may hold any byte.
pub(super) fn bare_nul(head: &[u8]) -> bool {
    memchr::memchr_iter(0, head).any(|i| {
        let slashes = head
            .get(..i)
            .unwrap_or_default()
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        slashes % 2 == 0
    })
}

/// What [`index_headers`] found.
pub(super) struct Index {
    pub(super) headers: Vec<HeaderField>,
    pub(super) first: [u16; NAMES],
    pub(super) counts: [u8; 5],
    /// Some line was malformed.
    pub(super) bad_header: bool,
    pub(super) content_length: ContentLength,
    pub(super) head: lex::HeadEnd,
}

/// Header names [`SipMessage::first_field`] indexes: every one.
pub(super) const NAMES: usize = HeaderName::Other as usize + 1;
/// No such line (or one past what a `u16` counts).
pub(super) const NO_LINE: u16 = u16::MAX;

/// The header lines from `from` to the empty line, indexed in the walk that
/// finds it, with Content-Length read on the way, each name's first line
/// and the counts `validate` checks noted.
pub(super) fn index_headers(buf: &[u8], from: usize) -> Result<Index, ParseError> {
    let mut headers = HEADERS.take();
    headers.reserve(USUAL_HEADERS);
    let mut first = [NO_LINE; NAMES];
    let mut counts = [0u8; 5];
    let mut bad_header = false;
    let mut content_length = ContentLength::Absent;
    let mut lines = lex::header_lines_open(buf, from);
    while let Some((h, known)) = lines.next_named(HeaderName::known) {
        let name = if h.well_formed {
            known.unwrap_or(HeaderName::Other)
        } else {
            bad_header = true;
            HeaderName::Other
        };
        match name {
            HeaderName::ContentLength => {
                content_length = content_length.and(buf.get(h.value.clone()).unwrap_or_default());
            }
            HeaderName::Via => counts[0] = counts[0].saturating_add(1),
            HeaderName::From => counts[1] = counts[1].saturating_add(1),
            HeaderName::To => counts[2] = counts[2].saturating_add(1),
            HeaderName::CallId => counts[3] = counts[3].saturating_add(1),
            HeaderName::CSeq => counts[4] = counts[4].saturating_add(1),
            _ => {}
        }
        if let Some(slot) = first.get_mut(name as usize) {
            if *slot == NO_LINE {
                *slot = u16::try_from(headers.len()).unwrap_or(NO_LINE);
            }
        }
        headers.push(HeaderField {
            name,
            name_range: h.name,
            line: h.line,
            value: h.value,
        });
    }
    let head = lines.head_end().ok_or(ParseError::Unterminated)?;
    Ok(Index {
        headers,
        first,
        counts,
        bad_header,
        content_length,
        head,
    })
}

/// The body's bytes per Content-Length (the rest of the buffer without one),
/// noting a bad or short one as the message's defect.
pub(super) fn body_range(
    content_length: ContentLength,
    body_start: usize,
    len: usize,
    defect: &mut Option<ParseError>,
) -> Range<usize> {
    match content_length {
        ContentLength::Absent => body_start..len,
        ContentLength::Bad | ContentLength::Conflicting => {
            note(defect, ParseError::BadContentLength);
            body_start..len
        }
        ContentLength::Value(n) => match body_start.checked_add(n) {
            Some(end) if end <= len => body_start..end,
            _ => {
                note(defect, ParseError::BodyTooShort);
                body_start..len
            }
        },
    }
}
