//! The upgrade's hand-over measured through the real binary (issue 39,
//! R-GW-3; figures in docs/benchmarks.md, "sip-gate: upgrade hand-over"):
//! with idle plain TCP connections open to the gate and a steady OPTIONS
//! flow over UDP and over TCP through it (answered by SIPp behind),
//! `sip-gate upgrade` runs. In the suite a bounded load (200 connections,
//! one OPTIONS every 10 ms each); the benchmark's figures are taken with
//! `UPGRADE_CONNS=10000 UPGRADE_EVERY_MS=10` on the release build (a run
//! whose pause outlasted the overload deadline once refused UDP OPTIONS
//! with 503s; counted). Printed, not asserted (timing on a shared
//! machine): the hand-over's steps as times from the trigger, read from
//! the log's timestamps (among them the instant the new run reads the
//! listeners, and the old run's done, when the last connection moved), the
//! first answer each flow got after the pause began, the longest gap
//! between two answers each flow saw and when it ended, and when the CLI
//! returned. Asserted: every connection moved and stays open, and every
//! OPTIONS of both flows was answered.
//!
//! Addresses: `127.139.13.0/24`: the gate's listener and admin on `.1`,
//! the sg (SIPp over UDP and over TCP) on `.11`, the flows from `.21`, the
//! idle connections from `.100`-`.119`.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use testbed::{Scenario, Sipp, Transport};

use crate::common::{ip, server_addr};
use crate::upgrade::{gate, logged, took_over, upgrade};

const NET: (u8, u8) = (139, 13);
/// Idle plain TCP connections open across the upgrade (`UPGRADE_CONNS`,
/// default 200: the suite's bounded load).
fn conns() -> usize {
    env_or("UPGRADE_CONNS", 200).clamp(1, 10_000) as usize
}

/// One OPTIONS per flow this often (`UPGRADE_EVERY_MS`, default 10).
fn every() -> Duration {
    Duration::from_millis(env_or("UPGRADE_EVERY_MS", 10).clamp(1, 1000))
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// An OPTIONS from `from` over `transport`, the `n`th of its flow.
fn options(to: SocketAddr, from: SocketAddr, transport: &str, n: u64) -> String {
    format!(
        "OPTIONS sip:uas@{to} SIP/2.0\r\nVia: SIP/2.0/{transport} {from};branch=z9hG4bK-m{transport}-{n};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:m@{from}>;tag=m{n}\r\nTo: <sip:uas@{to}>\r\n\
         Call-ID: m-{transport}-{n}@{from}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    )
}

/// What a flow saw: OPTIONS sent, answered (200), refused (a 5xx: the
/// gate's overload deadline, R-OV-1), the longest gap between two answers,
/// and when each answer came (to find the first the new run gave).
#[derive(Debug)]
struct Flow {
    sent: u64,
    answered: u64,
    refused: u64,
    longest_gap: Duration,
    answers: Vec<SystemTime>,
}

impl Flow {
    /// The counts and the longest gap (not every answer's time).
    fn summary(&self) -> String {
        format!(
            "sent {}, answered {}, refused {}, longest gap {:?}",
            self.sent, self.answered, self.refused, self.longest_gap
        )
    }

    /// The longest gap between two answers and when it ended, from `t0`.
    fn longest_after(&self, t0: SystemTime) -> Option<(Duration, Duration)> {
        self.answers
            .windows(2)
            .filter_map(|w| {
                Some((
                    w[1].duration_since(w[0]).ok()?,
                    w[1].duration_since(t0).ok()?,
                ))
            })
            .max()
    }

    /// The first answer at or after `at`.
    fn first_after(&self, at: SystemTime) -> Option<SystemTime> {
        self.answers.iter().copied().find(|a| *a >= at)
    }
}

/// A flow over UDP until `stop`.
fn udp_flow(to: SocketAddr, stop: Arc<AtomicBool>) -> JoinHandle<Flow> {
    std::thread::spawn(move || {
        let sock = UdpSocket::bind((ip(NET, 21), 0)).unwrap();
        let from = sock.local_addr().unwrap();
        sock.set_read_timeout(Some(every())).unwrap();
        let mut f = Flow {
            sent: 0,
            answered: 0,
            refused: 0,
            longest_gap: Duration::ZERO,
            answers: Vec::new(),
        };
        let mut last = Instant::now();
        let mut buf = [0u8; 4096];
        let mut next = Instant::now();
        let until_idle = |f: &Flow, stop: &AtomicBool| {
            stop.load(Ordering::Relaxed) && f.answered + f.refused >= f.sent
        };
        let mut tail = None;
        loop {
            if !stop.load(Ordering::Relaxed) && Instant::now() >= next {
                sock.send_to(options(to, from, "UDP", f.sent).as_bytes(), to)
                    .unwrap();
                f.sent += 1;
                next += every();
            }
            match sock.recv(&mut buf) {
                Ok(n) if buf[..n].starts_with(b"SIP/2.0 200") => {
                    f.answered += 1;
                    f.longest_gap = f.longest_gap.max(last.elapsed());
                    f.answers.push(SystemTime::now());
                    last = Instant::now();
                }
                Ok(n) if buf[..n].starts_with(b"SIP/2.0 5") => f.refused += 1,
                _ => {}
            }
            if until_idle(&f, &stop) {
                return f;
            }
            if stop.load(Ordering::Relaxed) {
                // The answers still on their way: 2 s at most.
                let t = *tail.get_or_insert_with(Instant::now);
                if t.elapsed() > Duration::from_secs(2) {
                    return f;
                }
            }
        }
    })
}

/// A flow over one TCP connection until `stop`.
fn tcp_flow(to: SocketAddr, stop: Arc<AtomicBool>) -> JoinHandle<Flow> {
    std::thread::spawn(move || {
        let sock = TcpStream::connect(to).unwrap();
        let from = sock.local_addr().unwrap();
        let mut w = sock.try_clone().unwrap();
        let sending = stop.clone();
        let sender = std::thread::spawn(move || {
            let mut sent = 0u64;
            let mut next = Instant::now();
            while !sending.load(Ordering::Relaxed) {
                w.write_all(options(to, from, "TCP", sent).as_bytes())
                    .unwrap();
                sent += 1;
                next += every();
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            sent
        });
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut r = BufReader::new(sock);
        let (mut answered, mut longest_gap, mut last) = (0u64, Duration::ZERO, Instant::now());
        let mut answers = Vec::new();
        // Once stopped: the sender's count, then the answers still on
        // their way (2 s at most).
        let mut sent: Option<(u64, Instant)> = None;
        let mut sender = Some(sender);
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) => panic!("the flow's connection closed"),
                Ok(_) if line.starts_with("SIP/2.0 200") => {
                    answered += 1;
                    longest_gap = longest_gap.max(last.elapsed());
                    answers.push(SystemTime::now());
                    last = Instant::now();
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("the flow's connection: {e}"),
            }
            if stop.load(Ordering::Relaxed) && sender.as_ref().is_some_and(|s| s.is_finished()) {
                let n = sender.take().unwrap().join().unwrap();
                sent = Some((n, Instant::now()));
            }
            if let Some((n, at)) = sent {
                if answered >= n || at.elapsed() > Duration::from_secs(2) {
                    return Flow {
                        sent: n,
                        answered,
                        refused: 0,
                        longest_gap,
                        answers,
                    };
                }
            }
        }
    })
}

fn uas(transport: Transport) -> testbed::SippHandle {
    Sipp::new(Scenario::repo("uas_options"))
        .local(server_addr(NET, 0).ip(), 5060)
        .transport(transport)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap()
}

/// Issue 39's speed: prints the hand-over time with 2,000 open TCP
/// connections and the longest gap a UDP and a TCP flow saw.
#[test]
fn upgrade_hand_over_time_with_open_connections_and_the_longest_gap() {
    let (_dir, site, listener, admin) = crate::upgrade::site(NET, false);
    let mut text = std::fs::read_to_string(&site).unwrap();
    text.push_str("\n[overload]\nper_source_rate = 0\n");
    std::fs::write(&site, text).unwrap();
    let old = gate(&site, admin, None);
    let (_uas_udp, _uas_tcp) = (uas(Transport::Udp), uas(Transport::Tcp));
    let idle: Vec<TcpStream> = (0..conns())
        .map(|i| {
            let from = SocketAddr::new(ip(NET, 100 + (i % 20) as u8), 0);
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.bind(&from.into()).unwrap();
            s.connect(&listener.into()).unwrap();
            TcpStream::from(s)
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let flows = [
        udp_flow(listener, stop.clone()),
        tcp_flow(listener, stop.clone()),
    ];
    std::thread::sleep(Duration::from_secs(1));
    let trigger = SystemTime::now();
    let t0 = Instant::now();
    let _new = upgrade(&site, admin);
    let returned = t0.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let [udp, tcp] = flows.map(|f| f.join().unwrap());
    let moved = took_over(&old, "connections");
    // The old run's phases: the pause, the state sent, the sockets, done.
    let log = old.log();
    for l in log.lines().filter(|l| l.contains("upgrade: handed over")) {
        println!("{l}");
    }
    let timeline = Timeline::read(&log, trigger);
    let pause = timeline.at(READY);
    let first = |f: &Flow| {
        pause
            .and_then(|p| f.first_after(trigger + p))
            .and_then(|a| a.duration_since(trigger).ok())
    };
    println!(
        "from the trigger: {timeline}; first answer after the pause began: UDP {:?}, TCP {:?}; \
         longest gap (and its end): UDP {:?}, TCP {:?}; sip-gate upgrade returned {returned:?}",
        first(&udp),
        first(&tcp),
        udp.longest_after(trigger),
        tcp.longest_after(trigger),
    );
    // Every idle connection is still open: a read finds nothing, not EOF.
    let mut buf = [0u8; 1];
    for s in &idle {
        s.set_nonblocking(true).unwrap();
        let r = (&*s).read(&mut buf);
        assert!(
            matches!(&r, Err(e) if e.kind() == ErrorKind::WouldBlock),
            "an idle connection: {r:?}"
        );
    }
    println!(
        "upgrade with {} idle TCP connections (+1 flow, +1 to the sg): moved {moved:?}; \
         UDP flow: {}; TCP flow: {} (one OPTIONS each every {:?})",
        conns(),
        udp.summary(),
        tcp.summary(),
        every()
    );
    assert!(
        moved.is_some_and(|m| m >= conns() as u64),
        "moved {moved:?}"
    );
    // Given up first: the two connections that read and wrote within the
    // last 500 ms (the TCP flow's and the gate's to the sg), none of the
    // idle ones (opened a second before, silent since).
    assert_eq!(
        logged(&log, "upgrade: handed over", "busy"),
        Some(2),
        "{log}"
    );
    assert_eq!(
        (udp.answered, udp.refused),
        (udp.sent, 0),
        "{}",
        udp.summary()
    );
    assert_eq!(tcp.answered, tcp.sent, "{}", tcp.summary());
}

/// The old run's line after which it pauses.
const READY: &str = "upgrade: the new run is ready";

/// The hand-over's steps as the two runs logged them (both write to the
/// old run's log), as times from the trigger: the log's timestamps are the
/// wall clock, as the trigger's is.
struct Timeline(Vec<(&'static str, Option<Duration>)>);

impl Timeline {
    /// The steps, each the first line that contains it.
    const STEPS: [(&'static str, &'static str); 7] = [
        ("asked", "upgrade asked by"),
        ("new run started", "upgrade: new run started"),
        ("new run asks", "upgrade: the new run asks to take over"),
        ("ready, paused", READY),
        (
            "new run reads the listeners",
            "upgrade: reading the listeners",
        ),
        ("every socket passed, done", "upgrade: handed over"),
        ("new run took over", "took over from the running gate"),
    ];

    fn read(log: &str, trigger: SystemTime) -> Timeline {
        let at = |what: &str| {
            let line = log.lines().find(|l| l.contains(what))?;
            stamp(line)?.duration_since(trigger).ok()
        };
        Timeline(
            Self::STEPS
                .iter()
                .map(|(name, what)| (*name, at(what)))
                .collect(),
        )
    }

    /// The time of the step whose line contains `what`.
    fn at(&self, what: &str) -> Option<Duration> {
        let i = Self::STEPS.iter().position(|(_, w)| *w == what)?;
        self.0[i].1
    }
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps: Vec<String> = self
            .0
            .iter()
            .map(|(name, at)| match at {
                Some(d) => format!("{name} +{:.1} ms", d.as_secs_f64() * 1000.0),
                None => format!("{name} (not logged)"),
            })
            .collect();
        f.write_str(&steps.join(", "))
    }
}

/// The time a log line starts with (`2026-12-07T20:39:04.123456Z`, the
/// gate's text log in UTC).
fn stamp(line: &str) -> Option<SystemTime> {
    let t = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = t.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut h = hms.split(':').map(|p| p.parse::<u64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    let nanos: u32 = format!("{frac:0<9}").get(..9)?.parse().ok()?;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
}
