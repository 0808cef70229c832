//! A TCP relay that can be cut: a network partition between one client and
//! its server (e.g. one node and etcd) while the server stays up for others.
//!
//! While cut, every relayed connection is shut down and new ones are closed
//! as soon as they are accepted; `restore` lets connections through again.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::Result;

/// A cuttable TCP relay to one upstream. Stops on drop.
#[derive(Debug)]
pub struct TcpPartition {
    listen: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    cut: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

impl TcpPartition {
    /// Listens on `listen` (port 0 picks one) and relays to `upstream`.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> Result<TcpPartition> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let listen = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        thread::spawn(move || accept_loop(listener, upstream, s));
        Ok(TcpPartition { listen, shared })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// Cuts every connection and refuses new ones until [`Self::restore`].
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        let mut open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        for s in open.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for TcpPartition {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.cut();
    }
}

fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(_) => continue,
        };
        if shared.cut.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let _ = client.set_nonblocking(false);
        let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(1)) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut open = shared.open.lock().unwrap_or_else(|e| e.into_inner());
            for s in [&client, &server] {
                if let Ok(s) = s.try_clone() {
                    open.push(s);
                }
            }
        }
        thread::spawn(move || pipe(client, s2));
        thread::spawn(move || pipe(server, c2));
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
