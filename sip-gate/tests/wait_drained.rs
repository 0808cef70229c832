//! `ringsync wait drained` through the real binaries: the `sip-gate` binary
//! (a guard listener in front of sg-a) carries SIPp calls, the operator
//! drains srv-a with the `ringsync` CLI, and `ringsync wait drained
//! --profile` blocks, printing progress, until the calls end and sg-a is
//! `drained` (R-ST-1), then exits 0. Its other exits: 4 when the deadline
//! passes with work left, 5 at once for a server no active profile drains.
//!
//! Addresses: `127.27.7.0/24`; the gate on `.1`, sg-a's and sg-b's SIPp on
//! `.11` and `.12`, callers from `.21`.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::ip;
use testbed::bins::{BinDir, Node};
use testbed::wait_for;
use testbed::{Scenario, Sipp, Transport};

const NET: (u8, u8) = (27, 7);

fn site_toml() -> String {
    let [gate, sg_a, sg_b] = [1, 11, 12].map(|h| ip(NET, h));
    format!(
        r#"[site]
name = "wait"
secret = "wait-drained-test-secret-0123456789"

[health]
interval_ms = 200
timeout_ms = 150
failures = 2

# The gate vouches for its counts 8 s after its start: `drained` can show
# once the calls (held 6 s) end.
[work]
max_expires_s = 5
max_call_age_s = 8

[store]
kind = "embedded"
path = "profiles.json"

[admin]
gate_bind = "{gate}:9091"
media_bind = "{gate}:9092"

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "{sg_a}:5060"

[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "{sg_b}:5060"

[[listener]]
name = "sg-a-guard"
bind = "{gate}:5060"
transports = ["udp"]
mode = "guard"
instance = "sg-a"
leg = "subscriber"
"#
    )
}

/// `ringsync --config SITE ARGS`, run to its end.
fn ringsync(site: &Path, args: &[&str]) -> Output {
    Command::new(BinDir::locate().program("ringsync").unwrap())
        .arg("--config")
        .arg(site)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn wait_drained_blocks_until_the_calls_end_then_exits_0() {
    // Built (another package's binary) before anything is timed.
    BinDir::locate().program("ringsync").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.toml");
    std::fs::write(&site, site_toml()).unwrap();
    let guard = SocketAddr::new(ip(NET, 1), 5060);
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(NET, 1), 9091))
        .start()
        .unwrap();
    let _sg_a = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(NET, 11), 5060)
        .arg("-aa")
        .timeout(Duration::from_secs(90))
        .spawn()
        .expect("sg-a starts");
    let _sg_b = Sipp::new(Scenario::builtin("uas"))
        .local(ip(NET, 12), 5060)
        .arg("-aa")
        .timeout(Duration::from_secs(90))
        .spawn()
        .expect("sg-b starts");
    gate.wait_ready().unwrap();

    // Three calls up on sg-a, held 6 s.
    let calls = std::thread::spawn(move || {
        Sipp::new(Scenario::repo("uac_call"))
            .local_ip(ip(NET, 21))
            .remote(guard)
            .transport(Transport::Udp)
            .calls(3)
            .rate(10)
            .duration(Duration::from_secs(6))
            .timeout(Duration::from_secs(60))
            .spawn()
            .expect("uac starts")
            .wait(Duration::from_secs(70))
            .expect("uac report")
    });
    wait_for("3 calls up", Duration::from_secs(10), || {
        let w = gate.work()?;
        (w.instances.get("sg-a")?.counts.dialogs == 3).then_some(())
    })
    .unwrap();

    // Nothing drains srv-b: 5 at once, naming sg-b.
    let t = Instant::now();
    let out = ringsync(&site, &["wait", "drained", "--server", "srv-b"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("sg-b"), "{}", text(&out.stderr));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "at once, not at the deadline"
    );

    let created = ringsync(
        &site,
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ],
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    let active = ringsync(&site, &["profile", "activate", "maint-a"]);
    assert!(active.status.success(), "{}", text(&active.stderr));

    // The calls are still up: a short deadline passes with work left (4).
    let out = ringsync(
        &site,
        &["wait", "drained", "--server", "srv-a", "--timeout", "1s"],
    );
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("0 of 1 drained; sg-a draining"));

    // The real wait: it blocks while the calls are up, and ends once they do.
    let mut wait = Command::new(BinDir::locate().program("ringsync").unwrap())
        .arg("--config")
        .arg(&site)
        .args(["wait", "drained", "--profile", "maint-a", "--timeout", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The calls were set up with 6 s to go a moment ago: still up.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        wait.try_wait().unwrap().is_none(),
        "wait drained must block while sg-a has calls"
    );
    assert!(
        gate.work().unwrap().instances["sg-a"].counts.dialogs > 0,
        "the calls were still up while it blocked"
    );
    let report = calls.join().unwrap();
    assert_eq!(report.successful, 3, "{report:?}");
    let out = wait.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("0 of 1 drained; sg-a draining")),
        "progress while the calls are up: {stdout}"
    );
    assert_eq!(lines.last(), Some(&"1 of 1 drained"), "{stdout}");

    // Drained now: a new wait returns at once.
    let out = ringsync(&site, &["wait", "drained", "--server", "srv-a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1 of 1 drained\n");
}
