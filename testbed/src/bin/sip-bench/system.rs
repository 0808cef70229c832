//! The systems `sip-bench` measures, the addresses they and the SIPp
//! servers listen on, and the gate's site file.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// The benchmark's own loopback network: 127.77.0.0/24.
pub(crate) fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 77, 0, host))
}

/// The SIPp servers (one per sg) every system spreads calls over.
pub(crate) const SERVERS: u8 = 3;

pub(crate) fn uas_addr(i: u8) -> SocketAddr {
    SocketAddr::new(ip(11 + i), 5060)
}

/// A proxy under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum System {
    /// testbed's blind UDP relay: the floor.
    Relay,
    /// Kamailio with tm, rr and dispatcher (bench/kamailio/kamailio.cfg).
    Kamailio,
    /// sip-gate balancing over the three sg, with the default (automatic)
    /// UDP worker count.
    #[value(name = "sip-gate")]
    Gate,
    /// The same with one of the three sg in an active drain profile.
    #[value(name = "sip-gate+drain")]
    GateDrain,
    /// sip-gate with one fixed UDP worker (`udp_workers = 1`).
    #[value(name = "sip-gate-1")]
    GateOne,
    /// sip-gate with a fixed UDP worker per core (`udp_workers` = cores).
    #[value(name = "sip-gate-per-core")]
    GatePerCore,
    /// The default configuration run from another binary (`--gate-before`):
    /// a change measured against the build before it, in the same rounds.
    #[value(name = "sip-gate-before")]
    GateBefore,
    /// The default configuration with `[capture]`: a HEP copy of every
    /// message to one UDP collector ([`Sink`]), issue 43.
    #[value(name = "sip-gate+capture")]
    GateCapture,
}

impl System {
    pub(crate) fn name(self) -> &'static str {
        match self {
            System::Relay => "relay",
            System::Kamailio => "kamailio",
            System::Gate => "sip-gate",
            System::GateDrain => "sip-gate+drain",
            System::GateOne => "sip-gate-1",
            System::GatePerCore => "sip-gate-per-core",
            System::GateBefore => "sip-gate-before",
            System::GateCapture => "sip-gate+capture",
        }
    }
    /// Each system listens on its own address, so a straggler of one run
    /// never reaches the next system.
    pub(crate) fn addr(self) -> SocketAddr {
        let host = match self {
            System::Relay => 2,
            System::Kamailio => 3,
            System::Gate => 4,
            System::GateDrain => 5,
            System::GatePerCore => 6,
            System::GateOne => 7,
            System::GateBefore => 8,
            System::GateCapture => 9,
        };
        SocketAddr::new(ip(host), 5060)
    }

    /// Whether it is a sip-gate configuration.
    pub(crate) fn is_gate(self) -> bool {
        !matches!(self, System::Relay | System::Kamailio)
    }

    /// The `[overload] udp_workers` line of a gate configuration: none for
    /// the default (automatic) count.
    fn udp_workers(self) -> Option<usize> {
        match self {
            System::GateOne => Some(1),
            System::GatePerCore => Some(
                std::thread::available_parallelism()
                    .map_or(2, |n| n.get())
                    .clamp(1, 8),
            ),
            _ => None,
        }
    }
}

pub(crate) fn gate_site(dir: &Path, listen: SocketAddr, system: System) -> Result<PathBuf, String> {
    let drain = system == System::GateDrain;
    let mut t = testbed::callbench::site_head("sip-bench", SocketAddr::new(listen.ip(), 19091));
    // One SIPp source carries every call: its limit well above the load,
    // so the per-source check runs on every INVITE without refusing one.
    let _ = writeln!(
        t,
        "[overload]\nper_source_rate = 100000\nper_source_burst = 100000"
    );
    // The default worker count unless the system fixes it (issue 29).
    if let Some(n) = system.udp_workers() {
        let _ = writeln!(t, "udp_workers = {n}");
    }
    let _ = writeln!(t);
    for i in 0..SERVERS {
        let _ = writeln!(t, "[[server]]\nname = \"srv-{i}\"");
    }
    for i in 0..SERVERS {
        let _ = writeln!(
            t,
            "[[instance]]\nid = \"sg-{i}\"\nservice = \"sg\"\nserver = \"srv-{i}\"\nsip = \"{}\"",
            uas_addr(i)
        );
    }
    let _ = writeln!(t, "[[listener]]\nname = \"subs\"\nbind = \"{listen}\"\ntransports = [\"udp\"]\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"");
    if system == System::GateCapture {
        let _ = writeln!(t, "[capture]\ncollectors = [\"udp:{COLLECTOR}\"]");
    }
    let site = dir.join("site.toml");
    std::fs::write(&site, t).map_err(|e| format!("writing {}: {e}", site.display()))?;
    if drain {
        // The embedded store's file, as `ringsync profile create/activate` writes it.
        let profiles = r#"{"revision":1,"profiles":[{"id":"p-bench","name":"bench-drain","description":"one of three sg drains","servers":["srv-1"],"state":"active"}]}"#;
        std::fs::write(dir.join("bench.profiles.json"), profiles)
            .map_err(|e| format!("writing profiles: {e}"))?;
    }
    Ok(site)
}

/// Where `sip-gate+capture` sends its HEP copies.
pub(crate) const COLLECTOR: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 77, 0, 60)), 9060);

/// The collector of `sip-gate+capture`: a socket on [`COLLECTOR`] whose
/// thread reads and discards every packet (a closed port would make the
/// kernel refuse every other copy), in this process, so its CPU is not
/// the gate's.
pub(crate) struct Sink {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Sink {
    pub(crate) fn start() -> Result<Sink, String> {
        let sock = std::net::UdpSocket::bind(COLLECTOR)
            .map_err(|e| format!("binding the collector {COLLECTOR}: {e}"))?;
        sock.set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .map_err(|e| e.to_string())?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut n = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() {
                    n += 1;
                }
            }
            n
        });
        Ok(Sink {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
