//! The Record-Route token: which instance serves a dialog, written into the
//! Record-Route the gate inserts.
//!
//! Because the instance travels with the dialog's route set, the gate keeps no
//! dialog table: any gate node of the site, including one that just
//! restarted, routes an in-dialog request by its Route header. The token is
//! authenticated with a keyed hash of the site secret so that a client cannot
//! write one that names an instance of its choosing (R-SEC-1, R-SEC-2).
//!
//! Form (the user part of the gate's Record-Route URI):
//! `g1.<instance-id>.<mac>` where `<mac>` is 16 lowercase hex digits.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

const PREFIX: &[u8] = b"g1.";
const MAC_HEX: usize = 16;

/// Makes and checks tokens with the site secret.
#[derive(Clone)]
pub struct TokenKey {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not of the form `g1.<id>.<mac>`.
    #[error("malformed route token")]
    Malformed,
    /// The MAC does not match: forged, or made with another site secret.
    #[error("route token fails authentication")]
    BadMac,
}

impl TokenKey {
    /// Derives the key from the site secret. Every gate node of a site must
    /// use the same secret, or in-dialog requests are refused after a failover.
    pub fn new(secret: &str) -> TokenKey {
        // Two differently-seeded passes stretch the secret into 128 key bits.
        let mut a = SipHasher13::new_with_keys(0x7369_702d_6761_7465, 0x746f_6b65_6e2d_6b30);
        a.write(secret.as_bytes());
        let mut b = SipHasher13::new_with_keys(0x7369_702d_6761_7465, 0x746f_6b65_6e2d_6b31);
        b.write(secret.as_bytes());
        TokenKey {
            k0: a.finish(),
            k1: b.finish(),
        }
    }

    fn mac(&self, id: &[u8]) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(id);
        h.finish()
    }

    /// The token for an instance id (ids are `[A-Za-z0-9._-]`, checked by the
    /// config loader, so the token is a valid SIP user part as is).
    pub fn seal(&self, instance_id: &str) -> String {
        format!("g1.{instance_id}.{:016x}", self.mac(instance_id.as_bytes()))
    }

    /// Checks a token and returns the instance id it names.
    pub fn open<'a>(&self, token: &'a [u8]) -> Result<&'a str, TokenError> {
        let rest = token.strip_prefix(PREFIX).ok_or(TokenError::Malformed)?;
        if rest.len() < MAC_HEX + 2 {
            return Err(TokenError::Malformed);
        }
        let (id, mac) = rest.split_at(rest.len() - MAC_HEX);
        let id = id.strip_suffix(b".").ok_or(TokenError::Malformed)?;
        let mac = std::str::from_utf8(mac).map_err(|_| TokenError::Malformed)?;
        let mac = u64::from_str_radix(mac, 16).map_err(|_| TokenError::Malformed)?;
        let id = std::str::from_utf8(id).map_err(|_| TokenError::Malformed)?;
        if id.is_empty() {
            return Err(TokenError::Malformed);
        }
        if self.mac(id.as_bytes()) != mac {
            return Err(TokenError::BadMac);
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let k = TokenKey::new("a-long-enough-site-secret");
        let t = k.seal("sg-a");
        assert!(t.starts_with("g1.sg-a."));
        assert_eq!(k.open(t.as_bytes()), Ok("sg-a"));
        // Ids may contain dots; the MAC is always the last 16 hex digits.
        let t = k.seal("sg.a.1");
        assert_eq!(k.open(t.as_bytes()), Ok("sg.a.1"));
    }

    #[test]
    fn forged_tokens_are_refused_r_sec_2() {
        let k = TokenKey::new("a-long-enough-site-secret");
        let other = TokenKey::new("another-site-secret-value");
        let t = k.seal("sg-a");
        // Same id, MAC of another site.
        assert_eq!(
            k.open(other.seal("sg-a").as_bytes()),
            Err(TokenError::BadMac)
        );
        // Valid MAC grafted onto another id.
        let forged = t.replace("sg-a", "sg-b");
        assert_eq!(k.open(forged.as_bytes()), Err(TokenError::BadMac));
        for bad in [
            "",
            "g1.",
            "g1.sg-a",
            "g2.sg-a.0123456789abcdef",
            "g1..0123456789abcdef",
            "g1.sg-a.zz23456789abcdef",
            "g1.sg-a0123456789abcdef",
        ] {
            assert!(k.open(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
