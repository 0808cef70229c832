//! Harness that starts and stops real peers on loopback for tests and
//! benchmarks: SIPp ([`Sipp`]), Kamailio ([`Kamailio`]), rtpengine
//! ([`Rtpengine`]), etcd ([`Etcd`]), a DNS server ([`Dnsmasq`]), BGP (a
//! BIRD router, [`Bird`], and [`ExaBgp`]), [`Prometheus`], a blind UDP
//! relay ([`relay::BlindRelay`]), plus the helpers benchmarks need
//! ([`free_port`], [`ProcStats`], [`stats`], a TLS certificate: [`tls`]);
//! the project's own binaries, one
//! at a time ([`bins::Node`]), with one HTTP client for their admin
//! endpoints ([`http`]) and one reader of their `/metrics` ([`metrics`]);
//! and a whole site of the project's own
//! binaries with those peers ([`site::Site`]), which `testbed run` plays
//! drain rehearsals on ([`rehearsal`]).
//!
//! Every peer is a real process bound to an explicit `127.0.0.x` address,
//! is bounded in time (SIPp always gets a global timeout) and is killed when
//! its handle drops, so a failing test never leaves load running.
//!
//! ```no_run
//! use std::time::Duration;
//! use testbed::{Scenario, Sipp, Transport};
//!
//! # fn main() -> Result<(), testbed::Error> {
//! let uas = Sipp::new(Scenario::repo("uas_call"))
//!     .local("127.0.0.20".parse().unwrap(), 5060)
//!     .calls(10)
//!     .spawn()?;
//! let uac = Sipp::new(Scenario::repo("uac_call"))
//!     .local("127.0.0.10".parse().unwrap(), 5061)
//!     .remote(uas.local_addr())
//!     .transport(Transport::Udp)
//!     .calls(10)
//!     .rate(10)
//!     .spawn()?;
//! let report = uac.wait(Duration::from_secs(30))?;
//! assert_eq!(report.failed, 0);
//! # Ok(())
//! # }
//! ```
#![warn(unreachable_pub)]
#![warn(missing_docs)]

use std::path::PathBuf;

pub mod bgp;
pub mod bins;
pub mod callbench;
pub mod chaos;
pub mod delay;
pub mod dnsmasq;
mod error;
pub mod etcd;
pub mod fixture;
pub mod hep;
pub mod http;
pub mod kamailio;
pub mod metrics;
pub mod net;
pub mod partition;
pub mod proc_stats;
mod process;
pub mod prometheus;
pub mod rehearsal;
pub mod relay;
pub mod rtpengine;
pub mod sipp;
pub mod site;
pub mod stats;
pub mod tls;
mod wait;
pub mod webdriver;

pub use bgp::{Bird, BirdHandle, ExaBgp, ExaBgpHandle};
pub use dnsmasq::{Dnsmasq, DnsmasqHandle};
pub use error::Error;
pub use etcd::Etcd;
pub use kamailio::{Kamailio, KamailioHandle};
pub use net::{free_port, wait_listening, Transport};
pub use partition::TcpPartition;
pub use proc_stats::ProcStats;
pub use prometheus::{Prometheus, PrometheusHandle};
pub use rtpengine::{Rtpengine, RtpengineHandle};
pub use sipp::{Scenario, Sipp, SippHandle, SippReport};
pub use wait::wait_for;

/// `Result` with the testbed [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The repository's `sipp-scenarios/` directory (found through
/// `CARGO_MANIFEST_DIR`, so it works from any crate's tests and benches).
pub fn scenarios_dir() -> PathBuf {
    repo_root().join("sipp-scenarios")
}

/// The repository's `bench/` directory (Kamailio reference config).
pub fn bench_dir() -> PathBuf {
    repo_root().join("bench")
}

fn repo_root() -> PathBuf {
    // testbed/ sits directly under the workspace root.
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}
