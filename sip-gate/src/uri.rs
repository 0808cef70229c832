//! Just enough of a SIP URI to route: user, host, port and the `transport`
//! and `lr` parameters. Works on the bytes of the message, no allocation.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The parts of a `sip:`/`sips:` URI the gate routes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SipUri<'a> {
    /// `sips` scheme.
    pub(crate) secure: bool,
    /// User part, if any (still escaped).
    pub(crate) user: Option<&'a [u8]>,
    /// Host (without IPv6 brackets).
    pub(crate) host: &'a [u8],
    /// Port, if written.
    pub(crate) port: Option<u16>,
    /// `transport=` parameter, if any.
    pub(crate) transport: Option<&'a [u8]>,
    /// `lr` parameter present.
    pub(crate) lr: bool,
}

/// Whether a `sip:`/`sips:` URI carries URI headers (`?name=value`, RFC
/// 3261 19.1.1), which a Request-URI must not (RFC 4475 3.1.2.11). A `?`
/// in the user part is no header (`user-unreserved`, RFC 3261 25.1): only
/// one after the `@` that ends the userinfo, or anywhere when there is
/// none, starts them. Other schemes: false.
pub(crate) fn has_headers(uri: &[u8]) -> bool {
    let Some(rest) = strip_prefix_ci(uri, b"sips:").or_else(|| strip_prefix_ci(uri, b"sip:"))
    else {
        return false;
    };
    let host = memchr::memchr(b'@', rest).map_or(rest, |at| &rest[at + 1..]);
    host.contains(&b'?')
}

impl<'a> SipUri<'a> {
    /// Parses a `sip:` or `sips:` URI; `None` for other schemes (tel:, ...) or
    /// malformed input.
    pub(crate) fn parse(uri: &'a [u8]) -> Option<SipUri<'a>> {
        let (secure, rest) = if let Some(r) = strip_prefix_ci(uri, b"sips:") {
            (true, r)
        } else {
            (false, strip_prefix_ci(uri, b"sip:")?)
        };
        // Headers (`?...`) never matter for routing.
        let rest = memchr::memchr(b'?', rest).map_or(rest, |q| &rest[..q]);
        let (userinfo, hostpart) = match memchr::memrchr(b'@', rest) {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        // A token user part is long: its `:` (a password) is looked for a
        // vector at a time.
        let user = userinfo.map(|u| memchr::memchr(b':', u).map_or(u, |c| &u[..c]));
        let mut parts = hostpart.split(|&b| b == b';');
        let hostport = parts.next()?;
        let (host, port) = split_hostport(hostport)?;
        let mut transport = None;
        let mut lr = false;
        for p in parts {
            let mut kv = p.splitn(2, |&b| b == b'=');
            let k = kv.next().unwrap_or_default();
            if k.eq_ignore_ascii_case(b"transport") {
                transport = kv.next();
            } else if k.eq_ignore_ascii_case(b"lr") {
                lr = true;
            }
        }
        Some(SipUri {
            secure,
            user,
            host,
            port,
            transport,
            lr,
        })
    }

    /// True if a stream is asked for: `transport=tcp`, or TLS
    /// ([`SipUri::wants_tls`]), which runs over TCP.
    pub(crate) fn wants_tcp(&self) -> bool {
        self.wants_tls()
            || self
                .transport
                .is_some_and(|t| t.eq_ignore_ascii_case(b"tcp"))
    }

    /// True if TLS is asked for: a `sips:` URI (RFC 5630) or the older
    /// `transport=tls`.
    pub(crate) fn wants_tls(&self) -> bool {
        self.secure
            || self
                .transport
                .is_some_and(|t| t.eq_ignore_ascii_case(b"tls"))
    }

    /// True if the URI names a WebSocket transport (`transport=ws` or
    /// `wss`, RFC 7118 5): a client reached only on a connection it opened.
    pub(crate) fn wants_ws(&self) -> bool {
        self.transport
            .is_some_and(|t| t.eq_ignore_ascii_case(b"ws") || t.eq_ignore_ascii_case(b"wss"))
    }

    /// Whether the URI names its transport: a `transport` parameter, or the
    /// `sips` scheme (TLS).
    pub(crate) fn names_transport(&self) -> bool {
        self.secure || self.transport.is_some()
    }

    /// The socket address, when the host is an IP literal.
    pub(crate) fn socket_addr(&self) -> Option<SocketAddr> {
        let ip = parse_ip(self.host)?;
        Some(SocketAddr::new(
            ip,
            self.port.unwrap_or(if self.secure { 5061 } else { 5060 }),
        ))
    }
}

/// Splits `host[:port]`, `[v6][:port]`.
pub(crate) fn split_hostport(hp: &[u8]) -> Option<(&[u8], Option<u16>)> {
    let hp = trim(hp);
    if hp.is_empty() {
        return None;
    }
    if hp[0] == b'[' {
        let close = memchr::memchr(b']', hp)?;
        let host = &hp[1..close];
        let after = &hp[close + 1..];
        let port = match after {
            [] => None,
            [b':', p @ ..] => Some(parse_port(p)?),
            _ => return None,
        };
        return Some((host, port));
    }
    match memchr::memchr(b':', hp) {
        Some(c) => Some((&hp[..c], Some(parse_port(&hp[c + 1..])?))),
        None => Some((hp, None)),
    }
}

/// The IP of a host (a Via sent-by or `received`), IPv6 with or without its
/// brackets (`[::1]`); `None` for a host name.
pub(crate) fn host_ip(host: &[u8]) -> Option<IpAddr> {
    let host = trim(host);
    let host = host
        .strip_prefix(b"[")
        .and_then(|h| h.strip_suffix(b"]"))
        .unwrap_or(host);
    parse_ip(host)
}

/// An IP address as `IpAddr`'s `FromStr` reads it. Dotted IPv4, nearly
/// every host the gate routes on, is read here without the UTF-8 check and
/// the generic parser; anything else goes to `FromStr`.
pub(crate) fn parse_ip(host: &[u8]) -> Option<IpAddr> {
    if let Some(v4) = parse_ipv4(host) {
        return Some(IpAddr::V4(v4));
    }
    std::str::from_utf8(host).ok()?.parse().ok()
}

/// Four decimal octets of one to three digits, no leading zero, each at
/// most 255: what `Ipv4Addr`'s `FromStr` accepts, so a `None` here is
/// never one it would read differently (the caller asks it then).
fn parse_ipv4(b: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = b.split(|&c| c == b'.');
    for o in &mut octets {
        let d = parts.next()?;
        if d.is_empty() || d.len() > 3 || (d.len() > 1 && d[0] == b'0') {
            return None;
        }
        let mut n: u16 = 0;
        for &c in d {
            if !c.is_ascii_digit() {
                return None;
            }
            n = n * 10 + u16::from(c - b'0');
        }
        *o = u8::try_from(n).ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(Ipv4Addr::from(octets))
}

/// One to five digits (leading zeros allowed) up to 65535, as `u16`'s
/// `FromStr` reads them without a sign.
fn parse_port(p: &[u8]) -> Option<u16> {
    if p.is_empty() || p.len() > 5 {
        return None;
    }
    let mut n: u32 = 0;
    for &c in p {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u32::from(c - b'0');
    }
    u16::try_from(n).ok()
}

/// The URI after its `sip:` or `sips:` scheme (either case); `None` for
/// another scheme. A user part starts right there.
pub(crate) fn after_sip_scheme(uri: &[u8]) -> Option<&[u8]> {
    strip_prefix_ci(uri, b"sips:").or_else(|| strip_prefix_ci(uri, b"sip:"))
}

/// Whether the URI's scheme is `sips:` (either case).
pub(crate) fn is_sips(uri: &[u8]) -> bool {
    strip_prefix_ci(uri, b"sips:").is_some()
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

fn strip_prefix_ci<'a>(b: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if b.len() >= prefix.len() && b[..prefix.len()].eq_ignore_ascii_case(prefix) {
        Some(&b[prefix.len()..])
    } else {
        None
    }
}

#[cfg(test)]
mod fast_parse_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The fast readers agree with `FromStr` on anything: digits, dots
        /// and a few other bytes, so near-misses (leading zeros, 256, five
        /// parts, empty parts) come up often.
        #[test]
        fn ip_and_port_read_as_from_str_does(s in "[0-9.:a-f]{0,20}") {
            prop_assert_eq!(parse_ip(s.as_bytes()), s.parse::<IpAddr>().ok());
            let port = if s.is_empty() || s.len() > 5 || !s.bytes().all(|c| c.is_ascii_digit()) {
                None
            } else {
                s.parse::<u16>().ok()
            };
            prop_assert_eq!(parse_port(s.as_bytes()), port);
        }
    }

    #[test]
    fn ipv4_edges() {
        for s in [
            "0.0.0.0",
            "255.255.255.255",
            "127.0.0.1",
            "1.2.3.04",
            "256.1.1.1",
            "1.2.3",
            "1.2.3.4.5",
            "1..2.3",
            "01.2.3.4",
            "::1",
            "[::1]",
            "1.2.3.4 ",
        ] {
            assert_eq!(parse_ip(s.as_bytes()), s.parse::<IpAddr>().ok(), "{s}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_headers_follow_the_host_a_question_mark_in_the_user_is_none_rfc3261_19_1_1() {
        // RFC 4475 3.1.2.11 escruri.
        assert!(has_headers(
            b"sip:user@example.com?Route=%3Csip:example.com%3E"
        ));
        assert!(has_headers(b"SIPS:example.com;lr?subject=x"));
        assert!(!has_headers(b"sip:user@example.com;lr"));
        // user-unreserved includes `?` (RFC 3261 25.1).
        assert!(!has_headers(b"sip:a?b@example.com"));
        assert!(!has_headers(b"tel:+1-201-555-0123?x"));
    }

    #[test]
    fn parses_route_uris() {
        let u =
            SipUri::parse(b"sip:g1.sg-a.0011223344556677@127.0.0.1:5060;lr;transport=TCP").unwrap();
        assert_eq!(u.user, Some(&b"g1.sg-a.0011223344556677"[..]));
        assert_eq!(u.host, b"127.0.0.1");
        assert_eq!(u.port, Some(5060));
        assert!(u.lr && u.wants_tcp());
        assert_eq!(u.socket_addr(), Some("127.0.0.1:5060".parse().unwrap()));

        let u = SipUri::parse(b"SIP:[::1]:5070;lr").unwrap();
        assert_eq!(u.socket_addr(), Some("[::1]:5070".parse().unwrap()));
        let u = SipUri::parse(b"sip:alice:secret@example.com?subject=x").unwrap();
        assert_eq!(u.user, Some(&b"alice"[..]));
        assert_eq!(u.host, b"example.com");
        assert_eq!(u.socket_addr(), None);
        assert_eq!(SipUri::parse(b"sips:h").unwrap().socket_addr(), None);
    }

    #[test]
    fn tls_is_asked_by_sips_or_transport_tls() {
        let sips = SipUri::parse(b"sips:bob@127.0.0.1").unwrap();
        assert!(sips.wants_tls() && sips.wants_tcp() && sips.names_transport());
        assert_eq!(sips.socket_addr(), Some("127.0.0.1:5061".parse().unwrap()));
        let tls = SipUri::parse(b"sip:bob@127.0.0.1:5071;transport=TLS").unwrap();
        assert!(tls.wants_tls() && tls.wants_tcp());
        let tcp = SipUri::parse(b"sip:bob@127.0.0.1;transport=tcp").unwrap();
        assert!(!tcp.wants_tls() && tcp.wants_tcp());
        let plain = SipUri::parse(b"sip:bob@127.0.0.1").unwrap();
        assert!(!plain.wants_tls() && !plain.wants_tcp() && !plain.names_transport());
    }

    #[test]
    fn host_ips() {
        assert_eq!(host_ip(b"[::1]"), Some("::1".parse().unwrap()));
        assert_eq!(host_ip(b"::1"), Some("::1".parse().unwrap()));
        assert_eq!(host_ip(b" 127.0.0.1 "), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(host_ip(b"example.com"), None);
        assert_eq!(host_ip(b"[::1"), None);
    }

    #[test]
    fn rejects_garbage_without_panic() {
        for bad in [
            &b"tel:+12345"[..],
            b"sip:",
            b"sip:[::1",
            b"sip:h:99999",
            b"sip:h:",
            b"sip:[::1]x",
            b"",
            b"sip:@",
        ] {
            assert!(
                SipUri::parse(bad).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
