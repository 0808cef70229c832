//! A big site in one gate's memory (issue 29): R registrations (default
//! 1,000,000, each its own AoR and subscriber address), C calls up (default
//! 100,000), then F subscribers over TCP (default 1,000,000 flows: a
//! connection each, registered through it, so the flow is held). Every
//! message goes through the routing core as it would from the network;
//! the registrar's and the callee's 200s are made from what the gate
//! forwarded. Prints, after each stage, the process's RSS and the cost of
//! what runs while that much is held: the work report (`GET /v1/work`), a
//! work snapshot (taken and written, as at a restart), and the sweep that
//! runs once a second.
//!
//! ```console
//! $ cargo build --release -p sip-gate --example scale
//! $ target/release/examples/scale 1000000 100000 1000000 [2500 [1000]]
//! ```
//!
//! The last two arguments are the simulated registration and call rates
//! (per second); the core's once-a-second sweep runs on that clock.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use sip_gate::admin::{report, NodeInfo};
use sip_gate::{Action, Core, Inbound, Out};

#[path = "../benches/common/mod.rs"]
mod common;

/// Subscriber `i`'s address: one per subscriber, in 10.0.0.0/8.
fn subscriber(i: u64) -> SocketAddr {
    let b = (i as u32).to_be_bytes();
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, b[1], b[2], b[3])), 5060)
}

fn register(i: u64, from: SocketAddr, transport: &str) -> Bytes {
    Bytes::from(format!(
        "REGISTER sip:example.com SIP/2.0\r\n\
Via: SIP/2.0/{transport} {from};branch=z9hG4bKscale-{i};rport\r\n\
Max-Forwards: 70\r\n\
From: <sip:sub{i}@example.com>;tag=r{i}\r\n\
To: <sip:sub{i}@example.com>\r\n\
Call-ID: scale-reg-{i}@{ip}\r\n\
CSeq: 1 REGISTER\r\n\
Contact: <sip:sub{i}@{from}>\r\n\
Expires: 3600\r\n\
Content-Length: 0\r\n\r\n",
        ip = from.ip()
    ))
}

/// The registrar's 200 to a forwarded REGISTER: its Vias, From, To
/// (tagged), Call-ID, CSeq and the binding for one hour.
fn registered(fwd: &Bytes, contact: &str) -> Bytes {
    let text = std::str::from_utf8(fwd).expect("the gate forwards text");
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut out = String::from("SIP/2.0 200 OK\r\n");
    for line in head.lines().skip(1) {
        let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
        match name.as_str() {
            "via" | "from" | "call-id" | "cseq" => out.push_str(&format!("{line}\r\n")),
            "to" => out.push_str(&format!("{line};tag=reg\r\n")),
            _ => {}
        }
    }
    out.push_str(&format!(
        "Contact: <{contact}>;expires=3600\r\nContent-Length: 0\r\n\r\n"
    ));
    Bytes::from(out)
}

/// Registrations (and TCP subscribers) a second of simulated time unless
/// the fourth argument says otherwise: an hour's re-registrations of a
/// million subscribers, with room. The transactions of the last 32 s are in
/// memory with the work, as in service.
const REG_RATE: u64 = 2500;
/// New calls a second of simulated time (fifth argument).
const CALL_RATE: u64 = 1000;

/// The simulated instant of the `i`-th message of a stream at `rate` a
/// second from `start`; the core's sweep runs at each whole second.
fn tick(core: &Core, start: Instant, i: u64, rate: u64) -> Instant {
    let at = start + Duration::from_micros(i * 1_000_000 / rate);
    if i.is_multiple_of(rate) {
        core.sweep(at);
    }
    at
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

/// Sends `req` from `inbound` and answers it with the registrar's 200;
/// whether the 200 went back toward the subscriber.
fn round_trip(core: &Core, inbound: Inbound, req: Bytes, contact: &str, now: Instant) -> bool {
    let (to, fwd) = match core.handle(inbound, req, now) {
        Action::Send(Out::Udp { to, .. } | Out::Tcp { to, .. }, fwd) => (to, fwd),
        _ => return false,
    };
    let from_sg = Inbound::Udp {
        listener: 0,
        peer: to,
    };
    matches!(
        core.handle(from_sg, registered(&fwd, contact), now),
        Action::Send(..)
    )
}

/// What the work report, a snapshot and a sweep cost with this much held,
/// the stage having ended at `now`.
fn costs(stage: &str, core: &Core, now: Instant, dir: &Path) {
    // The transactions of the stage are over (Timer K/J): a second's sweep
    // well past them leaves only the work itself in memory.
    let later = now + Duration::from_secs(40);
    core.sweep(later);
    let node = NodeInfo {
        name: "scale".into(),
        started_ms: 0,
        run: None,
    };
    let (r, report_t) = timed(|| report(core, &node));
    let json = serde_json::to_vec(&r).map(|v| v.len()).unwrap_or(0);
    let counts: Vec<String> = r
        .instances
        .iter()
        .map(|(id, w)| format!("{id} {}c/{}r", w.counts.dialogs, w.counts.registrations))
        .collect();
    let path = dir.join("work.snapshot");
    let (snap, take_t) = timed(|| core.work_snapshot(later).expect("snapshot"));
    let ((), save_t) = timed(|| snap.save(&path).expect("saved"));
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let ((), sweep_t) = timed(|| core.sweep(later + Duration::from_secs(1)));
    println!(
        "{stage}: RSS {:.1} MiB ({} transactions left); work report {report_t:?} ({json} B: {}); snapshot taken {take_t:?}, written {save_t:?} ({size} B); sweep {sweep_t:?}",
        rss_mib(),
        core.transactions(),
        counts.join(", ")
    );
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().ok());
    let regs = args.next().flatten().unwrap_or(1_000_000);
    let calls = args.next().flatten().unwrap_or(100_000);
    let flows = args.next().flatten().unwrap_or(1_000_000);
    let reg_rate = args.next().flatten().unwrap_or(REG_RATE).max(1);
    let call_rate = args.next().flatten().unwrap_or(CALL_RATE).max(1);
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("metrics recorder");
    // The site ends in its [overload] table: the transaction bound goes there.
    let site = format!(
        "{}max_transactions = {}\n\n[work]\nmax_registrations = {}\n",
        common::site(),
        (regs + flows + calls).max(1) * 2,
        (regs + flows).max(1)
    );
    let config = Arc::new(SiteConfig::from_str_at(&site, Path::new("scale.toml")).expect("site"));
    let core = Core::new(config.clone(), DrainState::new(config.clone())).expect("core");
    core.work().assume_fresh_site();
    let scratch = Core::new(config.clone(), DrainState::new(config)).expect("core");
    let dir = tempfile::tempdir().expect("temp dir");
    let now = Instant::now();
    println!("start: RSS {:.1} MiB", rss_mib());

    // Registrations arrive at `reg_rate` a second of simulated time, and the
    // core's once-a-second sweep runs on that clock: transactions end as
    // they would in service, and what stays is the work.
    let (ok, t) = timed(|| {
        (0..regs)
            .filter(|&i| {
                let at = tick(&core, now, i, reg_rate);
                let from = subscriber(i);
                let inbound = Inbound::Udp {
                    listener: 0,
                    peer: from,
                };
                let contact = format!("sip:sub{i}@{from}");
                round_trip(&core, inbound, register(i, from, "UDP"), &contact, at)
            })
            .count()
    });
    println!("{ok} of {regs} registrations confirmed in {t:?}");
    costs(
        "registrations",
        &core,
        now + Duration::from_secs(regs / reg_rate),
        dir.path(),
    );

    let caller = Inbound::Udp {
        listener: 0,
        peer: "203.0.113.10:40000".parse().expect("address"),
    };
    let t_calls = now + Duration::from_secs(regs / reg_rate + 40);
    let (up, t) = timed(|| {
        (0..calls)
            .filter(|&n| {
                let at = tick(&core, t_calls, n, call_rate);
                let msgs = common::call_messages(&scratch, n, caller, at);
                // INVITE, its 200, ACK: the call stays up.
                msgs.into_iter()
                    .take(3)
                    .all(|(inbound, m)| !matches!(core.handle(inbound, m, at), Action::None))
            })
            .count()
    });
    let dialogs: u64 = (0..3).map(|i| core.work().get(i).dialogs).sum();
    println!("{up} of {calls} calls up in {t:?} ({dialogs} dialogs in the book)");
    costs(
        "registrations + calls",
        &core,
        t_calls + Duration::from_secs(calls / call_rate),
        dir.path(),
    );

    let t_flows = t_calls + Duration::from_secs(calls / call_rate + 40);
    let (held, t) = timed(|| {
        (0..flows)
            .filter(|&i| {
                let at = tick(&core, t_flows, i, reg_rate);
                let from = subscriber(regs + i);
                let conn = i + 1;
                let inbound = Inbound::Tcp {
                    listener: 0,
                    conn,
                    peer: from,
                };
                core.tcp_opened(inbound);
                let contact = format!("sip:sub{}@{from};transport=tcp", regs + i);
                round_trip(
                    &core,
                    inbound,
                    register(regs + i, from, "TCP"),
                    &contact,
                    at,
                ) && core.tcp_held(conn, at)
            })
            .count()
    });
    println!("{held} of {flows} TCP flows registered and held in {t:?}");
    costs(
        "registrations + calls + flows",
        &core,
        t_flows + Duration::from_secs(flows / reg_rate),
        dir.path(),
    );
}
