//! The tracing span of a transaction, cheap while nobody formats it.

use crate::message::SipMessage;

/// The span of one transaction: every message of it (request,
/// retransmissions, CANCEL, ACK of a non-2xx, responses) logs under the same
/// Call-ID and client branch, and the instance once routing knows it.
///
/// Debug level on purpose: at the default `info` filter its callsite is
/// disabled and entering or recording on it is a no-op. A disabled span may
/// still evaluate its fields (tracing's `log` compatibility does), so they are
/// [`Lossy`] views of the bytes: converted only if a span is ever formatted.
pub(super) fn txn_span(msg: &SipMessage, branch: Option<&[u8]>) -> tracing::Span {
    tracing::debug_span!(
        "txn",
        call_id = %Lossy(msg.call_id().unwrap_or_default()),
        branch = %Lossy(branch.unwrap_or_default()),
        instance = tracing::field::Empty,
    )
}

/// Bytes shown as text (invalid UTF-8 as U+FFFD), converted when formatted.
struct Lossy<'a>(&'a [u8]);

impl std::fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{FFFD}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Lossy;

    #[test]
    fn lossy_shows_bytes_as_from_utf8_lossy_does() {
        for b in [
            &b"a84b4c76e66710"[..],
            b"z9hG4bK\xff\xfe-x",
            b"\xc3",
            b"caf\xc3\xa9",
        ] {
            assert_eq!(Lossy(b).to_string(), String::from_utf8_lossy(b), "{b:?}");
        }
    }
}
