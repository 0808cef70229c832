//! The real binaries as processes: the `sip-gate` binary with its admin
//! endpoint, and the `ringsync` CLI.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ringsync::work::WorkReport;
use serde_json::Value;

/// A running `sip-gate` binary; killed when dropped. Its log (stderr) goes
/// to a file, so a chatty gate never blocks on a full pipe.
pub struct GateProc {
    child: Child,
    /// Its admin endpoint.
    pub admin: SocketAddr,
    log: PathBuf,
}

impl GateProc {
    /// Starts `sip-gate --config site --admin admin ARGS`, logging to
    /// `gate.log` next to the site file.
    pub fn spawn(site: &Path, admin: SocketAddr, args: &[&str]) -> GateProc {
        let log = site.with_file_name("gate.log");
        let child = Command::new(env!("CARGO_BIN_EXE_sip-gate"))
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
        let (code, body) = http_get(self.admin, "/readyz")?;
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
        let (_, body) = http_get(self.admin, "/v1/work")?;
        serde_json::from_str(&body).ok()
    }

    /// One sample of `/metrics`: the line `series` (name and labels as
    /// Prometheus prints them), 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        let (_, body) = http_get(self.admin, "/metrics").expect("/metrics");
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

/// A GET over HTTP/1.0: the status code and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: gate\r\n\r\n").as_bytes())
        .ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    let (head, body) = b.split_once("\r\n\r\n")?;
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

/// The `ringsync` binary of this build. Cargo builds a package's binaries
/// only for that package's own tests, so this builds it (a no-op when it
/// is fresh) into the target directory this test runs from.
pub fn ringsync_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        // target/<profile>/deps/<test>-<hash>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
        let mut build = Command::new(env!("CARGO"));
        build.args([
            "build",
            "--quiet",
            "--offline",
            "-p",
            "ringsync",
            "--bin",
            "ringsync",
        ]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build
            .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap())
            .status()
            .unwrap();
        assert!(status.success(), "building ringsync: {status:?}");
        profile_dir.join("ringsync")
    })
    .clone()
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
