//! Health probes: an OPTIONS ping to every SIP instance, from a UDP listener.
//!
//! Any response counts as alive (a 404 or 405 still proves the SIP stack
//! answers). `failures` probes in a row without an answer mark the instance
//! `down`, one answer marks it up again. R-SG-2 needs this: a draining
//! instance refuses only while another instance is up.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::sys::socket::MsgFlags;
use ringsync::capture::Transport;
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use ringsync::view::Health;
use tokio_util::sync::CancellationToken;

use crate::branch::PROBE_PREFIX;

/// Highest probe sequence answered, per instance.
#[derive(Debug)]
pub(crate) struct HealthBook {
    answered: Vec<AtomicU64>,
}

impl HealthBook {
    /// A book for `n` instances.
    pub(crate) fn new(n: usize) -> HealthBook {
        HealthBook {
            answered: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records the answer to a probe; `branch` is `z9hG4bK-p<idx>-<seq>`.
    /// Only an answer from the probed instance's own address counts.
    pub(crate) fn answer(&self, config: &SiteConfig, branch: &[u8], from: SocketAddr) {
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
        if config.instances.get(idx).and_then(|i| i.sip) != Some(from) {
            return;
        }
        if let Some(a) = self.answered.get(idx) {
            a.fetch_max(seq, Ordering::Relaxed);
        }
    }

    fn answered(&self, idx: usize, seq: u64) -> bool {
        self.answered
            .get(idx)
            .is_some_and(|a| a.load(Ordering::Relaxed) >= seq)
    }
}

/// What traffic says of each instance (R-FT-1 amended): when one last
/// answered a request the gate forwarded to it, and when one last failed
/// (a transport error toward it, or a forwarded request that timed out).
/// Traffic outranks the probes: an instance whose latest evidence is an
/// answer is alive whatever its probe says.
///
/// Read on every in-dialog request to a probe-`down` instance and written
/// on responses from instances: two atomics per instance, no lock. Times
/// are milliseconds after `base`, plus one (0: never).
#[derive(Debug)]
pub(crate) struct Traffic {
    base: Instant,
    /// Per instance: the last response received from it.
    answered: Vec<AtomicU64>,
    /// Per instance: the last traffic failure toward it.
    failed: Vec<AtomicU64>,
}

impl Traffic {
    /// No evidence yet for `n` instances; times count from `now`.
    pub(crate) fn new(n: usize, now: Instant) -> Traffic {
        Traffic {
            base: now,
            answered: (0..n).map(|_| AtomicU64::new(0)).collect(),
            failed: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    /// Moves `slot` forward to `at`; the store is skipped when it holds
    /// that millisecond already, so a busy instance's responses do not all
    /// write the same cache line.
    fn note(&self, slot: Option<&AtomicU64>, at: Instant) {
        let Some(slot) = slot else { return };
        let ms = self.ms(at);
        if slot.load(Ordering::Relaxed) < ms {
            slot.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// Instance `idx` answered a request at `now`: it is alive.
    pub(crate) fn answered(&self, idx: usize, now: Instant) {
        self.note(self.answered.get(idx), now);
    }

    /// Traffic toward instance `idx` failed; `at` is when the request that
    /// failed was sent (an answer received after it outranks it).
    pub(crate) fn failed(&self, idx: usize, at: Instant) {
        self.note(self.failed.get(idx), at);
    }

    /// Whether traffic shows instance `idx` alive: its latest evidence is
    /// an answer (one later than any failure). No evidence at all is not
    /// alive: then the probe decides alone.
    pub(crate) fn alive(&self, idx: usize) -> bool {
        let answered = self
            .answered
            .get(idx)
            .map_or(0, |a| a.load(Ordering::Relaxed));
        let failed = self
            .failed
            .get(idx)
            .map_or(0, |f| f.load(Ordering::Relaxed));
        answered > failed
    }
}

/// What the prober needs: the site, where to report health, the book the
/// core fills with answers, and the address the probes come from.
#[derive(Clone)]
pub(crate) struct Prober {
    /// Its config is read each round: a reload's new instances are probed.
    pub(crate) drain: Arc<DrainState>,
    pub(crate) book: Arc<HealthBook>,
    /// Advertised address of the listener whose UDP socket sends the probes.
    pub(crate) from: SocketAddr,
}

fn probe(p: &Prober, config: &SiteConfig, idx: usize, seq: u64) -> Option<(Bytes, SocketAddr)> {
    let to = config.instances.get(idx)?.sip?;
    let host = p.from.to_string();
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

/// Sends one probe without waiting: the socket is the forwarding socket,
/// blocking for the UDP workers' receives, and a full send buffer must cost
/// a probe (counted as unanswered), never a stalled runtime thread (R-FT-2).
fn send_now(socket: &UdpSocket, bytes: &[u8], to: SocketAddr) {
    if let Err(e) = crate::datagram::send(socket, bytes, to, MsgFlags::MSG_DONTWAIT) {
        tracing::debug!(%to, error = %e, "health probe not sent");
    }
}

/// Says when an instance goes down or comes up, and why (as media-ctl does
/// for its mgs).
fn log_change(config: &SiteConfig, idx: usize, health: Health, fails: u32) {
    let id = config.instances.get(idx).map_or("?", |i| i.id.as_str());
    match health {
        Health::Down => tracing::warn!(
            instance = id,
            unanswered = fails,
            "no answer to health probes: down (no new dialogs; its in-dialog requests get 408 unless it answers traffic: R-FT-1)"
        ),
        _ => tracing::info!(
            instance = id,
            health = health.as_str(),
            "answers health probes"
        ),
    }
}

/// Probes every SIP instance until `shutdown`; reports health changes to the
/// drain state. `socket` is the UDP socket of the listener at `p.from`, whose
/// receive loop hands the answers to the core (which records them in `p.book`).
///
/// Bounded whatever the instances do (R-FT-2): one task, one round at a
/// time (every instance's probe sent without blocking, then one wait of
/// `timeout_ms` for all of them), so at most one probe per instance is ever
/// outstanding and an unreachable or blackholed instance costs one datagram
/// per round. Nothing here runs on the forwarding path: the UDP workers only
/// record an answer (an atomic max) and read the view the health feeds.
/// Where the probes are copied for `[capture]`: the capture, and the
/// listener whose socket sends them, at its address.
pub(crate) struct Tap {
    pub(crate) capture: Arc<ringsync::capture::Capture>,
    pub(crate) listener: usize,
    pub(crate) local: SocketAddr,
}

pub(crate) async fn run(
    p: Prober,
    socket: Arc<UdpSocket>,
    tap: Option<Tap>,
    shutdown: CancellationToken,
) {
    // `[health]` is read at start: a reload may not change it.
    let cfg = p.drain.config().health.clone();
    if cfg.interval_ms == 0 {
        return;
    }
    let mut fails = Vec::new();
    let mut last = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        seq += 1;
        let config = p.drain.config();
        let targets: Vec<usize> = config
            .instances
            .iter()
            .enumerate()
            .filter(|(_, i)| i.sip.is_some())
            .map(|(n, _)| n)
            .collect();
        fails.resize(config.instances.len(), 0u32);
        last.resize(config.instances.len(), Health::Unknown);
        for &idx in &targets {
            if let Some((bytes, to)) = probe(&p, &config, idx, seq) {
                if let Some(t) = &tap {
                    let ends = (t.local, to);
                    t.capture
                        .sip(t.listener, Transport::Udp, ends, &bytes, None);
                }
                send_now(&socket, &bytes, to);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(cfg.timeout_ms)) => {}
        }
        for &idx in &targets {
            let health = if p.book.answered(idx, seq) {
                fails[idx] = 0;
                Health::Up
            } else {
                fails[idx] = fails[idx].saturating_add(1);
                if fails[idx] < cfg.failures {
                    continue;
                }
                Health::Down
            };
            if last[idx] != health {
                log_change(&config, idx, health, fails[idx]);
                last[idx] = health;
            }
            p.drain.set_health(idx, health);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R-FT-1 (amended): alive only while the latest traffic evidence is
    /// an answer; no evidence leaves it to the probe.
    #[test]
    fn r_ft_1_traffic_is_alive_while_its_latest_evidence_is_an_answer() {
        let t0 = Instant::now();
        let t = Traffic::new(2, t0);
        assert!(!t.alive(0), "no evidence: the probe decides");
        t.answered(0, t0);
        assert!(t.alive(0), "an answer, even at the first millisecond");
        assert!(!t.alive(1), "only the instance that answered");
        t.failed(0, t0 + Duration::from_secs(1));
        assert!(!t.alive(0), "failed since its last answer");
        t.answered(0, t0 + Duration::from_secs(2));
        assert!(t.alive(0), "answered since the failure");
        // A request sent before the last answer and found timed out later
        // does not outrank that answer.
        t.failed(0, t0 + Duration::from_millis(1500));
        assert!(t.alive(0));
        // Out of range: nothing recorded, nothing alive.
        t.answered(9, t0);
        assert!(!t.alive(9));
    }
}
