//! Header lines: where the header section ends, and the logical lines
//! (folds included) with their names and values, for the framing and the
//! message view alike.

use std::ops::Range;

use super::{first_lane, is_lws, is_token, lanes_equal, trim};

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
    let end = range.end.min(buf.len());
    HeaderLines {
        buf: buf.get(..end).unwrap_or_default(),
        pos: range.start,
        open: false,
        head: None,
    }
}

/// [`header_lines`] from the first header line at `start` to the empty line
/// [`find_head_end`] would find, in the same walk: [`HeaderLines::head_end`]
/// then tells where it was (`None`: there was none).
pub(crate) fn header_lines_open(buf: &[u8], start: usize) -> HeaderLines<'_> {
    HeaderLines {
        buf,
        pos: start,
        open: true,
        head: None,
    }
}

/// Iterator returned by [`header_lines`] and [`header_lines_open`].
pub(crate) struct HeaderLines<'a> {
    /// The buffer cut at the end of the walk, so its length bounds every line.
    buf: &'a [u8],
    pos: usize,
    /// Stops at the first empty line and notes it in `head`.
    open: bool,
    head: Option<HeadEnd>,
}

impl Iterator for HeaderLines<'_> {
    type Item = RawHeader;

    fn next(&mut self) -> Option<RawHeader> {
        self.next_named(|_| None::<()>).map(|(h, _)| h)
    }
}

impl HeaderLines<'_> {
    /// The next line, as [`Iterator::next`] gives it, with what `known`
    /// says of its name when the line is well formed. `known` may answer
    /// `Some` only for a name made of token bytes: the walk then skips its
    /// own check of them.
    #[inline]
    pub(crate) fn next_named<K>(
        &mut self,
        known: impl Fn(&[u8]) -> Option<K>,
    ) -> Option<(RawHeader, Option<K>)> {
        let buf = self.buf;
        let start = self.pos;
        let rest = buf.get(start..).filter(|r| !r.is_empty())?;
        if self.open {
            // Every line start follows a LF: an empty line here is the one
            // `find_head_end` looks for.
            let terminator = match rest {
                [b'\n', ..] => 1,
                [b'\r', b'\n', ..] => 2,
                _ => 0,
            };
            if terminator > 0 {
                self.head = Some(HeadEnd {
                    header_end: start,
                    body_start: start + terminator,
                });
                self.pos = buf.len();
                return None;
            }
        }
        let Some((name_len, colon, kind)) = name_and_colon(rest, &known) else {
            let line = odd_line(buf, start);
            self.pos = line.line.end;
            // Such a line can still be well formed (`Via\r: x`).
            let kind = line
                .well_formed
                .then(|| known(buf.get(line.name.clone()).unwrap_or_default()))
                .flatten();
            return Some((line, kind));
        };
        // The name and the gap hold no LF, so the line end is searched from
        // the colon on.
        let value_start = start + colon + 1;
        let end = logical_end(buf, value_start);
        self.pos = end;
        let line = RawHeader {
            line: start..end,
            name: start..start + name_len,
            value: trim_value(buf, value_start, end),
            well_formed: true,
        };
        Some((line, kind))
    }

    /// Where the walk of [`header_lines_open`] found the empty line.
    pub(crate) fn head_end(&self) -> Option<HeadEnd> {
        self.head
    }
}

/// A line that is not `Token: value` (no colon, whitespace or other bytes
/// before it, or no name at all) starting at `start`.
#[cold]
fn odd_line(buf: &[u8], start: usize) -> RawHeader {
    let end = logical_end(buf, start);
    let first = buf.get(start..line_end(buf, start)).unwrap_or_default();
    let Some(colon) = memchr::memchr(b':', first) else {
        return RawHeader {
            line: start..end,
            name: start..start,
            value: start..start,
            well_formed: false,
        };
    };
    let colon = start + colon;
    let name = trim(buf, start..colon);
    // A first header line that starts with whitespace would be a fold of
    // the start line, which RFC 3261 does not allow.
    let name_ok = !name.is_empty()
        && name.start == start
        && buf
            .get(name.clone())
            .is_some_and(|n| n.iter().all(|&b| is_token(b)));
    RawHeader {
        line: start..end,
        name,
        value: trim(buf, colon + 1..end),
        well_formed: name_ok,
    }
}

/// End of the logical line holding `from`: after the LF of its last
/// physical line (folds, lines starting with SP or HT, included).
#[inline]
fn logical_end(buf: &[u8], from: usize) -> usize {
    let mut end = line_end(buf, from);
    while matches!(buf.get(end), Some(b' ' | b'\t')) {
        end = line_end(buf, end);
    }
    end
}

/// End (exclusive, after the LF) of the physical line holding `from`.
#[inline]
fn line_end(buf: &[u8], from: usize) -> usize {
    let rest = buf.get(from..).unwrap_or_default();
    match memchr::memchr(b'\n', rest) {
        Some(i) => from + i + 1,
        None => buf.len(),
    }
}

/// The value of a header line: `buf[from..end]` without leading and
/// trailing whitespace, as [`trim`] gives it; the usual line end (CRLF) is
/// dropped before the byte-by-byte walk back.
#[inline]
fn trim_value(buf: &[u8], from: usize, end: usize) -> Range<usize> {
    let bytes = buf.get(from..end).unwrap_or_default();
    let Some(lead) = bytes.iter().position(|&b| !is_lws(b)) else {
        return from..from;
    };
    let mut value = bytes.get(lead..).unwrap_or_default();
    if let [v @ .., b'\r', b'\n'] = value {
        value = v;
    }
    while let [v @ .., b' ' | b'\t' | b'\r' | b'\n'] = value {
        value = v;
    }
    from + lead..from + lead + value.len()
}

/// The usual line, `Token: value` or `Token : value`: the name's length,
/// the colon's offset in `rest`, and what `known` says of the name; `None`
/// for any other line. The colon is looked for a word at a time within the
/// first [`NAME_WINDOW`] bytes (a colon there past the first line end leaves
/// a name with a LF, which is no token); a longer name is walked byte by
/// byte, so no line costs more than its own length.
#[inline]
fn name_and_colon<K>(
    rest: &[u8],
    known: impl Fn(&[u8]) -> Option<K>,
) -> Option<(usize, usize, Option<K>)> {
    let colon = match colon_within_window(rest) {
        Some(colon) => colon,
        None => {
            let name_len = rest
                .iter()
                .position(|&b| !is_token(b))
                .unwrap_or(rest.len());
            let mut colon = name_len;
            while matches!(rest.get(colon), Some(b' ' | b'\t')) {
                colon += 1;
            }
            if name_len == 0 || rest.get(colon) != Some(&b':') {
                return None;
            }
            let kind = known(rest.get(..name_len)?);
            return Some((name_len, colon, kind));
        }
    };
    let mut name = rest.get(..colon)?;
    while let [head @ .., b' ' | b'\t'] = name {
        name = head;
    }
    if name.is_empty() {
        return None;
    }
    let kind = known(name);
    if kind.is_none() && !name.iter().all(|&b| is_token(b)) {
        return None;
    }
    Some((name.len(), colon, kind))
}

/// Bytes [`name_and_colon`] searches a word at a time: the longest known
/// header name (19 bytes) and its colon fit.
const NAME_WINDOW: usize = 24;

/// Offset of the first `:` within the first [`NAME_WINDOW`] bytes of
/// `rest`, eight at a time; `None` if there is none there or `rest` ends
/// before a word is complete.
#[inline]
fn colon_within_window(rest: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at < NAME_WINDOW {
        let word = <[u8; 8]>::try_from(rest.get(at..at + 8)?).ok()?;
        if let Some(i) = first_lane(lanes_equal(u64::from_le_bytes(word), b':')) {
            return Some(at + i);
        }
        at += 8;
    }
    None
}
