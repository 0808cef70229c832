//! `conn-bench` end to end through the real binaries (the real `sip-gate`,
//! SIPp registrars, dnsmasq), in its smoke size so the benchmark cannot
//! rot: 500 TCP and 100 TLS subscribers, every one registered through the
//! gate and held by it as a flow (RFC 5626), every CRLF keep-alive answered
//! with its pong (RFC 5626 3.5.1), and the report carries every figure. It
//! asserts outcomes, not speed or memory.
//!
//! Addresses: `127.82.1.0/24` (servers) and `127.83.1.0/24` (clients), the
//! benchmark's own `--net 1`.

use std::collections::HashMap;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_conn-bench");

/// The `result:` line's `key=value` pairs.
fn summary(stdout: &str) -> HashMap<String, f64> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("result: "))
        .unwrap_or_else(|| panic!("no result line in {stdout}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let v = v.parse().unwrap_or_else(|_| panic!("{k} = {v:?}"));
            (k.to_owned(), v)
        })
        .collect()
}

#[test]
fn smoke_every_tcp_and_tls_subscriber_registers_and_every_keep_alive_gets_its_pong() {
    let run = Command::new(BIN)
        .args([
            "--tcp",
            "500",
            "--tls",
            "100",
            "--rate",
            "1000",
            "--quiet-seconds",
            "1",
            "--idle-seconds",
            "3",
            "--keepalive-s",
            "1",
            "--net",
            "1",
        ])
        .output()
        .expect("conn-bench runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(run.status.success(), "{stderr}\n{stdout}");
    let r = summary(&stdout);
    assert_eq!(r["requested"], 600.0, "{stdout}");
    assert_eq!(r["registered"], 600.0, "{stdout}");
    // The gate's own count: each connection is a registered flow.
    assert_eq!(r["flows"], 600.0, "{stdout}");
    // Every connection pings about once a second for 3 s.
    assert!(r["pings"] >= 2.0 * 600.0, "{stdout}");
    assert_eq!(r["pongs"], r["pings"], "{stdout}");
    assert_eq!(r["lost"], 0.0, "{stdout}");
    for key in ["tcp_kib_per_conn", "tls_kib_per_conn"] {
        assert!(r[key] > 0.0, "{key}: {stdout}");
    }
    for needle in [
        "| Tcp | 500 | 500 | 0 / 0 |",
        "| Tls | 100 | 100 | 0 / 0 |",
        "| baseline: no connection | 1 |",
        "| quiet: every connection held, no traffic | 1 |",
        "| keep-alives: each connection every 1 s (600/s) | 3 |",
    ] {
        assert!(stdout.contains(needle), "{needle:?} not in\n{stdout}");
    }
}
