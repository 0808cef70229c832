//! The keys of the work book's tables: SipHash-1-3 of what identifies a
//! dialog, an address-of-record or a contact, keyed from the site secret
//! ([`crate::keys`]) so every gate node of a site, and the same node after a
//! restart, computes the same key (a work snapshot reads back), while a
//! client cannot aim its Call-IDs at one bucket.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

use crate::keys::{Key, Purpose};
use crate::message::SipMessage;

/// What a dialog key identifies: a call and a subscription in the same
/// dialog (RFC 6665 allows it) are two pieces of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Usage {
    /// An INVITE dialog.
    Call,
    /// A subscription (SUBSCRIBE/NOTIFY, or a REFER's implicit one).
    Subscription,
}

/// The table keys.
#[derive(Debug, Clone)]
pub(crate) struct Hashes {
    k: (u64, u64),
}

impl Hashes {
    /// Keys from the site secret.
    pub(crate) fn new(secret: &str) -> Hashes {
        Hashes {
            k: Key::derive(secret, Purpose::WorkBook).words(),
        }
    }

    fn hasher(&self, domain: u8) -> SipHasher13 {
        let mut h = SipHasher13::new_with_keys(self.k.0, self.k.1);
        h.write_u8(domain);
        h
    }

    /// The dialog of a message: Call-ID and both tags (RFC 3261 12), the
    /// tags in a fixed order so a request of either side, and its responses,
    /// find the same dialog. `None` without a Call-ID or both tags.
    pub(crate) fn dialog(&self, usage: Usage, msg: &SipMessage) -> Option<u64> {
        let call_id = msg.call_id()?;
        let (a, b) = (msg.from_tag()?, msg.to_tag()?);
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let mut h = self.hasher(match usage {
            Usage::Call => b'c',
            Usage::Subscription => b's',
        });
        for part in [call_id, lo, hi] {
            h.write_usize(part.len());
            h.write(part);
        }
        Some(h.finish())
    }

    /// An address-of-record (the To URI of a REGISTER), case-insensitive:
    /// registrars compare host and scheme without case, and a user part
    /// that differs only in case is one user on every registrar we know.
    pub(crate) fn aor(&self, uri: &[u8]) -> u64 {
        let mut h = self.hasher(b'a');
        h.write_usize(uri.len());
        for chunk in uri.chunks(64) {
            let mut buf = [0u8; 64];
            let lower = &mut buf[..chunk.len()];
            lower.copy_from_slice(chunk);
            lower.make_ascii_lowercase();
            h.write(lower);
        }
        h.finish()
    }

    /// A contact URI as the registrar lists it (byte for byte).
    pub(crate) fn contact(&self, uri: &[u8]) -> u64 {
        let mut h = self.hasher(b'k');
        h.write_usize(uri.len());
        h.write(uri);
        h.finish()
    }

    /// A short fingerprint of the keys: a snapshot written under another
    /// site secret holds keys no message will match, so it is refused.
    pub(crate) fn fingerprint(&self) -> u64 {
        let mut h = self.hasher(b'f');
        h.write(b"work book fingerprint");
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg(from_tag: &str, to_tag: &str) -> SipMessage {
        SipMessage::parse(Bytes::from(format!(
            "BYE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\
             From: <sip:a@b>;tag={from_tag}\r\nTo: <sip:c@d>;tag={to_tag}\r\n\
             Call-ID: k1\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n"
        )))
        .unwrap()
    }

    #[test]
    fn both_directions_one_dialog_and_usages_apart() {
        let h = Hashes::new("work-hash-test-secret");
        let ab = h.dialog(Usage::Call, &msg("a", "b")).unwrap();
        assert_eq!(Some(ab), h.dialog(Usage::Call, &msg("b", "a")));
        assert_ne!(Some(ab), h.dialog(Usage::Subscription, &msg("a", "b")));
        assert_ne!(Some(ab), h.dialog(Usage::Call, &msg("a", "c")));
        // Length-prefixed: moving bytes between parts changes the key.
        assert_ne!(
            h.dialog(Usage::Call, &msg("a", "bx")),
            h.dialog(Usage::Call, &msg("ab", "x"))
        );
        assert_eq!(
            h.aor(b"sip:Alice@Example.COM"),
            h.aor(b"sip:alice@example.com")
        );
        assert_ne!(h.contact(b"sip:a@1.2.3.4"), h.contact(b"sip:A@1.2.3.4"));
        let other = Hashes::new("another-secret-0123");
        assert_ne!(h.fingerprint(), other.fingerprint());
        assert_ne!(Some(ab), other.dialog(Usage::Call, &msg("a", "b")));
    }
}
