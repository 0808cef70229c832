//! Health probes: an OPTIONS ping to every SIP instance, from a UDP listener.
//!
//! Any response counts as alive (a 404 or 405 still proves the SIP stack
//! answers). `failures` probes in a row without an answer mark the instance
//! `down`, one answer marks it up again. R-SG-2 needs this: a draining
//! instance refuses only while another instance is up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ringsync::view::Health;
use std::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::proxy::{Core, PROBE_PREFIX};

/// Highest probe sequence answered, per instance.
#[derive(Debug)]
pub struct HealthBook {
    answered: Vec<AtomicU64>,
}

impl HealthBook {
    /// A book for `n` instances.
    pub fn new(n: usize) -> HealthBook {
        HealthBook {
            answered: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// Records the answer to a probe; `branch` is `z9hG4bK-p<idx>-<seq>`. Only
/// an answer from the probed instance's own address counts.
pub(crate) fn probe_answer(core: &Core, branch: &[u8], from: std::net::SocketAddr) {
    let Some(rest) = branch.strip_prefix(PROBE_PREFIX.as_bytes()) else {
        return;
    };
    let Ok(rest) = std::str::from_utf8(rest) else {
        return;
    };
    let Some((idx, seq)) = rest.split_once('-') else {
        return;
    };
    let (Ok(idx), Ok(seq)) = (idx.parse::<usize>(), seq.parse::<u64>()) else {
        return;
    };
    if core.config().instances.get(idx).and_then(|i| i.sip) != Some(from) {
        return;
    }
    if let Some(a) = core.health_book().answered.get(idx) {
        a.fetch_max(seq, Ordering::Relaxed);
    }
}

fn probe(
    core: &Core,
    listener: usize,
    idx: usize,
    seq: u64,
) -> Option<(Bytes, std::net::SocketAddr)> {
    let inst = core.config().instances.get(idx)?;
    let to = inst.sip?;
    let l = core.listeners().get(listener)?;
    let host = l.advertise.to_string();
    let target = to.to_string();
    let text = format!(
        "OPTIONS sip:{target} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {host};branch={PROBE_PREFIX}{idx}-{seq}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:sip-gate@{host}>;tag=probe{idx}\r\n\
         To: <sip:{target}>\r\n\
         Call-ID: probe-{idx}-{seq}@{host}\r\n\
         CSeq: {seq} OPTIONS\r\n\
         User-Agent: sip-gate/{ver} health\r\n\
         Content-Length: 0\r\n\r\n",
        ver = env!("CARGO_PKG_VERSION"),
    );
    Some((Bytes::from(text), to))
}

/// Probes every SIP instance until `shutdown`; reports health changes to the
/// drain state. `socket` is the UDP socket of listener `listener`, whose
/// receive loop hands the answers to the core.
pub async fn run(
    core: Arc<Core>,
    listener: usize,
    socket: Arc<UdpSocket>,
    shutdown: CancellationToken,
) {
    let cfg = core.config().health.clone();
    if cfg.interval_ms == 0 {
        return;
    }
    let targets: Vec<usize> = core
        .config()
        .instances
        .iter()
        .enumerate()
        .filter(|(_, i)| i.sip.is_some())
        .map(|(n, _)| n)
        .collect();
    let mut fails = vec![0u32; core.config().instances.len()];
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        seq += 1;
        for &idx in &targets {
            if let Some((bytes, to)) = probe(&core, listener, idx, seq) {
                let _ = socket.send_to(&bytes, to);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(cfg.timeout_ms)) => {}
        }
        for &idx in &targets {
            let answered = core.health_book().answered[idx].load(Ordering::Relaxed) >= seq;
            if answered {
                fails[idx] = 0;
                core.drain().set_health(idx, Health::Up);
            } else {
                fails[idx] = fails[idx].saturating_add(1);
                if fails[idx] >= cfg.failures {
                    core.drain().set_health(idx, Health::Down);
                }
            }
        }
    }
}
