//! The Record-Route token: which instance serves a dialog, written into the
//! Record-Route the gate inserts.
//!
//! Because the instance travels with the dialog's route set, the gate keeps no
//! dialog table: any gate node of the site, including one that just
//! restarted, routes an in-dialog request by its Route header (R-GW-2). The
//! token carries a MAC, keyed with a key derived from the site secret
//! ([`crate::keys`]), over the instance id and the dialog's Call-ID: a
//! client cannot write a token naming an instance of its choosing, and a
//! token copied from one dialog opens no other (R-SEC-1, R-SEC-2).
//!
//! Form (the user part of the gate's Record-Route URI):
//! `g2.<instance-id>.<mac>` where `<mac>` is 20 lowercase hex digits (80 bits).

use crate::digits::AsciiOut;
use crate::keys::{self, Key, Purpose};

const PREFIX: &[u8] = b"g2.";

/// Whether `user` may be one of the gate's dialog tokens: anything else
/// fails [`TokenKey::open`] before its MAC is computed, so a caller can
/// skip the URI's parse for it.
pub(crate) fn may_be_token(user: &[u8]) -> bool {
    user.starts_with(PREFIX)
}
const MAC_BYTES: usize = 10;
const MAC_HEX: usize = 2 * MAC_BYTES;

/// Makes and checks tokens with a site's secret.
#[derive(Clone, Debug)]
pub struct TokenKey {
    key: Key,
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not of the form `g2.<id>.<mac>`.
    #[error("malformed route token")]
    Malformed,
    /// The MAC does not match: forged, made with another site secret, or
    /// made for another dialog (another Call-ID).
    #[error("route token fails authentication")]
    BadMac,
}

impl TokenKey {
    /// Derives the key from the site secret. Every gate node of a site must
    /// use the same secret, or in-dialog requests are refused after a failover.
    pub fn new(secret: &str) -> TokenKey {
        TokenKey {
            key: Key::derive(secret, Purpose::RouteToken),
        }
    }

    fn mac(&self, id: &[u8], call_id: &[u8]) -> [u8; MAC_BYTES] {
        // Ids are `[A-Za-z0-9._-]`: the NUL keeps id and Call-ID apart.
        self.key.mac(&[id, b"\0", call_id])
    }

    /// The token naming `instance_id` for the dialog with `call_id` (ids are
    /// `[A-Za-z0-9._-]`, checked by the config loader, so the token is a
    /// valid SIP user part as is).
    pub fn seal(&self, instance_id: &str, call_id: &[u8]) -> String {
        let mut t = String::with_capacity(PREFIX.len() + instance_id.len() + 1 + MAC_HEX);
        self.seal_into(instance_id, call_id, &mut t);
        t
    }

    /// [`TokenKey::seal`] appended to `out` (a forward's Record-Route is
    /// written straight into its splice).
    pub(crate) fn seal_into(&self, instance_id: &str, call_id: &[u8], out: &mut impl AsciiOut) {
        out.push_str("g2.");
        out.push_str(instance_id);
        out.push_ascii(b'.');
        keys::push_hex(out, &self.mac(instance_id.as_bytes(), call_id));
    }

    /// Checks a token against the dialog's `call_id` and returns the
    /// instance id it names.
    pub fn open<'a>(&self, token: &'a [u8], call_id: &[u8]) -> Result<&'a str, TokenError> {
        let rest = token.strip_prefix(PREFIX).ok_or(TokenError::Malformed)?;
        if rest.len() < MAC_HEX + 2 {
            return Err(TokenError::Malformed);
        }
        let (id, mac) = rest.split_at(rest.len() - MAC_HEX);
        let id = id.strip_suffix(b".").ok_or(TokenError::Malformed)?;
        let mac = keys::parse_hex::<MAC_BYTES>(mac).ok_or(TokenError::Malformed)?;
        let id = std::str::from_utf8(id).map_err(|_| TokenError::Malformed)?;
        if id.is_empty() {
            return Err(TokenError::Malformed);
        }
        if !keys::same(&self.mac(id.as_bytes(), call_id), &mac) {
            return Err(TokenError::BadMac);
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &[u8] = b"a84b4c76e66710@pc33.example.com";

    #[test]
    fn round_trip() {
        let k = TokenKey::new("a-long-enough-site-secret");
        let t = k.seal("sg-a", CALL);
        assert!(t.starts_with("g2.sg-a."));
        assert_eq!(t.len(), "g2.sg-a.".len() + MAC_HEX);
        assert_eq!(k.open(t.as_bytes(), CALL), Ok("sg-a"));
        // Ids may contain dots; the MAC is always the last 20 hex digits.
        let t = k.seal("sg.a.1", CALL);
        assert_eq!(k.open(t.as_bytes(), CALL), Ok("sg.a.1"));
        // Any node with the same secret reads it (R-GW-2).
        let node_b = TokenKey::new("a-long-enough-site-secret");
        assert_eq!(node_b.open(t.as_bytes(), CALL), Ok("sg.a.1"));
    }

    #[test]
    fn forged_tokens_are_refused_r_sec_2() {
        let k = TokenKey::new("a-long-enough-site-secret");
        let other = TokenKey::new("another-site-secret-value");
        let t = k.seal("sg-a", CALL);
        // Same id, MAC of another site.
        assert_eq!(
            k.open(other.seal("sg-a", CALL).as_bytes(), CALL),
            Err(TokenError::BadMac)
        );
        // Valid MAC grafted onto another id.
        let forged = t.replace("sg-a", "sg-b");
        assert_eq!(k.open(forged.as_bytes(), CALL), Err(TokenError::BadMac));
        for bad in [
            "",
            "g2.",
            "g2.sg-a",
            "g1.sg-a.0123456789abcdef",
            "g3.sg-a.0123456789abcdef0123",
            "g2..0123456789abcdef0123",
            "g2.sg-a.zz23456789abcdef0123",
            "g2.sg-a0123456789abcdef0123",
        ] {
            assert!(k.open(bad.as_bytes(), CALL).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_token_opens_only_its_own_dialog_r_sec_1() {
        let k = TokenKey::new("a-long-enough-site-secret");
        let t = k.seal("sg-a", CALL);
        for other in [
            &b"another-call@pc33.example.com"[..],
            b"",
            b"A84b4c76e66710@pc33.example.com",
        ] {
            assert_eq!(k.open(t.as_bytes(), other), Err(TokenError::BadMac));
        }
    }
}
