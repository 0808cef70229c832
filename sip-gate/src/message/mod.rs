//! A zero-copy view of one SIP message.
//!
//! The proxy forwards the bytes it received and splices only Via,
//! Max-Forwards, Route and Record-Route (see [`crate::edit`]), so this is an
//! index over the raw bytes, not a tree: every piece the view exposes is a
//! range into [`SipMessage::raw`] or a slice borrowed from it.
//!
//! # Strict and lenient parsing
//!
//! [`SipMessage::scan`] only needs a start line and an empty line; it
//! records every header line and remembers the first defect it saw (a line
//! without a colon, a bad Content-Length, a short body, a bad version).
//! [`SipMessage::validate`] then checks what a proxy relies on: the defect,
//! the mandatory headers, CSeq, Via, From, To, Route, Record-Route, Contact and
//! Max-Forwards. [`SipMessage::parse`] is both in one call.
//!
//! The proxy calls `scan`, then `validate`. When validation fails on a
//! request for which [`SipMessage::has_mandatory`] is true, it answers 400
//! with [`ParseError::reason`] as the reason phrase (or 505 for
//! [`ParseError::UnsupportedVersion`]); otherwise it drops the message.

mod error;
mod index;
mod name_addr;
mod names;
mod start_line;

#[cfg(test)]
mod tests;
mod validate;
mod via;

use std::cell::OnceCell;
use std::ops::Range;

use bytes::Bytes;

use crate::lex::{self, skip_lws, take_while, ContentLength};

pub use error::ParseError;
pub use name_addr::{ContactView, NameAddr};
pub use names::{HeaderName, Method};
pub use start_line::StartLine;
pub use via::Via;

use index::{bare_nul, body_range, index_headers, Index, NAMES, NO_LINE};
use name_addr::{parse_contact, parse_delta, parse_name_addr, NameAddrParts};
use start_line::parse_start_line;
use via::{parse_via, ViaAt};

/// A route set as routing holds it ([`SipMessage::route_set`]).
pub(crate) type RouteSet = smallvec::SmallVec<[NameAddr; 4]>;

/// One logical header line (folded continuations included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderField {
    /// The classified name; `Other` also for malformed lines.
    pub name: HeaderName,
    /// The header name as written (empty for a malformed line).
    pub name_range: Range<usize>,
    /// The whole line including folded continuation lines and the final
    /// line end: removing this range removes the header.
    pub line: Range<usize>,
    /// The value without leading and trailing whitespace. Inner folds stay.
    pub value: Range<usize>,
}

/// A zero-copy view of one SIP message: the raw bytes plus ranges.
#[derive(Debug, Clone)]
pub struct SipMessage {
    raw: Bytes,
    start: StartLine,
    /// The method token for requests, empty for responses.
    method: Range<usize>,
    headers: Vec<HeaderField>,
    /// Per header name, the index of its first line ([`index::NO_LINE`]: none),
    /// noted by the scan: finding a header costs no walk over the lines.
    first: [u16; NAMES],
    /// Lines of Via, From, To, Call-ID and CSeq (saturating), counted by
    /// the scan for `validate`.
    counts: [u8; 5],
    header_end: usize,
    body: Range<usize>,
    /// The first problem `scan` tolerated; `validate` reports it.
    defect: Option<ParseError>,
    /// Routing reads these several times a message: each is parsed once,
    /// by `validate` or by the first reader, and kept as offsets. `OnceCell`,
    /// not `OnceLock`: one thread handles a message, and a lock's first
    /// `set` took `Once`'s slow path for every new message.
    top_via: OnceCell<Option<ViaAt>>,
    /// The via-value below the top one: where a response goes next.
    next_via: OnceCell<Option<ViaAt>>,
    from_tag: OnceCell<Option<Range<usize>>>,
    to_tag: OnceCell<Option<Range<usize>>>,
    cseq: OnceCell<Option<(u32, Range<usize>)>>,
    /// Every Route element, as `validate` found them (set only when every
    /// Route line parsed): routing reads the route set of every request.
    routes: OnceCell<RouteSet>,
    /// The first Contact element, as `validate` found it.
    first_contact: OnceCell<ContactView>,
}

impl SipMessage {
    /// Parses one datagram, or one stream message cut by
    /// [`crate::lex::check`], and checks it ([`SipMessage::scan`] then
    /// [`SipMessage::validate`]).
    pub fn parse(raw: Bytes) -> Result<SipMessage, ParseError> {
        let msg = SipMessage::scan(raw)?;
        msg.validate()?;
        Ok(msg)
    }

    /// Indexes the message with as few checks as possible: it fails only
    /// without a recognisable start line or without an empty line. Other
    /// problems are remembered and reported by [`SipMessage::validate`].
    ///
    /// Leading CRLFs are skipped (RFC 3261 7.5). If Content-Length is present
    /// the body is that many bytes and any extra bytes are dropped from
    /// [`SipMessage::raw`] (RFC 3261 18.3); if absent, the body is the rest
    /// of the datagram.
    pub fn scan(raw: Bytes) -> Result<SipMessage, ParseError> {
        let buf: &[u8] = &raw;
        let begin = buf
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .ok_or(ParseError::Empty)?;
        let line_end = memchr::memchr(b'\n', buf.get(begin..).unwrap_or_default())
            .map(|i| begin.saturating_add(i))
            .ok_or(ParseError::Unterminated)?;
        let Index {
            headers,
            first,
            counts,
            bad_header,
            content_length,
            head,
        } = index_headers(buf, line_end.saturating_add(1))?;
        let (header_end, body_start) = (head.header_end, head.body_start);
        let mut start_line = begin..line_end;
        if buf.get(line_end.saturating_sub(1)) == Some(&b'\r') && line_end > begin {
            start_line.end = line_end.saturating_sub(1);
        }

        let mut defect = None;
        let (start, method) = parse_start_line(buf, start_line, &mut defect)?;
        if bad_header {
            note(&mut defect, ParseError::BadHeader);
        }

        if bare_nul(buf.get(begin..header_end).unwrap_or_default()) {
            note(&mut defect, ParseError::BadHeader);
        }

        let len = buf.len();
        let body = body_range(content_length, body_start, len, &mut defect);

        // Bytes past Content-Length in a datagram are no part of the message
        // (RFC 3261 18.3): cut them off here, so nothing downstream (the
        // splice, a TCP next hop) ever forwards them as a second message.
        let mut raw = raw;
        if matches!(content_length, ContentLength::Value(_)) && body.end < len {
            raw.truncate(body.end);
        }
        Ok(SipMessage {
            raw,
            start,
            method,
            headers,
            first,
            counts,
            header_end,
            body,
            defect,
            top_via: OnceCell::new(),
            next_via: OnceCell::new(),
            from_tag: OnceCell::new(),
            to_tag: OnceCell::new(),
            cseq: OnceCell::new(),
            routes: OnceCell::new(),
            first_contact: OnceCell::new(),
        })
    }

    /// Whether the message has every header a 400 response must copy (Via,
    /// From, To, Call-ID, CSeq), whatever their syntax. Together with
    /// [`SipMessage::scan`] this tells the proxy whether a broken request
    /// can be answered or must be dropped.
    pub fn has_mandatory(&self) -> bool {
        [
            HeaderName::Via,
            HeaderName::From,
            HeaderName::To,
            HeaderName::CallId,
            HeaderName::CSeq,
        ]
        .into_iter()
        .all(|name| self.first_field(name).is_some())
    }

    /// The bytes this view indexes.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The parsed start line.
    pub fn start_line(&self) -> &StartLine {
        &self.start
    }

    /// True for requests.
    pub fn is_request(&self) -> bool {
        matches!(self.start, StartLine::Request { .. })
    }

    /// The request method, `None` for responses.
    pub fn method(&self) -> Option<Method> {
        match self.start {
            StartLine::Request { method, .. } => Some(method),
            StartLine::Response { .. } => None,
        }
    }

    /// The method token as written (empty for responses).
    pub fn method_bytes(&self) -> &[u8] {
        self.slice(self.method.clone())
    }

    /// The status code, `None` for requests.
    pub fn code(&self) -> Option<u16> {
        match self.start {
            StartLine::Response { code } => Some(code),
            StartLine::Request { .. } => None,
        }
    }

    /// The Request-URI, `None` for responses.
    pub fn request_uri(&self) -> Option<&[u8]> {
        match &self.start {
            StartLine::Request { uri, .. } => Some(self.slice(uri.clone())),
            StartLine::Response { .. } => None,
        }
    }

    /// All header lines in order.
    pub fn headers(&self) -> &[HeaderField] {
        &self.headers
    }

    /// The first header line with the given name.
    pub fn first_field(&self, name: HeaderName) -> Option<&HeaderField> {
        match self.first.get(name as usize) {
            Some(&i) if i != NO_LINE => self.headers.get(usize::from(i)),
            // Only a message of more lines than the index counts can have
            // its first one past it.
            _ if self.headers.len() >= usize::from(NO_LINE) => self.fields(name).next(),
            _ => None,
        }
    }

    /// The header lines with the given name, in order.
    pub fn fields(&self, name: HeaderName) -> impl Iterator<Item = &HeaderField> {
        self.headers.iter().filter(move |f| f.name == name)
    }

    /// The trimmed value of a header line (inner folds included).
    pub fn value(&self, f: &HeaderField) -> &[u8] {
        self.slice(f.value.clone())
    }

    /// The bytes of a range of this message; empty if out of bounds.
    pub fn slice(&self, range: Range<usize>) -> &[u8] {
        self.raw.get(range).unwrap_or_default()
    }

    /// Offset of the empty line: a header inserted here becomes the last one.
    pub fn header_end(&self) -> usize {
        self.header_end
    }

    /// Offset of the first header line (the empty line if there is none): a
    /// header inserted here becomes the first one.
    pub fn headers_start(&self) -> usize {
        self.headers
            .first()
            .map_or(self.header_end, |f| f.line.start)
    }

    /// The body range in the raw bytes.
    pub fn body_range(&self) -> Range<usize> {
        self.body.clone()
    }

    /// The body bytes (binary safe).
    pub fn body(&self) -> &[u8] {
        self.slice(self.body.clone())
    }

    /// The Call-ID value, `None` if absent or empty.
    pub fn call_id(&self) -> Option<&[u8]> {
        let f = self.first_field(HeaderName::CallId)?;
        Some(self.value(f)).filter(|v| !v.is_empty())
    }

    /// CSeq number and method. Use [`SipMessage::cseq_method_bytes`] when
    /// the method is `Other`.
    pub fn cseq(&self) -> Option<(u32, Method)> {
        let (seq, m) = self.cseq_parts()?;
        Some((seq, Method::from_token(self.slice(m))))
    }

    /// The CSeq method token as written.
    pub fn cseq_method_bytes(&self) -> Option<&[u8]> {
        let (_, m) = self.cseq_parts()?;
        Some(self.slice(m))
    }

    fn cseq_parts(&self) -> Option<(u32, Range<usize>)> {
        self.cseq.get_or_init(|| self.find_cseq()).clone()
    }

    fn find_cseq(&self) -> Option<(u32, Range<usize>)> {
        let f = self.first_field(HeaderName::CSeq)?;
        let raw: &[u8] = &self.raw;
        let end = f.value.end;
        let digits_end = take_while(raw, f.value.start, end, |b| b.is_ascii_digit());
        let seq = lex::parse_decimal(raw.get(f.value.start..digits_end)?)?;
        let seq = u32::try_from(seq).ok()?;
        let m_start = skip_lws(raw, digits_end, end);
        if m_start == digits_end {
            return None;
        }
        let m_end = take_while(raw, m_start, end, lex::is_token);
        (m_end > m_start && m_end == end).then_some((seq, m_start..m_end))
    }

    fn single_name_addr(&self, name: HeaderName) -> Option<NameAddrParts> {
        let f = self.first_field(name)?;
        parse_name_addr(&self.raw, f.value.clone())
    }

    fn tag_in(&self, parts: NameAddrParts) -> Option<Range<usize>> {
        parts.tag
    }

    fn tag_of(&self, name: HeaderName) -> Option<Range<usize>> {
        self.tag_in(self.single_name_addr(name)?)
    }

    /// The `tag` parameter of From.
    pub fn from_tag(&self) -> Option<&[u8]> {
        let tag = self.from_tag.get_or_init(|| self.tag_of(HeaderName::From));
        tag.clone().map(|r| self.slice(r))
    }

    /// The `tag` parameter of To.
    pub fn to_tag(&self) -> Option<&[u8]> {
        let tag = self.to_tag.get_or_init(|| self.tag_of(HeaderName::To));
        tag.clone().map(|r| self.slice(r))
    }

    /// The URI of From (inside `<>` or the bare addr-spec, no parameters).
    pub fn from_uri(&self) -> Option<&[u8]> {
        Some(self.slice(self.single_name_addr(HeaderName::From)?.uri))
    }

    /// The URI of To (inside `<>` or the bare addr-spec, no parameters).
    pub fn to_uri(&self) -> Option<&[u8]> {
        Some(self.slice(self.single_name_addr(HeaderName::To)?.uri))
    }

    /// Max-Forwards: `None` if absent, an error if not a number in 0..=255.
    pub fn max_forwards(&self) -> Option<Result<u32, ParseError>> {
        let f = self.first_field(HeaderName::MaxForwards)?;
        Some(
            lex::parse_decimal(self.value(f))
                .filter(|&n| n <= 255)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(ParseError::BadMaxForwards),
        )
    }

    /// The Expires header as delta-seconds; values above 2^32-1 saturate,
    /// anything not a number is `None`.
    pub fn expires(&self) -> Option<u32> {
        let f = self.first_field(HeaderName::Expires)?;
        parse_delta(self.value(f))
    }

    /// Every Contact element in order; stops at the first malformed one.
    pub fn contacts(&self) -> Vec<ContactView> {
        self.list(HeaderName::Contact)
            .map_while(|(i, elem)| parse_contact(&self.raw, elem?, i))
            .collect()
    }

    /// The first Contact element, `None` if there is none or it is malformed.
    pub fn first_contact(&self) -> Option<ContactView> {
        if let Some(c) = self.first_contact.get() {
            return Some(c.clone());
        }
        let (i, elem) = self.list(HeaderName::Contact).next()?;
        parse_contact(&self.raw, elem?, i)
    }

    /// Every via-value in order, comma-joined values split. Stops at the
    /// first malformed value, so the n-th item is always the n-th Via (a
    /// message from [`SipMessage::parse`] has none malformed).
    pub fn vias(&self) -> impl Iterator<Item = Via<'_>> {
        self.list(HeaderName::Via)
            .map_while(|(i, elem)| parse_via(&self.raw, elem?, i))
    }

    /// The topmost via-value, `None` if absent or malformed.
    pub fn top_via(&self) -> Option<Via<'_>> {
        let top = self
            .top_via
            .get_or_init(|| Some(ViaAt::of(&self.raw, &self.vias().next()?)));
        top.as_ref().map(|v| v.view(&self.raw))
    }

    /// The via-value below the topmost one (a response's next hop), `None`
    /// if there is none or it is malformed.
    pub fn second_via(&self) -> Option<Via<'_>> {
        let next = self
            .next_via
            .get_or_init(|| Some(ViaAt::of(&self.raw, &self.vias().nth(1)?)));
        next.as_ref().map(|v| v.view(&self.raw))
    }

    /// Every Route element in order; stops at the first malformed one.
    pub fn routes(&self) -> Vec<NameAddr> {
        self.name_addrs(HeaderName::Route)
    }

    /// [`SipMessage::routes`], kept in the view (`validate` fills it as it
    /// checks them): routing reads it on every in-dialog request.
    pub(crate) fn route_set(&self) -> &[NameAddr] {
        self.routes
            .get_or_init(|| self.name_addrs(HeaderName::Route))
    }

    /// Every Record-Route element in order; stops at the first malformed one.
    pub fn record_routes(&self) -> Vec<NameAddr> {
        self.name_addrs(HeaderName::RecordRoute)
    }

    /// A plain loop, not [`SipMessage::list`]'s adapters: every in-dialog
    /// request reads its Routes, and the adapter chain cost more than the
    /// parsing.
    fn name_addrs<C: Default + Extend<NameAddr>>(&self, name: HeaderName) -> C {
        let mut out = C::default();
        for (i, f) in self.headers.iter().enumerate() {
            if f.name != name {
                continue;
            }
            let Some(elems) = lex::list_elements(&self.raw, f.value.clone()) else {
                return out;
            };
            for range in elems {
                let Some(parts) = parse_name_addr(&self.raw, range.clone()) else {
                    return out;
                };
                out.extend(Some(NameAddr {
                    uri: parts.uri,
                    range,
                    field_index: i,
                }));
            }
        }
        out
    }

    /// The elements of every line named `name` as `(field_index, element)`;
    /// `None` marks a line whose commas cannot be split (unbalanced quote
    /// or angle bracket).
    fn list(&self, name: HeaderName) -> impl Iterator<Item = (usize, Option<Range<usize>>)> + '_ {
        self.headers
            .iter()
            .enumerate()
            .filter(move |(_, f)| f.name == name)
            .flat_map(move |(i, f)| {
                let elems = lex::list_elements(&self.raw, f.value.clone());
                // A line that cannot be split is one `None`.
                let bad = elems.is_none().then_some((i, None));
                elems
                    .into_iter()
                    .flatten()
                    .map(move |e| (i, Some(e)))
                    .chain(bad)
            })
    }

    /// The comma-separated elements of one header line (quotes and `<>`
    /// respected), `None` if unbalanced. A one-element value (most of them)
    /// needs no allocation.
    pub fn elements(&self, field_index: usize) -> Option<impl Iterator<Item = Range<usize>>> {
        let f = self.headers.get(field_index)?;
        lex::list_elements(&self.raw, f.value.clone())
    }
}

impl Drop for SipMessage {
    fn drop(&mut self) {
        index::give_back(std::mem::take(&mut self.headers));
    }
}

/// Keeps the first defect only: it is the one worth reporting.
pub(super) fn note(defect: &mut Option<ParseError>, e: ParseError) {
    if defect.is_none() {
        *defect = Some(e);
    }
}
