//! How many UDP workers each listener has (issue 29). With `[overload]
//! udp_workers = N` every UDP listener has N from the start. Otherwise the
//! count is automatic: a listener starts with one worker, and a supervisor
//! thread reads, once a second, how much of the time its workers were on
//! CPU (the kernel's per-thread run time in `/proc/self/task/TID/schedstat`,
//! nothing counted in the workers' own loop). When the listener's workers
//! averaged more than `udp_worker_busy_percent` for [`SUSTAIN`] seconds in
//! a row, it binds another `SO_REUSEPORT` socket on the listener's address
//! and starts a worker on it, up to `udp_workers_max` (by default one per
//! core, at most 8).
//!
//! Why start at one: one worker costs less CPU per call than one per core
//! while it keeps up (fewer threads wake and switch for the same datagrams,
//! docs/benchmarks.md, the load benchmark's sixth pass), and a worker that is
//! on CPU most of the time is one that a second core would relieve. Why the
//! CPU time and not the queue's waits: on a machine whose cores are busy with
//! other work a worker's datagrams wait although it is mostly off CPU, and
//! another thread would only compete for the same cores.
//!
//! What adding a socket costs: the kernel hashes peers over the group's
//! sockets, so some peers move to the new socket. A datagram of such a peer
//! still queued in the old socket may then be handled after a later one on
//! the new socket, once, at the switch (a 180 after its 200 is not
//! forwarded, RFC 3261 16.7). A worker once added stays until the gate
//! stops: closing its socket would drop whatever its queue holds.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ringsync::config::OverloadConfig;
use tokio_util::sync::CancellationToken;

use super::udp::{bind_udp, udp_worker, udp_workers};
use super::{Net, UDP_POLL};
use crate::metrics as m;

/// How often the supervisor reads the workers' CPU time.
const TICK: Duration = Duration::from_secs(1);
/// Ticks in a row above the threshold before a worker is added: a burst of
/// a second or two is what the receive queue is for.
pub(crate) const SUSTAIN: u32 = 3;

/// The worker count of every UDP listener, from `[overload]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Plan {
    /// `udp_workers = N`: N from the start, never changed.
    Fixed(usize),
    /// One from the start, more up to `max` while the workers are busy
    /// more than `busy` (a fraction of the time) on average.
    Auto {
        /// The most workers a listener gets.
        max: usize,
        /// The threshold, 0 to 1.
        busy: f64,
    },
}

impl Plan {
    /// The plan `[overload]` asks for.
    pub(crate) fn of(o: &OverloadConfig) -> Plan {
        match o.udp_workers {
            Some(n) => Plan::Fixed(n),
            None => Plan::Auto {
                max: o.udp_workers_max.unwrap_or_else(udp_workers),
                busy: f64::from(o.udp_worker_busy_percent) / 100.0,
            },
        }
    }

    /// The sockets each UDP listener binds at start.
    pub(crate) fn initial(&self) -> usize {
        match *self {
            Plan::Fixed(n) => n,
            Plan::Auto { .. } => 1,
        }
    }

    /// The most workers a listener gets, and the busy fraction above which
    /// one is added (a fixed count is its own maximum: never added to).
    fn bounds(&self) -> (usize, f64) {
        match *self {
            Plan::Fixed(n) => (n, 1.0),
            Plan::Auto { max, busy } => (max, busy),
        }
    }
}

/// The decision to add a worker: a listener's busy fraction seen once a
/// tick, and whether it has been above the threshold [`SUSTAIN`] ticks in a
/// row. Counting starts afresh after each addition, so a new worker gets
/// as long to take its share as the first had to show it needed help.
#[derive(Debug)]
pub(crate) struct Sustained {
    threshold: f64,
    above: u32,
}

impl Sustained {
    /// A decision with `threshold` as the busy fraction (0 to 1).
    pub(crate) fn new(threshold: f64) -> Sustained {
        Sustained {
            threshold,
            above: 0,
        }
    }

    /// One tick's busy fraction; true when a worker should be added now.
    pub(crate) fn observe(&mut self, busy: f64) -> bool {
        if busy > self.threshold {
            self.above += 1;
        } else {
            self.above = 0;
        }
        if self.above >= SUSTAIN {
            self.above = 0;
            return true;
        }
        false
    }
}

/// A worker thread as the supervisor sees it: its kernel thread id (0
/// until the thread has read it) and its CPU time at the last tick.
struct Worker {
    tid: Arc<AtomicU32>,
    cpu_ns: Option<u64>,
}

/// One UDP listener's workers.
struct Listener {
    idx: usize,
    addr: SocketAddr,
    workers: Vec<Worker>,
    decision: Sustained,
    count: metrics::Gauge,
    busy: metrics::Gauge,
}

/// Starts the UDP workers of every listener (`sockets`: its index and the
/// sockets bound at start) and the supervisor, which publishes the workers'
/// busy fraction for either plan and adds workers for an automatic one.
/// Returns every thread started; the supervisor joins the workers it added
/// before it ends.
pub(super) fn start(
    net: &Arc<Net>,
    sockets: Vec<(usize, Vec<Arc<UdpSocket>>)>,
    plan: Plan,
    shutdown: &CancellationToken,
) -> io::Result<Vec<JoinHandle<()>>> {
    let config = net.core.config();
    let (max, threshold) = plan.bounds();
    let mut threads = Vec::new();
    let mut listeners = Vec::new();
    for (idx, socks) in sockets {
        let Some(first) = socks.first() else { continue };
        let addr = first.local_addr()?;
        let name = config
            .listeners
            .get(idx)
            .map_or_else(|| idx.to_string(), |l| l.name.clone());
        let mut workers = Vec::new();
        for (w, sock) in socks.into_iter().enumerate() {
            let (thread, worker) = spawn_worker(net, idx, w, sock, shutdown)?;
            threads.push(thread);
            workers.push(worker);
        }
        let count = metrics::gauge!(m::UDP_WORKERS, "listener" => name.clone());
        count.set(workers.len() as f64);
        listeners.push(Listener {
            idx,
            addr,
            workers,
            decision: Sustained::new(threshold),
            count,
            busy: metrics::gauge!(m::UDP_WORKER_BUSY, "listener" => name),
        });
    }
    if !listeners.is_empty() {
        let (net, stop) = (net.clone(), shutdown.clone());
        let rcvbuf = config.overload.udp_rcvbuf_bytes;
        threads.push(
            std::thread::Builder::new()
                .name("supervise-udp".into())
                .spawn(move || supervise(&net, listeners, (max, rcvbuf), &stop))?,
        );
    }
    Ok(threads)
}

/// Starts worker `w` of listener `idx` on `sock`.
fn spawn_worker(
    net: &Arc<Net>,
    idx: usize,
    w: usize,
    sock: Arc<UdpSocket>,
    shutdown: &CancellationToken,
) -> io::Result<(JoinHandle<()>, Worker)> {
    let tid = Arc::new(AtomicU32::new(0));
    let (net, stop, own) = (net.clone(), shutdown.clone(), tid.clone());
    let thread = std::thread::Builder::new()
        .name(format!("udp-{idx}-{w}"))
        .spawn(move || {
            own.store(thread_id().unwrap_or(0), Ordering::Relaxed);
            // A hand-over waits for the workers to stop (R-GW-3).
            net.udp_running.fetch_add(1, Ordering::Relaxed);
            udp_worker(net.clone(), idx, sock, stop);
            net.udp_running.fetch_sub(1, Ordering::Relaxed);
        })?;
    Ok((thread, Worker { tid, cpu_ns: None }))
}

/// The calling thread's kernel id, from the `/proc/thread-self` link
/// (`PID/task/TID`).
fn thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// Nanoseconds thread `tid` of this process has run on a CPU.
fn cpu_ns(tid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The supervisor's loop: a tick a second until shutdown, then it joins
/// the workers it started.
fn supervise(
    net: &Arc<Net>,
    mut listeners: Vec<Listener>,
    (max, rcvbuf): (usize, usize),
    shutdown: &CancellationToken,
) {
    let mut added = Vec::new();
    let mut last = Instant::now();
    while sleep(TICK, shutdown) {
        let now = Instant::now();
        let wall = now.duration_since(last).as_nanos() as f64;
        last = now;
        for l in &mut listeners {
            let Some(busy) = l.busy(wall) else { continue };
            l.busy.set(busy);
            if !l.decision.observe(busy) || l.workers.len() >= max {
                continue;
            }
            match l.add(net, rcvbuf, shutdown) {
                Ok(thread) => added.push(thread),
                Err(e) => {
                    tracing::warn!(listener = l.idx, error = %e, "could not add a UDP worker")
                }
            }
        }
    }
    for t in added {
        let _ = t.join();
    }
}

/// Waits `d` in steps of [`UDP_POLL`]; false once `shutdown` is cancelled.
fn sleep(d: Duration, shutdown: &CancellationToken) -> bool {
    let until = Instant::now() + d;
    while !shutdown.is_cancelled() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(UDP_POLL));
    }
    false
}

impl Listener {
    /// The workers' mean share of `wall` nanoseconds on CPU since the last
    /// tick; `None` at the first tick, or when a worker's time cannot be
    /// read (no /proc: the count then stays as it is).
    fn busy(&mut self, wall: f64) -> Option<f64> {
        let mut sum = 0u64;
        let mut all = true;
        for w in &mut self.workers {
            let now = cpu_ns(w.tid.load(Ordering::Relaxed));
            match (w.cpu_ns, now) {
                (Some(then), Some(now)) => sum += now.saturating_sub(then),
                _ => all = false,
            }
            w.cpu_ns = now;
        }
        let n = self.workers.len() as f64;
        (all && wall > 0.0).then(|| sum as f64 / (wall * n))
    }

    /// Binds another socket on the listener's address and starts its worker.
    fn add(
        &mut self,
        net: &Arc<Net>,
        rcvbuf: usize,
        shutdown: &CancellationToken,
    ) -> io::Result<JoinHandle<()>> {
        let sock = Arc::new(bind_udp(self.addr, rcvbuf)?);
        // Known to a hand-over from now on (R-GW-3): its queue is read by
        // the next run too.
        if let Some(all) = net
            .udp_all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(self.idx)
        {
            all.push(sock.clone());
        }
        let w = self.workers.len();
        let (thread, worker) = spawn_worker(net, self.idx, w, sock, shutdown)?;
        self.workers.push(worker);
        self.count.set(self.workers.len() as f64);
        tracing::info!(
            listener = self.idx,
            workers = w + 1,
            "UDP worker added: the workers were busy"
        );
        Ok(thread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29: a worker is added only after [`SUSTAIN`] ticks in a row
    /// above the threshold, and counting starts afresh after each.
    #[test]
    fn a_worker_is_added_after_sustained_load_only() {
        let mut d = Sustained::new(0.75);
        let ticks = [0.9, 0.9, 0.5, 0.9, 0.9, 0.9, 0.8, 0.76, 0.75, 0.99];
        let added: Vec<bool> = ticks.iter().map(|&b| d.observe(b)).collect();
        assert_eq!(
            added,
            [false, false, false, false, false, true, false, false, false, false]
        );
        let mut d = Sustained::new(0.75);
        let added = (0..7).filter(|_| d.observe(1.0)).count();
        assert_eq!(added, 2, "one every SUSTAIN ticks while busy");
    }

    #[test]
    fn the_plan_follows_the_overload_section() {
        let mut o = OverloadConfig::default();
        assert_eq!(
            Plan::of(&o),
            Plan::Auto {
                max: udp_workers(),
                busy: 0.75
            }
        );
        assert_eq!(Plan::of(&o).initial(), 1);
        o.udp_workers_max = Some(3);
        o.udp_worker_busy_percent = 20;
        assert_eq!(Plan::of(&o), Plan::Auto { max: 3, busy: 0.2 });
        o.udp_workers_max = None;
        o.udp_workers = Some(4);
        assert_eq!(Plan::of(&o), Plan::Fixed(4));
        assert_eq!(Plan::of(&o).initial(), 4);
    }

    /// The supervisor reads a thread's CPU time: this thread's, after it
    /// spun, has moved.
    #[test]
    fn a_threads_cpu_time_is_read() {
        let tid = thread_id().expect("/proc/thread-self");
        let before = cpu_ns(tid).expect("schedstat");
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_ns(tid).expect("schedstat") > before);
    }
}
