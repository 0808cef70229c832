//! The TLS side of the TLS tests: a test CA with rcgen, a blocking rustls
//! client and server speaking framed SIP. SIPp 3.6.1 as packaged here has
//! no TLS (`-t l1`: "you must compile SIPp with OpenSSL"), so the TLS peers
//! are these; the UAS behind the gate is still SIPp, over UDP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use rustls_pki_types::pem::PemObject;
use sip_gate::frame::{self, Frame};

/// A test CA whose certificates go into `dir`.
pub struct Ca {
    key: KeyPair,
    cert: Certificate,
    /// The CA certificate (PEM file).
    pub pem: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path, tag: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.join(format!("{tag}-ca.pem"));
        std::fs::write(&pem, cert.pem()).unwrap();
        Ca { key, cert, pem }
    }

    /// A certificate for `ip` it signed: (certificate PEM, key PEM).
    pub fn issue(&self, ip: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![ip.to_owned()])
            .unwrap()
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Issues a certificate for `ip` and writes it and its key as
    /// `gate-cert.pem` and `gate-key.pem` in `dir`: the files a site's
    /// `[tls]` names ([`testbed::fixture::SiteFile::tls`]).
    pub fn issue_gate(&self, dir: &Path, ip: &str) {
        let (cert, key) = self.issue(ip);
        std::fs::write(dir.join("gate-cert.pem"), cert).unwrap();
        std::fs::write(dir.join("gate-key.pem"), key).unwrap();
    }
}

/// The DER of the first certificate of a PEM text.
pub fn der(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

fn roots(ca: &Path) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    roots
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Framed SIP over any byte stream.
pub struct SipStream<S: Read + Write> {
    pub s: S,
    buf: Vec<u8>,
}

impl<S: Read + Write> SipStream<S> {
    pub fn send(&mut self, msg: &str) {
        self.s.write_all(msg.as_bytes()).unwrap();
        self.s.flush().unwrap();
    }

    /// The next message (keep-alives skipped), `None` on close or timeout.
    pub fn recv(&mut self, timeout: Duration) -> Option<String> {
        let until = Instant::now() + timeout;
        loop {
            match frame::check(&self.buf, 65_535) {
                Ok(Some(Frame::Message { len })) => {
                    let m: Vec<u8> = self.buf.drain(..len).collect();
                    return Some(String::from_utf8_lossy(&m).into_owned());
                }
                Ok(Some(Frame::KeepAlive { len, .. })) => {
                    self.buf.drain(..len);
                    continue;
                }
                Ok(None) => {}
                Err(e) => panic!("bad framing from the gate: {e}"),
            }
            if Instant::now() >= until {
                return None;
            }
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return None,
            }
        }
    }

    /// The next message that is not a provisional response.
    pub fn recv_final(&mut self, timeout: Duration) -> String {
        loop {
            let m = self.recv(timeout).expect("a final response");
            if !m.starts_with("SIP/2.0 1") {
                return m;
            }
        }
    }
}

/// A TLS client connection to the gate, checked against `ca`.
pub type Client = SipStream<rustls::StreamOwned<ClientConnection, TcpStream>>;

/// Connects to `gate` and completes the handshake.
pub fn connect(gate: SocketAddr, ca: &Path) -> Client {
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(ca))
        .with_no_client_auth();
    let tcp = TcpStream::connect(gate).unwrap();
    tcp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let name = ServerName::IpAddress(gate.ip().into());
    let conn = ClientConnection::new(Arc::new(cfg), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    let until = Instant::now() + Duration::from_secs(5);
    while s.conn.is_handshaking() {
        assert!(Instant::now() < until, "handshake with the gate timed out");
        match s.conn.complete_io(&mut s.sock) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("handshake with the gate: {e}"),
        }
    }
    SipStream { s, buf: Vec::new() }
}

impl Client {
    /// The certificate the gate presented (DER).
    pub fn peer_cert(&self) -> Vec<u8> {
        self.s.conn.peer_certificates().unwrap()[0].to_vec()
    }

    pub fn local(&self) -> SocketAddr {
        self.s.sock.local_addr().unwrap()
    }
}

/// A TLS server on `listener` with a certificate and key (PEM): accepts one
/// connection.
pub fn accept(
    listener: &std::net::TcpListener,
    cert: &str,
    key: &str,
) -> SipStream<rustls::StreamOwned<ServerConnection, TcpStream>> {
    let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let cfg = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let (tcp, _) = listener.accept().unwrap();
    tcp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let conn = ServerConnection::new(Arc::new(cfg)).unwrap();
    SipStream {
        s: rustls::StreamOwned::new(conn, tcp),
        buf: Vec::new(),
    }
}

/// The value of the first header `name` of `msg`.
pub fn header<'a>(msg: &'a str, name: &str) -> Option<&'a str> {
    msg.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The Record-Route URIs of `msg`, top first.
pub fn record_routes(msg: &str) -> Vec<String> {
    msg.lines()
        .filter(|l| {
            l.split_once(':')
                .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case("record-route"))
        })
        .flat_map(|l| {
            l.split('<')
                .skip(1)
                .filter_map(|p| p.split_once('>').map(|(u, _)| u.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}
