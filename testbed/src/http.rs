//! The one small HTTP client of the tests, the benchmarks and the
//! rehearsal: a blocking HTTP/1.0 exchange over `std`'s `TcpStream`, enough
//! for the admin endpoints of the gate, media-ctl, `ringsync serve` and etcd
//! (`/metrics`, `/readyz`, `/v1/...`).
//!
//! HTTP/1.0 on purpose: the server closes the connection after the body and
//! never answers in chunks, so reading to the end is the whole answer. A
//! failure is an [`Error::Http`] naming the address and the request; a
//! poll that only asks "does it answer yet" calls `.ok()` on it.
//!
//! ```no_run
//! # fn main() -> Result<(), testbed::Error> {
//! let admin = "127.0.9.1:9091".parse().unwrap();
//! let reply = testbed::http::get(admin, "/readyz")?;
//! assert_eq!(reply.status, 200);
//! let created = testbed::http::Request::new("POST", admin, "/v1/profiles")
//!     .bearer("rs1_...")
//!     .body(r#"{"name":"maint"}"#)
//!     .send()?;
//! # let _ = created;
//! # Ok(())
//! # }
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::{Error, Result};

/// How long a connection may take to open: everything here is on loopback,
/// so a slow connect means nothing listens.
const CONNECT: Duration = Duration::from_secs(1);
/// How long the answer may take by default (an API call that writes the
/// store fsyncs, which a loaded machine can make slow).
const READ: Duration = Duration::from_secs(10);

/// An answer: its status code, its head (status line and headers) and its
/// body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code (`200`, `405`, ...).
    pub status: u16,
    /// The status line and the headers, as received.
    pub head: String,
    /// The body (lossy UTF-8).
    pub body: String,
}

impl Reply {
    /// The first value of header `name` (case-insensitive), trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The body parsed as JSON into `T`, on a 200 only.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        (self.status == 200).then_some(())?;
        serde_json::from_str(&self.body).ok()
    }
}

/// One request to build and send.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    method: &'a str,
    addr: SocketAddr,
    path: &'a str,
    token: Option<&'a str>,
    body: &'a str,
    connect: Duration,
    read: Duration,
}

impl<'a> Request<'a> {
    /// `method path` on `addr`, with no body and no token.
    pub fn new(method: &'a str, addr: SocketAddr, path: &'a str) -> Self {
        Request {
            method,
            addr,
            path,
            token: None,
            body: "",
            connect: CONNECT,
            read: READ,
        }
    }

    /// `Authorization: Bearer TOKEN`.
    pub fn bearer(mut self, token: &'a str) -> Self {
        self.token = Some(token);
        self
    }

    /// A JSON body (`Content-Type: application/json`).
    pub fn body(mut self, body: &'a str) -> Self {
        self.body = body;
        self
    }

    /// Shorter or longer waits than the defaults (1 s to connect, 10 s for
    /// the answer): a poll once a second wants short ones.
    pub fn timeouts(mut self, connect: Duration, read: Duration) -> Self {
        self.connect = connect;
        self.read = read;
        self
    }

    /// Sends it and reads the whole answer.
    pub fn send(&self) -> Result<Reply> {
        let fail = |reason: String| Error::Http {
            request: format!("{} http://{}{}", self.method, self.addr, self.path),
            reason,
        };
        let mut s = TcpStream::connect_timeout(&self.addr, self.connect)
            .map_err(|e| fail(format!("connect: {e}")))?;
        s.set_read_timeout(Some(self.read))
            .map_err(|e| fail(e.to_string()))?;
        let auth = self
            .token
            .map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let typ = if self.body.is_empty() {
            ""
        } else {
            "Content-Type: application/json\r\n"
        };
        let req = format!(
            "{} {} HTTP/1.0\r\nHost: {}\r\n{auth}{typ}Content-Length: {}\r\n\r\n{}",
            self.method,
            self.path,
            self.addr,
            self.body.len(),
            self.body
        );
        s.write_all(req.as_bytes())
            .map_err(|e| fail(format!("send: {e}")))?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)
            .map_err(|e| fail(format!("read: {e}")))?;
        parse(&buf).ok_or_else(|| {
            let start = String::from_utf8_lossy(&buf[..buf.len().min(120)]).into_owned();
            fail(format!("not an HTTP answer: {start:?}"))
        })
    }
}

/// `GET path` on `addr`.
pub fn get(addr: SocketAddr, path: &str) -> Result<Reply> {
    Request::new("GET", addr, path).send()
}

/// `GET path` parsed as JSON into `T`, on a 200 only; `None` otherwise.
pub fn get_json<T: serde::de::DeserializeOwned>(addr: SocketAddr, path: &str) -> Option<T> {
    get(addr, path).ok()?.json()
}

/// The body of `GET path` when it is a 200; `None` otherwise.
pub fn get_ok(addr: SocketAddr, path: &str) -> Option<String> {
    get(addr, path)
        .ok()
        .filter(|r| r.status == 200)
        .map(|r| r.body)
}

/// Status line, headers and body of raw answer bytes.
fn parse(buf: &[u8]) -> Option<Reply> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut line = head.lines().next()?.split_whitespace();
    line.next().filter(|v| v.starts_with("HTTP/1."))?;
    let status = line.next()?.parse().ok()?;
    Some(Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server answering `answer`; returns its address and what
    /// it received.
    fn serve_once(answer: &'static str) -> (SocketAddr, std::thread::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = vec![0u8; 4096];
            let n = s.read(&mut got).unwrap();
            s.write_all(answer.as_bytes()).unwrap();
            String::from_utf8_lossy(&got[..n]).into_owned()
        });
        (addr, h)
    }

    #[test]
    fn an_answer_is_read_whole_with_its_status_headers_and_body() {
        let (addr, h) =
            serve_once("HTTP/1.0 405 Method Not Allowed\r\nContent-Type: text/plain\r\n\r\nno\n");
        let r = Request::new("POST", addr, "/v1/work")
            .bearer("t0k")
            .body("{}")
            .send()
            .unwrap();
        assert_eq!(r.status, 405);
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.body, "no\n");
        let sent = h.join().unwrap();
        assert!(sent.starts_with("POST /v1/work HTTP/1.0\r\n"), "{sent}");
        assert!(sent.contains("Authorization: Bearer t0k\r\n"), "{sent}");
        assert!(sent.ends_with("Content-Length: 2\r\n\r\n{}"), "{sent}");
    }

    #[test]
    fn nothing_listening_and_garbage_are_errors_naming_the_request() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = l.local_addr().unwrap();
        drop(l);
        let e = get(closed, "/readyz").unwrap_err().to_string();
        assert!(e.contains(&format!("GET http://{closed}/readyz")), "{e}");
        let (addr, _h) = serve_once("SIP/2.0 200 OK\r\n\r\n");
        let e = get(addr, "/metrics").unwrap_err().to_string();
        assert!(e.contains("not an HTTP answer"), "{e}");
    }

    #[test]
    fn json_is_read_on_a_200_only() {
        let (addr, _h) = serve_once("HTTP/1.0 200 OK\r\n\r\n{\"a\":1}");
        let v: serde_json::Value = get_json(addr, "/").unwrap();
        assert_eq!(v["a"], 1);
        let (addr, _h) = serve_once("HTTP/1.0 503 Service Unavailable\r\n\r\n{\"a\":1}");
        assert!(get_json::<serde_json::Value>(addr, "/").is_none());
    }
}
