//! HTTPS for the admin API: rustls with the certificate chain and key from
//! PEM files, read again whenever either changes (a renewed certificate is
//! served from the next handshake on, without a restart). A pair that does
//! not load, or whose key does not match its certificate, keeps the one in
//! force and says so (log, `ringsync_tls_reload_errors_total`).
//!
//! Handshakes run as tasks of their own with a deadline, so a client that
//! stalls one holds up no one else; [`TlsListener`] hands axum the
//! connections that completed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// Time a client has to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the certificate and key files are checked for changes.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Why a certificate and key cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("TLS certificate {} / key {}: {detail}", cert.display(), key.display())]
pub struct TlsError {
    /// The certificate file.
    pub cert: PathBuf,
    /// The key file.
    pub key: PathBuf,
    /// What is wrong.
    pub detail: String,
}

/// The certificate in force, swapped whole when the files change.
#[derive(Debug)]
pub struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
    current: ArcSwap<CertifiedKey>,
}

impl CertFiles {
    /// Loads the pair; one that does not load is an error at start.
    pub fn open(cert: &Path, key: &Path) -> Result<Arc<CertFiles>, TlsError> {
        let ck = load(cert, key)?;
        Ok(Arc::new(CertFiles {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: ArcSwap::from_pointee(ck),
        }))
    }

    /// A server configuration that always presents the pair in force.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError {
                cert: self.cert.clone(),
                key: self.key.clone(),
                detail: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }

    /// Re-reads the pair whenever either file changes, until `shutdown`.
    pub async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        let mut last = self.stamps();
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = self.stamps();
            if now == last {
                continue;
            }
            last = now;
            match self.reload() {
                Ok(()) => tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded"),
                Err(e) => {
                    metrics::counter!("ringsync_tls_reload_errors_total").increment(1);
                    tracing::error!(error = %e, "TLS files changed but do not load; keeping the certificate in force");
                }
            }
        }
    }

    /// Reads the pair again and puts it in force for the next handshakes;
    /// a pair that does not load leaves the one in force as it is.
    pub fn reload(&self) -> Result<(), TlsError> {
        let ck = load(&self.cert, &self.key)?;
        self.current.store(Arc::new(ck));
        Ok(())
    }

    /// What tells a changed file ([`crate::files::stamp`] of both files):
    /// compare two of them to see whether to [`CertFiles::reload`].
    pub fn stamps(&self) -> impl Eq + Send + Sync + 'static {
        (
            crate::files::stamp(&self.cert),
            crate::files::stamp(&self.key),
        )
    }

    /// The leaf certificate in force (DER), to log or compare.
    pub fn leaf(&self) -> Option<CertificateDer<'static>> {
        self.current.load().cert.first().cloned()
    }
}

impl ResolvesServerCert for CertFiles {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

fn load(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let err = |detail: String| TlsError {
        cert: cert.to_owned(),
        key: key.to_owned(),
        detail,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| err(format!("reading the certificate: {e}")))?;
    if chain.is_empty() {
        return Err(err("no certificate in the certificate file".into()));
    }
    let pk = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| err(format!("reading the private key: {e}")))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, pk, &provider)
        .map_err(|e| err(format!("the key does not fit the certificate: {e}")))
}

/// A listener that hands out TLS connections whose handshake completed.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    _stop: tokio_util::sync::DropGuard,
}

impl TlsListener {
    /// Accepts on `tcp` and shakes hands with `config`, until dropped.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, rx) = mpsc::channel(64);
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(
            tcp,
            TlsAcceptor::from(config),
            tx,
            stop.clone(),
        ));
        Ok(TlsListener {
            rx,
            local,
            _stop: stop.drop_guard(),
        })
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    stop: CancellationToken,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            r = tcp.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "admin API: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = tx.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "admin API: TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "admin API: TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept loop ended (we are shutting down): wait for axum to stop.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
