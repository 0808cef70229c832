//! `blind-relay --listen A --upstream B [--seconds N]`: the testbed's blind
//! UDP relay as its own process, so a benchmark can measure it like any
//! proxy. Runs until killed, or for N seconds, then prints its counters.
#![forbid(unsafe_code)]

use std::{net::SocketAddr, process::ExitCode, thread, time::Duration};

use testbed::relay::BlindRelay;

const USAGE: &str = "usage: blind-relay --listen IP:PORT --upstream IP:PORT [--seconds N]";

fn main() -> ExitCode {
    let mut listen: Option<SocketAddr> = None;
    let mut upstream: Option<SocketAddr> = None;
    let mut seconds: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next();
        let ok = match (flag.as_str(), value) {
            ("--listen", Some(v)) => v.parse().map(|a| listen = Some(a)).is_ok(),
            ("--upstream", Some(v)) => v.parse().map(|a| upstream = Some(a)).is_ok(),
            ("--seconds", Some(v)) => v.parse().map(|s| seconds = Some(s)).is_ok(),
            _ => false,
        };
        if !ok {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    }
    let (Some(listen), Some(upstream)) = (listen, upstream) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let relay = match BlindRelay::start(listen, upstream) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("blind-relay: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("blind-relay: {} -> {upstream}", relay.local_addr());
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
