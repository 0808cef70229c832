//! The live chart's data: new work per instance over the last minutes, the
//! same counter the rehearsal charts (`sipgate_new_work_total{instance}` of
//! every gate), sampled once a second by `ringsync serve` into a ring
//! buffer of [`CAPACITY`] samples, so its memory does not grow with uptime.
//! Each sample also names the instances in the drain zone then, which the
//! page shades.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::api::AdminApi;
use ringsync::view::Zone;
use ringsync::work::NodeKind;

/// Samples kept: ten minutes at one a second.
pub const CAPACITY: usize = 600;

/// The window of [`Sample::rate`]: at one sample a second, a count of one
/// or two is all spikes; ten seconds make a readable rate.
pub const RATE_WINDOW_MS: u64 = 10_000;

/// The gates' counter of new work routed to each instance.
const NEW_WORK: &str = "sipgate_new_work_total";

/// One second of the site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was taken (Unix ms).
    pub t_ms: u64,
    /// New work each instance got since the sample before, summed over
    /// the gates that answered both times.
    pub new_work: BTreeMap<String, u64>,
    /// New work each instance got per second over the last
    /// [`RATE_WINDOW_MS`] (or since the first sample, when the history is
    /// younger): what the chart plots.
    #[serde(default)]
    pub rate: BTreeMap<String, f64>,
    /// The instances in the drain zone at that time.
    pub draining: BTreeSet<String>,
}

/// The ring buffer, and each gate's last raw counter (to make differences).
#[derive(Debug)]
pub struct History {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    samples: VecDeque<Sample>,
    last: HashMap<(SocketAddr, String), u64>,
}

impl History {
    /// A history of at most `capacity` samples.
    pub fn new(capacity: usize) -> Arc<History> {
        Arc::new(History {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every change below leaves the buffer whole; a panic cannot tear it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one reading: each gate's raw counters (`(gate, instance,
    /// value)`). The first reading of a counter only sets its base; a counter
    /// that went down restarted from zero (the gate restarted), so its new
    /// value is all new work.
    pub fn observe(
        &self,
        t_ms: u64,
        raw: &[(SocketAddr, String, u64)],
        draining: BTreeSet<String>,
    ) {
        let mut inner = self.lock();
        let mut new_work: BTreeMap<String, u64> = BTreeMap::new();
        let mut last = HashMap::with_capacity(raw.len());
        for (gate, id, v) in raw {
            let key = (*gate, id.clone());
            let delta = match inner.last.get(&key) {
                Some(&before) if *v >= before => v - before,
                Some(_) => *v,
                None => 0,
            };
            *new_work.entry(id.clone()).or_default() += delta;
            last.insert(key, *v);
        }
        // Only the counters read now are kept: a gate that went away does
        // not stay in memory.
        inner.last = last;
        if inner.samples.len() == self.capacity {
            inner.samples.pop_front();
        }
        let rate = rate(&inner.samples, t_ms, &new_work);
        inner.samples.push_back(Sample {
            t_ms,
            new_work,
            rate,
            draining,
        });
    }

    /// The samples taken after `after_ms` (all of them without), oldest first.
    pub fn since(&self, after_ms: Option<u64>) -> Vec<Sample> {
        let inner = self.lock();
        let from = after_ms.unwrap_or(0);
        inner
            .samples
            .iter()
            .filter(|s| after_ms.is_none() || s.t_ms > from)
            .cloned()
            .collect()
    }

    /// How many samples are held.
    pub fn len(&self) -> usize {
        self.lock().samples.len()
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// At most this many samples are held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// New work per second per instance over the [`RATE_WINDOW_MS`] ending at
/// `t_ms`, whose last second is `now`: the counts of the samples after the
/// base (the newest sample at least a window old, else the oldest held)
/// over the time since the base. Empty with no earlier sample.
fn rate(held: &VecDeque<Sample>, t_ms: u64, now: &BTreeMap<String, u64>) -> BTreeMap<String, f64> {
    let start = t_ms.saturating_sub(RATE_WINDOW_MS);
    let base = held.iter().rposition(|s| s.t_ms <= start).unwrap_or(0);
    let Some(b) = held.get(base) else {
        return BTreeMap::new();
    };
    let span_s = t_ms.saturating_sub(b.t_ms) as f64 / 1000.0;
    if span_s <= 0.0 {
        return BTreeMap::new();
    }
    let mut sum: BTreeMap<String, u64> = now.clone();
    for s in held.iter().skip(base + 1) {
        for (id, n) in &s.new_work {
            *sum.entry(id.clone()).or_default() += n;
        }
    }
    sum.into_iter()
        .map(|(id, n)| (id, n as f64 / span_s))
        .collect()
}

/// Samples the gates every `every` until `shutdown`: the gates are the
/// ones the API's node board last heard from.
pub async fn run(
    api: Arc<AdminApi>,
    history: Arc<History>,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let gates: Vec<SocketAddr> = api
            .nodes()
            .latest()
            .answers
            .iter()
            .filter(|a| a.kind == NodeKind::Gate && a.error.is_none())
            .map(|a| a.addr)
            .collect();
        let reads = gates.iter().map(|g| async move { (*g, metrics(*g).await) });
        let mut raw = Vec::new();
        for (gate, text) in futures::future::join_all(reads).await {
            match text {
                Ok(t) => raw.extend(new_work(&t).into_iter().map(|(i, v)| (gate, i, v))),
                Err(e) => tracing::debug!(%gate, error = %e, "no metrics for the page's chart"),
            }
        }
        let view = api.drain().view();
        let draining = view
            .instances()
            .iter()
            .filter(|i| i.zone == Zone::Drain)
            .map(|i| i.id.clone())
            .collect();
        history.observe(ringsync::work::now_ms(), &raw, draining);
    }
}

/// `GET http://ADDR/metrics`, bounded in time and size.
async fn metrics(addr: SocketAddr) -> Result<String, String> {
    let get = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = Request::get("/metrics")
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("status {}", resp.status()));
        }
        let body = Limited::new(resp.into_body(), 4 << 20)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(1), get)
        .await
        .map_err(|_| "timed out after 1 s".to_owned())?
}

/// The `sipgate_new_work_total{instance="X"} N` series of a metrics text.
fn new_work(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(NEW_WORK)?.strip_prefix('{'))
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once('}')?;
            let id = labels
                .split(',')
                .find_map(|kv| kv.trim().strip_prefix("instance=\""))?
                .strip_suffix('"')?;
            let v = value.trim().parse::<f64>().ok()?;
            (v.is_finite() && v >= 0.0).then(|| (id.to_owned(), v as u64))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(n: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, n], 9091))
    }

    #[test]
    fn the_history_is_bounded_whatever_the_uptime() {
        let h = History::new(60);
        let zone: BTreeSet<String> = ["sg-a".to_owned()].into();
        // A day of samples, with a new gate every minute: memory stays
        // that of the last 60 samples and the counters read last.
        for s in 0..86_400u64 {
            let g = gate((s / 60 % 250) as u8);
            let raw = [(g, "sg-a".to_owned(), s), (g, "sg-b".to_owned(), 2 * s)];
            h.observe(s * 1000, &raw, zone.clone());
            assert!(h.len() <= 60);
            assert!(h.lock().last.len() <= 2);
        }
        assert_eq!(h.len(), h.capacity());
        assert_eq!(h.since(None).first().unwrap().t_ms, (86_400 - 60) * 1000);
    }

    /// Issue 38: the rate is the new work over the last 10 s per second,
    /// so 1-2 calls a second read as a steady 1.5/s, not spikes.
    #[test]
    fn rate_is_new_work_per_second_over_the_window() {
        let h = History::new(100);
        let g = gate(1);
        let mut total = 0;
        let mut rates = Vec::new();
        for s in 0..30u64 {
            total += 1 + s % 2; // 1, 2, 1, 2... calls a second
            h.observe(s * 1000, &[(g, "sg-a".into(), total)], BTreeSet::new());
            rates.push(h.since(None).last().unwrap().rate.get("sg-a").copied());
        }
        assert_eq!(rates[0], None, "no rate before a second sample");
        // s=1: 2 calls over 1 s.
        assert_eq!(rates[1], Some(2.0));
        // From s=10 on, a full window: 15 calls over 10 s.
        assert!(rates[10..].iter().all(|r| *r == Some(1.5)), "{rates:?}");
    }

    #[test]
    fn differences_per_instance_summed_over_gates_and_restarts() {
        let h = History::new(10);
        let none = BTreeSet::new;
        let r = |a: u64, b: u64| vec![(gate(1), "sg-a".into(), a), (gate(2), "sg-a".into(), b)];
        h.observe(1000, &r(10, 5), none());
        h.observe(2000, &r(13, 9), none());
        // gate 2 restarted: its 2 is all new.
        h.observe(3000, &r(14, 2), none());
        let s = h.since(None);
        let got: Vec<u64> = s.iter().map(|s| s.new_work["sg-a"]).collect();
        assert_eq!(got, [0, 7, 3]);
        assert_eq!(h.since(Some(2000)).len(), 1);
    }

    #[test]
    fn the_counter_is_read_from_a_gates_metrics() {
        let text = "# TYPE sipgate_new_work_total counter\n\
                    sipgate_new_work_total{instance=\"sg-a\"} 12\n\
                    sipgate_new_work_total_other{instance=\"x\"} 1\n\
                    sipgate_new_work_draining_total{instance=\"sg-a\",reason=\"exception\"} 3\n\
                    sipgate_new_work_total{instance=\"esg-b\"} 4\n";
        assert_eq!(
            new_work(text),
            [("sg-a".to_owned(), 12), ("esg-b".to_owned(), 4)]
        );
    }
}
