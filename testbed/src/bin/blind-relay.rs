//! `blind-relay --listen A --upstream B [--upstream C ...] [--seconds N]`:
//! the testbed's blind UDP relay as its own process, so a benchmark can
//! measure it like any proxy. Runs until killed, or for N seconds, then
//! prints its counters.

use std::{net::SocketAddr, process::ExitCode, thread, time::Duration};

use clap::Parser;
use testbed::relay::BlindRelay;

/// A blind UDP relay: one recv and one send per datagram, nothing
/// rewritten. The floor a SIP proxy's cost is measured against.
#[derive(Debug, Parser)]
#[command(name = "blind-relay", version)]
struct Args {
    /// Address to receive the clients' datagrams on.
    #[arg(long, value_name = "IP:PORT")]
    listen: SocketAddr,
    /// Where client datagrams are sent; repeated, each call (by its
    /// Call-ID) goes to one of them. The upstreams' datagrams go back to
    /// the client heard from last.
    #[arg(long, value_name = "IP:PORT", required = true)]
    upstream: Vec<SocketAddr>,
    /// Stop after this many seconds and print the datagram counters
    /// (default: run until killed).
    #[arg(long, value_name = "N")]
    seconds: Option<u64>,
}

fn main() -> ExitCode {
    let Args {
        listen,
        upstream,
        seconds,
    } = Args::parse();
    let relay = match BlindRelay::start(listen, &upstream) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("blind-relay: {e}");
            return ExitCode::FAILURE;
        }
    };
    let to: Vec<String> = upstream.iter().map(ToString::to_string).collect();
    eprintln!("blind-relay: {} -> {}", relay.local_addr(), to.join(", "));
    match seconds {
        Some(s) => thread::sleep(Duration::from_secs(s)),
        None => loop {
            thread::park();
        },
    }
    let counts = relay.stop();
    println!(
        "to_upstream={} to_client={}",
        counts.to_upstream, counts.to_client
    );
    ExitCode::SUCCESS
}
