//! A stream collector's writer (`tcp:` and `tls:`): connects (and for
//! TLS checks the collector's certificate), writes the packets the sender
//! queues for it back to back, reconnects after a loss; while it is not
//! connected the copies are dropped as `collector_down`.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use metrics::Counter;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsConnector;

use crate::config::{CaptureTls, Collector, CollectorTransport};

/// How long a collector that could not be reached is left before the
/// next try.
pub(super) const RETRY: Duration = Duration::from_secs(1);
/// A TCP connect or write that takes longer counts the collector gone.
const TCP_DEADLINE: Duration = Duration::from_secs(2);
/// The packets a stream collector's writer may hold.
const TCP_QUEUE: usize = 1024;
/// The most packets a stream collector's writer writes before a flush.
const WRITE_TURN: u64 = 256;

/// Starts the writer of the stream collector `c` (`tls`: how a `tls:` one
/// is checked): the queue into it, and whether it is connected. A `tls:`
/// collector whose CA does not build gets no writer: never up, its copies
/// dropped as `collector_down`.
pub(super) fn spawn_writer(
    c: Collector,
    tls: Option<&CaptureTls>,
    sent: Counter,
    down: Counter,
) -> (mpsc::Sender<Bytes>, Arc<AtomicBool>) {
    let (tx, rx) = mpsc::channel(TCP_QUEUE);
    let up = Arc::new(AtomicBool::new(false));
    let side = match c.transport {
        CollectorTransport::Tls => match tls.map(|t| tls_side(t, c.addr)) {
            Some(Ok(side)) => Some(side),
            // The config was checked when loaded: a CA that no longer
            // builds leaves the collector down (counted).
            Some(Err(e)) => {
                tracing::error!(collector = %c, error = %e, "capture: no TLS to the collector");
                return (tx, up);
            }
            None => {
                tracing::error!(collector = %c, "capture: no CA for the TLS collector");
                return (tx, up);
            }
        },
        _ => None,
    };
    tokio::spawn(stream_writer((c.addr, side), rx, up.clone(), sent, down));
    (tx, up)
}

/// What a TLS collector's connection is checked against: the CA's
/// connector and the name its certificate must be for.
type TlsSide = (TlsConnector, ServerName<'static>);

/// The connector of `tls` toward the collector at `addr` (checked for
/// `server_name`, else its IP address).
fn tls_side(tls: &CaptureTls, addr: SocketAddr) -> Result<TlsSide, String> {
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(tls.roots.iter().cloned());
    if added == 0 {
        return Err(format!("no usable CA certificate in {}", tls.ca.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = match &tls.server_name {
        Some(n) => ServerName::try_from(n.clone()).map_err(|e| e.to_string())?,
        None => ServerName::IpAddress(addr.ip().into()),
    };
    Ok((TlsConnector::from(Arc::new(config)), name))
}

/// A connection to a stream collector, TLS on it when it is a `tls:` one.
type Conn = Box<dyn AsyncWrite + Send + Unpin>;

/// Connects to the collector at `addr` (and shakes hands) within
/// [`TCP_DEADLINE`].
async fn connect(addr: SocketAddr, tls: Option<&TlsSide>) -> io::Result<Conn> {
    let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "no connection within 2 s");
    let go = async {
        let stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        Ok::<Conn, io::Error>(match tls {
            Some((connector, name)) => Box::new(connector.connect(name.clone(), stream).await?),
            None => Box::new(stream),
        })
    };
    tokio::time::timeout(TCP_DEADLINE, go)
        .await
        .map_err(|_| timed_out())?
}

/// A TCP or TLS collector's writer: connects (again, a [`RETRY`] after
/// each failure), writes each packet within [`TCP_DEADLINE`] (TLS: and
/// flushes it), and ends when the sender does.
async fn stream_writer(
    (addr, tls): (SocketAddr, Option<TlsSide>),
    mut rx: mpsc::Receiver<Bytes>,
    up: Arc<AtomicBool>,
    sent: Counter,
    down: Counter,
) {
    loop {
        let mut stream = match connect(addr, tls.as_ref()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(collector = %addr, error = %e, "capture: cannot connect to the collector");
                let wait = tokio::time::sleep(RETRY);
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        _ = &mut wait => break,
                        p = rx.recv() => match p {
                            Some(_) => down.increment(1),
                            None => return,
                        },
                    }
                }
                continue;
            }
        };
        tracing::info!(collector = %addr, tls = tls.is_some(), "capture: connected to the collector");
        up.store(true, Ordering::Relaxed);
        loop {
            let Some(first) = rx.recv().await else {
                let _ = tokio::time::timeout(TCP_DEADLINE, stream.shutdown()).await;
                return;
            };
            // What is queued goes out with it, then one flush (TLS holds
            // what is written until flushed: one record for the lot; on
            // TCP a flush is free).
            let mut n = 0u64;
            let write = async {
                let mut packet = Some(first);
                while let Some(p) = packet.take() {
                    stream.write_all(&p).await?;
                    n += 1;
                    if n < WRITE_TURN {
                        packet = rx.try_recv().ok();
                    }
                }
                stream.flush().await
            };
            let written = tokio::time::timeout(TCP_DEADLINE, write).await;
            if let Ok(Ok(())) = written {
                sent.increment(n);
            } else {
                down.increment(n.max(1));
                break;
            }
        }
        up.store(false, Ordering::Relaxed);
        tracing::info!(collector = %addr, "capture: lost the collector; reconnecting");
        while rx.try_recv().is_ok() {
            down.increment(1);
        }
    }
}
