//! A real browser for the tests: Debian's `chromedriver` (package
//! `chromium-driver`) driving headless `chromium` over the W3C WebDriver
//! protocol, with just the commands a page test needs: open a URL, find,
//! click, type, read text, run a script, take a screenshot.
//!
//! chromedriver listens on `127.0.0.1` at a free port and is started in
//! its own process group, killed whole when the [`Browser`] is dropped
//! (Chromium forks helpers). It refuses HTTP/1.0, so this speaks HTTP/1.1
//! with `Connection: close` and reads the body by its `Content-Length`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::{Error, Result};

/// How long one WebDriver command may take (a navigation on a loaded machine).
const COMMAND: Duration = Duration::from_secs(60);

/// The W3C name of an element reference in a JSON answer.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium behind chromedriver, with one session.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a window of
    /// `width` x `height` CSS pixels.
    pub fn start(width: u32, height: u32) -> Result<Browser> {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let addr = SocketAddr::new(ip, crate::free_port(ip)?);
        let driver = Command::new("chromedriver")
            .arg(format!("--port={}", addr.port()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::NotInstalled {
                    program: "chromedriver".into(),
                    package: "chromium-driver".into(),
                },
                _ => Error::Spawn {
                    program: "chromedriver".into(),
                    source: e,
                },
            })?;
        let mut b = Browser {
            driver,
            addr,
            session: String::new(),
        };
        crate::wait_for("chromedriver listening", Duration::from_secs(10), || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()
        })?;
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-extensions".to_owned(),
            format!("--window-size={width},{height}"),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": args},
        }}});
        let v = b.command("POST", "/session", Some(caps))?;
        b.session = v["sessionId"]
            .as_str()
            .ok_or_else(|| fail("POST /session", format!("no sessionId in {v}")))?
            .to_owned();
        Ok(b)
    }

    fn path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Opens `url` and waits for its load.
    pub fn goto(&self, url: &str) -> Result<()> {
        self.command("POST", &self.path("/url"), Some(json!({ "url": url })))
            .map(drop)
    }

    /// The first element matching the CSS `selector`.
    pub fn find(&self, selector: &str) -> Result<String> {
        let body = json!({"using": "css selector", "value": selector});
        let v = self.command("POST", &self.path("/element"), Some(body))?;
        v[ELEMENT]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| fail(selector, format!("no element: {v}")))
    }

    /// Clicks the first element matching `selector`.
    pub fn click(&self, selector: &str) -> Result<()> {
        let e = self.find(selector)?;
        self.command(
            "POST",
            &self.path(&format!("/element/{e}/click")),
            Some(json!({})),
        )
        .map(drop)
    }

    /// Types `text` into the first element matching `selector`.
    pub fn type_into(&self, selector: &str, text: &str) -> Result<()> {
        let e = self.find(selector)?;
        let body = json!({ "text": text });
        self.command(
            "POST",
            &self.path(&format!("/element/{e}/value")),
            Some(body),
        )
        .map(drop)
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the
    /// page and gives its return value.
    pub fn exec(&self, script: &str, args: Value) -> Result<Value> {
        let body = json!({ "script": script, "args": args });
        self.command("POST", &self.path("/execute/sync"), Some(body))
    }

    /// Polls `script` until it returns something other than `null` or
    /// `false`, under `timeout`; that value. `what` names it in the error.
    pub fn wait_until(&self, what: &str, timeout: Duration, script: &str) -> Result<Value> {
        crate::wait_for(what, timeout, || {
            self.exec(script, json!([]))
                .ok()
                .filter(|v| !v.is_null() && *v != Value::Bool(false))
        })
    }

    /// A PNG of the window, written to `path`.
    pub fn screenshot(&self, path: &Path) -> Result<()> {
        let v = self.command("GET", &self.path("/screenshot"), None)?;
        let png = v
            .as_str()
            .and_then(base64)
            .ok_or_else(|| fail("GET screenshot", "not base64".into()))?;
        std::fs::write(path, png).map_err(|source| Error::File {
            path: path.to_owned(),
            source,
        })
    }

    /// Resizes the window (CSS pixels).
    pub fn resize(&self, width: u32, height: u32) -> Result<()> {
        let body = json!({ "width": width, "height": height });
        self.command("POST", &self.path("/window/rect"), Some(body))
            .map(drop)
    }

    /// One command: its `value`, or the WebDriver error.
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let what = format!("{method} {path}");
        let text = body.map(|b| b.to_string()).unwrap_or_default();
        let answer = exchange(self.addr, method, path, &text).map_err(|e| fail(&what, e))?;
        let v: Value = serde_json::from_str(&answer.1)
            .map_err(|e| fail(&what, format!("{e}: {}", answer.1)))?;
        if answer.0 != 200 {
            return Err(fail(&what, format!("{}: {}", answer.0, v["value"])));
        }
        Ok(v["value"].clone())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = exchange(self.addr, "DELETE", &self.path(""), "");
        }
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}

fn fail(request: &str, reason: String) -> Error {
    Error::Http {
        request: format!("webdriver {request}"),
        reason,
    }
}

/// One HTTP/1.1 exchange: status and body.
fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::result::Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(COMMAND))
        .map_err(|e| e.to_string())?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let (head_len, want) = loop {
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed before the answer's head".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or("no Content-Length")?;
            break (end + 4, len);
        }
    };
    while buf.len() < head_len + want {
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed before the whole body".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let status = String::from_utf8_lossy(&buf[..head_len])
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status line")?;
    let body = String::from_utf8_lossy(&buf[head_len..head_len + want]).into_owned();
    Ok((status, body))
}

/// Standard base64 (the screenshot's encoding), padding optional.
fn base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| *c != b'=' && !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64("iVBORw0KGgo=").unwrap(), b"\x89PNG\r\n\x1a\n");
        assert!(base64("a*b").is_none());
    }
}
