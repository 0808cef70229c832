//! The real binaries running: the `sip-gate` binary as a process with its
//! admin endpoint, and the `ringsync` CLI's JSON output. Built on
//! [`crate::bins`], which a test crate using this module declares too.
#![allow(dead_code)] // not every test file uses every helper

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ringsync::work::WorkReport;
use serde_json::Value;

use crate::bins::{http_get, ringsync_bin, work_report, GATE};

/// A running `sip-gate` binary; killed when dropped. Its log (stderr) goes
/// to a file, so a chatty gate never blocks on a full pipe.
pub struct GateProc {
    child: Child,
    /// Its admin endpoint.
    pub admin: SocketAddr,
    log: std::path::PathBuf,
}

impl GateProc {
    /// Starts `sip-gate --config site --admin admin ARGS`, logging to
    /// `gate.log` next to the site file.
    pub fn spawn(site: &Path, admin: SocketAddr, args: &[&str]) -> GateProc {
        let log = site.with_file_name("gate.log");
        let child = Command::new(GATE)
            .arg("--config")
            .arg(site)
            .arg("--admin")
            .arg(admin.to_string())
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("gate log"))
            .spawn()
            .expect("sip-gate starts");
        GateProc { child, admin, log }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`TERM`, `INT`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its exit status once it exits by itself, at most `timeout` from now.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// `/readyz`: the HTTP status and the JSON body.
    pub fn readyz(&self) -> Option<(u16, Value)> {
        let (code, body) = get(self.admin, "/readyz")?;
        Some((code, serde_json::from_str(&body).ok()?))
    }

    /// Waits until the gate serves (`/readyz` 200).
    pub fn wait_ready(&self) {
        wait_for("the gate to be ready", Duration::from_secs(10), || {
            self.readyz().filter(|(code, _)| *code == 200)
        });
    }

    /// `/v1/work`.
    pub fn work(&self) -> Option<WorkReport> {
        work_report(&self.admin.to_string())
    }

    /// One sample of `/metrics`: the line `series` (name and labels as
    /// Prometheus prints them), 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        let (_, body) = get(self.admin, "/metrics").expect("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().expect("metric value"))
    }
}

impl Drop for GateProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET: the status code and the body.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let text = http_get(&addr.to_string(), path)?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// Polls `f` every 20 ms until it gives a value; panics naming `what` after
/// `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `ringsync --config site --json ARGS`; its JSON output.
pub fn ringsync(site: &Path, args: &[&str]) -> Value {
    let out = Command::new(ringsync_bin())
        .arg("--config")
        .arg(site)
        .arg("--json")
        .args(args)
        .output()
        .expect("ringsync runs");
    assert!(
        out.status.success(),
        "ringsync {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("ringsync --json prints JSON")
}
