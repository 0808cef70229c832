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

/// [`HEADER_NAMES`] by length, so a name is compared with the few of its
/// length only (a test checks the two agree).
const BY_LENGTH: [&[(&[u8], HeaderName)]; 20] = [
    &[],
    &[],
    &[(b"To", HeaderName::To)],
    &[(b"Via", HeaderName::Via)],
    &[
        (b"CSeq", HeaderName::CSeq),
        (b"From", HeaderName::From),
        (b"Path", HeaderName::Path),
        (b"RSeq", HeaderName::RSeq),
        (b"RAck", HeaderName::RAck),
    ],
    &[
        (b"Route", HeaderName::Route),
        (b"Event", HeaderName::Event),
        (b"Allow", HeaderName::Allow),
    ],
    &[(b"Server", HeaderName::Server)],
    &[
        (b"Call-ID", HeaderName::CallId),
        (b"Contact", HeaderName::Contact),
        (b"Expires", HeaderName::Expires),
        (b"Subject", HeaderName::Subject),
        (b"Require", HeaderName::Require),
    ],
    &[
        (b"Refer-To", HeaderName::ReferTo),
        (b"Identity", HeaderName::Identity),
    ],
    &[(b"Supported", HeaderName::Supported)],
    &[(b"User-Agent", HeaderName::UserAgent)],
    &[
        (b"Referred-By", HeaderName::ReferredBy),
        (b"Unsupported", HeaderName::Unsupported),
        (b"Retry-After", HeaderName::RetryAfter),
        (b"Min-Expires", HeaderName::MinExpires),
    ],
    &[
        (b"Max-Forwards", HeaderName::MaxForwards),
        (b"Record-Route", HeaderName::RecordRoute),
        (b"Content-Type", HeaderName::ContentType),
        (b"Allow-Events", HeaderName::AllowEvents),
    ],
    &[
        (b"Proxy-Require", HeaderName::ProxyRequire),
        (b"Service-Route", HeaderName::ServiceRoute),
        (b"Authorization", HeaderName::Authorization),
    ],
    &[(b"Content-Length", HeaderName::ContentLength)],
    &[(b"Session-Expires", HeaderName::SessionExpires)],
    &[
        (b"Content-Encoding", HeaderName::ContentEncoding),
        (b"WWW-Authenticate", HeaderName::WwwAuthenticate),
    ],
    &[],
    &[
        (b"Proxy-Authenticate", HeaderName::ProxyAuthenticate),
        (b"Subscription-State", HeaderName::SubscriptionState),
    ],
    &[(b"Proxy-Authorization", HeaderName::ProxyAuthorization)],
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
        BY_LENGTH
            .get(name.len())
            .and_then(|names| {
                names
                    .iter()
                    .find(|(long, _)| long.eq_ignore_ascii_case(name))
            })
            .map_or(HeaderName::Other, |&(_, h)| h)
    }

    /// The canonical long name, `None` for `Other`.
    pub fn as_str(&self) -> Option<&'static str> {
        HEADER_NAMES
            .iter()
            .find(|(_, _, h)| h == self)
            .and_then(|(long, _, _)| std::str::from_utf8(long).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::{HeaderName, BY_LENGTH, HEADER_NAMES};

    #[test]
    fn the_table_by_length_holds_every_header_name_once_at_its_length() {
        let by_length: usize = BY_LENGTH.iter().map(|names| names.len()).sum();
        assert_eq!(by_length, HEADER_NAMES.len());
        for (long, compact, h) in HEADER_NAMES {
            assert!(BY_LENGTH[long.len()].contains(&(*long, *h)), "{h:?}");
            assert_eq!(HeaderName::from_bytes(long), *h);
            assert_eq!(HeaderName::from_bytes(&long.to_ascii_lowercase()), *h);
            if let Some(c) = compact {
                assert_eq!(HeaderName::from_bytes(&[*c]), *h);
            }
        }
        assert_eq!(HeaderName::from_bytes(b"X-Via"), HeaderName::Other);
        assert_eq!(HeaderName::from_bytes(&[b'V'; 40]), HeaderName::Other);
    }
}
