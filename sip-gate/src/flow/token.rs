//! The flow token: how a subscriber behind NAT is reached, written into the
//! Path the gate adds to its REGISTER (RFC 3327) and into the Record-Route
//! of its dialogs, as an edge proxy does in RFC 5626 section 5.2.
//!
//! A flow is the listener it came in on, the source address and port the
//! gate saw (after any NAT) and, over TCP, the connection and the process
//! that accepted it (`epoch`: connection ids restart with the process, so a
//! token of an earlier run never names a connection of this one). The token
//! carries a MAC over these and over the gate node's address (the host of
//! the URI it sits in), keyed with a key derived from the site secret for
//! this purpose only ([`crate::keys`]): nobody outside the site can make the
//! gate send into a flow of their choosing (R-SEC-2), and a token moved to
//! another node's URI does not verify.
//!
//! Form (a SIP user part as is): `f1.<flow>.<mac>`, both lowercase hex;
//! `<flow>` is `kind (0 udp, 1 tcp) | listener (u16) | 4 or 6 | ip | port
//! (u16) [| conn (u64) | epoch (u32)]`, all big-endian, and `<mac>` 80 bits.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::keys::{self, Key, Purpose};
use crate::txn::ConnId;

/// What a flow token starts with (a Record-Route token starts `g2.`).
pub(crate) const PREFIX: &[u8] = b"f1.";
const MAC_BYTES: usize = 10;
/// Longest payload: TCP over IPv6.
const MAX_FLOW: usize = 1 + 2 + 1 + 16 + 2 + 8 + 4;

/// How one subscriber is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flow {
    /// The listener the subscriber's messages come in on (and leave from).
    pub(crate) listener: usize,
    /// The source address and port the gate saw.
    pub(crate) peer: SocketAddr,
    /// Over TCP: the connection and the epoch of the process that holds it.
    pub(crate) tcp: Option<(ConnId, u32)>,
}

/// Why a flow token does not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FlowTokenError {
    /// Not of the form `f1.<flow>.<mac>`.
    #[error("malformed flow token")]
    Malformed,
    /// The MAC does not match: forged, another site's, or another node's.
    #[error("flow token fails authentication")]
    BadMac,
}

/// Makes and checks flow tokens with a site's secret.
#[derive(Clone, Debug)]
pub(crate) struct FlowKey {
    key: Key,
}

impl FlowKey {
    /// Derives the key from the site secret (its own KDF context).
    pub(crate) fn new(secret: &str) -> FlowKey {
        FlowKey {
            key: Key::derive(secret, Purpose::FlowToken),
        }
    }

    fn mac(&self, flow: &[u8], node: SocketAddr) -> [u8; MAC_BYTES] {
        let mut n = [0u8; 19];
        let len = put_addr(&mut n, node);
        // The flow has a fixed layout per kind and family: no separator needed.
        self.key.mac(&[flow, &n[..len]])
    }

    /// The token for `flow`, in a URI naming gate node `node`.
    pub(crate) fn seal(&self, flow: &Flow, node: SocketAddr) -> String {
        let mut raw = [0u8; MAX_FLOW];
        raw[0] = u8::from(flow.tcp.is_some());
        // Listener indexes come from a config file: far below 2^16.
        let listener = u16::try_from(flow.listener).unwrap_or(u16::MAX);
        raw[1..3].copy_from_slice(&listener.to_be_bytes());
        let mut len = 3 + put_addr(&mut raw[3..], flow.peer);
        if let Some((conn, epoch)) = flow.tcp {
            raw[len..len + 8].copy_from_slice(&conn.to_be_bytes());
            raw[len + 8..len + 12].copy_from_slice(&epoch.to_be_bytes());
            len += 12;
        }
        let payload = &raw[..len];
        let mut t = String::with_capacity(PREFIX.len() + 2 * len + 1 + 2 * MAC_BYTES);
        t.push_str("f1.");
        keys::push_hex(&mut t, payload);
        t.push('.');
        keys::push_hex(&mut t, &self.mac(payload, node));
        t
    }

    /// Checks a token found in a URI naming gate node `node`, and returns
    /// the flow it names.
    pub(crate) fn open(&self, token: &[u8], node: SocketAddr) -> Result<Flow, FlowTokenError> {
        let rest = token
            .strip_prefix(PREFIX)
            .ok_or(FlowTokenError::Malformed)?;
        let dot = memchr::memchr(b'.', rest).ok_or(FlowTokenError::Malformed)?;
        let (hex, mac) = (&rest[..dot], &rest[dot + 1..]);
        let mac = keys::parse_hex::<MAC_BYTES>(mac).ok_or(FlowTokenError::Malformed)?;
        let mut raw = [0u8; MAX_FLOW];
        let len = hex.len() / 2;
        let payload = raw.get_mut(..len).ok_or(FlowTokenError::Malformed)?;
        if hex.len() % 2 != 0 || !decode_hex(hex, payload) {
            return Err(FlowTokenError::Malformed);
        }
        let flow = decode(payload).ok_or(FlowTokenError::Malformed)?;
        if !keys::same(&self.mac(payload, node), &mac) {
            return Err(FlowTokenError::BadMac);
        }
        Ok(flow)
    }
}

/// Writes `family | ip | port` at the start of `out`; returns its length.
fn put_addr(out: &mut [u8], a: SocketAddr) -> usize {
    let ip_len = match a.ip() {
        IpAddr::V4(ip) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&ip.octets());
            4
        }
        IpAddr::V6(ip) => {
            out[0] = 6;
            out[1..17].copy_from_slice(&ip.octets());
            16
        }
    };
    out[1 + ip_len..3 + ip_len].copy_from_slice(&a.port().to_be_bytes());
    3 + ip_len
}

/// The flow a payload names; `None` unless the layout is exactly right.
fn decode(p: &[u8]) -> Option<Flow> {
    let (&kind, rest) = p.split_first()?;
    let (listener, rest) = rest.split_first_chunk::<2>()?;
    let (&family, rest) = rest.split_first()?;
    let (ip, rest): (IpAddr, &[u8]) = match family {
        4 => {
            let (ip, rest) = rest.split_first_chunk::<4>()?;
            (Ipv4Addr::from(*ip).into(), rest)
        }
        6 => {
            let (ip, rest) = rest.split_first_chunk::<16>()?;
            (Ipv6Addr::from(*ip).into(), rest)
        }
        _ => return None,
    };
    let (port, rest) = rest.split_first_chunk::<2>()?;
    let tcp = match (kind, rest.len()) {
        (0, 0) => None,
        (1, 12) => {
            let (conn, epoch) = rest.split_first_chunk::<8>()?;
            let epoch: [u8; 4] = epoch.try_into().ok()?;
            Some((u64::from_be_bytes(*conn), u32::from_be_bytes(epoch)))
        }
        _ => return None,
    };
    Some(Flow {
        listener: usize::from(u16::from_be_bytes(*listener)),
        peer: SocketAddr::new(ip, u16::from_be_bytes(*port)),
        tcp,
    })
}

/// Decodes hex digits into `out` (exactly `2 * out.len()` of them).
fn decode_hex(hex: &[u8], out: &mut [u8]) -> bool {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => *o = h << 4 | l,
            _ => return false,
        }
    }
    hex.len() == 2 * out.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a-long-enough-site-secret";

    fn node() -> SocketAddr {
        "198.51.100.1:5060".parse().unwrap()
    }

    fn flows() -> [Flow; 3] {
        [
            Flow {
                listener: 0,
                peer: "203.0.113.7:40123".parse().unwrap(),
                tcp: None,
            },
            Flow {
                listener: 3,
                peer: "203.0.113.7:51000".parse().unwrap(),
                tcp: Some((77, 0xdead_beef)),
            },
            Flow {
                listener: 1,
                peer: "[2001:db8::7]:5062".parse().unwrap(),
                tcp: Some((u64::MAX, 1)),
            },
        ]
    }

    #[test]
    fn round_trip_on_any_node_of_the_site() {
        let k = FlowKey::new(SECRET);
        for f in flows() {
            let t = k.seal(&f, node());
            assert!(t.starts_with("f1."), "{t}");
            // A valid SIP user part as is.
            assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'));
            assert_eq!(k.open(t.as_bytes(), node()), Ok(f));
            // Same secret on another process: same token, same flow.
            assert_eq!(FlowKey::new(SECRET).seal(&f, node()), t);
        }
    }

    #[test]
    fn forged_or_moved_tokens_are_refused_r_sec_2() {
        let k = FlowKey::new(SECRET);
        let f = flows()[1];
        let t = k.seal(&f, node());
        // Another site's secret.
        let other = FlowKey::new("another-site-secret-value").seal(&f, node());
        assert_eq!(
            k.open(other.as_bytes(), node()),
            Err(FlowTokenError::BadMac)
        );
        // Presented in a URI naming another gate node.
        let elsewhere: SocketAddr = "198.51.100.2:5060".parse().unwrap();
        assert_eq!(k.open(t.as_bytes(), elsewhere), Err(FlowTokenError::BadMac));
        // A flow edited to another connection, keeping the MAC.
        let mut other_conn = f;
        other_conn.tcp = Some((78, 0xdead_beef));
        let edited = format!(
            "{}{}",
            &k.seal(&other_conn, node())[..t.len() - 20],
            &t[t.len() - 20..]
        );
        assert_eq!(
            k.open(edited.as_bytes(), node()),
            Err(FlowTokenError::BadMac)
        );
        for bad in [
            "",
            "f1.",
            "f1..",
            "g2.sg-a.0123456789abcdef0123",
            "f1.00000004cb00710700.0123",
            "f1.0.0123456789abcdef0123",
            "f1.02000004cb0071079ca3.0123456789abcdef0123", // kind 2
            "f1.00000005cb0071079ca3.0123456789abcdef0123", // family 5
            "f1.01000004cb0071079ca3.0123456789abcdef0123", // tcp without conn
            "f1.00000004cb0071079ca3zz.0123456789abcdef0123",
        ] {
            assert!(k.open(bad.as_bytes(), node()).is_err(), "{bad}");
        }
    }
}
