//! `sip-gate announce`: the program ExaBGP runs as its `process` to
//! announce a gate's anycast prefix only while the gate is ready (R-EX-2).
//!
//! It polls the gate's admin `/readyz` and writes ExaBGP's text API on its
//! stdout: `announce route P next-hop H` when the gate turns ready and
//! `withdraw route P next-hop H` when it stops being ready. A stopping gate
//! fails `/readyz` before it refuses anything (R-GW-1), so the route leaves
//! the routers while the gate still completes what it holds. Anything but a
//! clear "ready" — a 503, no answer in time, a refused connection, an
//! answer that does not parse — withdraws the route, with a log line on
//! stderr saying why.
//!
//! [`Announcer`] is the pure state machine (an answer in, a line for ExaBGP
//! out only on change); [`probe`] is one `/readyz` request; [`run`] loops
//! the two until stopped.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::admin::Readiness;

/// The largest `/readyz` answer read; a bigger one is garbage.
const MAX_ANSWER: usize = 64 * 1024;

/// The route ExaBGP announces for this gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The anycast prefix (a bare address is its host prefix).
    pub prefix: IpNet,
    /// The BGP next hop.
    pub next_hop: NextHop,
}

/// The next hop ExaBGP puts on the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextHop {
    /// ExaBGP's own address on the session (`next-hop self`).
    Own,
    /// A given address.
    Addr(IpAddr),
}

impl fmt::Display for NextHop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NextHop::Own => f.write_str("self"),
            NextHop::Addr(a) => write!(f, "{a}"),
        }
    }
}

impl FromStr for NextHop {
    type Err = std::net::AddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "self" {
            return Ok(NextHop::Own);
        }
        s.parse().map(NextHop::Addr)
    }
}

/// Parses a prefix (`198.51.100.7/32`) or a bare address (its host prefix).
pub fn parse_prefix(s: &str) -> Result<IpNet, ipnet::AddrParseError> {
    match s.parse::<IpAddr>() {
        Ok(a) => Ok(IpNet::from(a)),
        Err(_) => s.parse(),
    }
}

/// What ExaBGP is told to do with the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// The gate is ready: traffic may come.
    Announce,
    /// The gate is not ready: traffic must go elsewhere.
    Withdraw,
}

impl Route {
    /// The ExaBGP text API line for `command`, without its newline.
    pub fn line(&self, command: Command) -> String {
        let verb = match command {
            Command::Announce => "announce",
            Command::Withdraw => "withdraw",
        };
        format!("{verb} route {} next-hop {}", self.prefix, self.next_hop)
    }
}

// === impl Announcer ===

/// Whether the route is out, from the `/readyz` answers seen.
///
/// It starts unknown, so the first answer always gives a command: ExaBGP
/// keeps the routes of a program it respawns, and a new program must not
/// assume the old one left none (a withdraw of a route never announced is
/// harmless). After that, a command only on change.
#[derive(Debug, Default)]
pub struct Announcer {
    announced: Option<bool>,
}

impl Announcer {
    /// Nothing known yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// One answer in (`ready` or not); the command for ExaBGP out when the
    /// route must change.
    pub fn observe(&mut self, ready: bool) -> Option<Command> {
        if self.announced == Some(ready) {
            return None;
        }
        self.announced = Some(ready);
        Some(if ready {
            Command::Announce
        } else {
            Command::Withdraw
        })
    }

    /// Whether the route is announced now.
    pub fn announced(&self) -> bool {
        self.announced == Some(true)
    }
}

// === probe ===

/// Why the gate is taken as not ready; the text is the log line's reason.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// The gate answered, and says it is not ready (starting, stopping).
    #[error("the gate at {addr} is not ready ({phase}): {why}")]
    Gate {
        /// The admin address asked.
        addr: SocketAddr,
        /// The gate's phase.
        phase: String,
        /// The gate's reasons, joined.
        why: String,
    },
    /// No connection (the gate is gone, or not started yet).
    #[error("the gate's admin address {addr} is unreachable: {source}")]
    Unreachable {
        /// The admin address asked.
        addr: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
    /// Connected, but no whole answer in time.
    #[error("the gate's admin address {addr} gave no answer within {ms} ms")]
    Timeout {
        /// The admin address asked.
        addr: SocketAddr,
        /// The time allowed.
        ms: u128,
    },
    /// An answer that is not a `/readyz` answer.
    #[error("the gate's admin address {addr} answered garbage: {what}")]
    Garbage {
        /// The admin address asked.
        addr: SocketAddr,
        /// What was wrong with it.
        what: String,
    },
}

/// One `GET /readyz` to `admin` within `timeout`: `Ok` only for a `200`
/// whose [`Readiness`] says ready.
pub async fn probe(admin: SocketAddr, timeout: Duration) -> Result<(), NotReady> {
    let answer = match tokio::time::timeout(timeout, fetch(admin)).await {
        Err(_) => {
            return Err(NotReady::Timeout {
                addr: admin,
                ms: timeout.as_millis(),
            })
        }
        Ok(Err(e)) => return Err(e),
        Ok(Ok(answer)) => answer,
    };
    judge(admin, &answer)
}

/// The whole answer to `GET /readyz` (the connection is closed after it).
async fn fetch(admin: SocketAddr) -> Result<Vec<u8>, NotReady> {
    let unreachable = |source| NotReady::Unreachable {
        addr: admin,
        source,
    };
    let mut s = TcpStream::connect(admin).await.map_err(unreachable)?;
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.map_err(unreachable)?;
    let mut answer = Vec::new();
    (&mut s)
        .take(MAX_ANSWER as u64 + 1)
        .read_to_end(&mut answer)
        .await
        .map_err(unreachable)?;
    if answer.len() > MAX_ANSWER {
        return Err(NotReady::Garbage {
            addr: admin,
            what: format!("an answer over {MAX_ANSWER} bytes"),
        });
    }
    Ok(answer)
}

/// Reads an HTTP answer to `/readyz`: ready only when the status is 200
/// and the body is a [`Readiness`] that says so.
fn judge(addr: SocketAddr, answer: &[u8]) -> Result<(), NotReady> {
    let garbage = |what: String| NotReady::Garbage { addr, what };
    let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(garbage(format!(
            "no HTTP header end in {} bytes",
            answer.len()
        )));
    };
    let head = String::from_utf8_lossy(&answer[..split]);
    let body = &answer[split + 4..];
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| garbage(format!("status line {:?}", clip(status_line))))?;
    if status != 200 && status != 503 {
        return Err(garbage(format!("HTTP status {status}")));
    }
    let r: Readiness = serde_json::from_slice(body).map_err(|e| {
        garbage(format!(
            "HTTP {status} with a body that is not a /readyz answer ({e}): {:?}",
            clip(&String::from_utf8_lossy(body))
        ))
    })?;
    match (status, r.ready) {
        (200, true) => Ok(()),
        (503, false) => Err(NotReady::Gate {
            addr,
            phase: serde_json::to_value(r.phase)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            why: r.why.join("; "),
        }),
        (status, ready) => Err(garbage(format!("HTTP {status} with ready = {ready}"))),
    }
}

/// The first 80 characters of `s`, for a log line.
fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

// === run ===

/// How `sip-gate announce` runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The gate's admin address (`/readyz`).
    pub admin: SocketAddr,
    /// The route to announce.
    pub route: Route,
    /// Time between two `/readyz` requests.
    pub interval: Duration,
    /// Time one request may take before the gate counts as not ready.
    pub timeout: Duration,
}

/// Polls `/readyz` and writes ExaBGP's commands to `out` until `stop`;
/// then withdraws the route if it is out (a program that no longer watches
/// the gate must not leave it announced). Ends early with the error when
/// `out` cannot be written (ExaBGP is gone).
pub async fn run<W: AsyncWrite + Unpin>(
    options: &Options,
    mut out: W,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let mut announcer = Announcer::new();
    let mut reason: Option<String> = None;
    let mut tick = tokio::time::interval(options.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let probed = tokio::select! {
            _ = stop.cancelled() => break,
            p = probe(options.admin, options.timeout) => p,
        };
        // One log line per new reason, not one per poll.
        let now = probed.as_ref().err().map(ToString::to_string);
        if now != reason {
            if let Some(why) = &now {
                tracing::warn!(admin = %options.admin, "not ready: {why}");
            }
            reason = now;
        }
        if let Some(command) = announcer.observe(probed.is_ok()) {
            send(&mut out, &options.route, command).await?;
        }
    }
    if announcer.announced() {
        send(&mut out, &options.route, Command::Withdraw).await?;
    }
    Ok(())
}

/// Writes one command line to ExaBGP, flushed (it reads line by line).
async fn send<W: AsyncWrite + Unpin>(
    out: &mut W,
    route: &Route,
    command: Command,
) -> std::io::Result<()> {
    let line = route.line(command);
    tracing::info!(prefix = %route.prefix, "{line}");
    out.write_all(format!("{line}\n").as_bytes()).await?;
    out.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:9091".parse().unwrap()
    }

    /// R-EX-2: the first answer always speaks, later ones only on change.
    #[test]
    fn r_ex_2_commands_only_on_change_and_the_first_answer_always_speaks() {
        let mut a = Announcer::new();
        assert_eq!(a.observe(false), Some(Command::Withdraw));
        assert_eq!(a.observe(false), None);
        assert_eq!(a.observe(true), Some(Command::Announce));
        assert!(a.announced());
        assert_eq!(a.observe(true), None);
        assert_eq!(a.observe(false), Some(Command::Withdraw));
        assert!(!a.announced());
        let mut b = Announcer::new();
        assert_eq!(b.observe(true), Some(Command::Announce));
    }

    #[test]
    fn lines_are_exabgp_text_api() {
        let r = Route {
            prefix: parse_prefix("198.51.100.7").unwrap(),
            next_hop: NextHop::Own,
        };
        assert_eq!(
            r.line(Command::Announce),
            "announce route 198.51.100.7/32 next-hop self"
        );
        let r = Route {
            prefix: parse_prefix("2001:db8::/64").unwrap(),
            next_hop: "2001:db8::1".parse().unwrap(),
        };
        assert_eq!(
            r.line(Command::Withdraw),
            "withdraw route 2001:db8::/64 next-hop 2001:db8::1"
        );
        assert!(parse_prefix("not a prefix").is_err());
        assert!("nope".parse::<NextHop>().is_err());
    }

    const READY: &str =
        r#"{"ready":true,"phase":"serving","why":[],"transactions":0,"store":"fresh"}"#;
    const STOPPING: &str = r#"{"ready":false,"phase":"stopping","why":["stopping (SIGTERM)"],"transactions":3,"store":"fresh"}"#;

    fn answer(status: &str, body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[test]
    fn ready_only_for_200_that_says_ready() {
        assert!(judge(addr(), &answer("200 OK", READY)).is_ok());
        let e = judge(addr(), &answer("503 Service Unavailable", STOPPING)).unwrap_err();
        assert!(
            matches!(e, NotReady::Gate { ref phase, .. } if phase == "stopping"),
            "{e}"
        );
        assert!(e.to_string().contains("stopping (SIGTERM)"), "{e}");
    }

    /// Bad input is withdrawn with a reason, never a panic.
    #[test]
    fn garbage_answers_are_not_ready_and_say_why() {
        let cases: [&[u8]; 6] = [
            b"",
            b"hello",
            b"HTTP/1.1 200 OK\r\n\r\nhello",
            b"SSH-2.0-OpenSSH\r\n\r\n",
            &answer("404 Not Found", READY),
            &answer("200 OK", STOPPING),
        ];
        for c in cases {
            let e = judge(addr(), c).unwrap_err();
            assert!(matches!(e, NotReady::Garbage { .. }), "{e}");
            assert!(e.to_string().contains("127.0.0.1:9091"), "{e}");
        }
    }
}
