//! Request methods and header names, compact forms folded into the long ones.

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
        match token {
            b"INVITE" => Method::Invite,
            b"ACK" => Method::Ack,
            b"BYE" => Method::Bye,
            b"CANCEL" => Method::Cancel,
            b"REGISTER" => Method::Register,
            b"SUBSCRIBE" => Method::Subscribe,
            b"NOTIFY" => Method::Notify,
            b"OPTIONS" => Method::Options,
            b"UPDATE" => Method::Update,
            b"PRACK" => Method::Prack,
            b"INFO" => Method::Info,
            b"MESSAGE" => Method::Message,
            b"REFER" => Method::Refer,
            b"PUBLISH" => Method::Publish,
            _ => Method::Other,
        }
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
    /// Subscription-State (RFC 6665)
    SubscriptionState,
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
    (b"Subscription-State", None, HeaderName::SubscriptionState),
];

impl HeaderName {
    /// Classifies a header name, case-insensitively, compact forms included.
    #[inline]
    pub fn from_bytes(name: &[u8]) -> HeaderName {
        let (Some(&first), Some(&last)) = (name.first(), name.last()) else {
            return HeaderName::Other;
        };
        // Length and first letter leave one candidate (the last letter
        // splits the three pairs that share both), so a name costs one
        // comparison. `| 0x20` lowercases a letter and maps no other byte
        // to one.
        let (long, h): (&[u8], HeaderName) = match (name.len(), first | 0x20) {
            (1, c) => return compact(c),
            (2, b't') => (b"to", HeaderName::To),
            (3, b'v') => (b"via", HeaderName::Via),
            (4, b'c') => (b"cseq", HeaderName::CSeq),
            (4, b'f') => (b"from", HeaderName::From),
            (4, b'p') => (b"path", HeaderName::Path),
            (4, b'r') if last | 0x20 == b'q' => (b"rseq", HeaderName::RSeq),
            (4, b'r') => (b"rack", HeaderName::RAck),
            (5, b'r') => (b"route", HeaderName::Route),
            (5, b'e') => (b"event", HeaderName::Event),
            (5, b'a') => (b"allow", HeaderName::Allow),
            (6, b's') => (b"server", HeaderName::Server),
            (7, b'c') if last | 0x20 == b'd' => (b"call-id", HeaderName::CallId),
            (7, b'c') => (b"contact", HeaderName::Contact),
            (7, b'e') => (b"expires", HeaderName::Expires),
            (7, b's') => (b"subject", HeaderName::Subject),
            (7, b'r') => (b"require", HeaderName::Require),
            (8, b'r') => (b"refer-to", HeaderName::ReferTo),
            (8, b'i') => (b"identity", HeaderName::Identity),
            (9, b's') => (b"supported", HeaderName::Supported),
            (10, b'u') => (b"user-agent", HeaderName::UserAgent),
            (11, b'r') if last | 0x20 == b'y' => (b"referred-by", HeaderName::ReferredBy),
            (11, b'r') => (b"retry-after", HeaderName::RetryAfter),
            (11, b'u') => (b"unsupported", HeaderName::Unsupported),
            (11, b'm') => (b"min-expires", HeaderName::MinExpires),
            (12, b'm') => (b"max-forwards", HeaderName::MaxForwards),
            (12, b'r') => (b"record-route", HeaderName::RecordRoute),
            (12, b'c') => (b"content-type", HeaderName::ContentType),
            (12, b'a') => (b"allow-events", HeaderName::AllowEvents),
            (13, b'p') => (b"proxy-require", HeaderName::ProxyRequire),
            (13, b's') => (b"service-route", HeaderName::ServiceRoute),
            (13, b'a') => (b"authorization", HeaderName::Authorization),
            (14, b'c') => (b"content-length", HeaderName::ContentLength),
            (15, b's') => (b"session-expires", HeaderName::SessionExpires),
            (16, b'c') => (b"content-encoding", HeaderName::ContentEncoding),
            (16, b'w') => (b"www-authenticate", HeaderName::WwwAuthenticate),
            (18, b'p') => (b"proxy-authenticate", HeaderName::ProxyAuthenticate),
            (18, b's') => (b"subscription-state", HeaderName::SubscriptionState),
            (19, b'p') => (b"proxy-authorization", HeaderName::ProxyAuthorization),
            _ => return HeaderName::Other,
        };
        if eq_folded(name, long) {
            h
        } else {
            HeaderName::Other
        }
    }

    /// The header a name is, `None` for `Other`. Only a known name, which
    /// is made of token bytes, is `Some` (the lexer relies on that).
    #[inline]
    pub(crate) fn known(name: &[u8]) -> Option<HeaderName> {
        Some(HeaderName::from_bytes(name)).filter(|h| *h != HeaderName::Other)
    }

    /// The canonical long name, `None` for `Other`.
    pub fn as_str(&self) -> Option<&'static str> {
        HEADER_NAMES
            .iter()
            .find(|(_, _, h)| h == self)
            .and_then(|(long, _, _)| std::str::from_utf8(long).ok())
    }
}

/// The long form of a compact header name, already lowercased.
fn compact(c: u8) -> HeaderName {
    match c {
        b'v' => HeaderName::Via,
        b'i' => HeaderName::CallId,
        b'f' => HeaderName::From,
        b't' => HeaderName::To,
        b'm' => HeaderName::Contact,
        b'l' => HeaderName::ContentLength,
        b'c' => HeaderName::ContentType,
        b'e' => HeaderName::ContentEncoding,
        b'o' => HeaderName::Event,
        b's' => HeaderName::Subject,
        b'k' => HeaderName::Supported,
        b'u' => HeaderName::AllowEvents,
        b'r' => HeaderName::ReferTo,
        b'b' => HeaderName::ReferredBy,
        b'x' => HeaderName::SessionExpires,
        b'y' => HeaderName::Identity,
        _ => HeaderName::Other,
    }
}

/// Whether `name` is `lower` (lowercase letters and `-` only) in any case.
/// Each byte is compared with its case bit set only where `lower` has a
/// letter (letters have 0x40, `-` has not), so no byte but the two cases
/// of that letter matches; whole words at a time, the last one overlapping.
#[inline]
fn eq_folded(name: &[u8], lower: &[u8]) -> bool {
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n >= 8 {
        let mut at = 0;
        while at + 8 < n {
            if !word_eq::<8>(name, lower, at) {
                return false;
            }
            at += 8;
        }
        return word_eq::<8>(name, lower, n - 8);
    }
    if n >= 4 {
        return word_eq::<4>(name, lower, 0) && word_eq::<4>(name, lower, n - 4);
    }
    if n >= 2 {
        return word_eq::<2>(name, lower, 0) && word_eq::<2>(name, lower, n - 2);
    }
    name.iter()
        .zip(lower)
        .all(|(&a, &b)| a | ((b & 0x40) >> 1) == b)
}

/// [`eq_folded`] on the `N` bytes at `at` (false if they are not there).
fn word_eq<const N: usize>(name: &[u8], lower: &[u8], at: usize) -> bool {
    let word = |s: &[u8]| -> Option<u64> {
        let bytes = <[u8; N]>::try_from(s.get(at..at.checked_add(N)?)?).ok()?;
        Some(bytes.iter().rev().fold(0, |w, &b| w << 8 | u64::from(b)))
    };
    let (Some(a), Some(b)) = (word(name), word(lower)) else {
        return false;
    };
    // `b`'s bytes beyond `N` are zero, so the mask is too.
    let case = (b & 0x4040_4040_4040_4040) >> 1;
    a | case == b
}

#[cfg(test)]
mod tests {
    use super::{HeaderName, Method, HEADER_NAMES, METHODS};

    #[test]
    fn every_method_is_classified_case_sensitively() {
        for (name, m) in METHODS {
            assert_eq!(Method::from_token(name.as_bytes()), *m);
            assert_eq!(m.as_str(), Some(*name));
            let lower = name.to_ascii_lowercase();
            assert_eq!(Method::from_token(lower.as_bytes()), Method::Other);
            assert_eq!(Method::from_token(&name.as_bytes()[1..]), Method::Other);
        }
        assert_eq!(Method::from_token(b"FOO"), Method::Other);
        assert_eq!(Method::from_token(b""), Method::Other);
    }

    /// Every known name in three cases and its compact form in two is
    /// classified; a name one byte off (a changed letter, a CR for a `-`,
    /// one byte short or long) is `Other`.
    #[test]
    fn every_header_name_and_compact_form_is_classified_and_near_misses_are_not() {
        for (long, compact, h) in HEADER_NAMES {
            let upper = long.to_ascii_uppercase();
            let lower = long.to_ascii_lowercase();
            let mixed: Vec<u8> = long
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        b.to_ascii_uppercase()
                    } else {
                        b.to_ascii_lowercase()
                    }
                })
                .collect();
            for name in [long.to_vec(), upper, lower, mixed] {
                assert_eq!(HeaderName::from_bytes(&name), *h, "{name:?}");
            }
            if let Some(c) = compact {
                assert_eq!(HeaderName::from_bytes(&[*c]), *h);
                assert_eq!(HeaderName::from_bytes(&[c.to_ascii_uppercase()]), *h);
            }
            for i in 0..long.len() {
                for swap in [b'\r', b'-', b'q', b'_', b'\0', long[i] ^ 0x20 ^ 0x01] {
                    let mut near = long.to_vec();
                    if near[i].eq_ignore_ascii_case(&swap) {
                        continue;
                    }
                    near[i] = swap;
                    assert_eq!(HeaderName::from_bytes(&near), HeaderName::Other, "{near:?}");
                }
            }
            if long.len() > 2 {
                // ("o", from "To", is a compact form.)
                assert_eq!(HeaderName::from_bytes(&long[1..]), HeaderName::Other);
            }
            assert_eq!(
                HeaderName::from_bytes(&[long, &b"s"[..]].concat()),
                HeaderName::Other
            );
            assert_eq!(h.as_str().map(str::as_bytes), Some(*long));
        }
        let compacts = HEADER_NAMES.iter().filter_map(|(_, c, _)| *c);
        for c in 0..=255u8 {
            if !compacts.clone().any(|k| k.eq_ignore_ascii_case(&c)) {
                assert_eq!(HeaderName::from_bytes(&[c]), HeaderName::Other, "{c}");
            }
        }
        assert_eq!(HeaderName::from_bytes(b""), HeaderName::Other);
        assert_eq!(HeaderName::from_bytes(b"X-Via"), HeaderName::Other);
        assert_eq!(HeaderName::from_bytes(&[b'V'; 40]), HeaderName::Other);
    }
}
