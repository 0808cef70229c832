//! RFC 6455 framing, server side: the frames a client sends taken off the
//! bytes read ([`Reader`]), and the header of each frame the gate sends
//! ([`header`]). No I/O here: the connection's task (`conn.rs`) reads into
//! its buffer and asks for the next [`Event`].
//!
//! What a server must refuse (RFC 6455 5.1-5.5, 7.4.1) is refused with the
//! code the connection closes with ([`Violation`]): an unmasked frame, a
//! reserved bit (no extension is ever agreed), a reserved opcode, a
//! control frame fragmented or over 125 bytes, a continuation with no
//! message begun or a new message inside one, a 64-bit length with its top
//! bit set: 1002; a text message or close reason that is not UTF-8: 1007; a
//! message over the bound, whole or in fragments: 1009, as soon as a
//! frame's header says so (its payload is never buffered).

use bytes::{Buf, Bytes, BytesMut};

/// Opcodes (RFC 6455 5.2).
const CONTINUATION: u8 = 0x0;
const TEXT: u8 = 0x1;
const BINARY: u8 = 0x2;
const CLOSE: u8 = 0x8;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;

const FIN: u8 = 0x80;
const RSV: u8 = 0x70;
const MASKED: u8 = 0x80;
/// The largest payload of a control frame (RFC 6455 5.5).
const MAX_CONTROL: usize = 125;

/// What one frame off the wire means.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// A whole message (one frame, or the fragments joined), unmasked.
    Message(Bytes),
    /// A ping: a pong with this payload is owed (RFC 6455 5.5.2).
    Ping(Bytes),
    /// A pong: nothing to do.
    Pong,
    /// The client's Close, with its code and reason if it gave them: the
    /// gate echoes the code (RFC 6455 5.5.1) and closes.
    Close(Option<(u16, Bytes)>),
}

/// Why the gate closes the connection, as the close code it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Violation {
    /// 1002: the client broke the framing.
    Protocol,
    /// 1007: text that is not UTF-8.
    Utf8,
    /// 1009: a message over the bound.
    Size,
}

/// A message whose first fragments came and its last did not.
#[derive(Debug)]
struct Fragments {
    text: bool,
    data: BytesMut,
}

/// The frames of one connection as its bytes come: the state a frame
/// leaves for the next (a fragmented message begun). What was read and
/// not yet framed stays in the caller's buffer, raw.
#[derive(Debug)]
pub(super) struct Reader {
    max: usize,
    fragments: Option<Fragments>,
}

/// A frame's header, parsed.
struct Head {
    fin: bool,
    opcode: u8,
    mask: [u8; 4],
    /// Header bytes, mask included.
    len: usize,
    payload: usize,
}

impl Reader {
    /// A reader of messages of at most `max` bytes.
    pub(super) fn new(max: usize) -> Reader {
        Reader {
            max,
            fragments: None,
        }
    }

    /// Whether a fragmented message is begun and not complete.
    pub(super) fn pending(&self) -> bool {
        self.fragments.is_some()
    }

    /// The fragmented message begun, if any (text or not, its bytes so
    /// far): what a hand-over passes on with the raw bytes (R-GW-3).
    pub(super) fn begun(&self) -> Option<(bool, &[u8])> {
        self.fragments.as_ref().map(|f| (f.text, &f.data[..]))
    }

    /// A reader that goes on with a fragmented message begun elsewhere
    /// ([`Reader::begun`]).
    pub(super) fn resume(max: usize, begun: Option<(bool, &[u8])>) -> Reader {
        Reader {
            max,
            fragments: begun.map(|(text, data)| Fragments {
                text,
                data: BytesMut::from(data),
            }),
        }
    }

    /// Takes the next frame off the start of `buf` and says what it means;
    /// `None` while `buf` holds no whole frame (nothing is taken off then),
    /// or when the frame was a fragment and the message goes on. A single
    /// frame's payload is unmasked in place and split off `buf`: the
    /// message shares its allocation (no copy); fragments are joined.
    pub(super) fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, Violation> {
        let Some(head) = self.head(buf)? else {
            return Ok(None);
        };
        if buf.len() < head.len + head.payload {
            return Ok(None);
        }
        buf.advance(head.len);
        let mut payload = buf.split_to(head.payload);
        unmask(&mut payload, head.mask);
        match head.opcode {
            PING => Ok(Some(Event::Ping(payload.freeze()))),
            PONG => Ok(Some(Event::Pong)),
            CLOSE => close(payload.freeze()).map(|c| Some(Event::Close(c))),
            CONTINUATION => {
                // `head` checked that a message is begun.
                let Some(f) = self.fragments.as_mut() else {
                    return Err(Violation::Protocol);
                };
                f.data.extend_from_slice(&payload);
                if !head.fin {
                    return Ok(None);
                }
                let Some(f) = self.fragments.take() else {
                    return Err(Violation::Protocol);
                };
                message(f.text, f.data.freeze()).map(Some)
            }
            _ if head.fin => message(head.opcode == TEXT, payload.freeze()).map(Some),
            _ => {
                self.fragments = Some(Fragments {
                    text: head.opcode == TEXT,
                    data: payload,
                });
                Ok(None)
            }
        }
    }

    /// The header at the start of `buf`, checked, once it is all there.
    fn head(&self, buf: &[u8]) -> Result<Option<Head>, Violation> {
        let [b0, b1, ..] = *buf else {
            return Ok(None);
        };
        let (fin, opcode) = (b0 & FIN != 0, b0 & 0x0F);
        if b0 & RSV != 0 || b1 & MASKED == 0 {
            return Err(Violation::Protocol);
        }
        let control = match opcode {
            CLOSE | PING | PONG => true,
            TEXT | BINARY if self.fragments.is_none() => false,
            CONTINUATION if self.fragments.is_some() => false,
            _ => return Err(Violation::Protocol),
        };
        let (at, payload) = match b1 & 0x7F {
            126 => match buf.get(2..4) {
                Some(b) => (4, u64::from(u16::from_be_bytes([b[0], b[1]]))),
                None => return Ok(None),
            },
            127 => match buf.get(2..10) {
                Some(b) => {
                    let mut n = [0u8; 8];
                    n.copy_from_slice(b);
                    let n = u64::from_be_bytes(n);
                    // RFC 6455 5.2: the most significant bit must be 0.
                    if n >> 63 != 0 {
                        return Err(Violation::Protocol);
                    }
                    (10, n)
                }
                None => return Ok(None),
            },
            n => (2, u64::from(n)),
        };
        if control && (!fin || payload > MAX_CONTROL as u64) {
            return Err(Violation::Protocol);
        }
        let so_far = self.fragments.as_ref().map_or(0, |f| f.data.len());
        let payload = match usize::try_from(payload) {
            Ok(p) if control || p <= self.max.saturating_sub(so_far) => p,
            _ => return Err(Violation::Size),
        };
        let Some(m) = buf.get(at..at + 4) else {
            return Ok(None);
        };
        Ok(Some(Head {
            fin,
            opcode,
            mask: [m[0], m[1], m[2], m[3]],
            len: at + 4,
            payload,
        }))
    }
}

/// A whole data message; text must be UTF-8 (RFC 6455 8.1).
fn message(text: bool, data: Bytes) -> Result<Event, Violation> {
    if text && std::str::from_utf8(&data).is_err() {
        return Err(Violation::Utf8);
    }
    Ok(Event::Message(data))
}

/// A Close frame's body: empty, or a code a client may send and a UTF-8
/// reason (RFC 6455 5.5.1, 7.4).
fn close(body: Bytes) -> Result<Option<(u16, Bytes)>, Violation> {
    if body.is_empty() {
        return Ok(None);
    }
    let [hi, lo, ..] = body[..] else {
        return Err(Violation::Protocol);
    };
    let code = u16::from_be_bytes([hi, lo]);
    // 1004-1006 and 1015 are never sent; 1016-2999 are unassigned.
    if !matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999) {
        return Err(Violation::Protocol);
    }
    let reason = body.slice(2..);
    if std::str::from_utf8(&reason).is_err() {
        return Err(Violation::Utf8);
    }
    Ok(Some((code, reason)))
}

/// XORs `data` with the client's mask (RFC 6455 5.3), eight bytes a step.
fn unmask(data: &mut [u8], mask: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        c.copy_from_slice(&(u64::from_ne_bytes(w) ^ wide).to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
}

/// What the gate sends: a whole (FIN) frame, never masked (RFC 6455 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Binary,
    Close,
    Pong,
}

/// The header of a frame the gate sends, with a payload of `len` bytes:
/// the buffer and how many of its bytes are the header.
pub(super) fn header(kind: Kind, len: usize) -> ([u8; 10], usize) {
    let opcode = match kind {
        Kind::Text => TEXT,
        Kind::Binary => BINARY,
        Kind::Close => CLOSE,
        Kind::Pong => PONG,
    };
    let mut h = [0u8; 10];
    h[0] = FIN | opcode;
    let n = if len < 126 {
        h[1] = len as u8;
        2
    } else if let Ok(short) = u16::try_from(len) {
        h[1] = 126;
        h[2..4].copy_from_slice(&short.to_be_bytes());
        4
    } else {
        h[1] = 127;
        h[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    (h, n)
}

/// The body of a Close frame the gate sends: the code, then the reason.
pub(super) fn close_body(code: u16, reason: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(2 + reason.len());
    b.extend_from_slice(&code.to_be_bytes());
    b.extend_from_slice(reason);
    b.into()
}

#[cfg(test)]
mod tests;
