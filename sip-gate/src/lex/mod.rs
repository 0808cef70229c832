//! The byte-level lexer shared by stream framing ([`crate::frame`]) and the
//! message view ([`crate::message`]), so the two can never disagree on where
//! a message ends: the end of the header section, header lines with folding,
//! `Content-Length`, and inside values: whitespace, tokens, quoted strings,
//! comma lists and `;name=value` parameters.
//!
//! Every function works on a buffer and offsets into it, never copies, and
//! stays within the buffer whatever the offsets (out-of-range reads are
//! empty; arithmetic saturates, or adds offsets already within the buffer).

use std::ops::Range;

mod lines;

pub(crate) use lines::{find_head_end, header_lines, header_lines_open, HeadEnd};

/// Linear whitespace as it may appear inside a (possibly folded) value.
pub(crate) const fn is_lws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// RFC 3261 `token` characters, one table lookup (the lexer asks for every
/// byte of every name and parameter).
pub(crate) const fn is_token(b: u8) -> bool {
    TOKEN[b as usize]
}

const TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.' | b'!' | b'%' | b'*' | b'_' | b'+' | b'`' | b'\'' | b'~'
            );
        i += 1;
    }
    t
};

/// Shrinks `range` so it neither starts nor ends with whitespace.
#[inline]
pub(crate) fn trim(buf: &[u8], range: Range<usize>) -> Range<usize> {
    let Some(bytes) = buf.get(range.clone()) else {
        return range.start..range.start;
    };
    let Some(first) = bytes.iter().position(|&b| !is_lws(b)) else {
        return range.start..range.start;
    };
    let last = bytes.iter().rposition(|&b| !is_lws(b)).unwrap_or(first);
    // Both are below `bytes.len()`, so within `range`.
    range.start + first..range.start + last + 1
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
    content_length_of(
        buf,
        header_lines(buf, headers).filter_map(|h| {
            let name = buf.get(h.name.clone()).unwrap_or_default();
            (h.well_formed && is_content_length(name)).then_some(h.value)
        }),
    )
}

/// [`content_length`] from the values of the `Content-Length` lines, for a
/// caller that has already found them.
pub(crate) fn content_length_of(
    buf: &[u8],
    values: impl IntoIterator<Item = Range<usize>>,
) -> ContentLength {
    values.into_iter().fold(ContentLength::Absent, |found, v| {
        found.and(buf.get(v).unwrap_or_default())
    })
}

impl ContentLength {
    /// What the lines so far and one more `Content-Length` value add up to:
    /// the first bad or conflicting value decides for good.
    pub(crate) fn and(self, value: &[u8]) -> ContentLength {
        if matches!(self, ContentLength::Bad | ContentLength::Conflicting) {
            return self;
        }
        let Some(n) = parse_decimal(value).and_then(|n| usize::try_from(n).ok()) else {
            return ContentLength::Bad;
        };
        match self {
            ContentLength::Value(prev) if prev != n => ContentLength::Conflicting,
            _ => ContentLength::Value(n),
        }
    }
}

/// End of the run starting at `pos` (bounded by `end`) of bytes matching `f`.
pub(crate) fn take_while(buf: &[u8], pos: usize, end: usize, f: impl Fn(u8) -> bool) -> usize {
    let b = buf.get(..end).unwrap_or(buf);
    let mut p = pos;
    // `p < b.len()` proves every index in range; `pos` past the end stays.
    while p < b.len() && f(b[p]) {
        p += 1;
    }
    p
}

pub(crate) fn skip_lws(buf: &[u8], pos: usize, end: usize) -> usize {
    // Most calls land on a non-space byte: one comparison decides.
    match buf.get(pos) {
        Some(&c) if pos < end && is_lws(c) => take_while(buf, pos, end, is_lws),
        _ => pos,
    }
}

/// Given `buf[pos] == '"'`, the offset just after the closing quote;
/// backslash escapes any byte (RFC 3261 quoted-pair, NUL included).
pub(crate) fn quoted_end(buf: &[u8], pos: usize, end: usize) -> Option<usize> {
    let b = buf.get(..end).unwrap_or(buf);
    let mut p = pos.checked_add(1)?;
    while p < b.len() {
        match b[p] {
            b'\\' => p += 2,
            b'"' => return Some(p + 1),
            _ => p += 1,
        }
    }
    None
}

/// The elements of a list value ([`list_elements`]) collected.
#[cfg(test)]
pub(crate) fn split_list(buf: &[u8], value: Range<usize>) -> Option<Vec<Range<usize>>> {
    let mut out = Vec::new();
    for_each_element(buf, value, |e| out.push(e))?;
    Some(out)
}

/// The elements of a list value split on top-level commas. Quoted strings
/// (with `\"` escapes) and `<...>` protect their commas; elements are
/// trimmed and empty ones dropped (RFC 3261 7.3.1 allows null list
/// elements). `None` when a quote or angle bracket is left open. A value of
/// one element (nearly all of them) needs no vector.
pub(crate) fn list_elements(buf: &[u8], value: Range<usize>) -> Option<Elements> {
    let end = value.end.min(buf.len());
    let bytes = buf.get(value.start..end).unwrap_or_default();
    // Without a quote, `<` or comma the value is one element (a `>` alone
    // changes nothing): most Via, Call-ID and CSeq values.
    if memchr::memchr3(b'"', b'<', b',', bytes).is_none() {
        let e = trim(buf, value.start..end);
        return Some(Elements::One((!e.is_empty()).then_some(e)));
    }
    // The first element apart: a vector only when there is a second.
    let mut first = None;
    let mut rest = Vec::new();
    for_each_element(buf, value, |e| match first {
        None => first = Some(e),
        Some(_) => rest.push(e),
    })?;
    match first {
        Some(first) if !rest.is_empty() => {
            rest.insert(0, first);
            Some(Elements::Many(rest.into_iter()))
        }
        first => Some(Elements::One(first)),
    }
}
/// Iterator returned by [`list_elements`].
pub(crate) enum Elements {
    One(Option<Range<usize>>),
    Many(std::vec::IntoIter<Range<usize>>),
}

impl Iterator for Elements {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        match self {
            Elements::One(e) => e.take(),
            Elements::Many(it) => it.next(),
        }
    }
}

/// Hands each element of a list value to `f` ([`list_elements`]). Jumps
/// between the bytes that matter: outside `<>` a quote, `<` or comma (a
/// stray `>` changes nothing), inside it only the closing `>`.
fn for_each_element(
    buf: &[u8],
    value: Range<usize>,
    mut f: impl FnMut(Range<usize>),
) -> Option<()> {
    let end = value.end.min(buf.len());
    let mut elem_start = value.start;
    let mut p = value.start;
    let mut in_angle = false;
    while p < end {
        let rest = buf.get(p..end).unwrap_or_default();
        if in_angle {
            match memchr::memchr(b'>', rest) {
                Some(i) => {
                    in_angle = false;
                    p = p.saturating_add(i).saturating_add(1);
                    continue;
                }
                None => return None,
            }
        }
        let Some(i) = memchr::memchr3(b'"', b'<', b',', rest) else {
            break;
        };
        p = p.saturating_add(i);
        match buf.get(p)? {
            b'"' => {
                p = quoted_end(buf, p, end)?;
                continue;
            }
            b'<' => in_angle = true,
            _ => {
                let e = trim(buf, elem_start..p);
                if !e.is_empty() {
                    f(e);
                }
                elem_start = p.saturating_add(1);
            }
        }
        p = p.saturating_add(1);
    }
    if in_angle {
        return None;
    }
    let e = trim(buf, elem_start..end);
    if !e.is_empty() {
        f(e);
    }
    Some(())
}

/// Whether the token `buf[name]` is the token `want` in any case; the
/// length decides most mismatches before a byte is compared.
pub(crate) fn name_is(buf: &[u8], name: &Range<usize>, want: &[u8]) -> bool {
    name.len() == want.len()
        && buf.get(name.clone()).is_some_and(|n| {
            // Two token bytes that differ only in bit 0x20 are one letter in
            // both cases (the other such pairs, `@`/`` ` ``, `^`/`~` and
            // controls/punctuation, have a byte that is no token), so
            // setting that bit compares them as `eq_ignore_ascii_case` does.
            n.iter().zip(want).all(|(&a, &b)| a | 0x20 == b | 0x20)
        })
}

/// One `;name[=value]` parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Param {
    pub(crate) name: Range<usize>,
    pub(crate) value: Option<Range<usize>>,
    /// From the name to the end of the value (no `;`).
    pub(crate) whole: Range<usize>,
}

/// Walks `*(SWS ";" SWS name [SWS "=" SWS value])` up to `range.end`,
/// handing each parameter to `f`; `None` on anything else. Values are a
/// quoted string or a run of bytes other than whitespace and `;` (so IPv6
/// `received=[::1]` works). Allocates nothing.
pub(crate) fn walk_params(buf: &[u8], range: Range<usize>, mut f: impl FnMut(Param)) -> Option<()> {
    // Cut at the end once: every `p < b.len()` below then proves `b[p]`.
    let b = buf.get(..range.end).unwrap_or(buf);
    let mut p = skip_lws(b, range.start, b.len());
    while p < b.len() {
        if b[p] != b';' {
            return None;
        }
        let name_start = skip_lws(b, p + 1, b.len());
        let name_end = take_while(b, name_start, b.len(), is_token);
        if name_end == name_start {
            return None;
        }
        let mut q = skip_lws(b, name_end, b.len());
        let mut value = None;
        let mut whole_end = name_end;
        if q < b.len() && b[q] == b'=' {
            let v_start = skip_lws(b, q + 1, b.len());
            let v_end = if v_start < b.len() && b[v_start] == b'"' {
                quoted_end(b, v_start, b.len())?
            } else {
                token_value_end(b, v_start)
            };
            if v_end == v_start {
                return None;
            }
            value = Some(v_start..v_end);
            whole_end = v_end;
            q = skip_lws(b, v_end, b.len());
        }
        f(Param {
            name: name_start..name_end,
            value,
            whole: name_start..whole_end,
        });
        p = q;
    }
    Some(())
}

/// From `p`, the first byte of `b` below 0x21 (whitespace, controls) or
/// equal to `stop`, found eight bytes at a time; within the last seven bytes
/// it stops early. A byte loop that ends at whitespace or `stop` can start
/// there. Branch values and URIs run 20 to
/// 40 bytes, which a byte at a time costs several instructions each.
pub(crate) fn skip_plain(b: &[u8], mut p: usize, stop: u8) -> usize {
    while let Some(chunk) = b.get(p..).and_then(<[u8]>::first_chunk::<8>) {
        let x = u64::from_le_bytes(*chunk);
        if let Some(i) = first_lane(lanes_below(x, 0x21) | lanes_equal(x, stop)) {
            return p + i;
        }
        p += 8;
    }
    p
}

const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// Eight bytes at a time: the high bit of each byte (lane) of `word` below
/// `n` (at most 0x80). The classic has-less-than test; a borrow only adds
/// flags above a flagged lane, so the lowest flag is exact and a word with
/// no such byte has none.
pub(crate) const fn lanes_below(word: u64, n: u8) -> u64 {
    word.wrapping_sub(ONES * n as u64) & !word & HIGHS
}

/// The high bit of each lane of `word` equal to `n` (the has-zero-byte test
/// on `word ^ n..n`), exact for the lowest lane as [`lanes_below`] is.
pub(crate) const fn lanes_equal(word: u64, n: u8) -> u64 {
    let y = word ^ (ONES * n as u64);
    y.wrapping_sub(ONES) & !y & HIGHS
}

/// The byte offset of the lowest flagged lane of a word read little-endian
/// (its first byte), `None` if none is.
pub(crate) const fn first_lane(flags: u64) -> Option<usize> {
    if flags == 0 {
        None
    } else {
        Some((flags.trailing_zeros() / 8) as usize)
    }
}

/// End of the unquoted parameter value starting at `v`: the first
/// whitespace or `;` ([`walk_params`]).
pub(crate) fn token_value_end(b: &[u8], v: usize) -> usize {
    let mut v = skip_plain(b, v, b';');
    while v < b.len() && PARAM_VALUE[usize::from(b[v])] {
        v += 1;
    }
    v
}

/// Bytes of an unquoted parameter value: anything but whitespace and `;`.
const PARAM_VALUE: [bool; 256] = {
    let mut t = [true; 256];
    t[b' ' as usize] = false;
    t[b'\t' as usize] = false;
    t[b'\r' as usize] = false;
    t[b'\n' as usize] = false;
    t[b';' as usize] = false;
    t
};

/// Every parameter of `range` ([`walk_params`]); `None` if one is malformed.
#[cfg(test)]
pub(crate) fn parse_params(buf: &[u8], range: Range<usize>) -> Option<Vec<Param>> {
    let mut out = Vec::new();
    walk_params(buf, range, |p| out.push(p))?;
    Some(out)
}

/// The first parameter named `name` (case-insensitive) in `range`; `None`
/// also when any parameter there is malformed.
pub(crate) fn find_param(buf: &[u8], range: Range<usize>, name: &[u8]) -> Option<Param> {
    let mut found = None;
    walk_params(buf, range, |p| {
        if found.is_none() && name_is(buf, &p.name, name) {
            found = Some(p);
        }
    })?;
    found
}

#[cfg(test)]
mod tests;
