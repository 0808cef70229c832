//! The JSON form of the ng protocol. rtpengine takes a payload that is a JSON
//! object (`<cookie> {"command":"ping"}`) as well as a bencoded dictionary,
//! reads it as the same dictionary, and answers in the form it was asked in
//! (`{"result":"pong"}`). Clients such as `rtpengine-ng-client --json` and
//! some SIP proxies' modules speak only JSON.
//!
//! media-ctl does what rtpengine does: a JSON request becomes the bencoded
//! dictionary it stands for, takes the bencode path unchanged (the mgs are
//! asked in bencode), and the answer the client gets is turned back into
//! JSON. Only the first byte of the payload is looked at on the bencode
//! path, so bencode clients pay nothing for this.

use std::collections::BTreeMap;

use crate::ng::Value;

/// Why a JSON payload is refused; the texts are rtpengine's own, so a client
/// sees the same error from media-ctl as from an mg.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JsonRefusal {
    /// Not JSON at all (truncated, a syntax error).
    #[error("Failed to parse JSON document")]
    Syntax,
    /// Valid JSON that is no bencode dictionary: not an object at the top,
    /// or a value bencode cannot carry (`null`, `1.5`, an integer past
    /// 64 bits), which rtpengine refuses in the same words.
    #[error("Could not decode bencode dictionary")]
    NotBencode,
}

impl JsonRefusal {
    /// The bounded metrics label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            JsonRefusal::Syntax => "bad_json",
            JsonRefusal::NotBencode => "json_not_bencode",
        }
    }
}

/// True when `payload` (after the cookie) is in the JSON form.
#[inline]
pub(crate) fn is_json(payload: &[u8]) -> bool {
    payload
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// The bencoded dictionary a JSON object stands for.
pub(crate) fn to_bencode(payload: &[u8]) -> Result<Vec<u8>, JsonRefusal> {
    let json: serde_json::Value =
        serde_json::from_slice(payload).map_err(|_| JsonRefusal::Syntax)?;
    if !json.is_object() {
        return Err(JsonRefusal::NotBencode);
    }
    let mut out = Vec::with_capacity(payload.len());
    value_of(&json)?.encode_into(&mut out);
    Ok(out)
}

fn value_of(json: &serde_json::Value) -> Result<Value, JsonRefusal> {
    use serde_json::Value as J;
    Ok(match json {
        J::String(s) => Value::Bytes(s.as_bytes().to_vec()),
        J::Number(n) => Value::Int(n.as_i64().ok_or(JsonRefusal::NotBencode)?),
        J::Array(items) => Value::List(items.iter().map(value_of).collect::<Result<_, _>>()?),
        J::Object(map) => Value::Dict(
            map.iter()
                .map(|(k, v)| Ok((k.as_bytes().to_vec(), value_of(v)?)))
                .collect::<Result<BTreeMap<_, _>, _>>()?,
        ),
        // rtpengine reads `true` as 1 and `false` as 0 (`"limit": true`
        // lists one call).
        J::Bool(b) => Value::Int(i64::from(*b)),
        J::Null => return Err(JsonRefusal::NotBencode),
    })
}

/// The JSON form of a bencoded reply datagram (`<cookie> d...e` becomes
/// `<cookie> {...}`). Byte strings that are not UTF-8 (no ng field media-ctl
/// has met is) are carried with U+FFFD in place of the bad bytes; a reply that
/// is not bencode at all (an mg that answered garbage) becomes an ng error.
pub(crate) fn reply_to_json(datagram: &[u8]) -> Vec<u8> {
    let Some(space) = datagram.iter().position(|&b| b == b' ') else {
        return datagram.to_vec();
    };
    let (cookie, payload) = (&datagram[..space], &datagram[space + 1..]);
    let json = match Value::decode(payload) {
        Ok(v) => json_of(&v),
        Err(e) => serde_json::json!({
            "result": "error",
            "error-reason": format!("media gateway answered no bencode ({e})"),
        }),
    };
    let mut out = Vec::with_capacity(payload.len() + cookie.len() + 8);
    out.extend_from_slice(cookie);
    out.push(b' ');
    // Writing into a Vec cannot fail, and a serde_json::Value always serialises.
    if serde_json::to_writer(&mut out, &json).is_err() {
        out.truncate(cookie.len() + 1);
        out.extend_from_slice(br#"{"result":"error","error-reason":"internal"}"#);
    }
    out
}

fn json_of(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Int(i) => J::from(*i),
        Value::Bytes(b) => J::String(String::from_utf8_lossy(b).into_owned()),
        Value::List(items) => J::Array(items.iter().map(json_of).collect()),
        Value::Dict(map) => J::Object(
            map.iter()
                .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), json_of(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_request_is_the_dictionary_it_stands_for() {
        let b = to_bencode(
            br#" {"command":"offer","call-id":"c1","flags":["trust address"],"TOS":184,"sdp":"v=0\r\n"}"#,
        )
        .unwrap();
        assert_eq!(
            b,
            b"d3:TOSi184e7:call-id2:c17:command5:offer5:flagsl13:trust addresse3:sdp5:v=0\r\ne"
        );
    }

    #[test]
    fn what_bencode_cannot_carry_is_refused_as_rtpengine_does() {
        assert_eq!(to_bencode(br#"{"command":"#), Err(JsonRefusal::Syntax));
        assert_eq!(to_bencode(b"{}}"), Err(JsonRefusal::Syntax));
        for bad in [
            &br#"["ping"]"#[..],
            br#"{"command":"ping","x":null}"#,
            br#"{"command":"ping","x":1.5}"#,
            br#"{"command":"ping","x":[{"y":18446744073709551615}]}"#,
        ] {
            assert_eq!(to_bencode(bad), Err(JsonRefusal::NotBencode), "{bad:?}");
        }
    }

    #[test]
    fn booleans_are_the_integers_rtpengine_reads_them_as() {
        assert_eq!(
            to_bencode(br#"{"command":"list","limit":true,"x":[false]}"#).unwrap(),
            b"d7:command4:list5:limiti1e1:xli0eee"
        );
    }

    #[test]
    fn only_a_payload_opening_an_object_is_json() {
        assert!(is_json(br#"{"command":"ping"}"#));
        assert!(is_json(b"\r\n {}"));
        assert!(!is_json(b"d7:command4:pinge"));
        assert!(!is_json(b""));
        assert!(!is_json(b"  "));
    }

    #[test]
    fn replies_come_back_in_json_with_the_cookie() {
        let r = reply_to_json(b"k-1 d6:result4:ponge");
        assert_eq!(r, br#"k-1 {"result":"pong"}"#);
        let r = reply_to_json(b"k-2 d5:callsl1:a1:be7:createdi1796193763e6:result2:oke");
        let (cookie, json) = r.split_at(4);
        assert_eq!(cookie, b"k-2 ");
        let v: serde_json::Value = serde_json::from_slice(json).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"calls": ["a", "b"], "created": 1796193763, "result": "ok"})
        );
        let r = reply_to_json(b"k-3 garbage");
        let v: serde_json::Value = serde_json::from_slice(&r[4..]).unwrap();
        assert_eq!(v["result"], "error");
    }
}
