//! The subscribers: each one connection (TCP, or TLS trusting the run's
//! certificate) from one of the run's source addresses, a REGISTER through
//! it as an RFC 5626 client sends one (`;ob`, `reg-id`, `+sip.instance`)
//! answered 200, then held: quiet first, then a CRLF keep-alive
//! (`\r\n\r\n`, RFC 5626 3.5.1) at a fixed interval, each awaiting its
//! `\r\n` pong.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, timeout, Instant};

/// How long a subscriber waits for its 200 or a pong.
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// Registrations in flight at once: a gate that falls behind the rate
/// is not buried under more and more waiting connections.
const IN_FLIGHT: usize = 512;

/// Plain TCP or TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tcp,
    Tls,
}

impl Kind {
    fn via(self) -> &'static str {
        match self {
            Kind::Tcp => "TCP",
            Kind::Tls => "TLS",
        }
    }

    fn param(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Tls => "tls",
        }
    }
}

/// What every subscriber counts, all together.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Subscribers whose REGISTER got its 200.
    pub(crate) registered: AtomicU64,
    /// Connects (or TLS handshakes) that failed.
    pub(crate) refused: AtomicU64,
    /// REGISTERs answered otherwise, or not in time.
    pub(crate) no_ok: AtomicU64,
    /// Subscribers past their registration, one way or the other.
    pub(crate) done: AtomicU64,
    /// Keep-alives sent, and those that got their pong in time.
    pub(crate) pings: AtomicU64,
    pub(crate) pongs: AtomicU64,
    /// Registered connections that failed a keep-alive (closed, no pong).
    pub(crate) lost: AtomicU64,
    /// From the connect to the 200, each registered subscriber, µs.
    pub(crate) register_us: Mutex<Vec<u64>>,
}

impl Tally {
    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// When the held connections ping: none until `quiet_until`, then each
/// every `interval` (spread evenly over it by subscriber number) until
/// `pings_until`, when they close.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) quiet_until: Instant,
    pub(crate) interval: Duration,
    pub(crate) pings_until: Instant,
    /// Subscribers in the run, TCP and TLS together.
    pub(crate) total: u32,
}

/// What every subscriber shares.
pub(crate) struct Cx {
    pub(crate) net: u8,
    pub(crate) gate: std::net::IpAddr,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) tally: Tally,
    pub(crate) plan: watch::Receiver<Option<Plan>>,
}

impl Cx {
    /// A client configuration trusting only the run's certificate.
    pub(crate) fn tls_config(
        cert: CertificateDer<'static>,
    ) -> Result<rustls::ClientConfig, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).map_err(|e| e.to_string())?;
        Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Conn = Box<dyn Io>;

/// Opens subscribers `first..first + count` of `kind` at `rate` a second
/// (at most [`IN_FLIGHT`] registering at once), each then held in its own
/// task until the plan's end; returns once every one has registered or
/// failed.
pub(crate) async fn open_set(
    cx: &Arc<Cx>,
    kind: Kind,
    (first, count): (u32, u32),
    rate: u32,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    let gate_port = match kind {
        Kind::Tcp => crate::setup::TCP_PORT,
        Kind::Tls => crate::setup::TLS_PORT,
    };
    let to = SocketAddr::new(cx.gate, gate_port);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let done_before = Tally::get(&cx.tally.done);
    // Ticks of 10 ms, each starting its share of the rate.
    let tick = Duration::from_millis(10);
    let per_tick = f64::from(rate) / 100.0;
    let start = Instant::now();
    let mut due = 0.0;
    let mut next = first;
    let end = first + count;
    let mut k = 0u32;
    while next < end {
        k += 1;
        due += per_tick;
        while f64::from(next - first) < due && next < end {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            tasks.push(tokio::spawn(subscriber(cx.clone(), kind, next, to, permit)));
            next += 1;
        }
        sleep_until(start + tick * k).await;
    }
    while Tally::get(&cx.tally.done) - done_before < u64::from(count) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One subscriber's whole life.
async fn subscriber(cx: Arc<Cx>, kind: Kind, n: u32, to: SocketAddr, permit: OwnedSemaphorePermit) {
    let t0 = Instant::now();
    let from = crate::setup::source_ip(cx.net, n);
    let opened = timeout(ANSWER_WAIT, connect(&cx, kind, from, to)).await;
    let Ok(Ok((mut conn, local))) = opened else {
        Tally::add(&cx.tally.refused);
        Tally::add(&cx.tally.done);
        return;
    };
    let answer = timeout(ANSWER_WAIT, register(&mut conn, kind, n, local)).await;
    let failure = match answer {
        Ok(Ok(None)) => None,
        Ok(Ok(Some(why))) => Some(why),
        Ok(Err(e)) => Some(format!("connection failed: {e}")),
        Err(_) => Some(format!("no final answer in {} s", ANSWER_WAIT.as_secs())),
    };
    if let Some(why) = failure {
        // The first few failures say why on stderr: a run that fails once
        // in a CI log must carry its own evidence.
        if Tally::get(&cx.tally.no_ok) < 5 {
            eprintln!("{kind:?} subscriber {n} ({local}): {why}");
        }
        Tally::add(&cx.tally.no_ok);
        Tally::add(&cx.tally.done);
        return;
    }
    let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
    if let Ok(mut v) = cx.tally.register_us.lock() {
        v.push(us);
    }
    Tally::add(&cx.tally.registered);
    Tally::add(&cx.tally.done);
    drop(permit);
    hold(&cx, conn, n).await;
}

/// A connection from `from` to the gate, TLS on top for `Kind::Tls`; the
/// local address, which the REGISTER's Via and Contact name.
async fn connect(
    cx: &Cx,
    kind: Kind,
    from: std::net::IpAddr,
    to: SocketAddr,
) -> std::io::Result<(Conn, SocketAddr)> {
    let sock = TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(from, 0))?;
    let tcp = sock.connect(to).await?;
    tcp.set_nodelay(true)?;
    let local = tcp.local_addr()?;
    let conn: Conn = match kind {
        Kind::Tcp => Box::new(tcp),
        Kind::Tls => {
            let name = ServerName::IpAddress(to.ip().into());
            let tls = tokio_rustls::TlsConnector::from(cx.tls.clone())
                .connect(name, tcp)
                .await?;
            Box::new(tls)
        }
    };
    Ok((conn, local))
}

/// Sends subscriber `n`'s REGISTER and reads its final answer: `None` for a
/// 200, otherwise what came instead.
async fn register(
    conn: &mut Conn,
    kind: Kind,
    n: u32,
    local: SocketAddr,
) -> std::io::Result<Option<String>> {
    let (t, p) = (kind.via(), kind.param());
    let msg = format!(
        "REGISTER sip:example.com SIP/2.0\r\n\
         Via: SIP/2.0/{t} {local};branch=z9hG4bK-cb-{p}-{n};rport\r\n\
         Max-Forwards: 70\r\n\
         To: <sip:{p}{n}@example.com>\r\n\
         From: <sip:{p}{n}@example.com>;tag=cb{n}\r\n\
         Call-ID: cb-{p}-{n}@conn-bench\r\n\
         CSeq: 1 REGISTER\r\n\
         Contact: <sip:{p}{n}@{local};transport={p};ob>;reg-id=1;\
         +sip.instance=\"<urn:uuid:00000000-0000-0000-{}-{n:012}>\"\r\n\
         Expires: 3600\r\n\
         Supported: path, outbound\r\n\
         Content-Length: 0\r\n\r\n",
        if kind == Kind::Tcp { "0000" } else { "0001" }
    );
    conn.write_all(msg.as_bytes()).await?;
    conn.flush().await?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        // Every answer here has no body (Content-Length: 0).
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if conn.read_buf(&mut buf).await? == 0 {
                return Ok(Some(format!(
                    "connection closed after {} bytes of answer",
                    buf.len()
                )));
            }
            if buf.len() > 16 * 1024 {
                return Ok(Some("an answer head past 16 KiB".into()));
            }
        };
        let head = buf.drain(..end).collect::<Vec<u8>>();
        if head.starts_with(b"SIP/2.0 1") {
            continue;
        }
        if head.starts_with(b"SIP/2.0 200") {
            return Ok(None);
        }
        return Ok(Some(String::from_utf8_lossy(&head).into_owned()));
    }
}

/// Holds a registered connection as the plan says, then closes it.
async fn hold(cx: &Cx, mut conn: Conn, n: u32) {
    let mut plan_rx = cx.plan.clone();
    let plan = match plan_rx.wait_for(Option::is_some).await {
        Ok(p) => match *p {
            Some(p) => p,
            None => return,
        },
        Err(_) => return,
    };
    let offset = plan
        .interval
        .mul_f64(f64::from(n) / f64::from(plan.total.max(1)));
    let mut at = plan.quiet_until + offset;
    while at < plan.pings_until {
        sleep_until(at).await;
        Tally::add(&cx.tally.pings);
        match timeout(ANSWER_WAIT, ping(&mut conn)).await {
            Ok(Ok(true)) => Tally::add(&cx.tally.pongs),
            _ => {
                Tally::add(&cx.tally.lost);
                return;
            }
        }
        at += plan.interval;
    }
    sleep_until(plan.pings_until).await;
}

/// One keep-alive: whether the `\r\n` pong came back.
async fn ping(conn: &mut Conn) -> std::io::Result<bool> {
    conn.write_all(b"\r\n\r\n").await?;
    conn.flush().await?;
    let mut pong = [0u8; 2];
    conn.read_exact(&mut pong).await?;
    Ok(&pong == b"\r\n")
}
