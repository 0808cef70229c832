//! The `ws` benchmark's own SIP client: one call after another on a
//! connection, over WebSocket (what a browser sends) or over TCP (the same
//! messages, framed by Content-Length), so that WS and TCP are compared on
//! the same client and the same number of connections and only the
//! framing differs (issue 25, R-WS-2).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub type Ws = WebSocketStream<Box<dyn Io>>;
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// How long a reply may take before the call counts as failed.
const REPLY: Duration = Duration::from_secs(10);

/// A client connection to the gate.
pub enum Conn {
    /// WebSocket, `sip` subprotocol.
    Ws(Ws),
    /// Plain TCP, RFC 3261 18.3 framing.
    Tcp {
        rd: BufReader<OwnedReadHalf>,
        wr: OwnedWriteHalf,
        local: SocketAddr,
    },
}

async fn connect(from: IpAddr, to: SocketAddr) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from, 0)).unwrap();
    let tcp = sock.connect(to).await.expect("connect to the gate");
    let _ = tcp.set_nodelay(true);
    tcp
}

/// A plain TCP connection from `from` to `to`.
pub async fn open_tcp(from: IpAddr, to: SocketAddr) -> Conn {
    let tcp = connect(from, to).await;
    let local = tcp.local_addr().unwrap();
    let (rd, wr) = tcp.into_split();
    Conn::Tcp {
        rd: BufReader::new(rd),
        wr,
        local,
    }
}

/// A WebSocket (`sip` subprotocol) from `from` to `to`, over TLS when
/// `tls` holds the certificate to trust.
pub async fn open_ws(from: IpAddr, to: SocketAddr, tls: Option<&CertificateDer<'static>>) -> Ws {
    let tcp = connect(from, to).await;
    let io: Box<dyn Io> = match tls {
        None => Box::new(tcp),
        Some(cert) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cert.clone()).unwrap();
            let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            let name = ServerName::IpAddress(to.ip().into());
            let s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                .connect(name, tcp)
                .await
                .expect("TLS to the gate");
            Box::new(s)
        }
    };
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let mut req = format!("{scheme}://{to}/").into_client_request().unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("sip"));
    tokio_tungstenite::client_async(req, io)
        .await
        .expect("the upgrade")
        .0
}

/// The next text message on a WebSocket, within [`REPLY`].
pub async fn recv_ws(ws: &mut Ws) -> Option<String> {
    loop {
        let m = tokio::time::timeout(REPLY, ws.next()).await.ok()??.ok()?;
        if let Message::Text(t) = m {
            return Some(t.to_string());
        }
    }
}

/// The next SIP message on a TCP connection: the head up to its blank
/// line, then Content-Length bytes of body.
async fn recv_tcp(rd: &mut BufReader<OwnedReadHalf>) -> Option<String> {
    let mut msg = String::new();
    loop {
        let start = msg.len();
        if rd.read_line(&mut msg).await.ok()? == 0 {
            return None;
        }
        let line = &msg[start..];
        if line == "\r\n" && start > 0 {
            break;
        }
        if line == "\r\n" {
            // A keep-alive CRLF between messages.
            msg.clear();
        }
    }
    let len: usize = header(&msg, "Content-Length")
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    rd.read_exact(&mut body).await.ok()?;
    msg.push_str(&String::from_utf8_lossy(&body));
    Some(msg)
}

impl Conn {
    async fn send(&mut self, text: String) -> bool {
        match self {
            Conn::Ws(ws) => ws.send(Message::text(text)).await.is_ok(),
            Conn::Tcp { wr, .. } => wr.write_all(text.as_bytes()).await.is_ok(),
        }
    }

    async fn recv(&mut self) -> Option<String> {
        match self {
            Conn::Ws(ws) => recv_ws(ws).await,
            Conn::Tcp { rd, .. } => tokio::time::timeout(REPLY, recv_tcp(rd)).await.ok()?,
        }
    }

    /// The Via transport and sent-by, and the Contact, of client `host`:
    /// a browser's `.invalid` ones over WebSocket (RFC 7118 5.2), the
    /// socket's address over TCP.
    fn names(&self, host: &str) -> (&'static str, String, String) {
        match self {
            Conn::Ws(_) => (
                "WS",
                format!("{host}.invalid"),
                format!("<sip:{host}@{host}.invalid;transport=ws;ob>"),
            ),
            Conn::Tcp { local, .. } => (
                "TCP",
                local.to_string(),
                format!("<sip:{host}@{local};transport=tcp>"),
            ),
        }
    }

    /// Closes the connection.
    pub async fn close(self) {
        match self {
            Conn::Ws(mut ws) => {
                let _ = ws.close(None).await;
            }
            Conn::Tcp { mut wr, .. } => {
                let _ = wr.shutdown().await;
            }
        }
    }
}

/// The values of header `name` in `msg`.
pub fn header<'a>(msg: &'a str, name: &str) -> Vec<&'a str> {
    msg.split("\r\n")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
        .collect()
}

const SDP: &str = "v=0\r\no=ws 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n";

/// One call as a UA places it: INVITE, its 200, ACK and BYE along the
/// route set, the BYE's 200. Whether it completed.
pub async fn call(conn: &mut Conn, c: u32, n: u32) -> bool {
    let (host, cid) = (format!("c{c}"), format!("ws-bench-{c}-{n}"));
    let (tp, sent_by, contact) = conn.names(&host);
    let invite = format!(
        "INVITE sip:bench@example.com SIP/2.0\r\nVia: SIP/2.0/{tp} {sent_by};branch=z9hG4bK-{cid}\r\n\
         Max-Forwards: 70\r\nTo: <sip:bench@example.com>\r\nFrom: <sip:{host}@example.com>;tag=t-{cid}\r\n\
         Call-ID: {cid}\r\nCSeq: 1 INVITE\r\nContact: {contact}\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{SDP}",
        SDP.len()
    );
    if !conn.send(invite).await {
        return false;
    }
    let ok = loop {
        let Some(r) = conn.recv().await else {
            return false;
        };
        if r.starts_with("SIP/2.0 1") {
            continue;
        }
        if !r.starts_with("SIP/2.0 200") {
            return false;
        }
        break r;
    };
    let to = header(&ok, "To")
        .first()
        .copied()
        .unwrap_or_default()
        .to_owned();
    let target = header(&ok, "Contact")
        .first()
        .map(|c| {
            c.trim_start_matches('<')
                .split('>')
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_default();
    let mut rr: Vec<&str> = header(&ok, "Record-Route")
        .iter()
        .flat_map(|v| v.split(", "))
        .collect();
    rr.reverse();
    let routes: String = rr.iter().map(|r| format!("Route: {r}\r\n")).collect();
    let in_dialog = |method: &str, cseq: u32, branch: &str| {
        format!(
            "{method} {target} SIP/2.0\r\nVia: SIP/2.0/{tp} {sent_by};branch=z9hG4bK-{branch}-{cid}\r\n\
             Max-Forwards: 70\r\n{routes}To: {to}\r\nFrom: <sip:{host}@example.com>;tag=t-{cid}\r\n\
             Call-ID: {cid}\r\nCSeq: {cseq} {method}\r\nContent-Length: 0\r\n\r\n"
        )
    };
    if !conn.send(in_dialog("ACK", 1, "ack")).await || !conn.send(in_dialog("BYE", 2, "bye")).await
    {
        return false;
    }
    conn.recv()
        .await
        .is_some_and(|r| r.starts_with("SIP/2.0 200"))
}

/// Registers client `i` over `conn` (Expires 3600, outbound: the gate
/// keeps the connection as the registration's flow): whether a 200 came.
pub async fn register(conn: &mut Conn, i: u32) -> bool {
    let host = format!("r{i}");
    let (tp, sent_by, contact) = conn.names(&host);
    let contact = contact
        .trim_end_matches('>')
        .trim_end_matches(";ob")
        .to_owned()
        + ";ob>";
    let reg = format!(
        "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/{tp} {sent_by};branch=z9hG4bK-reg-{i}\r\n\
         Max-Forwards: 70\r\nTo: <sip:u{i}@example.com>\r\nFrom: <sip:u{i}@example.com>;tag=r{i}\r\n\
         Call-ID: reg-{i}@ws-bench\r\nCSeq: 1 REGISTER\r\n\
         Contact: {contact};reg-id=1;+sip.instance=\"<urn:uuid:00000000-0000-0000-0000-{i:012}>\"\r\n\
         Expires: 3600\r\nSupported: path,outbound\r\nContent-Length: 0\r\n\r\n"
    );
    conn.send(reg).await
        && conn
            .recv()
            .await
            .is_some_and(|r| r.starts_with("SIP/2.0 200"))
}
