//! Binding the site's listeners, and the error that says which one failed:
//! an operator with four listeners reading `Cannot assign requested
//! address` alone does not know which `bind` to fix.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use ringsync::config::{SiteConfig, Transport};
use tokio::net::{TcpListener, TcpSocket};

use super::udp::bind_udp;
use super::workers::Plan;
use super::BoundListener;

/// A listener's socket that could not be bound: which listener, which
/// transport and address, and the system's reason.
#[derive(Debug, thiserror::Error)]
#[error("listener \"{listener}\": cannot bind {transport} {addr}: {source}")]
pub struct BindError {
    /// The listener's `name` in the site file.
    pub listener: String,
    /// The socket's transport: `udp`, or `tcp` (which TLS listens on too).
    pub transport: SocketKind,
    /// The address asked for.
    pub addr: SocketAddr,
    /// Why the system refused.
    #[source]
    pub source: io::Error,
}

/// The kind of socket a listener binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketKind {
    /// A UDP socket (one per worker).
    Udp,
    /// The TCP listening socket (TCP and TLS).
    Tcp,
}

impl fmt::Display for SocketKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SocketKind::Udp => "udp",
            SocketKind::Tcp => "tcp",
        })
    }
}

/// Binds every listener of a site. A port of 0 is replaced by the port the
/// system chose (the same one for UDP and TCP), and the returned config has
/// the actual addresses in `bind` and `advertise`, so tests bind
/// `127.0.0.1:0` and read back where the gate listens.
pub(crate) async fn bind(
    mut config: SiteConfig,
) -> Result<(SiteConfig, Vec<BoundListener>), BindError> {
    let mut bound = Vec::new();
    // Each UDP worker's intake bound (R-OV-1).
    let rcvbuf = config.overload.udp_rcvbuf_bytes;
    // The sockets bound now: the fixed count, or one (issue 29: the
    // supervisor adds more while the workers are busy, `workers.rs`).
    let workers = Plan::of(&config.overload).initial();
    for l in &mut config.listeners {
        let failed = |transport, addr| {
            let listener = l.name.clone();
            move |source| BindError {
                listener,
                transport,
                addr,
                source,
            }
        };
        let want_udp = l.transports.contains(&Transport::Udp);
        // A TLS listener accepts TCP and shakes hands on it (tls.rs), a
        // WebSocket one upgrades it (ws/).
        let want_tcp = l.transports.iter().any(|t| t.is_stream());
        let mut attempt = 0;
        let (udp, tcp) = loop {
            attempt += 1;
            let udp = if want_udp {
                let u = bind_udp(l.bind, rcvbuf).map_err(failed(SocketKind::Udp, l.bind))?;
                let at = u.local_addr().map_err(failed(SocketKind::Udp, l.bind))?;
                Some((u, at))
            } else {
                None
            };
            let addr = udp.as_ref().map_or(l.bind, |(_, at)| *at);
            let tcp = if want_tcp {
                match bind_tcp(addr) {
                    Ok(t) => Some(t),
                    // The port the system gave UDP may be taken for TCP; try again.
                    Err(e)
                        if l.bind.port() == 0
                            && attempt < 20
                            && e.kind() == io::ErrorKind::AddrInUse =>
                    {
                        continue
                    }
                    Err(e) => return Err(failed(SocketKind::Tcp, addr)(e)),
                }
            } else {
                None
            };
            break (udp, tcp);
        };
        let actual = match (&udp, &tcp) {
            (Some((_, at)), _) => *at,
            (None, Some(t)) => t.local_addr().map_err(failed(SocketKind::Tcp, l.bind))?,
            (None, None) => l.bind,
        };
        if l.advertise == l.bind {
            l.advertise = actual;
        } else if l.advertise.port() == 0 {
            l.advertise.set_port(actual.port());
        }
        l.bind = actual;
        // The other workers' sockets join the first one's address: the
        // kernel then hashes each peer to one socket, so one peer's messages
        // are handled in order while different peers spread over the cores.
        let mut sockets = Vec::new();
        if let Some((first, _)) = udp {
            sockets.push(Arc::new(first));
            for _ in 1..workers {
                let u = bind_udp(actual, rcvbuf).map_err(failed(SocketKind::Udp, actual))?;
                sockets.push(Arc::new(u));
            }
        }
        bound.push(BoundListener { udp: sockets, tcp });
    }
    Ok((config, bound))
}

fn bind_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.set_nodelay(true)?;
    s.bind(addr)?;
    s.listen(1024)
}
