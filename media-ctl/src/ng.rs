//! The rtpengine ng protocol wire format: one UDP datagram holds a cookie, a
//! space and a bencoded dictionary (`<cookie> d7:command5:offer...e`). The
//! reply echoes the cookie, which is how a controller matches replies to
//! commands and recognises retransmissions.
//!
//! Bencode (BitTorrent BEP 3): integers `i42e`, byte strings `4:spam`, lists
//! `l...e`, dictionaries `d...e` with byte-string keys in sorted order.

use std::collections::BTreeMap;

/// Deepest nesting accepted: ng messages are shallow; a hostile datagram of
/// `llllll...` must not exhaust the stack.
const MAX_DEPTH: usize = 32;

/// A bencoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An integer.
    Int(i64),
    /// A byte string (SDP bodies, call ids, tags are not always UTF-8).
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Value>),
    /// A dictionary; keys sorted, as bencode requires on output.
    Dict(BTreeMap<Vec<u8>, Value>),
}

/// Why a datagram is not an ng message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NgError {
    /// No space separates the cookie from the payload.
    #[error("no cookie")]
    NoCookie,
    /// Input ended inside a value.
    #[error("truncated bencode")]
    Truncated,
    /// A byte that starts no bencode value, or a malformed number.
    #[error("malformed bencode at byte {0}")]
    Malformed(usize),
    /// Nested deeper than this decoder accepts.
    #[error("bencode nested too deep")]
    TooDeep,
    /// Bytes left after the top-level value.
    #[error("trailing bytes after bencode")]
    Trailing,
    /// The payload is not a dictionary.
    #[error("ng payload is not a dictionary")]
    NotDict,
}

impl Value {
    /// A byte-string value from text.
    pub fn str(s: &str) -> Value {
        Value::Bytes(s.as_bytes().to_vec())
    }

    /// The bytes of a byte-string value.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// Appends the bencoding of this value.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Value::Int(i) => {
                out.push(b'i');
                out.extend_from_slice(i.to_string().as_bytes());
                out.push(b'e');
            }
            Value::Bytes(b) => {
                out.extend_from_slice(b.len().to_string().as_bytes());
                out.push(b':');
                out.extend_from_slice(b);
            }
            Value::List(l) => {
                out.push(b'l');
                l.iter().for_each(|v| v.encode_into(out));
                out.push(b'e');
            }
            Value::Dict(d) => {
                out.push(b'd');
                for (k, v) in d {
                    Value::Bytes(k.clone()).encode_into(out);
                    v.encode_into(out);
                }
                out.push(b'e');
            }
        }
    }

    /// Decodes exactly one value filling `input`.
    pub fn decode(input: &[u8]) -> Result<Value, NgError> {
        let mut pos = 0;
        let v = decode_at(input, &mut pos, 0)?;
        if pos != input.len() {
            return Err(NgError::Trailing);
        }
        Ok(v)
    }
}

fn decode_at(input: &[u8], pos: &mut usize, depth: usize) -> Result<Value, NgError> {
    if depth > MAX_DEPTH {
        return Err(NgError::TooDeep);
    }
    let start = *pos;
    match input.get(start).copied().ok_or(NgError::Truncated)? {
        b'i' => {
            let end = find(input, start + 1, b'e')?;
            let digits = &input[start + 1..end];
            // No leading zeros or "-0", as BEP 3 says; i64 range only.
            let ok = canonical_int(digits);
            let n = parse_int(digits)
                .filter(|_| ok)
                .ok_or(NgError::Malformed(start))?;
            *pos = end + 1;
            Ok(Value::Int(n))
        }
        b'l' => {
            *pos += 1;
            let mut items = Vec::new();
            while input.get(*pos).copied().ok_or(NgError::Truncated)? != b'e' {
                items.push(decode_at(input, pos, depth + 1)?);
            }
            *pos += 1;
            Ok(Value::List(items))
        }
        b'd' => {
            *pos += 1;
            let mut map = BTreeMap::new();
            while input.get(*pos).copied().ok_or(NgError::Truncated)? != b'e' {
                let key_at = *pos;
                let Value::Bytes(k) = decode_at(input, pos, depth + 1)? else {
                    return Err(NgError::Malformed(key_at));
                };
                let v = decode_at(input, pos, depth + 1)?;
                map.insert(k, v);
            }
            *pos += 1;
            Ok(Value::Dict(map))
        }
        b'0'..=b'9' => Ok(Value::Bytes(string_at(input, pos)?.to_vec())),
        _ => Err(NgError::Malformed(start)),
    }
}

/// A string length: ASCII digits only, no overflow. (Read on every key
/// and value, so without UTF-8 checks or `str::parse`.)
fn parse_len(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0usize, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(usize::from(d - b'0')))
            .flatten()
    })
}

/// An integer: optional `-`, ASCII digits, within `i64`.
fn parse_int(digits: &[u8]) -> Option<i64> {
    let (neg, mag) = match digits.strip_prefix(b"-") {
        Some(m) => (true, m),
        None => (false, digits),
    };
    if mag.is_empty() {
        return None;
    }
    // Accumulate negatively so i64::MIN fits.
    let n = mag.iter().try_fold(0i64, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_sub(i64::from(d - b'0')))
            .flatten()
    })?;
    if neg {
        Some(n)
    } else {
        n.checked_neg()
    }
}

/// BEP 3 integers: no leading zeros, no "-0", not empty.
fn canonical_int(digits: &[u8]) -> bool {
    let magnitude = digits.strip_prefix(b"-").unwrap_or(digits);
    match magnitude {
        [] => false,
        [b'0'] => digits.len() == 1,
        [b'0', ..] => false,
        _ => true,
    }
}

fn find(input: &[u8], from: usize, byte: u8) -> Result<usize, NgError> {
    input
        .get(from..)
        .and_then(|s| s.iter().position(|&b| b == byte))
        .map(|i| from + i)
        .ok_or(NgError::Truncated)
}

/// Skips one value starting at `pos` without building it, checking it as
/// [`Value::decode`] does (same errors, same depth bound).
fn skip_at(input: &[u8], pos: &mut usize, depth: usize) -> Result<(), NgError> {
    if depth > MAX_DEPTH {
        return Err(NgError::TooDeep);
    }
    let start = *pos;
    match input.get(start).copied().ok_or(NgError::Truncated)? {
        b'i' => {
            let end = find(input, start + 1, b'e')?;
            let digits = &input[start + 1..end];
            let ok = canonical_int(digits) && parse_int(digits).is_some();
            if !ok {
                return Err(NgError::Malformed(start));
            }
            *pos = end + 1;
        }
        b'l' | b'd' => {
            let dict = input[start] == b'd';
            *pos += 1;
            while input.get(*pos).copied().ok_or(NgError::Truncated)? != b'e' {
                if dict && !input[*pos].is_ascii_digit() {
                    return Err(NgError::Malformed(*pos));
                }
                skip_at(input, pos, depth + 1)?;
                if dict {
                    skip_at(input, pos, depth + 1)?;
                }
            }
            *pos += 1;
        }
        b'0'..=b'9' => {
            string_at(input, pos)?;
        }
        _ => return Err(NgError::Malformed(start)),
    }
    Ok(())
}

/// Reads the byte string at `pos`, borrowed.
fn string_at<'a>(input: &'a [u8], pos: &mut usize) -> Result<&'a [u8], NgError> {
    let start = *pos;
    let colon = find(input, start, b':')?;
    let len = parse_len(&input[start..colon]).ok_or(NgError::Malformed(start))?;
    let from = colon + 1;
    let to = from.checked_add(len).ok_or(NgError::Malformed(start))?;
    let bytes = input.get(from..to).ok_or(NgError::Truncated)?;
    *pos = to;
    Ok(bytes)
}

/// The top-level entries of a bencoded dictionary, borrowed from the
/// datagram: what a relay needs to read a few keys (`command`, `call-id`,
/// `result`) and forward the rest untouched. The whole payload is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DictView<'a> {
    entries: Vec<(&'a [u8], &'a [u8])>,
}

impl<'a> DictView<'a> {
    /// Scans a payload that must be exactly one dictionary.
    pub fn parse(payload: &'a [u8]) -> Result<DictView<'a>, NgError> {
        match payload.first() {
            None => return Err(NgError::Truncated),
            Some(b'd') => {}
            Some(_) => {
                // A valid non-dict value is "not a dict"; garbage is malformed.
                let mut pos = 0;
                skip_at(payload, &mut pos, 0)?;
                return Err(if pos == payload.len() {
                    NgError::NotDict
                } else {
                    NgError::Trailing
                });
            }
        }
        let mut pos = 1;
        let mut entries = Vec::with_capacity(8);
        while payload.get(pos).copied().ok_or(NgError::Truncated)? != b'e' {
            if !payload[pos].is_ascii_digit() {
                return Err(NgError::Malformed(pos));
            }
            let key = string_at(payload, &mut pos)?;
            let from = pos;
            skip_at(payload, &mut pos, 1)?;
            entries.push((key, &payload[from..pos]));
        }
        if pos + 1 != payload.len() {
            return Err(NgError::Trailing);
        }
        Ok(DictView { entries })
    }

    /// The raw encoding of the value under `key` (the first, if repeated).
    pub fn raw(&self, key: &str) -> Option<&'a [u8]> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key.as_bytes())
            .map(|(_, v)| *v)
    }

    /// The byte string under `key`; `None` if absent or not a string.
    pub fn bytes(&self, key: &str) -> Option<&'a [u8]> {
        let raw = self.raw(key)?;
        if !raw.first()?.is_ascii_digit() {
            return None;
        }
        string_at(raw, &mut 0).ok()
    }

    /// The integer under `key`; `None` if absent or not an integer.
    pub fn int(&self, key: &str) -> Option<i64> {
        match Value::decode(self.raw(key)?) {
            Ok(Value::Int(i)) => Some(i),
            _ => None,
        }
    }

    /// Number of top-level entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True for `de`.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Splits a datagram into cookie and payload at the first space.
pub fn split_cookie(datagram: &[u8]) -> Result<(&[u8], &[u8]), NgError> {
    match datagram.iter().position(|&b| b == b' ') {
        Some(0) | None => Err(NgError::NoCookie),
        Some(i) => Ok((&datagram[..i], &datagram[i + 1..])),
    }
}

/// The datagram `<cookie> <payload>`.
pub fn join_cookie(cookie: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(cookie.len() + 1 + payload.len());
    out.extend_from_slice(cookie);
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// An ng `error` result, as rtpengine words them: `result` = `error` and
/// the reason in `error-reason`.
pub fn error_reply(cookie: &[u8], reason: &str) -> Vec<u8> {
    let mut d = BTreeMap::new();
    d.insert(b"result".to_vec(), Value::str("error"));
    d.insert(b"error-reason".to_vec(), Value::str(reason));
    NgMessage {
        cookie: cookie.to_vec(),
        dict: d,
    }
    .to_bytes()
}

/// A reply with `result` = `result` and nothing else (`pong`, `ok`).
pub fn result_reply(cookie: &[u8], result: &str) -> Vec<u8> {
    let mut d = BTreeMap::new();
    d.insert(b"result".to_vec(), Value::str(result));
    NgMessage {
        cookie: cookie.to_vec(),
        dict: d,
    }
    .to_bytes()
}

/// One ng message: the cookie and its dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NgMessage {
    /// Chosen by the sender, echoed in the reply.
    pub cookie: Vec<u8>,
    /// The command (`command`, `call-id`, `from-tag`, `sdp`...) or reply (`result`...).
    pub dict: BTreeMap<Vec<u8>, Value>,
}

impl NgMessage {
    /// Parses a datagram.
    pub fn parse(datagram: &[u8]) -> Result<NgMessage, NgError> {
        let space = datagram
            .iter()
            .position(|&b| b == b' ')
            .ok_or(NgError::NoCookie)?;
        if space == 0 {
            return Err(NgError::NoCookie);
        }
        match Value::decode(&datagram[space + 1..])? {
            Value::Dict(dict) => Ok(NgMessage {
                cookie: datagram[..space].to_vec(),
                dict,
            }),
            _ => Err(NgError::NotDict),
        }
    }

    /// The datagram for this message.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.cookie.len() + 64);
        out.extend_from_slice(&self.cookie);
        out.push(b' ');
        Value::Dict(self.dict.clone()).encode_into(&mut out);
        out
    }

    /// A string field (`command`, `call-id`...).
    pub fn get_str(&self, key: &str) -> Option<&[u8]> {
        self.dict.get(key.as_bytes()).and_then(Value::as_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_rtpengine_offer() {
        let dgram = b"5323_1 d7:call-id24:a84b4c76e66710@pc33.atla7:command5:offer8:from-tag4:19283:sdp5:v=0\r\ne";
        let m = NgMessage::parse(dgram).unwrap();
        assert_eq!(m.cookie, b"5323_1");
        assert_eq!(m.get_str("command"), Some(&b"offer"[..]));
        assert_eq!(m.get_str("call-id"), Some(&b"a84b4c76e66710@pc33.atla"[..]));
        assert_eq!(m.get_str("sdp"), Some(&b"v=0\r\n"[..]));
        // Dictionaries re-encode with sorted keys: byte-identical here.
        assert_eq!(m.to_bytes(), dgram.to_vec());
    }

    #[test]
    fn round_trips_nested_values() {
        let mut d = BTreeMap::new();
        d.insert(b"result".to_vec(), Value::str("ok"));
        d.insert(b"n".to_vec(), Value::Int(-42));
        d.insert(
            b"flags".to_vec(),
            Value::List(vec![Value::str("trust-address"), Value::Int(0)]),
        );
        let m = NgMessage {
            cookie: b"c1".to_vec(),
            dict: d,
        };
        assert_eq!(NgMessage::parse(&m.to_bytes()).unwrap(), m);
    }

    #[test]
    fn hostile_input_is_an_error_not_a_panic() {
        let deep = [b"x ".to_vec(), vec![b'l'; 10_000]].concat();
        for bad in [
            &b"nocookie"[..],
            b" d1:a1:be",
            b"c i5e",
            b"c d1:a",
            b"c d1:a1:bee",
            b"c di1e1:ae",
            b"c d1:ai01ee",
            b"c d1:ai-0ee",
            b"c d1:a99999999999999999999:xe",
            b"c d1:ai99999999999999999999ee",
            b"c x",
            &deep,
        ] {
            assert!(
                NgMessage::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(NgMessage::parse(&deep), Err(NgError::TooDeep));
    }

    #[test]
    fn dict_view_reads_keys_in_place() {
        let dgram = b"5323_1 d7:call-id4:c-117:command5:offer5:flagsl5:trusti3ee8:from-tag2:ft1:ni-7e3:sdp5:v=0\r\ne";
        let (cookie, payload) = split_cookie(dgram).unwrap();
        assert_eq!(cookie, b"5323_1");
        let d = DictView::parse(payload).unwrap();
        assert_eq!(d.len(), 6);
        assert_eq!(d.bytes("command"), Some(&b"offer"[..]));
        assert_eq!(d.bytes("call-id"), Some(&b"c-11"[..]));
        assert_eq!(d.bytes("flags"), None, "a list is not a string");
        assert_eq!(d.raw("flags"), Some(&b"l5:trusti3ee"[..]));
        assert_eq!(d.int("n"), Some(-7));
        assert_eq!(d.int("sdp"), None);
        assert_eq!(d.bytes("to-tag"), None);
        assert_eq!(join_cookie(cookie, payload), dgram.to_vec());
    }

    #[test]
    fn dict_view_agrees_with_the_decoder_on_hostile_input() {
        for bad in [
            &b""[..],
            b"d",
            b"d1:a",
            b"di1e1:ae",
            b"d1:ai01ee",
            b"d1:a99999999999999999999:xe",
            b"d1:a1:bee",
            b"i5e",
            b"l1:ae",
            b"x",
            b"d1:ad1:xi-0eee",
        ] {
            let view = DictView::parse(bad);
            assert!(view.is_err(), "{:?}", String::from_utf8_lossy(bad));
            assert!(Value::decode(bad).map_or(true, |v| !matches!(v, Value::Dict(_))));
        }
        let deep = [b"d1:a".to_vec(), vec![b'l'; 10_000]].concat();
        assert_eq!(DictView::parse(&deep), Err(NgError::TooDeep));
    }

    #[test]
    fn numbers_are_read_exactly() {
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"9223372036854775808"), None);
        assert_eq!(parse_int(b"-"), None);
        assert_eq!(parse_int(b"1x"), None);
        assert_eq!(parse_len(b"0"), Some(0));
        assert_eq!(parse_len(b"+1"), None);
        assert_eq!(parse_len(b"99999999999999999999999"), None);
        assert_eq!(Value::decode(b"i-42e"), Ok(Value::Int(-42)));
    }

    #[test]
    fn replies_are_what_rtpengine_sends() {
        assert_eq!(result_reply(b"c1", "pong"), b"c1 d6:result4:ponge".to_vec());
        assert_eq!(
            error_reply(b"c9", "Unknown call-id"),
            b"c9 d12:error-reason15:Unknown call-id6:result5:errore".to_vec()
        );
    }
}
