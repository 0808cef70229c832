//! Property tests: the codec and the controller's handlers take any bytes
//! from anyone (clients, mgs, strangers) without panicking, answer every
//! client datagram that has a cookie under that cookie, and keep their
//! call counts consistent.
//!
//! The codec's fuzz target (R-FT-5) is structure-aware: valid ng commands
//! (cookie, bencoded dictionary) mutated by byte flips, truncation, splicing
//! with another command and a duplicated key-value run, then decoded both
//! ways. `PROPTEST_CASES` sets the number of cases (CI runs 2000).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use media_ctl::ng::{split_cookie, DictView, NgMessage};
use media_ctl::{Decision, Out, Value};
use proptest::prelude::*;

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::Int),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(Value::Bytes),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::List),
            proptest::collection::btree_map(
                proptest::collection::vec(any::<u8>(), 0..8),
                inner,
                0..6
            )
            .prop_map(Value::Dict),
        ]
    })
}

/// `PROPTEST_CASES` if set, else `default` (an explicit `with_cases` alone
/// would ignore the variable, and CI's budget with it).
fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(n)
}

/// A valid ng command: `cookie SP d...e`.
fn ng_command() -> impl Strategy<Value = Vec<u8>> {
    let command = prop::sample::select(vec!["offer", "answer", "delete", "query", "ping"]);
    (
        "[a-z0-9]{1,12}",
        command,
        "[a-z0-9@.]{1,24}",
        proptest::collection::btree_map("[a-z-]{1,10}", value(), 0..4),
    )
        .prop_map(|(cookie, cmd, call, extra)| {
            let mut d: BTreeMap<Vec<u8>, Value> = extra
                .into_iter()
                .map(|(k, v)| (k.into_bytes(), v))
                .collect();
            d.insert(b"command".to_vec(), Value::Bytes(cmd.as_bytes().to_vec()));
            d.insert(b"call-id".to_vec(), Value::Bytes(call.into_bytes()));
            let mut out = cookie.into_bytes();
            out.push(b' ');
            Value::Dict(d).encode_into(&mut out);
            out
        })
}

/// One structure-aware change to an encoded command.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    /// This command up to the first, the other from the second.
    Splice(usize, usize),
    /// The bytes `start..start+len` written twice (a key-value run, a
    /// length prefix, a nested container's opening).
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Splice(a, b)),
        (any::<usize>(), 1usize..24).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
    ]
}

fn apply(mut raw: Vec<u8>, other: &[u8], muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        let len = raw.len().max(1);
        match *m {
            Mutation::Flip(i, b) => {
                if let Some(x) = raw.get_mut(i % len) {
                    *x ^= b;
                }
            }
            Mutation::Truncate(i) => raw.truncate(i % len),
            Mutation::Splice(a, b) => {
                raw.truncate(a % len);
                raw.extend_from_slice(&other[b % (other.len() + 1)..]);
            }
            Mutation::Duplicate(a, n) => {
                let start = (a % len).min(raw.len());
                let end = (start + n).min(raw.len());
                let run = raw[start..end].to_vec();
                raw.splice(end..end, run);
            }
        }
    }
    raw
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn mutated_ng_commands_never_panic_and_the_two_parsers_agree(
        cmd in ng_command(),
        other in ng_command(),
        muts in proptest::collection::vec(mutation(), 1..5),
    ) {
        let (_, payload) = split_cookie(&cmd).expect("a generated command has a cookie");
        prop_assert!(DictView::parse(payload).is_ok(), "the unmutated command decodes");
        let bytes = apply(cmd.clone(), &other, &muts);
        let _ = NgMessage::parse(&bytes);
        if let Ok((_, payload)) = split_cookie(&bytes) {
            let full = Value::decode(payload);
            let view = DictView::parse(payload);
            prop_assert_eq!(matches!(full, Ok(Value::Dict(_))), view.is_ok());
        }
    }

    #[test]
    fn codec_never_panics_and_the_two_parsers_agree(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = NgMessage::parse(&bytes);
        let full = Value::decode(&bytes);
        let view = DictView::parse(&bytes);
        prop_assert_eq!(matches!(full, Ok(Value::Dict(_))), view.is_ok());
    }

    #[test]
    fn codec_round_trips(v in value()) {
        let mut enc = Vec::new();
        v.encode_into(&mut enc);
        prop_assert_eq!(&Value::decode(&enc).unwrap(), &v);
        if let Value::Dict(d) = &v {
            let view = DictView::parse(&enc).unwrap();
            prop_assert_eq!(view.len(), d.len());
            for (k, val) in d {
                if let (Ok(key), Value::Bytes(b)) = (std::str::from_utf8(k), val) {
                    prop_assert_eq!(view.bytes(key), Some(&b[..]));
                }
            }
        }
    }
}

/// One step of a hostile or confused world.
#[derive(Debug, Clone)]
enum Step {
    /// Raw bytes from a client.
    Junk(u8, Vec<u8>),
    /// A well-formed command (maybe an unknown one) from a client.
    Command {
        client: u8,
        cookie: u8,
        command: u8,
        call: u8,
        to_tag: bool,
        /// In the JSON form of the protocol.
        json: bool,
    },
    /// Bytes arriving on the upstream socket from an mg or a stranger.
    MgJunk(u8, Vec<u8>),
    /// The pool answers everything in flight (or not).
    Deliver,
    /// Time passes; timers run.
    Wait(u16),
    /// An mg dies or comes back.
    Toggle(u8),
}

const COMMANDS: [&str; 10] = [
    "offer",
    "answer",
    "delete",
    "query",
    "ping",
    "list",
    "statistics",
    "block media",
    "bogus",
    "",
];

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..80))
            .prop_map(|(c, b)| Step::Junk(c, b)),
        (
            0..3u8,
            0..6u8,
            0..10u8,
            0..5u8,
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(client, cookie, command, call, to_tag, json)| {
                Step::Command {
                    client,
                    cookie,
                    command,
                    call,
                    to_tag,
                    json,
                }
            }),
        (0..5u8, proptest::collection::vec(any::<u8>(), 0..80))
            .prop_map(|(m, b)| Step::MgJunk(m, b)),
        Just(Step::Deliver),
        (0..3000u16).prop_map(Step::Wait),
        (0..4u8).prop_map(Step::Toggle),
    ]
}

fn client_addr(i: u8) -> SocketAddr {
    match i % 3 {
        0 => client(),
        1 => sg_a(),
        _ => "127.0.1.2:9".parse().unwrap(),
    }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn the_handlers_take_anything(steps in proptest::collection::vec(step(), 1..60)) {
        let mut h = Harness::new();
        let mg_addrs: Vec<SocketAddr> = h.c.pool().members().iter().map(|m| m.ng).collect();
        let mut in_flight: Vec<(SocketAddr, bytes::Bytes)> = Vec::new();
        let mut seen_calls = std::collections::HashSet::new();
        for s in steps {
            match s {
                Step::Junk(c, b) => {
                    let d = h.c.handle(client_addr(c), &b, h.t);
                    check_reply(&b, &d)?;
                    if let Decision::Send(x) = d { in_flight.extend(x) }
                }
                Step::Command { client, cookie, command, call, to_tag, json } => {
                    let mut pairs: BTreeMap<&str, String> = BTreeMap::new();
                    pairs.insert("command", COMMANDS[command as usize].to_owned());
                    pairs.insert("call-id", format!("call-{call}"));
                    pairs.insert("from-tag", "f".into());
                    pairs.insert("sdp", "v=0\r\n".into());
                    if to_tag { pairs.insert("to-tag", "t".into()); }
                    seen_calls.insert(call);
                    let v: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let b = if json {
                        let obj: serde_json::Map<String, serde_json::Value> = v
                            .iter()
                            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
                            .collect();
                        format!("k{cookie} {}", serde_json::Value::Object(obj)).into_bytes()
                    } else {
                        ng(&format!("k{cookie}"), &v)
                    };
                    let d = h.c.handle(client_addr(client), &b, h.t);
                    check_reply(&b, &d)?;
                    if let Decision::Send(x) = d { in_flight.extend(x) }
                }
                Step::MgJunk(m, b) => {
                    let from = mg_addrs.get(m as usize).copied().unwrap_or_else(|| "127.0.8.8:1".parse().unwrap());
                    for out in h.c.on_mg_datagram(from, &b, h.t) {
                        if let Out::Mg(a, d) = out { in_flight.push((a, d)) }
                    }
                }
                Step::Deliver => {
                    let sends = std::mem::take(&mut in_flight);
                    h.deliver(sends);
                }
                Step::Wait(ms) => {
                    h.advance(Duration::from_millis(ms.into()));
                    for out in h.c.tick(h.t).into_iter().chain(h.c.sweep(h.t)) {
                        if let Out::Mg(a, d) = out { in_flight.push((a, d)) }
                    }
                }
                Step::Toggle(m) => {
                    if let Some(a) = mg_addrs.get(m as usize) {
                        let mg = h.mgs.get_mut(a).unwrap();
                        mg.alive = !mg.alive;
                    }
                }
            }
            let total: u64 = (0..6).map(|i| h.c.calls(i)).sum();
            prop_assert!(total <= seen_calls.len() as u64, "{} calls counted, {} call-ids used", total, seen_calls.len());
        }
        // Whatever happened, status and work report are well formed.
        let st = h.c.status("p", h.t);
        prop_assert_eq!(st.instances.len(), 4);
        let w = h.c.work_report("p", h.t);
        prop_assert_eq!(w.instances.len(), 4);
    }
}

/// A reply always carries the cookie of the datagram it answers, and is
/// in the request's form: a JSON object for a payload that opens with `{`,
/// a bencoded dictionary otherwise.
fn check_reply(req: &[u8], d: &Decision) -> Result<(), TestCaseError> {
    if let Decision::Reply(r) = d {
        let (rc, payload) = split_cookie(r).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (qc, asked) = split_cookie(req).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(rc, qc);
        let json = asked
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{');
        if json {
            let v: Result<serde_json::Value, _> = serde_json::from_slice(payload);
            prop_assert!(
                v.is_ok_and(|v| v.is_object()),
                "{:?}",
                String::from_utf8_lossy(r)
            );
        } else {
            prop_assert!(DictView::parse(payload).is_ok());
        }
    }
    Ok(())
}
