//! `ringsync wait drained` through the real binaries: the `sip-gate` binary
//! (a guard listener in front of sg-a) carries SIPp calls, the operator
//! drains srv-a with the `ringsync` CLI, and `ringsync wait drained
//! --profile` blocks, printing progress, until the calls end and sg-a is
//! `drained` (R-ST-1), then exits 0. Its other exits: 4 when the deadline
//! passes with work left, 5 at once for a server no active profile drains.
//!
//! The same through `ringsync serve`: its long poll `GET /v1/wait` and
//! `ringsync --api URL wait drained`, which uses it.
//!
//! Addresses: `127.27.7.0/24` (the CLI on the store) and `127.27.8.0/24`
//! (through serve); the gate on `.1` (serve on `.1:9093`), sg-a's and
//! sg-b's SIPp on `.11` and `.12`, callers from `.21`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::ip;
use ringsync_ops::drained::{Outcome, WaitAnswer};
use testbed::bins::{BinDir, Node};
use testbed::fixture::SiteFile;
use testbed::{http, wait_for};
use testbed::{Scenario, Sipp, SippHandle, SippReport, Transport};

const NET: (u8, u8) = (27, 7);
const NET_SERVE: (u8, u8) = (27, 8);

/// [`SiteFile::drain_pair`]: the guard of sg-a, fast probes, a short
/// restart window (8 s: `drained` can show once the calls, held 6 s, end).
fn site_file(net: (u8, u8)) -> SiteFile {
    let [gate, sg_a, sg_b] = [1, 11, 12].map(|h| ip(net, h));
    SiteFile::drain_pair("wait", gate, sg_a, sg_b)
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

/// A running site: the gate binary in front of sg-a and sg-b (SIPp UASes).
struct Running {
    gate: Node,
    _sg: [SippHandle; 2],
}

/// Starts the site of `net` in `dir`: its site file, the gate, sg-a
/// (holds calls) and sg-b.
fn runsite(net: (u8, u8), dir: &Path) -> (std::path::PathBuf, Running) {
    // Built (another package's binary) before anything is timed.
    BinDir::locate().program("ringsync").unwrap();
    let site = site_file(net).write(dir);
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(net, 1), 9091))
        .start()
        .unwrap();
    let sg_a = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(net, 11), 5060)
        .arg("-aa")
        .timeout(Duration::from_secs(90))
        .spawn()
        .expect("sg-a starts");
    let sg_b = Sipp::new(Scenario::builtin("uas"))
        .local(ip(net, 12), 5060)
        .arg("-aa")
        .timeout(Duration::from_secs(90))
        .spawn()
        .expect("sg-b starts");
    gate.wait_ready().unwrap();
    let running = Running {
        gate,
        _sg: [sg_a, sg_b],
    };
    (site, running)
}

/// Three calls through the gate to sg-a, held 6 s; returns once they are up.
fn three_calls(net: (u8, u8), gate: &Node) -> std::thread::JoinHandle<SippReport> {
    let guard = SocketAddr::new(ip(net, 1), 5060);
    let calls = std::thread::spawn(move || {
        Sipp::new(Scenario::repo("uac_call"))
            .local_ip(ip(net, 21))
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
    calls
}

#[test]
fn wait_drained_blocks_until_the_calls_end_then_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let (site, running) = runsite(NET, dir.path());
    let gate = &running.gate;
    let calls = three_calls(NET, gate);

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
    cli_ended_drained(wait);

    // Drained now: a new wait returns at once.
    let out = ringsync(&site, &["wait", "drained", "--server", "srv-a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1 of 1 drained\n");
}

/// `ringsync --api URL ARGS`, run to its end.
fn ringsync_api(url: &str, args: &[&str]) -> Output {
    Command::new(BinDir::locate().program("ringsync").unwrap())
        .args(["--api", url])
        .args(args)
        .output()
        .unwrap()
}

/// `GET path` of serve, held up to 70 s; its status and answer.
fn wait_get(api: SocketAddr, path: &str) -> (u16, WaitAnswer) {
    let r = http::Request::new("GET", api, path)
        .timeouts(Duration::from_secs(1), Duration::from_secs(70))
        .send()
        .unwrap();
    let a = serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{path}: {e}: {r:?}"));
    (r.status, a)
}

/// R-ST-1 through `ringsync serve`: the long poll `GET /v1/wait` answers
/// 409 at once for a server nothing drains, 408 at its timeout while the
/// calls are up, and 200 `drained` as soon as the calls have ended and
/// status says `drained` (not at its timeout); `ringsync --api URL wait
/// drained`, which uses it, prints the same progress and exits 0 with it.
#[test]
fn serve_v1_wait_long_polls_until_the_calls_end() {
    let dir = tempfile::tempdir().unwrap();
    let (site, running) = runsite(NET_SERVE, dir.path());
    let gate = &running.gate;
    let mut serve = Node::serve(&site)
        .admin(SocketAddr::new(ip(NET_SERVE, 1), 9093))
        .start()
        .unwrap();
    serve.wait_ready().unwrap();
    let (api, url) = (serve.admin(), serve.url());
    let calls = three_calls(NET_SERVE, gate);

    refusals(api);

    for args in [
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ][..],
        &["profile", "activate", "maint-a"],
    ] {
        let out = ringsync_api(&url, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }

    times_out_with_work_left(api);

    // The real waits: the long poll and the CLI through serve.
    let poll = std::thread::spawn(move || {
        let a = wait_get(api, "/v1/wait?profile=maint-a&timeout=60s");
        (a, Instant::now())
    });
    let cli = Command::new(BinDir::locate().program("ringsync").unwrap())
        .args(["--api", &url, "wait", "drained", "--profile", "maint-a"])
        .args(["--timeout", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !poll.is_finished(),
        "GET /v1/wait must hold while sg-a has calls"
    );
    assert!(
        gate.work().unwrap().instances["sg-a"].counts.dialogs > 0,
        "the calls were still up while it held"
    );
    let report = calls.join().unwrap();
    assert_eq!(report.successful, 3, "{report:?}");

    // When does status first say drained? The poll must answer by then
    // (a round of the nodes is once a second; a little slack for load).
    let drained_at = wait_for("sg-a drained", Duration::from_secs(30), || {
        let st: serde_json::Value = serve.get_json("/v1/status")?;
        let sg_a = st["instances"]
            .as_array()?
            .iter()
            .find(|i| i["id"] == "sg-a")?;
        (sg_a["state"] == "drained").then(Instant::now)
    })
    .unwrap();
    let ((status, a), answered_at) = poll.join().unwrap();
    assert_eq!((status, a.outcome), (200, Outcome::Drained), "{a:?}");
    assert_eq!(
        (a.servers.as_slice(), a.progress.as_str()),
        (&["srv-a".to_owned()][..], "1 of 1 drained")
    );
    assert!(a.left.is_empty(), "{a:?}");
    assert!(
        answered_at < drained_at + Duration::from_millis(1500),
        "answered {:?} after status said drained",
        answered_at.saturating_duration_since(drained_at)
    );

    cli_ended_drained(cli);
    drained_now(api, &url);
}

/// 409 at once for a server nothing drains; 400 and 404 for bad requests.
fn refusals(api: SocketAddr) {
    // Nothing drains srv-b: 409 at once, naming sg-b.
    let t = Instant::now();
    let (status, a) = wait_get(api, "/v1/wait?server=srv-b&timeout=30s");
    assert_eq!((status, a.outcome), (409, Outcome::NotDraining), "{a:?}");
    assert_eq!(a.not_draining, ["sg-b"]);
    assert!(t.elapsed() < Duration::from_secs(5), "at once");
    // Bad requests are refused and say why.
    for (path, want) in [
        ("/v1/wait?server=srv-a&state=up", 400),
        ("/v1/wait?server=srv-a&timeout=1h", 400),
        ("/v1/wait", 400),
        ("/v1/wait?server=srv-z&timeout=1s", 404),
        ("/v1/wait?profile=nope&timeout=1s", 404),
    ] {
        let r = http::get(api, path).unwrap();
        assert_eq!(r.status, want, "{path}: {}", r.body);
        assert!(r.body.contains("\"error\""), "{path}: {}", r.body);
    }
}

/// While the calls are up: the timeout passes first, 408 with the work left.
fn times_out_with_work_left(api: SocketAddr) {
    let t = Instant::now();
    let (status, a) = wait_get(api, "/v1/wait?server=srv-a&state=drained&timeout=1s");
    let took = t.elapsed();
    assert_eq!((status, a.outcome), (408, Outcome::Timeout), "{a:?}");
    assert_eq!(a.left, ["sg-a"]);
    assert!(
        a.progress.starts_with("0 of 1 drained; sg-a draining"),
        "{a:?}"
    );
    assert!(
        took >= Duration::from_secs(1),
        "held until its timeout: {took:?}"
    );
    assert!(took < Duration::from_secs(4), "not longer: {took:?}");
}

/// Drained: answered at once, by the API and the CLI; a server nothing
/// drains still exits 5 through serve.
fn drained_now(api: SocketAddr, url: &str) {
    let t = Instant::now();
    let (status, _) = wait_get(api, "/v1/wait?server=srv-a&timeout=30s");
    assert_eq!(status, 200);
    assert!(t.elapsed() < Duration::from_secs(3));
    let out = ringsync_api(url, &["wait", "drained", "--server", "srv-a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1 of 1 drained\n");
    // A server nothing drains: the CLI through serve exits 5, as on the store.
    let out = ringsync_api(url, &["wait", "drained", "--server", "srv-b"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
}

/// `ringsync wait drained` (on the store, or `--api URL` through serve)
/// printed progress while the calls were up, then `1 of 1 drained`, and
/// exited 0.
fn cli_ended_drained(cli: std::process::Child) {
    let out = cli.wait_with_output().unwrap();
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
}
