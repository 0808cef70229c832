//! Real receivers for HEP capture (HOMER's encapsulation): sngrep as a
//! collector (`sngrep -N -q -L udp:IP:PORT -O file.pcap`, Debian `sngrep`),
//! which decodes each HEP packet and writes the message it carries as a
//! frame with the addresses, ports and time the packet says; tshark
//! (Debian `tshark`) capturing on the loopback interface; tshark
//! reading a capture's fields; and `openssl s_server` (Debian `openssl`)
//! as a HEP-over-TLS collector, whose stream is cut into packets here.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use tempfile::TempDir;

use crate::{
    net::{wait_listening, Transport},
    process::Proc,
    Error, Result,
};

/// A capture file and the directory that holds it.
#[derive(Debug)]
pub struct Pcap {
    _dir: TempDir,
    path: PathBuf,
}

impl Pcap {
    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A running sngrep collecting HEP on one UDP address.
#[derive(Debug)]
pub struct Sngrep {
    proc: Proc,
    dir: TempDir,
    addr: SocketAddr,
}

impl Sngrep {
    /// Starts sngrep listening for HEP v3 on `addr` (UDP) and writing what
    /// it receives to a pcap; returns once the port is bound.
    pub fn collect(addr: SocketAddr) -> Result<Sngrep> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-sngrep-")
            .tempdir()?;
        let mut cmd = Command::new("sngrep");
        // -F: no user config file; -N -q: no interface, nothing printed.
        cmd.arg("-F")
            .arg("-N")
            .arg("-q")
            .arg("-L")
            .arg(format!("udp:{}:{}", addr.ip(), addr.port()))
            .arg("-O")
            .arg(dir.path().join("hep.pcap"));
        // With -L and no -d or -I, sngrep opens no interface: the pcap
        // holds only what came in HEP.
        let mut proc = Proc::spawn(cmd, "sngrep", dir.path())?;
        if !wait_listening(addr, Transport::Udp, Duration::from_secs(10)) {
            let status = proc.wait_timeout(Duration::ZERO)?;
            return Err(match status {
                Some(s) => proc.exited_early(s),
                None => Error::NotListening {
                    program: "sngrep".into(),
                    addr: format!("udp:{addr}"),
                    after: Duration::from_secs(10),
                },
            });
        }
        Ok(Sngrep { proc, dir, addr })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops it (SIGTERM: it writes out its capture) and returns the pcap.
    pub fn stop(mut self) -> Result<Pcap> {
        self.proc.stop(Duration::from_secs(5));
        let path = self.dir.path().join("hep.pcap");
        Ok(Pcap {
            path,
            _dir: self.dir,
        })
    }
}

/// A running tshark capturing on an interface.
#[derive(Debug)]
pub struct TsharkCapture {
    proc: Proc,
    dir: TempDir,
}

impl TsharkCapture {
    /// Captures on `iface` what the capture filter `filter` takes; returns
    /// once tshark says it captures.
    pub fn start(iface: &str, filter: &str) -> Result<TsharkCapture> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-tshark-")
            .tempdir()?;
        let mut cmd = Command::new("tshark");
        cmd.arg("-q")
            .arg("-i")
            .arg(iface)
            .arg("-f")
            .arg(filter)
            .arg("-w")
            .arg(dir.path().join("wire.pcap"));
        let proc = Proc::spawn(cmd, "tshark", dir.path())?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while !proc.stderr_tail(4000).contains("Capturing on") {
            if Instant::now() >= deadline {
                return Err(Error::NotListening {
                    program: "tshark".into(),
                    addr: format!("{iface}: {}", proc.stderr_tail(500)),
                    after: Duration::from_secs(15),
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
        // dumpcap says so as it opens the interface: a moment for the
        // filter to be in place.
        thread::sleep(Duration::from_millis(300));
        Ok(TsharkCapture { proc, dir })
    }

    /// Stops the capture and returns its file.
    pub fn stop(mut self) -> Result<Pcap> {
        // Frames still in the kernel's buffer are written before it exits.
        thread::sleep(Duration::from_millis(300));
        self.proc.stop(Duration::from_secs(5));
        let path = self.dir.path().join("wire.pcap");
        Ok(Pcap {
            path,
            _dir: self.dir,
        })
    }
}

/// The `fields` of every frame of `pcap` that the display filter
/// `display` takes, `extra` added to tshark's arguments (e.g. `-d`,
/// `-X lua_script:...`): one row a frame, one string a field (several
/// values of one field joined by `,`).
pub fn fields(
    pcap: &Path,
    extra: &[&str],
    display: &str,
    fields: &[&str],
) -> Result<Vec<Vec<String>>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(pcap).args(extra);
    if !display.is_empty() {
        cmd.arg("-Y").arg(display);
    }
    cmd.arg("-T").arg("fields").arg("-E").arg("separator=|");
    for f in fields {
        cmd.arg("-e").arg(f);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("tshark -r {}", pcap.display()),
            message: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_owned).collect())
        .collect())
}

/// The tshark arguments that decode UDP port `port` as HEP v3 with
/// `hep3.lua` (fields `hep3.agent_id`, `hep3.correlation_id`,
/// `hep3.proto_type`, `hep3.ip_proto`, `hep3.src_port`, ...).
pub fn hep_args(port: u16) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/hep3.lua");
    vec![
        "-X".into(),
        format!("lua_script:{}", script.display()),
        "-d".into(),
        format!("udp.port=={port},hep3"),
    ]
}

/// A HEP collector over TLS: `openssl s_server` on a TCP address with a
/// self-signed certificate for its IP address, writing what the sender
/// sends (HEP packets back to back, decrypted) to a file. It serves one
/// connection at a time and takes the next when it ends.
#[derive(Debug)]
pub struct TlsCollector {
    proc: Proc,
    dir: TempDir,
}

impl TlsCollector {
    /// Starts it on `addr` (TCP); returns once the port is bound.
    pub fn start(addr: SocketAddr) -> Result<TlsCollector> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-hep-tls-")
            .tempdir()?;
        crate::tls::self_signed(dir.path(), &addr.ip().to_string())?;
        let mut cmd = Command::new("openssl");
        // -quiet: only what the client sends goes to stdout. Its stdin is
        // held open: s_server ends a connection at the end of its input.
        cmd.current_dir(dir.path())
            .args(["s_server", "-quiet", "-cert", "cert.pem", "-key", "key.pem"])
            .arg("-accept")
            .arg(addr.to_string());
        let mut proc = Proc::spawn_stdin_open(cmd, "openssl", dir.path())?;
        if !wait_listening(addr, Transport::Tcp, Duration::from_secs(10)) {
            let status = proc.wait_timeout(Duration::ZERO)?;
            return Err(match status {
                Some(s) => proc.exited_early(s),
                None => Error::NotListening {
                    program: "openssl s_server".into(),
                    addr: format!("tcp:{addr}"),
                    after: Duration::from_secs(10),
                },
            });
        }
        Ok(TlsCollector { proc, dir })
    }

    /// Its certificate (PEM): the CA a sender must trust.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// The HEP packets received so far, in order; an error if the stream
    /// is not whole packets back to back (a partial packet at the end is
    /// left for the next call).
    pub fn packets(&self) -> Result<Vec<Vec<u8>>> {
        let data = std::fs::read(self.dir.path().join("openssl.stdout"))?;
        let mut packets = Vec::new();
        let mut rest = &data[..];
        while rest.len() >= 6 {
            let len = usize::from(u16::from_be_bytes([rest[4], rest[5]]));
            if &rest[..4] != b"HEP3" || len < 6 {
                return Err(Error::Command {
                    command: "openssl s_server".into(),
                    message: format!("not a HEP v3 packet after {} packets", packets.len()),
                });
            }
            if rest.len() < len {
                break;
            }
            packets.push(rest[..len].to_vec());
            rest = &rest[len..];
        }
        Ok(packets)
    }

    /// Stops it.
    pub fn stop(mut self) {
        self.proc.stop(Duration::from_secs(2));
    }
}

/// The chunks of a HEP v3 packet, `(type, data)` in order (vendor 0, as
/// the gate writes them); `None` if a chunk's length runs past the packet.
pub fn chunks(packet: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut at = 6;
    while at < packet.len() {
        let head = packet.get(at..at + 6)?;
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let len = usize::from(u16::from_be_bytes([head[4], head[5]]));
        out.push((kind, packet.get(at + 6..at.checked_add(len)?)?.to_vec()));
        at += len.max(6);
    }
    Some(out)
}
