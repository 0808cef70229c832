//! A WebSocket SIP client for the tests (RFC 7118), written as JsSIP and
//! SIP.js write their messages: a Via with an `.invalid` sent-by, a Contact
//! with an `.invalid` host and `transport=ws`, `;ob`, `reg-id` and
//! `+sip.instance` (RFC 5626). tokio-tungstenite frames; the connection is
//! plain (`ws`) or TLS (`wss`, checked against the test CA).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

/// Both kinds of stream a test client runs over.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub type Ws = WebSocketStream<Box<dyn Io>>;

/// Opens a WebSocket to `gate` at `path` asking for `protocol` (None: no
/// `Sec-WebSocket-Protocol`) from `origin`; over TLS trusting `ca` when
/// given. The error is tungstenite's (an HTTP refusal carries its status).
pub async fn open(
    gate: SocketAddr,
    path: &str,
    protocol: Option<&str>,
    origin: Option<&str>,
    ca: Option<&Path>,
) -> Result<Ws, WsError> {
    let tcp = TcpStream::connect(gate).await?;
    let io: Box<dyn Io> = match ca {
        None => Box::new(tcp),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let cfg = ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            let name = ServerName::IpAddress(gate.ip().into());
            let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                .connect(name, tcp)
                .await?;
            Box::new(tls)
        }
    };
    let scheme = if ca.is_some() { "wss" } else { "ws" };
    let mut req = format!("{scheme}://{gate}{path}").into_client_request()?;
    if let Some(p) = protocol {
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", HeaderValue::from_str(p).unwrap());
    }
    if let Some(o) = origin {
        req.headers_mut()
            .insert("Origin", HeaderValue::from_str(o).unwrap());
    }
    let (ws, resp) = tokio_tungstenite::client_async(req, io).await?;
    assert_eq!(
        resp.headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|v| v.to_str().ok()),
        Some("sip"),
        "the gate answers with the sip subprotocol (RFC 7118 4)"
    );
    Ok(ws)
}

/// The HTTP status of a refused upgrade.
pub fn refused_status(e: &WsError) -> Option<u16> {
    match e {
        WsError::Http(r) => Some(r.status().as_u16()),
        _ => None,
    }
}

/// Sends one SIP message as one text message.
pub async fn send(ws: &mut Ws, msg: &str) {
    ws.send(Message::text(msg.to_owned())).await.unwrap();
}

/// The next message (pings and pongs included) within `t`, or None.
pub async fn next(ws: &mut Ws, t: Duration) -> Option<Message> {
    match tokio::time::timeout(t, ws.next()).await {
        Ok(Some(Ok(m))) => Some(m),
        _ => None,
    }
}

/// The next SIP message within `t` (text or binary; control frames and
/// keep-alive CRLFs skipped).
pub async fn recv(ws: &mut Ws, t: Duration) -> Option<String> {
    let end = tokio::time::Instant::now() + t;
    loop {
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        let text = match next(ws, left).await? {
            Message::Text(t) => t.to_string(),
            Message::Binary(b) => String::from_utf8(b.to_vec()).ok()?,
            Message::Close(_) => return None,
            _ => continue,
        };
        if !text.trim().is_empty() {
            return Some(text);
        }
    }
}

/// The value of the first `name` header line of `msg` (case-insensitive).
pub fn header<'a>(msg: &'a str, name: &'a str) -> Option<&'a str> {
    lines(msg, name).next()
}

fn lines<'a>(msg: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    msg.split("\r\n")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(move |l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
}

/// Every value of header `name`, one per `<...>` element where a line
/// holds several (Record-Route, Route).
pub fn headers(msg: &str, name: &str) -> Vec<String> {
    lines(msg, name)
        .flat_map(|v| {
            v.split(", <").enumerate().map(|(i, p)| {
                if i == 0 {
                    p.to_owned()
                } else {
                    format!("<{p}")
                }
            })
        })
        .collect()
}

/// A REGISTER as browser SIP stacks send it: `reg-id` and `+sip.instance`
/// on the Contact (RFC 5626 4.2), `ob` in its URI as SIP.js writes it.
pub fn register(user: &str, host: &str, cseq: u32, expires: u32) -> String {
    format!(
        "REGISTER sip:example.com SIP/2.0\r\n\
         Via: SIP/2.0/WS {host}.invalid;branch=z9hG4bK-reg-{host}-{cseq}\r\n\
         Max-Forwards: 69\r\n\
         To: <sip:{user}@example.com>\r\n\
         From: <sip:{user}@example.com>;tag=reg-{host}\r\n\
         Call-ID: reg-{host}@ws-test\r\n\
         CSeq: {cseq} REGISTER\r\n\
         Contact: <sip:{user}@{host}.invalid;transport=ws;ob>;+sip.ice;reg-id=1;+sip.instance=\"<urn:uuid:0f7e3b2a-{host}>\";expires={expires}\r\n\
         Expires: {expires}\r\n\
         Allow: INVITE,ACK,CANCEL,BYE,UPDATE,MESSAGE,OPTIONS,REFER,INFO,NOTIFY\r\n\
         Supported: path,gruu,outbound\r\n\
         User-Agent: ws-test\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// The answer `status` to request `req`: its Via, From, To (with a tag),
/// Call-ID, CSeq and Record-Routes, a Contact on `host`.invalid.
pub fn answer(req: &str, status: &str, host: &str, body: &str) -> String {
    let copy = |name: &str| {
        headers(req, name)
            .iter()
            .map(|v| format!("{name}: {v}\r\n"))
            .collect::<String>()
    };
    let to = header(req, "To").unwrap_or_default();
    let to = if to.contains(";tag=") {
        to.to_owned()
    } else {
        format!("{to};tag=ws-{host}")
    };
    let ctype = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/sdp\r\n"
    };
    format!(
        "SIP/2.0 {status}\r\n{}{}To: {to}\r\n{}{}{}Contact: <sip:ua@{host}.invalid;transport=ws>\r\n{ctype}Content-Length: {}\r\n\r\n{body}",
        copy("Via"),
        copy("Record-Route"),
        copy("From"),
        copy("Call-ID"),
        copy("CSeq"),
        body.len()
    )
}

/// An SDP answer (no media flows in these tests).
pub const SDP: &str = "v=0\r\no=ws 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n";

/// Answers the INVITE of SIPp's `uac_call` and the rest of its dialog
/// (ACK, re-INVITE, ACK, BYE) as a browser would, each message awaited for
/// at most `t`; returns the first INVITE.
pub async fn answer_call(ws: &mut Ws, host: &str, t: Duration) -> String {
    let invite = recv(ws, t).await.expect("the INVITE over the WebSocket");
    assert!(invite.starts_with("INVITE "), "{invite}");
    send(ws, &answer(&invite, "200 OK", host, SDP)).await;
    loop {
        let Some(req) = recv(ws, t).await else {
            panic!("the dialog ended without a BYE");
        };
        if req.starts_with("ACK ") {
            continue;
        }
        if req.starts_with("INVITE ") {
            send(ws, &answer(&req, "200 OK", host, SDP)).await;
            continue;
        }
        assert!(req.starts_with("BYE "), "{req}");
        send(ws, &answer(&req, "200 OK", host, "")).await;
        return invite;
    }
}
