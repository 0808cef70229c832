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
//! When `parse` fails on a request, the proxy calls `scan`; if that works and
//! [`SipMessage::has_mandatory`] is true it can build a 400 whose reason
//! phrase is [`ParseError::reason`] (or 505 for
//! [`ParseError::UnsupportedVersion`]); otherwise it drops the datagram.

use std::ops::Range;

use bytes::Bytes;
use thiserror::Error;

use crate::frame::{self, ContentLength};

// === errors ===

/// What is wrong with a message. The `Display` text (also returned by
/// [`ParseError::reason`]) is short enough to be a 400 reason phrase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParseError {
    /// Nothing but whitespace.
    #[error("Empty Message")]
    Empty,
    /// No empty line ends the header section.
    #[error("Missing Empty Line")]
    Unterminated,
    /// The Request-Line is malformed.
    #[error("Bad Request-Line")]
    BadRequestLine,
    /// The Status-Line is malformed (or the code is outside 100..=699).
    #[error("Bad Status-Line")]
    BadStatusLine,
    /// The SIP version is not 2.0; a request deserves a 505.
    #[error("Version Not Supported")]
    UnsupportedVersion,
    /// A header line has no colon or its name is not a token.
    #[error("Malformed Header")]
    BadHeader,
    /// Content-Length is not a number, or several disagree.
    #[error("Bad Content-Length")]
    BadContentLength,
    /// The datagram holds fewer body bytes than Content-Length announces.
    #[error("Body Shorter Than Content-Length")]
    BodyTooShort,
    /// No Via header.
    #[error("Missing Via")]
    MissingVia,
    /// No From header.
    #[error("Missing From")]
    MissingFrom,
    /// No To header.
    #[error("Missing To")]
    MissingTo,
    /// No (or an empty) Call-ID header.
    #[error("Missing Call-ID")]
    MissingCallId,
    /// No CSeq header.
    #[error("Missing CSeq")]
    MissingCSeq,
    /// More than one From header.
    #[error("Duplicate From")]
    DuplicateFrom,
    /// More than one To header.
    #[error("Duplicate To")]
    DuplicateTo,
    /// More than one Call-ID header.
    #[error("Duplicate Call-ID")]
    DuplicateCallId,
    /// More than one CSeq header.
    #[error("Duplicate CSeq")]
    DuplicateCSeq,
    /// A Via value does not parse.
    #[error("Bad Via")]
    BadVia,
    /// The From value does not parse.
    #[error("Bad From")]
    BadFrom,
    /// The To value does not parse.
    #[error("Bad To")]
    BadTo,
    /// CSeq is not `number method`, or the number exceeds 2^32-1.
    #[error("Bad CSeq")]
    BadCSeq,
    /// The CSeq method differs from the request method.
    #[error("CSeq Method Mismatch")]
    CSeqMethodMismatch,
    /// Max-Forwards is not a number in 0..=255.
    #[error("Bad Max-Forwards")]
    BadMaxForwards,
    /// A Route value does not parse.
    #[error("Bad Route")]
    BadRoute,
    /// A Record-Route value does not parse.
    #[error("Bad Record-Route")]
    BadRecordRoute,
    /// A Contact value does not parse.
    #[error("Bad Contact")]
    BadContact,
}

impl ParseError {
    /// A static reason phrase for a 400 (or 505) response.
    pub fn reason(&self) -> &'static str {
        match self {
            ParseError::Empty => "Empty Message",
            ParseError::Unterminated => "Missing Empty Line",
            ParseError::BadRequestLine => "Bad Request-Line",
            ParseError::BadStatusLine => "Bad Status-Line",
            ParseError::UnsupportedVersion => "Version Not Supported",
            ParseError::BadHeader => "Malformed Header",
            ParseError::BadContentLength => "Bad Content-Length",
            ParseError::BodyTooShort => "Body Shorter Than Content-Length",
            ParseError::MissingVia => "Missing Via",
            ParseError::MissingFrom => "Missing From",
            ParseError::MissingTo => "Missing To",
            ParseError::MissingCallId => "Missing Call-ID",
            ParseError::MissingCSeq => "Missing CSeq",
            ParseError::DuplicateFrom => "Duplicate From",
            ParseError::DuplicateTo => "Duplicate To",
            ParseError::DuplicateCallId => "Duplicate Call-ID",
            ParseError::DuplicateCSeq => "Duplicate CSeq",
            ParseError::BadVia => "Bad Via",
            ParseError::BadFrom => "Bad From",
            ParseError::BadTo => "Bad To",
            ParseError::BadCSeq => "Bad CSeq",
            ParseError::CSeqMethodMismatch => "CSeq Method Mismatch",
            ParseError::BadMaxForwards => "Bad Max-Forwards",
            ParseError::BadRoute => "Bad Route",
            ParseError::BadRecordRoute => "Bad Record-Route",
            ParseError::BadContact => "Bad Contact",
        }
    }
}

// === methods and header names ===

/// A request method. Methods are case-sensitive (RFC 3261 7.1); anything
/// unknown is `Other` and its token stays reachable through
/// [`SipMessage::method_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// INVITE
    Invite,
    /// ACK
    Ack,
    /// BYE
    Bye,
    /// CANCEL
    Cancel,
    /// REGISTER
    Register,
    /// SUBSCRIBE
    Subscribe,
    /// NOTIFY
    Notify,
    /// OPTIONS
    Options,
    /// UPDATE
    Update,
    /// PRACK
    Prack,
    /// INFO
    Info,
    /// MESSAGE
    Message,
    /// REFER
    Refer,
    /// PUBLISH
    Publish,
    /// An extension method.
    Other,
}

const METHODS: &[(&str, Method)] = &[
    ("INVITE", Method::Invite),
    ("ACK", Method::Ack),
    ("BYE", Method::Bye),
    ("CANCEL", Method::Cancel),
    ("REGISTER", Method::Register),
    ("SUBSCRIBE", Method::Subscribe),
    ("NOTIFY", Method::Notify),
    ("OPTIONS", Method::Options),
    ("UPDATE", Method::Update),
    ("PRACK", Method::Prack),
    ("INFO", Method::Info),
    ("MESSAGE", Method::Message),
    ("REFER", Method::Refer),
    ("PUBLISH", Method::Publish),
];

impl Method {
    /// Classifies a method token (case-sensitive).
    pub fn from_token(token: &[u8]) -> Method {
        METHODS
            .iter()
            .find(|(name, _)| name.as_bytes() == token)
            .map_or(Method::Other, |&(_, m)| m)
    }

    /// The canonical token, `None` for `Other`.
    pub fn as_str(&self) -> Option<&'static str> {
        METHODS
            .iter()
            .find(|(_, m)| m == self)
            .map(|&(name, _)| name)
    }
}

/// A header name, compact forms folded into their long form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderName {
    /// Via (`v`)
    Via,
    /// Max-Forwards
    MaxForwards,
    /// Route
    Route,
    /// Record-Route
    RecordRoute,
    /// Call-ID (`i`)
    CallId,
    /// CSeq
    CSeq,
    /// From (`f`)
    From,
    /// To (`t`)
    To,
    /// Contact (`m`)
    Contact,
    /// Content-Length (`l`)
    ContentLength,
    /// Content-Type (`c`)
    ContentType,
    /// Content-Encoding (`e`)
    ContentEncoding,
    /// Expires
    Expires,
    /// Event (`o`)
    Event,
    /// Subject (`s`)
    Subject,
    /// Supported (`k`)
    Supported,
    /// Allow-Events (`u`)
    AllowEvents,
    /// Refer-To (`r`)
    ReferTo,
    /// Referred-By (`b`)
    ReferredBy,
    /// Session-Expires (`x`)
    SessionExpires,
    /// Identity (`y`)
    Identity,
    /// Require
    Require,
    /// Proxy-Require
    ProxyRequire,
    /// Unsupported
    Unsupported,
    /// Allow
    Allow,
    /// Path
    Path,
    /// Service-Route
    ServiceRoute,
    /// Retry-After
    RetryAfter,
    /// Min-Expires
    MinExpires,
    /// Authorization
    Authorization,
    /// Proxy-Authorization
    ProxyAuthorization,
    /// WWW-Authenticate
    WwwAuthenticate,
    /// Proxy-Authenticate
    ProxyAuthenticate,
    /// User-Agent
    UserAgent,
    /// Server
    Server,
    /// RSeq
    RSeq,
    /// RAck
    RAck,
    /// Any other header; its name is in [`HeaderField::name_range`].
    Other,
}

const HEADER_NAMES: &[(&[u8], Option<u8>, HeaderName)] = &[
    (b"Via", Some(b'v'), HeaderName::Via),
    (b"Max-Forwards", None, HeaderName::MaxForwards),
    (b"Route", None, HeaderName::Route),
    (b"Record-Route", None, HeaderName::RecordRoute),
    (b"Call-ID", Some(b'i'), HeaderName::CallId),
    (b"CSeq", None, HeaderName::CSeq),
    (b"From", Some(b'f'), HeaderName::From),
    (b"To", Some(b't'), HeaderName::To),
    (b"Contact", Some(b'm'), HeaderName::Contact),
    (b"Content-Length", Some(b'l'), HeaderName::ContentLength),
    (b"Content-Type", Some(b'c'), HeaderName::ContentType),
    (b"Content-Encoding", Some(b'e'), HeaderName::ContentEncoding),
    (b"Expires", None, HeaderName::Expires),
    (b"Event", Some(b'o'), HeaderName::Event),
    (b"Subject", Some(b's'), HeaderName::Subject),
    (b"Supported", Some(b'k'), HeaderName::Supported),
    (b"Allow-Events", Some(b'u'), HeaderName::AllowEvents),
    (b"Refer-To", Some(b'r'), HeaderName::ReferTo),
    (b"Referred-By", Some(b'b'), HeaderName::ReferredBy),
    (b"Session-Expires", Some(b'x'), HeaderName::SessionExpires),
    (b"Identity", Some(b'y'), HeaderName::Identity),
    (b"Require", None, HeaderName::Require),
    (b"Proxy-Require", None, HeaderName::ProxyRequire),
    (b"Unsupported", None, HeaderName::Unsupported),
    (b"Allow", None, HeaderName::Allow),
    (b"Path", None, HeaderName::Path),
    (b"Service-Route", None, HeaderName::ServiceRoute),
    (b"Retry-After", None, HeaderName::RetryAfter),
    (b"Min-Expires", None, HeaderName::MinExpires),
    (b"Authorization", None, HeaderName::Authorization),
    (b"Proxy-Authorization", None, HeaderName::ProxyAuthorization),
    (b"WWW-Authenticate", None, HeaderName::WwwAuthenticate),
    (b"Proxy-Authenticate", None, HeaderName::ProxyAuthenticate),
    (b"User-Agent", None, HeaderName::UserAgent),
    (b"Server", None, HeaderName::Server),
    (b"RSeq", None, HeaderName::RSeq),
    (b"RAck", None, HeaderName::RAck),
];

impl HeaderName {
    /// Classifies a header name, case-insensitively, compact forms included.
    pub fn from_bytes(name: &[u8]) -> HeaderName {
        if let [c] = name {
            let c = c.to_ascii_lowercase();
            return HEADER_NAMES
                .iter()
                .find(|(_, compact, _)| *compact == Some(c))
                .map_or(HeaderName::Other, |&(_, _, h)| h);
        }
        HEADER_NAMES
            .iter()
            .find(|(long, _, _)| long.eq_ignore_ascii_case(name))
            .map_or(HeaderName::Other, |&(_, _, h)| h)
    }

    /// The canonical long name, `None` for `Other`.
    pub fn as_str(&self) -> Option<&'static str> {
        HEADER_NAMES
            .iter()
            .find(|(_, _, h)| h == self)
            .and_then(|(long, _, _)| std::str::from_utf8(long).ok())
    }
}

// === the view ===

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

/// One Via value (`sent-protocol sent-by *(;param)`), borrowed from the
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via<'a> {
    /// The transport token as written (`UDP`, `tcp`, `TLS`, ...).
    pub transport: &'a [u8],
    /// The host; IPv6 references keep their brackets (`[::1]`).
    pub host: &'a [u8],
    /// The port of sent-by, if any.
    pub port: Option<u16>,
    /// The `branch` parameter value.
    pub branch: Option<&'a [u8]>,
    /// `None`: no rport; `Some(None)`: bare `;rport`; `Some(Some(p))`: filled.
    pub rport: Option<Option<u16>>,
    /// The whole `rport[=n]` parameter (without the `;`), so a proxy can
    /// replace it with a filled one.
    pub rport_range: Option<Range<usize>>,
    /// The `received` parameter value.
    pub received: Option<&'a [u8]>,
    /// This single via-value in the raw bytes (no surrounding commas).
    pub range: Range<usize>,
    /// Index into [`SipMessage::headers`] of the line holding this value.
    pub field_index: usize,
}

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

/// A zero-copy view of one SIP message: the raw bytes plus ranges.
#[derive(Debug, Clone)]
pub struct SipMessage {
    raw: Bytes,
    start: StartLine,
    /// The method token for requests, empty for responses.
    method: Range<usize>,
    headers: Vec<HeaderField>,
    header_end: usize,
    body: Range<usize>,
    /// The first problem `scan` tolerated; `validate` reports it.
    defect: Option<ParseError>,
}

impl SipMessage {
    /// Parses one datagram, or one stream message cut by
    /// [`crate::frame::check`], and checks it ([`SipMessage::scan`] then
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
    /// the body is that many bytes and any extra bytes are ignored
    /// (RFC 3261 18.3); if absent, the body is the rest of the datagram.
    pub fn scan(raw: Bytes) -> Result<SipMessage, ParseError> {
        let buf: &[u8] = &raw;
        let begin = buf
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .ok_or(ParseError::Empty)?;
        let head = frame::find_head_end(buf.get(begin..).unwrap_or_default())
            .ok_or(ParseError::Unterminated)?;
        let header_end = begin.saturating_add(head.header_end);
        let body_start = begin.saturating_add(head.body_start);
        let line_end = memchr::memchr(b'\n', buf.get(begin..).unwrap_or_default())
            .map_or(header_end, |i| begin.saturating_add(i));
        let first_header = line_end.saturating_add(1).min(header_end);
        let mut start_line = begin..line_end;
        if buf.get(line_end.saturating_sub(1)) == Some(&b'\r') && line_end > begin {
            start_line.end = line_end.saturating_sub(1);
        }

        let mut defect = None;
        let (start, method) = parse_start_line(buf, start_line, &mut defect)?;

        let headers: Vec<HeaderField> = frame::header_lines(buf, first_header..header_end)
            .map(|h| {
                let name = if h.well_formed {
                    HeaderName::from_bytes(buf.get(h.name.clone()).unwrap_or_default())
                } else {
                    note(&mut defect, ParseError::BadHeader);
                    HeaderName::Other
                };
                HeaderField {
                    name,
                    name_range: h.name,
                    line: h.line,
                    value: h.value,
                }
            })
            .collect();

        let len = buf.len();
        let body = match frame::content_length(buf, first_header..header_end) {
            ContentLength::Absent => body_start..len,
            ContentLength::Bad | ContentLength::Conflicting => {
                note(&mut defect, ParseError::BadContentLength);
                body_start..len
            }
            ContentLength::Value(n) => match body_start.checked_add(n) {
                Some(end) if end <= len => body_start..end,
                _ => {
                    note(&mut defect, ParseError::BodyTooShort);
                    body_start..len
                }
            },
        };

        Ok(SipMessage {
            raw,
            start,
            method,
            headers,
            header_end,
            body,
            defect,
        })
    }

    /// Checks what the proxy relies on; the error names the first problem.
    ///
    /// Order matters only for the reason phrase: structural defects first,
    /// then mandatory headers, then their syntax.
    pub fn validate(&self) -> Result<(), ParseError> {
        if let Some(e) = self.defect {
            return Err(e);
        }
        let count = |name| self.fields(name).count();
        if count(HeaderName::Via) == 0 {
            return Err(ParseError::MissingVia);
        }
        let singles = [
            (
                HeaderName::From,
                ParseError::MissingFrom,
                ParseError::DuplicateFrom,
            ),
            (
                HeaderName::To,
                ParseError::MissingTo,
                ParseError::DuplicateTo,
            ),
            (
                HeaderName::CallId,
                ParseError::MissingCallId,
                ParseError::DuplicateCallId,
            ),
            (
                HeaderName::CSeq,
                ParseError::MissingCSeq,
                ParseError::DuplicateCSeq,
            ),
        ];
        for (name, missing, duplicate) in singles {
            match count(name) {
                0 => return Err(missing),
                1 => {}
                _ => return Err(duplicate),
            }
        }
        if self.call_id().is_none() {
            return Err(ParseError::MissingCallId);
        }
        let (_, cseq_method) = self.cseq_parts().ok_or(ParseError::BadCSeq)?;
        if self.is_request() && self.slice(cseq_method) != self.method_bytes() {
            return Err(ParseError::CSeqMethodMismatch);
        }
        if self.single_name_addr(HeaderName::From).is_none() {
            return Err(ParseError::BadFrom);
        }
        if self.single_name_addr(HeaderName::To).is_none() {
            return Err(ParseError::BadTo);
        }
        let mut vias = 0usize;
        for (i, elem) in self.list(HeaderName::Via) {
            match elem {
                Some(r) if parse_via(&self.raw, r.clone(), i).is_some() => {
                    vias = vias.saturating_add(1)
                }
                _ => return Err(ParseError::BadVia),
            }
        }
        if vias == 0 {
            return Err(ParseError::BadVia);
        }
        for (name, err) in [
            (HeaderName::Route, ParseError::BadRoute),
            (HeaderName::RecordRoute, ParseError::BadRecordRoute),
        ] {
            for (_, elem) in self.list(name) {
                if elem.and_then(|r| parse_name_addr(&self.raw, r)).is_none() {
                    return Err(err);
                }
            }
        }
        for (i, elem) in self.list(HeaderName::Contact) {
            if elem.and_then(|r| parse_contact(&self.raw, r, i)).is_none() {
                return Err(ParseError::BadContact);
            }
        }
        if let Some(Err(e)) = self.max_forwards() {
            return Err(e);
        }
        Ok(())
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
        .all(|name| self.fields(name).next().is_some())
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
        let f = self.fields(HeaderName::CallId).next()?;
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
        let f = self.fields(HeaderName::CSeq).next()?;
        let raw: &[u8] = &self.raw;
        let end = f.value.end;
        let digits_end = take_while(raw, f.value.start, end, |b| b.is_ascii_digit());
        let seq = frame::parse_decimal(raw.get(f.value.start..digits_end)?)?;
        let seq = u32::try_from(seq).ok()?;
        let m_start = skip_lws(raw, digits_end, end);
        if m_start == digits_end {
            return None;
        }
        let m_end = take_while(raw, m_start, end, frame::is_token);
        (m_end > m_start && m_end == end).then_some((seq, m_start..m_end))
    }

    fn single_name_addr(&self, name: HeaderName) -> Option<NameAddrParts> {
        let f = self.fields(name).next()?;
        parse_name_addr(&self.raw, f.value.clone())
    }

    fn param_of(&self, name: HeaderName, param: &[u8]) -> Option<&[u8]> {
        let parts = self.single_name_addr(name)?;
        let p = find_param(&self.raw, parts.params, param)?;
        p.value.map(|v| self.slice(v))
    }

    /// The `tag` parameter of From.
    pub fn from_tag(&self) -> Option<&[u8]> {
        self.param_of(HeaderName::From, b"tag")
    }

    /// The `tag` parameter of To.
    pub fn to_tag(&self) -> Option<&[u8]> {
        self.param_of(HeaderName::To, b"tag")
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
        let f = self.fields(HeaderName::MaxForwards).next()?;
        Some(
            frame::parse_decimal(self.value(f))
                .filter(|&n| n <= 255)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(ParseError::BadMaxForwards),
        )
    }

    /// The Expires header as delta-seconds; values above 2^32-1 saturate,
    /// anything not a number is `None`.
    pub fn expires(&self) -> Option<u32> {
        let f = self.fields(HeaderName::Expires).next()?;
        parse_delta(self.value(f))
    }

    /// Every Contact element in order; stops at the first malformed one.
    pub fn contacts(&self) -> Vec<ContactView> {
        self.list(HeaderName::Contact)
            .map_while(|(i, elem)| parse_contact(&self.raw, elem?, i))
            .collect()
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
        self.vias().next()
    }

    /// Every Route element in order; stops at the first malformed one.
    pub fn routes(&self) -> Vec<NameAddr> {
        self.name_addrs(HeaderName::Route)
    }

    /// Every Record-Route element in order; stops at the first malformed one.
    pub fn record_routes(&self) -> Vec<NameAddr> {
        self.name_addrs(HeaderName::RecordRoute)
    }

    fn name_addrs(&self, name: HeaderName) -> Vec<NameAddr> {
        self.list(name)
            .map_while(|(i, elem)| {
                let range = elem?;
                let parts = parse_name_addr(&self.raw, range.clone())?;
                Some(NameAddr {
                    uri: parts.uri,
                    range,
                    field_index: i,
                })
            })
            .collect()
    }

    /// The elements of every line named `name` as `(field_index, element)`;
    /// `None` marks a line whose commas cannot be split (unbalanced quote
    /// or angle bracket).
    fn list(&self, name: HeaderName) -> impl Iterator<Item = (usize, Option<Range<usize>>)> + '_ {
        self.headers
            .iter()
            .enumerate()
            .filter(move |(_, f)| f.name == name)
            .flat_map(move |(i, f)| match split_list(&self.raw, f.value.clone()) {
                Some(elems) => elems.into_iter().map(|e| (i, Some(e))).collect::<Vec<_>>(),
                None => vec![(i, None)],
            })
    }

    /// The comma-separated elements of one header line (quotes and `<>`
    /// respected), `None` if unbalanced. Used by [`crate::edit`].
    pub fn elements(&self, field_index: usize) -> Option<Vec<Range<usize>>> {
        let f = self.headers.get(field_index)?;
        split_list(&self.raw, f.value.clone())
    }
}

/// Keeps the first defect only: it is the one worth reporting.
fn note(defect: &mut Option<ParseError>, e: ParseError) {
    if defect.is_none() {
        *defect = Some(e);
    }
}

/// Parses the start line in `buf[line]` (no line end). Fatal only when the
/// line is neither a status line nor starts with a method token.
fn parse_start_line(
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
        let code = frame::parse_decimal(digits)
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
    if method_tok.is_empty() || !method_tok.iter().all(|&b| frame::is_token(b)) {
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
fn valid_request_uri(uri: &[u8]) -> bool {
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

// === value lexing ===

/// End of the run starting at `pos` (bounded by `end`) of bytes matching `f`.
fn take_while(buf: &[u8], pos: usize, end: usize, f: impl Fn(u8) -> bool) -> usize {
    let end = end.min(buf.len());
    let mut p = pos;
    while p < end && buf.get(p).is_some_and(|&b| f(b)) {
        p = p.saturating_add(1);
    }
    p.max(pos.min(end))
}

fn skip_lws(buf: &[u8], pos: usize, end: usize) -> usize {
    take_while(buf, pos, end, frame::is_lws)
}

/// Given `buf[pos] == '"'`, the offset just after the closing quote;
/// backslash escapes any byte (RFC 3261 quoted-pair, NUL included).
fn quoted_end(buf: &[u8], pos: usize, end: usize) -> Option<usize> {
    let end = end.min(buf.len());
    let mut p = pos.checked_add(1)?;
    while p < end {
        match buf.get(p)? {
            b'\\' => p = p.checked_add(2)?,
            b'"' => return p.checked_add(1),
            _ => p = p.checked_add(1)?,
        }
    }
    None
}

/// Splits a list value on top-level commas. Quoted strings (with `\"`
/// escapes) and `<...>` protect their commas; elements are trimmed and empty
/// ones dropped (RFC 3261 7.3.1 allows null list elements). `None` when a
/// quote or angle bracket is left open.
fn split_list(buf: &[u8], value: Range<usize>) -> Option<Vec<Range<usize>>> {
    let end = value.end.min(buf.len());
    let mut out = Vec::new();
    let mut elem_start = value.start;
    let mut p = value.start;
    let mut in_angle = false;
    while p < end {
        match buf.get(p)? {
            b'"' if !in_angle => {
                p = quoted_end(buf, p, end)?;
                continue;
            }
            b'<' => in_angle = true,
            b'>' => in_angle = false,
            b',' if !in_angle => {
                let e = frame::trim(buf, elem_start..p);
                if !e.is_empty() {
                    out.push(e);
                }
                elem_start = p.saturating_add(1);
            }
            _ => {}
        }
        p = p.saturating_add(1);
    }
    if in_angle {
        return None;
    }
    let e = frame::trim(buf, elem_start..end);
    if !e.is_empty() {
        out.push(e);
    }
    Some(out)
}

/// One `;name[=value]` parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Param {
    name: Range<usize>,
    value: Option<Range<usize>>,
    /// From the name to the end of the value (no `;`).
    whole: Range<usize>,
}

/// Parses `*(SWS ";" SWS name [SWS "=" SWS value])` up to `range.end`;
/// `None` on anything else. Values are a quoted string or a run of bytes
/// other than whitespace and `;` (so IPv6 `received=[::1]` works).
fn parse_params(buf: &[u8], range: Range<usize>) -> Option<Vec<Param>> {
    let end = range.end.min(buf.len());
    let mut out = Vec::new();
    let mut p = skip_lws(buf, range.start, end);
    while p < end {
        if buf.get(p) != Some(&b';') {
            return None;
        }
        let name_start = skip_lws(buf, p.saturating_add(1), end);
        let name_end = take_while(buf, name_start, end, frame::is_token);
        if name_end == name_start {
            return None;
        }
        let mut q = skip_lws(buf, name_end, end);
        let mut value = None;
        let mut whole_end = name_end;
        if buf.get(q) == Some(&b'=') && q < end {
            let v_start = skip_lws(buf, q.saturating_add(1), end);
            let v_end = if buf.get(v_start) == Some(&b'"') {
                quoted_end(buf, v_start, end)?
            } else {
                take_while(buf, v_start, end, |b| !frame::is_lws(b) && b != b';')
            };
            if v_end == v_start {
                return None;
            }
            value = Some(v_start..v_end);
            whole_end = v_end;
            q = skip_lws(buf, v_end, end);
        }
        out.push(Param {
            name: name_start..name_end,
            value,
            whole: name_start..whole_end,
        });
        p = q;
    }
    Some(out)
}

/// The first parameter named `name` (case-insensitive) in `range`.
fn find_param(buf: &[u8], range: Range<usize>, name: &[u8]) -> Option<Param> {
    parse_params(buf, range)?.into_iter().find(|p| {
        buf.get(p.name.clone())
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
    })
}

/// The pieces of a name-addr or addr-spec with header parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NameAddrParts {
    uri: Range<usize>,
    params: Range<usize>,
}

/// Parses `[display-name] <uri> *(;param)` or `addr-spec *(;param)`.
/// In the addr-spec form the URI ends at the first `;` or whitespace: its
/// parameters belong to the header (RFC 3261 20.10).
fn parse_name_addr(buf: &[u8], range: Range<usize>) -> Option<NameAddrParts> {
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
                if !display
                    .iter()
                    .all(|&b| frame::is_token(b) || frame::is_lws(b))
                {
                    return None;
                }
                p.checked_add(i)?
            }
            None => {
                let uri_end = take_while(buf, p, end, |b| !frame::is_lws(b) && b != b';');
                let uri = p..uri_end;
                if !is_uri(buf.get(uri.clone())?) {
                    return None;
                }
                parse_params(buf, uri_end..end)?;
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
    parse_params(buf, params.clone())?;
    Some(NameAddrParts { uri, params })
}

fn is_uri(uri: &[u8]) -> bool {
    !uri.is_empty() && uri.contains(&b':') && uri.iter().all(|&b| !frame::is_lws(b))
}

/// Parses one Contact element: `*` or a name-addr with params.
fn parse_contact(buf: &[u8], range: Range<usize>, field_index: usize) -> Option<ContactView> {
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
fn parse_delta(v: &[u8]) -> Option<u32> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        frame::parse_decimal(v)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(u32::MAX),
    )
}

/// Parses one via-value:
/// `protocol-name SWS "/" SWS version SWS "/" SWS transport LWS sent-by *(;param)`.
fn parse_via(buf: &[u8], range: Range<usize>, field_index: usize) -> Option<Via<'_>> {
    let end = range.end.min(buf.len());
    let mut p = range.start;
    let mut transport = p..p;
    for i in 0..3 {
        p = skip_lws(buf, p, end);
        let tok_end = take_while(buf, p, end, frame::is_token);
        if tok_end == p {
            return None;
        }
        transport = p..tok_end;
        p = skip_lws(buf, tok_end, end);
        if i < 2 {
            if buf.get(p) != Some(&b'/') || p >= end {
                return None;
            }
            p = p.saturating_add(1);
        }
    }
    // sent-by must be separated from the transport by whitespace.
    if p == transport.end {
        return None;
    }
    let host_start = p;
    let host_end = if buf.get(p) == Some(&b'[') {
        let close = memchr::memchr(b']', buf.get(p..end)?)?;
        p.checked_add(close)?.checked_add(1)?
    } else {
        take_while(buf, p, end, |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')
        })
    };
    if host_end == host_start {
        return None;
    }
    p = skip_lws(buf, host_end, end);
    let mut port = None;
    if buf.get(p) == Some(&b':') && p < end {
        let d_start = skip_lws(buf, p.saturating_add(1), end);
        let d_end = take_while(buf, d_start, end, |b| b.is_ascii_digit());
        let n = frame::parse_decimal(buf.get(d_start..d_end)?)?;
        port = Some(u16::try_from(n).ok()?);
        p = d_end;
    }
    let params = parse_params(buf, p..end)?;
    let mut via = Via {
        transport: buf.get(transport)?,
        host: buf.get(host_start..host_end)?,
        port,
        branch: None,
        rport: None,
        rport_range: None,
        received: None,
        range: range.start..end,
        field_index,
    };
    for prm in params {
        let name = buf.get(prm.name.clone())?;
        let value = match prm.value.clone() {
            Some(v) => Some(buf.get(v)?),
            None => None,
        };
        if name.eq_ignore_ascii_case(b"branch") && via.branch.is_none() {
            via.branch = Some(value?);
        } else if name.eq_ignore_ascii_case(b"received") && via.received.is_none() {
            via.received = Some(value?);
        } else if name.eq_ignore_ascii_case(b"rport") && via.rport.is_none() {
            via.rport = Some(match value {
                Some(v) => Some(u16::try_from(frame::parse_decimal(v)?).ok()?),
                None => None,
            });
            via.rport_range = Some(prm.whole);
        }
    }
    Some(via)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &str = "INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP [2001:db8::1]:5070;branch=z9hG4bKa;rport, SIP/2.0/TCP b.example.com;received=10.0.0.1;branch=z9hG4bKb\r\n\
v: SIP/2.0/UDP c.example.com:5062;rport=1234;branch=z9hG4bKc\r\n\
Max-Forwards: 70\r\n\
Route: <sip:p1.example.com;lr>, \"Odd, \\\"name\\\"\" <sip:p2.example.com;lr>\r\n\
Route: <sip:p3.example.com;lr>\r\n\
From: \"Alice\" <sip:alice@example.com>;TAG=a1;x=y\r\n\
t: sip:bob@example.com;foo;tag=b2\r\n\
i: abc@host\r\n\
CSeq: 7 INVITE\r\n\
m: <sip:alice@192.0.2.1;transport=tcp>;expires=60, sip:alt@192.0.2.2;q=0.5\r\n\
Expires: 99999999999\r\n\
X-Custom: a, b\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\r\nIGNORED";

    fn parse(s: &str) -> Result<SipMessage, ParseError> {
        SipMessage::parse(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn reasons_match_display() {
        use ParseError::*;
        for e in [
            Empty,
            Unterminated,
            BadRequestLine,
            BadStatusLine,
            UnsupportedVersion,
            BadHeader,
            BadContentLength,
            BodyTooShort,
            MissingVia,
            MissingFrom,
            MissingTo,
            MissingCallId,
            MissingCSeq,
            DuplicateFrom,
            DuplicateTo,
            DuplicateCallId,
            DuplicateCSeq,
            BadVia,
            BadFrom,
            BadTo,
            BadCSeq,
            CSeqMethodMismatch,
            BadMaxForwards,
            BadRoute,
            BadRecordRoute,
            BadContact,
        ] {
            assert_eq!(e.to_string(), e.reason());
        }
    }

    #[test]
    fn full_invite() {
        let m = parse(INVITE).unwrap();
        assert!(m.is_request());
        assert_eq!(m.method(), Some(Method::Invite));
        assert_eq!(m.request_uri(), Some(&b"sip:bob@example.com"[..]));
        assert_eq!(m.call_id(), Some(&b"abc@host"[..]));
        assert_eq!(m.cseq(), Some((7, Method::Invite)));
        assert_eq!(m.from_tag(), Some(&b"a1"[..]));
        assert_eq!(m.to_tag(), Some(&b"b2"[..]));
        assert_eq!(m.from_uri(), Some(&b"sip:alice@example.com"[..]));
        assert_eq!(m.to_uri(), Some(&b"sip:bob@example.com"[..]));
        assert_eq!(m.max_forwards(), Some(Ok(70)));
        assert_eq!(m.expires(), Some(u32::MAX));
        assert_eq!(m.body(), b"v=0\r");

        let vias: Vec<_> = m.vias().collect();
        assert_eq!(vias.len(), 3);
        assert_eq!(vias[0].host, b"[2001:db8::1]");
        assert_eq!(vias[0].port, Some(5070));
        assert_eq!(vias[0].rport, Some(None));
        assert_eq!(m.slice(vias[0].rport_range.clone().unwrap()), b"rport");
        assert_eq!(vias[0].branch, Some(&b"z9hG4bKa"[..]));
        assert_eq!(vias[1].transport, b"TCP");
        assert_eq!(vias[1].received, Some(&b"10.0.0.1"[..]));
        assert_eq!(vias[1].field_index, vias[0].field_index);
        assert_eq!(vias[2].rport, Some(Some(1234)));
        assert_eq!(vias[2].port, Some(5062));
        assert_eq!(m.top_via().unwrap().branch, Some(&b"z9hG4bKa"[..]));

        let routes = m.routes();
        assert_eq!(routes.len(), 3);
        assert_eq!(m.slice(routes[1].uri.clone()), b"sip:p2.example.com;lr");
        assert_eq!(
            m.slice(routes[1].range.clone()),
            b"\"Odd, \\\"name\\\"\" <sip:p2.example.com;lr>"
        );
        assert_eq!(routes[2].field_index, routes[0].field_index + 1);
        assert!(m.record_routes().is_empty());

        let contacts = m.contacts();
        assert_eq!(contacts.len(), 2);
        assert_eq!(
            m.slice(contacts[0].uri.clone()),
            b"sip:alice@192.0.2.1;transport=tcp"
        );
        assert_eq!(contacts[0].expires, Some(60));
        assert_eq!(m.slice(contacts[1].uri.clone()), b"sip:alt@192.0.2.2");
        assert_eq!(contacts[1].expires, None);

        let custom: Vec<_> = m.fields(HeaderName::Other).collect();
        assert_eq!(custom.len(), 1);
        assert_eq!(m.slice(custom[0].name_range.clone()), b"X-Custom");
        assert!(m.has_mandatory());
        assert_eq!(&m.raw()[m.header_end()..m.header_end() + 2], b"\r\n");
    }

    #[test]
    fn compact_names() {
        for (c, h) in [
            ("i", HeaderName::CallId),
            ("M", HeaderName::Contact),
            ("e", HeaderName::ContentEncoding),
            ("l", HeaderName::ContentLength),
            ("c", HeaderName::ContentType),
            ("f", HeaderName::From),
            ("s", HeaderName::Subject),
            ("k", HeaderName::Supported),
            ("t", HeaderName::To),
            ("v", HeaderName::Via),
            ("o", HeaderName::Event),
            ("u", HeaderName::AllowEvents),
            ("r", HeaderName::ReferTo),
            ("b", HeaderName::ReferredBy),
            ("x", HeaderName::SessionExpires),
            ("y", HeaderName::Identity),
            ("z", HeaderName::Other),
            ("rEcOrD-rOuTe", HeaderName::RecordRoute),
            ("X-Foo", HeaderName::Other),
        ] {
            assert_eq!(HeaderName::from_bytes(c.as_bytes()), h, "{c}");
        }
        assert_eq!(HeaderName::CallId.as_str(), Some("Call-ID"));
        assert_eq!(Method::Prack.as_str(), Some("PRACK"));
        assert_eq!(Method::from_token(b"invite"), Method::Other);
    }

    #[test]
    fn response_and_extension_method() {
        let r = "SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <tel:+15551234>;tag=1\r\nTo: <tel:+15550000>\r\nCall-ID: x\r\nCSeq: 1 FOO\r\n\r\n";
        let m = parse(r).unwrap();
        assert_eq!(m.code(), Some(180));
        assert_eq!(m.method(), None);
        assert_eq!(m.method_bytes(), b"");
        assert_eq!(m.cseq(), Some((1, Method::Other)));
        assert_eq!(m.cseq_method_bytes(), Some(&b"FOO"[..]));
        assert_eq!(m.from_uri(), Some(&b"tel:+15551234"[..]));
        assert_eq!(m.to_tag(), None);
        assert_eq!(m.body(), b"");

        let q = "FOO tel:+1-555-1234;phone-context=x SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: tel:+1;tag=1\r\nTo: <tel:+2>\r\nCall-ID: x\r\nCSeq: 1 FOO\r\n\r\nrest";
        let m = parse(q).unwrap();
        assert_eq!(m.method(), Some(Method::Other));
        assert_eq!(m.method_bytes(), b"FOO");
        assert_eq!(
            m.request_uri(),
            Some(&b"tel:+1-555-1234;phone-context=x"[..])
        );
        assert_eq!(m.from_uri(), Some(&b"tel:+1"[..]));
        assert_eq!(m.body(), b"rest");
    }

    #[test]
    fn errors() {
        let base = |extra: &str, cseq: &str| {
            format!(
                "OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: x\r\nCSeq: {cseq}\r\n{extra}\r\n"
            )
        };
        assert!(parse(&base("", "1 OPTIONS")).is_ok());
        assert_eq!(
            parse(&base("", "1 INVITE")).unwrap_err(),
            ParseError::CSeqMethodMismatch
        );
        assert_eq!(
            parse(&base("", "4294967296 OPTIONS")).unwrap_err(),
            ParseError::BadCSeq
        );
        assert_eq!(
            parse(&base("", "OPTIONS")).unwrap_err(),
            ParseError::BadCSeq
        );
        assert_eq!(
            parse(&base("Max-Forwards: 256\r\n", "1 OPTIONS")).unwrap_err(),
            ParseError::BadMaxForwards
        );
        assert_eq!(
            parse(&base("Call-ID: y\r\n", "1 OPTIONS")).unwrap_err(),
            ParseError::DuplicateCallId
        );
        assert_eq!(
            parse(&base("no colon\r\n", "1 OPTIONS")).unwrap_err(),
            ParseError::BadHeader
        );
        assert_eq!(
            parse(&base("Content-Length: 5\r\n", "1 OPTIONS")).unwrap_err(),
            ParseError::BodyTooShort
        );
        assert_eq!(
            parse(&base("Route: <sip:x\r\n", "1 OPTIONS")).unwrap_err(),
            ParseError::BadRoute
        );
        assert_eq!(
            parse(&base("v: SIP/2.0/UDP\r\n", "1 OPTIONS")).unwrap_err(),
            ParseError::BadVia
        );
        assert_eq!(
            parse(&base("Contact: \"unterminated <sip:x>\r\n", "1 OPTIONS")).unwrap_err(),
            ParseError::BadContact
        );
        assert_eq!(parse("").unwrap_err(), ParseError::Empty);
        assert_eq!(parse("\r\n\r\n").unwrap_err(), ParseError::Empty);
        assert_eq!(
            parse("OPTIONS sip:a SIP/2.0\r\nVia: x").unwrap_err(),
            ParseError::Unterminated
        );
        assert_eq!(
            parse("<bad> sip:a SIP/2.0\r\n\r\n").unwrap_err(),
            ParseError::BadRequestLine
        );
        assert_eq!(
            parse("SIP/2.0 99 x\r\n\r\n").unwrap_err(),
            ParseError::BadStatusLine
        );
        let m = SipMessage::scan(Bytes::from_static(b"OPTIONS sip:a SIP/3.0\r\n\r\n")).unwrap();
        assert_eq!(m.validate(), Err(ParseError::UnsupportedVersion));
        assert!(!m.has_mandatory());
    }

    #[test]
    fn star_contact_and_leading_crlf() {
        let r = "\r\n\r\nREGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@example.com>;tag=1\r\nTo: <sip:a@example.com>\r\nCall-ID: x\r\nCSeq: 2 REGISTER\r\nContact: *\r\nExpires: 0\r\nl: 0\r\n\r\n";
        let m = parse(r).unwrap();
        let c = m.contacts();
        assert_eq!(c.len(), 1);
        assert!(c[0].star);
        assert_eq!(m.expires(), Some(0));
        assert_eq!(m.method(), Some(Method::Register));
    }

    #[test]
    fn split_list_respects_quotes_and_angles() {
        let v = br#"a, "x,\"y" <sip:a,b>;p=1 , ,<c>"#;
        let parts = split_list(v, 0..v.len()).unwrap();
        let parts: Vec<&[u8]> = parts.into_iter().map(|r| &v[r]).collect();
        assert_eq!(
            parts,
            vec![&b"a"[..], &br#""x,\"y" <sip:a,b>;p=1"#[..], &b"<c>"[..]]
        );
        assert_eq!(split_list(b"<a", 0..2), None);
        assert_eq!(split_list(b"\"a", 0..2), None);
    }
}
