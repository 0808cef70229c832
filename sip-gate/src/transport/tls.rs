//! SIP over TLS (RFC 3261 26): a TLS connection is a TCP connection with a
//! rustls layer, so it shares the TCP connection table, its bound
//! (`[tcp] max_connections`, R-OV-1), idle timeout and framing.
//!
//! The server certificate comes from ringsync's [`CertFiles`] (the admin
//! API's loader): read again when its files change (polled) or on SIGHUP,
//! new handshakes get the new pair, open connections keep theirs, and a
//! pair that does not load leaves the one in force. Handshakes have a
//! deadline, so a client that never finishes one (slowloris) loses its slot.
//! Connections the gate opens verify the server against `[tls] ca`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ringsync::config::TlsConfig;
use ringsync::tls::{CertFiles, TlsError};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

use super::stream::{local_of, plain};
use super::{connection, Net};
use crate::metrics as m;
use crate::reach::Stream;
use crate::txn::ConnId;

/// The gate's TLS: its certificate (server side), the CA it checks servers
/// against (client side), and the handshake deadline.
pub(crate) struct TlsSide {
    files: Arc<CertFiles>,
    acceptor: TlsAcceptor,
    connector: Option<TlsConnector>,
    handshake_timeout: Duration,
    poll: Duration,
}

impl std::fmt::Debug for TlsSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSide")
            .field("files", &self.files)
            .field("client", &self.connector.is_some())
            .field("handshake_timeout", &self.handshake_timeout)
            .finish()
    }
}

impl TlsSide {
    /// Loads the certificate, key and CA of `[tls]`.
    pub(crate) fn new(cfg: &TlsConfig) -> Result<TlsSide, TlsError> {
        let files = CertFiles::open(&cfg.cert, &cfg.key)?;
        let err = |detail: String| TlsError {
            cert: cfg.cert.clone(),
            key: cfg.key.clone(),
            detail,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| err(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(files.clone());
        let connector = match &cfg.ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                let certs = CertificateDer::pem_file_iter(ca)
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| err(format!("reading the CA file {}: {e}", ca.display())))?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(err(format!("no usable CA certificate in {}", ca.display())));
                }
                let client = ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| err(e.to_string()))?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                Some(TlsConnector::from(Arc::new(client)))
            }
            None => None,
        };
        log_leaf(&files, "start");
        Ok(TlsSide {
            files,
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector,
            handshake_timeout: cfg.handshake_timeout(),
            poll: cfg.reload_poll(),
        })
    }

    /// The server side of a handshake on an accepted connection, within the
    /// handshake deadline. Failures are logged at debug only: a flood of
    /// them would fill the log, and the metric counts every one.
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
    ) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
        match tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(tcp)).await {
            Ok(Ok(s)) => {
                m::tls_handshake("server", "ok");
                Some(s)
            }
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                m::tls_handshake("server", "error");
                None
            }
            Err(_) => {
                tracing::debug!(%peer, timeout_ms = self.handshake_timeout.as_millis() as u64, "TLS handshake not finished in time: closed");
                m::tls_handshake("server", "timeout");
                None
            }
        }
    }

    /// The client side of a handshake on a connection the gate opened to
    /// `to`, verifying the server's certificate for that IP address against
    /// `[tls] ca`.
    pub(crate) async fn connect(
        &self,
        tcp: TcpStream,
        to: SocketAddr,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let Some(connector) = &self.connector else {
            m::tls_handshake("client", "no_ca");
            return Err(io::Error::other(
                "no [tls] ca configured: the gate opens no TLS connection",
            ));
        };
        let name = ServerName::IpAddress(to.ip().into());
        match tokio::time::timeout(self.handshake_timeout, connector.connect(name, tcp)).await {
            Ok(Ok(s)) => {
                m::tls_handshake("client", "ok");
                Ok(s)
            }
            Ok(Err(e)) => {
                m::tls_handshake("client", "error");
                Err(e)
            }
            Err(_) => {
                m::tls_handshake("client", "timeout");
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ))
            }
        }
    }

    /// Reads the certificate and key again (`why`: `sighup`, `changed`):
    /// true when the new pair is in force, false (logged, counted) when it
    /// did not load and the old one stays.
    /// Logged before counted: whoever sees the count finds the line.
    pub(crate) fn reload(&self, why: &'static str) -> bool {
        match self.files.reload() {
            Ok(()) => {
                log_leaf(&self.files, why);
                m::tls_reload("ok");
                true
            }
            Err(e) => {
                tracing::error!(error = %e, trigger = why, "TLS certificate not reloaded: keeping the one in force");
                m::tls_reload("error");
                false
            }
        }
    }

    /// Reloads whenever the certificate or key file changes, until
    /// `shutdown`.
    pub(crate) async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        let mut last = self.files.stamps();
        let mut tick = tokio::time::interval(self.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = self.files.stamps();
            if now != last {
                last = now;
                self.reload("changed");
            }
        }
    }
}

/// Logs which certificate is in force (a short fingerprint of its DER)
/// and what put it there.
fn log_leaf(files: &CertFiles, trigger: &str) {
    if let Some(leaf) = files.leaf() {
        let hash = blake3::hash(leaf.as_ref());
        tracing::info!(fingerprint = %&hash.to_hex()[..16], trigger, "TLS certificate in force");
    }
}

/// A handle that reloads the gate's TLS certificate (on SIGHUP, say).
#[derive(Debug, Clone)]
pub struct TlsReload(pub(crate) Arc<TlsSide>);

impl TlsReload {
    /// Reads the certificate and key files again: true when the new pair
    /// serves the next handshakes, false (logged, counted in
    /// `sipgate_tls_reloads_total{result="error"}`) when it did not load.
    pub fn reload(&self) -> bool {
        self.0.reload("sighup")
    }
}

/// Serves a connection the gate accepted on `listener`: after a TLS
/// handshake when the listener's stream is TLS, as plain TCP otherwise. The
/// connection holds its slot in the table (and its bound) from the accept,
/// so clients that stall their handshakes cannot open more than
/// `[tcp] max_connections` of them.
pub(super) async fn serve_accepted(
    net: Arc<Net>,
    listener: usize,
    id: ConnId,
    peer: SocketAddr,
    stream: TcpStream,
    rx: mpsc::Receiver<Bytes>,
) {
    if let Some(opts) = net.ws_for(listener).cloned() {
        // Boxed, as the handshake below: a task is as large as its largest
        // state, and every SIP connection's task would otherwise carry room
        // for a WebSocket's (issue 29).
        Box::pin(serve_accepted_ws(
            net,
            (listener, id, peer),
            stream,
            rx,
            opts,
        ))
        .await;
        return;
    }
    let ends = (local_of(&stream, peer), peer);
    match net.tls_for(listener) {
        None => plain(net, (listener, id, peer), stream, rx, BytesMut::new()).await,
        // The handshake's state (the TLS session, inline until `split`
        // moves it to the heap) lives only as long as the handshake.
        Some(tls) => match Box::pin(tls.accept(stream, peer)).await {
            Some(s) => {
                let halves = tokio::io::split(s);
                let unmovable = (BytesMut::new(), false);
                connection(net, listener, id, ends, halves, rx, unmovable).await;
            }
            None => net.unregister(id, peer),
        },
    }
}

/// [`serve_accepted`] on a WebSocket listener (RFC 7118), over TLS on a
/// `wss` one.
async fn serve_accepted_ws(
    net: Arc<Net>,
    at: (usize, ConnId, SocketAddr),
    stream: TcpStream,
    rx: mpsc::Receiver<Bytes>,
    opts: ringsync::config::WsOptions,
) {
    let (listener, id, peer) = at;
    let local = local_of(&stream, peer);
    match net.tls_for(listener) {
        // Plain: it may move in a hand-over (R-GW-3).
        None => super::ws::serve_plain(net.clone(), at, stream, rx, &opts).await,
        Some(tls) => {
            if let Some(s) = tls.accept(stream, peer).await {
                super::ws::serve(net.clone(), at, local, s, rx, &opts).await;
            }
        }
    }
    // Idempotent: the message loop unregistered it if it ran.
    net.unregister_ws(id);
}

/// Serves a connection the gate opened from `listener` to `to`: TLS when
/// the listener's stream is, verifying the server; a failed handshake
/// fails like a connect that did not happen.
pub(super) async fn serve_opened(
    net: Arc<Net>,
    listener: usize,
    id: ConnId,
    to: SocketAddr,
    stream: TcpStream,
    rx: mpsc::Receiver<Bytes>,
) {
    let ends = (local_of(&stream, to), to);
    match net.tls_for(listener) {
        None => {
            net.core.connected(to, Stream::Tcp, Instant::now());
            plain(net, (listener, id, to), stream, rx, BytesMut::new()).await
        }
        Some(tls) => match tls.connect(stream, to).await {
            Ok(s) => {
                net.core.connected(to, Stream::Tls, Instant::now());
                let unmovable = (BytesMut::new(), false);
                connection(net, listener, id, ends, tokio::io::split(s), rx, unmovable).await;
            }
            Err(e) => net.connect_failed(id, (to, Stream::Tls), rx, &e),
        },
    }
}

impl Net {
    /// The TLS side of `listener`, when its stream is TLS.
    fn tls_for(&self, listener: usize) -> Option<Arc<TlsSide>> {
        if self.tls_on.get(listener).copied().unwrap_or(false) {
            self.tls.clone()
        } else {
            None
        }
    }
}
