//! The framing on byte strings (R-WS-2): what a client may send, what it
//! may not and the code each refusal closes with.

use super::*;

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
const MAX: usize = 65_535;

/// A client frame: `b0` (FIN, RSV, opcode) and `payload`, masked with
/// [`MASK`] unless `masked` is false, its length in the shortest form.
fn frame(b0: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut f = vec![b0];
    let bit = if masked { MASKED } else { 0 };
    match payload.len() {
        n @ 0..=125 => f.push(bit | n as u8),
        n @ 126..=65_535 => {
            f.push(bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        f.extend_from_slice(&MASK);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    } else {
        f.extend_from_slice(payload);
    }
    f
}

fn text(payload: &[u8]) -> Vec<u8> {
    frame(FIN | TEXT, payload, true)
}

/// Every event `bytes` yields, fed whole.
fn events(bytes: &[u8]) -> (Vec<Event>, Option<Violation>, BytesMut) {
    let mut r = Reader::new(MAX);
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    loop {
        let before = buf.len();
        match r.next(&mut buf) {
            Ok(Some(e)) => out.push(e),
            Ok(None) if buf.len() == before => return (out, None, buf),
            Ok(None) => {}
            Err(v) => return (out, Some(v), buf),
        }
    }
}

fn msg(s: &[u8]) -> Event {
    Event::Message(Bytes::copy_from_slice(s))
}

/// RFC 6455 5.7's samples: "Hello" masked, and a ping and a pong.
#[test]
fn r_ws_2_the_rfc_samples() {
    let hello = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    assert_eq!(events(&hello).0, vec![msg(b"Hello")]);
    let ping = frame(FIN | PING, b"Hello", true);
    let pong = frame(FIN | PONG, b"Hello", true);
    let both = [ping, pong].concat();
    assert_eq!(
        events(&both).0,
        vec![Event::Ping(Bytes::from_static(b"Hello")), Event::Pong]
    );
}

/// R-WS-2: the three length forms, each unmasked whole, one after another
/// in one read; the payload shares the buffer read into.
#[test]
fn r_ws_2_seven_sixteen_and_sixty_four_bit_lengths() {
    let small = vec![b'a'; 125];
    let medium = vec![b'b'; 126];
    let large = vec![b'c'; 65_535];
    let bytes = [
        text(&small),
        text(&medium),
        frame(FIN | BINARY, &large, true),
    ]
    .concat();
    let (got, err, rest) = events(&bytes);
    assert_eq!(err, None);
    assert_eq!(got, vec![msg(&small), msg(&medium), msg(&large)]);
    assert!(rest.is_empty());
    // The 64-bit form, as some clients send even short lengths.
    let mut long = vec![FIN | TEXT, MASKED | 127];
    long.extend_from_slice(&5u64.to_be_bytes());
    long.extend_from_slice(&MASK);
    long.extend(b"Hello".iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    assert_eq!(events(&long).0, vec![msg(b"Hello")]);
}

/// R-WS-2: a frame cut anywhere waits for the rest, taking nothing off;
/// fed a byte at a time it comes out the same.
#[test]
fn r_ws_2_partial_frames_across_reads() {
    let payload = vec![b'x'; 300];
    let bytes = [text(&payload), frame(FIN | PING, b"p", true)].concat();
    let mut r = Reader::new(MAX);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for b in &bytes {
        buf.extend_from_slice(&[*b]);
        while let Some(e) = r.next(&mut buf).unwrap() {
            out.push(e);
        }
    }
    assert_eq!(
        out,
        vec![msg(&payload), Event::Ping(Bytes::from_static(b"p"))]
    );
    assert!(buf.is_empty());
    // Cut in the extended length and in the mask: nothing taken off.
    for cut in [1, 3, 5, 7] {
        let mut buf = BytesMut::from(&bytes[..cut]);
        assert_eq!(r.next(&mut buf), Ok(None));
        assert_eq!(buf.len(), cut);
    }
}

/// R-WS-2: a message in three fragments with a ping and a pong between
/// them: the ping is answered at once, the message comes whole.
#[test]
fn r_ws_2_fragments_with_control_frames_between() {
    let bytes = [
        frame(TEXT, b"INVITE ", true),
        frame(FIN | PING, b"1", true),
        frame(CONTINUATION, b"sip:a@b ", true),
        frame(FIN | PONG, b"", true),
        frame(FIN | CONTINUATION, b"SIP/2.0", true),
        text(b"next"),
    ]
    .concat();
    let (got, err, _) = events(&bytes);
    assert_eq!(err, None);
    assert_eq!(
        got,
        vec![
            Event::Ping(Bytes::from_static(b"1")),
            Event::Pong,
            msg(b"INVITE sip:a@b SIP/2.0"),
            msg(b"next"),
        ]
    );
    // What a hand-over passes of a begun message resumes it.
    let mut r = Reader::new(MAX);
    let mut buf = BytesMut::from(&frame(BINARY, b"ab", true)[..]);
    assert_eq!(r.next(&mut buf), Ok(None));
    assert!(r.pending());
    let (kind, so_far) = r.begun().unwrap();
    let mut r2 = Reader::resume(MAX, Some((kind, so_far)));
    let mut buf = BytesMut::from(&frame(FIN | CONTINUATION, b"cd", true)[..]);
    assert_eq!(r2.next(&mut buf), Ok(Some(msg(b"abcd"))));
    assert!(!r2.pending());
}

/// R-WS-2: a Close with a code and reason is given with both (the gate
/// echoes the code); an empty one with none.
#[test]
fn r_ws_2_close_with_code_and_reason() {
    let body = [&1001u16.to_be_bytes()[..], b"bye"].concat();
    assert_eq!(
        events(&frame(FIN | CLOSE, &body, true)).0,
        vec![Event::Close(Some((1001, Bytes::from_static(b"bye"))))]
    );
    assert_eq!(
        events(&frame(FIN | CLOSE, b"", true)).0,
        vec![Event::Close(None)]
    );
    // A code no endpoint sends, a one-byte body: 1002; a reason not UTF-8: 1007.
    for (body, v) in [
        (1005u16.to_be_bytes().to_vec(), Violation::Protocol),
        (vec![3], Violation::Protocol),
        (
            [&1000u16.to_be_bytes()[..], &[0xff]].concat(),
            Violation::Utf8,
        ),
    ] {
        assert_eq!(events(&frame(FIN | CLOSE, &body, true)).1, Some(v));
    }
}

/// R-WS-2: what breaks the framing closes with 1002: an unmasked frame, a
/// reserved bit, a reserved opcode, a fragmented or long control frame, a
/// continuation with nothing begun, a new message inside one, a 64-bit
/// length with its top bit set.
#[test]
fn r_ws_2_protocol_errors_are_1002() {
    let mut top_bit = vec![FIN | BINARY, MASKED | 127];
    top_bit.extend_from_slice(&(1u64 << 63 | 5).to_be_bytes());
    top_bit.extend_from_slice(&MASK);
    let cases = [
        ("unmasked", frame(FIN | TEXT, b"hi", false)),
        ("rsv1", frame(FIN | 0x40 | TEXT, b"hi", true)),
        ("rsv3", frame(FIN | 0x10 | TEXT, b"hi", true)),
        ("opcode 3", frame(FIN | 0x3, b"hi", true)),
        ("opcode 0xB", frame(FIN | 0xB, b"", true)),
        ("fragmented ping", frame(PING, b"", true)),
        ("long ping", frame(FIN | PING, &[0; 126], true)),
        ("lone continuation", frame(FIN | CONTINUATION, b"x", true)),
        (
            "a message inside one",
            [frame(TEXT, b"a", true), frame(FIN | TEXT, b"b", true)].concat(),
        ),
        ("top bit", top_bit),
    ];
    for (what, bytes) in cases {
        assert_eq!(events(&bytes).1, Some(Violation::Protocol), "{what}");
    }
}

/// R-WS-2: text that is not UTF-8 closes with 1007, whole or in
/// fragments; binary may hold any bytes.
#[test]
fn r_ws_2_text_not_utf8_is_1007() {
    assert_eq!(events(&text(&[b'a', 0xc3])).1, Some(Violation::Utf8));
    // A character split across fragments is fine; the message is checked whole.
    let split = [frame(TEXT, &[b'a', 0xc3], true), frame(FIN, &[0xa9], true)].concat();
    assert_eq!(events(&split).0, vec![msg("aé".as_bytes())]);
    assert_eq!(
        events(&frame(FIN | BINARY, &[0xff, 0xfe], true)).0,
        vec![msg(&[0xff, 0xfe])]
    );
}

/// R-WS-2: a message over the bound closes with 1009 from its header (the
/// payload is not waited for), whole or in fragments.
#[test]
fn r_ws_2_over_the_bound_is_1009() {
    let mut head = vec![FIN | TEXT, MASKED | 127];
    head.extend_from_slice(&(MAX as u64 + 1).to_be_bytes());
    head.extend_from_slice(&MASK);
    assert_eq!(events(&head).1, Some(Violation::Size));
    let two = [
        frame(TEXT, &vec![b'x'; 40_000], true),
        frame(FIN | CONTINUATION, &vec![b'x'; 40_000], true)[..20].to_vec(),
    ]
    .concat();
    assert_eq!(events(&two).1, Some(Violation::Size));
    // At the bound exactly: taken.
    assert_eq!(
        events(&text(&vec![b'y'; MAX])).0,
        vec![msg(&vec![b'y'; MAX])]
    );
}

/// The headers the gate writes, in each length form, and a Close body.
#[test]
fn r_ws_2_server_frames() {
    assert_eq!(
        header(Kind::Text, 5),
        ([0x81, 5, 0, 0, 0, 0, 0, 0, 0, 0], 2)
    );
    let (h, n) = header(Kind::Binary, 300);
    assert_eq!(&h[..n], &[0x82, 126, 1, 44]);
    let (h, n) = header(Kind::Pong, 70_000);
    assert_eq!(&h[..n], &[0x8A, 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70]);
    assert_eq!(header(Kind::Close, 0).0[0], 0x88);
    assert_eq!(
        &close_body(1009, b"big")[..],
        &[0x03, 0xf1, b'b', b'i', b'g']
    );
}

/// Unmasking eight bytes a step gives what a byte a step gives, at every
/// length and offset.
#[test]
fn unmask_wide_equals_bytewise() {
    for len in 0..40 {
        let data: Vec<u8> = (0..len as u8).collect();
        let mut wide = data.clone();
        unmask(&mut wide, MASK);
        let slow: Vec<u8> = data
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ MASK[i % 4])
            .collect();
        assert_eq!(wide, slow, "{len}");
    }
}
