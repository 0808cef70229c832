//! The HTTP/1.1 upgrade of a WebSocket listener (RFC 6455 4.2, RFC 7118
//! 4): the request head is read and checked here, so each refusal gets its
//! proper HTTP status and its own metric label (tungstenite's server
//! handshake closes without an answer on a missing key or a wrong version);
//! the gate frames the messages after (`frame.rs`).

use bytes::BytesMut;
use ringsync::config::WsOptions;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest request head taken: a browser's upgrade is well under 2 KiB.
const MAX_HEAD: usize = 8 * 1024;
/// Headers parsed at most.
const MAX_HEADERS: usize = 48;
/// The subprotocol of SIP over WebSocket (RFC 7118 4).
const SUBPROTOCOL: &str = "sip";

/// Why an upgrade was refused: its HTTP status, reason, and the metric
/// label (`sipgate_ws_handshakes_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) reason: &'static str,
    pub(crate) label: &'static str,
}

pub(super) const fn refusal(status: u16, reason: &'static str, label: &'static str) -> Refusal {
    Refusal {
        status,
        reason,
        label,
    }
}

/// A head that is not an HTTP request, or too long.
pub(super) const BAD_REQUEST: Refusal = refusal(400, "Bad Request", "bad_request");

/// What an acceptable upgrade request carries for the answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Upgrade {
    /// `Sec-WebSocket-Accept` for the client's key.
    accept: String,
}

/// How reading the head ended.
pub(crate) enum Read {
    /// The head (and any bytes the client sent after it, which belong to
    /// the WebSocket), checked.
    Head(Result<Upgrade, Refusal>, Vec<u8>),
    /// The peer closed (or failed) before a whole head arrived.
    Closed,
}

/// Reads the request head from `io` and checks it; the caller bounds the
/// time.
pub(crate) async fn read<S: AsyncRead + Unpin>(io: &mut S, opts: &WsOptions) -> Read {
    match read_head(io).await {
        Raw::Head(head, tail) => Read::Head(check(&head, opts), tail),
        Raw::TooLong => Read::Head(Err(BAD_REQUEST), Vec::new()),
        Raw::Closed => Read::Closed,
    }
}

/// A request head as read, before any check.
pub(super) enum Raw {
    /// The head with its final empty line, and the bytes after it.
    Head(BytesMut, Vec<u8>),
    /// No end of head within [`MAX_HEAD`] bytes.
    TooLong,
    /// The peer closed (or failed) before a whole head arrived.
    Closed,
}

/// Reads a request head from `io`; the caller bounds the time.
pub(super) async fn read_head<S: AsyncRead + Unpin>(io: &mut S) -> Raw {
    let mut buf = BytesMut::with_capacity(2048);
    loop {
        if let Some(end) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            let tail = buf.split_off(end + 4).to_vec();
            return Raw::Head(buf, tail);
        }
        if buf.len() >= MAX_HEAD {
            return Raw::TooLong;
        }
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return Raw::Closed,
            Ok(_) => {}
        }
    }
}

/// [`check_as`] for SIP over WebSocket: the `sip` subprotocol is required.
pub(crate) fn check(head: &[u8], opts: &WsOptions) -> Result<Upgrade, Refusal> {
    check_as(head, opts, true)
}

/// Checks a complete request head (with its final empty line) against the
/// listener's options, in RFC 6455 4.2.1's order; the first failure wins.
/// `sip`: the `sip` subprotocol must be offered (a ws pool leaves the
/// subprotocol to the instance it passes the connection to).
pub(super) fn check_as(head: &[u8], opts: &WsOptions, sip: bool) -> Result<Upgrade, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(BAD_REQUEST),
    }
    if req.method != Some("GET") {
        return Err(refusal(405, "Method Not Allowed", "bad_method"));
    }
    let path = req.path.unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    if path != opts.path {
        return Err(refusal(404, "Not Found", "bad_path"));
    }
    let headers: &[httparse::Header<'_>] = req.headers;
    let get = |name: &'static str| {
        headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .filter_map(|h| std::str::from_utf8(h.value).ok())
    };
    let has_token = |name: &'static str, token: &str| {
        get(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if !has_token("upgrade", "websocket") || !has_token("connection", "upgrade") {
        return Err(refusal(426, "Upgrade Required", "not_upgrade"));
    }
    if !get("sec-websocket-version").any(|v| v.trim() == "13") {
        return Err(refusal(426, "Upgrade Required", "bad_version"));
    }
    let keys: Vec<&str> = get("sec-websocket-key").collect();
    let key = match keys.as_slice() {
        [k] if key_ok(k.trim()) => k.trim(),
        _ => return Err(refusal(400, "Bad Request", "bad_key")),
    };
    let mut origins = get("origin");
    let origin = origins.next();
    if origins.next().is_some() || !opts.origin_allowed(origin.map(str::trim)) {
        return Err(refusal(403, "Forbidden", "bad_origin"));
    }
    // Subprotocol names are case-sensitive (RFC 6455 11.5).
    let has_sip = get("sec-websocket-protocol")
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == SUBPROTOCOL);
    if !has_sip && sip {
        return Err(refusal(400, "Bad Request", "no_subprotocol"));
    }
    Ok(Upgrade {
        accept: derive_accept_key(key.as_bytes()),
    })
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 4.2.2 item 5.4): the base64
/// of the SHA-1 of the key and the protocol's GUID.
fn derive_accept_key(key: &[u8]) -> String {
    use base64::Engine;
    use sha1::Digest;
    const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let mut sha = sha1::Sha1::new();
    sha.update(key);
    sha.update(GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Whether `key` is the base64 of 16 bytes (RFC 6455 4.2.1 item 5): 22
/// characters, the last with its low four bits unused, and `==`.
fn key_ok(key: &str) -> bool {
    let b = key.as_bytes();
    let b64 = |c: &u8| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/';
    b.len() == 24
        && b[22..] == *b"=="
        && b[..22].iter().all(b64)
        && matches!(b[21], b'A' | b'Q' | b'g' | b'w')
}

/// Writes the answer: 101 with the accept key and the `sip` subprotocol,
/// or the refusal's status. `Connection: close` on a refusal: the gate
/// closes after it.
pub(crate) async fn answer<S: AsyncWrite + Unpin>(
    io: &mut S,
    result: &Result<Upgrade, Refusal>,
) -> std::io::Result<()> {
    let text = match result {
        Ok(u) => format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n",
            u.accept
        ),
        Err(r) => {
            // RFC 6455 4.4: a version the server does not speak is answered
            // with the one it does.
            let extra = match r.label {
                "bad_version" | "not_upgrade" => {
                    "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                }
                "bad_method" => "Allow: GET\r\n",
                _ => "",
            };
            format!(
                "HTTP/1.1 {} {}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n",
                r.status, r.reason
            )
        }
    };
    io.write_all(text.as_bytes()).await?;
    io.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(origins: &[&str]) -> WsOptions {
        WsOptions {
            path: "/sip".into(),
            origins: origins.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn head(path: &str, extra: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: gate\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").into_bytes()
    }

    const KEY: &str = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

    /// R-WS-2: the RFC 6455 1.3 sample key gets its sample accept, with
    /// the `sip` subprotocol asked for.
    #[test]
    fn r_ws_2_good_upgrade() {
        let h = head(
            "/sip?x=1",
            &format!("{KEY}Sec-WebSocket-Protocol: chat, sip\r\nOrigin: https://a.example\r\n"),
        );
        let u = check(&h, &opts(&["https://A.example"])).unwrap();
        assert_eq!(u.accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    /// R-WS-2: each refusal has its status and label.
    #[test]
    fn r_ws_2_refusals() {
        let o = opts(&["https://a.example"]);
        let proto = "Sec-WebSocket-Protocol: sip\r\n";
        let origin = "Origin: https://a.example\r\n";
        let label = |h: Vec<u8>| check(&h, &o).unwrap_err();
        assert_eq!(label(b"hello\r\n\r\n".to_vec()).status, 400);
        assert_eq!(
            label(head("/other", &format!("{KEY}{proto}{origin}"))).label,
            "bad_path"
        );
        let no_proto = label(head("/sip", &format!("{KEY}{origin}")));
        assert_eq!((no_proto.status, no_proto.label), (400, "no_subprotocol"));
        let upper = label(head(
            "/sip",
            &format!("{KEY}{origin}Sec-WebSocket-Protocol: SIP\r\n"),
        ));
        assert_eq!(upper.label, "no_subprotocol");
        let bad_origin = label(head(
            "/sip",
            &format!("{KEY}{proto}Origin: https://evil\r\n"),
        ));
        assert_eq!((bad_origin.status, bad_origin.label), (403, "bad_origin"));
        assert_eq!(
            label(head("/sip", &format!("{KEY}{proto}"))).label,
            "bad_origin",
            "a listed origin is needed when the list is not empty"
        );
        let short_key = "Sec-WebSocket-Key: dGhlIHNhbXBsZQ==\r\n";
        assert_eq!(
            label(head("/sip", &format!("{short_key}{proto}{origin}"))).label,
            "bad_key"
        );
        assert_eq!(
            label(head("/sip", &format!("{proto}{origin}"))).label,
            "bad_key"
        );
        let post = format!("POST /sip HTTP/1.1\r\nHost: g\r\n{KEY}\r\n");
        assert_eq!(label(post.into_bytes()).status, 405);
        let plain = format!("GET /sip HTTP/1.1\r\nHost: g\r\n{KEY}{proto}\r\n");
        assert_eq!(label(plain.into_bytes()).status, 426);
        // Any origin, and none, when the list is empty.
        assert!(check(&head("/sip", &format!("{KEY}{proto}")), &opts(&[])).is_ok());
    }

    #[test]
    fn key_shape() {
        assert!(key_ok("dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!key_ok("dGhlIHNhbXBsZSBub25jZR=="), "low bits set");
        assert!(!key_ok("dGhlIHNhbXBsZSBub25jZQ="));
        assert!(!key_ok("dGhlIHNhbXBsZSBub25j*Q=="));
    }
}
