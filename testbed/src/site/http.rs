//! A tiny blocking HTTP/1.0 GET for the nodes' admin endpoints; the
//! rehearsal polls a handful of them once a second.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The status code and body of `GET path`; `None` when nothing answers.
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// `GET path` parsed as JSON into `T`, on a 200 only.
pub fn get_json<T: serde::de::DeserializeOwned>(addr: SocketAddr, path: &str) -> Option<T> {
    let (code, body) = get(addr, path)?;
    (code == 200).then_some(())?;
    serde_json::from_str(&body).ok()
}
