//! The avalanche's generator: `reg-avalanche gen`, a process of its own
//! (so it can run at another `nice` than the stand-ins and the callers).
//!
//! Subscriber `k` (0-based, of `--subscribers`) sends its REGISTER from
//! source `k mod --sources` at `k × seconds / subscribers` s: the whole
//! population evenly within the window, every source at the same rate.
//! Each subscriber has its own AoR (`sip:uK@avalanche.test`) and Call-ID.
//! A transaction is retransmitted as RFC 3261 17.1.2.2 has it (Timer E from
//! 500 ms doubling to 4 s) until its final response or Timer F
//! (`--txn-timeout-s`): then it is lost. A 503 with Retry-After is retried
//! (CSeq + 1) that many seconds later, up to `--retries` times. Every
//! transaction's outcome is counted, so none is lost silently: sent =
//! 200 + 503 with Retry-After + other + no answer. The counts are the one
//! JSON line the process writes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use clap::Args;
use serde::{Deserialize, Serialize};

/// The generator's flags, set by the benchmark.
#[derive(Debug, Clone, Args)]
pub(crate) struct GenOpts {
    /// Where the REGISTERs go (the gate's listener).
    #[arg(long)]
    pub(crate) to: SocketAddr,
    /// The sources' addresses, comma separated, each sending from port 5060.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) sources: Vec<IpAddr>,
    #[arg(long)]
    pub(crate) subscribers: u32,
    /// The window the first REGISTERs are spread over, s.
    #[arg(long)]
    pub(crate) seconds: u32,
    /// Retries of a REGISTER refused with 503 and Retry-After.
    #[arg(long)]
    pub(crate) retries: u32,
    /// Timer F: a transaction without final response by then is lost, s.
    #[arg(long)]
    pub(crate) txn_timeout_s: u32,
}

/// Every REGISTER transaction by outcome, all sources together. Every
/// subscriber ends registered (its last transaction got 200) or in
/// `gave_up`, `other` or `lost`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GenCounts {
    /// Transactions started (first sends; retries are new transactions).
    pub(crate) sent: u64,
    /// Retransmissions of them (Timer E).
    pub(crate) retransmitted: u64,
    pub(crate) ok: u64,
    /// 503 carrying a Retry-After.
    pub(crate) refused: u64,
    /// Any other final response (a 503 without Retry-After among them).
    pub(crate) other: u64,
    /// No final response within Timer F.
    pub(crate) lost: u64,
    /// Subscribers still refused after their last retry.
    pub(crate) gave_up: u64,
    /// From the first send to the last first send of the window, µs.
    pub(crate) window_us: u64,
}

impl GenCounts {
    fn add(&mut self, o: &GenCounts) {
        self.sent += o.sent;
        self.retransmitted += o.retransmitted;
        self.ok += o.ok;
        self.refused += o.refused;
        self.other += o.other;
        self.lost += o.lost;
        self.gave_up += o.gave_up;
        self.window_us = self.window_us.max(o.window_us);
    }

    /// Transactions whose outcome is known: every one sent, when none was
    /// lost silently.
    pub(crate) fn accounted(&self) -> u64 {
        self.ok + self.refused + self.other + self.lost
    }

    /// First REGISTERs a second over the window: the rate reached.
    pub(crate) fn rate(&self, subscribers: u64) -> f64 {
        subscribers as f64 * 1e6 / self.window_us.max(1) as f64
    }
}

/// Runs the generator: one thread per source; the sum on stdout as JSON.
pub(crate) fn run(o: &GenOpts) -> Result<(), String> {
    let start = Instant::now() + Duration::from_millis(200);
    let n = o.sources.len() as u32;
    if n == 0 || o.subscribers < n {
        return Err("need at least one source and a subscriber per source".into());
    }
    let threads: Vec<_> = o
        .sources
        .iter()
        .enumerate()
        .map(|(i, &ip)| {
            let sock = UdpSocket::bind(SocketAddr::new(ip, 5060))
                .map_err(|e| format!("binding {ip}:5060: {e}"))?;
            let src = Source::new(o, sock, i as u32, n, start);
            Ok(std::thread::spawn(move || src.run()))
        })
        .collect::<Result<_, String>>()?;
    let mut total = GenCounts::default();
    for t in threads {
        let c = t.join().map_err(|_| "a source thread panicked")??;
        total.add(&c);
    }
    println!(
        "{}",
        serde_json::to_string(&total).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// A transaction in flight: its CSeq (1 + retries so far), when it was
/// first sent, and the retransmissions so far.
#[derive(Debug, Clone, Copy)]
struct Txn {
    cseq: u32,
    first: Instant,
    retrans: u32,
}

/// What a timer does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// Timer E of transaction (subscriber, cseq, retransmissions so far).
    Retransmit(u32, u32, u32),
    /// The retry of a subscriber refused with Retry-After, as this CSeq.
    Retry(u32, u32),
}

/// One source: its socket, its subscribers, its transactions and timers.
struct Source {
    sock: UdpSocket,
    to: SocketAddr,
    local: SocketAddr,
    /// Its next subscriber to start, and the step between its subscribers.
    next: u32,
    step: u32,
    total: u32,
    start: Instant,
    /// Seconds of the window per subscriber.
    spacing: f64,
    retries: u32,
    timeout: Duration,
    txns: HashMap<u32, Txn>,
    timers: BinaryHeap<Reverse<(Instant, Due)>>,
    counts: GenCounts,
    last_first: Instant,
}

impl Source {
    fn new(o: &GenOpts, sock: UdpSocket, index: u32, step: u32, start: Instant) -> Source {
        let local = sock.local_addr().unwrap_or(o.to);
        Source {
            sock,
            to: o.to,
            local,
            next: index,
            step,
            total: o.subscribers,
            start,
            spacing: f64::from(o.seconds) / f64::from(o.subscribers),
            retries: o.retries,
            timeout: Duration::from_secs(o.txn_timeout_s.into()),
            txns: HashMap::new(),
            timers: BinaryHeap::new(),
            counts: GenCounts::default(),
            last_first: start,
        }
    }

    fn due_of(&self, k: u32) -> Instant {
        self.start + Duration::from_secs_f64(f64::from(k) * self.spacing)
    }

    fn run(mut self) -> Result<GenCounts, String> {
        let mut buf = vec![0u8; 65_536];
        loop {
            let now = Instant::now();
            while self.next < self.total && self.due_of(self.next) <= now {
                let k = self.next;
                self.next += self.step;
                self.last_first = now;
                self.begin(k, 1, now)?;
            }
            while let Some(&Reverse((at, due))) = self.timers.peek() {
                if at > now {
                    break;
                }
                self.timers.pop();
                self.fire(due, now)?;
            }
            let done = self.next >= self.total && self.txns.is_empty() && self.timers.is_empty();
            if done {
                break;
            }
            let wake = [
                (self.next < self.total).then(|| self.due_of(self.next)),
                self.timers.peek().map(|t| t.0 .0),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_millis(10));
            let wait = wake
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_micros(100), Duration::from_millis(10));
            self.sock
                .set_read_timeout(Some(wait))
                .map_err(|e| e.to_string())?;
            match self.sock.recv(&mut buf) {
                Ok(n) => self.answer(buf.get(..n).unwrap_or_default(), Instant::now())?,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(format!("recv on {}: {e}", self.local)),
            }
        }
        self.counts.window_us = self
            .last_first
            .saturating_duration_since(self.start)
            .as_micros() as u64;
        Ok(self.counts)
    }

    /// Starts subscriber `k`'s transaction with CSeq `cseq`.
    fn begin(&mut self, k: u32, cseq: u32, now: Instant) -> Result<(), String> {
        self.send(k, cseq)?;
        self.counts.sent += 1;
        self.txns.insert(
            k,
            Txn {
                cseq,
                first: now,
                retrans: 0,
            },
        );
        self.timers.push(Reverse((
            now + Duration::from_millis(500),
            Due::Retransmit(k, cseq, 0),
        )));
        Ok(())
    }

    fn fire(&mut self, due: Due, now: Instant) -> Result<(), String> {
        match due {
            Due::Retry(k, cseq) => self.begin(k, cseq, now),
            Due::Retransmit(k, cseq, n) => {
                let Some(t) = self.txns.get(&k).copied() else {
                    return Ok(());
                };
                if t.cseq != cseq || t.retrans != n {
                    return Ok(()); // answered, or an older timer
                }
                if now.saturating_duration_since(t.first) >= self.timeout {
                    self.txns.remove(&k);
                    self.counts.lost += 1;
                    return Ok(());
                }
                self.send(k, cseq)?;
                self.counts.retransmitted += 1;
                self.txns.insert(
                    k,
                    Txn {
                        retrans: n + 1,
                        ..t
                    },
                );
                // Timer E: 500 ms doubling, at most T2 (4 s); Timer F caps it.
                let next = Duration::from_millis(500 << (n + 1).min(3));
                let at = (now + next).min(t.first + self.timeout);
                self.timers
                    .push(Reverse((at, Due::Retransmit(k, cseq, n + 1))));
                Ok(())
            }
        }
    }

    fn send(&self, k: u32, cseq: u32) -> Result<(), String> {
        let l = self.local;
        let msg = format!(
            "REGISTER sip:avalanche.test SIP/2.0\r\n\
             Via: SIP/2.0/UDP {l};branch=z9hG4bK-av-{k}-{cseq};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:u{k}@avalanche.test>;tag=av{k}\r\n\
             To: <sip:u{k}@avalanche.test>\r\n\
             Call-ID: av-{k}@avalanche.test\r\n\
             CSeq: {cseq} REGISTER\r\n\
             Contact: <sip:u{k}@{l}>\r\n\
             Expires: 3600\r\n\
             Content-Length: 0\r\n\r\n"
        );
        match self.sock.send_to(msg.as_bytes(), self.to) {
            Ok(_) => Ok(()),
            // The loopback queue was full: Timer E sends it again.
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(format!("send from {l}: {e}")),
        }
    }

    /// A response: the final one ends its transaction (a retransmitted
    /// one, or one for an older CSeq, is ignored).
    fn answer(&mut self, data: &[u8], now: Instant) -> Result<(), String> {
        let Some(r) = Response::parse(data) else {
            return Ok(());
        };
        if r.code < 200 {
            return Ok(());
        }
        let Some(t) = self.txns.get(&r.subscriber).copied() else {
            return Ok(());
        };
        if t.cseq != r.cseq {
            return Ok(());
        }
        self.txns.remove(&r.subscriber);
        match (r.code, r.retry_after) {
            (200..=299, _) => self.counts.ok += 1,
            (503, Some(secs)) => {
                self.counts.refused += 1;
                if t.cseq <= self.retries {
                    let at = now + Duration::from_secs(secs.into());
                    self.timers
                        .push(Reverse((at, Due::Retry(r.subscriber, t.cseq + 1))));
                } else {
                    self.counts.gave_up += 1;
                }
            }
            _ => self.counts.other += 1,
        }
        Ok(())
    }
}

/// What the generator reads of a response.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) code: u16,
    pub(crate) subscriber: u32,
    pub(crate) cseq: u32,
    pub(crate) retry_after: Option<u32>,
}

impl Response {
    /// A response to one of the generator's REGISTERs; `None` for anything
    /// else.
    pub(crate) fn parse(data: &[u8]) -> Option<Response> {
        let text = std::str::from_utf8(data).ok()?;
        let mut lines = text.split("\r\n");
        let code = lines
            .next()?
            .strip_prefix("SIP/2.0 ")?
            .get(..3)?
            .parse()
            .ok()?;
        let (mut subscriber, mut cseq, mut retry_after) = (None, None, None);
        for line in lines.take_while(|l| !l.is_empty()) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "call-id" | "i" => {
                    subscriber = value
                        .strip_prefix("av-")
                        .and_then(|v| v.strip_suffix("@avalanche.test"))
                        .and_then(|v| v.parse().ok());
                }
                "cseq" => cseq = value.split(' ').next().and_then(|n| n.parse().ok()),
                "retry-after" => {
                    retry_after = value
                        .split(|c: char| !c.is_ascii_digit())
                        .next()
                        .and_then(|n| n.parse().ok());
                }
                _ => {}
            }
        }
        Some(Response {
            code,
            subscriber: subscriber?,
            cseq: cseq?,
            retry_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_503_is_read_with_its_retry_after_and_a_foreign_response_is_not() {
        let r = "SIP/2.0 503 Overloaded\r\nVia: SIP/2.0/UDP 127.82.0.150:5060\r\nCall-ID: av-42@avalanche.test\r\nCSeq: 2 REGISTER\r\nRetry-After: 7 ;duration=1\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            Response::parse(r.as_bytes()),
            Some(Response {
                code: 503,
                subscriber: 42,
                cseq: 2,
                retry_after: Some(7),
            })
        );
        let ok = r
            .replace("503 Overloaded", "200 OK")
            .replace("Retry-After: 7 ;duration=1\r\n", "");
        assert_eq!(
            Response::parse(ok.as_bytes()).map(|r| (r.code, r.retry_after)),
            Some((200, None))
        );
        let other = r.replace("av-42@avalanche.test", "1-2@sipp");
        assert_eq!(Response::parse(other.as_bytes()), None);
        assert_eq!(Response::parse(b"REGISTER sip:x SIP/2.0\r\n\r\n"), None);
    }
}
